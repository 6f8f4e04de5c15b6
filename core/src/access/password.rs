//! Passwords: Argon2id at OWASP's recommended parameters (19 MiB, 2 iterations, 1 lane).

use super::AccessError;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use std::sync::LazyLock;

pub const MIN_LENGTH: usize = 12;
pub const MAX_LENGTH: usize = 256;

fn hasher() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).expect("OWASP's parameters are valid");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Refuses passwords too short to resist guessing, or long enough to be a denial of service.
pub fn check_policy(password: &str) -> Result<(), AccessError> {
    let n = password.chars().count();
    if n < MIN_LENGTH {
        return Err(AccessError::Invalid(format!("the password must have at least {MIN_LENGTH} characters")));
    }
    if n > MAX_LENGTH {
        return Err(AccessError::Invalid(format!("the password must have at most {MAX_LENGTH} characters")));
    }
    Ok(())
}

pub fn hash(password: &str) -> Result<String, AccessError> {
    check_policy(password)?;
    let mut salt = [0u8; 16];
    crate::kernel::secrets::fill_random(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|e| AccessError::Invalid(e.to_string()))?;
    hasher()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AccessError::Invalid(format!("the password could not be hashed: {e}")))
}

/// A hash that matches nothing, verified when the account is unknown so that a login attempt
/// takes the same time whether the address exists or not.
static DECOY: LazyLock<String> = LazyLock::new(|| {
    let mut salt = [0u8; 16];
    crate::kernel::secrets::fill_random(&mut salt);
    let salt = SaltString::encode_b64(&salt).expect("16 bytes encode");
    let secret = crate::kernel::secrets::random_hex(32);
    hasher().hash_password(secret.as_bytes(), &salt).expect("hashing a random secret works").to_string()
});

/// Whether `password` matches `stored` (or, with `None`, spend the same time and say no).
pub fn verify(password: &str, stored: Option<&str>) -> bool {
    let stored = stored.unwrap_or(&DECOY);
    let Ok(parsed) = PasswordHash::new(stored) else { return false };
    password.len() <= MAX_LENGTH * 4 && hasher().verify_password(password.as_bytes(), &parsed).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_verify_and_wrong_passwords_do_not() {
        let h = hash("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(verify("correct horse battery", Some(&h)));
        assert!(!verify("correct horse batterY", Some(&h)));
        assert!(!verify("correct horse battery", None));
        assert!(!verify("x", Some("not a hash")));
    }

    #[test]
    fn policy_refuses_short_and_huge_passwords() {
        assert!(hash("short").is_err());
        assert!(hash(&"x".repeat(MAX_LENGTH + 1)).is_err());
        assert!(check_policy(&"é".repeat(MIN_LENGTH)).is_ok());
    }
}
