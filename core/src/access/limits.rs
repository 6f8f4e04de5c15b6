//! Quotas: API key requests per minute (a token bucket, not a calendar minute), login attempts
//! per address and per source, and sliding windows of other operations. [`Limits`] is the port;
//! [`Limiter`] keeps them in this process's memory (a lone server on SQLite). Several servers on
//! one PostgreSQL database count them in it instead (`decisions.md`), through the adapter in
//! `store-postgres/src/limits.rs`, so that a key's quota is one quota for the installation.

use super::AccessError;
use crate::kernel::Timestamp;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// Failed logins allowed per address, then per source address, within [`LOGIN_WINDOW_SECS`].
pub const LOGIN_FAILURES_PER_ADDRESS: usize = 5;
pub const LOGIN_FAILURES_PER_SOURCE: usize = 20;
pub const LOGIN_WINDOW_SECS: i64 = 15 * 60;

/// Drops the instants that left the sliding window; refuses (with the wait until the oldest
/// leaves it) when `allowed` remain.
pub fn refuse_when_full(
    times: &mut VecDeque<Timestamp>,
    allowed: usize,
    window_secs: i64,
    now: Timestamp,
) -> Result<(), AccessError> {
    while times.front().is_some_and(|t| t.plus_secs(window_secs) <= now) {
        times.pop_front();
    }
    if times.len() >= allowed {
        let oldest = times.front().copied().unwrap_or(now);
        let retry_after = (oldest.plus_secs(window_secs).unix_secs() - now.unix_secs()).max(1);
        return Err(AccessError::RateLimited { retry_after: u64::try_from(retry_after).unwrap_or(1) });
    }
    Ok(())
}

/// Microseconds in the quota's period, a minute.
const MINUTE_MICROS: i128 = 60_000_000;

/// One key's token bucket of `per_minute` tokens, refilled evenly (one every `60 s / per_minute`),
/// kept as the generic cell rate algorithm keeps it: the instant at which the bucket would be
/// full again ("theoretical arrival time"), in microseconds times `per_minute` so that the
/// arithmetic is exact for any quota. A full bucket takes `per_minute` requests at once; after
/// that, one more per interval. There is no calendar minute: a burst at the end of one minute
/// and another at the start of the next share one bucket, so they never get twice the quota.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// The quota this state was counted with (a changed quota starts a fresh bucket).
    per_minute: u32,
    /// Theoretical arrival time, in microseconds times `per_minute`.
    tat: i128,
}

impl Bucket {
    /// Takes one token at `now`, or says how many whole seconds until one is there.
    fn take(&mut self, now: Timestamp) -> Result<(), u64> {
        let n = i128::from(self.per_minute.max(1));
        let now = i128::from(now.unix_micros()) * n;
        let tat = self.tat.max(now);
        // Each request moves the arrival time one interval (a minute / n, times n: a minute) on;
        // it may run at most the whole bucket (n intervals, times n) ahead of now.
        let next = tat + MINUTE_MICROS;
        let excess = next - now - n * MINUTE_MICROS;
        if excess > 0 {
            // The wait until the arrival time is back within the bucket, in whole seconds.
            let wait_micros = (excess + n - 1) / n;
            return Err(u64::try_from((wait_micros + 999_999) / 1_000_000).unwrap_or(u64::MAX).max(1));
        }
        self.tat = next;
        Ok(())
    }
}

