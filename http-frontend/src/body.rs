//! Reading request bodies: the declared length checked before any byte is read, the real
//! length bounded while reading, a time-out for slow senders, and JSON refused with a reason.

use crate::AppState;
use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{FromRequest, Request};
use bytes::Bytes;
use courrier_core::kernel::Code;
use http::header;
use http_body_util::{BodyExt, Limited};
use serde::de::DeserializeOwned;
use std::time::Duration;

/// The declared Content-Length, refused at once when over `limit`.
pub fn check_declared_length(headers: &http::HeaderMap, limit: usize) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_LENGTH) else {
        return Ok(());
    };
    let declared = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| ApiError::new(Code::MalformedBody, "Content-Length is not a number"))?;
    if declared > limit as u64 {
        return Err(too_large(limit));
    }
    Ok(())
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(Code::BodyTooLarge, format!("the body is larger than the limit of {limit} bytes"))
}

/// Reads the whole body, at most `limit` bytes, within `timeout`.
pub async fn read_limited(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, ApiError> {
    let collect = Limited::new(body, limit).collect();
    match tokio::time::timeout(timeout, collect).await {
        Err(_) => Err(ApiError::new(
            Code::MalformedBody,
            format!("the body did not arrive within {} seconds", timeout.as_secs()),
        )),
        Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(too_large(limit)),
        Ok(Err(e)) => Err(ApiError::new(Code::MalformedBody, format!("the body could not be read: {e}"))),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// A JSON request body. Not JSON at all -> 400 `malformed_body`; JSON of the wrong shape (a
/// missing field, a wrong type) -> 422 `validation_failed` naming the field.
pub struct Json<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
            })
            .unwrap_or(false);
        if !is_json {
            return Err(ApiError::new(Code::MalformedBody, "the body must be JSON (Content-Type: application/json)"));
        }
        let limit = crate::routes::JSON_BODY_LIMIT;
        check_declared_length(req.headers(), limit)?;
        let bytes = read_limited(req.into_body(), limit, state.body_read_timeout).await?;
        parse_json(&bytes).map(Json)
    }
}

/// Every request body of the API is a JSON object: serde would otherwise take an array for a
/// struct (`[null, null]` as a patch of two absent fields).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| classify(&e))?;
    if !value.is_object() {
        return Err(ApiError::new(Code::ValidationFailed, "the body must be a JSON object"));
    }
    serde_json::from_value(value).map_err(|e| classify(&e))
}

fn classify(e: &serde_json::Error) -> ApiError {
    match e.classify() {
        serde_json::error::Category::Data => ApiError::new(Code::ValidationFailed, e.to_string()),
        serde_json::error::Category::Io | serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            ApiError::new(Code::MalformedBody, format!("the body is not valid JSON: {e}"))
        }
    }
}

/// An optional whole number that JSON may write as `5` or `5.0` (JSON Schema calls both
/// integers, so clients and fuzzers send either): `#[serde(default, with = "body::whole")]`.
pub mod whole {
    use serde::{Deserialize, Deserializer, de::Error};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        match Option::<serde_json::Number>::deserialize(d)? {
            None => Ok(None),
            Some(n) => {
                let whole =
                    n.as_u64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0).map(|f| f as u64));
                whole
                    .and_then(|w| u32::try_from(w).ok())
                    .map(Some)
                    .ok_or_else(|| D::Error::custom(format!("{n} is not a whole number from 0 to {}", u32::MAX)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Probe {
        name: String,
    }

    #[test]
    fn syntax_is_400_and_shape_is_422() {
        let code = |b: &[u8]| parse_json::<Probe>(b).unwrap_err().code;
        assert_eq!(code(b"{"), Code::MalformedBody);
        assert_eq!(code(b"not json"), Code::MalformedBody);
        assert_eq!(code(b""), Code::MalformedBody);
        assert_eq!(code(b"{}"), Code::ValidationFailed);
        assert_eq!(code(br#"{"name": 3}"#), Code::ValidationFailed);
        assert_eq!(code(br#"["x"]"#), Code::ValidationFailed, "an array is not a struct here");
        assert_eq!(code(b"null"), Code::ValidationFailed);
        assert!(parse_json::<Probe>(br#"{"name": "x"}"#).is_ok());
    }

    #[test]
    fn reading_stops_at_the_limit_and_at_the_time_out() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let t = std::time::Duration::from_secs(5);
            let over = read_limited(Body::from(vec![b'x'; 1025]), 1024, t).await.unwrap_err();
            assert_eq!(over.code, Code::BodyTooLarge);
            assert_eq!(read_limited(Body::from(vec![b'x'; 1024]), 1024, t).await.unwrap().len(), 1024);
            // A body that never ends: the time-out cuts it off.
            let never = futures_util::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
            let slow = read_limited(Body::from_stream(never), 1024, std::time::Duration::from_millis(50)).await;
            assert_eq!(slow.unwrap_err().code, Code::MalformedBody);
        });
    }

    #[test]
    fn declared_length_is_checked_before_reading() {
        let mut h = http::HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "2000000".parse().unwrap());
        assert_eq!(check_declared_length(&h, 1_000_000).unwrap_err().code, Code::BodyTooLarge);
        h.insert(header::CONTENT_LENGTH, "12".parse().unwrap());
        assert!(check_declared_length(&h, 1_000_000).is_ok());
        h.insert(header::CONTENT_LENGTH, "x".parse().unwrap());
        assert_eq!(check_declared_length(&h, 1_000_000).unwrap_err().code, Code::MalformedBody);
    }
}
