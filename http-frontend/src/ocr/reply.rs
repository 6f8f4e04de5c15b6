//! The OCR service's answers. Not the `/api/v1` envelopes: the contract's processing response
//! object (every field a string but `meta`, an object or `""`), and for errors the same object's
//! `errors` field with a stable `code` beside it; GETs under maintenance get the contract's HTML
//! page as `text/plain`.

use crate::envelope::ErrorCode;
use crate::error::ApiError;
use axum::response::{IntoResponse, Response};
use courrier_core::kernel::Code;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

/// An OCR route's refusal, rendered as `{"errors": message, "code": code}` with the status of
/// its kind (the same one match as the mailing API: `error::status_of`).
#[derive(Debug)]
pub struct OcrError(pub ApiError);

impl From<ApiError> for OcrError {
    fn from(e: ApiError) -> Self {
        OcrError(e)
    }
}

impl<E: courrier_core::kernel::CoreError> From<E> for OcrError {
    fn from(e: E) -> Self {
        OcrError(ApiError::from(e))
    }
}

impl IntoResponse for OcrError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut resp = json_response(e.status(), &json!({ "errors": e.message, "code": e.code.as_str() }));
        e.add_headers(resp.headers_mut());
        resp.extensions_mut().insert(ErrorCode(e.code));
        resp
    }
}

pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub fn ok(body: &Value) -> Response {
    json_response(StatusCode::OK, body)
}

/// The contract's maintenance page for GET routes: HTML, served as `text/plain` as the contract
/// describes it.
pub fn maintenance_page() -> Response {
    const PAGE: &str = "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>Service Unavailable</title></head>\n<body><h1>503</h1><p>Upgrade in progress, please retry later</p></body>\n</html>\n";
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, PAGE).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(300));
    resp.extensions_mut().insert(ErrorCode(Code::OcrMaintenance));
    resp
}

/// POST routes under maintenance: the processing object with `errors` set.
pub fn maintenance_error() -> OcrError {
    let mut e = ApiError::new(Code::OcrMaintenance, "Upgrade in progress, please retry later");
    e.retry_after = Some(300);
    OcrError(e)
}