/// Where quotas are counted: one process's memory ([`Limiter`]) or a database several servers share.
/// A failure to count (the database unreachable) refuses the request: it is never let through
/// uncounted.
pub trait Limits: Send + Sync {
    /// Counts one request of a key against its quota of `per_minute` (a token bucket, see
    /// `Bucket`); refuses it, with the seconds until the next token, when the bucket is empty.
    fn take_key_request(&self, key: i64, per_minute: u32, now: Timestamp) -> Result<(), AccessError>;
    /// [`Limits::take_key_request`], and the store's access marker read by the same statement
    /// when the quotas are counted in the store (`Some`): what authenticating a cached key on a
    /// shared database needs, in one round trip. `None` when they are not (this process's memory).
    fn take_key_request_marked(&self, key: i64, per_minute: u32, now: Timestamp) -> Result<Option<u64>, AccessError> {
        self.take_key_request(key, per_minute, now).map(|()| None)
    }
    /// Counts one use of `key`; refuses it when `allowed` uses happened in the last `window_secs`.
    fn take_window(&self, key: &str, allowed: usize, window_secs: i64, now: Timestamp) -> Result<(), AccessError>;
    /// Refuses a login attempt while the address or the source has failed too often lately.
    fn check_login(&self, address: &str, source: Option<&str>, now: Timestamp) -> Result<(), AccessError>;
    fn record_login_failure(&self, address: &str, source: Option<&str>, now: Timestamp) -> Result<(), AccessError>;
    fn clear_login_failures(&self, address: &str) -> Result<(), AccessError>;
}

/// [`Limits`] in this process's memory.
#[derive(Default)]
pub struct Limiter {
    /// key id -> its token bucket
    key_buckets: Mutex<HashMap<i64, Bucket>>,
    /// "address:<email>" or "source:<ip>" -> failure instants, oldest first
    login_failures: Mutex<HashMap<String, VecDeque<Timestamp>>>,
    /// Sliding windows of other operations (the DNS check), by a key naming what is counted.
    windows: Mutex<HashMap<String, VecDeque<Timestamp>>>,
}

impl Limits for Limiter {
    fn take_key_request(&self, key: i64, per_minute: u32, now: Timestamp) -> Result<(), AccessError> {
        let mut buckets = self.key_buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let bucket = buckets.entry(key).or_insert(Bucket { per_minute, tat: i128::MIN });
        if bucket.per_minute != per_minute {
            *bucket = Bucket { per_minute, tat: i128::MIN };
        }
        bucket.take(now).map_err(|retry_after| AccessError::RateLimited { retry_after })
    }

    fn take_window(&self, key: &str, allowed: usize, window_secs: i64, now: Timestamp) -> Result<(), AccessError> {
        let mut windows = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget keys whose window has passed, so the map stays the size of the recent callers.
        if windows.len() > 10_000 {
            windows.retain(|_, t| t.back().is_some_and(|last| last.plus_secs(window_secs) > now));
        }
        let times = windows.entry(key.to_owned()).or_default();
        refuse_when_full(times, allowed, window_secs, now)?;
        times.push_back(now);
        Ok(())
    }

    fn check_login(&self, address: &str, source: Option<&str>, now: Timestamp) -> Result<(), AccessError> {
        let mut failures = self.login_failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let keys = std::iter::once((format!("address:{address}"), LOGIN_FAILURES_PER_ADDRESS))
            .chain(source.map(|s| (format!("source:{s}"), LOGIN_FAILURES_PER_SOURCE)));
        for (key, allowed) in keys {
            if let Some(times) = failures.get_mut(&key) {
                refuse_when_full(times, allowed, LOGIN_WINDOW_SECS, now)?;
            }
        }
        Ok(())
    }

    fn record_login_failure(&self, address: &str, source: Option<&str>, now: Timestamp) -> Result<(), AccessError> {
        let mut failures = self.login_failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        failures.entry(format!("address:{address}")).or_default().push_back(now);
        if let Some(s) = source {
            failures.entry(format!("source:{s}")).or_default().push_back(now);
        }
        Ok(())
    }

    fn clear_login_failures(&self, address: &str) -> Result<(), AccessError> {
        let mut failures = self.login_failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        failures.remove(&format!("address:{address}"));
        Ok(())
    }
}

/// One sliding window a request is counted in: at most `allowed` uses of `key` within
/// `window_secs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub key: String,
    pub allowed: usize,
    pub window_secs: i64,
}

