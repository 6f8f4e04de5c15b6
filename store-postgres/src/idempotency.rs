//! The Idempotency-Key registry on PostgreSQL (the SQLite adapter's `idempotency.rs`).

use super::{PgTx, get};
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::ports::{IdempotencyRecord, IdempotencyRepo};
use courrier_core::storage::StoreError;
use courrier_store_sql::mailing_columns::{IdempotencyColumns, idempotency_record};

impl IdempotencyRepo for PgTx {
    fn idempotency_get(&mut self, api_key: i64, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let Some(r) = self.query_opt(
            "SELECT fingerprint, state, status, body, created_at, expires_at FROM idempotency_keys
             WHERE api_key_id = $1 AND idem_key = $2",
            &[&api_key, &key],
        )?
        else {
            return Ok(None);
        };
        Ok(Some(idempotency_record(IdempotencyColumns {
            fingerprint: get(&r, 0)?,
            state: get(&r, 1)?,
            status: get(&r, 2)?,
            body: get(&r, 3)?,
            created_at: get(&r, 4)?,
            expires_at: get(&r, 5)?,
        })))
    }

    fn idempotency_reserve(
        &mut self,
        api_key: i64,
        key: &str,
        fingerprint: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError> {
        // A key taken is `Duplicate`, and the transaction goes on (the caller reads the record):
        // nothing inserted says so without a savepoint.
        let inserted = self.execute(
            "INSERT INTO idempotency_keys (api_key_id, idem_key, fingerprint, state, created_at, expires_at)
             VALUES ($1, $2, $3, 'running', $4, $5) ON CONFLICT DO NOTHING",
            &[&api_key, &key, &fingerprint, &now.unix_micros(), &expires_at.unix_micros()],
        )?;
        if inserted == 0 {
            return Err(StoreError::Duplicate);
        }
        Ok(())
    }

    fn idempotency_finish(&mut self, api_key: i64, key: &str, status: u16, body: &str) -> Result<(), StoreError> {
        self.execute(
            "UPDATE idempotency_keys SET state = 'done', status = $3, body = $4 WHERE api_key_id = $1 AND idem_key = $2",
            &[&api_key, &key, &i64::from(status), &body],
        )?;
        Ok(())
    }

    fn idempotency_release(&mut self, api_key: i64, key: &str) -> Result<(), StoreError> {
        self.execute("DELETE FROM idempotency_keys WHERE api_key_id = $1 AND idem_key = $2", &[&api_key, &key])?;
        Ok(())
    }

    fn idempotency_purge(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        self.execute("DELETE FROM idempotency_keys WHERE expires_at <= $1", &[&now.unix_micros()])
    }
}
