//! Serving the router over hyper, with the defences axum's own `serve` lacks (stack.md: it kept
//! 2,000 slowloris connections open): a header read time-out that also closes idle keep-alive
//! connections, a cap on open connections, and a graceful shutdown that lets in-flight requests
//! finish.
//!
//! Against slow clients (issue 16: 1,000 slowloris connections made the health route wait a second
//! in `connect()` now and then): the listen backlog holds every connection the server may open
//! (the standard library's 128 overflowed when the slow clients reconnected together), the header
//! time-out of each connection is spread over [t, 1.5 t) so that closes do not come in one burst,
//! and a reserve of connections beyond the cap serves the operator's probes (`/api/v1/system/`)
//! when every regular slot is taken.

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::future::Future;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// A connection must deliver a request's headers within this time; an idle keep-alive
    /// connection is closed after it too.
    pub header_read_timeout: Duration,
    /// Connections beyond this (and the reserve) wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Connections accepted beyond `max_connections` for the health and admin routes: such a
    /// connection serves one request under [`RESERVED_PREFIX`], its headers within
    /// [`RESERVED_HEADER_TIMEOUT`]; any other request closes it unanswered.
    pub reserved_connections: usize,
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
            reserved_connections: 64,
            shutdown_grace: Duration::from_secs(30),
            max_body: crate::routes::max_body_limit(),
        }
    }
}

/// The routes a connection from the reserve may ask for: health, version, queue.
pub const RESERVED_PREFIX: &str = "/api/v1/system/";
/// A connection from the reserve must send its request's headers this soon (before jitter): a slow
/// client that lands in the reserve gives its slot back quickly.
pub const RESERVED_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

impl ServerLimits {
    /// The listen backlog: every connection the server may hold, and the same again for those that
    /// reconnect together (the kernel caps it at `net.core.somaxconn`).
    pub fn backlog(&self) -> i32 {
        let all = self.max_connections.saturating_add(self.reserved_connections).saturating_mul(2);
        i32::try_from(all).unwrap_or(i32::MAX).max(1024)
    }
}

/// A listening socket on `addr` with `backlog` (the standard library's `bind` fixes it at 128),
/// non-blocking and close-on-exec (the server starts sandbox children).
pub fn listen(addr: SocketAddr, backlog: i32) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// `base` stretched by a pseudo-random part of up to half of it, so that connections opened together
/// do not time out together.
fn jittered(base: Duration, random: u64) -> Duration {
    // The top 16 bits as a fraction in [0, 1).
    let frac = (random >> 48) as f64 / 65_536.0;
    base + base.mul_f64(frac / 2.0)
}

/// A connection's slot, held until it closes, and whether it came from the reserve.
struct Slot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    reserved: bool,
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
    let regular = Arc::new(Semaphore::new(limits.max_connections));
    let reserve = Arc::new(Semaphore::new(limits.reserved_connections));
    // Random keys, drawn once: hashing a counter with them gives each connection its jitter.
    let jitter = std::collections::hash_map::RandomState::new();
    let mut accepted_count: u64 = 0;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            slot = Arc::clone(&regular).acquire_owned() => Slot { _permit: slot.expect("never closed"), reserved: false },
            slot = Arc::clone(&reserve).acquire_owned() => Slot { _permit: slot.expect("never closed"), reserved: true },
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
        // A regular slot freed while this one waited for its connection: take it instead.
        let slot = match slot.reserved.then(|| Arc::clone(&regular).try_acquire_owned()) {
            Some(Ok(permit)) => Slot { _permit: permit, reserved: false },
            _ => slot,
        };
        let reserved = slot.reserved;
        accepted_count = accepted_count.wrapping_add(1);
        let random = jitter.hash_one(accepted_count);
        let mut http = http.clone();
        if reserved {
            tracing::debug!(peer = %peer, "every regular slot is taken: connection from the reserve");
            http.header_read_timeout(jittered(RESERVED_HEADER_TIMEOUT.min(limits.header_read_timeout), random))
                .keep_alive(false);
        } else {
            http.header_read_timeout(jittered(limits.header_read_timeout, random));
        }
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let max_body = limits.max_body;
        // The peer's address rides in a task-local (login throttling per source): an extension
        // would allocate a map on every request.
        let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let allowed = !reserved || req.uri().path().starts_with(RESERVED_PREFIX);
            let handled = allowed.then(|| crate::context::handle(router.clone(), max_body, req));
            PEER.scope(PeerAddr(peer), async move {
                match handled {
                    Some(handled) => Ok(handled.await),
                    // An error from the service makes hyper close the connection unanswered.
                    None => Err(std::io::Error::other("a connection from the reserve serves only /api/v1/system/")),
                }
            })
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
