//! The SQLite adapter of the storage port: rusqlite over an r2d2 pool, WAL with
//! `synchronous=FULL` (the delivery queue and idempotency records must survive a power loss, not
//! only a killed process), foreign keys on, a busy time-out so writers of other processes queue
//! instead of failing. Writes of this process go through one connection, the write lane
//! ([`lane`]), which queues them in order and commits those that waited together with one fsync.
//! The only place in the workspace that speaks SQL to SQLite.

mod access;
mod checkpoint;
mod invoices;
mod lane;
mod lease;
mod mailing;
mod migrations;
mod ocr;
mod outbox;
mod search;
mod sends;
/// The shared statements (`courrier_store_sql`) run on this adapter; the repositories written once.
mod shared;
courrier_store_sql::audit_repo!(SqliteTx);
courrier_store_sql::credential_repo!(SqliteTx);
courrier_store_sql::bounce_repo!(SqliteTx);
courrier_store_sql::idempotency_repo!(SqliteTx);
courrier_store_sql::inbox_repo!(SqliteTx);
courrier_store_sql::me_repo!(SqliteTx);
courrier_store_sql::moderation_repo!(SqliteTx);
mod spool;
mod webhooks;
mod writer;

pub use search::SearchLimits;
pub use spool::SqliteSpool;

use courrier_core::storage::{Database, Store, StoreError, Transaction, WriteJob};
use r2d2::PooledConnection;
use r2d2_sqlite::SqliteConnectionManager;
use std::path::Path;
use std::time::Duration;

type Pool = r2d2::Pool<SqliteConnectionManager>;

/// How long a writer waits for another to finish before giving up with [`StoreError::Busy`].
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Readers do not block each other in WAL mode; a few more connections than cores is plenty.
const POOL_SIZE: u32 = 16;
/// Prepared statements kept per connection. rusqlite's default of 16 is fewer than one member
/// addition uses on the write connection, so statements were evicted and parsed again.
const STATEMENT_CACHE: usize = 256;

/// Settings of every connection but the first (which migrates).
fn init_connection(c: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    c.busy_timeout(BUSY_TIMEOUT)?;
    c.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // 32 MiB of page cache per connection (the default 2 MiB spilled during imports).
    c.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; PRAGMA cache_size = -32768;")
}

pub struct SqliteStore {
    /// The thread that runs writes handed over whole. FIRST field: dropped (joined) before the
    /// connections and the `-shm` file.
    writer: writer::Writer,
    pool: Pool,
    /// Every write transaction of this process.
    lane: std::sync::Arc<lane::Lane>,
    sqlite_version: String,
    /// A connection that never writes, for `PRAGMA data_version`: its value changes when any
    /// *other* connection commits, and every write goes through the pool, so it sees them all.
    /// With it, the last `data_version` at which `access_version` was read, and what it said.
    watch: std::sync::Mutex<(rusqlite::Connection, Option<(i64, i64)>)>,
    /// The quick test of [`Database::access_marker`]: the WAL-index header as it was read just
    /// before `access_version` was last read, and what that said.
    seen_header: std::sync::Mutex<Option<(WalHeader, u64)>>,

