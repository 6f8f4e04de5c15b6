//! Mail-account credentials on PostgreSQL (the SQLite adapter's `credentials.rs`): the sealed
//! password is stored as given.

use super::mailing::{parsed, ts};
use super::{PgTx, corrupt, get};
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::model::{CredentialKind, ListId, MailCredential, Security};
use courrier_core::mailing::ports::CredentialRepo;
use courrier_core::storage::StoreError;
use postgres::Row;
use postgres::types::ToSql;

const COLUMNS: &str = "list_id, kind, host, port, security, username, password_sealed, folder, last_ok_at, \
                       last_error, last_error_at, created_at, updated_at";

fn row(r: &Row) -> Result<MailCredential, StoreError> {
    let port: i64 = get(r, 3)?;
    Ok(MailCredential {
        list_id: ListId::from_stored(get(r, 0)?),
        kind: parsed(r, 1, "credential kind", CredentialKind::parse)?,
        host: get(r, 2)?,
        port: u16::try_from(port).map_err(|_| corrupt("credential port", &port.to_string()))?,
        security: parsed(r, 4, "credential security", Security::parse)?,
        username: get(r, 5)?,
        password_sealed: get(r, 6)?,
        folder: get(r, 7)?,
        last_ok_at: ts(get(r, 8)?),
        last_error: get(r, 9)?,
        last_error_at: ts(get(r, 10)?),
        created_at: Timestamp::from_unix_micros(get(r, 11)?),
        updated_at: Timestamp::from_unix_micros(get(r, 12)?),
    })
}

impl PgTx {
    fn credentials_where(
        &mut self,
        clause: &str,
        args: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<MailCredential>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM mail_credentials WHERE {clause} ORDER BY list_id, kind");
        self.query(&sql, args)?.iter().map(row).collect()
    }
}

impl CredentialRepo for PgTx {
    fn credentials_of(&mut self, list: ListId) -> Result<Vec<MailCredential>, StoreError> {
        self.credentials_where("list_id = $1", &[&list.get()])
    }

    fn credential(&mut self, list: ListId, kind: CredentialKind) -> Result<Option<MailCredential>, StoreError> {
        let found = self.credentials_where("list_id = $1 AND kind = $2", &[&list.get(), &kind.as_str()])?;
        Ok(found.into_iter().next())
    }

    fn credentials_of_kind(&mut self, kind: CredentialKind) -> Result<Vec<MailCredential>, StoreError> {
        self.credentials_where("kind = $1", &[&kind.as_str()])
    }

    fn upsert_credential(&mut self, c: &MailCredential) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO mail_credentials (list_id, kind, host, port, security, username, password_sealed, folder,
                 last_ok_at, last_error, last_error_at, throttled_until, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, NULL, $12, $13)
             ON CONFLICT (list_id, kind) DO UPDATE SET host = excluded.host, port = excluded.port,
                 security = excluded.security, username = excluded.username,
                 password_sealed = excluded.password_sealed, folder = excluded.folder,
                 last_ok_at = excluded.last_ok_at, last_error = excluded.last_error,
                 last_error_at = excluded.last_error_at, throttled_until = NULL,
                 updated_at = excluded.updated_at",
            &[
                &c.list_id.get(),
                &c.kind.as_str(),
                &c.host,
                &i64::from(c.port),
                &c.security.as_str(),
                &c.username,
                &c.password_sealed,
                &c.folder,
                &c.last_ok_at.map(Timestamp::unix_micros),
                &c.last_error,
                &c.last_error_at.map(Timestamp::unix_micros),
                &c.created_at.unix_micros(),
                &c.updated_at.unix_micros(),
            ],
        )?;
        Ok(())
    }

    fn delete_credential(&mut self, list: ListId, kind: CredentialKind) -> Result<bool, StoreError> {
        let n = self
            .execute("DELETE FROM mail_credentials WHERE list_id = $1 AND kind = $2", &[&list.get(), &kind.as_str()])?;
        Ok(n > 0)
    }

    fn record_credential_outcome(
        &mut self,
        list: ListId,
        kind: CredentialKind,
        error: Option<&str>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let (list, kind, now) = (list.get(), kind.as_str(), now.unix_micros());
        match error {
            None => self.execute(
                "UPDATE mail_credentials SET last_ok_at = $3 WHERE list_id = $1 AND kind = $2",
                &[&list, &kind, &now],
            )?,
            Some(e) => self.execute(
                "UPDATE mail_credentials SET last_error = $4, last_error_at = $3 WHERE list_id = $1 AND kind = $2",
                &[&list, &kind, &now, &e],
            )?,
        };
        Ok(())
    }

    fn throttle_submission(&mut self, list: ListId, until: Timestamp) -> Result<(), StoreError> {
        self.execute(
            "UPDATE mail_credentials SET throttled_until = GREATEST(COALESCE(throttled_until, 0), $2)
             WHERE list_id = $1 AND kind = 'submission'",
            &[&list.get(), &until.unix_micros()],
        )?;
        Ok(())
    }
}
