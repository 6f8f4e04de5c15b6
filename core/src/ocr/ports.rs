//! The OCR context's storage port: its transaction is the access context's plus the documents'
//! records, the maintenance switch, the supplier directory, learned zones, usage and plans, and
//! client software records. (The engine, PDF, image and blob ports are in `engine`, `pdf`,
//! `images` and `blobs`.)

use crate::access::model::UserId;
use crate::kernel::{Page, Paged};
use crate::storage::StoreError;

/// One transaction of the OCR context. Dropped without `commit`, it rolls back.
pub trait Tx: crate::access::ports::Tx + OcrRepo + InvoiceRepo {}

/// The database as the OCR context sees it.
pub type Store = dyn crate::storage::Store<dyn Tx>;

/// OCR documents' records and the maintenance switch.
pub trait OcrRepo {
    /// [`StoreError::Duplicate`] when the ocrID exists (128 random bits: never in practice).
    fn insert_ocr_document(&mut self, document: &super::model::Document) -> Result<(), StoreError>;
    fn ocr_document(&mut self, id: &super::model::OcrId) -> Result<Option<super::model::Document>, StoreError>;
    /// Newest first.
    fn ocr_documents_in_state(
        &mut self,
        state: super::model::DocumentState,
        page: Page,
    ) -> Result<Paged<super::model::Document>, StoreError>;
    /// Deletes up to `limit` documents uploaded before `cutoff`, oldest first; the file each named
    /// (a file may be named by several documents, or by a document left undeleted).
    fn delete_ocr_documents_before(
        &mut self,
        cutoff: crate::kernel::Timestamp,
        limit: u32,
    ) -> Result<Vec<super::blobs::BlobId>, StoreError>;
    /// Deletes every document of `user`, their usage and their plan (the account is being
    /// deleted); the files the documents named.
    fn delete_ocr_user_records(&mut self, user: UserId) -> Result<Vec<super::blobs::BlobId>, StoreError>;
    /// Whether a document still names this stored file.
    fn ocr_blob_in_use(&mut self, blob: &super::blobs::BlobId) -> Result<bool, StoreError>;
    fn ocr_maintenance(&mut self) -> Result<super::model::Maintenance, StoreError>;
    fn set_ocr_maintenance(&mut self, state: super::model::Maintenance) -> Result<(), StoreError>;
}

/// Invoices (issue 7): the supplier directory, zones learned per supplier, usage and plans,
/// client software records.
pub trait InvoiceRepo {
    fn supplier_by_id(&mut self, id: super::model::SupplierId) -> Result<Option<super::model::Supplier>, StoreError>;
    fn supplier_by_vat(&mut self, vat: &super::model::VatNumber) -> Result<Option<super::model::Supplier>, StoreError>;
    /// By folded name; the most recently updated when several share it.
    fn supplier_by_name(&mut self, name_key: &str) -> Result<Option<super::model::Supplier>, StoreError>;
    fn insert_supplier(&mut self, supplier: &super::model::Supplier) -> Result<super::model::SupplierId, StoreError>;
    fn update_supplier(&mut self, supplier: &super::model::Supplier) -> Result<(), StoreError>;
    /// Adds one confirmation of a zone: a new zone, or the known one moved to this rect with its
    /// count increased.
    fn confirm_supplier_zone(
        &mut self,
        supplier: super::model::SupplierId,
        zone: &super::model::LearnedZone,
    ) -> Result<(), StoreError>;
    /// Most confirmed first, then by name.
    fn supplier_zones(
        &mut self,
        supplier: super::model::SupplierId,
    ) -> Result<Vec<super::model::LearnedZone>, StoreError>;
    fn add_ocr_usage(&mut self, user: UserId, month: &str, delta: &super::model::MonthUsage) -> Result<(), StoreError>;
    /// Newest month first.
    fn ocr_usage_of(&mut self, user: UserId) -> Result<Vec<super::model::MonthUsage>, StoreError>;
    fn ocr_plan(&mut self, user: UserId) -> Result<Option<u32>, StoreError>;
    fn set_ocr_plan(&mut self, user: UserId, pages_per_month: Option<u32>) -> Result<(), StoreError>;
    /// By id.
    fn software_list(&mut self) -> Result<Vec<super::model::Software>, StoreError>;
    fn software(&mut self, id: &super::model::SoftwareId) -> Result<Option<super::model::Software>, StoreError>;
    fn insert_software(&mut self, record: &super::model::Software) -> Result<(), StoreError>;
    fn update_software(&mut self, record: &super::model::Software) -> Result<(), StoreError>;
    /// Whether a record was deleted.
    fn delete_software(&mut self, id: &super::model::SoftwareId) -> Result<bool, StoreError>;
}