    /// The in-memory search snapshots of big lists (`search.rs`), shared by the pool's connections.
    search: std::sync::Arc<search::SearchCache>,
    /// Checkpoints the WAL off the write lane while the store is open.
    _checkpointer: checkpoint::Checkpointer,
    /// The database's `-shm` file (SQLite's WAL index, shared by every connection of every
    /// process), read for its header; `None` if it could not be opened (then every call takes
    /// the `data_version` path). LAST field, so closed after every connection: closing any
    /// descriptor of a file drops the POSIX locks the process holds on it, SQLite's included.
    shm: Option<std::fs::File>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file and brings its schema up to date.
    pub fn open(path: &Path, now_micros: i64) -> Result<Self, StoreError> {
        let open_err = |reason: String| StoreError::Open { path: path.display().to_string(), reason };
        // Check, convert and migrate on one plain connection first: a file that is not a database
        // fails here at once, where a pool would retry until its time-out.
        let mut conn = rusqlite::Connection::open(path).map_err(|e| open_err(e.to_string()))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| open_err(e.to_string()))?;
        // WAL is a property of the file: set once, every later connection inherits it.
        let mode: String =
            conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)).map_err(|e| open_err(e.to_string()))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(open_err(format!("the file refused WAL mode (journal_mode is {mode})")));
        }
        migrations::apply(&mut conn, now_micros)?;
        let sqlite_version =
            conn.query_row("SELECT sqlite_version()", [], |r| r.get(0)).map_err(|e| open_err(e.to_string()))?;
        let search = search::register(&conn);
        let watch = std::sync::Mutex::new((conn, None));
        let manager = SqliteConnectionManager::file(path).with_init(init_connection);
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(1))
            // r2d2 checks a connection on every checkout with `SELECT 1` through `execute_batch`
            // (parsed anew each time: 2.5% of a member addition's CPU in the profile). A local
            // file's connection does not go stale; a real failure shows on the next statement.
            .test_on_check_out(false)
            .connection_timeout(BUSY_TIMEOUT)
            .build(manager)
            .map_err(|e| open_err(e.to_string()))?;
        let mut writer = rusqlite::Connection::open(path).map_err(|e| open_err(e.to_string()))?;
        init_connection(&mut writer).map_err(|e| open_err(e.to_string()))?;
        // The one connection that writes (the lane) holds what an import's batch touches: the
        // pages of the random (list, address) index above all, rewritten at every commit.
        // Statement journals in memory: a multi-row INSERT keeps one (to undo itself alone), and
        // past 64 KiB SQLite wrote it to a temporary file (a fifth of an import's time).
        // Checkpoints run on their own thread (`checkpoint.rs`), not in the lane's commits; the
        // writer checkpoints itself only past 16,384 pages (64 MiB of WAL), should that thread
        // fall behind.
        writer
            .execute_batch(
                "PRAGMA cache_size = -131072; PRAGMA temp_store = MEMORY; PRAGMA wal_autocheckpoint = 16384;",
            )
            .map_err(|e| open_err(e.to_string()))?;
        let lane = lane::Lane::new(writer, BUSY_TIMEOUT);
        let writer = writer::Writer::start(std::sync::Arc::clone(&lane))
            .map_err(|e| open_err(format!("no writer thread: {e}")))?;
        let checkpointer = rusqlite::Connection::open(path)
            .and_then(|c| c.execute_batch("PRAGMA synchronous = FULL;").map(|()| c))
            .map_err(|e| open_err(e.to_string()))?;
        let checkpointer = checkpoint::Checkpointer::start(checkpointer);
        // The -shm file exists from the first connection in WAL mode on: `conn` made it.
        let mut shm_path = path.as_os_str().to_owned();
        shm_path.push("-shm");
        let shm = std::fs::File::open(&shm_path)
            .inspect_err(
                |e| tracing::warn!(error = %e, "the WAL index could not be opened: keys are checked through SQL"),
            )
            .ok();
        let seen_header = std::sync::Mutex::new(None);
        Ok(Self { writer, pool, lane, sqlite_version, watch, seen_header, search, _checkpointer: checkpointer, shm })
    }

    /// Which lists get an in-memory search snapshot, and the memory all of them may take.
    pub fn set_search_limits(&self, limits: SearchLimits) {
        self.search.set_limits(limits);
    }

    /// Bytes held by search snapshots, and how many lists have one.
    pub fn search_usage(&self) -> (usize, usize) {
        self.search.usage()
    }
}

impl SqliteStore {
    fn begin_write(&self) -> Result<Box<SqliteTx>, StoreError> {
        let unit = self.lane.begin()?;
        Ok(Box::new(SqliteTx {
            conn: Some(TxConn::Write(unit, std::sync::Arc::clone(&self.lane))),
            nested: 0,
            lazy: Lazy::Off,
        }))
    }

    fn begin_read(&self) -> Result<Box<SqliteTx>, StoreError> {
        let conn = self.pool.get().map_err(|e| {
            tracing::warn!(error = %e, "no database connection free in time");
            StoreError::Busy
        })?;
        lane::run(&conn, "BEGIN DEFERRED").map_err(map_err)?;
        Ok(Box::new(SqliteTx { conn: Some(TxConn::Read(conn)), nested: 0, lazy: Lazy::Off }))
    }
}

/// One database, seen by each context through its own transaction: the same [`SqliteTx`]
/// implements every context's repositories.
macro_rules! store_of {
    ($($tx:path),*) => {$(
        impl $tx for SqliteTx {}
        impl Store<dyn $tx> for SqliteStore {
            fn write(&self) -> Result<Box<dyn $tx>, StoreError> {
                Ok(self.begin_write()?)
            }
            fn read(&self) -> Result<Box<dyn $tx>, StoreError> {
                Ok(self.begin_read()?)
            }
            fn submit(&self, job: Box<dyn WriteJob<dyn $tx>>) -> Result<(), Box<dyn WriteJob<dyn $tx>>> {
                fn view(tx: &mut SqliteTx) -> &mut (dyn $tx + 'static) {
                    tx
                }
                self.writer.submit(job, view)
            }
        }
    )*};
}
store_of!(courrier_core::access::ports::Tx, courrier_core::mailing::ports::Tx, courrier_core::ocr::ports::Tx);

