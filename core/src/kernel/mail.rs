//! The mail-transport port, and the small composer of the installation's own notices
//! (invitations, confirmations, login links): plain text, UTF-8, quoted-printable, so they pass
//! any relay. List messages get their own composer (List-* headers, DKIM) with the sends.

use super::{EmailAddress, Timestamp, secrets};
use std::fmt::Write as _;

/// One message to hand to a relay: the SMTP envelope and the RFC 5322 bytes (CRLF line ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// `MAIL FROM`; `None` is the null reverse-path `<>`.
    pub envelope_from: Option<EmailAddress>,
    pub recipients: Vec<EmailAddress>,
    pub data: Vec<u8>,
}

/// Why a relay did not take a message. Temporary failures are retried; permanent ones are not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// A 4xx reply, a refused or dropped connection, a time-out.
    #[error("temporary mail failure: {0}")]
    Temporary(String),
    /// A 5xx reply: the relay will not take it as it is.
    #[error("permanent mail failure: {0}")]
    Permanent(String),
}

impl super::CoreError for SendError {
    fn code(&self) -> super::Code {
        super::Code::MailUnavailable
    }
}

/// The mail-transport port: the SMTP relay in production, a recording fake in unit tests.
pub trait MailTransport: Send + Sync {
    fn send(&self, message: &OutgoingMessage) -> Result<(), SendError>;
}

/// A notice from the installation to one person.
pub struct Notice<'a> {
    pub from: &'a EmailAddress,
    pub to: &'a EmailAddress,
    pub subject: &'a str,
    pub body: &'a str,
    pub date: Timestamp,
}

impl Notice<'_> {
    pub fn compose(&self) -> OutgoingMessage {
        let mut out = String::new();
        let domain = self.from.domain().as_str();
        let _ = write!(out, "From: {}\r\n", self.from);
        let _ = write!(out, "To: {}\r\n", self.to);
        let _ = write!(out, "Subject: {}\r\n", encode_header_text(self.subject));
        let _ = write!(out, "Date: {}\r\n", rfc5322_date(self.date));
        let _ = write!(out, "Message-ID: <{}@{domain}>\r\n", secrets::random_hex(16));
        out.push_str("MIME-Version: 1.0\r\n");
        out.push_str("Content-Type: text/plain; charset=utf-8\r\n");
        out.push_str("Content-Transfer-Encoding: quoted-printable\r\n");
        out.push_str("Auto-Submitted: auto-generated\r\n\r\n");
        out.push_str(&quoted_printable(self.body));
        OutgoingMessage {
            envelope_from: Some(self.from.clone()),
            recipients: vec![self.to.clone()],
            data: out.into_bytes(),
        }
    }
}

/// RFC 2047 encoded-word (base64) when the text is not plain printable ASCII.
pub(crate) fn encode_header_text(text: &str) -> String {
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if clean.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return clean;
    }
    format!("=?utf-8?B?{}?=", base64(clean.as_bytes()))
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Quoted-printable (RFC 2045) with CRLF line ends and soft breaks under 76 characters.
pub(crate) fn quoted_printable(text: &str) -> String {
    let mut out = String::new();
    for line in text.replace("\r\n", "\n").split('\n') {
        let mut width = 0;
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            let last = i + 1 == bytes.len();
            let literal = (b == b' ' || b == b'\t') && !last || (33..=126).contains(&b) && b != b'=';
            let piece = if literal { (b as char).to_string() } else { format!("={b:02X}") };
            if width + piece.len() > 75 {
                out.push_str("=\r\n");
                width = 0;
            }
            width += piece.len();
            out.push_str(&piece);
        }
        out.push_str("\r\n");
    }
    out
}

pub(crate) fn rfc5322_date(t: Timestamp) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let iso = t.to_rfc3339(); // 2026-11-23T09:20:49.123456Z
    let day = DAYS[t.unix_secs().div_euclid(86_400).rem_euclid(7) as usize];
    let month: usize = iso[5..7].parse().unwrap_or(1);
    format!("{day}, {} {} {} {} +0000", &iso[8..10], MONTHS[month - 1], &iso[0..4], &iso[11..19])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composes_a_seven_bit_message_with_crlf() {
        let from = EmailAddress::parse("noreply@lists.example.org").unwrap();
        let to = EmailAddress::parse("anna@example.com").unwrap();
        let body = format!("Bonjour Anna, cliquez : https://x.example/p/password/abc\n{}\nfin", "é".repeat(60));
        let n = Notice {
            from: &from,
            to: &to,
            subject: "Invitation à Courrier",
            body: &body,
            date: Timestamp::from_unix_secs(1_795_425_649),
        };
        let m = n.compose();
        let text = String::from_utf8(m.data.clone()).unwrap();
        assert!(text.is_ascii(), "{text}");
        assert!(text.contains("Subject: =?utf-8?B?SW52aXRhdGlvbiDDoCBDb3Vycmllcg==?=\r\n"), "{text}");
        assert!(text.contains("Date: Mon, 23 Nov 2026 09:20:49 +0000\r\n"), "{text}");
        assert!(text.contains("https://x.example/p/password/abc"), "{text}");
        assert!(text.lines().all(|l| l.len() <= 78), "{text}");
        assert!(!text.replace("\r\n", "").contains('\n'), "bare LF");
        assert_eq!(m.recipients, vec![to]);
    }

    #[test]
    fn header_text_cannot_inject_headers() {
        assert_eq!(encode_header_text("a\r\nBcc: x@evil.org"), "a  Bcc: x@evil.org");
    }

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (i, o) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }
}
