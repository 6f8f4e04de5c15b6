//! Quotas and limits counted in the database (`access::limits::Limits` and `Counters`), so that
//! every server of the installation counts one quota per key, one window per address (migration
//! 6: UNLOGGED tables). Each call is autocommitted on a pooled connection, outside any write
//! transaction: it never waits for the installation's write lock. A key's request is one upsert.

use super::{Pool, map_err};
use courrier_core::access::AccessError;
use courrier_core::access::limits::{Counters, LOGIN_WINDOW_SECS, Limits, Window, refuse_when_full};
use courrier_core::kernel::Timestamp;
use courrier_core::storage::StoreError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// One call in this many also forgets the rows whose window has passed.
const PURGE_EVERY: u64 = 4096;

/// The counting of one request against a key's bucket, the generic cell rate algorithm of
/// `access::limits::Bucket` in one statement: `$1` key, `$2` quota as configured, `$3` quota
/// used (at least 1), `$4` now in microseconds. A changed quota starts a fresh bucket.
const TAKE_KEY: &str = concat!(take_key_upsert!(), " RETURNING GREATEST(excess, 0)::BIGINT");

/// [`TAKE_KEY`], and the access marker (migration 2's `access_version`) as of the same statement:
/// an authenticated request's one round trip (`Limits::take_key_request_marked`).
const TAKE_KEY_MARKED: &str = concat!(
    "WITH t AS (",
    take_key_upsert!(),
    " RETURNING GREATEST(excess, 0)::BIGINT AS excess)
    SELECT excess, (SELECT v FROM access_version WHERE id = 1) FROM t"
);

/// The token bucket's upsert (`$1` key, `$2` quota, `$3` its rate, `$4` now), without its
/// `RETURNING`: one text for [`TAKE_KEY`] and [`TAKE_KEY_MARKED`].
macro_rules! take_key_upsert {
    () => {
        "
    WITH p AS (SELECT $1::TEXT AS key, $2::BIGINT AS quota, $3::BIGINT::NUMERIC AS n,
                      $4::BIGINT::NUMERIC * $3::BIGINT AS now_n)
    INSERT INTO limit_buckets AS b (key, per_minute, tat, excess)
    SELECT key, quota, now_n + 60000000, 60000000 - n * 60000000 FROM p
    ON CONFLICT (key) DO UPDATE SET
        per_minute = EXCLUDED.per_minute,
        excess = (SELECT CASE WHEN b.per_minute <> quota THEN now_n ELSE GREATEST(b.tat, now_n) END
                         + 60000000 - now_n - n * 60000000 FROM p),
        tat = (SELECT CASE
                   WHEN (CASE WHEN b.per_minute <> quota THEN now_n ELSE GREATEST(b.tat, now_n) END
                         + 60000000 - now_n - n * 60000000) > 0 THEN b.tat
                   ELSE (CASE WHEN b.per_minute <> quota THEN now_n ELSE GREATEST(b.tat, now_n) END) + 60000000
               END FROM p)"
    };
}
use take_key_upsert;

/// One use counted in a sliding window unless it is full: `$1` key, `$2` uses allowed, `$3`
/// window in microseconds, `$4` now. Returns whether it was refused and the instants in the window.
const TAKE_WINDOW: &str = "
    INSERT INTO limit_windows AS w (key, times, refused, expires_at)
    VALUES ($1::TEXT, ARRAY[$4::BIGINT], FALSE, $4::BIGINT + $3::BIGINT)
    ON CONFLICT (key) DO UPDATE SET
        refused = cardinality(ARRAY(SELECT t FROM unnest(w.times) t WHERE t + $3::BIGINT > $4::BIGINT)) >= $2::BIGINT,
        times = CASE
            WHEN cardinality(ARRAY(SELECT t FROM unnest(w.times) t WHERE t + $3::BIGINT > $4::BIGINT)) >= $2::BIGINT
                THEN ARRAY(SELECT t FROM unnest(w.times) t WHERE t + $3::BIGINT > $4::BIGINT ORDER BY t)
            ELSE ARRAY(SELECT t FROM unnest(w.times) t WHERE t + $3::BIGINT > $4::BIGINT ORDER BY t) || $4::BIGINT
        END,
        expires_at = GREATEST(w.expires_at, $4::BIGINT + $3::BIGINT)
    RETURNING refused, times";

/// Failures recorded (no refusal: the check is [`Limits::check_login`]): `$1` keys, `$2` window
/// in microseconds, `$3` now.
const RECORD_FAILURE: &str = "
    INSERT INTO limit_windows AS w (key, times, expires_at)
    SELECT k, ARRAY[$3::BIGINT], $3::BIGINT + $2::BIGINT FROM unnest($1::TEXT[]) k
    ON CONFLICT (key) DO UPDATE SET
        times = ARRAY(SELECT t FROM unnest(w.times) t WHERE t + $2::BIGINT > $3::BIGINT ORDER BY t) || $3::BIGINT,
        expires_at = $3::BIGINT + $2::BIGINT";

