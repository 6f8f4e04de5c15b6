//! The document store on disk: `documents/<2 hex>/<62 hex>`, named by the SHA-256 of the content,
//! so the same file sent twice is stored once. Written to a temporary file, synced, then renamed
//! into place and the directory synced: a crash leaves either no file or the whole file.

use crate::kernel::secrets;
use crate::ocr::blobs::{BlobError, BlobHold, BlobId, BlobStore, Hold};
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct FsBlobStore {
    dir: PathBuf,
}

impl FsBlobStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn path_of(&self, id: &BlobId) -> PathBuf {
        let (head, rest) = id.as_str().split_at(2);
        self.dir.join(head).join(rest)
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The lock file every process sharing the directory `flock`s (shared to store, alone to remove):
/// the kernel (or the NFS server's lock manager, for a directory several hosts mount) orders them,
/// and a process that dies lets go with its descriptors.
const GATE: &str = ".blob-gate";

impl BlobStore for FsBlobStore {
    fn hold(&self, hold: Hold) -> Result<BlobHold, BlobError> {
        std::fs::create_dir_all(&self.dir)?;
        let file = std::fs::File::options().create(true).truncate(false).write(true).open(self.dir.join(GATE))?;
        match hold {
            Hold::Store => file.lock_shared()?,
            Hold::Removal => file.lock()?,
        }
        Ok(BlobHold::new(file))
    }

    fn put(&self, bytes: &[u8]) -> Result<BlobId, BlobError> {
        let id = BlobId::of(bytes);
        let path = self.path_of(&id);
        if path.is_file() {
            return Ok(id);
        }
        let parent = path.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(parent)?;
        let tmp = self.dir.join(format!(".tmp-{}", secrets::random_hex(8)));
        let written = (|| {
            let mut f = std::fs::File::create_new(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            sync_dir(parent)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        Ok(id)
    }

    fn get(&self, id: &BlobId) -> Result<Vec<u8>, BlobError> {
        match std::fs::read(self.path_of(id)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(BlobError::Missing(id.as_str().to_owned())),
            other => Ok(other?),
        }
    }

    fn delete(&self, id: &BlobId) -> Result<(), BlobError> {
        let path = self.path_of(id);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
            // Synced, so that a deletion the user was told of survives a crash.
            Ok(()) => Ok(sync_dir(path.parent().unwrap_or(&self.dir))?),
        }
    }

    fn ready(&self) -> Result<(), BlobError> {
        let probe = self.dir.join(format!(".ready-{}", secrets::random_hex(4)));
        std::fs::write(&probe, b"ok")?;
        std::fs::remove_file(&probe)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What another process sees: its own open of the lock file (a `flock` belongs to the open
    /// file, so two opens in one process conflict as two processes would).
    fn another_process_may(dir: &Path, hold: Hold) -> bool {
        let file = std::fs::File::options().write(true).open(dir.join(GATE)).unwrap();
        let tried = match hold {
            Hold::Store => file.try_lock_shared(),
            Hold::Removal => file.try_lock(),
        };
        tried.is_ok()
    }

    #[test]
    fn a_store_in_progress_holds_off_every_process_s_removals_and_a_removal_holds_off_stores() {
        let dir = tempfile::tempdir().unwrap();
        let one = FsBlobStore::new(dir.path().join("docs"));
        let docs = dir.path().join("docs");
        let storing = one.hold(Hold::Store).unwrap();
        assert!(!another_process_may(&docs, Hold::Removal), "a removal waits for the upload's commit");
        assert!(another_process_may(&docs, Hold::Store), "uploads do not wait for one another");
        drop(storing);
        assert!(another_process_may(&docs, Hold::Removal));
        let removing = FsBlobStore::new(&docs).hold(Hold::Removal).unwrap();
        assert!(!another_process_may(&docs, Hold::Store), "an upload waits for the removal to end");
        drop(removing);
        assert!(another_process_may(&docs, Hold::Store));
    }

    #[test]
    fn stores_once_by_content_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsBlobStore::new(dir.path());
        let a = store.put(b"hello").unwrap();
        assert_eq!(store.put(b"hello").unwrap(), a);
        assert_eq!(store.get(&a).unwrap(), b"hello");
        let missing = BlobId::of(b"never stored");
        assert!(matches!(store.get(&missing), Err(BlobError::Missing(_))));
        // No temporary file is left behind.
        let leftovers = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".tmp"));
        assert_eq!(leftovers.count(), 0);
        store.ready().unwrap();
        store.delete(&a).unwrap();
        assert!(matches!(store.get(&a), Err(BlobError::Missing(_))));
        store.delete(&a).unwrap();
    }

    #[test]
    fn passes_the_blob_store_suite() {
        let dir = tempfile::tempdir().unwrap();
        crate::ocr::store_suite::blob_store_keeps_content_by_its_hash(&FsBlobStore::new(dir.path()));
    }
}
