//! The installation's data key (`kernel::sealed`): 32 random bytes in `<data dir>/data.key`,
//! created on first start with mode 0600 (created exclusively, so two processes starting together
//! cannot each write their own), read on every later start. Losing it loses the sealed secrets
//! (webhook secrets must then be recreated): back it up with the database.

use crate::kernel::sealed::DataKey;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub const FILE_NAME: &str = "data.key";

/// `COURRIER_MASTER_KEY`: the key that seals the data key where several servers read it (the
/// PostgreSQL database). Its `Debug` shows nothing of it.
#[derive(Clone)]
pub struct MasterKey([u8; 32]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// Base64 (standard alphabet, padded or not) of exactly 32 bytes. The message never
    /// repeats the value.
    pub fn parse(text: &str) -> Result<Self, String> {
        use base64::Engine;
        let text = text.trim();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
            .map_err(|_| "it is not base64 (make one with `openssl rand -base64 32`)".to_owned())?;
        let key: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| format!("it holds {} bytes, not 32 (make one with `openssl rand -base64 32`)", bytes.len()))?;
        Ok(Self(key))
    }

    /// The key that seals and opens the stored data key.
    pub fn sealing_key(&self) -> DataKey {
        DataKey::from_bytes(&self.0)
    }
}

pub fn load_or_create(dir: &Path) -> Result<DataKey, String> {
    let path = dir.join(FILE_NAME);
    let shown = path.display();
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
        Ok(mut f) => {
            let (bytes, key) = DataKey::generate();
            f.write_all(&bytes).and_then(|()| f.sync_all()).map_err(|e| format!("cannot write {shown}: {e}"))?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let mut bytes = Vec::new();
            std::fs::File::open(&path)
                .and_then(|mut f| f.read_to_end(&mut bytes))
                .map_err(|e| format!("cannot read {shown}: {e}"))?;
            // A process that lost the race may read the file before its creator wrote it.
            if bytes.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(50));
                bytes = std::fs::read(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
            }
            let arr: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| format!("{shown} is not a 32-byte key ({} bytes)", bytes.len()))?;
            Ok(DataKey::from_bytes(&arr))
        }
        Err(e) => Err(format!("cannot create {shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_master_key_is_base64_of_32_bytes_and_never_shown() {
        use base64::Engine;
        let text = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let key = super::MasterKey::parse(&format!(" {text}\n")).unwrap();
        assert_eq!(key.sealing_key().id(), crate::kernel::sealed::DataKey::from_bytes(&[7u8; 32]).id());
        assert_eq!(
            super::MasterKey::parse(text.trim_end_matches('=')).unwrap().sealing_key().id(),
            key.sealing_key().id()
        );
        assert_eq!(format!("{key:?}"), "MasterKey(..)");
        for bad in ["", "not base64!", &base64::engine::general_purpose::STANDARD.encode([7u8; 16])] {
            let err = super::MasterKey::parse(bad).map(drop).unwrap_err();
            assert!(err.contains("openssl rand -base64 32"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_key_is_created_once_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let a = super::load_or_create(dir.path()).unwrap();
        let b = super::load_or_create(dir.path()).unwrap();
        assert_eq!(a.id(), b.id());
        let mode = std::fs::metadata(dir.path().join(super::FILE_NAME)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(dir.path().join(super::FILE_NAME), b"short").unwrap();
        assert!(super::load_or_create(dir.path()).is_err());
    }
}
