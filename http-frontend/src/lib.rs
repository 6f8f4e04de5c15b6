//! Courrier's HTTP frontend: it parses requests into core's types, calls core, and renders the
//! contract's envelopes. No domain rule lives here.

mod access;
pub use access::parse_key_request;
pub mod auth;
pub mod blocking;
pub mod body;
pub mod dto;
pub mod envelope;
pub mod error;
pub mod openapi;
mod pages;
pub mod query;
pub mod routes;
pub mod schema;
pub mod server;
mod system;

use axum::RequestExt;
pub use axum::Router;
use axum::extract::{RawPathParams, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use courrier_core::Courrier;
use courrier_core::kernel::{Code, RequestId, parse_positive_id, secrets};
use envelope::{ErrorCode, REQUEST_ID};
use error::ApiError;
use futures_util::FutureExt;
use http::{HeaderValue, StatusCode};
use routes::{ParamKind, Route};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub app: Arc<Courrier>,
    /// A client that has sent its headers has this long to send its whole body.
    pub body_read_timeout: std::time::Duration,
    pub openapi_mailing: bytes::Bytes,
    pub openapi_ocr: bytes::Bytes,
}

impl AppState {
    pub fn new(app: Arc<Courrier>) -> Self {
        let version = app.build.version;
        let render = |api| bytes::Bytes::from(openapi::document(api, version).to_string());
        Self {
            openapi_mailing: render(routes::Api::Mailing),
            openapi_ocr: render(routes::Api::Ocr),
            body_read_timeout: std::time::Duration::from_secs(30),
            app,
        }
    }
}

/// The router of every route in the table, with the request pipeline around it.
pub fn router(state: AppState) -> Router {
    router_of(state, routes::all())
}

/// The router of the given routes (tests add their own to probe the pipeline).
pub fn router_of(state: AppState, table: impl Iterator<Item = &'static Route>) -> Router {
    let mut by_path: Vec<(&'static str, axum::routing::MethodRouter<AppState>)> = Vec::new();
    for route in table {
        let guard_state = state.clone();
        let method_router =
            (route.handler)(route.method_filter()).route_layer(middleware::from_fn(move |req: Request, next: Next| {
                route_guard(guard_state.clone(), route, req, next)
            }));
        match by_path.iter_mut().find(|(p, _)| *p == route.path) {
            Some((_, existing)) => *existing = std::mem::take(existing).merge(method_router),
            None => by_path.push((route.path, method_router)),
        }
    }
    let mut router = Router::new();
    for (path, method_router) in by_path {
        router = router.route(path, method_router);
    }
    router
        .fallback(|| async { ApiError::new(Code::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(Code::MethodNotAllowed, "this route does not accept that method")
        })
        .with_state(state)
        .layer(middleware::from_fn(request_context))
}

/// Runs on a matched route, before its handler: typed path segments and the declared body
/// length are checked here once, for every route alike.
async fn route_guard(state: AppState, route: &'static Route, mut req: Request, next: Next) -> Response {
    let mut resp = match check_route(route, &mut req, &state).await {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    };
    resp.extensions_mut().insert(MatchedRoute(route.path));
    resp
}

async fn check_route(route: &'static Route, req: &mut Request, state: &AppState) -> Result<(), ApiError> {
    if route.params.iter().any(|p| p.kind == ParamKind::Id) {
        let raw = req.extract_parts::<RawPathParams>().await.map_err(|e| ApiError::internal(&e))?;
        for (name, value) in &raw {
            if route.params.iter().any(|p| p.name == name && p.kind == ParamKind::Id) {
                parse_positive_id(value)
                    .map_err(|e| ApiError::new(Code::InvalidPathId, format!("path parameter {name}: {e}")))?;
            }
        }
    }
    body::check_declared_length(req.headers(), route.body_limit)?;
    if route.access != routes::Access::Public {
        let principal = auth::authenticate(state, req).await?;
        req.extensions_mut().insert(principal);
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct MatchedRoute(&'static str);

static REQUEST_PREFIX: LazyLock<u64> = LazyLock::new(secrets::random_u64);
static REQUEST_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The outermost layer: gives the request its id, contains panics, sets `X-Request-Id`, and logs
/// every error answer with its request id, route, status and code.
async fn request_context(req: Request, next: Next) -> Response {
    let id = RequestId::new(*REQUEST_PREFIX, REQUEST_COUNTER.fetch_add(1, Ordering::Relaxed));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let started = Instant::now();
    let span = tracing::info_span!("request", request_id = %id);
    let guarded = async move {
        match AssertUnwindSafe(next.run(req)).catch_unwind().await {
            Ok(resp) => resp,
            Err(payload) => {
                ApiError::internal(&format!("panic in handler: {}", server::panic_message(&*payload))).into_response()
            }
        }
    };
    let mut resp = REQUEST_ID.scope(id.clone(), tracing::Instrument::instrument(guarded, span)).await;
    if let Ok(value) = HeaderValue::from_str(id.as_str()) {
        resp.headers_mut().insert("x-request-id", value);
    }
    let status = resp.status();
    let route = resp.extensions().get::<MatchedRoute>().map_or(path.as_str(), |r| r.0);
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
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

#[cfg(test)]
mod pipeline_tests;
