//! The request context, outside the router: every request gets its id, a panic guard, the
//! declared-length check against the largest body any route takes, `X-Request-Id`, its server time
//! in `Server-Timing`, and one log line when it is refused or fails. Done here, per request in `serve()`'s service, rather than as an
//! axum layer, which would box and clone the inner service on every request.

use crate::envelope::{ErrorCode, REQUEST_ID};
use crate::error::ApiError;
use crate::{MatchedRoute, body, server};
use axum::response::{IntoResponse, Response};
use courrier_core::kernel::{RequestId, secrets};
use futures_util::FutureExt;
use http::{HeaderName, HeaderValue, StatusCode};
use std::panic::AssertUnwindSafe;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

static REQUEST_PREFIX: LazyLock<u64> = LazyLock::new(secrets::random_u64);
static REQUEST_COUNTER: AtomicU64 = AtomicU64::new(0);
/// Named once: a header name given as text is copied into a new buffer on every insert.
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// The outermost layer: gives the request its id, contains panics, sets `X-Request-Id`, and logs
/// every error answer with its request id, route, status and code.
///
/// The router is called here, synchronously (it only picks the route and builds its future), on the
/// connection's own router: no reference count of the shared one is taken per request (that count's
/// cache line went back and forth between the cores on every request).
pub fn handle(
    router: &mut axum::Router,
    max_body: usize,
    req: http::Request<hyper::body::Incoming>,
) -> impl Future<Output = Response> + Send + use<> {
    let started = Instant::now();
    let id = RequestId::new(*REQUEST_PREFIX, REQUEST_COUNTER.fetch_add(1, Ordering::Relaxed));
    let method = req.method().clone();
    let uri = req.uri().clone();
    let routed = match body::check_declared_length(req.headers(), max_body) {
        Err(e) => Err(e),
        Ok(()) => {
            // Routing itself may panic as much as the handler: contained the same way.
            std::panic::catch_unwind(AssertUnwindSafe(|| tower_service::Service::call(router, req))).map_err(panicked)
        }
    };
    finish(id, method, uri, started, routed)
}

/// The answer to a panic caught while routing or handling: a 500 naming it in the log.
fn panicked(payload: Box<dyn std::any::Any + Send>) -> ApiError {
    ApiError::internal(&format!("panic in handler: {}", server::panic_message(&*payload)))
}

async fn finish(
    id: RequestId,
    method: http::Method,
    uri: http::Uri,
    started: Instant,
    routed: Result<axum::routing::future::RouteFuture<std::convert::Infallible>, ApiError>,
) -> Response {
    let guarded = async move {
        match routed {
            Err(e) => e.into_response(),
            Ok(future) => match AssertUnwindSafe(future).catch_unwind().await {
                Ok(Ok(resp)) => resp,
                Ok(Err(never)) => match never {},
                Err(payload) => panicked(payload).into_response(),
            },
        }
    };
    let mut resp = REQUEST_ID.scope(id.clone(), guarded).await;
    if let Ok(value) = HeaderValue::from_bytes(id.as_bytes()) {
        resp.headers_mut().insert(X_REQUEST_ID, value);
    }
    let status = resp.status();
    let route = resp.extensions().get::<MatchedRoute>().map_or(uri.path(), |r| r.0);
    let elapsed = started.elapsed();
    // The server's own time, from the request's head to the answer's (every body but a streamed
    // export is built by then): a client, or a benchmark, can tell it from the wait for a CPU or
    // the network (W3C Server Timing; appended, after a route's own stages).
    if let Ok(value) = HeaderValue::from_bytes(&server_timing(elapsed)) {
        resp.headers_mut().append(SERVER_TIMING, value);
    }
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    match resp.extensions().get::<ErrorCode>() {
        Some(ErrorCode(code)) if status == StatusCode::INTERNAL_SERVER_ERROR => tracing::error!(
            request_id = %id, %method, route, status = status.as_u16(), code = code.as_str(), elapsed_ms, "request failed"
        ),
        Some(ErrorCode(code)) => tracing::warn!(
            request_id = %id, %method, route, status = status.as_u16(), code = code.as_str(), elapsed_ms, "request refused"
        ),
        None => {
            tracing::debug!(request_id = %id, %method, route, status = status.as_u16(), elapsed_ms, "request served")
        }
    }
    resp
}

/// `app;dur=` and the time in milliseconds with three decimals (whole microseconds), written into
/// a stack buffer: it is on every answer, and the formatter (`write!`) was 3 % of the health
/// route's instructions, a heap `String` and the float formatter more (`BENCHMARKS.md`, issue 18).
fn server_timing(elapsed: std::time::Duration) -> ServerTiming {
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let mut text = [0u8; 32];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        // `app;dur=` (8) + at most 17 digits + `.` + 3 = 29: always fits.
        text[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    put(b"app;dur=");
    put(itoa::Buffer::new().format(micros / 1000).as_bytes());
    let fraction = micros % 1000;
    put(&[b'.', b'0' + (fraction / 100) as u8, b'0' + (fraction / 10 % 10) as u8, b'0' + (fraction % 10) as u8]);
    ServerTiming { text, len }
}

/// The `Server-Timing` value on the stack.
struct ServerTiming {
    text: [u8; 32],
    len: usize,
}

impl std::ops::Deref for ServerTiming {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.text[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::server_timing;
    use std::time::Duration;

    #[test]
    fn server_timing_is_milliseconds_with_three_decimals() {
        for (micros, text) in [
            (0, "app;dur=0.000"),
            (7, "app;dur=0.007"),
            (413, "app;dur=0.413"),
            (1_000, "app;dur=1.000"),
            (12_345_678, "app;dur=12345.678"),
            (u64::MAX, "app;dur=18446744073709551.615"),
        ] {
            assert_eq!(&*server_timing(Duration::from_micros(micros)), text.as_bytes(), "{micros}");
        }
    }
}
