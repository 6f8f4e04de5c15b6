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
    let mut out = String::with_capacity(bytes * 2);
    push_hex(&mut out, &buf);
    out
}

/// Appends `bytes` to `out` as lowercase hex (a table, not a `format!` per byte: event ids are
/// made per imported row).
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xf)] as char);
    }
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

/// SHA-256 of `data`, lowercase hex. How high-entropy secrets (API keys, one-time tokens, session
/// tokens) are stored: a slow password hash buys nothing against 256 random bits.
pub fn sha256_hex(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let mut out = String::with_capacity(64);
    push_hex(&mut out, digest.as_ref());
    out
}

/// Compares two secrets (or their hashes) in time independent of where they differ.
///
/// Eight bytes a step: `subtle`'s byte-wise comparison passed every byte through an optimisation
/// barrier, 2% of an authenticated request's CPU for an 85-byte key (BENCHMARKS.md, issue 18). The
/// differences are OR-ed together without a branch on them, and the running value goes through
/// `black_box` at every step so that the compiler cannot stop at the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |c: &[u8]| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        u64::from_ne_bytes(w)
    };
    let mut diff = 0u64;
    for (x, y) in a.chunks(8).zip(b.chunks(8)) {
        diff = std::hint::black_box(diff | (word(x) ^ word(y)));
    }
    diff == 0
}

/// A URL-safe random token of `bytes` random bytes (base64url, no padding).
pub fn random_token(bytes: usize) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut buf = vec![0u8; bytes];
    fill_random(&mut buf);
    let mut out = String::with_capacity(bytes * 4 / 3 + 2);
    for chunk in buf.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod hash_tests {
    #[test]
    fn sha256_matches_the_reference_vector() {
        assert_eq!(super::sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn constant_time_eq_compares_whole_values() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"abcd"));
        assert!(super::constant_time_eq(b"", b""));
        // A difference in any byte of a whole word, of the last partial word, at either end.
        let key = b"svc_0123456789abcdef_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        for i in 0..key.len() {
            let mut other = *key;
            other[i] ^= 0x01;
            assert!(!super::constant_time_eq(key, &other), "a difference at byte {i}");
        }
        assert!(super::constant_time_eq(key, &key.clone()));
    }

    #[test]
    fn tokens_are_url_safe_and_long_enough() {
        let t = super::random_token(32);
        assert_eq!(t.len(), 43);
        assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{t}");
    }
}