/// The port of counters that several servers will share (`decisions.md`: with PostgreSQL, the
/// login-link limits are counted in the database). One call counts a request in every window it
/// belongs to, or in none: a request refused by one window is not counted in the others.
pub trait Counters: Send + Sync {
    /// Counts one use in each of `windows`; refuses, with the seconds until the fullest window
    /// frees a slot, when any of them is full.
    fn take_all(&self, windows: &[Window], now: Timestamp) -> Result<(), AccessError>;
}

/// [`Counters`] in this process's memory: the adapter of a lone server.
#[derive(Default)]
pub struct MemoryCounters {
    windows: Mutex<HashMap<String, VecDeque<Timestamp>>>,
}

impl Counters for MemoryCounters {
    fn take_all(&self, windows: &[Window], now: Timestamp) -> Result<(), AccessError> {
        let mut map = self.windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Forget keys whose longest window has passed, so the map stays the size of recent callers.
        if map.len() > 10_000 {
            let longest = windows.iter().map(|w| w.window_secs).max().unwrap_or(3600).max(3600);
            map.retain(|_, t| t.back().is_some_and(|last| last.plus_secs(longest) > now));
        }
        let mut wait = 0;
        for w in windows {
            let times = map.entry(w.key.clone()).or_default();
            if let Err(AccessError::RateLimited { retry_after }) =
                refuse_when_full(times, w.allowed, w.window_secs, now)
            {
                wait = wait.max(retry_after);
            }
        }
        if wait > 0 {
            return Err(AccessError::RateLimited { retry_after: wait });
        }
        for w in windows {
            map.entry(w.key.clone()).or_default().push_back(now);
        }
        Ok(())
    }
}

