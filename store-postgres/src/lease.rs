//! The adapter's leased queues on PostgreSQL (the SQLite adapter's `lease.rs`): a row waits (due
//! at `next_attempt_at`), a claim leases it to one worker (`state = 'sending'` until
//! `lease_until`, one more attempt), the worker finishes or releases it, and a row whose lease ran
//! out goes back to the queue. A claim picks its rows `FOR UPDATE SKIP LOCKED`: two workers
//! claiming at once (on any server) never lease one row twice, and neither waits for the other's
//! rows.

use super::PgTx;
use courrier_core::kernel::Timestamp;
use courrier_core::storage::StoreError;
use postgres::Row;
use postgres::types::ToSql;

pub(super) struct LeasedQueue {
    claim: String,
    due: String,
    requeue_expired: String,
    finish: String,
    release: String,
}

impl LeasedQueue {
    /// `table` has the columns `id`, `state`, `next_attempt_at`, `lease_until`, `attempts`,
    /// `last_error` and `updated_at`. `waiting`: the condition on `state` of a waiting row (as its
    /// partial index of due rows states it). `pick`: the query of the ids one claim leases,
    /// ordered, limited and locked (`FOR UPDATE OF .. SKIP LOCKED`), over the claim's parameters
    /// (`$1` now, `$2` the lease's end, `$3` the limit, then its own). `returning`: the columns of
    /// a leased row a claim returns.
    pub(super) fn new(table: &str, waiting: &str, pick: &str, returning: &str) -> Self {
        Self {
            claim: format!(
                "UPDATE {table} SET state = 'sending', lease_until = $2, attempts = attempts + 1, updated_at = $1
                 WHERE id IN ({pick})
                 RETURNING {returning}"
            ),
            due: format!(
                "SELECT EXISTS (SELECT 1 FROM {table} WHERE {waiting} AND next_attempt_at <= $1)
                     OR EXISTS (SELECT 1 FROM {table} WHERE state = 'sending' AND lease_until < $1)"
            ),
            requeue_expired: format!(
                "UPDATE {table} SET state = 'queued', lease_until = NULL, updated_at = $1
                 WHERE state = 'sending' AND lease_until < $1"
            ),
            finish: format!(
                "UPDATE {table} SET state = $2, next_attempt_at = COALESCE($3, next_attempt_at), last_error = $4,
                     lease_until = NULL, updated_at = $5
                 WHERE id = $1 AND state = 'sending'"
            ),
            release: format!(
                "UPDATE {table} SET state = 'queued', lease_until = NULL, next_attempt_at = $2,
                     attempts = GREATEST(attempts - 1, 0), updated_at = $2
                 WHERE id = $1 AND state = 'sending'"
            ),
        }
    }

    /// Leases what `pick` chooses; the leased rows (`returning`'s columns).
    pub(super) fn claim(&self, tx: &mut PgTx, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, StoreError> {
        tx.query(&self.claim, params)
    }

    pub(super) fn due(&self, tx: &mut PgTx, now: Timestamp) -> Result<bool, StoreError> {
        super::get(&tx.query_one(&self.due, &[&now.unix_micros()])?, 0)
    }

    pub(super) fn requeue_expired(&self, tx: &mut PgTx, now: Timestamp) -> Result<u64, StoreError> {
        tx.execute(&self.requeue_expired, &[&now.unix_micros()])
    }

    pub(super) fn finish(
        &self,
        tx: &mut PgTx,
        id: i64,
        state: &str,
        next_attempt_at: Option<Timestamp>,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        let n = tx.execute(
            &self.finish,
            &[&id, &state, &next_attempt_at.map(Timestamp::unix_micros), &error, &now.unix_micros()],
        )?;
        Ok(n == 1)
    }

    pub(super) fn release(&self, tx: &mut PgTx, id: i64, now: Timestamp) -> Result<(), StoreError> {
        tx.execute(&self.release, &[&id, &now.unix_micros()])?;
        Ok(())
    }
}
