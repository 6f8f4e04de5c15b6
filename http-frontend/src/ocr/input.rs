//! The many shapes of an OCR request (decisions.md: the real client differs from the contract):
//! JSON, JSON wrapped as `{"json": {...}}`, form-encoded, multipart, the query string, and GETs
//! that carry a JSON body. All become one map of named text fields (names matched without case)
//! and, for uploads, the file part.

use crate::AppState;
use crate::body::read_limited;
use crate::error::ApiError;
use axum::extract::{FromRequest, Multipart, Request};
use bytes::Bytes;
use courrier_core::kernel::Code;
use http::header;
use serde_json::Value;

#[derive(Debug, Default)]
pub struct Input {
    fields: Vec<(String, String)>,
    /// Fields of a JSON body whose value was not a string, with the JSON type it had: kept as
    /// text in `fields` (most routes take `"ratio": 0.5` as well as `"0.5"`), and told here to
    /// the routes whose schema says `string` and must refuse anything else.
    json_types: Vec<(String, &'static str)>,
    pub file: Option<Bytes>,
}

impl Input {
    /// The field's value; body fields win over query parameters.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().rev().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The field, trimmed, when present and not empty.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }

    pub fn require(&self, name: &str) -> Result<&str, ApiError> {
        self.text(name).ok_or_else(|| ApiError::new(Code::ValidationFailed, format!("the field {name} is required")))
    }

    /// The JSON type of a field sent as something else than a string (`"boolean"`, `"object"`,
    /// `"array"`, `"number"`, `"null"`); `None` for a string, a form field or an absent field.
    pub fn json_type(&self, name: &str) -> Option<&'static str> {
        self.json_types.iter().rev().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, t)| *t)
    }

    /// Refuses, with 422, any of `names` sent in JSON as something else than a string.
    pub fn require_strings(&self, names: &[&str]) -> Result<(), ApiError> {
        match names.iter().find_map(|n| self.json_type(n).map(|t| (n, t))) {
            None => Ok(()),
            Some((name, t)) => {
                Err(ApiError::new(Code::ValidationFailed, format!("the field {name} must be a string, not {t}")))
            }
        }
    }

    /// A field as if the client had sent it.
    #[cfg(test)]
    pub fn push_field(&mut self, name: &str, value: &str) {
        self.fields.push((name.to_owned(), value.to_owned()));
    }

    fn push_json_object(&mut self, object: serde_json::Map<String, Value>) {
        for (k, v) in object {
            let kind = match &v {
                Value::String(_) => None,
                Value::Null => Some("null"),
                Value::Bool(_) => Some("a boolean"),
                Value::Number(_) => Some("a number"),
                Value::Array(_) => Some("an array"),
                Value::Object(_) => Some("an object"),
            };
            if let Some(kind) = kind {
                self.json_types.push((k.clone(), kind));
            }
            let text = match v {
                Value::Null => continue,
                Value::String(s) => s,
                other => other.to_string(),
            };
            self.fields.push((k, text));
        }
    }
}

/// What the file part may weigh, and what the whole body may.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub body: usize,
    pub file: usize,
}

