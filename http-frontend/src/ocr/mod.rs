//! The OCR document service under `/api`: its routes in the one route table, its own answers
//! (the contract's processing objects, not the `/api/v1` envelopes), its request shapes, and the
//! parts of its OpenAPI document that differ from the mailing API's (multipart upload, JPEG
//! download, error bodies).

mod account;
mod cuts;
mod directory;
mod documents;
pub mod input;
pub mod reply;
mod software;
mod usage;

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

/// The bounds of a request that carries fields but no file.
pub(crate) const JSON_LIMITS: input::Limits = input::Limits { body: JSON_BODY_LIMIT, file: 0 };

/// While maintenance is on: GETs get the contract's page, POSTs a processing object with
/// `errors`. `Ok(None)` when the service is open.
pub(crate) async fn gate(state: &AppState, method: &Method) -> Result<Option<Response>, OcrError> {
    let app = state.ocr.clone();
    let mode = run_blocking(move || maintenance::status(&app).map_err(ApiError::from)).await?;
    match (mode, *method == Method::GET) {
        (Maintenance::Off, _) => Ok(None),
        (Maintenance::On { .. }, true) => Ok(Some(reply::maintenance_page())),
        (Maintenance::On { .. }, false) => Err(reply::maintenance_error()),
    }
}

const DOCS: &str = "OCR Documents";
const CUTS: &str = "OCR \"Cuts\"";
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

const TEXT_ID: &[Param] = &[Param {
    name: "id",
    kind: ParamKind::Text,
    description: "the directory's numeric id, or a VAT number (FR40303265045)",
}];
const SOFTWARE_ID: &[Param] =
    &[Param { name: "id", kind: ParamKind::Text, description: "the record's id: letters, digits, '.', '_', '-'" }];
const EMAIL: &[Param] = &[Param { name: "email", kind: ParamKind::Text, description: "the account's address" }];

const RUOK_ID: &[Param] =
    &[Param { name: "id", kind: ParamKind::Id, description: "1 database, 2 OCR engine, 3 document store" }];