pub struct PgLimits {
    pool: Pool,
    calls: AtomicU64,
}

fn store(e: StoreError) -> AccessError {
    AccessError::Store(e)
}

fn micros(secs: i64) -> i64 {
    secs.saturating_mul(1_000_000)
}

/// The instants of a row, as the in-memory windows keep them.
fn instants(times: &[i64]) -> VecDeque<Timestamp> {
    let mut v: Vec<i64> = times.to_vec();
    v.sort_unstable();
    v.into_iter().map(Timestamp::from_unix_micros).collect()
}

impl PgLimits {
    pub(super) fn new(pool: Pool) -> Self {
        Self { pool, calls: AtomicU64::new(0) }
    }

    fn client(&self) -> Result<r2d2::PooledConnection<super::Manager>, AccessError> {
        self.pool.get().map_err(|_| store(StoreError::Busy))
    }

    /// Now and then, forgets the windows that passed and the buckets full again (as absent ones).
    fn purge_now_and_then(&self, conn: &mut super::PgConn, now: Timestamp) {
        if self.calls.fetch_add(1, Ordering::Relaxed) % PURGE_EVERY != PURGE_EVERY - 1 {
            return;
        }
        let now = now.unix_micros();
        let purged = conn.client.execute("DELETE FROM limit_windows WHERE expires_at <= $1", &[&now]).and_then(|_| {
            conn.client.execute("DELETE FROM limit_buckets WHERE tat <= $1::NUMERIC * GREATEST(per_minute, 1)", &[&now])
        });
        if let Err(e) = purged {
            tracing::warn!(error = %e, "cannot forget past limit windows");
        }
    }

    /// Counts one request of `key` by `sql` ([`TAKE_KEY`] or [`TAKE_KEY_MARKED`]); its row when
    /// the bucket had a token, the refusal otherwise.
    fn take_key(&self, sql: &str, key: i64, per_minute: u32, now: Timestamp) -> Result<postgres::Row, AccessError> {
        let mut conn = self.client()?;
        let st = Self::prepared(&mut conn, sql)?;
        let (quota, n) = (i64::from(per_minute), i64::from(per_minute.max(1)));
        let row = conn
            .client
            .query_one(&st, &[&format!("key:{key}"), &quota, &n, &now.unix_micros()])
            .map_err(|e| store(map_err(e)))?;
        self.purge_now_and_then(&mut conn, now);
        let excess: i64 = row.try_get(0).map_err(|e| store(map_err(e)))?;
        if excess > 0 {
            // As the in-memory bucket: the wait until the arrival time is back within the bucket.
            let wait_micros = (excess + n - 1) / n;
            let secs = u64::try_from((wait_micros + 999_999) / 1_000_000).unwrap_or(u64::MAX).max(1);
            return Err(AccessError::RateLimited { retry_after: secs });
        }
        Ok(row)
    }

    fn prepared(conn: &mut super::PgConn, sql: &str) -> Result<postgres::Statement, AccessError> {
        if let Some(st) = conn.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = conn.client.prepare(sql).map_err(|e| store(map_err(e)))?;
        conn.statements.insert(sql.to_owned(), st.clone());
        Ok(st)
    }
}

impl Limits for PgLimits {
    fn take_key_request(&self, key: i64, per_minute: u32, now: Timestamp) -> Result<(), AccessError> {
        self.take_key(TAKE_KEY, key, per_minute, now).map(drop)
    }

    fn take_key_request_marked(&self, key: i64, per_minute: u32, now: Timestamp) -> Result<Option<u64>, AccessError> {
        let row = self.take_key(TAKE_KEY_MARKED, key, per_minute, now)?;
        let marker: i64 = row.try_get(1).map_err(|e| store(map_err(e)))?;
        Ok(Some(marker as u64))
    }

    fn take_window(&self, key: &str, allowed: usize, window_secs: i64, now: Timestamp) -> Result<(), AccessError> {
        if allowed == 0 {
            return refuse_when_full(&mut VecDeque::new(), 0, window_secs, now);
        }
        let mut conn = self.client()?;
        let st = Self::prepared(&mut conn, TAKE_WINDOW)?;
        let allowed_n = i64::try_from(allowed).unwrap_or(i64::MAX);
        let row = conn
            .client
            .query_one(&st, &[&format!("w:{key}"), &allowed_n, &micros(window_secs), &now.unix_micros()])
            .map_err(|e| store(map_err(e)))?;
        self.purge_now_and_then(&mut conn, now);
        let refused: bool = row.try_get(0).map_err(|e| store(map_err(e)))?;
        if refused {
            let times: Vec<i64> = row.try_get(1).map_err(|e| store(map_err(e)))?;
            return refuse_when_full(&mut instants(&times), allowed, window_secs, now);
        }
        Ok(())
    }

