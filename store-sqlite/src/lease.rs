//! The adapter's leased queues: a row waits (due at `next_attempt_at`), a claim leases it to one
//! worker (`state = 'sending'` until `lease_until`, one more attempt), and the worker finishes it
//! (its outcome), or releases it (back to the queue, the attempt not counted); a row whose lease
//! ran out goes back to the queue. Mail copies (`copies`) and webhook deliveries
//! (`webhook_deliveries`) are two such queues: one mechanism, parameterised by the table, the
//! states a row waits in, and what a claim picks and returns. Each statement's text is made
//! once, when the queue is first used.

use super::map_err;
use courrier_core::kernel::Timestamp;
use courrier_core::storage::StoreError;
use rusqlite::{Connection, Params, Row, params};

pub(super) struct LeasedQueue {
    claim: String,
    due: String,
    requeue_expired: String,
    finish: String,
    release: String,
}

impl LeasedQueue {
    /// `table` has the columns `id`, `state`, `next_attempt_at`, `lease_until`, `attempts`,
    /// `last_error` and `updated_at`. `waiting`: the condition on `state` of a waiting row, as
    /// the table's partial index of due rows states it (so that index serves the idle check).
    /// `pick`: the query of the ids one claim leases, ordered and limited, over the claim's
    /// parameters (`?1` now, `?2` the lease's end, `?3` the limit, then its own). `returning`:
    /// the columns of a leased row a claim returns.
    pub(super) fn new(table: &str, waiting: &str, pick: &str, returning: &str) -> Self {
        Self {
            // One statement: the rows picked are the rows leased, whatever another worker does.
            claim: format!(
                "UPDATE {table} SET state = 'sending', lease_until = ?2, attempts = attempts + 1, updated_at = ?1
                 WHERE id IN ({pick})
                 RETURNING {returning}"
            ),
            // Two EXISTS, each served by its partial index.
            due: format!(
                "SELECT EXISTS (SELECT 1 FROM {table} WHERE {waiting} AND next_attempt_at <= ?1)
                     OR EXISTS (SELECT 1 FROM {table} WHERE state = 'sending' AND lease_until < ?1)"
            ),
            requeue_expired: format!(
                "UPDATE {table} SET state = 'queued', lease_until = NULL, updated_at = ?1
                 WHERE state = 'sending' AND lease_until < ?1"
            ),
            finish: format!(
                "UPDATE {table} SET state = ?2, next_attempt_at = COALESCE(?3, next_attempt_at), last_error = ?4,
                     lease_until = NULL, updated_at = ?5
                 WHERE id = ?1 AND state = 'sending'"
            ),
            release: format!(
                "UPDATE {table} SET state = 'queued', lease_until = NULL, next_attempt_at = ?2,
                     attempts = MAX(attempts - 1, 0), updated_at = ?2
                 WHERE id = ?1 AND state = 'sending'"
            ),
        }
    }

    /// Leases what `pick` chooses; one `row` per leased row (`returning`'s columns).
    pub(super) fn claim<T>(
        &self,
        conn: &Connection,
        params: impl Params,
        row: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StoreError> {
        conn.prepare_cached(&self.claim).and_then(|mut st| st.query_map(params, row)?.collect()).map_err(map_err)
    }

    /// Whether a row is due or a lease ran out: what makes a worker's round worth the write lock.
    pub(super) fn due(&self, conn: &Connection, now: Timestamp) -> Result<bool, StoreError> {
        conn.prepare_cached(&self.due)
            .and_then(|mut st| st.query_row([now.unix_micros()], |r| r.get(0)))
            .map_err(map_err)
    }

    /// Rows whose lease ran out go back to the queue; how many.
    pub(super) fn requeue_expired(&self, conn: &Connection, now: Timestamp) -> Result<u64, StoreError> {
        let n = conn
            .prepare_cached(&self.requeue_expired)
            .and_then(|mut st| st.execute([now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n as u64)
    }

    /// Records a leased row's outcome (`state`, when it is due again, the error); `false` when
    /// the row was not leased any more.
    pub(super) fn finish(
        &self,
        conn: &Connection,
        id: i64,
        state: &str,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let n = conn
            .prepare_cached(&self.finish)
            .and_then(|mut st| {
                st.execute(params![id, state, next_attempt_at.map(Timestamp::unix_micros), error, now.unix_micros()])
            })
            .map_err(map_err)?;
        Ok(n == 1)
    }

    /// Gives a leased row back to the queue, due at `now`, its claim not counted as an attempt.
    pub(super) fn release(&self, conn: &Connection, id: i64, now: Timestamp) -> Result<(), StoreError> {
        conn.prepare_cached(&self.release)
            .and_then(|mut st| st.execute(params![id, now.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SqliteStore, sends::COPIES, webhooks::DELIVERIES};
    use super::LeasedQueue;

    /// An idle worker looks every second or so: its check must read the two partial indexes
    /// (due rows, leased rows), never the table.
    #[test]
    fn the_idle_check_of_each_queue_reads_only_its_partial_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("c.db"), 0).unwrap();
        let conn = store.pool.get().unwrap();
        let queues: [(&LeasedQueue, &str, &str, &str); 2] = [
            (&COPIES, "copies", "copies_due", "copies_leased"),
            (&DELIVERIES, "webhook_deliveries", "webhook_deliveries_due", "webhook_deliveries_leased"),
        ];
        for (queue, table, due, leased) in queues {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", queue.due))
                .unwrap()
                .query_map([0_i64], |r| r.get(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join("\n");
            assert!(plan.contains(&format!("INDEX {due} ")), "{plan}");
            assert!(plan.contains(&format!("INDEX {leased} ")), "{plan}");
            assert!(!plan.contains(&format!("SCAN {table}")), "{plan}");
        }
    }
}
