//! Randomness for identifiers and tokens. Tokens are only ever stored hashed (later issues).

/// Fills `buf` from the operating system's CSPRNG.
///
/// # Panics
/// When the OS has no randomness to give: nothing safe can be done without it.
pub fn fill_random(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the operating system's random source failed");
}

pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    fill_random(&mut b);
    u64::from_le_bytes(b)
}

/// `bytes` random bytes as lowercase hex (a 128-bit id is `random_hex(16)`).
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    fill_random(&mut buf);
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_hex_has_the_length_and_varies() {
        let a = super::random_hex(16);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, super::random_hex(16));
    }
}
