//! Secrets the installation must use again later (webhook signing secrets, later DKIM private
//! keys), sealed at rest with the installation's data key: ChaCha20-Poly1305, a fresh random
//! nonce per seal, the key's id in the sealed text (so a rotated key can still open old rows),
//! and associated data naming what the secret belongs to (so a sealed value copied onto another
//! row does not open). The key itself lives in a file of the data directory (`adapters::data_key`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD as B64;
use ring::aead::{self, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
use ring::hmac;

/// The installation's data key. Its `Debug` shows the id only.
pub struct DataKey {
    id: String,
    key: LessSafeKey,
    /// An HMAC-SHA256 key derived from the data key (never the sealing key itself), for the
    /// tokens the installation hands out and must recognise later ([`DataKey::mac`]).
    mac: hmac::Key,
}

impl std::fmt::Debug for DataKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataKey({})", self.id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the sealed value is not in the v1 form")]
    Malformed,
    #[error("the sealed value was made with data key {0}, not this installation's")]
    OtherKey(String),
    #[error("the sealed value does not open with this key (altered, or bound to another record)")]
    Rejected,
}

const PREFIX: &str = "v1";

impl DataKey {
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        // The id names the key without revealing it: 8 hex digits of its SHA-256.
        let id = super::secrets::sha256_hex(bytes)[..8].to_owned();
        let key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, bytes).expect("a 32-byte ChaCha20 key"));
        let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, bytes), b"courrier: mac key v1");
        let mac = hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref());
        Self { id, key, mac }
    }

    /// HMAC-SHA256 of `data` for `purpose` (a tag of one purpose never verifies for another).
    /// Compare tags with [`super::secrets::constant_time_eq`].
    pub fn mac(&self, purpose: &str, data: &[u8]) -> [u8; 32] {
        let mut ctx = hmac::Context::with_key(&self.mac);
        ctx.update(purpose.as_bytes());
        ctx.update(&[0]);
        ctx.update(data);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    /// A fresh random key (tests, and the first start of an installation).
    pub fn generate() -> ([u8; 32], Self) {
        let mut bytes = [0u8; 32];
        super::secrets::fill_random(&mut bytes);
        let key = Self::from_bytes(&bytes);
        (bytes, key)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// `v1.<key id>.<base64(nonce || ciphertext || tag)>`.
    pub fn seal(&self, plaintext: &[u8], bound_to: &str) -> String {
        let mut nonce = [0u8; aead::NONCE_LEN];
        super::secrets::fill_random(&mut nonce);
        let mut buf = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(bound_to.as_bytes()), &mut buf)
            .expect("ChaCha20-Poly1305 seals any plaintext under 256 GiB");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        format!("{PREFIX}.{}.{}", self.id, B64.encode(out))
    }

    pub fn open(&self, sealed: &str, bound_to: &str) -> Result<Vec<u8>, SealError> {
        let mut parts = sealed.splitn(3, '.');
        let (Some(PREFIX), Some(id), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(SealError::Malformed);
        };
        if id != self.id {
            return Err(SealError::OtherKey(id.to_owned()));
        }
        let raw = B64.decode(data).map_err(|_| SealError::Malformed)?;
        if raw.len() < aead::NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return Err(SealError::Malformed);
        }
        let (nonce, rest) = raw.split_at(aead::NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Malformed)?;
        let mut buf = rest.to_vec();
        let plain =
            self.key.open_in_place(nonce, Aad::from(bound_to.as_bytes()), &mut buf).map_err(|_| SealError::Rejected)?;
        Ok(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_and_binding() {
        let (_, key) = DataKey::generate();
        let sealed = key.seal(b"whsec_abc", "webhook:https://a.example/");
        assert!(sealed.starts_with(&format!("v1.{}.", key.id())));
        assert!(!sealed.contains("whsec_abc"));
        assert_eq!(key.open(&sealed, "webhook:https://a.example/").unwrap(), b"whsec_abc");
        assert_ne!(sealed, key.seal(b"whsec_abc", "webhook:https://a.example/"), "a fresh nonce per seal");
        assert_eq!(key.open(&sealed, "webhook:https://b.example/"), Err(SealError::Rejected));
        let (_, other) = DataKey::generate();
        assert!(matches!(other.open(&sealed, "webhook:https://a.example/"), Err(SealError::OtherKey(_))));
        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert!(key.open(std::str::from_utf8(&tampered).unwrap(), "webhook:https://a.example/").is_err());
        assert_eq!(key.open("nonsense", "x"), Err(SealError::Malformed));
    }

    #[test]
    fn macs_depend_on_the_key_the_purpose_and_the_data() {
        let (bytes, key) = DataKey::generate();
        assert_eq!(
            key.mac("verp", b"42"),
            DataKey::from_bytes(&bytes).mac("verp", b"42"),
            "the same key: the same tag"
        );
        assert_ne!(key.mac("verp", b"42"), key.mac("verp", b"43"));
        assert_ne!(key.mac("verp", b"42"), key.mac("other", b"42"));
        assert_ne!(key.mac("verp", b"42"), DataKey::generate().1.mac("verp", b"42"));
    }
}
