//! Serving the router over hyper, with the defences axum's own `serve` lacks (stack.md: it kept
//! 2,000 slowloris connections open): a header read time-out that also closes idle keep-alive
//! connections, a cap on open connections, and a graceful shutdown that lets in-flight requests
//! finish.

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// A connection must deliver a request's headers within this time; an idle keep-alive
    /// connection is closed after it too.
    pub header_read_timeout: Duration,
    /// Connections beyond this wait in the kernel's accept queue.
    pub max_connections: usize,
    /// How long in-flight requests may take to finish once shutdown begins.
    pub shutdown_grace: Duration,
    /// A declared Content-Length over this is refused before routing (the largest body any route
    /// takes; each route checks its own, smaller, limit).
    pub max_body: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(30),
            max_body: crate::routes::max_body_limit(),
        }
    }
}

/// Serves until `shutdown` resolves, then stops accepting, lets in-flight requests finish (up to
/// the grace period) and returns.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let max_body = limits.max_body;
        // The peer's address rides in a task-local (login throttling per source): an extension
        // would allocate a map on every request.
        let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let handled = crate::context::handle(router.clone(), max_body, req);
            PEER.scope(PeerAddr(peer), async move { Ok::<_, std::convert::Infallible>(handled.await) })
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tracing::info!("shutting down: waiting for in-flight requests");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(grace_secs = limits.shutdown_grace.as_secs(), "grace period over, closing the remaining connections");
        }
    }
    Ok(())
}

/// The address of the client at the other end of the connection.
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub std::net::SocketAddr);

tokio::task_local! {
    /// The peer of the connection whose request is being served.
    pub static PEER: PeerAddr;
}

/// The text of a panic payload, for the log.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
