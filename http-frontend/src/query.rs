//! Query strings, strictly: an unknown or repeated parameter is refused with 422, never ignored
//! (a misspelt filter would otherwise return everything).

use crate::error::ApiError;
use courrier_core::kernel::{Code, Page, Timestamp};
use std::collections::HashMap;

pub struct QueryParams(HashMap<String, String>);

impl QueryParams {
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut map = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (k, v) = (decode(k)?, decode(v)?);
            if !allowed.contains(&k.as_str()) {
                return Err(invalid(format!("unknown query parameter {k:?}; allowed: {}", allowed.join(", "))));
            }
            if map.insert(k.clone(), v).is_some() {
                return Err(invalid(format!("query parameter {k:?} is given twice")));
            }
        }
        Ok(Self(map))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn page(&self) -> Result<Page, ApiError> {
        Ok(Page::parse(self.get("limit"), self.get("offset"))?)
    }

    pub fn timestamp(&self, name: &str) -> Result<Option<Timestamp>, ApiError> {
        self.get(name)
            .map(|v| {
                Timestamp::parse_rfc3339(v).ok_or_else(|| invalid(format!("{name} must be an RFC 3339 date or time")))
            })
            .transpose()
    }

    pub fn positive_id(&self, name: &str) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|v| {
                courrier_core::kernel::parse_positive_id(v)
                    .map_err(|_| invalid(format!("{name} must be a positive integer")))
            })
            .transpose()
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::new(Code::ValidationFailed, message)
}

/// Percent-decoding with `+` as a space (HTML forms), refusing invalid UTF-8.
pub fn decode(s: &str) -> Result<String, ApiError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
                let byte = hex.ok_or_else(|| invalid("a query or form value has a bad percent escape".into()))?;
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| invalid("a query or form value is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_parameters() {
        let q = QueryParams::parse(
            Some("limit=5&action=user.create&since=2026-01-01"),
            &["limit", "offset", "action", "since"],
        )
        .unwrap();
        assert_eq!(q.page().unwrap().limit(), 5);
        assert_eq!(q.get("action"), Some("user.create"));
        assert!(q.timestamp("since").unwrap().is_some());
        assert!(QueryParams::parse(Some("limt=5"), &["limit"]).is_err());
        assert!(QueryParams::parse(Some("limit=5&limit=6"), &["limit"]).is_err());
        assert!(QueryParams::parse(Some("limit=%zz"), &["limit"]).is_err());
        assert_eq!(decode("a+b%C3%A9").unwrap(), "a bé");
    }
}
