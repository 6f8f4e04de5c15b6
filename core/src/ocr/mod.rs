//! The OCR document service: documents taken in (type decided by content), their text taken from a
//! PDF's text layer or recognised by an OCR engine, pages turned into JPEGs, the document store,
//! and maintenance mode. Reaches the world only through the ports declared here and in `engine`,
//! `pdf`, `images` and `blobs`, whose adapters live in `crate::adapters`.

pub mod accounts;
pub mod blobs;
pub mod cuts;
pub mod deskew;
pub mod documents;
pub mod engine;
pub mod images;
pub mod intake;
pub mod invoice;
pub mod maintenance;
pub mod pdf;
pub mod software;
pub mod status;
pub mod suppliers;
pub mod templates;
pub mod usage;
pub mod wrap;
pub mod zones;

use std::sync::Arc;

/// The adapters the OCR rules use, wired once by the binary.
pub struct OcrServices {
    pub engine: Arc<dyn engine::OcrEngine>,
    pub pdf: Arc<dyn pdf::PdfReader>,
    pub images: Arc<dyn images::ImageCodec>,
    pub blobs: Arc<dyn blobs::BlobStore>,
    pub limits: OcrLimits,
}

/// Documented limits of the OCR service.
#[derive(Debug, Clone, Copy)]
pub struct OcrLimits {
    /// The largest upload accepted (the file part); larger answers 413.
    pub max_document_bytes: usize,
    /// Pages of one PDF read at most; a longer document is refused rather than half-read.
    pub max_pages: u32,
    /// The `default` plan's pages per user and month (`COURRIER_OCR_PAGES_PER_MONTH`); 0 is no
    /// limit.
    pub pages_per_month: u32,
}

impl Default for OcrLimits {
    fn default() -> Self {
        Self { max_document_bytes: 20 * 1024 * 1024, max_pages: 50, pages_per_month: 0 }
    }
}
