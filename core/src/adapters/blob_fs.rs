//! The document store on disk: `documents/<2 hex>/<62 hex>`, named by the SHA-256 of the content,
//! so the same file sent twice is stored once. Written to a temporary file, synced, then renamed
//! into place and the directory synced: a crash leaves either no file or the whole file.

use crate::kernel::secrets;
use crate::ocr::blobs::{BlobError, BlobId, BlobStore};
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

impl BlobStore for FsBlobStore {
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
