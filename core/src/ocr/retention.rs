//! Retention (decisions.md): a document (its record, text, `meta` and stored file; page images and
//! cuts are made from the file on demand, never kept) is deleted `COURRIER_OCR_RETENTION_DAYS` after
//! its upload by the housekeeping ([`sweep`]), and at once when its user is deleted
//! ([`UserDocuments`], the access context's `UserData` port). The month's usage stays after a
//! retention sweep (counts, no content); it goes with the user.
//!
//! The document store is content-addressed: two documents with the same bytes share one file, so a
//! file is removed only once no document names it. An upload stores the file before it commits
//! its record; [`BLOB_GATE`] keeps a removal from slipping between the two within this process,
//! and the store's [`BlobStore::hold`] across the processes sharing the store.

use super::Service;
use super::blobs::{BlobId, BlobStore};
use super::documents::DocumentError;
use crate::access::model::UserId;
use crate::kernel::Timestamp;
use crate::storage::{StoreError, in_read, in_write};
use std::sync::{Arc, RwLock};

/// Uploads hold it shared from storing their file until their record is committed; removals hold
/// it alone from checking a file is unused until it is gone. Taken before the store's own
/// cross-process hold (one order everywhere), it also keeps this process's threads from queueing
/// on the lock file or advisory lock one by one.
pub(super) static BLOB_GATE: RwLock<()> = RwLock::new(());

const MICROS_PER_DAY: f64 = 86_400.0 * 1_000_000.0;
/// Documents deleted per transaction, so a sweep never holds the write turn for long.
const BATCH: u32 = 500;

/// How long documents are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// `0`: kept until their user deletes their account.
    Forever,
    /// Deleted this many microseconds after their upload.
    After { micros: i64 },
}

impl Retention {
    /// The decisions' default: 90 days.
    pub const DEFAULT: Retention = Retention::After { micros: 90 * 86_400 * 1_000_000 };
    /// The longest retention accepted, 100 years.
    pub const MAX_DAYS: f64 = 36_500.0;

    /// `days` as configured: 0 keeps documents for ever; a fraction is allowed (`0.5` is 12 hours).
    /// `None` for a negative, non-finite or too large number, or one under a microsecond.
    pub fn from_days(days: f64) -> Option<Self> {
        if !days.is_finite() || !(0.0..=Self::MAX_DAYS).contains(&days) {
            return None;
        }
        if days == 0.0 {
            return Some(Retention::Forever);
        }
        let micros = (days * MICROS_PER_DAY).round() as i64;
        (micros > 0).then_some(Retention::After { micros })
    }

    /// Documents uploaded before this are due at `now`.
    pub fn cutoff(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            Retention::Forever => None,
            Retention::After { micros } => Some(Timestamp::from_unix_micros(now.unix_micros().saturating_sub(micros))),
        }
    }

    /// How often the housekeeping should sweep: a tenth of the retention, between a second and an
    /// hour, so a document outlives its retention by at most that.
    pub fn sweep_every(self) -> Option<std::time::Duration> {
        match self {
            Retention::Forever => None,
            Retention::After { micros } => {
                let micros = u64::try_from(micros / 10).unwrap_or(0).clamp(1_000_000, 3_600_000_000);
                Some(std::time::Duration::from_micros(micros))
            }
        }
    }
}

/// Deletes the documents past the retention and the files no document names any more; how many
/// documents were deleted.
pub fn sweep(app: &Service) -> Result<usize, DocumentError> {
    let Some(cutoff) = app.limits.retention.cutoff(app.clock.now()) else { return Ok(0) };
    let mut deleted = 0;
    loop {
        let blobs = in_write(&*app.store, |tx| tx.delete_ocr_documents_before(cutoff, BATCH))?;
        let n = blobs.len();
        remove_unused(&*app.store, &*app.blobs, blobs)?;
        deleted += n;
        if n < BATCH as usize {
            return Ok(deleted);
        }
    }
}

/// Removes each file no document names (one still named by another document stays).
fn remove_unused(
    store: &super::ports::Store,
    blobs: &dyn BlobStore,
    mut ids: Vec<BlobId>,
) -> Result<(), DocumentError> {
    ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    ids.dedup();
    for id in &ids {
        let _alone = BLOB_GATE.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _alone_everywhere = blobs.hold(super::blobs::Hold::Removal)?;
        if !in_read(store, |tx| tx.ocr_blob_in_use(id))? {
            blobs.delete(id)?;
        }
    }
    Ok(())
}

/// The OCR service's documents, usage and plan of a user, deleted with the account. Built by the
/// composition root from the OCR store and document store (not the OCR service, which holds the
/// access service: no cycle).
pub struct UserDocuments {
    pub store: Arc<super::ports::Store>,
    pub blobs: Arc<dyn BlobStore>,
}

impl crate::access::ports::UserData for UserDocuments {
    fn erase(&self, user: UserId) -> Result<(), StoreError> {
        let blobs = in_write(&*self.store, |tx| tx.delete_ocr_user_records(user))?;
        remove_unused(&*self.store, &*self.blobs, blobs).map_err(|e| match e {
            DocumentError::Store(e) => e,
            other => StoreError::Backend(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_as_configured() {
        assert_eq!(Retention::from_days(0.0), Some(Retention::Forever));
        assert_eq!(Retention::from_days(90.0), Some(Retention::DEFAULT));
        assert_eq!(Retention::from_days(0.5), Some(Retention::After { micros: 43_200_000_000 }));
        for bad in [-1.0, f64::NAN, f64::INFINITY, 36_501.0, 1e-12] {
            assert_eq!(Retention::from_days(bad), None, "{bad}");
        }
    }

    #[test]
    fn cutoff_and_sweep_period() {
        let now = Timestamp::from_unix_secs(1_000_000);
        assert_eq!(Retention::Forever.cutoff(now), None);
        assert_eq!(Retention::Forever.sweep_every(), None);
        let day = Retention::from_days(1.0).unwrap();
        assert_eq!(day.cutoff(now), Some(Timestamp::from_unix_secs(1_000_000 - 86_400)));
        assert_eq!(day.sweep_every(), Some(std::time::Duration::from_secs(3_600)));
        let tiny = Retention::from_days(0.00001).unwrap();
        assert_eq!(tiny.sweep_every(), Some(std::time::Duration::from_secs(1)));
    }
}
