//! Both OpenAPI 3.1 documents, generated from the route table.

use crate::routes::{self, Access, Api, ParamKind, Route, Success};
use crate::schema;
use serde_json::{Map, Value, json};

pub fn document(api: Api, version: &str) -> Value {
    let mut paths = Map::new();
    for route in routes::all().filter(|r| r.api == api) {
        let item = paths.entry(route.path).or_insert_with(|| json!({}));
        item[route.method.as_str().to_ascii_lowercase()] = operation(route);
        if api == Api::Ocr {
            crate::ocr::adjust_operation(route, &mut item[route.method.as_str().to_ascii_lowercase()]);
        }
    }
    let (title, description, tags) = match api {
        Api::Mailing => (
            "Courrier mailing-list service",
            "Sending domains, lists, members, sends, moderation, webhooks, users and API keys.",
            json!([
                { "name": "system" },
                { "name": "auth" },
                { "name": "users" },
                { "name": "apikeys" },
                { "name": "domains" },
                { "name": "lists" },
                { "name": "members" },
                { "name": "sends" },
                { "name": "webhooks", "description": "Signed deliveries of lifecycle events: see the document's `webhooks`" },
                { "name": "me", "description": "Subscriber self-service: a mailed one-time link opens a session scoped to one address" }
            ]),
        ),
        Api::Page => ("Courrier pages", "", json!([])),
        Api::Ocr => (
            "Courrier OCR document service",
            "OCR of PDF, JPEG and text documents, zone cuts and invoice extraction.",
            json!([
                { "name": "Endpoints" },
                { "name": "Login/Logout management" },
                { "name": "OCR \"Cuts\"" },
                { "name": "OCR Documents" }
            ]),
        ),
    };
    let version = match api {
        Api::Mailing => version,
        // The OCR contract fixes its interface version.
        Api::Ocr | Api::Page => "1.0.0",
    };
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": { "title": title, "version": version, "description": description },
        "tags": tags,
        "paths": paths,
        "components": {
            "schemas": {
                "Meta": schema::meta(),
                "CollectionMeta": schema::collection_meta(),
                "ErrorEnvelope": schema::error_envelope(),
            },
            "securitySchemes": {
                "bearerAuth": { "type": "http", "scheme": "bearer", "description": "svc_<prefix>_<secret>" },
                "apiKeyHeader": { "type": "apiKey", "in": "header", "name": "X-API-Key" },
                "sessionCookie": { "type": "apiKey", "in": "cookie", "name": "svc_session" },
                "subscriberCookie": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "svc_subscriber",
                    "description": "a subscriber session, opened by POST /api/v1/me/session with a mailed login link; accepted by the /me routes only"
                },
            }
        }
    });
    if api == Api::Mailing {
        doc["webhooks"] = schema::webhook_delivery();
    }
    doc
}

fn operation(route: &Route) -> Value {
    let mut op = json!({
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
    });
    let mut parameters: Vec<Value> = route
        .params
        .iter()
        .map(|p| {
            let schema = match p.kind {
                ParamKind::Id => json!({ "type": "integer", "minimum": 1, "maximum": i64::MAX }),
                ParamKind::Text => json!({ "type": "string", "minLength": 1 }),
            };
            let mut param =
                json!({ "name": p.name, "in": "path", "required": true, "description": p.description, "schema": schema });
            // Examples of the mailing API's named segments, matching what CI seeds before fuzzing,
            // so that the fuzzer reaches past 404 on the first try.
            if let Some(example) = match p.name {
                "domain" => Some("example.org"),
                "list" => Some("news"),
                "member" => Some("1"),
                "kind" => Some("ingest"),
                _ => None,
            } {
                param["example"] = json!(example);
            }
            param
        })
        .collect();
    parameters.extend(route.query.iter().map(|q| {
        json!({ "name": q.name, "in": "query", "required": false, "description": q.description, "schema": q.schema.render() })
    }));
    if !parameters.is_empty() {
        op["parameters"] = Value::Array(parameters);
    }
    if let Some(request) = route.request {
        // A schema may name its own media types (`x-content`: the CSV import takes text/csv or
        // multipart); otherwise the body is JSON.
        let rendered = request.render();
        let content = match rendered.get("x-content") {
            Some(content) => content.clone(),
            None => json!({ "application/json": { "schema": rendered } }),
        };
        op["requestBody"] = json!({ "required": true, "content": content });
    }
    op["security"] = match route.access {
        Access::Public => json!([]),
        Access::Authenticated | Access::Perm(_) => {
            json!([{ "bearerAuth": [] }, { "apiKeyHeader": [] }, { "sessionCookie": [] }])
        }
        Access::Subscriber => json!([{ "subscriberCookie": [] }]),
    };
    if let Access::Perm(perm) = route.access {
        op["x-required-permission"] = json!(perm.as_str());
        op["summary"] = json!(format!("{} [{}]", route.summary, perm.as_str()));
    }
    let mut responses = Map::new();
    let envelope = |data: schema::Schema| {
        json!({ "application/json": { "schema": {
            "type": "object",
            "required": ["data", "meta"],
            "properties": { "data": data.render(), "meta": { "$ref": "#/components/schemas/Meta" } }
        }}})
    };
    if let Success::DataEither(_, other, data) = route.success {
        responses.insert(other.to_string(), json!({ "description": "accepted, pending", "content": envelope(data) }));
    }
    let (status, content) = match route.success {
        Success::Data(status, data) | Success::DataEither(status, _, data) => (status, envelope(data)),
        Success::Collection(item) => (
            200,
            json!({ "application/json": { "schema": {
                "type": "object",
                "required": ["data", "meta"],
                "properties": {
                    "data": { "type": "array", "items": item.render() },
                    "meta": { "$ref": "#/components/schemas/CollectionMeta" }
                }
            }}}),
        ),
        Success::Raw(media, schema) => (200, json!({ media: { "schema": schema.render() } })),
        Success::NoContent => (204, Value::Null),
    };
    let mut ok = json!({ "description": "success" });
    if !content.is_null() {
        ok["content"] = content;
    }
    responses.insert(status.to_string(), ok);
    for status in route.error_statuses() {
        let mut answer = json!({
            "description": error_description(status),
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorEnvelope" } } }
        });
        if status == 401 {
            // RFC 9110: every 401 names the scheme to authenticate with.
            answer["headers"] = json!({ "WWW-Authenticate": {
                "description": "the challenge",
                "required": true,
                "schema": { "type": "string", "const": crate::error::CHALLENGE }
            } });
        }
        responses.insert(status.to_string(), answer);
    }
    op["responses"] = Value::Object(responses);
    op
}

fn error_description(status: u16) -> &'static str {
    match status {
        400 => "malformed or too large body",
        401 => "not authenticated (uniform)",
        403 => "missing permission, or CSRF failure",
        404 => "unknown or out of scope",
        409 => "conflict",
        413 => "document too large",
        422 => "invalid value",
        429 => "quota exceeded",
        503 => "unavailable",
        _ => "error",
    }
}
