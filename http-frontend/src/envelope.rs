//! The contract's three envelopes (success, collection, error), the request id they carry, and
//! the one function that writes an error.

use crate::error::ApiError;
use axum::response::{IntoResponse, Response};
use courrier_core::kernel::{Code, Page, RequestId};
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

pub const API_VERSION: &str = "v1";

tokio::task_local! {
    /// The id of the request being served; set by the outermost middleware around everything
    /// that can render a body, so every envelope and log line of one request carries it.
    pub static REQUEST_ID: RequestId;
}

pub fn current_request_id() -> String {
    REQUEST_ID.try_with(|id| id.as_str().to_owned()).unwrap_or_else(|_| "unknown".to_owned())
}

/// Set on error responses, so the access log can name the code without parsing the body.
#[derive(Debug, Clone, Copy)]
pub struct ErrorCode(pub Code);

fn meta() -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("request_id".into(), Value::String(current_request_id()));
    m.insert("api_version".into(), Value::String(API_VERSION.into()));
    m
}

pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// A successful answer: `data` and `meta`.
pub struct Reply {
    status: StatusCode,
    body: Value,
}

impl Reply {
    pub fn ok(data: Value) -> Self {
        Self::with_status(StatusCode::OK, data)
    }

    pub fn created(data: Value) -> Self {
        Self::with_status(StatusCode::CREATED, data)
    }

    pub fn accepted(data: Value) -> Self {
        Self::with_status(StatusCode::ACCEPTED, data)
    }

    fn with_status(status: StatusCode, data: Value) -> Self {
        Self { status, body: json!({ "data": data, "meta": Value::Object(meta()) }) }
    }

    /// A collection: `data` is an array; `meta` adds `total`, `limit` and `offset`.
    pub fn collection(items: Vec<Value>, total: u64, page: Page) -> Self {
        let mut m = meta();
        m.insert("total".into(), total.into());
        m.insert("limit".into(), page.limit().into());
        m.insert("offset".into(), page.offset().into());
        Self { status: StatusCode::OK, body: json!({ "data": items, "meta": Value::Object(m) }) }
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        json_response(self.status, &self.body)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = json!({
            "error": { "code": self.code.as_str(), "message": self.message },
            "meta": Value::Object(meta()),
        });
        let mut resp = json_response(status, &body);
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp.extensions_mut().insert(ErrorCode(self.code));
        resp
    }
}