pub static ROUTES: &[Route] = &[
    ocr_route!(POST "/api/ocrs", "postOcrs", "Submit a document (PDF, JPEG, PNG, TIFF or text) for OCR", DOCS,
        Access::Authenticated, params: &[], query: &[], request: Some(UPLOAD), success: PROCESSING,
        limit: UPLOAD_BODY_LIMIT, errors: &[413, 503],
        |m| on(m, documents::post_ocrs).layer(DefaultBodyLimit::max(UPLOAD_BODY_LIMIT))),
    ocr_route!(GET "/api/ocrs", "getOcrs", "A submitted document, or with action=jpegDownload its page as JPEG", DOCS,
        Access::Authenticated, params: &[], query: GET_OCRS_QUERY, request: None, success: PROCESSING,
        limit: JSON_BODY_LIMIT, errors: &[404, 422, 503], |m| on(m, documents::get_ocrs)),
    ocr_route!(POST "/api/ping", "ping", "Readiness and token check; the caller's profile (answers during maintenance)", ENDPOINTS,
        Access::Authenticated, params: &[], query: &[], request: None, success: PING,
        limit: JSON_BODY_LIMIT, errors: &[], |m| on(m, account::ping)),
    ocr_route!(GET "/api/ping", "pingProbe", "Availability probe: without a key {status, protocol}; with a key as POST /api/ping", ENDPOINTS,
        Access::Public, params: &[], query: &[], request: None, success: PING_PROBE,
        limit: JSON_BODY_LIMIT, errors: &[401, 429], |m| on(m, account::ping_probe)),
    ocr_route!(POST "/api/profile", "getProfile", "The caller's profile (answers during maintenance)", LOGIN,
        Access::Authenticated, params: &[], query: &[], request: None, success: PROFILE,
        limit: JSON_BODY_LIMIT, errors: &[], |m| on(m, account::get_profile)),
    ocr_route!(POST "/api/login", "ocrLogin", "A new API key for an email and password (answers during maintenance)", LOGIN,
        Access::Public, params: &[], query: &[], request: Some(LOGIN_REQUEST), success: TOKEN,
        limit: JSON_BODY_LIMIT, errors: &[401, 429], |m| on(m, account::login)),
    ocr_route!(POST "/api/logout", "ocrLogout", "Revoke the calling API key (answers during maintenance)", LOGIN,
        Access::Authenticated, params: &[], query: &[], request: None, success: LOGGED_OUT,
        limit: JSON_BODY_LIMIT, errors: &[], |m| on(m, account::logout)),
    ocr_route!(POST "/api/register", "ocrRegister", "Self-registration, when the installation enables it (404 otherwise)", LOGIN,
        Access::Public, params: &[], query: &[], request: Some(REGISTER_REQUEST), success: TOKEN,
        limit: JSON_BODY_LIMIT, errors: &[404, 409, 429, 503], |m| on(m, account::register)),
    ocr_route!(GET "/api/ruok", "ruok", "Whether the service and its components answer", ENDPOINTS,
        Access::Authenticated, params: &[], query: &[], request: None, success: RUOK,
        limit: JSON_BODY_LIMIT, errors: &[503], |m| on(m, account::ruok)),
    ocr_route!(GET "/api/ruok/{id}", "ruokComponent", "Whether one component answers", ENDPOINTS,
        Access::Authenticated, params: RUOK_ID, query: &[], request: None, success: RUOK,
        limit: JSON_BODY_LIMIT, errors: &[404, 503], |m| on(m, account::ruok_one)),
    ocr_route!(POST "/api/ocrcuts", "postOcrCuts", "Read zones of a document's page, or confirm zones for its supplier", CUTS,
        Access::Authenticated, params: &[], query: &[], request: Some(CUT_REQUEST), success: PROCESSING,
        limit: JSON_BODY_LIMIT, errors: &[404, 422, 429, 503], |m| on(m, cuts::post_cuts)),
    ocr_route!(POST "/api/ocrcutszones", "postOcrCutsZones", "The zones learned for a supplier, most confirmed first", CUTS,
        Access::Authenticated, params: &[], query: &[], request: Some(ZONES_REQUEST), success: ZONES,
        limit: JSON_BODY_LIMIT, errors: &[422, 503], |m| on(m, cuts::post_zones)),
    ocr_route!(GET "/api/companyinfo/{id}", "getCompanyInfo", "A supplier of the directory, by id or VAT number", ENDPOINTS,
        Access::Authenticated, params: TEXT_ID, query: &[], request: None, success: COMPANY,
        limit: JSON_BODY_LIMIT, errors: &[404, 503], |m| on(m, directory::company_info)),
    ocr_route!(GET "/api/subscriptions", "getSubscriptions", "The caller's plan and this month's usage", ENDPOINTS,
        Access::Authenticated, params: &[], query: &[], request: None, success: SUBSCRIPTION,
        limit: JSON_BODY_LIMIT, errors: &[503], |m| on(m, usage::subscription)),
    ocr_route!(GET "/api/subscriptions/stats/{email}", "getSubscriptionStats", "Usage by month of an account (one's own; any for a site admin)", ENDPOINTS,
        Access::Authenticated, params: EMAIL, query: &[], request: None, success: STATS,
        limit: JSON_BODY_LIMIT, errors: &[404, 503], |m| on(m, usage::stats)),
    ocr_route!(POST "/api/subscriptions/stats/{email}", "postSubscriptionStats", "Usage by month of an account, optionally of one month", ENDPOINTS,
        Access::Authenticated, params: EMAIL, query: &[], request: Some(STATS_REQUEST), success: STATS,
        limit: JSON_BODY_LIMIT, errors: &[404, 422, 503], |m| on(m, usage::stats)),
    ocr_route!(GET "/api/softwareInfos", "listSoftwareInfos", "Records of client software", ENDPOINTS,
        Access::Authenticated, params: &[], query: &[], request: None, success: SOFTWARE_LIST,
        limit: JSON_BODY_LIMIT, errors: &[503], |m| on(m, software::list)),
    ocr_route!(POST "/api/softwareInfos", "createSoftwareInfo", "Record a client software (a site admin's manage key)", ENDPOINTS,
        Access::Authenticated, params: &[], query: &[], request: Some(SOFTWARE_CREATE), success: SOFTWARE,
        limit: JSON_BODY_LIMIT, errors: &[403, 409, 422, 503], |m| on(m, software::create)),
    ocr_route!(GET "/api/softwareInfos/{id}", "getSoftwareInfo", "One client software record", ENDPOINTS,
        Access::Authenticated, params: SOFTWARE_ID, query: &[], request: None, success: SOFTWARE,
        limit: JSON_BODY_LIMIT, errors: &[404, 503], |m| on(m, software::get)),
    ocr_route!(PUT "/api/softwareInfos/{id}", "replaceSoftwareInfo", "Replace a client software record (a site admin's manage key)", ENDPOINTS,
        Access::Authenticated, params: SOFTWARE_ID, query: &[], request: Some(SOFTWARE_FIELDS), success: SOFTWARE,
        limit: JSON_BODY_LIMIT, errors: &[403, 404, 422, 503], |m| on(m, software::replace)),
    ocr_route!(DELETE "/api/softwareInfos/{id}", "deleteSoftwareInfo", "Delete a client software record (a site admin's manage key)", ENDPOINTS,
        Access::Authenticated, params: SOFTWARE_ID, query: &[], request: None, success: LOGGED_OUT,
        limit: JSON_BODY_LIMIT, errors: &[403, 404, 503], |m| on(m, software::delete)),
];

