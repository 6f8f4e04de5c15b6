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
    /// Peers whose `X-Forwarded-For` names the client (`COURRIER_TRUSTED_PROXIES`); empty: the
    /// header is ignored, the TCP peer is the client.
    pub trusted_proxies: courrier_core::egress::AllowList,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 1024,
            reserved_connections: 64,
            shutdown_grace: Duration::from_secs(30),
            max_body: crate::routes::max_body_limit(),
            trusted_proxies: Default::default(),
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
        // The connection's own router, called in place (`context::handle`): one reference count
        // per connection, none per request.
        let router = std::cell::RefCell::new(router.clone());
        let max_body = limits.max_body;
        let trusted = (!limits.trusted_proxies.is_empty() && limits.trusted_proxies.contains(peer.ip()))
            .then(|| limits.trusted_proxies.clone());
        // The peer's address rides in a task-local (login throttling per source): an extension
        // would allocate a map on every request.
        let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let allowed = !reserved || req.uri().path().starts_with(RESERVED_PREFIX);
            // Behind a trusted proxy the client is the address it forwarded.
            let client = match &trusted {
                Some(proxies) => std::net::SocketAddr::new(forwarded_client(peer.ip(), req.headers(), proxies), 0),
                None => peer,
            };
            let handled = allowed.then(|| crate::context::handle(&mut router.borrow_mut(), max_body, req));
            PEER.scope(PeerAddr(client), async move {
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

/// The client of a request that came through `peer`, a trusted proxy: the rightmost address of
/// `X-Forwarded-For` (every field of it, in order) that is not itself a trusted proxy. Each proxy
/// appends the address it was connected from, so only the right end is vouched for; what a
/// client writes on the left is its own claim and is skipped over, never believed. An entry that
/// does not parse as an address ends the walk at the hop that forwarded it.
pub fn forwarded_client(
    peer: std::net::IpAddr,
    headers: &http::HeaderMap,
    proxies: &courrier_core::egress::AllowList,
) -> std::net::IpAddr {
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        if !proxies.contains(client) {
            break;
        }
        match hop.parse::<std::net::IpAddr>() {
            Ok(ip) => client = ip,
            Err(_) => break,
        }
    }
    client
}

/// The address of the client at the other end of the connection (behind a trusted proxy, the
/// client it forwarded for; its port is then 0, unknown).
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

#[cfg(test)]
mod tests {
    use super::forwarded_client;
    use courrier_core::egress::AllowList;

    fn client(peer: &str, fields: &[&str], proxies: &str) -> String {
        let mut headers = http::HeaderMap::new();
        for f in fields {
            headers.append("x-forwarded-for", f.parse().unwrap());
        }
        forwarded_client(peer.parse().unwrap(), &headers, &AllowList::parse(proxies).unwrap()).to_string()
    }

    #[test]
    fn the_client_is_the_rightmost_forwarded_address_no_trusted_proxy_vouches_for_beyond() {
        let lb = "10.0.0.0/8";
        assert_eq!(client("10.0.0.5", &["203.0.113.7"], lb), "203.0.113.7");
        assert_eq!(client("10.0.0.5", &[], lb), "10.0.0.5", "nothing forwarded: the proxy itself");
        // Two proxies of ours in a row, then the client.
        assert_eq!(client("10.0.0.5", &["203.0.113.7, 10.0.0.9"], lb), "203.0.113.7");
        assert_eq!(client("10.0.0.5", &["203.0.113.7", "10.0.0.9"], lb), "203.0.113.7", "fields read in order");
        // What the client wrote itself on the left is never believed.
        assert_eq!(client("10.0.0.5", &["198.51.100.1, 203.0.113.7"], lb), "203.0.113.7");
        assert_eq!(client("10.0.0.5", &["unknown, 203.0.113.7"], lb), "203.0.113.7");
        assert_eq!(
            client("10.0.0.5", &["203.0.113.7, garbage"], lb),
            "10.0.0.5",
            "a bad hop: the last one vouched for"
        );
        assert_eq!(client("10.0.0.5", &["2001:db8::1"], lb), "2001:db8::1");
        assert_eq!(client("10.0.0.5", &["10.0.0.8, 10.0.0.9"], lb), "10.0.0.8", "only proxies: the farthest");
    }
}
