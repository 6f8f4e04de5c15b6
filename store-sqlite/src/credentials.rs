//! Mail-account credentials (`mail_credentials`): the sealed password is stored as given.

use super::access::{corrupt, ts};
use super::{SqliteTx, map_err};
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::accounts::Security;
use courrier_core::mailing::credentials::{CredentialKind, MailCredential};
use courrier_core::mailing::model::ListId;
use courrier_core::mailing::ports::CredentialRepo;
use courrier_core::storage::StoreError;
use rusqlite::{OptionalExtension, params};

const COLUMNS: &str = "list_id, kind, host, port, security, username, password_sealed, folder, last_ok_at, \
                       last_error, last_error_at, created_at, updated_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MailCredential> {
    let kind: String = r.get(1)?;
    let security: String = r.get(4)?;
    Ok(MailCredential {
        list_id: ListId::from_stored(r.get(0)?),
        kind: CredentialKind::parse(&kind).ok_or_else(|| corrupt("credential kind", &kind))?,
        host: r.get(2)?,
        port: u16::try_from(r.get::<_, i64>(3)?).map_err(|_| corrupt("credential port", "out of range"))?,
        security: Security::parse(&security).ok_or_else(|| corrupt("credential security", &security))?,
        username: r.get(5)?,
        password_sealed: r.get(6)?,
        folder: r.get(7)?,
        last_ok_at: ts(r.get(8)?),
        last_error: r.get(9)?,
        last_error_at: ts(r.get(10)?),
        created_at: Timestamp::from_unix_micros(r.get(11)?),
        updated_at: Timestamp::from_unix_micros(r.get(12)?),
    })
}

impl SqliteTx {
    fn credentials_where(
        &mut self,
        clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<MailCredential>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM mail_credentials WHERE {clause} ORDER BY list_id, kind");
        self.conn().prepare_cached(&sql).and_then(|mut st| st.query_map(args, row)?.collect()).map_err(map_err)
    }
}

impl CredentialRepo for SqliteTx {
    fn credentials_of(&mut self, list: ListId) -> Result<Vec<MailCredential>, StoreError> {
        self.credentials_where("list_id = ?1", [list.get()])
    }

    fn credential(&mut self, list: ListId, kind: CredentialKind) -> Result<Option<MailCredential>, StoreError> {
        self.conn()
            .prepare_cached(&format!("SELECT {COLUMNS} FROM mail_credentials WHERE list_id = ?1 AND kind = ?2"))
            .and_then(|mut st| st.query_row(params![list.get(), kind.as_str()], row).optional())
            .map_err(map_err)
    }

    fn credentials_of_kind(&mut self, kind: CredentialKind) -> Result<Vec<MailCredential>, StoreError> {
        self.credentials_where("kind = ?1", [kind.as_str()])
    }

    fn upsert_credential(&mut self, c: &MailCredential) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "INSERT INTO mail_credentials (list_id, kind, host, port, security, username, password_sealed, folder,
                     last_ok_at, last_error, last_error_at, throttled_until, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, NULL, ?12, ?13)
                 ON CONFLICT (list_id, kind) DO UPDATE SET host = excluded.host, port = excluded.port,
                     security = excluded.security, username = excluded.username,
                     password_sealed = excluded.password_sealed, folder = excluded.folder,
                     last_ok_at = excluded.last_ok_at, last_error = excluded.last_error,
                     last_error_at = excluded.last_error_at, throttled_until = NULL,
                     updated_at = excluded.updated_at",
            )
            .and_then(|mut st| {
                st.execute(params![
                    c.list_id.get(),
                    c.kind.as_str(),
                    c.host,
                    i64::from(c.port),
                    c.security.as_str(),
                    c.username,
                    c.password_sealed,
                    c.folder,
                    c.last_ok_at.map(Timestamp::unix_micros),
                    c.last_error,
                    c.last_error_at.map(Timestamp::unix_micros),
                    c.created_at.unix_micros(),
                    c.updated_at.unix_micros(),
                ])
            })
            .map_err(map_err)?;
        Ok(())
    }

    fn delete_credential(&mut self, list: ListId, kind: CredentialKind) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .prepare_cached("DELETE FROM mail_credentials WHERE list_id = ?1 AND kind = ?2")
            .and_then(|mut st| st.execute(params![list.get(), kind.as_str()]))
            .map_err(map_err)?;
        Ok(n > 0)
    }

    fn record_credential_outcome(
        &mut self,
        list: ListId,
        kind: CredentialKind,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let sql = match error {
            None => "UPDATE mail_credentials SET last_ok_at = ?3 WHERE list_id = ?1 AND kind = ?2 AND ?4 IS NULL",
            Some(_) => {
                "UPDATE mail_credentials SET last_error = ?4, last_error_at = ?3 WHERE list_id = ?1 AND kind = ?2"
            }
        };
        self.conn()
            .prepare_cached(sql)
            .and_then(|mut st| st.execute(params![list.get(), kind.as_str(), now.unix_micros(), error]))
            .map_err(map_err)?;
        Ok(())
    }

    fn throttle_submission(&mut self, list: ListId, until: Timestamp) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE mail_credentials SET throttled_until = MAX(COALESCE(throttled_until, 0), ?2)
                 WHERE list_id = ?1 AND kind = 'submission'",
            )
            .and_then(|mut st| st.execute(params![list.get(), until.unix_micros()]))
            .map_err(map_err)?;
        Ok(())
    }
}
