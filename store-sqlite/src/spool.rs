//! The spool of accepted messages (`mailing::ports::Spool`) in a SQLite file of its own
//! (`spool.db` in the data directory): its own WAL and its own writer, so an LMTP `250` waits for
//! this file's commit only, never behind processing's and delivery's commits on the main
//! database's one writer.
//!
//! Why a second SQLite file rather than an append-only log of our own: the accept needs exactly
//! what SQLite's WAL already gives (a commit shared by the sessions receiving together, made
//! durable by one fsync with `synchronous=FULL`, torn writes ignored at recovery), and the move
//! needs random deletes and an oldest-first read, which a log would need compaction and its own
//! recovery code for.
//!
//! Writes go through one connection under a lock: `put` (the acceptor's store thread, one commit
//! per group of stores, `synchronous=FULL`) and `forget` (processing, after its move committed in
//! the main database; `synchronous=NORMAL`: a delete lost to a crash only repeats a move, which
//! finds the key already there). Reads (`oldest`, `count`) use a second connection and never wait
//! for the writer; a checkpoint thread of its own copies the WAL back, off the accepts' commits.

use super::checkpoint::Checkpointer;
use super::map_err;
use courrier_core::kernel::Timestamp;
use courrier_core::mailing::model::{ListId, Role};
use courrier_core::mailing::ports::{NewInbound, Spool, Spooled};
use courrier_core::storage::StoreError;
use rusqlite::{Connection, params};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The spool file's schema version (`PRAGMA user_version`).
const SCHEMA: i64 = 1;

const SCHEMA_SQL: &str = "
    CREATE TABLE IF NOT EXISTS spool_file (
        only       INTEGER PRIMARY KEY CHECK (only = 1),
        generation TEXT    NOT NULL
    );
    CREATE TABLE IF NOT EXISTS spool (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        list_id       INTEGER NOT NULL,
        role          TEXT    NOT NULL,
        bounce_token  TEXT,
        recipient     TEXT    NOT NULL,
        envelope_from TEXT,
        raw           BLOB    NOT NULL,
        received_at   INTEGER NOT NULL
    );";

pub struct SqliteSpool {
    path: String,
    /// Names this file among every spool file the installation had: a file removed and made
    /// again starts its ids at 1, and its keys must not be taken for those already moved.
    generation: String,
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    _checkpointer: Checkpointer,
}

impl std::fmt::Debug for SqliteSpool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSpool").field("path", &self.path).field("generation", &self.generation).finish()
    }
}

fn lock(m: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A connection outside a transaction after each call: a panic leaves nothing half-done.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqliteSpool {
    /// Opens the spool file, creating it when missing. A file that is there but is not a spool
    /// (not a SQLite database, damaged, another schema) is refused, never replaced: it may hold
    /// accepted messages nobody has processed yet.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let refuse = |reason: String| StoreError::Open {
            path: shown.clone(),
            reason: format!(
                "{reason}. This is the spool of accepted mail (messages already acknowledged over LMTP, \
                 maybe not processed yet): it is not replaced automatically. Recover it, or move it aside \
                 to start with an empty spool (what it held is then lost)"
            ),
        };
        let open = || -> rusqlite::Result<Connection> {
            let c = Connection::open(path)?;
            c.busy_timeout(super::BUSY_TIMEOUT)?;
            Ok(c)
        };
        let conn = open().map_err(|e| refuse(e.to_string()))?;
        let mode: String =
            conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(|e| refuse(e.to_string()))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(refuse(format!("the file refused WAL mode (journal_mode is {mode})")));
        }
        let check: String =
            conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(|e| refuse(e.to_string()))?;
        if check != "ok" {
            return Err(refuse(format!("the file is damaged ({check})")));
        }
        let version: i64 =
            conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| refuse(e.to_string()))?;
        let tables: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'", [], |r| r.get(0))
            .map_err(|e| refuse(e.to_string()))?;
        match (version, tables) {
            (0, 0) => {
                let mut generation = [0u8; 16];
                courrier_core::kernel::secrets::fill_random(&mut generation);
                let generation: String = generation.iter().map(|b| format!("{b:02x}")).collect();
                conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA_SQL} PRAGMA user_version = {SCHEMA};"))
                    .and_then(|()| {
                        conn.execute("INSERT INTO spool_file (only, generation) VALUES (1, ?1)", [&generation])
                    })
                    .and_then(|_| conn.execute_batch("COMMIT"))
                    .map_err(|e| refuse(e.to_string()))?;
            }
            (SCHEMA, _) => {}
            (v, _) => return Err(refuse(format!("the file is not a spool of this version (user_version {v})"))),
        }
        let generation: String = conn
            .query_row("SELECT generation FROM spool_file WHERE only = 1", [], |r| r.get(0))
            .map_err(|e| refuse(e.to_string()))?;
        drop(conn);
        let writer = open()
            .and_then(|c| c.execute_batch("PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = 16384;").map(|()| c))
            .map_err(|e| refuse(e.to_string()))?;
        let reader = open().map_err(|e| refuse(e.to_string()))?;
        let checkpointer = open()
            .and_then(|c| c.execute_batch("PRAGMA synchronous = FULL;").map(|()| c))
            .map_err(|e| refuse(e.to_string()))?;
        Ok(Self {
            path: shown,
            generation,
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            _checkpointer: Checkpointer::start(checkpointer),
        })
    }

    fn key(&self, id: i64) -> String {
        format!("{}:{id}", self.generation)
    }

    /// The row id of one of this file's keys; `None` for another file's.
    fn id_of(&self, key: &str) -> Option<i64> {
        key.strip_prefix(&self.generation)?.strip_prefix(':')?.parse().ok()
    }
}

