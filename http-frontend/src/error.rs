//! The frontend's error: a stable code and a message for the caller. Rendered in one place
//! ([`crate::envelope`]); its HTTP status decided in one exhaustive match ([`status_of`]).

use courrier_core::kernel::{Code, CoreError, ErrorKind};
use http::{HeaderMap, HeaderValue, StatusCode, header};

/// The challenge every 401 carries (RFC 9110, section 11.6.1): both APIs take a bearer
/// credential (an API key; the session cookie is the other way in, named by no scheme).
pub const CHALLENGE: &str = "Bearer realm=\"courrier\"";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    /// Seconds, for 429 and 503 answers that know when to come back.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), retry_after: None }
    }

    /// An unexpected failure: the cause goes to the log, the caller sees no detail.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(cause = %cause, "internal error");
        Self::new(Code::Internal, "internal error")
    }

    pub fn status(&self) -> StatusCode {
        status_of(self.code.kind())
    }

    /// The headers an error answer carries on both APIs: `Retry-After` when known, and the
    /// `WWW-Authenticate` challenge on every 401.
    pub fn add_headers(&self, headers: &mut HeaderMap) {
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status() == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(CHALLENGE));
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Every core error converts the same way: its code, and its message unless it is internal.
impl<E: CoreError> From<E> for ApiError {
    fn from(e: E) -> Self {
        match e.kind() {
            ErrorKind::Internal => {
                let mut chain = e.to_string();
                let mut source = e.source();
                while let Some(s) = source {
                    chain.push_str(": ");
                    chain.push_str(&s.to_string());
                    source = s.source();
                }
                ApiError::internal(&chain)
            }
            _ => ApiError { code: e.code(), message: e.to_string(), retry_after: e.retry_after() },
        }
    }
}

/// The one mapping from error kind to HTTP status. No `_` arm: a new kind must be decided here.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Malformed => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_status_in_the_contracts_table() {
        let allowed = [400, 401, 403, 404, 405, 409, 413, 422, 429, 500, 503];
        for code in Code::ALL {
            let status = status_of(code.kind()).as_u16();
            assert!(allowed.contains(&status), "{} -> {status}", code.as_str());
        }
        assert_eq!(status_of(Code::CsrfFailed.kind()), StatusCode::FORBIDDEN);
        assert_eq!(status_of(Code::IdempotencyUnsupported.kind()), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(status_of(Code::CredentialKeyringMissing.kind()), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn every_401_carries_the_bearer_challenge_and_no_other_status_does() {
        for code in Code::ALL {
            let mut headers = HeaderMap::new();
            ApiError::new(*code, "x").add_headers(&mut headers);
            let challenge = headers.get(header::WWW_AUTHENTICATE).map(|v| v.to_str().unwrap().to_owned());
            let expected = (status_of(code.kind()) == StatusCode::UNAUTHORIZED).then(|| CHALLENGE.to_owned());
            assert_eq!(challenge, expected, "{}", code.as_str());
        }
    }

    #[test]
    fn internal_errors_hide_their_cause() {
        let e = ApiError::from(courrier_core::storage::StoreError::Backend("disk I/O error at /secret/path".into()));
        assert_eq!((e.code, e.message.as_str()), (Code::Internal, "internal error"));
        let e = ApiError::from(courrier_core::storage::StoreError::Busy);
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.contains("busy"));
    }
}