impl Database for SqliteStore {
    fn backend(&self) -> String {
        format!("sqlite {} (WAL, synchronous=FULL)", self.sqlite_version)
    }

    fn change_marker(&self) -> Result<u64, StoreError> {
        let watch = self.watch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(data_version(&watch.0)? as u64)
    }

    /// `access_version` (migration 15), read again only when something was committed since the
    /// last read. Whether anything was is asked of the WAL index's header (one `pread`, see
    /// [`WalHeader`]); only when that moved is the counter read (one statement). Without the
    /// header, `PRAGMA data_version` decides (a read transaction of its own: two `fcntl` locks and
    /// a statement, 15% of an authenticated request's CPU in the profile).
    fn access_marker(&self) -> Result<u64, StoreError> {
        // Read before anything else: a commit after this read moves the header again, so the
        // value read below is never kept past a commit it did not see.
        let header = self.shm.as_ref().and_then(WalHeader::read);
        let mut seen = self.seen_header.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(now), Some((then, v))) = (&header, &*seen)
            && now == then
        {
            return Ok(*v);
        }
        let v = match header {
            // The header moved: something was committed, so `data_version` (a read transaction of
            // its own: two `fcntl` locks and a statement) would only say so again. Read the
            // counter alone: after every add, the next request of any client took this path.
            Some(_) => self.access_version()?,
            None => self.access_marker_from_sql()?,
        };
        *seen = header.map(|h| (h, v));
        Ok(v)
    }
}

/// The first copy of the WAL-index header, the first 48 bytes of the `-shm` file
/// (<https://sqlite.org/walformat.html>, "The WAL-Index Header"). Every commit by any connection
/// of any process rewrites it before its `COMMIT` returns, with a counter of transactions
/// (`iChange`) incremented: if it reads the same as before, nothing was committed in between.
/// (A read torn by a concurrent commit reads as a change: the slow path then decides.)
#[derive(Clone, Copy, PartialEq, Eq)]
struct WalHeader([u8; 48]);

impl WalHeader {
    fn read(shm: &std::fs::File) -> Option<Self> {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 48];
        shm.read_exact_at(&mut b, 0).ok()?;
        // `isInit` (byte 12): a header no connection has initialised says nothing.
        (b[12] == 1).then_some(Self(b))
    }
}

impl SqliteStore {
    /// `access_version`, read again only when `data_version` moved since the last read.
    fn access_marker_from_sql(&self) -> Result<u64, StoreError> {
        let mut watch = self.watch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Read before the counter: a commit in between shows as a change at the next call.
        let dv = data_version(&watch.0)?;
        if let Some((seen, v)) = watch.1
            && seen == dv
        {
            return Ok(v as u64);
        }
        let v = read_access_version(&watch.0)?;
        watch.1 = Some((dv, v));
        Ok(v as u64)
    }

    /// `access_version` as committed now, read on the watch connection.
    fn access_version(&self) -> Result<u64, StoreError> {
        let watch = self.watch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(read_access_version(&watch.0)? as u64)
    }
}

fn read_access_version(conn: &rusqlite::Connection) -> Result<i64, StoreError> {
    conn.prepare_cached("SELECT v FROM access_version WHERE id = 1")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .map_err(map_err)
}

fn data_version(conn: &rusqlite::Connection) -> Result<i64, StoreError> {
    conn.prepare_cached("PRAGMA data_version").and_then(|mut st| st.query_row([], |r| r.get(0))).map_err(map_err)
}

/// A transaction: a read on a pooled connection, or a unit of work on the write lane.
/// Repositories are implemented on it, one file each.
pub(crate) struct SqliteTx {
    /// `None` once committed; present on drop means roll back.
    conn: Option<TxConn>,
    /// Nested units open ([`Transaction::begin_nested`]).
    nested: u32,
    /// Whether the outermost nested unit may go without its `SAVEPOINT`.
    lazy: Lazy,
}

