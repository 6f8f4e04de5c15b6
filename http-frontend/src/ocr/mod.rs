//! The OCR document service under `/api`: its routes in the one route table, its own answers
//! (the contract's processing objects, not the `/api/v1` envelopes), its request shapes, and the
//! parts of its OpenAPI document that differ from the mailing API's (multipart upload, JPEG
//! download, error bodies).

mod account;
mod documents;
pub mod input;
pub mod reply;

use crate::AppState;
use crate::blocking::run_blocking;
use crate::error::ApiError;
use crate::routes::{Access, Api, JSON_BODY_LIMIT, Param, ParamKind, QueryParam, Route, Success};
use crate::schema::Schema;
use axum::extract::DefaultBodyLimit;
use axum::response::Response;
use axum::routing::on;
use courrier_core::ocr::maintenance::{self, Maintenance};
use http::Method;
use reply::OcrError;
use serde_json::{Value, json};

/// The largest upload body: the document limit (20 MiB, `OcrLimits`) is enforced on the file part
/// with 413; this outer bound only stops bodies no upload could need.
pub const UPLOAD_BODY_LIMIT: usize = 64 * 1024 * 1024;

/// While maintenance is on: GETs get the contract's page, POSTs a processing object with
/// `errors`. `Ok(None)` when the service is open.
pub(crate) async fn gate(state: &AppState, method: &Method) -> Result<Option<Response>, OcrError> {
    let app = state.app.clone();
    let mode = run_blocking(move || maintenance::status(&app).map_err(ApiError::from)).await?;
    match (mode, *method == Method::GET) {
        (Maintenance::Off, _) => Ok(None),
        (Maintenance::On { .. }, true) => Ok(Some(reply::maintenance_page())),
        (Maintenance::On { .. }, false) => Err(reply::maintenance_error()),
    }
}

const DOCS: &str = "OCR Documents";
const LOGIN: &str = "Login/Logout management";
const ENDPOINTS: &str = "Endpoints";

macro_rules! ocr_route {
    ($method:ident $path:literal, $op:literal, $summary:literal, $tag:expr, $access:expr,
     params: $params:expr, query: $query:expr, request: $req:expr, success: $success:expr,
     limit: $limit:expr, errors: $errors:expr, $handler:expr) => {
        Route {
            method: Method::$method,
            path: $path,
            api: Api::Ocr,
            operation_id: $op,
            summary: $summary,
            tag: $tag,
            access: $access,
            params: $params,
            query: $query,
            request: $req,
            success: Success::Raw("application/json", $success),
            body_limit: $limit,
            errors: $errors,
            handler: $handler,
        }
    };
}

const GET_OCRS_QUERY: &[QueryParam] = &[
    QueryParam {
        name: "ocrID",
        schema: Schema(|| json!({ "type": "string", "minLength": 1 })),
        description: "the document (also accepted in a JSON body)",
    },
    QueryParam {
        name: "action",
        schema: Schema(|| json!({ "type": "string", "enum": ["default", "jpegDownload"] })),
        description: "jpegDownload: the page as image/jpeg",
    },
    QueryParam {
        name: "page",
        schema: Schema(|| json!({ "type": "integer", "minimum": 1, "maximum": 4_294_967_295u64 })),
        description: "1-based page, default 1",
    },
];

const RUOK_ID: &[Param] =
    &[Param { name: "id", kind: ParamKind::Id, description: "1 database, 2 OCR engine, 3 document store" }];

pub static ROUTES: &[Route] = &[
    ocr_route!(POST "/api/ocrs", "postOcrs", "Submit a document (PDF, JPEG, PNG, TIFF or text) for OCR", DOCS,
        Access::Authenticated, params: &[], query: &[], request: Some(UPLOAD), success: PROCESSING,
        limit: UPLOAD_BODY_LIMIT, errors: &[413, 503],
        |m| on(m, documents::post_ocrs).layer(DefaultBodyLimit::max(UPLOAD_BODY_LIMIT))),
    ocr_route!(GET "/api/ocrs", "getOcrs", "A submitted document, or with action=jpegDownload its page as JPEG", DOCS,
        Access::Authenticated, params: &[], query: GET_OCRS_QUERY, request: None, success: PROCESSING,
        limit: JSON_BODY_LIMIT, errors: &[404, 503], |m| on(m, documents::get_ocrs)),
    ocr_route!(POST "/api/ping", "ping", "Readiness and token check; the caller's profile", ENDPOINTS,
        Access::Authenticated, params: &[], query: &[], request: None, success: PING,
        limit: JSON_BODY_LIMIT, errors: &[503], |m| on(m, account::ping)),
    ocr_route!(POST "/api/profile", "getProfile", "The caller's profile", LOGIN,
        Access::Authenticated, params: &[], query: &[], request: None, success: PROFILE,
        limit: JSON_BODY_LIMIT, errors: &[503], |m| on(m, account::get_profile)),
    ocr_route!(POST "/api/login", "ocrLogin", "A new API key for an email and password", LOGIN,
        Access::Public, params: &[], query: &[], request: Some(LOGIN_REQUEST), success: TOKEN,
        limit: JSON_BODY_LIMIT, errors: &[401, 429, 503], |m| on(m, account::login)),
    ocr_route!(POST "/api/logout", "ocrLogout", "Revoke the calling API key", LOGIN,
        Access::Authenticated, params: &[], query: &[], request: None, success: LOGGED_OUT,
        limit: JSON_BODY_LIMIT, errors: &[503], |m| on(m, account::logout)),
    ocr_route!(POST "/api/register", "ocrRegister", "Self-registration, when the installation enables it (404 otherwise)", LOGIN,
        Access::Public, params: &[], query: &[], request: Some(REGISTER_REQUEST), success: TOKEN,
        limit: JSON_BODY_LIMIT, errors: &[404, 409, 429, 503], |m| on(m, account::register)),
    ocr_route!(GET "/api/ruok", "ruok", "Whether the service and its components answer", ENDPOINTS,
        Access::Authenticated, params: &[], query: &[], request: None, success: RUOK,
        limit: JSON_BODY_LIMIT, errors: &[503], |m| on(m, account::ruok)),
    ocr_route!(GET "/api/ruok/{id}", "ruokComponent", "Whether one component answers", ENDPOINTS,
        Access::Authenticated, params: RUOK_ID, query: &[], request: None, success: RUOK,
        limit: JSON_BODY_LIMIT, errors: &[404, 503], |m| on(m, account::ruok_one)),
];

