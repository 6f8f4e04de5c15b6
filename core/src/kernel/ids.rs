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
///
/// A minted id is held inline (28 ASCII bytes): making one and cloning it allocate nothing, and a
/// request's id is made on every request and copied into its envelope, its header, its log lines
/// and its audit entries. The odd named id (a CLI command, a worker) is shared text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RequestId(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// `req_`, 16 hex digits of the prefix, 8 of the counter.
    Minted([u8; MINTED_LEN]),
    Named(std::sync::Arc<str>),
}

const MINTED_LEN: usize = 28;

impl RequestId {
    /// `req_` + the prefix in 16 hex digits + the counter's low 32 bits in 8; the counter's high
    /// bits are folded into the prefix, so a process that serves more than 2^32 requests still
    /// never repeats an id (two counters with the same low bits differ in the prefix part).
    pub fn new(prefix: u64, counter: u64) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; MINTED_LEN];
        text[..4].copy_from_slice(b"req_");
        let prefix = prefix ^ (counter >> 32);
        for (i, b) in text[4..20].iter_mut().enumerate() {
            *b = HEX[((prefix >> (60 - 4 * i)) & 0xf) as usize];
        }
        for (i, b) in text[20..].iter_mut().enumerate() {
            *b = HEX[((counter >> (28 - 4 * i)) & 0xf) as usize];
        }
        Self(Repr::Minted(text))
    }

    /// A request id that did not come from an HTTP request (a CLI command, a worker).
    pub fn internal(what: &str) -> Self {
        Self(Repr::Named(what.into()))
    }

    /// The id's bytes, without the UTF-8 check `as_str` makes (for a header value, which checks
    /// its own bytes).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Minted(text) => text,
            Repr::Named(text) => text.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Always ASCII (written above from `req_` and hex digits): the check cannot fail.
            Repr::Minted(text) => std::str::from_utf8(text).unwrap_or("req"),
            Repr::Named(text) => text,
        }
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RequestId").field(&self.as_str()).finish()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    fn request_ids_are_the_prefix_and_counter_in_hex_and_never_repeat_past_two_to_the_32() {
        let id = RequestId::new(0x0123_4567_89ab_cdef, 0x2a);
        assert_eq!(id.as_str(), "req_0123456789abcdef0000002a");
        assert_eq!(id.to_string(), id.as_str());
        assert_eq!(id.as_bytes(), id.as_str().as_bytes());
        assert_eq!(format!("{id:?}"), "RequestId(\"req_0123456789abcdef0000002a\")");
        let (low, wrapped) = (RequestId::new(7, 5), RequestId::new(7, (1 << 32) | 5));
        assert_ne!(low, wrapped, "same low 32 bits, different counters");
        assert_eq!(wrapped.as_str().len(), 28);
        assert_eq!(RequestId::internal("cli").as_str(), "cli");
    }

    #[test]
    fn typed_ids_round_trip() {
        let id = AuditId::parse("17").unwrap();
        assert_eq!(id.get(), 17);
        assert_eq!(id.to_string(), "17");
        assert!(AuditId::parse("x").is_err());
    }
}