fn mime_of(req: &Request) -> String {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

pub async fn read(req: Request, state: &AppState, limits: Limits) -> Result<Input, ApiError> {
    let mut input = Input::default();
    if let Some(q) = req.uri().query() {
        input.fields.extend(parse_urlencoded(q)?);
    }
    let mime = mime_of(&req);
    if mime == "multipart/form-data" {
        let timeout = state.body_read_timeout;
        return match tokio::time::timeout(timeout, read_multipart(req, state, limits, input)).await {
            Ok(r) => r,
            Err(_) => Err(ApiError::new(
                Code::MalformedBody,
                format!("the body did not arrive within {} seconds", timeout.as_secs()),
            )),
        };
    }
    let bytes = read_limited(req.into_body(), limits.body, state.body_read_timeout).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(input);
    }
    let json_first = mime.is_empty() || mime == "application/json" || mime.ends_with("+json") || mime == "text/plain";
    if mime == "application/x-www-form-urlencoded" || (!json_first && bytes.first() != Some(&b'{')) {
        let text =
            std::str::from_utf8(&bytes).map_err(|_| ApiError::new(Code::MalformedBody, "the form is not UTF-8"))?;
        input.fields.extend(parse_urlencoded(text)?);
        return Ok(input);
    }
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(Code::MalformedBody, format!("the body is not valid JSON: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(ApiError::new(Code::ValidationFailed, "the body must be a JSON object"));
    };
    // ScanInvoices wraps its fields: {"json": {...}}.
    if object.len() == 1
        && let Some(Value::Object(inner)) = object.remove("json")
    {
        object = inner;
    }
    input.push_json_object(object);
    Ok(input)
}

async fn read_multipart(req: Request, state: &AppState, limits: Limits, mut input: Input) -> Result<Input, ApiError> {
    let malformed = |e: axum::extract::multipart::MultipartError| {
        ApiError::new(Code::MalformedBody, format!("the multipart body cannot be read: {}", e.body_text()))
    };
    let mut multipart =
        Multipart::from_request(req, state).await.map_err(|e| ApiError::new(Code::MalformedBody, e.body_text()))?;
    let mut total = 0usize;
    while let Some(mut field) = multipart.next_field().await.map_err(malformed)? {
        let name = field.name().unwrap_or("").to_owned();
        let is_file = name.eq_ignore_ascii_case("pdf") || (field.file_name().is_some() && input.file.is_none());
        let cap = if is_file { limits.file } else { 1024 * 1024 };
        let mut buf = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(malformed)? {
            buf.extend_from_slice(&chunk);
            total += chunk.len();
            if buf.len() > cap || total > limits.body {
                return Err(if is_file {
                    ApiError::new(
                        Code::DocumentTooLarge,
                        format!("the document is larger than the limit of {} bytes", limits.file),
                    )
                } else {
                    ApiError::new(Code::BodyTooLarge, format!("the field {name} is too large"))
                });
            }
        }
        if is_file {
            input.file = Some(Bytes::from(buf));
        } else {
            let text = String::from_utf8(buf)
                .map_err(|_| ApiError::new(Code::ValidationFailed, format!("the field {name} is not UTF-8 text")))?;
            input.fields.push((name, text));
        }
    }
    Ok(input)
}

fn parse_urlencoded(raw: &str) -> Result<Vec<(String, String)>, ApiError> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

fn decode(s: &str) -> Result<String, ApiError> {
    let bad = || ApiError::new(Code::MalformedBody, "a form or query value is not valid percent-encoded UTF-8");
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).ok_or_else(bad)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_types_other_than_string_are_told() {
        let mut input = Input::default();
        input.push_json_object(
            serde_json::json!({"a": "x", "b": true, "c": {"k": 1}, "d": null, "e": 2}).as_object().unwrap().clone(),
        );
        assert_eq!(input.json_type("a"), None);
        assert_eq!(input.json_type("B"), Some("a boolean"));
        assert_eq!(input.text("c"), Some(r#"{"k":1}"#));
        assert_eq!(input.json_type("d"), Some("null"));
        assert!(input.require_strings(&["a"]).is_ok());
        let err = input.require_strings(&["a", "c"]).unwrap_err();
        assert!(err.message.contains("c must be a string, not an object"), "{}", err.message);
    }

    #[test]
    fn decodes_forms() {
        assert_eq!(
            parse_urlencoded("a=1&b=x+y%21&c").unwrap(),
            vec![("a".into(), "1".into()), ("b".into(), "x y!".into()), ("c".into(), "".into())]
        );
        assert!(parse_urlencoded("a=%zz").is_err());
        assert!(parse_urlencoded("a=%ff").is_err());
    }

    #[test]
    fn fields_are_found_without_case_and_body_wins() {
        let input = Input {
            fields: vec![("ocrid".into(), "q".into()), ("ocrID".into(), " b ".into())],
            json_types: Vec::new(),
            file: None,
        };
        assert_eq!(input.text("OCRID"), Some("b"));
        assert!(input.require("lang").is_err());
    }
}
