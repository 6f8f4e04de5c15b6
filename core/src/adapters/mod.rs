//! Adapters: the only modules of core that import an outside library to reach the world (a network,
//! files, Tesseract, the system clock). Each implements a port that core's rules use. The store's
//! adapters are crates of their own (`courrier-store-sqlite`, `courrier-store-postgres`): core
//! depends on no database crate, so no rule can reach SQL.

pub mod blob_fs;
pub mod data_key;
pub mod dns;
pub mod https;
pub mod image_codec;
pub mod job_files;
pub mod mail_accounts;
pub mod mail_auth_dkim;
pub mod mime;
pub mod open_files;
pub mod openssl_dkim;
pub mod pdf_attachments;
pub mod pdf_sandbox;
pub mod smtp;
pub mod system_clock;
pub mod tesseract;

/// The OCR service's real adapters: documents under `documents_dir`, PDFs read by
/// `<sandbox_exe> sandbox` (at most `ocr_workers` at once), Tesseract on `ocr_workers` threads.
pub fn ocr_adapters(
    documents_dir: &std::path::Path,
    sandbox_exe: std::path::PathBuf,
    ocr_workers: usize,
) -> crate::ocr::Adapters {
    let sandbox = pdf_sandbox::SandboxLimits { max_helpers: ocr_workers, ..pdf_sandbox::SandboxLimits::default() };
    ocr_adapters_with(documents_dir, sandbox_exe, ocr_workers, sandbox)
}

/// As [`ocr_adapters`], the PDF sandbox's limits given.
pub fn ocr_adapters_with(
    documents_dir: &std::path::Path,
    sandbox_exe: std::path::PathBuf,
    ocr_workers: usize,
    sandbox: pdf_sandbox::SandboxLimits,
) -> crate::ocr::Adapters {
    use std::sync::Arc;
    crate::ocr::Adapters {
        engine: Arc::new(tesseract::TesseractPool::new(ocr_workers)),
        pdf: Arc::new(pdf_sandbox::SandboxedPdfReader::new(sandbox_exe, sandbox)),
        images: Arc::new(image_codec::ImageCrateCodec),
        blobs: Arc::new(blob_fs::FsBlobStore::new(documents_dir)),
        limits: crate::ocr::OcrLimits::default(),
    }
}
