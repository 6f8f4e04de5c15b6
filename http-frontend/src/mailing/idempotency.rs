//! Idempotency-Key at the edge: read the body, hand the request to core's runner, replay a
//! stored answer.

use super::invalid;
use crate::AppState;
use crate::blocking::run_blocking;
use crate::body::read_limited;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::routes::JSON_BODY_LIMIT;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use courrier_core::access::Principal;
use courrier_core::kernel::Code;
use courrier_core::mailing;
use courrier_core::mailing::MailingError;
use courrier_core::mailing::idempotency::{self, IdempotentRequest, Keyed};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use std::sync::Arc;

/// The body of a JSON route read by hand (the Idempotency-Key fingerprint needs its bytes).
pub(super) async fn read_json_body(headers: &HeaderMap, body: Body, state: &AppState) -> Result<Bytes, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(Code::MalformedBody, "the body must be JSON (Content-Type: application/json)"));
    }
    crate::body::check_declared_length(headers, JSON_BODY_LIMIT)?;
    read_limited(body, JSON_BODY_LIMIT, state.body_read_timeout).await
}

/// Runs an operation an Idempotency-Key may guard, on the blocking pool: `parse` reads its input
/// from the request, `run` calls core's operation, whose runner owns the transaction, the key's
/// check and the stored answer. A request that does not parse is refused through the same
/// registry (under a key, the refusal is the key's answer). A stored answer is replayed with
/// `Idempotent-Replay: true`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn keyed<I, P, R>(
    state: &AppState,
    p: &Arc<Principal>,
    headers: &HeaderMap,
    method: &str,
    path: &str,
    body: &[u8],
    parse: P,
    run: R,
) -> Result<Response, ApiError>
where
    I: Send + 'static,
    P: FnOnce() -> Result<I, ApiError> + Send + 'static,
    R: FnOnce(&mailing::Service, &Principal, Option<&IdempotentRequest>, I) -> Result<Keyed<(u16, Value)>, ApiError>
        + Send
        + 'static,
{
    let key = request_key(p, headers, method, path, body)?;
    let app = state.mailing.clone();
    let p = p.clone();
    let ran = run_blocking(move || match parse() {
        Ok(input) => run(&app, &p, key.as_ref(), input),
        Err(e) => refuse(&app, key.as_ref(), e),
    })
    .await?;
    Ok(render(ran))
}

/// A request refused before its operation ran (it did not parse), answered through the
/// Idempotency-Key registry as [`keyed`] answers one: under a key, the refusal is its answer.
pub(super) async fn refused(
    state: &AppState,
    p: &Principal,
    headers: &HeaderMap,
    method: &str,
    path: &str,
    body: &[u8],
    e: ApiError,
) -> Result<Response, ApiError> {
    let key = request_key(p, headers, method, path, body)?;
    let app = state.mailing.clone();
    Ok(render(run_blocking(move || refuse(&app, key.as_ref(), e)).await?))
}

fn refuse(
    app: &mailing::Service,
    key: Option<&IdempotentRequest>,
    e: ApiError,
) -> Result<Keyed<(u16, Value)>, ApiError> {
    let refused = MailingError::Request { code: e.code, message: e.message };
    Ok(idempotency::refuse_input(app, key, refused)?.map(|never| match never {}))
}

/// The request's Idempotency-Key, checked, with the fingerprint of what it asks.
pub(super) fn request_key(
    p: &Principal,
    headers: &HeaderMap,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<Option<IdempotentRequest>, ApiError> {
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| invalid("Idempotency-Key must be visible ASCII"))?),
    };
    Ok(IdempotentRequest::new(p, key, method, path, body)?)
}

/// The answer of an operation an Idempotency-Key may guard: what it did, or the stored answer
/// replayed with `Idempotent-Replay: true`.
pub(super) fn render(ran: Keyed<(u16, Value)>) -> Response {
    match ran {
        Keyed::Replay { status, body } => {
            let mut resp = replay(status, &body);
            resp.headers_mut().insert("idempotent-replay", HeaderValue::from_static("true"));
            resp
        }
        Keyed::Ran((status, data)) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            Reply::with_status(status, data).into_response()
        }
    }
}

/// A stored answer, with this request's `meta`.
pub(super) fn replay(status: u16, stored: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let doc: Value = serde_json::from_str(stored).unwrap_or_else(|_| json!({}));
    if let Some(err) = doc.get("error") {
        let code = err.get("code").and_then(Value::as_str).unwrap_or("internal_error");
        let message = err.get("message").and_then(Value::as_str).unwrap_or("");
        let code = Code::ALL.iter().copied().find(|c| c.as_str() == code).unwrap_or(Code::Internal);
        return ApiError::new(code, message).into_response();
    }
    Reply::with_status(status, doc.get("data").cloned().unwrap_or(Value::Null)).into_response()
}