    fn check_login(&self, address: &str, source: Option<&str>, now: Timestamp) -> Result<(), AccessError> {
        let keys = login_keys(address, source);
        let mut conn = self.client()?;
        let rows = conn
            .client
            .query(
                "SELECT key, times FROM limit_windows WHERE key = ANY($1)",
                &[&keys.iter().map(|k| &k.0).collect::<Vec<_>>()],
            )
            .map_err(|e| store(map_err(e)))?;
        for row in rows {
            let key: String = row.try_get(0).map_err(|e| store(map_err(e)))?;
            let times: Vec<i64> = row.try_get(1).map_err(|e| store(map_err(e)))?;
            if let Some((_, allowed)) = keys.iter().find(|(k, _)| *k == key) {
                refuse_when_full(&mut instants(&times), *allowed, LOGIN_WINDOW_SECS, now)?;
            }
        }
        Ok(())
    }

    fn record_login_failure(&self, address: &str, source: Option<&str>, now: Timestamp) -> Result<(), AccessError> {
        let keys: Vec<String> = login_keys(address, source).into_iter().map(|(k, _)| k).collect();
        let mut conn = self.client()?;
        let st = Self::prepared(&mut conn, RECORD_FAILURE)?;
        conn.client
            .execute(&st, &[&keys, &micros(LOGIN_WINDOW_SECS), &now.unix_micros()])
            .map_err(|e| store(map_err(e)))?;
        Ok(())
    }

    fn clear_login_failures(&self, address: &str) -> Result<(), AccessError> {
        let mut conn = self.client()?;
        conn.client
            .execute("DELETE FROM limit_windows WHERE key = $1", &[&login_keys(address, None)[0].0])
            .map_err(|e| store(map_err(e)))?;
        Ok(())
    }
}

/// The windows of a login: the address's, then the source's, with the failures each allows.
fn login_keys(address: &str, source: Option<&str>) -> Vec<(String, usize)> {
    use courrier_core::access::limits::{LOGIN_FAILURES_PER_ADDRESS, LOGIN_FAILURES_PER_SOURCE};
    std::iter::once((format!("login:address:{address}"), LOGIN_FAILURES_PER_ADDRESS))
        .chain(source.map(|s| (format!("login:source:{s}"), LOGIN_FAILURES_PER_SOURCE)))
        .collect()
}

impl Counters for PgLimits {
    /// Every window or none, in one transaction: the rows made to exist, locked, checked, counted.
    fn take_all(&self, windows: &[Window], now: Timestamp) -> Result<(), AccessError> {
        if windows.is_empty() {
            return Ok(());
        }
        let mut conn = self.client()?;
        let keys: Vec<String> = windows.iter().map(|w| format!("c:{}", w.key)).collect();
        let longest = windows.iter().map(|w| w.window_secs).max().unwrap_or(0);
        let now_us = now.unix_micros();
        let counted = (|| -> Result<Result<(), AccessError>, postgres::Error> {
            let mut tx = conn.client.transaction()?;
            tx.execute(
                "INSERT INTO limit_windows (key, times, expires_at) SELECT k, '{}', 0 FROM unnest($1::TEXT[]) k \
                 ON CONFLICT (key) DO NOTHING",
                &[&keys],
            )?;
            // In key order, so that two servers counting overlapping windows never deadlock.
            let rows =
                tx.query("SELECT key, times FROM limit_windows WHERE key = ANY($1) ORDER BY key FOR UPDATE", &[&keys])?;
            let mut wait = 0;
            let mut kept = Vec::with_capacity(windows.len());
            for (w, key) in windows.iter().zip(&keys) {
                let times: Vec<i64> =
                    rows.iter().find(|r| r.get::<_, String>(0) == *key).map(|r| r.get(1)).unwrap_or_default();
                let mut live = instants(&times);
                if let Err(AccessError::RateLimited { retry_after }) =
                    refuse_when_full(&mut live, w.allowed, w.window_secs, now)
                {
                    wait = wait.max(retry_after);
                }
                live.push_back(now);
                kept.push(live.iter().map(|t| t.unix_micros()).collect::<Vec<i64>>());
            }
            if wait > 0 {
                // Nothing counted; the rows made to exist are forgotten with the transaction.
                return Ok(Err(AccessError::RateLimited { retry_after: wait }));
            }
            for (key, times) in keys.iter().zip(&kept) {
                tx.execute(
                    "UPDATE limit_windows SET times = $2, expires_at = $3 WHERE key = $1",
                    &[key, times, &(now_us + micros(longest))],
                )?;
            }
            tx.commit()?;
            Ok(Ok(()))
        })();
        counted.map_err(|e| store(map_err(e)))?
    }
}