/// Runs `body` in a write transaction on `conn`, committing it, or rolling it back on error.
fn in_tx<T>(conn: &Connection, body: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE").map_err(map_err)?;
    match body(conn).and_then(|t| conn.execute_batch("COMMIT").map(|()| t)) {
        Ok(t) => Ok(t),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(map_err(e))
        }
    }
}

impl Spool for SqliteSpool {
    fn put(&self, messages: &[NewInbound<'_>], now: Timestamp) -> Result<Vec<String>, StoreError> {
        let conn = lock(&self.writer);
        let ids = in_tx(&conn, |c| {
            let mut st = c.prepare_cached(
                "INSERT INTO spool (list_id, role, bounce_token, recipient, envelope_from, raw, received_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            messages
                .iter()
                .map(|m| {
                    let token = match m.role {
                        Role::Bounces { token } => token.as_deref(),
                        _ => None,
                    };
                    st.execute(params![
                        m.list_id.get(),
                        m.role.as_str(),
                        token,
                        m.recipient,
                        m.envelope_from,
                        m.raw,
                        now.unix_micros()
                    ])?;
                    Ok(c.last_insert_rowid())
                })
                .collect::<rusqlite::Result<Vec<i64>>>()
        })?;
        Ok(ids.into_iter().map(|id| self.key(id)).collect())
    }

    fn oldest(&self, limit: u32) -> Result<Vec<Spooled>, StoreError> {
        let conn = lock(&self.reader);
        let mut st = conn
            .prepare_cached(
                "SELECT id, list_id, role, bounce_token, recipient, envelope_from, raw, received_at
                 FROM spool ORDER BY id LIMIT ?1",
            )
            .map_err(map_err)?;
        let rows = st
            .query_map([limit], |r| {
                let role: String = r.get(2)?;
                Ok((r.get::<_, i64>(0)?, r.get(1)?, role, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
            .map_err(map_err)?;
        rows.into_iter()
            .map(|(id, list_id, role, token, recipient, envelope_from, raw, received_at)| {
                Ok(Spooled {
                    key: self.key(id),
                    list_id: ListId::from_stored(list_id),
                    role: Role::from_stored(&role, token)
                        .ok_or_else(|| map_err(super::access::corrupt("spooled message role", &role)))?,
                    recipient,
                    envelope_from,
                    raw,
                    received_at: Timestamp::from_unix_micros(received_at),
                })
            })
            .collect()
    }

    fn forget(&self, keys: &[String]) -> Result<(), StoreError> {
        let ids: Vec<i64> = keys.iter().filter_map(|k| self.id_of(k)).collect();
        if ids.is_empty() {
            return Ok(());
        }
        let conn = lock(&self.writer);
        conn.execute_batch("PRAGMA synchronous = NORMAL").map_err(map_err)?;
        let done = in_tx(&conn, |c| {
            let mut st = c.prepare_cached("DELETE FROM spool WHERE id = ?1")?;
            for id in &ids {
                st.execute([id])?;
            }
            Ok(())
        });
        conn.execute_batch("PRAGMA synchronous = FULL").map_err(map_err)?;
        done
    }

    fn count(&self) -> Result<u64, StoreError> {
        let conn = lock(&self.reader);
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM spool", [], |r| r.get(0)).map_err(map_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(raw: &[u8]) -> (Role, Vec<u8>) {
        (Role::Post, raw.to_vec())
    }

    #[test]
    fn a_spool_keeps_what_it_was_given_across_a_reopen_and_forgets_only_what_it_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.db");
        let spool = SqliteSpool::open(&path).unwrap();
        let (role, raw) = message(b"Subject: a\r\n\r\nx\r\n");
        let m = NewInbound {
            list_id: ListId::from_stored(7),
            role: &role,
            recipient: "news@example.org",
            envelope_from: None,
            raw: &raw,
        };
        let keys = spool.put(&[m.clone(), m], Timestamp::from_unix_secs(5)).unwrap();
        assert_eq!(keys.len(), 2);
        drop(spool);
        let spool = SqliteSpool::open(&path).unwrap();
        let kept = spool.oldest(10).unwrap();
        assert_eq!(kept.iter().map(|s| s.key.clone()).collect::<Vec<_>>(), keys, "same keys after a reopen");
        assert_eq!((kept[0].raw.as_slice(), kept[0].list_id.get()), (raw.as_slice(), 7));
        spool.forget(&keys[..1]).unwrap();
        spool.forget(&["another-file:2".to_owned()]).unwrap();
        assert_eq!(spool.count().unwrap(), 1, "only the first forgotten; another file's key names nothing here");
    }

    #[test]
    fn a_spool_made_again_after_its_file_was_removed_gives_keys_never_given_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.db");
        let (role, raw) = message(b"x");
        let m = NewInbound {
            list_id: ListId::from_stored(1),
            role: &role,
            recipient: "a@b.c",
            envelope_from: None,
            raw: &raw,
        };
        let first =
            SqliteSpool::open(&path).unwrap().put(std::slice::from_ref(&m), Timestamp::from_unix_secs(1)).unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let second = SqliteSpool::open(&path).unwrap().put(&[m], Timestamp::from_unix_secs(1)).unwrap();
        assert_ne!(first, second);
    }

    #[test]
    fn a_spool_file_that_is_not_a_database_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.db");
        std::fs::write(&path, vec![b'x'; 8192]).unwrap();
        let err = SqliteSpool::open(&path).unwrap_err().to_string();
        assert!(err.contains("spool of accepted mail") && err.contains("move it aside"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; 8192], "left as it was");
    }
}
