//! PostgreSQL's versioned migrations, with the SQLite adapter's rules: applied in order at open,
//! each in the same transaction as its record in `schema_migrations`; every version not yet
//! recorded is applied (branches merged out of order); a schema newer than this binary is refused.
//! Append only: a published migration is never edited. The versions are PostgreSQL's own: they
//! do not follow the SQLite ones.
//!
//! Several servers may start at once: the whole run holds a transaction-scoped advisory lock, so
//! they take turns and each re-reads the recorded versions under it (DDL is transactional here).

use super::map_err;
use courrier_core::storage::StoreError;

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "audit_and_outbox", sql: include_str!("migrations/0001_audit_outbox.sql") },
    Migration { version: 2, name: "access", sql: include_str!("migrations/0002_access.sql") },
    Migration { version: 3, name: "domains_lists", sql: include_str!("migrations/0003_domains_lists.sql") },
    Migration { version: 4, name: "mailing", sql: include_str!("migrations/0004_mailing.sql") },
    Migration { version: 5, name: "ocr", sql: include_str!("migrations/0005_ocr.sql") },
    Migration { version: 6, name: "shared_state", sql: include_str!("migrations/0006_shared_state.sql") },
    Migration { version: 7, name: "store_copy", sql: include_str!("migrations/0007_store_copy.sql") },
    Migration { version: 8, name: "inbound_spool_key", sql: include_str!("migrations/0008_inbound_spool_key.sql") },
    Migration { version: 9, name: "outbox_commit_order", sql: include_str!("migrations/0009_outbox_commit_order.sql") },
];

/// The advisory lock key of migrations ("courrier" + 1 in ASCII, as one number): no other lock of
/// the installation uses it.
const MIGRATION_LOCK: i64 = 0x636f_7572_7269_6501;

/// How many migrations this binary knows.
#[cfg(test)]
pub(super) fn known() -> i64 {
    MIGRATIONS.len() as i64
}

pub(super) fn latest() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Brings the schema up to date.
pub(super) fn apply(client: &mut postgres::Client, now_micros: i64) -> Result<(), StoreError> {
    let mut tx = client.transaction().map_err(map_err)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(map_err)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version    BIGINT PRIMARY KEY,
             name       TEXT   NOT NULL,
             applied_at BIGINT NOT NULL
         )",
    )
    .map_err(map_err)?;
    let applied: Vec<i64> = tx
        .query("SELECT version FROM schema_migrations", &[])
        .map_err(map_err)?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()
        .map_err(map_err)?;
    if let Some(&found) = applied.iter().max()
        && found > latest()
    {
        return Err(StoreError::SchemaTooNew { found, known: latest() });
    }
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        tx.batch_execute(m.sql).map_err(map_err)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &now_micros],
        )
        .map_err(map_err)?;
        tracing::info!(version = m.version, name = m.name, "applied PostgreSQL migration");
    }
    tx.commit().map_err(map_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_increase_by_one_from_one() {
        // As SQLite's: a gap is a version written on a parallel branch, applied when merged.
        let mut previous = 0;
        for m in MIGRATIONS {
            assert!(m.version > previous && m.version <= previous + 4, "{} after {previous}", m.name);
            previous = m.version;
        }
    }
}