/// A nested unit without a `SAVEPOINT` (issue 18, fifth pass): a savepoint makes SQLite copy every
/// page the unit then changes into a statement journal (`subjournalPageIfRequired`), which an add
/// paid on every success for the sake of a refusal. On the writer thread ([`writer`]) a unit that
/// has written nothing when its first nested unit begins can do without: undoing that nested unit
/// is then undoing the whole unit, which the lane does alone (a `ROLLBACK` of a batch that holds
/// nothing else, or `ROLLBACK TO` the unit's own savepoint) when the job is told to undo. So the
/// nested unit begins without SQL, keeping it costs nothing, and undoing it is free when it wrote
/// nothing (a refusal decided before any write, the usual one); when it did write, the unit is
/// marked to be undone whole ([`SqliteTx::must_undo_unit`]), which the writer thread obeys
/// whatever the job says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lazy {
    /// Every nested unit is a `SAVEPOINT` (not the writer thread, or the unit has written).
    Off,
    /// The unit had made `0` row changes (the connection's count) when it began.
    Ready(u64),
    /// The outermost nested unit is open without a `SAVEPOINT`, begun at `0` changes.
    Open(u64),
    /// That nested unit was undone after writing: the whole unit must be, its count then `0`.
    UndoUnit(u64),
}
enum TxConn {
    Read(PooledConnection<SqliteConnectionManager>),
    Write(lane::Unit, std::sync::Arc<lane::Lane>),
}

impl SqliteTx {
    /// A unit of the writer thread: its first nested unit may go without a savepoint ([`Lazy`]).
    fn on_writer_thread(unit: lane::Unit, lane: std::sync::Arc<lane::Lane>) -> Self {
        let changes = unit.conn().total_changes();
        Self { conn: Some(TxConn::Write(unit, lane)), nested: 0, lazy: Lazy::Ready(changes) }
    }

    /// Whether a nested unit without a savepoint was undone after writing: the writes of the whole
    /// unit must then be undone, whatever its job says.
    fn must_undo_unit(&self) -> bool {
        let Lazy::UndoUnit(at) = self.lazy else { return false };
        if self.conn.is_some() && self.conn().total_changes() != at {
            // Nothing does this (a refused add returns at once); say so if something starts to.
            tracing::error!("a unit wrote after undoing a nested unit without savepoint: those writes are undone too");
        }
        true
    }

    fn conn(&self) -> &rusqlite::Connection {
        // Only `commit` takes the connection, and it consumes the transaction.
        match self.conn.as_ref().expect("transaction used after commit") {
            TxConn::Read(c) => c,
            TxConn::Write(unit, _) => unit.conn(),
        }
    }
}

