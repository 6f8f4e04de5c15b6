//! Validated names: each is parsed once at the edge and trusted everywhere after.
//! Private fields, one validating constructor, borrowed getters, no setters.

use std::fmt;

/// Why a name or an address was refused. The message names the rule that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("email address {0:?} is not valid: {1}")]
    Email(String, &'static str),
    #[error("domain name {0:?} is not valid: {1}")]
    Domain(String, &'static str),
    #[error("list name {0:?} is not valid: {1}")]
    List(String, &'static str),
}

impl crate::kernel::CoreError for NameError {
    fn code(&self) -> crate::kernel::Code {
        crate::kernel::Code::ValidationFailed
    }
}

/// Shortens what a caller sent before it goes into an error message or a log line.
fn excerpt(s: &str) -> String {
    s.chars().take(80).collect()
}

/// A DNS domain name: ASCII (IDNs in their `xn--` form), lowercased, at least two labels, the
/// single trailing dot of a fully qualified name dropped. IP literals are refused: a mailing
/// domain is a name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DomainName(String);

impl DomainName {
    pub fn parse(input: &str) -> Result<Self, NameError> {
        let refuse = |why| NameError::Domain(excerpt(input), why);
        let s = input.strip_suffix('.').unwrap_or(input);
        if s.is_empty() {
            return Err(refuse("it is empty"));
        }
        if s.len() > 253 {
            return Err(refuse("it is longer than 253 characters"));
        }
        if !s.is_ascii() {
            return Err(refuse("it must be ASCII (write an internationalised name in its xn-- form)"));
        }
        let s = s.to_ascii_lowercase();
        let labels: Vec<&str> = s.split('.').collect();
        if labels.len() < 2 {
            return Err(refuse("it needs at least two labels, as in example.org"));
        }
        for label in &labels {
            if label.is_empty() {
                return Err(refuse("it has an empty label"));
            }
            if label.len() > 63 {
                return Err(refuse("a label is longer than 63 characters"));
            }
            if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(refuse("a label holds a character other than a-z, 0-9 and -"));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(refuse("a label starts or ends with a hyphen"));
            }
        }
        if labels.last().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit())) {
            return Err(refuse("the last label is numeric (an IP address is not a domain name)"));
        }
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An email address `local@domain`. The domain is a [`DomainName`] (compared case-insensitively,
/// stored lowercased); the local part keeps the case it was given (RFC 5321 leaves it to the
/// receiving host) and is restricted to the dot-atom form: quoted local parts are refused, as
/// every mainstream list server does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EmailAddress {
    local: String,
    domain: DomainName,
}

impl EmailAddress {
    pub fn parse(input: &str) -> Result<Self, NameError> {
        let refuse = |why| NameError::Email(excerpt(input), why);
        if input.len() > 254 {
            return Err(refuse("it is longer than 254 characters"));
        }
        let (local, domain) = input.rsplit_once('@').ok_or_else(|| refuse("it has no @"))?;
        if local.is_empty() {
            return Err(refuse("the part before @ is empty"));
        }
        if local.len() > 64 {
            return Err(refuse("the part before @ is longer than 64 characters"));
        }
        // RFC 5322 atext, dot-separated; no empty atoms (leading, trailing or doubled dots).
        const SPECIALS: &[u8] = b"!#$%&'*+-/=?^_`{|}~";
        if local.split('.').any(str::is_empty) {
            return Err(refuse("the part before @ has a leading, trailing or doubled dot"));
        }
        if !local.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || SPECIALS.contains(&b)) {
            return Err(refuse("the part before @ holds a character that is not allowed"));
        }
        // A trailing dot is fine on a bare domain name, not inside an address.
        if domain.ends_with('.') {
            return Err(refuse("the part after @ ends with a dot"));
        }
        let domain = DomainName::parse(domain).map_err(|_| refuse("the part after @ is not a valid domain name"))?;
        Ok(Self { local: local.to_owned(), domain })
    }

    pub fn local_part(&self) -> &str {
        &self.local
    }

    pub fn domain(&self) -> &DomainName {
        &self.domain
    }
}

impl fmt::Display for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.local, self.domain)
    }
}

/// The local part of a list's address (`news` for `news@example.org`), which is also its path
/// segment. Lowercase, so that `News` and `news` cannot be two lists; the suffixes a list server
/// uses for its own command and bounce addresses are reserved.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListName(String);

