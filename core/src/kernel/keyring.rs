//! The operator's keyring for mail-account passwords (`COURRIER_KEYRING`, `decisions.md`): a file
//! of base64 32-byte keys, one a line. The first line seals every new password; every line opens
//! (a rotation adds a key at the top and keeps the old ones until the passwords were rewritten).
//! Sealing is the data key's ([`super::sealed::DataKey`]: ChaCha20-Poly1305, a fresh nonce, the
//! key's id in the sealed text), with associated data naming the credential's list and kind, so
//! a sealed password copied onto another row does not open.

use super::sealed::{DataKey, SealError};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};

/// The keys, the sealing one first. Its `Debug` shows the ids only.
#[derive(Debug)]
pub struct Keyring {
    keys: Vec<DataKey>,
}

/// Lines past this many are refused: a keyring is a handful of keys, not a data file.
pub const MAX_KEYS: usize = 64;

impl Keyring {
    /// Reads the file's text: one base64 key of 32 bytes a line (standard alphabet, padding
    /// optional); blank lines and lines starting with `#` are skipped. At least one key. The error
    /// names the line, never its content.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bytes = STANDARD
                .decode(line)
                .or_else(|_| STANDARD_NO_PAD.decode(line))
                .map_err(|_| format!("line {} is not base64", n + 1))?;
            let key: [u8; 32] =
                bytes.try_into().map_err(|b: Vec<u8>| format!("line {} holds {} bytes, not 32", n + 1, b.len()))?;
            keys.push(DataKey::from_bytes(&key));
            if keys.len() > MAX_KEYS {
                return Err(format!("more than {MAX_KEYS} keys"));
            }
        }
        if keys.is_empty() {
            return Err("it holds no key (one base64 32-byte key a line, e.g. from `openssl rand -base64 32`)".into());
        }
        Ok(Self { keys })
    }

    /// What binds a sealed password to its row: the list and the kind of account.
    pub fn binding(list_id: i64, kind: &str) -> String {
        format!("mail-credential:{list_id}:{kind}")
    }

    /// Seals with the first key.
    pub fn seal(&self, plaintext: &[u8], bound_to: &str) -> String {
        self.keys[0].seal(plaintext, bound_to)
    }

    /// Opens with the key the sealed text names, whichever line it is on.
    pub fn open(&self, sealed: &str, bound_to: &str) -> Result<Vec<u8>, SealError> {
        let id = sealed.split('.').nth(1).ok_or(SealError::Malformed)?;
        let key = self.keys.iter().find(|k| k.id() == id).ok_or_else(|| SealError::OtherKey(id.to_owned()))?;
        key.open(sealed, bound_to)
    }

    /// The sealing key's id (shown in logs at start, never the key).
    pub fn sealing_id(&self) -> &str {
        self.keys[0].id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_line() -> String {
        let mut bytes = [0u8; 32];
        super::super::secrets::fill_random(&mut bytes);
        STANDARD.encode(bytes)
    }

    #[test]
    fn the_first_key_seals_and_every_key_opens_after_a_rotation() {
        let (old, new) = (key_line(), key_line());
        let before = Keyring::parse(&format!("{old}\n")).unwrap();
        let bound = Keyring::binding(7, "ingest");
        let sealed_before = before.seal(b"hunter2", &bound);
        assert!(!sealed_before.contains("hunter2"));
        // Rotation: the new key on top, the old one kept.
        let after = Keyring::parse(&format!("# rotated\n{new}\n\n{old}\n")).unwrap();
        assert_eq!(after.open(&sealed_before, &bound).unwrap(), b"hunter2");
        let sealed_after = after.seal(b"hunter3", &bound);
        assert!(sealed_after.starts_with(&format!("v1.{}.", after.sealing_id())));
        assert_ne!(after.sealing_id(), before.sealing_id());
        // The old keyring alone cannot open what the new key sealed; dropping the old key loses
        // what it sealed.
        assert!(matches!(before.open(&sealed_after, &bound), Err(SealError::OtherKey(_))));
        let only_new = Keyring::parse(&new).unwrap();
        assert!(matches!(only_new.open(&sealed_before, &bound), Err(SealError::OtherKey(_))));
        assert_eq!(only_new.open(&sealed_after, &bound).unwrap(), b"hunter3");
    }

    #[test]
    fn a_sealed_password_moved_to_another_row_does_not_open() {
        let ring = Keyring::parse(&key_line()).unwrap();
        let sealed = ring.seal(b"secret", &Keyring::binding(1, "ingest"));
        assert_eq!(ring.open(&sealed, &Keyring::binding(2, "ingest")), Err(SealError::Rejected));
        assert_eq!(ring.open(&sealed, &Keyring::binding(1, "submission")), Err(SealError::Rejected));
        assert_eq!(ring.open(&sealed, &Keyring::binding(1, "ingest")).unwrap(), b"secret");
    }

    #[test]
    fn malformed_keyrings_are_refused_without_echoing_their_lines() {
        let short = STANDARD.encode([1u8; 16]);
        for (text, why) in [
            ("", "no key"),
            ("# only a comment\n", "no key"),
            ("not base64!!\n", "line 1 is not base64"),
            (short.as_str(), "line 1 holds 16 bytes"),
        ] {
            let err = Keyring::parse(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
            assert!(!err.contains("base64!!"), "{err}");
        }
        let unpadded = key_line().trim_end_matches('=').to_owned();
        assert!(Keyring::parse(&unpadded).is_ok(), "padding is optional");
    }
}
