//! The window of a collection. Out-of-range values are refused, never clamped: a client that asks
//! for 1,000 rows and silently gets 500 would page wrongly without knowing it.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    limit: u32,
    offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("limit must be an integer from 1 to 500, got {0:?}")]
    Limit(String),
    #[error("offset must be an integer of at least 0, got {0:?}")]
    Offset(String),
}

impl crate::kernel::CoreError for PageError {
    fn code(&self) -> crate::kernel::Code {
        crate::kernel::Code::InvalidPagination
    }
}

impl Page {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 500;
    /// Offsets past this are refused too: no listing has that many rows, and SQL wants an i64.
    const MAX_OFFSET: u64 = i64::MAX as u64;

    /// Parses the raw query values; `None` means the parameter was absent.
    pub fn parse(limit: Option<&str>, offset: Option<&str>) -> Result<Self, PageError> {
        let limit = match limit {
            None => Self::DEFAULT_LIMIT,
            Some(raw) => raw
                .parse::<u32>()
                .ok()
                .filter(|l| (1..=Self::MAX_LIMIT).contains(l) && is_plain_integer(raw))
                .ok_or_else(|| PageError::Limit(raw.chars().take(40).collect()))?,
        };
        let offset = match offset {
            None => 0,
            Some(raw) => raw
                .parse::<u64>()
                .ok()
                .filter(|o| *o <= Self::MAX_OFFSET && is_plain_integer(raw))
                .ok_or_else(|| PageError::Offset(raw.chars().take(40).collect()))?,
        };
        Ok(Self { limit, offset })
    }

    pub fn first(limit: u32) -> Self {
        Self { limit: limit.clamp(1, Self::MAX_LIMIT), offset: 0 }
    }

    pub fn limit(self) -> u32 {
        self.limit
    }

    pub fn offset(self) -> u64 {
        self.offset
    }
}

impl Default for Page {
    fn default() -> Self {
        Self { limit: Self::DEFAULT_LIMIT, offset: 0 }
    }
}

/// `u32::from_str` accepts a leading `+`; the contract's integers do not.
fn is_plain_integer(raw: &str) -> bool {
    !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit())
}

/// One window of a collection with the number of rows that satisfy the filter regardless of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paged<T> {
    pub items: Vec<T>,
    pub total: u64,
    pub page: Page,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(limit: Option<&str>, offset: Option<&str>, expect: Result<(u32, u64), ()>) {
        let got = Page::parse(limit, offset).map(|p| (p.limit(), p.offset())).map_err(|_| ());
        assert_eq!(got, expect, "limit={limit:?} offset={offset:?}");
    }

    #[test]
    fn parses_within_range_and_refuses_outside() {
        check(None, None, Ok((50, 0)));
        check(Some("1"), Some("0"), Ok((1, 0)));
        check(Some("500"), Some("123456"), Ok((500, 123456)));
        for bad in ["0", "501", "-1", "+5", "abc", "", "1.5", " 5", "4294967296"] {
            check(Some(bad), None, Err(()));
        }
        for bad in ["-1", "+0", "x", "", "9223372036854775808"] {
            check(None, Some(bad), Err(()));
        }
    }

    #[test]
    fn errors_say_which_parameter() {
        assert!(Page::parse(Some("0"), None).unwrap_err().to_string().starts_with("limit"));
        assert!(Page::parse(None, Some("-3")).unwrap_err().to_string().starts_with("offset"));
    }
}
