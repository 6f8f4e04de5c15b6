//! Courrier's HTTP frontend: it parses requests into core's types, calls core, and renders the
//! contract's envelopes. No domain rule lives here.

mod access;
mod admin;
pub mod auth;
pub mod blocking;
pub mod body;
mod context;
pub mod envelope;
pub mod error;
mod mailing;
mod ocr;
pub mod openapi;
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
use courrier_core::kernel::VersionInfo;
use courrier_core::kernel::{Code, parse_positive_id};
use courrier_core::{access as access_ctx, mailing as mailing_ctx, ocr as ocr_ctx};
use error::ApiError;
use routes::{ParamKind, Route};
use std::sync::Arc;

/// What every handler can reach: one service per context, each handler using its own. Behind
/// one `Arc`: the router clones it per request (the route guard, each `State` extractor), and a
/// clone of the fields themselves (four `Arc`s, two `Bytes`) was 3% of an authenticated read's
/// CPU in the profile (BENCHMARKS.md, issue 18's third pass). Read through `Deref`; set up
/// through `DerefMut` before the router is built (a shared state is copied, never changed under
/// the requests that hold it).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl std::ops::DerefMut for AppState {
    fn deref_mut(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }
}

/// The fields of [`AppState`].
#[derive(Clone)]
pub struct Shared {
    pub access: Arc<access_ctx::Service>,
    pub mailing: Arc<mailing_ctx::Service>,
    pub ocr: Arc<ocr_ctx::Service>,
    /// The version object never changes while the process runs: rendered once.
    pub version_json: Arc<str>,
    /// A client that has sent its headers has this long to send its whole body.
    pub body_read_timeout: std::time::Duration,
    pub openapi_mailing: bytes::Bytes,
    pub openapi_ocr: bytes::Bytes,
    /// `POST /api/register` answers only when the installation enables it.
    pub ocr_registration: bool,
    /// A CSV import's thread runs this much lower in CPU priority than requests (a nice value;
    /// 0: the same): readers are served first while a big import runs (`blocking::run_bulk`).
    pub import_niceness: i32,
}

impl AppState {
    pub fn new(
        access: Arc<access_ctx::Service>,
        mailing: Arc<mailing_ctx::Service>,
        ocr: Arc<ocr_ctx::Service>,
        version: &VersionInfo,
    ) -> Self {
        let render = |api| bytes::Bytes::from(openapi::document(api, version.build.version).to_string());
        let version_json = courrier_core::system::version_view(version).to_string().into();
        Self(Arc::new(Shared {
            version_json,
            openapi_mailing: render(routes::Api::Mailing),
            openapi_ocr: render(routes::Api::Ocr),
            body_read_timeout: std::time::Duration::from_secs(30),
            ocr_registration: false,
            import_niceness: blocking::DEFAULT_BULK_NICENESS,
            access,
            mailing,
            ocr,
        }))
    }
}

/// The router of every route in the table, with the request pipeline around it.
pub fn router(state: AppState) -> Router {
    router_of(state, routes::all())
}

/// The router of the given routes (tests add their own to probe the pipeline).
pub fn router_of(state: AppState, table: impl Iterator<Item = &'static Route>) -> Router {
    let table: Vec<&'static Route> = table.collect();
    let max_body = routes::max_body_limit();
    let mut by_path: Vec<(&'static str, axum::routing::MethodRouter<AppState>)> = Vec::new();
    for route in table {
        let mut method_router = (route.handler)(route.method_filter());
        // The guard costs a boxed service per request: routes with nothing to check go without.
        if needs_guard(route, max_body) {
            let guard_state = state.clone();
            method_router = method_router.route_layer(middleware::from_fn(move |req: Request, next: Next| {
                route_guard(guard_state.clone(), route, req, next)
            }));
        }
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
        .fallback(no_such_route)
        .method_not_allowed_fallback(|uri: http::Uri, headers: http::HeaderMap| async move {
            // A page refuses in HTML, as its 404 does.
            if is_page(&uri) {
                let lang = mailing::layout::Lang::of(&headers);
                let text = lang.t("This page does not take that method.", "Cette page n'accepte pas cette méthode.");
                let title = lang.t("Not allowed", "Non autorisé");
                let body = maud::html! { p { (text) } };
                return mailing::layout::page(lang, http::StatusCode::METHOD_NOT_ALLOWED, title, body);
            }
            ApiError::new(Code::MethodNotAllowed, "this route does not accept that method").into_response()
        })
        .with_state(state)
}

/// An unknown path: under `/p/` and `/admin/` (the pages for people) the HTML 404 page in the reader's
/// language, elsewhere the API's JSON error.
async fn no_such_route(uri: http::Uri, headers: http::HeaderMap) -> Response {
    if is_page(&uri) {
        return mailing::layout::not_found(mailing::layout::Lang::of(&headers));
    }
    ApiError::new(Code::NotFound, "no such route").into_response()
}

/// Under `/p/` or `/admin/`: the pages for people, which answer in HTML.
fn is_page(uri: &http::Uri) -> bool {
    uri.path().starts_with("/p/") || uri.path().starts_with("/admin/") || uri.path() == "/admin"
}

fn needs_guard(route: &Route, max_body: usize) -> bool {
    route.params.iter().any(|p| p.kind == ParamKind::Id)
        || route.access != routes::Access::Public
        // GET handlers read no body; the Json extractor checks its own limit before reading.
        || (route.method != http::Method::GET && route.body_limit < max_body)
}

/// Runs on a matched route, before its handler: typed path segments and the declared body
/// length are checked here once, for every route alike.
async fn route_guard(state: AppState, route: &'static Route, mut req: Request, next: Next) -> Response {
    let mut resp = match check_route(route, &mut req, &state).await {
        Ok(()) => next.run(req).await,
        // The OCR service answers its refusals in its own shape.
        Err(e) if route.api == routes::Api::Ocr => ocr::reply::OcrError(e).into_response(),
        Err(e) => e.into_response(),
    };
    // Only error answers are logged with their route: a success needs no extension map.
    if resp.status().is_client_error() || resp.status().is_server_error() {
        resp.extensions_mut().insert(MatchedRoute(route.path));
    }
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
    match route.access {
        routes::Access::Public => {}
        routes::Access::Subscriber => {
            let subscriber = auth::authenticate_subscriber(state, req).await?;
            req.extensions_mut().insert(subscriber);
        }
        routes::Access::Authenticated | routes::Access::Perm(_) => {
            let principal = auth::authenticate(state, req).await?;
            // Shared: the handler's extractor takes a reference count, not a deep copy.
            req.extensions_mut().insert(principal);
        }
    }
    Ok(())
}

/// Set on error answers of matched routes, so the request log names the route, not the path.
#[derive(Clone, Copy)]
pub(crate) struct MatchedRoute(pub(crate) &'static str);

#[cfg(test)]
mod pipeline_tests;
