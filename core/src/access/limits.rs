//! Quotas kept in this process's memory: API key requests per minute, and login attempts per
//! address and per source. (`decisions.md`: counted per server process until several servers
//! share a database; the store port will carry them then.)

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
fn refuse_when_full(
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

#[derive(Default)]
pub struct Limiter {
    /// key id -> (minute number, requests in that minute)
    key_windows: Mutex<HashMap<i64, (i64, u32)>>,
    /// "address:<email>" or "source:<ip>" -> failure instants, oldest first
    login_failures: Mutex<HashMap<String, VecDeque<Timestamp>>>,
    /// Sliding windows of other operations (the DNS check), by a key naming what is counted.
    windows: Mutex<HashMap<String, VecDeque<Timestamp>>>,
}

impl Limiter {
    /// Counts one request of a key; refuses it past `per_minute` in the current minute.
    pub fn take_key_request(&self, key: i64, per_minute: u32, now: Timestamp) -> Result<(), AccessError> {
        let minute = now.unix_secs().div_euclid(60);
        let mut windows = self.key_windows.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = windows.entry(key).or_insert((minute, 0));
        if entry.0 != minute {
            *entry = (minute, 0);
        }
        if entry.1 >= per_minute {
            let retry_after = u64::try_from(60 - now.unix_secs().rem_euclid(60)).unwrap_or(60);
            return Err(AccessError::RateLimited { retry_after });
        }
        entry.1 += 1;
        Ok(())
    }

    /// Counts one use of `key`; refuses it when `allowed` uses happened in the last `window_secs`.
    pub fn take_window(&self, key: &str, allowed: usize, window_secs: i64, now: Timestamp) -> Result<(), AccessError> {
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

    /// Refuses a login attempt while the address or the source has failed too often lately.
    pub fn check_login(&self, address: &str, source: Option<&str>, now: Timestamp) -> Result<(), AccessError> {
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

    pub fn record_login_failure(&self, address: &str, source: Option<&str>, now: Timestamp) {
        let mut failures = self.login_failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        failures.entry(format!("address:{address}")).or_default().push_back(now);
        if let Some(s) = source {
            failures.entry(format!("source:{s}")).or_default().push_back(now);
        }
    }

    pub fn clear_login_failures(&self, address: &str) {
        let mut failures = self.login_failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        failures.remove(&format!("address:{address}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_quota_refuses_then_recovers_the_next_minute() {
        let limiter = Limiter::default();
        let t = Timestamp::from_unix_secs(1_000_040); // 20 s into a minute (1,000,020 is a whole minute)
        for _ in 0..3 {
            limiter.take_key_request(7, 3, t).unwrap();
        }
        match limiter.take_key_request(7, 3, t.plus_secs(10)) {
            Err(AccessError::RateLimited { retry_after }) => assert_eq!(retry_after, 30),
            other => panic!("{other:?}"),
        }
        limiter.take_key_request(8, 3, t).expect("another key has its own quota");
        limiter.take_key_request(7, 3, t.plus_secs(40)).expect("a new minute");
    }

    #[test]
    fn login_failures_throttle_the_address_and_the_source() {
        let limiter = Limiter::default();
        let t = Timestamp::from_unix_secs(5_000);
        for _ in 0..LOGIN_FAILURES_PER_ADDRESS {
            limiter.check_login("a@x.org", Some("10.0.0.1"), t).unwrap();
            limiter.record_login_failure("a@x.org", Some("10.0.0.1"), t);
        }
        assert!(matches!(limiter.check_login("a@x.org", Some("10.0.0.2"), t), Err(AccessError::RateLimited { .. })));
        limiter.check_login("b@x.org", Some("10.0.0.1"), t).expect("the source is not throttled yet");
        for i in 0..LOGIN_FAILURES_PER_SOURCE {
            limiter.record_login_failure(&format!("c{i}@x.org"), Some("10.0.0.9"), t);
        }
        assert!(matches!(limiter.check_login("new@x.org", Some("10.0.0.9"), t), Err(AccessError::RateLimited { .. })));
        limiter.check_login("a@x.org", None, t.plus_secs(LOGIN_WINDOW_SECS)).expect("the window passed");
    }
}