/// One line of text without control characters (what the checks in core refuse).
const ONE_LINE: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// The same, holding at least one visible character.
// `\S` alone would match a control character: the visible one excludes them too.
const ONE_LINE_SET: &str =
    "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$";

pub const CUT_REQUEST: Schema = Schema(|| {
    let object = |d: &str| json!({ "anyOf": [{ "type": "string" }, { "type": "object" }], "description": d });
    json!({
        "type": "object",
        "required": ["ocrID", "ratio"],
        "properties": {
            "ocrID": { "type": "string", "minLength": 1 },
            "ratio": { "type": "string", "pattern": "^\\s*[0-9]+([.,][0-9]+)?\\s*$", "description": "the zoom at which the page was shown" },
            "rect": { "type": "string", "description": "x:y:w:h in displayed pixels; several joined by ; for multicut" },
            "lang": { "type": "string", "enum": ["fr", "de", "it", "en", "fra", "deu", "ita", "eng"], "description": "default: the language the document was uploaded with" },
            "action": { "type": "string", "enum": ["", "default", "rect", "multicut", "confirmvalues"] },
            "page": { "type": "string", "pattern": "^[1-9][0-9]{0,8}$" },
            "jsonRect": object("named zones {\"totalttcRect\": \"x:y:w:h\"}, as an object or its JSON text"),
            "jsonConfirmValues": object("{name: confirmed value}, as an object or its JSON text"),
            "values": object("{field: {value, rect, ratio}}, as an object or its JSON text")
        }
    })
});

pub const ZONES_REQUEST: Schema = Schema(|| {
    // A blank field stands for an absent one (the real client sends `vatNumber=` for a supplier
    // without a VAT number); at least one of them must say something.
    let text = json!({ "type": "string", "maxLength": 200, "pattern": ONE_LINE });
    let said = |field: &str| json!({ "required": [field], "properties": { field: { "type": "string", "pattern": ONE_LINE_SET } } });
    json!({
        "type": "object",
        "anyOf": [said("name"), said("vatNumber"), said("vat")],
        "properties": {
            "name": text, "vatNumber": text, "vat": text,
            "objectType": { "type": "string", "enum": ["invoices"] }
        }
    })
});

pub const ZONES: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["success", "message", "errors", "result"],
        "properties": { "success": STR(), "message": STR(), "errors": STR(), "result": { "type": "object" } }
    })
});

pub const COMPANY: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["siret", "siren", "name", "adresse", "cp", "ville", "pays", "codePays", "numeroTvaIntra", "source", "error"],
        "properties": {
            "id": { "type": "integer" }, "siret": STR(), "siren": STR(), "name": STR(), "adresse": STR(), "cp": STR(),
            "ville": STR(), "pays": STR(), "codePays": STR(), "numeroTvaIntra": STR(), "source": STR(), "error": STR()
        }
    })
});

fn month_usage() -> Value {
    let n = || json!({ "type": "integer", "minimum": 0 });
    json!({
        "type": "object",
        "required": ["month", "documents", "pages", "cuts"],
        "properties": { "month": STR(), "documents": n(), "pages": n(), "cuts": n() }
    })
}