impl ListName {
    /// Addresses derived from a list's name (`news-bounces@...`, `news-request@...`): a list named
    /// so would collide with another list's own addresses.
    const RESERVED_SUFFIXES: &'static [&'static str] =
        &["-bounces", "-confirm", "-join", "-leave", "-owner", "-request", "-subscribe", "-unsubscribe"];

    pub fn parse(input: &str) -> Result<Self, NameError> {
        let refuse = |why| NameError::List(excerpt(input), why);
        if input.is_empty() {
            return Err(refuse("it is empty"));
        }
        if input.len() > 64 {
            return Err(refuse("it is longer than 64 characters"));
        }
        let s = input.to_ascii_lowercase();
        if !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)) {
            return Err(refuse("it may hold only a-z, 0-9, '.', '_' and '-'"));
        }
        if !s.as_bytes()[0].is_ascii_alphanumeric() || !s.as_bytes()[s.len() - 1].is_ascii_alphanumeric() {
            return Err(refuse("it must start and end with a letter or a digit"));
        }
        if s.contains("..") {
            return Err(refuse("it has a doubled dot"));
        }
        if Self::RESERVED_SUFFIXES.iter().any(|suffix| s.ends_with(suffix)) {
            return Err(refuse("it ends with a suffix reserved for the list server's own addresses"));
        }
        Ok(Self(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ListName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_domain(input: &str, expect: Result<&str, ()>) {
        assert_eq!(DomainName::parse(input).map(|d| d.0).map_err(|_| ()), expect.map(str::to_owned), "{input:?}");
    }

    #[test]
    fn domain_names() {
        check_domain("example.org", Ok("example.org"));
        check_domain("Mail.Example.ORG.", Ok("mail.example.org"));
        check_domain("xn--bcher-kva.example", Ok("xn--bcher-kva.example"));
        check_domain("a-b.c0", Ok("a-b.c0"));
        for bad in [
            "",
            ".",
            "localhost",
            "example..org",
            ".example.org",
            "-a.org",
            "a-.org",
            "a_b.org",
            "bücher.example",
            "127.0.0.1",
            "a.b.c.1",
            "exa mple.org",
            "example.org..",
        ] {
            check_domain(bad, Err(()));
        }
        check_domain(&format!("{}.org", "a".repeat(63)), Ok(&format!("{}.org", "a".repeat(63))));
        check_domain(&format!("{}.org", "a".repeat(64)), Err(()));
        let long = vec!["abcdefghi"; 26].join("."); // 259 characters
        check_domain(&long, Err(()));
    }

    fn check_email(input: &str, expect: Result<&str, ()>) {
        assert_eq!(
            EmailAddress::parse(input).map(|e| e.to_string()).map_err(|_| ()),
            expect.map(str::to_owned),
            "{input:?}"
        );
    }

    #[test]
    fn email_addresses() {
        check_email("Alice@Example.ORG", Ok("Alice@example.org"));
        check_email("a.b+tag@example.org", Ok("a.b+tag@example.org"));
        check_email("o'brien@example.ie", Ok("o'brien@example.ie"));
        check_email("x@sub.example.co.uk", Ok("x@sub.example.co.uk"));
        for bad in [
            "",
            "@",
            "a@",
            "@example.org",
            "a@@example.org",
            "a@example",
            "a..b@example.org",
            ".a@example.org",
            "a.@example.org",
            "a b@example.org",
            "\"a\"@example.org",
            "a@example.org.",
            "a@127.0.0.1",
            "a@[127.0.0.1]",
            "é@example.org",
            "a@b@c.org",
            "a\r\nBcc: x@evil.org@example.org",
        ] {
            check_email(bad, Err(()));
        }
        check_email(&format!("{}@example.org", "a".repeat(64)), Ok(&format!("{}@example.org", "a".repeat(64))));
        check_email(&format!("{}@example.org", "a".repeat(65)), Err(()));
    }

    #[test]
    fn email_equality_ignores_domain_case_only() {
        let a = EmailAddress::parse("Bob@EXAMPLE.org").unwrap();
        let b = EmailAddress::parse("Bob@example.org").unwrap();
        let c = EmailAddress::parse("bob@example.org").unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.local_part(), "Bob");
        assert_eq!(a.domain().as_str(), "example.org");
    }

    fn check_list(input: &str, expect: Result<&str, ()>) {
        assert_eq!(ListName::parse(input).map(|l| l.0).map_err(|_| ()), expect.map(str::to_owned), "{input:?}");
    }

    #[test]
    fn list_names() {
        check_list("news", Ok("news"));
        check_list("News-Letter_2.fr", Ok("news-letter_2.fr"));
        check_list("a", Ok("a"));
        for bad in [
            "",
            "-news",
            "news-",
            ".news",
            "news.",
            "ne..ws",
            "ne ws",
            "ne/ws",
            "news@example.org",
            "news-bounces",
            "news-request",
            "news-owner",
            "nouvé",
        ] {
            check_list(bad, Err(()));
        }
        check_list(&"a".repeat(64), Ok(&"a".repeat(64)));
        check_list(&"a".repeat(65), Err(()));
    }

    #[test]
    fn errors_name_the_rule_and_shorten_the_input() {
        let err = DomainName::parse(&"x".repeat(500)).unwrap_err().to_string();
        assert!(err.contains("longer than 253"), "{err}");
        assert!(err.len() < 200, "{err}");
    }
}
