//! What an upload is, decided by its first bytes (never by its name or declared type).

/// The kinds of document the service takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    Pdf,
    Jpeg,
    Png,
    Tiff,
    Text,
    /// An XML document: a CII (Factur-X, XRechnung) or UBL invoice is read as one.
    Xml,
}

impl DocumentKind {
    /// The stored and wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            DocumentKind::Pdf => "pdf",
            DocumentKind::Jpeg => "jpeg",
            DocumentKind::Png => "png",
            DocumentKind::Tiff => "tiff",
            DocumentKind::Text => "text",
            DocumentKind::Xml => "xml",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pdf, Self::Jpeg, Self::Png, Self::Tiff, Self::Text, Self::Xml].into_iter().find(|k| k.as_str() == s)
    }

    /// An image the service OCRs directly (not through the PDF reader).
    pub fn is_image(self) -> bool {
        matches!(self, DocumentKind::Jpeg | DocumentKind::Png | DocumentKind::Tiff)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SniffError {
    #[error("the document is empty")]
    Empty,
    #[error("the document is neither a PDF, a JPEG, a PNG, a TIFF, XML nor UTF-8 text")]
    Unknown,
}

/// Decides the kind from the magic bytes. A PDF's header may follow up to 1024 bytes of junk (as
/// PDF readers accept); text must be valid UTF-8 without NUL or other binary control characters,
/// and is XML when it opens with an XML declaration or a root element.
pub fn sniff(bytes: &[u8]) -> Result<DocumentKind, SniffError> {
    if bytes.is_empty() {
        return Err(SniffError::Empty);
    }
    let head = &bytes[..bytes.len().min(1024)];
    if head.windows(5).any(|w| w == b"%PDF-") {
        return Ok(DocumentKind::Pdf);
    }
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Ok(DocumentKind::Jpeg);
    }
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Ok(DocumentKind::Png);
    }
    if bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*") {
        return Ok(DocumentKind::Tiff);
    }
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match std::str::from_utf8(text) {
        Ok(s)
            if !s.trim().is_empty()
                && s.chars().all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t' | '\x0c')) =>
        {
            let head = s.trim_start();
            let element =
                head.strip_prefix('<').and_then(|r| r.chars().next()).is_some_and(|c| c.is_ascii_alphabetic());
            Ok(if head.starts_with("<?xml") || element { DocumentKind::Xml } else { DocumentKind::Text })
        }
        _ => Err(SniffError::Unknown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &[u8], expect: Result<DocumentKind, SniffError>) {
        assert_eq!(sniff(input), expect, "{:?}", String::from_utf8_lossy(&input[..input.len().min(20)]));
    }

    #[test]
    fn kinds_come_from_magic_bytes() {
        check(b"%PDF-1.7\n...", Ok(DocumentKind::Pdf));
        check(b"\r\n%PDF-1.4", Ok(DocumentKind::Pdf));
        check(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10], Ok(DocumentKind::Jpeg));
        check(b"\x89PNG\r\n\x1a\n\0\0", Ok(DocumentKind::Png));
        check(b"II*\0\x08\0", Ok(DocumentKind::Tiff));
        check(b"MM\0*\0\0\0\x08", Ok(DocumentKind::Tiff));
        check("Total TTC : 120,00 \u{20ac}\n".as_bytes(), Ok(DocumentKind::Text));
        check(b"\xEF\xBB\xBFhello", Ok(DocumentKind::Text));
        check(b"<?xml version=\"1.0\"?><Invoice/>", Ok(DocumentKind::Xml));
        check(b"\n  <rsm:CrossIndustryInvoice>", Ok(DocumentKind::Xml));
        check(b"< 3 apples", Ok(DocumentKind::Text));
        check(b"", Err(SniffError::Empty));
        check(b"   \n", Err(SniffError::Unknown));
        check(b"PK\x03\x04zip", Err(SniffError::Unknown));
        check(b"text with a NUL\0", Err(SniffError::Unknown));
        check(&[0xC3, 0x28], Err(SniffError::Unknown));
    }

    #[test]
    fn kinds_round_trip_through_their_stored_form() {
        for k in [
            DocumentKind::Pdf,
            DocumentKind::Jpeg,
            DocumentKind::Png,
            DocumentKind::Tiff,
            DocumentKind::Text,
            DocumentKind::Xml,
        ] {
            assert_eq!(DocumentKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(DocumentKind::parse("zip"), None);
    }
}
