//! Typed row identifiers, and the one parser of identifiers that arrive as path segments.

use std::fmt;

/// Why a path identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("identifier {0:?} is not a positive integer")]
pub struct InvalidId(pub String);

impl crate::kernel::CoreError for InvalidId {
    fn code(&self) -> crate::kernel::Code {
        crate::kernel::Code::InvalidPathId
    }
}

/// Parses a decimal positive integer that fits an `i64` (SQLite's and PostgreSQL's `BIGINT`).
/// No sign, no leading zeros beyond "0" itself (refused anyway), no white space: `"+1"`, `"01"`,
/// `" 1"` and `"1.0"` are refused, so one resource has one spelling.
pub fn parse_positive_id(s: &str) -> Result<i64, InvalidId> {
    let refuse = || InvalidId(s.chars().take(40).collect());
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with('0') {
        return Err(refuse());
    }
    s.parse::<i64>().map_err(|_| refuse())
}

/// Declares a newtype over a positive `i64` row id. Each context declares its own ids
/// (`UserId`, `ListId`, ...) so that one cannot be passed where another is meant.
#[macro_export]
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(i64);

        impl $name {
            /// Wraps an id read from storage (storage only hands out ids it created).
            pub fn from_stored(raw: i64) -> Self {
                Self(raw)
            }

            /// Parses an id given by a caller (a path segment, a CLI argument).
            pub fn parse(s: &str) -> Result<Self, $crate::kernel::InvalidId> {
                $crate::kernel::parse_positive_id(s).map(Self)
            }

            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

id_type!(
    /// A row of the audit log.
    AuditId
);
id_type!(
    /// A row of the events outbox.
    EventId
);

/// A request id: unique per request across restarts in practice (a random per-process prefix and
/// a counter), cheap enough to make on every request.
/// Shared (`Arc<str>`): a request's id is copied into its envelope, its header, its log lines and
/// its audit entries; cloning it is a reference count, not an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestId(std::sync::Arc<str>);

impl RequestId {
    pub fn new(prefix: u64, counter: u64) -> Self {
        Self(format!("req_{prefix:016x}{counter:08x}").into())
    }

    /// A request id that did not come from an HTTP request (a CLI command, a worker).
    pub fn internal(what: &str) -> Self {
        Self(what.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_positive_integers_only() {
        for ok in ["1", "42", "9223372036854775807"] {
            assert!(parse_positive_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "0",
            "-1",
            "+1",
            "01",
            " 1",
            "1 ",
            "1.0",
            "abc",
            "1e3",
            "9223372036854775808",
            "99999999999999999999",
            "١",
        ] {
            assert_eq!(parse_positive_id(bad).map_err(|_| ()), Err(()), "{bad:?}");
        }
    }

    #[test]
    fn typed_ids_round_trip() {
        let id = AuditId::parse("17").unwrap();
        assert_eq!(id.get(), 17);
        assert_eq!(id.to_string(), "17");
        assert!(AuditId::parse("x").is_err());
    }
}