const STR: fn() -> Value = || json!({ "type": "string" });

pub const PROCESSING: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["ocrID", "success", "message", "errors", "result", "meta"],
        "properties": {
            "ocrID": STR(), "success": STR(), "message": STR(), "errors": STR(), "result": STR(),
            "meta": { "anyOf": [{ "type": "object" }, { "type": "string", "const": "" }] },
            "jpeg": STR(), "jpegBase64": STR(), "ocrResults": STR(), "pdfBase64": STR()
        }
    })
});

fn profile_schema() -> Value {
    let nullable = || json!({ "type": ["string", "null"] });
    json!({
        "type": "object",
        "required": ["id", "firstname", "name", "email", "email_verified_at", "language_code_id", "mobile", "created_at", "updated_at", "deleted_at"],
        "properties": {
            "id": { "type": "integer" }, "firstname": STR(), "name": STR(), "email": STR(),
            "email_verified_at": nullable(), "language_code_id": nullable(), "mobile": STR(),
            "created_at": { "type": "string", "format": "date-time" },
            "updated_at": { "type": "string", "format": "date-time" },
            "deleted_at": nullable()
        }
    })
}

pub const PROFILE: Schema = Schema(profile_schema);

pub const PING: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["profile", "message", "status"],
        "properties": { "profile": profile_schema(), "message": STR(), "status": { "type": "integer", "const": 1 } }
    })
});

pub const TOKEN: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["access_token", "token_type"],
        "properties": { "access_token": STR(), "token_type": { "type": "string", "const": "Bearer" } }
    })
});

pub const LOGGED_OUT: Schema = Schema(
    || json!({ "type": "object", "required": ["success", "message"], "properties": { "success": STR(), "message": STR() } }),
);

pub const RUOK: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["data", "status"],
        "properties": {
            "status": { "type": "string", "const": "imok" },
            "data": {
                "type": "object",
                "required": ["json", "html"],
                "properties": {
                    "html": STR(),
                    "json": {
                        "type": "object",
                        "required": ["protocol", "srvlangs"],
                        "properties": { "protocol": STR(), "srvlangs": { "type": "array", "items": STR() } }
                    }
                }
            }
        }
    })
});

pub const LOGIN_REQUEST: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["email", "password"],
        "properties": { "email": { "type": "string", "minLength": 1 }, "password": STR(), "client": STR() }
    })
});

pub const REGISTER_REQUEST: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["email", "password"],
        "properties": {
            "firstname": STR(), "name": STR(), "email": { "type": "string", "minLength": 1 },
            "password": STR(), "password_confirmation": STR()
        }
    })
});

/// The multipart form of `POST /api/ocrs`.
pub const UPLOAD: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["pdf", "lang"],
        "properties": {
            "pdf": { "type": "string", "format": "binary", "description": "the document, whatever its format (at most 20 MiB)" },
            "lang": { "type": "string", "enum": ["fr", "de", "it", "en", "fra", "deu", "ita", "eng"] },
            "profile": { "type": "string", "description": "raw, or invoice (any other value)" },
            "action": { "type": "string", "enum": ["", "default", "storeOnly", "ocrFailed"] },
            "yamlFilter": { "type": "string" }
        }
    })
});

fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["errors", "code"],
        "properties": { "errors": { "type": "string", "minLength": 1 }, "code": { "type": "string" } }
    })
}

/// What the OCR document says differently from the shape the table derives: the upload is
/// multipart, `jpegDownload` answers a JPEG, errors are `{errors, code}`, and under maintenance
/// GETs answer the contract's text/plain page.
pub fn adjust_operation(route: &Route, op: &mut Value) {
    if route.operation_id == "postOcrs" {
        op["requestBody"]["content"] = json!({ "multipart/form-data": { "schema": UPLOAD.render() } });
    } else if route.request.is_some() {
        let schema = op["requestBody"]["content"]["application/json"]["schema"].clone();
        op["requestBody"]["content"]["application/x-www-form-urlencoded"] = json!({ "schema": schema });
    }
    if route.operation_id == "getOcrs" {
        op["responses"]["200"]["content"]["image/jpeg"] = json!({ "schema": { "type": "string", "format": "binary" } });
        // Required, in the query or (as ScanInvoices sends it) in a JSON body, which OpenAPI
        // cannot say of a GET: documented where a generic client puts it.
        if let Some(params) = op["parameters"].as_array_mut() {
            for p in params.iter_mut().filter(|p| p["name"] == "ocrID") {
                p["required"] = json!(true);
            }
        }
    }
    let Some(responses) = op["responses"].as_object_mut() else { return };
    for (status, response) in responses.iter_mut() {
        if status.starts_with('2') {
            continue;
        }
        response["content"] = json!({ "application/json": { "schema": error_schema() } });
        if status == "503" && route.method == Method::GET {
            response["content"]["text/plain"] = json!({ "schema": { "type": "string" } });
        }
    }
}
