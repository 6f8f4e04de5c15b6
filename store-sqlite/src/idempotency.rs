use super::{SqliteTx, map_err};
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::ports::{IdempotencyRecord, IdempotencyRepo};
use courrier_core::storage::StoreError;
use courrier_store_sql::mailing_columns::{IdempotencyColumns, idempotency_record};
use rusqlite::{OptionalExtension, params};

/// fingerprint, state, status, body, created_at, expires_at
type Row = (String, String, Option<i64>, Option<String>, i64, i64);

impl IdempotencyRepo for SqliteTx {
    fn idempotency_get(&mut self, api_key: i64, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        let row: Option<Row> = self
            .conn()
            .prepare_cached(
                "SELECT fingerprint, state, status, body, created_at, expires_at FROM idempotency_keys
                 WHERE api_key_id = ?1 AND idem_key = ?2",
            )
            .and_then(|mut st| {
                st.query_row(params![api_key, key], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })
                .optional()
            })
            .map_err(map_err)?;
        let Some((fingerprint, state, status, body, created_at, expires_at)) = row else { return Ok(None) };
        Ok(Some(idempotency_record(IdempotencyColumns { fingerprint, state, status, body, created_at, expires_at })))
    }

    fn idempotency_reserve(
        &mut self,
        api_key: i64,
        key: &str,
        fingerprint: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO idempotency_keys (api_key_id, idem_key, fingerprint, state, created_at, expires_at)
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5)",
            )
            .and_then(|mut st| {
                st.execute(params![api_key, key, fingerprint, now.unix_micros(), expires_at.unix_micros()])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn idempotency_finish(&mut self, api_key: i64, key: &str, status: u16, body: &str) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE idempotency_keys SET state = 'done', status = ?3, body = ?4 WHERE api_key_id = ?1 AND idem_key = ?2",
            )
            .and_then(|mut st| st.execute(params![api_key, key, status, body]))
            .map_err(map_err)?;
        Ok(())
    }

    fn idempotency_release(&mut self, api_key: i64, key: &str) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached("DELETE FROM idempotency_keys WHERE api_key_id = ?1 AND idem_key = ?2")
            .and_then(|mut st| st.execute(params![api_key, key]))
            .map_err(map_err)?;
        Ok(())
    }

    fn idempotency_purge(&mut self, now: Timestamp) -> Result<u64, StoreError> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM idempotency_keys WHERE expires_at <= ?1")
            .and_then(|mut st| st.execute([now.unix_micros()]))
            .map_err(map_err)?;
        Ok(n as u64)
    }
}
