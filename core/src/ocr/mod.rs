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
pub mod model;
pub mod pdf;
pub mod ports;
pub mod retention;
pub mod software;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod store_suite;
pub mod suppliers;
pub mod templates;
pub mod usage;
pub mod wrap;
pub mod zones;

use std::sync::Arc;

/// The OCR context, wired once by the composition root: only the ports its rules use.
pub struct Service {
    /// The OCR service's login makes API keys; its routes authenticate with them.
    pub access: Arc<crate::access::Service>,
    pub store: Arc<ports::Store>,
    pub clock: Arc<dyn crate::kernel::Clock>,
    pub engine: Arc<dyn engine::OcrEngine>,
    pub pdf: Arc<dyn pdf::PdfReader>,
    pub images: Arc<dyn images::ImageCodec>,
    pub blobs: Arc<dyn blobs::BlobStore>,
    pub limits: OcrLimits,
}

/// The OCR service's own adapters (engine, PDF reader, images, blobs) and limits, made by
/// `crate::adapters::ocr_adapters`, before the context's service is wired around them.
pub struct Adapters {
    pub engine: Arc<dyn engine::OcrEngine>,
    pub pdf: Arc<dyn pdf::PdfReader>,
    pub images: Arc<dyn images::ImageCodec>,
    pub blobs: Arc<dyn blobs::BlobStore>,
    pub limits: OcrLimits,
}

impl Service {
    pub fn new(
        access: Arc<crate::access::Service>,
        store: Arc<ports::Store>,
        clock: Arc<dyn crate::kernel::Clock>,
        adapters: Adapters,
    ) -> Self {
        let Adapters { engine, pdf, images, blobs, limits } = adapters;
        Self { access, store, clock, engine, pdf, images, blobs, limits }
    }
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
    /// How long documents are kept (`COURRIER_OCR_RETENTION_DAYS`, default 90 days).
    pub retention: retention::Retention,
}

impl Default for OcrLimits {
    fn default() -> Self {
        Self {
            max_document_bytes: 20 * 1024 * 1024,
            max_pages: 50,
            pages_per_month: 0,
            retention: retention::Retention::DEFAULT,
        }
    }
}
