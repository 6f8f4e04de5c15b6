//! `/api/v1/system/*` and the two OpenAPI documents.

use crate::AppState;
use crate::envelope::Reply;
use crate::routes::{Access, Api, Route, Success};
use crate::schema::{self, Schema};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::on;
use http::{HeaderValue, Method, header};
use serde_json::json;

pub static ROUTES: &[Route] = &[
    Route {
        method: Method::GET,
        path: "/api/v1/system/health",
        api: Api::Mailing,
        operation_id: "getHealth",
        summary: "Liveness: the process answers (no dependency is touched)",
        tag: "system",
        access: Access::Public,
        params: &[],
        query: &[],
        request: None,
        success: Success::Data(200, schema::HEALTH),
        body_limit: crate::routes::JSON_BODY_LIMIT,
        errors: &[],
        handler: |m| on(m, health),
    },
    Route {
        method: Method::GET,
        path: "/api/v1/openapi.json",
        api: Api::Mailing,
        operation_id: "getOpenApiMailing",
        summary: "This OpenAPI 3.1 document",
        tag: "system",
        access: Access::Public,
        params: &[],
        query: &[],
        request: None,
        success: Success::Raw("application/json", Schema(|| json!({ "type": "object" }))),
        body_limit: crate::routes::JSON_BODY_LIMIT,
        errors: &[],
        handler: |m| on(m, openapi_mailing),
    },
    Route {
        method: Method::GET,
        path: "/api/openapi.json",
        api: Api::Ocr,
        operation_id: "getOpenApiOcr",
        summary: "The OCR service's OpenAPI 3.1 document",
        tag: "Endpoints",
        access: Access::Public,
        params: &[],
        query: &[],
        request: None,
        success: Success::Raw("application/json", Schema(|| json!({ "type": "object" }))),
        body_limit: crate::routes::JSON_BODY_LIMIT,
        errors: &[],
        handler: |m| on(m, openapi_ocr),
    },
];

async fn health() -> Reply {
    match courrier_core::system::health() {
        courrier_core::system::Health::Ok => Reply::ok_static(r#"{"status":"ok"}"#),
    }
}

fn document(bytes: &bytes::Bytes) -> Response {
    let mut resp = bytes.clone().into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

async fn openapi_mailing(State(state): State<AppState>) -> Response {
    document(&state.openapi_mailing)
}

async fn openapi_ocr(State(state): State<AppState>) -> Response {
    document(&state.openapi_ocr)
}
