//! Finding the credential of a request and handing it to core's `authenticate`.

use crate::AppState;
use crate::blocking::run_blocking;
use crate::envelope::request_id;
use crate::error::ApiError;
use crate::server::PEER;
use axum::extract::{FromRequestParts, Request};
use courrier_core::access::principal::{self, RequestCtx};
use courrier_core::access::{Credential, Principal};
use courrier_core::mailing::me::{self, Subscriber};
use http::request::Parts;
use http::{HeaderMap, Method, header};

pub const SESSION_COOKIE: &str = "svc_session";
/// The subscriber session's cookie: accepted by the `/api/v1/me` routes and the `/p/me` pages only.
pub const SUBSCRIBER_COOKIE: &str = "svc_subscriber";

/// An API key wins over a cookie: requests with a key are exempt from CSRF, as the contract says.
pub fn credential_of(headers: &HeaderMap) -> Credential {
    if let Some(key) = api_key_of(headers) {
        return Credential::ApiKey(key.to_owned());
    }
    if let Some(token) = session_cookie(headers) {
        let csrf = headers.get("x-csrf-token").and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned());
        return Credential::Session { token, csrf };
    }
    Credential::None
}

/// The API key of the request, if it carries one (as [`credential_of`] finds it), borrowed.
fn api_key_of(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim))
}

pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    cookie(headers, SESSION_COOKIE)
}

pub fn subscriber_cookie(headers: &HeaderMap) -> Option<String> {
    cookie(headers, SUBSCRIBER_COOKIE)
}

fn cookie(headers: &HeaderMap, wanted: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == wanted)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Authenticates a subscriber (`/api/v1/me` routes): the `svc_subscriber` cookie only. A request
/// that carries an API key is refused (401) even with the cookie: a key is an administration
/// credential, never a subscriber's. An administration session cookie alone is no credential here.
pub fn authenticate_subscriber(
    state: &AppState,
    req: &Request,
) -> impl std::future::Future<Output = Result<std::sync::Arc<Subscriber>, ApiError>> + Send + 'static {
    let has_key = matches!(credential_of(req.headers()), Credential::ApiKey(_));
    let token = subscriber_cookie(req.headers());
    let csrf = req.headers().get("x-csrf-token").and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned());
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let app = state.mailing.clone();
    async move {
        let refuse = |reason: &str| {
            tracing::info!(reason, "subscriber authentication refused");
            ApiError::from(courrier_core::access::AccessError::Unauthenticated)
        };
        if has_key {
            return Err(refuse("an API key on a subscriber route"));
        }
        let token = token.ok_or_else(|| refuse("no subscriber cookie"))?;
        let s = run_blocking(move || Ok(me::authenticate(&app, &token, csrf.as_deref(), mutating)?)).await?;
        Ok(std::sync::Arc::new(s))
    }
}

/// The authenticated subscriber (set by the route guard on every subscriber route).
pub struct Me(pub std::sync::Arc<Subscriber>);

impl<S: Send + Sync> FromRequestParts<S> for Me {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<std::sync::Arc<Subscriber>>()
            .cloned()
            .map(Me)
            .ok_or_else(|| ApiError::internal(&"a handler that needs a subscriber is not on a subscriber route"))
    }
}

/// Authenticates the request. Takes what it needs from the request before awaiting: a borrowed
/// request would make the future `!Send` (axum's body is not `Sync`).
pub fn authenticate(
    state: &AppState,
    req: &Request,
) -> impl std::future::Future<Output = Result<std::sync::Arc<Principal>, ApiError>> + Send + 'static {
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    // A key the cache knows is checked here, on the runtime's thread: no store read, only the
    // store's change marker (one `pread` of the WAL index) and a comparison with the secret the
    // entry already checked (a SHA-256 the first time). The deliberate exception to "core
    // runs in the blocking pool": the hop cost several times the check (BENCHMARKS.md).
    // On a shared database (PostgreSQL) the marker and the quota are read over the network: there
    // `principal::authenticate` asks the cache itself, in the blocking pool, where the sync driver
    // may block.
    // The key is checked borrowed from the headers: a known key's request copies nothing.
    let cached = match api_key_of(req.headers()) {
        Some(secret) if principal::checks_cached_keys_in_memory(&state.access) => {
            principal::authenticate_cached_key(&state.access, secret)
        }
        _ => None,
    };
    // Either the cache's answer, or what the blocking pool needs to find one.
    let answer = cached.ok_or_else(|| (credential_of(req.headers()), state.access.clone()));
    async move {
        match answer {
            Ok(result) => result.map_err(ApiError::from),
            Err((credential, app)) => {
                run_blocking(move || principal::authenticate(&app, &credential, mutating).map_err(ApiError::from)).await
            }
        }
    }
}

/// The authenticated caller (set by the route guard on every non-public route).
pub struct Auth(pub std::sync::Arc<Principal>);

impl<S: Send + Sync> FromRequestParts<S> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<std::sync::Arc<Principal>>()
            .cloned()
            .map(Auth)
            .ok_or_else(|| ApiError::internal(&"a handler that needs a principal is on a public route"))
    }
}

/// The request's id and the client's address, for audit entries and throttles.
pub struct Ctx(pub RequestCtx);

impl<S: Send + Sync> FromRequestParts<S> for Ctx {
    type Rejection = ApiError;

    async fn from_request_parts(_parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let source = PEER.try_with(|p| p.0.ip().to_string()).ok();
        Ok(Ctx(RequestCtx { request_id: request_id(), source }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn finds_the_credential_a_key_first() {
        assert_eq!(credential_of(&headers(&[])), Credential::None);
        assert_eq!(credential_of(&headers(&[("authorization", "Bearer svc_x")])), Credential::ApiKey("svc_x".into()));
        assert_eq!(credential_of(&headers(&[("x-api-key", "svc_y")])), Credential::ApiKey("svc_y".into()));
        assert_eq!(
            credential_of(&headers(&[("cookie", "a=1; svc_session=tok; b=2"), ("x-csrf-token", "c")])),
            Credential::Session { token: "tok".into(), csrf: Some("c".into()) }
        );
        assert_eq!(
            credential_of(&headers(&[("cookie", "svc_session=tok"), ("authorization", "Bearer svc_k")])),
            Credential::ApiKey("svc_k".into())
        );
        assert_eq!(credential_of(&headers(&[("authorization", "Basic abc")])), Credential::None);
        assert_eq!(credential_of(&headers(&[("cookie", "svc_session=")])), Credential::None);
    }
}
