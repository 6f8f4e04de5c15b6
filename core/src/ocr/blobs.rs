//! The document store port: files kept by the SHA-256 of their content.

use crate::kernel::secrets;

/// The name of a stored file: the lowercase hex SHA-256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobId(String);

impl BlobId {
    pub fn of(bytes: &[u8]) -> Self {
        Self(secrets::sha256_hex(bytes))
    }

    /// A stored id, checked: 64 lowercase hex digits (it becomes a path on disk).
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
            .then(|| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    #[error("the document store failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the stored document {0} is missing")]
    Missing(String),
}

/// What a [`BlobHold`] is held for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Shared: from storing a file until the record naming it is committed.
    Store,
    /// Alone: from judging a file unused until it is removed.
    Removal,
}

/// A hold on the store, released when dropped.
pub struct BlobHold(#[allow(dead_code, reason = "held for its drop")] Box<dyn Send>);

impl BlobHold {
    pub fn new(held: impl Send + 'static) -> Self {
        Self(Box::new(held))
    }
}

pub trait BlobStore: Send + Sync {
    /// Orders uploads and removals across EVERY process sharing this store (servers on one
    /// PostgreSQL, `courrier worker` or a CLI command beside `serve`). Files are shared by
    /// content: without it, a removal in one process could judge a file unused and delete it just
    /// after an upload in another stored the same bytes, before that upload's record committed,
    /// leaving a record that names no file.
    fn hold(&self, hold: Hold) -> Result<BlobHold, BlobError>;
    /// Stores `bytes` durably (written, synced, then renamed into place) and names it.
    fn put(&self, bytes: &[u8]) -> Result<BlobId, BlobError>;
    fn get(&self, id: &BlobId) -> Result<Vec<u8>, BlobError>;
    /// Removes the file; one already gone is not an error.
    fn delete(&self, id: &BlobId) -> Result<(), BlobError>;
    /// Whether the store can be written (for `ruok`).
    fn ready(&self) -> Result<(), BlobError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_sha256_and_checked_when_read_back() {
        let id = BlobId::of(b"abc");
        assert_eq!(id.as_str(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(BlobId::parse(id.as_str()), Some(id));
        assert_eq!(BlobId::parse("../../etc/passwd"), None);
        assert_eq!(BlobId::parse(&"A".repeat(64)), None);
    }
}