pub const SUBSCRIPTION: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["plan", "pages_per_month", "period_start", "period_end", "usage"],
        "properties": {
            "plan": { "type": "string", "enum": ["default", "custom"] },
            "pages_per_month": { "type": "integer", "minimum": 0, "description": "0: no limit" },
            "period_start": { "type": "string", "format": "date" },
            "period_end": { "type": "string", "format": "date" },
            "usage": month_usage()
        }
    })
});

pub const STATS: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["email", "plan", "pages_per_month", "months"],
        "properties": {
            "email": STR(), "plan": STR(), "pages_per_month": { "type": "integer" },
            "months": { "type": "array", "items": month_usage() }
        }
    })
});

pub const STATS_REQUEST: Schema = Schema(
    || json!({ "type": "object", "properties": { "month": { "type": "string", "pattern": "^[0-9]{4}-(0[1-9]|1[0-2])$" } } }),
);

fn software_record() -> Value {
    json!({
        "type": "object",
        "required": ["id", "name", "latest_version", "min_version", "download_url", "notes", "created_at", "updated_at"],
        "properties": {
            "id": STR(), "name": STR(), "latest_version": STR(), "min_version": STR(), "download_url": STR(),
            "notes": STR(),
            "created_at": { "type": "string", "format": "date-time" },
            "updated_at": { "type": "string", "format": "date-time" }
        }
    })
}

pub const SOFTWARE: Schema = Schema(software_record);

pub const SOFTWARE_LIST: Schema = Schema(
    || json!({ "type": "object", "required": ["data"], "properties": { "data": { "type": "array", "items": software_record() } } }),
);

fn software_fields() -> serde_json::Map<String, Value> {
    let line = |max: u32| json!({ "type": "string", "maxLength": max, "pattern": ONE_LINE });
    let mut m = serde_json::Map::new();
    m.insert("name".into(), json!({ "type": "string", "minLength": 1, "maxLength": 200, "pattern": ONE_LINE_SET }));
    m.insert("latest_version".into(), line(50));
    m.insert("min_version".into(), line(50));
    m.insert(
        "download_url".into(),
        json!({
            "type": "string",
            "maxLength": 2000,
            "pattern": "^(https?://[^/\\s\\u0000-\\u001f\\u007f-\\u009f][^\\s\\u0000-\\u001f\\u007f-\\u009f]*)?$"
        }),
    );
    m.insert("notes".into(), json!({ "type": "string", "maxLength": 10000, "pattern": "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$" }));
    m
}

pub const SOFTWARE_FIELDS: Schema =
    Schema(|| json!({ "type": "object", "required": ["name"], "properties": software_fields() }));

pub const SOFTWARE_CREATE: Schema = Schema(|| {
    let mut props = software_fields();
    props.insert(
        "id".into(),
        json!({ "type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$", "description": "default: made from the name (lowercase, - for spaces and punctuation; a random suffix when taken)" }),
    );
    json!({ "type": "object", "required": ["name"], "properties": props })
});

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

/// `GET /api/ping`: the probe's answer without a key, the profile with one.
pub const PING_PROBE: Schema = Schema(|| {
    let probe = json!({
        "type": "object",
        "required": ["status", "protocol"],
        "properties": { "status": { "type": "string", "const": "ok" }, "protocol": { "type": "string", "const": "1" } }
    });
    json!({ "anyOf": [probe, PING.render()] })
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
                        "properties": { "protocol": STR(), "srvlangs": { "type": "array", "items": {
                            "type": "object",
                            "required": ["id", "code", "lang", "name"],
                            "properties": {
                                "id": { "type": "integer", "minimum": 1 },
                                "code": { "type": "string", "description": "ISO 639-1 (fr)" },
                                "lang": { "type": "string", "description": "Tesseract's code (fra)" },
                                "name": { "type": "string", "description": "the language's own name (Français)" }
                            }
                        } } }
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
    if route.operation_id == "pingProbe" {
        // The key is optional: without one the route answers the availability probe.
        op["security"] = json!([{}, { "bearerAuth": [] }, { "apiKeyHeader": [] }]);
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
