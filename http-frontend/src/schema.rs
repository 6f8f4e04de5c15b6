//! JSON Schemas of the DTOs, written beside the route table so that OpenAPI documents them and
//! schemathesis checks every answer against them in CI.

use serde_json::{Value, json};

/// A schema: a function, so the route table stays `static`.
#[derive(Clone, Copy)]
pub struct Schema(pub fn() -> Value);

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schema(..)")
    }
}

impl Schema {
    pub fn render(self) -> Value {
        (self.0)()
    }
}

pub const ANY_OBJECT: Schema = Schema(|| json!({ "type": "object" }));

pub const HEALTH: Schema = Schema(|| {
    json!({
        "type": "object",
        "required": ["status"],
        "properties": { "status": { "type": "string", "enum": ["ok"] } },
        "additionalProperties": false
    })
});

pub fn meta() -> Value {
    json!({
        "type": "object",
        "required": ["request_id", "api_version"],
        "properties": {
            "request_id": { "type": "string" },
            "api_version": { "type": "string", "const": "v1" }
        }
    })
}

pub fn collection_meta() -> Value {
    json!({
        "allOf": [
            { "$ref": "#/components/schemas/Meta" },
            {
                "type": "object",
                "required": ["total", "limit", "offset"],
                "properties": {
                    "total": { "type": "integer", "minimum": 0 },
                    "limit": { "type": "integer", "minimum": 1, "maximum": 500 },
                    "offset": { "type": "integer", "minimum": 0 }
                }
            }
        ]
    })
}

pub fn error_envelope() -> Value {
    json!({
        "type": "object",
        "required": ["error", "meta"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": { "type": "string" },
                    "message": { "type": "string" }
                }
            },
            "meta": { "$ref": "#/components/schemas/Meta" }
        }
    })
}
