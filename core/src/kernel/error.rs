//! The closed classification of every failure, and the table of stable error codes.
//!
//! Each layer has its own `thiserror` enum; each variant names one [`Code`], and each code belongs
//! to exactly one [`ErrorKind`]. Frontends decide the HTTP status and the CLI exit code from the
//! kind alone, in one exhaustive match each, so a new kind forces a decision everywhere.

/// What kind of failure this is, independent of any transport (std's `io::ErrorKind` pattern).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request body could not be read as what it claims to be, or was too large to read.
    Malformed,
    /// No valid credential (the reason stays in the server log).
    Unauthenticated,
    /// A credential in scope, without the permission the operation needs.
    Forbidden,
    /// Unknown, or outside the caller's scope (the two are never told apart).
    NotFound,
    /// The path exists, not with this method.
    MethodNotAllowed,
    /// The state of the resource forbids the operation now.
    Conflict,
    /// A document over its size limit (the CSV import, an OCR upload).
    TooLarge,
    /// A value that does not satisfy the contract's rules.
    Invalid,
    /// A quota was exceeded; the caller may retry later.
    RateLimited,
    /// A dependency or configuration is missing or not answering; the caller may retry later.
    Unavailable,
    /// A bug or an unexpected failure: logged with its cause, shown without detail.
    Internal,
}

macro_rules! codes {
    ($($variant:ident => $text:literal, $kind:ident;)*) => {
        /// Stable error codes: the wire value of `error.code`, never renamed once published.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code { $($variant,)* }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(Code::$variant => $text,)* }
            }

            pub fn kind(self) -> ErrorKind {
                match self { $(Code::$variant => ErrorKind::$kind,)* }
            }
        }
    };
}

codes! {
    MalformedBody => "malformed_body", Malformed;
    BodyTooLarge => "body_too_large", Malformed;
    Unauthenticated => "unauthenticated", Unauthenticated;
    Forbidden => "forbidden", Forbidden;
    CsrfFailed => "csrf_failed", Forbidden;
    SubscriptionClosed => "subscription_closed", Forbidden;
    NotFound => "not_found", NotFound;
    MethodNotAllowed => "method_not_allowed", MethodNotAllowed;
    Conflict => "conflict", Conflict;
    AlreadySubscribed => "already_subscribed", Conflict;
    IdempotencyConflict => "idempotency_conflict", Conflict;
    IdempotencyInProgress => "idempotency_in_progress", Conflict;
    DocumentTooLarge => "document_too_large", TooLarge;
    ValidationFailed => "validation_failed", Invalid;
    InvalidPathId => "invalid_path_id", Invalid;
    InvalidPagination => "invalid_pagination", Invalid;
    IdempotencyUnsupported => "idempotency_unsupported", Invalid;
    ConsentEvidenceRequired => "consent_evidence_required", Invalid;
    RateLimited => "rate_limited", RateLimited;
    CredentialKeyringMissing => "credential_keyring_missing", Unavailable;
    StorageUnavailable => "storage_unavailable", Unavailable;
    MailUnavailable => "mail_unavailable", Unavailable;
    Internal => "internal_error", Internal;
    // OCR documents (issue 6).
    DocumentEmpty => "document_empty", Invalid;
    DocumentTypeUnsupported => "document_type_unsupported", Invalid;
    DocumentEncrypted => "document_encrypted", Invalid;
    DocumentUnreadable => "document_unreadable", Invalid;
    DocumentTooComplex => "document_too_complex", Invalid;
    DocumentHasNoImage => "document_has_no_image", Invalid;
    OcrUnavailable => "ocr_unavailable", Unavailable;
    OcrMaintenance => "ocr_maintenance", Unavailable;
    // Invoices, cuts and usage (issue 7).
    TemplateInvalid => "template_invalid", Invalid;
    TemplateTooLarge => "template_too_large", TooLarge;
    // Webhooks and the DNS check (issue 8).
    UrlRefused => "url_refused", Invalid;
    EgressFailed => "egress_failed", Unavailable;
    DnsUnavailable => "dns_unavailable", Unavailable;
    // A domain's DKIM key could not be made or read (issue 5).
    DkimUnavailable => "dkim_unavailable", Unavailable;
    // Mail-account credentials (issue 22): the provider refused the test's session, or it could
    // not be held (connection, TLS, time-out).
    AccountRefused => "account_refused", Invalid;
    AccountUnreachable => "account_unreachable", Invalid;
}

/// Implemented by every layer's error enum: the frontends need nothing else to render it.
pub trait CoreError: std::error::Error {
    fn code(&self) -> Code;

    fn kind(&self) -> ErrorKind {
        self.code().kind()
    }

    /// Seconds after which a refused request may be retried (429, 503).
    fn retry_after(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_lowercase_snake_case() {
        let mut seen = HashSet::new();
        for code in Code::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "duplicate code {s}");
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "code {s} is not snake_case");
        }
    }

    #[test]
    fn contract_codes_exist_with_their_kinds() {
        let find = |s: &str| Code::ALL.iter().find(|c| c.as_str() == s).copied();
        for (name, kind) in [
            ("csrf_failed", ErrorKind::Forbidden),
            ("idempotency_conflict", ErrorKind::Conflict),
            ("idempotency_in_progress", ErrorKind::Conflict),
            ("idempotency_unsupported", ErrorKind::Invalid),
            ("rate_limited", ErrorKind::RateLimited),
            ("credential_keyring_missing", ErrorKind::Unavailable),
        ] {
            assert_eq!(find(name).map(Code::kind), Some(kind), "{name}");
        }
    }
}
