//! API keys as last read from the store, so that a known key authenticates without a database
//! read or a hop to the blocking pool (measured: that hop, not SQLite, cost most of an
//! authenticated request; BENCHMARKS.md).
//!
//! Correctness rests on the store's access marker, which moves on every commit by any connection
//! of any process that changes users, roles or keys (other writes, such as adding members, leave
//! it): a lookup first reads the marker, and any change empties the cache, so a revocation, a role
//! change or a disabled user committed anywhere takes effect on the next request. An entry filled from a read is tagged with the marker read *before* that read: if
//! something committed in between, the next lookup sees a newer marker and drops it.

use super::model::{ApiKey, Role, User, UserStatus};
use super::principal::{Principal, Via};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// What authenticating a key needs, as stored, and the principal it yields, built once.
#[derive(Debug, Clone)]
pub struct CachedKey {
    pub key: ApiKey,
    pub secret_hash: String,
    /// The key's principal when its user exists and is active; shared by every request of the key,
    /// so a cache hit allocates nothing.
    pub principal: Option<Arc<Principal>>,
    /// The secret last found to match `secret_hash`: a request presenting these same bytes is
    /// checked by a constant-time comparison instead of a SHA-256. It lives as long as the entry,
    /// which any change of users, roles or keys drops (the module's rule), so a revoked key is
    /// refused from the next request exactly as before.
    pub verified: VerifiedSecret,
}

/// A secret already checked against its hash (never printed).
#[derive(Clone, Default)]
pub struct VerifiedSecret(std::sync::OnceLock<Box<[u8]>>);

impl VerifiedSecret {
    /// Whether `secret` is the one already checked (constant time in where it differs).
    pub fn is(&self, secret: &[u8]) -> bool {
        self.0.get().is_some_and(|known| crate::kernel::secrets::constant_time_eq(known, secret))
    }

    /// Remembers `secret`, just checked against the entry's hash.
    pub fn remember(&self, secret: &[u8]) {
        let _ = self.0.set(secret.into());
    }
}

impl std::fmt::Debug for VerifiedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() { "VerifiedSecret(<redacted>)" } else { "VerifiedSecret(None)" })
    }
}

impl CachedKey {
    /// `user` is `None` when the key's user no longer exists.
    pub fn new(key: ApiKey, secret_hash: String, user: Option<User>, roles: Vec<Role>) -> Self {
        let principal = user
            .filter(|u| u.status == UserStatus::Active)
            .map(|u| Arc::new(Principal { user: Some(u), via: Via::Key(key.clone()), roles }));
        Self { key, secret_hash, principal, verified: VerifiedSecret::default() }
    }
}

/// Bounded so that a flood of distinct valid prefixes cannot grow memory without limit.
const MAX_ENTRIES: usize = 10_000;

#[derive(Default)]
pub struct KeyCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    marker: Option<u64>,
    keys: HashMap<String, Arc<CachedKey>>,
}

impl KeyCache {
    /// The entry of `prefix`, if the store has not changed since it was read.
    pub fn get(&self, marker: u64, prefix: &str) -> Option<Arc<CachedKey>> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.marker != Some(marker) {
            inner.keys.clear();
            inner.marker = Some(marker);
            return None;
        }
        inner.keys.get(prefix).cloned()
    }

    /// The store's marker the entries were last found current at (`None` before the first look).
    pub fn marker(&self) -> Option<u64> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).marker
    }

    /// Keeps `entry`, read after the store showed `marker_before`, unless the store has changed
    /// since (then the entry may be stale and is dropped).
    pub fn put(&self, marker_before: u64, prefix: &str, entry: CachedKey) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.marker != Some(marker_before) {
            if inner.marker.is_some_and(|m| m > marker_before) {
                return;
            }
            inner.keys.clear();
            inner.marker = Some(marker_before);
        }
        if inner.keys.len() >= MAX_ENTRIES {
            inner.keys.clear();
        }
        inner.keys.insert(prefix.to_owned(), Arc::new(entry));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::model::{KeyId, KeyScope, PermSet, UserId};
    use crate::kernel::Timestamp;

    fn entry() -> CachedKey {
        CachedKey {
            key: ApiKey {
                id: KeyId::from_stored(1),
                user_id: UserId::from_stored(1),
                name: "k".into(),
                prefix: "p".into(),
                scope: KeyScope::User,
                perms: PermSet::READ,
                rate_limit_per_min: 10,
                expires_at: None,
                created_at: Timestamp::from_unix_secs(0),
                revoked_at: None,
            },
            secret_hash: "h".into(),
            principal: None,
            verified: VerifiedSecret::default(),
        }
    }

    #[test]
    fn a_remembered_secret_matches_only_its_own_bytes_and_is_never_printed() {
        let v = VerifiedSecret::default();
        assert!(!v.is(b"svc_a_b"), "nothing checked yet");
        v.remember(b"svc_a_b");
        assert!(v.is(b"svc_a_b"));
        assert!(!v.is(b"svc_a_c") && !v.is(b"svc_a_") && !v.is(b"svc_a_bb") && !v.is(b""));
        v.remember(b"svc_a_c");
        assert!(v.is(b"svc_a_b") && !v.is(b"svc_a_c"), "the first secret checked stays");
        assert_eq!(format!("{v:?}"), "VerifiedSecret(<redacted>)");
    }

    #[test]
    fn any_change_of_the_store_empties_it() {
        let cache = KeyCache::default();
        assert!(cache.get(5, "p").is_none());
        cache.put(5, "p", entry());
        assert!(cache.get(5, "p").is_some());
        assert!(cache.get(6, "p").is_none(), "something was committed");
        assert!(cache.get(6, "p").is_none());
    }

    #[test]
    fn an_entry_read_before_a_change_is_not_kept() {
        let cache = KeyCache::default();
        assert!(cache.get(7, "q").is_none()); // a lookup already saw marker 7...
        cache.put(6, "p", entry()); // ...so an entry read at 6 may predate that commit
        assert!(cache.get(7, "p").is_none());
        // An entry read at a marker no lookup has seen yet is kept, and dropped by the first
        // lookup that sees a newer marker.
        cache.put(8, "p", entry());
        assert!(cache.get(8, "p").is_some());
        assert!(cache.get(9, "p").is_none());
    }
}
