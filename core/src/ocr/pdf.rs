//! The PDF reader port. PDFs are untrusted and their parsers can abort (a stack overflow on
//! nested arrays) or inflate bombs whole, so the real adapter runs them in a sandboxed child
//! process; this port only sees what comes back.

use super::engine::GrayImage;

/// One page as the reader hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PdfPage {
    /// The page's text layer, laid out as `pdftotext -layout` lays it out.
    Text(String),
    /// The page holds exactly one JPEG and no text: the JPEG as it is embedded, byte for byte.
    Jpeg(Vec<u8>),
    /// A scanned page of another kind, rendered.
    Rendered(GrayImage),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PdfError {
    #[error("the PDF is encrypted; send it without a password")]
    Encrypted,
    #[error("the PDF cannot be read: {0}")]
    Unreadable(String),
    #[error("the PDF exceeded the reader's limits ({0}); it may be malicious or too complex")]
    LimitExceeded(String),
    #[error("the PDF has {pages} pages, more than the {max} the service reads")]
    TooManyPages { pages: u32, max: u32 },
    #[error("the document has no page {0}")]
    NoSuchPage(u32),
    #[error("the PDF reader is not available: {0}")]
    Unavailable(String),
}

pub trait PdfReader: Send + Sync {
    /// Every page: its text layer, else its image (for OCR). More than `max_pages` pages is an
    /// error, not a partial read.
    fn content(&self, pdf: &[u8], max_pages: u32) -> Result<Vec<PdfPage>, PdfError>;

    /// Page `page` (1-based) as an image whether or not it has text (for JPEG output), with the
    /// document's page count. Never [`PdfPage::Text`].
    fn page_image(&self, pdf: &[u8], page: u32) -> Result<(u32, PdfPage), PdfError>;

    /// The embedded invoice XML (when `invoice_xml` would find one) and every page, read as one
    /// document: the sandbox does it in one process, under one deadline and one CPU budget.
    fn document(&self, pdf: &[u8], max_pages: u32) -> Result<(Option<Vec<u8>>, Vec<PdfPage>), PdfError> {
        let xml = self.invoice_xml(pdf)?;
        Ok((xml, self.content(pdf, max_pages)?))
    }

    /// The structured invoice a Factur-X / ZUGFeRD / XRechnung PDF carries as an attached file
    /// (`factur-x.xml`, `zugferd-invoice.xml`, `xrechnung.xml`, ...), as its bytes; `None` when it
    /// carries none. Readers that cannot look (test fakes) answer `None`.
    fn invoice_xml(&self, pdf: &[u8]) -> Result<Option<Vec<u8>>, PdfError> {
        let _ = pdf;
        Ok(None)
    }
}