/// The behaviour of every [`Limits`] and [`Counters`] adapter, counted through two "servers" that
/// share one installation (`one` and `two` are the same object for the in-memory adapter): what
/// one counted, the other sees.
#[cfg(any(test, feature = "testing"))]
pub fn shared_suite(one: &dyn Limits, two: &dyn Limits, c_one: &dyn Counters, c_two: &dyn Counters) {
    let retry = |r: Result<(), AccessError>| match r {
        Err(AccessError::RateLimited { retry_after }) => retry_after,
        other => panic!("expected a refusal, got {other:?}"),
    };
    // A key's bucket of 3, a token every 20 s, counted on both servers.
    let t = Timestamp::from_unix_secs(1_000_040);
    one.take_key_request(7, 3, t).unwrap();
    two.take_key_request(7, 3, t).unwrap();
    one.take_key_request(7, 3, t).unwrap();
    assert_eq!(retry(two.take_key_request(7, 3, t.plus_secs(10))), 10, "the quota is one for both servers");
    two.take_key_request(8, 3, t).expect("another key has its own quota");
    one.take_key_request(7, 3, t.plus_secs(20)).expect("one token back after 20 s");
    assert!(two.take_key_request(7, 3, t.plus_secs(20)).is_err(), "and only one");
    for s in [&one, &two, &one] {
        s.take_key_request(7, 3, t.plus_secs(80)).expect("a full bucket a minute later");
    }
    // A burst across a minute boundary gets no more than the bucket (no calendar minute).
    let minute = Timestamp::from_unix_secs(30_000_000 * 60);
    let (end, next) = (
        Timestamp::from_unix_micros(minute.unix_micros() + 59_500_000),
        Timestamp::from_unix_micros(minute.unix_micros() + 60_500_000),
    );
    let both = [one, two];
    let count = |at| (0..600).filter(|i| both[i % 2].take_key_request(1, 600, at).is_ok()).count();
    assert_eq!((count(end), count(next)), (600, 10));
    assert_eq!(retry(one.take_key_request(1, 600, next)), 1);
    // A changed quota starts a fresh bucket.
    let t = Timestamp::from_unix_secs(10_000);
    one.take_key_request(3, 1, t).unwrap();
    assert!(two.take_key_request(3, 1, t).is_err());
    two.take_key_request(3, 5, t).expect("the new quota applies at once");

    // Login failures per address and per source, recorded on either server.
    let t = Timestamp::from_unix_secs(5_000);
    for i in 0..LOGIN_FAILURES_PER_ADDRESS {
        both[i % 2].check_login("a@x.org", Some("10.0.0.1"), t).unwrap();
        both[i % 2].record_login_failure("a@x.org", Some("10.0.0.1"), t).unwrap();
    }
    assert_eq!(retry(two.check_login("a@x.org", Some("10.0.0.2"), t.plus_secs(60))), LOGIN_WINDOW_SECS as u64 - 60);
    one.check_login("b@x.org", Some("10.0.0.1"), t).expect("the source is not throttled yet");
    for i in 0..LOGIN_FAILURES_PER_SOURCE {
        both[i % 2].record_login_failure(&format!("c{i}@x.org"), Some("10.0.0.9"), t).unwrap();
    }
    assert!(one.check_login("new@x.org", Some("10.0.0.9"), t).is_err());
    two.check_login("a@x.org", None, t.plus_secs(LOGIN_WINDOW_SECS)).expect("the window passed");
    one.clear_login_failures("a@x.org").unwrap();
    two.check_login("a@x.org", None, t).expect("a success clears the address's failures");

    // A sliding window of 2 uses a minute.
    let t = Timestamp::from_unix_secs(7_000);
    one.take_window("dns-check:x", 2, 60, t).unwrap();
    two.take_window("dns-check:x", 2, 60, t.plus_secs(30)).unwrap();
    assert_eq!(retry(one.take_window("dns-check:x", 2, 60, t.plus_secs(40))), 20);
    two.take_window("dns-check:y", 2, 60, t).expect("another key");
    one.take_window("dns-check:x", 2, 60, t.plus_secs(60)).expect("the oldest left the window");
    assert!(
        two.take_window("dns-check:x", 2, 60, t.plus_secs(61)).is_err(),
        "the refusal was not counted, the use was"
    );

    // Counters: a request counted in every window or in none.
    let t = Timestamp::from_unix_secs(9_000);
    let w = |key: &str, allowed, window_secs| Window { key: key.into(), allowed, window_secs };
    let pair = [w("a", 2, 3600), w("s", 3, 60)];
    c_one.take_all(&pair, t).unwrap();
    c_two.take_all(&pair, t).unwrap();
    assert_eq!(retry(c_one.take_all(&pair, t)), 3600);
    c_two.take_all(&[w("s", 3, 60)], t).expect("the refusal took nothing from s");
    assert!(c_one.take_all(&[w("s", 3, 60)], t).is_err());
    c_two.take_all(&[w("s", 3, 60)], t.plus_secs(60)).expect("the minute passed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_memory_adapters_pass_the_shared_suite() {
        let (limiter, counters) = (Limiter::default(), MemoryCounters::default());
        shared_suite(&limiter, &limiter, &counters, &counters);
    }

    #[test]
    fn a_key_quota_refuses_when_spent_then_gives_one_request_per_interval() {
        let limiter = Limiter::default();
        let t = Timestamp::from_unix_secs(1_000_040);
        for _ in 0..3 {
            limiter.take_key_request(7, 3, t).unwrap();
        }
        // A token every 20 s: the fourth request, 10 s later, waits 10 s more.
        match limiter.take_key_request(7, 3, t.plus_secs(10)) {
            Err(AccessError::RateLimited { retry_after }) => assert_eq!(retry_after, 10),
            other => panic!("{other:?}"),
        }
        limiter.take_key_request(8, 3, t).expect("another key has its own quota");
        limiter.take_key_request(7, 3, t.plus_secs(20)).expect("one token back after 20 s");
        assert!(limiter.take_key_request(7, 3, t.plus_secs(20)).is_err(), "and only one");
        for _ in 0..3 {
            limiter.take_key_request(7, 3, t.plus_secs(20 + 60)).expect("a full bucket a minute later");
        }
    }

    #[test]
    fn a_burst_across_a_minute_boundary_does_not_get_twice_the_quota() {
        // A client spends its whole quota in the last second of a minute and bursts again in
        // the first second of the next: per calendar minute it got 2 x 600 in one second.
        let limiter = Limiter::default();
        let minute = Timestamp::from_unix_secs(30_000_000 * 60); // a whole minute
        let end_of_minute = Timestamp::from_unix_micros(minute.unix_micros() + 59_500_000);
        let start_of_next = Timestamp::from_unix_micros(minute.unix_micros() + 60_500_000);
        let quota = 600;
        let first = (0..quota).filter(|_| limiter.take_key_request(1, quota, end_of_minute).is_ok()).count();
        let second = (0..quota).filter(|_| limiter.take_key_request(1, quota, start_of_next).is_ok()).count();
        assert_eq!(first, 600);
        // One second later, ten tokens (600 a minute) have come back: no more.
        assert_eq!(second, 10);
        match limiter.take_key_request(1, quota, start_of_next) {
            Err(AccessError::RateLimited { retry_after }) => assert_eq!(retry_after, 1, "the next token is 0.1 s away"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_changed_quota_starts_a_fresh_bucket() {
        let limiter = Limiter::default();
        let t = Timestamp::from_unix_secs(10_000);
        limiter.take_key_request(3, 1, t).unwrap();
        assert!(limiter.take_key_request(3, 1, t).is_err());
        limiter.take_key_request(3, 5, t).expect("the new quota applies at once");
    }

    #[test]
    fn login_failures_throttle_the_address_and_the_source() {
        let limiter = Limiter::default();
        let t = Timestamp::from_unix_secs(5_000);
        for _ in 0..LOGIN_FAILURES_PER_ADDRESS {
            limiter.check_login("a@x.org", Some("10.0.0.1"), t).unwrap();
            limiter.record_login_failure("a@x.org", Some("10.0.0.1"), t).unwrap();
        }
        assert!(matches!(limiter.check_login("a@x.org", Some("10.0.0.2"), t), Err(AccessError::RateLimited { .. })));
        limiter.check_login("b@x.org", Some("10.0.0.1"), t).expect("the source is not throttled yet");
        for i in 0..LOGIN_FAILURES_PER_SOURCE {
            limiter.record_login_failure(&format!("c{i}@x.org"), Some("10.0.0.9"), t).unwrap();
        }
        assert!(matches!(limiter.check_login("new@x.org", Some("10.0.0.9"), t), Err(AccessError::RateLimited { .. })));
        limiter.check_login("a@x.org", None, t.plus_secs(LOGIN_WINDOW_SECS)).expect("the window passed");
    }

    #[test]
    fn counters_count_a_request_in_every_window_or_in_none() {
        let counters = MemoryCounters::default();
        let t = Timestamp::from_unix_secs(9_000);
        let w = |key: &str, allowed, window_secs| Window { key: key.into(), allowed, window_secs };
        let both = [w("a", 2, 3600), w("s", 3, 60)];
        counters.take_all(&both, t).unwrap();
        counters.take_all(&both, t).unwrap();
        match counters.take_all(&both, t) {
            Err(AccessError::RateLimited { retry_after }) => assert_eq!(retry_after, 3600),
            other => panic!("{other:?}"),
        }
        // The refused request was not counted in "s": it still has one slot.
        counters.take_all(&[w("s", 3, 60)], t).expect("the refusal took nothing from s");
        assert!(counters.take_all(&[w("s", 3, 60)], t).is_err());
        counters.take_all(&[w("s", 3, 60)], t.plus_secs(60)).expect("the minute passed");
    }
}
