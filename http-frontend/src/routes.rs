//! The route table: the single source of each route's method, path, handler, required
//! credential and request and response schemas. The router and both OpenAPI documents are built
//! from it, so a route cannot exist without being documented, nor be documented wrongly typed.

use crate::AppState;
use crate::schema::Schema;
use axum::routing::{MethodFilter, MethodRouter};
pub use courrier_core::access::Perm;
pub use http::Method;

/// Which of the two services, and so which OpenAPI document, a route belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The mailing-list service, `/api/v1`.
    Mailing,
    /// The OCR document service, `/api`.
    Ocr,
    /// Web pages (`/p/...`, `/admin/...`): HTML for people, in neither OpenAPI document.
    Page,
}

/// The credential a route requires. The permission is what an API key must carry at least;
/// core decides the rest (scope, roles) and answers 403 or 404.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    /// Any authenticated principal, no permission (e.g. `GET /system/version`).
    Authenticated,
    Perm(Perm),
    /// A subscriber session (cookie `svc_subscriber`, security scheme `subscriberCookie`): the
    /// `/me` routes, which refuse every other credential with 401.
    Subscriber,
}

/// How a path segment is typed. `Id` segments are validated before the handler runs: anything
/// but a positive integer answers 422 on every route, whatever the handler would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    Id,
    /// A name with its own validation inside the handler (a domain, a list, an address).
    Text,
}

#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    pub description: &'static str,
}

#[derive(Debug, Clone, Copy)]
pub struct QueryParam {
    pub name: &'static str,
    pub schema: Schema,
    pub description: &'static str,
}

/// What a successful call answers.
#[derive(Debug, Clone, Copy)]
pub enum Success {
    /// `data` wrapped in the success envelope.
    Data(u16, Schema),
    /// `data` wrapped in the success envelope, with one of two statuses (201 done, 202 pending).
    DataEither(u16, u16, Schema),
    /// An array wrapped in the collection envelope.
    Collection(Schema),
    /// A document served as it is (OpenAPI, CSV, JPEG), with its media type.
    Raw(&'static str, Schema),
    /// 204, no body.
    NoContent,
}

pub struct Route {
    pub method: Method,
    /// OpenAPI's and axum's path syntax: `/api/v1/users/{id}`.
    pub path: &'static str,
    pub api: Api,
    pub operation_id: &'static str,
    pub summary: &'static str,
    pub tag: &'static str,
    pub access: Access,
    pub params: &'static [Param],
    pub query: &'static [QueryParam],
    pub request: Option<Schema>,
    pub success: Success,
    /// The largest body accepted, checked against Content-Length before any byte is read.
    pub body_limit: usize,
    /// Statuses this route answers besides those its shape implies (409, 204 routes' 404, ...).
    pub errors: &'static [u16],
    pub handler: fn(MethodFilter) -> MethodRouter<AppState>,
}

/// A route of the mailing-list API taking (at most) a JSON body: the common case, in one line.
macro_rules! route {
    ($method:ident $path:literal, $op:literal, $summary:literal, $tag:literal, $access:expr,
     params: $params:expr, query: $query:expr, request: $req:expr, success: $success:expr,
     errors: $errors:expr, $handler:expr) => {
        $crate::routes::Route {
            method: http::Method::$method,
            path: $path,
            api: $crate::routes::Api::Mailing,
            operation_id: $op,
            summary: $summary,
            tag: $tag,
            access: $access,
            params: $params,
            query: $query,
            request: $req,
            success: $success,
            body_limit: $crate::routes::JSON_BODY_LIMIT,
            errors: $errors,
            handler: |m| axum::routing::on(m, $handler),
        }
    };
}
pub(crate) use route;

/// JSON bodies of the administration API are small; a larger one is refused with 400.
pub const JSON_BODY_LIMIT: usize = 1024 * 1024;

impl Route {
    pub fn method_filter(&self) -> MethodFilter {
        MethodFilter::try_from(self.method.clone()).expect("route table holds only standard methods")
    }

    /// The HTTP statuses this route may answer besides its success, as the OpenAPI documents
    /// declare them. Derived from the route's shape so that a new route cannot forget one.
    pub fn error_statuses(&self) -> Vec<u16> {
        let mut s = Vec::new();
        if self.request.is_some() {
            s.push(400);
        }
        if self.access != Access::Public {
            s.push(401);
        }
        if matches!(self.access, Access::Authenticated | Access::Perm(_)) {
            s.push(429); // the key's quota
        }
        if matches!(self.access, Access::Perm(_)) {
            s.extend([403, 404]);
        }
        if self.access != Access::Public && self.method != Method::GET {
            s.push(403); // csrf_failed
        }
        s.extend(self.errors);
        if self.params.iter().any(|p| p.kind == ParamKind::Id) || !self.query.is_empty() || self.request.is_some() {
            s.push(422);
        }
        s.sort_unstable();
        s.dedup();
        s
    }
}

/// Every route of both services.
pub fn all() -> impl Iterator<Item = &'static Route> {
    crate::system::ROUTES
        .iter()
        .chain(crate::access::ROUTES)
        .chain(crate::mailing::ROUTES)
        .chain(crate::mailing::moderation::ROUTES)
        .chain(crate::mailing::webhooks::ROUTES)
        .chain(crate::mailing::credentials::ROUTES)
        .chain(crate::mailing::me::ROUTES)
        .chain(crate::mailing::pages::ROUTES)
        .chain(crate::mailing::me_pages::ROUTES)
        .chain(crate::admin::routes())
        .chain(crate::ocr::ROUTES)
}

/// The largest body any route of the table takes.
pub fn max_body_limit() -> usize {
    all().map(|r| r.body_limit).max().unwrap_or(JSON_BODY_LIMIT)
}