impl Transaction for SqliteTx {
    fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        match self.conn.take().expect("transaction committed twice") {
            TxConn::Write(unit, lane) => lane.commit(unit),
            TxConn::Read(conn) => {
                if let Err(e) = lane::run(&conn, "COMMIT") {
                    // A failed COMMIT leaves the transaction open: roll back before the
                    // connection goes back to the pool.
                    let _ = conn.execute_batch("ROLLBACK");
                    return Err(map_err(e));
                }
                Ok(())
            }
        }
    }

    fn rollback(mut self: Box<Self>) -> Result<(), StoreError> {
        match self.conn.take() {
            Some(TxConn::Write(unit, lane)) => lane.rollback(unit),
            read @ Some(TxConn::Read(_)) => {
                // As a drop does: a read has nothing to lose.
                self.conn = read;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn begin_nested(&mut self) -> Result<(), StoreError> {
        if let (0, Lazy::Ready(start)) = (self.nested, self.lazy)
            && self.conn().total_changes() == start
        {
            self.lazy = Lazy::Open(start);
            self.nested = 1;
            return Ok(());
        }
        lane::run(self.conn(), "SAVEPOINT nested").map_err(map_err)?;
        self.nested += 1;
        Ok(())
    }

    fn keep_nested(&mut self) -> Result<(), StoreError> {
        assert!(self.nested > 0, "keep_nested without begin_nested");
        if let (1, Lazy::Open(start)) = (self.nested, self.lazy) {
            self.lazy = Lazy::Ready(start);
            self.nested = 0;
            return Ok(());
        }
        // A member inserted in the nested unit is indexed with the rest at commit.
        lane::run(self.conn(), "RELEASE nested").map_err(map_err)?;
        self.nested -= 1;
        Ok(())
    }

    fn undo_nested(&mut self) -> Result<(), StoreError> {
        assert!(self.nested > 0, "undo_nested without begin_nested");
        if let (1, Lazy::Open(start)) = (self.nested, self.lazy) {
            let now = self.conn().total_changes();
            self.lazy = if now == start { Lazy::Ready(start) } else { Lazy::UndoUnit(now) };
            self.nested = 0;
            return Ok(());
        }
        let conn = self.conn();
        lane::run(conn, "ROLLBACK TO nested").and_then(|()| lane::run(conn, "RELEASE nested")).map_err(map_err)?;
        self.nested -= 1;
        Ok(())
    }
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        match self.conn.take() {
            Some(TxConn::Write(unit, lane)) => {
                let _ = lane.rollback(unit);
            }
            Some(TxConn::Read(conn)) => {
                if let Err(e) = lane::run(&conn, "ROLLBACK") {
                    tracing::warn!(error = %e, "rollback failed");
                }
            }
            None => {}
        }
    }
}

/// A page of a listing: `count_sql` (returning one integer) and `select_sql` (ending before its
/// `LIMIT`) share `args`; the window's two placeholders are appended after them.
pub(crate) fn paged<T>(
    conn: &rusqlite::Connection,
    count_sql: &str,
    select_sql: &str,
    mut args: Vec<rusqlite::types::Value>,
    page: courrier_core::kernel::Page,
    row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<courrier_core::kernel::Paged<T>, StoreError> {
    use rusqlite::types::Value;
    let total: i64 = conn
        .prepare_cached(count_sql)
        .and_then(|mut st| st.query_row(rusqlite::params_from_iter(&args), |r| r.get(0)))
        .map_err(map_err)?;
    let n = args.len();
    args.push(Value::Integer(i64::from(page.limit())));
    args.push(Value::Integer(i64::try_from(page.offset()).unwrap_or(i64::MAX)));
    let items = conn
        .prepare_cached(&format!("{select_sql} LIMIT ?{} OFFSET ?{}", n + 1, n + 2))
        .and_then(|mut st| st.query_map(rusqlite::params_from_iter(&args), row)?.collect())
        .map_err(map_err)?;
    Ok(courrier_core::kernel::Paged { items, total: u64::try_from(total).unwrap_or(0), page })
}

/// The one place where SQLite's errors become the port's.
pub(crate) fn map_err(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy,
        Some(ErrorCode::ConstraintViolation)
            if matches!(
                &e,
                rusqlite::Error::SqliteFailure(f, _)
                    if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                        || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            ) =>
        {
            StoreError::Duplicate
        }
        _ => StoreError::Backend(e.to_string()),
    }
}

/// The backend as `backend()` names it, without opening (or creating) a database: the linked
/// SQLite library is the one every store of this build opens. For read-only commands
/// (`courrier version`), which must create nothing.
pub fn describe_backend() -> String {
    format!("sqlite {} (WAL, synchronous=FULL)", rusqlite::version())
}

#[cfg(test)]
mod tests {
    use super::*;
    use courrier_core::kernel::{AuditFilter, Page};
    use courrier_core::storage::{in_read, suite};
    use std::sync::Arc;

    /// The concrete store serves every context's transaction: a test names the one it uses.
    pub(super) fn access(s: &SqliteStore) -> &courrier_core::access::ports::Store {
        s
    }

    pub(super) fn mailing(s: &SqliteStore) -> &courrier_core::mailing::ports::Store {
        s
    }

    #[test]
    fn passes_every_context_s_store_suite() {
        let dir = tempfile::tempdir().unwrap();
        let n = std::sync::atomic::AtomicUsize::new(0);
        let fresh = || {
            let i = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Arc::new(SqliteStore::open(&dir.path().join(format!("s{i}.db")), 0).unwrap())
        };
        suite::run_all(&|| fresh() as Arc<courrier_core::access::ports::Store>);
        courrier_core::access::store_suite::run_all(&|| fresh() as Arc<courrier_core::access::ports::Store>);
        courrier_core::mailing::store_suite::run_all(&|| fresh() as Arc<courrier_core::mailing::ports::Store>);
        courrier_core::ocr::store_suite::run_all(&|| fresh() as Arc<courrier_core::ocr::ports::Store>);
    }

    #[test]
    fn writes_handed_to_the_writer_thread_are_grouped_and_each_answered_after_its_commit() {
        use courrier_core::kernel::{Actor, NewAuditEntry, Outcome, RequestId, Timestamp};
        use courrier_core::storage::write_job;
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("w.db"), 0).unwrap();
        let entry = |i: i64| NewAuditEntry {
            at: Timestamp::from_unix_secs(1_700_000_000 + i),
            request_id: RequestId::internal("writer"),
            actor: Actor { user_id: None, key_id: None, member_id: None },
            action: format!("test.write{i}"),
            target: "list:news@example.org".to_owned(),
            outcome: Outcome::Done,
        };
        // Hold the lane, so that the writer thread queues behind this unit with what it took.
        let held = store.lane.begin().unwrap();
        let (answers, answered) = std::sync::mpsc::channel();
        const JOBS: i64 = 16;
        for i in 0..JOBS {
            let answers = answers.clone();
            let job = write_job(
                false,
                move |tx: &mut (dyn courrier_core::access::ports::Tx + 'static)| {
                    tx.append_audit(&entry(i))?;
                    match i {
                        5 => Err(StoreError::Duplicate), // refused: its entry is taken back
                        9 => panic!("a rule's bug"),     // answered, and the thread goes on
                        _ => Ok(i),
                    }
                },
                move |out| answers.send((i, out, std::thread::current().name().map(str::to_owned))).unwrap(),
            );
            assert!(access(&store).submit(Box::new(job)).is_ok(), "the SQLite store has a writer thread");
        }
        drop(answers);
        while store.lane.waiting() < 1 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (commits, units) = store.lane.commits();
        store.lane.commit(held).unwrap();
        let mut got: Vec<_> = answered.iter().collect();
        got.sort_by_key(|a| a.0);
        assert_eq!(got.len(), JOBS as usize);
        for (i, out, thread) in got {
            assert_eq!(thread.as_deref(), Some("courrier-writer"), "answered from the writer thread");
            match i {
                5 => assert_eq!(out, Err(StoreError::Duplicate)),
                9 => assert!(matches!(out, Err(StoreError::Backend(_))), "{out:?}"),
                _ => {
                    assert_eq!(out, Ok(i));
                    // Answered only once committed: another connection reads it.
                    let filter = AuditFilter { action: Some(format!("test.write{i}")), ..AuditFilter::default() };
                    let found = in_read(access(&store), |tx| tx.list_audit(&filter, Page::default())).unwrap();
                    assert_eq!(found.total, 1, "write {i}");
                }
            }
        }
        let (commits_after, units_after) = store.lane.commits();
        // The held unit counts as kept (it ended with a commit); the refused and the panicked ones not.
        assert_eq!(units_after - units, 1 + JOBS as u64 - 2);
        // Queued together, they share commits (how many depends on the batches' 10 ms age limit
        // on a loaded machine: not asserted beyond "shared").
        let shared = commits_after - commits;
        assert!(shared < JOBS as u64 - 2, "{shared} commits for {} writes queued together", JOBS - 2);
        let total = in_read(access(&store), |tx| tx.list_audit(&AuditFilter::default(), Page::default())).unwrap();
        assert_eq!(total.total, JOBS as u64 - 2);
    }

    #[test]
    fn a_nested_unit_on_the_writer_thread_undoes_only_its_own_writes_without_a_savepoint() {
        use courrier_core::kernel::{Actor, NewAuditEntry, Outcome, RequestId, Timestamp};
        use courrier_core::storage::{in_nested, write_job};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("n.db"), 0).unwrap();
        let entry = |name: &str| NewAuditEntry {
            at: Timestamp::from_unix_secs(1_700_000_000),
            request_id: RequestId::internal("writer"),
            actor: Actor { user_id: None, key_id: None, member_id: None },
            action: format!("test.{name}"),
            target: "list:news@example.org".to_owned(),
            outcome: Outcome::Done,
        };
        let found = |name: &str| {
            let filter = AuditFilter { action: Some(format!("test.{name}")), ..AuditFilter::default() };
            in_read(access(&store), |tx| tx.list_audit(&filter, Page::default())).unwrap().total
        };
        type Rule = fn(
            &mut (dyn courrier_core::access::ports::Tx + 'static),
            &dyn Fn(&str) -> NewAuditEntry,
        ) -> Result<(), StoreError>;
        // Each job keeps its refusals (as an add without a key does: a refusal's audit entry is
        // committed), so only the nested unit decides what a refusal takes back.
        let rules: [(&str, Rule); 5] = [
            ("kept", |tx, e| tx.append_audit(&e("kept")).map(drop)),
            // Its nested unit writes, then refuses: nothing of it may stay.
            ("refused-after-writing", |tx, e| {
                in_nested(tx, |tx| {
                    tx.append_audit(&e("refused-after-writing"))?;
                    Err(StoreError::Duplicate)
                })
            }),
            ("refused-before-writing", |tx, _| in_nested(tx, |_| Err(StoreError::Duplicate))),
            // Writes first, so its nested unit is a savepoint: the first write stays.
            ("wrote-then-refused", |tx, e| {
                tx.append_audit(&e("wrote-then-refused"))?;
                in_nested(tx, |tx| {
                    tx.append_audit(&e("wrote-then-refused-nested"))?;
                    Err(StoreError::Duplicate)
                })
            }),
            ("nested-kept", |tx, e| in_nested(tx, |tx| tx.append_audit(&e("nested-kept")).map(drop))),
        ];
        let run = |names: &[usize], hold: bool| {
            let held = hold.then(|| store.lane.begin().unwrap());
            let (answers, answered) = std::sync::mpsc::channel();
            for &i in names {
                let answers = answers.clone();
                let (name, rule) = rules[i];
                let job = write_job(
                    true,
                    move |tx: &mut (dyn courrier_core::access::ports::Tx + 'static)| rule(tx, &entry),
                    move |out| answers.send((name, out)).unwrap(),
                );
                assert!(access(&store).submit(Box::new(job)).is_ok());
            }
            drop(answers);
            if let Some(held) = held {
                while store.lane.waiting() < 1 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                store.lane.commit(held).unwrap();
            }
            let mut got: Vec<_> = answered.iter().collect();
            got.sort_by_key(|a| a.0);
            got
        };
        // Alone, i.e. first of its batch (no savepoint of the lane either), then in one group.
        assert_eq!(run(&[1], false), vec![("refused-after-writing", Err(StoreError::Duplicate))]);
        assert_eq!(found("refused-after-writing"), 0);
        let got = run(&[0, 1, 2, 3, 4, 1], true);
        assert_eq!(got.iter().filter(|(_, out)| out.is_ok()).count(), 2, "{got:?}");
        assert_eq!(got.iter().filter(|(_, out)| *out == Err(StoreError::Duplicate)).count(), 4, "{got:?}");
        assert_eq!(
            ["kept", "refused-after-writing", "wrote-then-refused", "wrote-then-refused-nested", "nested-kept"]
                .map(found),
            [1, 0, 1, 0, 1]
        );
    }

    #[test]
    fn opens_in_wal_with_full_sync_and_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("c.db"), 0).unwrap();
        let conn = store.pool.get().unwrap();
        let get =
            |p: &str| conn.query_row(&format!("PRAGMA {p}"), [], |r| r.get::<_, rusqlite::types::Value>(0)).unwrap();
        assert_eq!(get("journal_mode"), rusqlite::types::Value::Text("wal".into()));
        assert_eq!(get("synchronous"), rusqlite::types::Value::Integer(2), "2 is FULL");
        assert_eq!(get("foreign_keys"), rusqlite::types::Value::Integer(1));
        assert!(store.backend().starts_with("sqlite 3."), "{}", store.backend());
    }

    #[test]
    fn data_survives_reopening_and_migrations_run_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        {
            let store = SqliteStore::open(&path, 0).unwrap();
            suite::commit_keeps_change_audit_and_event_together(access(&store));
        }
        let store = SqliteStore::open(&path, 1).unwrap();
        let total =
            in_read(access(&store), |tx| tx.list_audit(&AuditFilter::default(), Page::default())).unwrap().total;
        assert_eq!(total, 1);
        let applied: i64 =
            store.pool.get().unwrap().query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0)).unwrap();
        assert_eq!(applied, migrations::known());
    }

    #[test]
    fn refuses_a_schema_newer_than_it_knows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        drop(SqliteStore::open(&path, 0).unwrap());
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)", [])
            .unwrap();
        match SqliteStore::open(&path, 0) {
            Err(StoreError::SchemaTooNew { found: 999, known }) => {
                assert_eq!(known, migrations::latest())
            }
            other => panic!("expected SchemaTooNew, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn a_file_that_is_not_a_database_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        std::fs::write(&path, b"this is not a database, it is a text file long enough to have a header").unwrap();
        let err = SqliteStore::open(&path, 0).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("c.db"), "{err}");
    }

    #[test]
    fn the_change_marker_moves_on_every_commit_from_anywhere() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let store = SqliteStore::open(&path, 0).unwrap();
        let m0 = store.change_marker().unwrap();
        assert_eq!(store.change_marker().unwrap(), m0, "stable while nothing changes");
        suite::commit_keeps_change_audit_and_event_together(access(&store));
        let m1 = store.change_marker().unwrap();
        assert_ne!(m1, m0, "a commit through the pool");
        {
            let mut tx = access(&store).write().unwrap();
            tx.append_audit(&courrier_core::kernel::NewAuditEntry {
                at: courrier_core::kernel::Timestamp::from_unix_secs(1),
                request_id: courrier_core::kernel::RequestId::internal("t"),
                actor: courrier_core::kernel::Actor::default(),
                action: "x".into(),
                target: "y".into(),
                outcome: courrier_core::kernel::Outcome::Done,
            })
            .unwrap();
        }
        assert_eq!(store.change_marker().unwrap(), m1, "a rollback changes nothing");
        // Another process (here: another connection outside the store) writes.
        rusqlite::Connection::open(&path).unwrap().execute("DELETE FROM audit_log", []).unwrap();
        assert_ne!(store.change_marker().unwrap(), m1, "a commit from elsewhere");
    }

    #[test]
    fn the_wal_index_header_moves_on_every_commit_of_any_connection_and_on_nothing_else() {
        // The premise of `access_marker`'s quick test: an unchanged header means no commit.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        let store = SqliteStore::open(&path, 0).unwrap();
        let header = || WalHeader::read(store.shm.as_ref().expect("the -shm file is open")).expect("initialised");
        let h0 = header();
        store.access_marker().unwrap();
        store.change_marker().unwrap();
        drop(store.begin_read().unwrap());
        assert!(header() == h0, "reads leave it");
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute("INSERT INTO consents (source, at) VALUES ('x', 0)", []).unwrap();
        let h1 = header();
        assert!(h1 != h0, "a commit of another connection moves it");
        suite::commit_keeps_change_audit_and_event_together(access(&store));
        let h2 = header();
        assert!(h2 != h1, "a commit of the store's own writer moves it");
        // The same page written again, in a WAL frame SQLite may overwrite in place: still a commit.
        other.execute("UPDATE consents SET at = 1", []).unwrap();
        other.execute("UPDATE consents SET at = 2", []).unwrap();
        assert!(header() != h2);
        let before = store.access_marker().unwrap();
        other.execute("UPDATE access_version SET v = v + 1", []).unwrap();
        assert_eq!(store.access_marker().unwrap(), before + 1, "seen at the next call, through the header");
    }

    #[test]
    fn the_access_marker_moves_on_access_changes_only_from_anywhere() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let store = SqliteStore::open(&path, 0).unwrap();
        let a0 = store.access_marker().unwrap();
        let other = rusqlite::Connection::open(&path).unwrap();
        // Writes that authentication does not read leave it where it is.
        other.execute("DELETE FROM audit_log", []).unwrap();
        suite::commit_keeps_change_audit_and_event_together(access(&store));
        assert_eq!(store.access_marker().unwrap(), a0, "audit and events are not access");
        // A user, a role, a key: each moves it, written by this process or another.
        other
            .execute(
                "INSERT INTO users (email, email_key, status, created_at, updated_at)
                 VALUES ('a@example.org', 'a@example.org', 'active', 0, 0)",
                [],
            )
            .unwrap();
        let a1 = store.access_marker().unwrap();
        assert!(a1 > a0, "a new user");
        other.execute("INSERT INTO roles (user_id, kind, granted_at) VALUES (1, 'site_admin', 0)", []).unwrap();
        let a2 = store.access_marker().unwrap();
        assert!(a2 > a1, "a role");
        other
            .execute(
                "INSERT INTO api_keys (user_id, name, prefix, secret_hash, scope_kind, perms, rate_limit_per_min,
                   created_at) VALUES (1, 'k', 'p', 'h', 'user', 1, 10, 0)",
                [],
            )
            .unwrap();
        let a3 = store.access_marker().unwrap();
        assert!(a3 > a2, "a key");
        other.execute("UPDATE api_keys SET revoked_at = 1", []).unwrap();
        assert!(store.access_marker().unwrap() > a3, "a revocation");
        other.execute("UPDATE users SET status = 'disabled'", []).unwrap();
        let a4 = store.access_marker().unwrap();
        other.execute("DELETE FROM roles", []).unwrap();
        assert!(store.access_marker().unwrap() > a4, "a role taken away");
    }

    #[test]
    fn the_wal_is_checkpointed_off_the_write_lane() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let store = SqliteStore::open(&path, 0).unwrap();
        let size = || std::fs::metadata(&path).unwrap().len();
        let before = size();
        // About 1,500 pages through the lane: under the writer's own threshold of 16,384, over
        // SQLite's default of 1,000.
        for _ in 0..6 {
            let mut tx = access(&store).write().unwrap();
            for i in 0..250 {
                tx.append_audit(&courrier_core::kernel::NewAuditEntry {
                    at: courrier_core::kernel::Timestamp::from_unix_secs(i),
                    request_id: courrier_core::kernel::RequestId::internal("t"),
                    actor: courrier_core::kernel::Actor::default(),
                    action: "x".repeat(1000),
                    target: "y".repeat(3000),
                    outcome: courrier_core::kernel::Outcome::Done,
                })
                .unwrap();
            }
            tx.commit().unwrap();
        }
        // Only a checkpoint writes pages into the database file itself.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while size() <= before + 4_000_000 {
            assert!(std::time::Instant::now() < deadline, "no checkpoint: the file is still {} bytes", size());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_long_writer_makes_others_wait_not_fail() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("c.db"), 0).unwrap());
        let tx = access(&store).write().unwrap();
        let other = {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                suite::commit_keeps_change_audit_and_event_together(access(&store));
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        drop(tx);
        other.join().unwrap();
    }
}
