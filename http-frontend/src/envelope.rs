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

/// The request's id, shared (no copy).
pub fn request_id() -> RequestId {
    REQUEST_ID.try_with(RequestId::clone).unwrap_or_else(|_| RequestId::internal("unknown"))
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
    data: Data,
    /// `total`, `limit`, `offset` of a collection.
    window: Option<(u64, Page)>,
}

enum Data {
    Value(Value),
    /// A constant document, already JSON (the health answer).
    Static(&'static str),
    /// A document rendered once and shared (the version object).
    Shared(std::sync::Arc<str>),
    /// The body's start, `{"data":` and the document, written by the handler into the buffer
    /// that becomes the body (a page of 500 members: one buffer, no tree, no copy).
    Written(String),
}

impl Reply {
    /// `data` given as constant JSON text, written as it is.
    pub fn ok_static(json: &'static str) -> Self {
        Self { status: StatusCode::OK, data: Data::Static(json), window: None }
    }

    /// `data` given as JSON text rendered earlier.
    pub fn ok_shared(json: std::sync::Arc<str>) -> Self {
        Self { status: StatusCode::OK, data: Data::Shared(json), window: None }
    }

    pub fn ok(data: Value) -> Self {
        Self::with_status(StatusCode::OK, data)
    }

    pub fn created(data: Value) -> Self {
        Self::with_status(StatusCode::CREATED, data)
    }

    pub fn accepted(data: Value) -> Self {
        Self::with_status(StatusCode::ACCEPTED, data)
    }

    pub fn with_status(status: StatusCode, data: Value) -> Self {
        Self { status, data: Data::Value(data), window: None }
    }

    /// A collection: `data` is an array; `meta` adds `total`, `limit` and `offset`.
    pub fn collection(items: Vec<Value>, total: u64, page: Page) -> Self {
        Self { status: StatusCode::OK, data: Data::Value(Value::Array(items)), window: Some((total, page)) }
    }

    /// A collection whose `data` array `write` appends to the body's buffer as JSON text;
    /// `capacity`: about the bytes it writes, so that the buffer is allocated once.
    pub fn collection_written(total: u64, page: Page, capacity: usize, write: impl FnOnce(&mut String)) -> Self {
        let mut body = String::with_capacity(capacity + 192);
        body.push_str("{\"data\":");
        write(&mut body);
        Self { status: StatusCode::OK, data: Data::Written(body), window: Some((total, page)) }
    }
}

impl IntoResponse for Reply {
    /// Written straight into one buffer: `meta` is a handful of known fields, not worth a tree.
    /// Without the formatter and without a first `text/plain` content type for the JSON one to
    /// replace (what `(status, String).into_response()` does): both were a measured part of the
    /// health route's instructions (`BENCHMARKS.md`, issue 18).
    fn into_response(self) -> Response {
        let id = request_id();
        let start = |json: &str| {
            let mut body = String::with_capacity(json.len() + 192);
            body.push_str("{\"data\":");
            body.push_str(json);
            body
        };
        let mut body = match self.data {
            Data::Written(body) => body,
            Data::Static(json) => start(json),
            Data::Shared(json) => start(&json),
            Data::Value(v) => start(&v.to_string()),
        };
        // Request ids are ASCII letters, digits and `_`: written as they are; serde_json quotes the odd
        // internal label that is not.
        body.push_str(",\"meta\":{\"request_id\":");
        let id = id.as_str();
        if id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            body.push('"');
            body.push_str(id);
            body.push('"');
        } else {
            body.push_str(&Value::from(id).to_string());
        }
        body.push_str(",\"api_version\":\"");
        body.push_str(API_VERSION);
        body.push('"');
        if let Some((total, page)) = self.window {
            let mut number = itoa::Buffer::new();
            for (name, n) in
                [(",\"total\":", total), (",\"limit\":", u64::from(page.limit())), (",\"offset\":", page.offset())]
            {
                body.push_str(name);
                body.push_str(number.format(n));
            }
        }
        body.push_str("}}");
        let mut resp = Response::new(axum::body::Body::from(body));
        *resp.status_mut() = self.status;
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        resp
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
        self.add_headers(resp.headers_mut());
        resp.extensions_mut().insert(ErrorCode(self.code));
        resp
    }
}
