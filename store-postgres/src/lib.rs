//! The PostgreSQL adapter of the storage port (issue 25): the `postgres` crate over an r2d2 pool,
//! synchronous as core is. Several servers and workers share one database through it.
//!
//! What it implements so far: the kernel's transaction, audit trail and outbox, the access
//! context's repository (`access::ports::Tx`), the mailing context's (`mailing::ports::Tx`,
//! one file per repository, named as the SQLite adapter's) and the OCR context's
//! (`ocr::ports::Tx`, with the documents' bytes in [`PgBlobs`]), and the quotas every server
//! shares ([`PgLimits`]).
//!
//! Transactions keep the semantics the rules were written against on SQLite:
//! - an unkeyed write takes the installation's write lock (a transaction-scoped advisory lock) at
//!   `BEGIN`, as SQLite's `BEGIN IMMEDIATE` does: it waits for every other writer of every server,
//!   and sees what they committed (READ COMMITTED under the lock);
//! - a keyed write ([`courrier_core::storage::WriteKey`], e.g. one list's) takes that lock shared
//!   and its key's lock exclusively, in the same round trip as `BEGIN`: writes of one key take
//!   turns, writes of different keys commit together (and PostgreSQL's group commit flushes them
//!   together), and an unkeyed write still excludes them all;
//! - since writers commit together, outbox ids are not committed in order: the outbox is read in
//!   the order of the writing transactions' ids, only up to the oldest transaction still running
//!   (`outbox.rs`), so a cursor never skips an event that commits late;
//! - a read is one snapshot (REPEATABLE READ, READ ONLY);
//! - a statement that may break a uniqueness rule runs in a savepoint of its own, so that
//!   [`StoreError::Duplicate`] leaves the transaction usable, as a failed statement does in
//!   SQLite (PostgreSQL would otherwise abort the whole transaction). Any other failed statement
//!   poisons the transaction: its `commit` then fails instead of silently rolling back.
//!
//! The only place in the workspace that speaks SQL to PostgreSQL.

mod access;
pub(crate) mod data_key;
mod invoices;
mod jobs;
mod lease;
mod limits;
mod mailing;
mod migrations;
mod ocr;
mod outbox;
mod sends;
/// The shared statements (`courrier_store_sql`) run on this adapter; the repositories written once.
mod shared;
courrier_store_sql::audit_repo!(PgTx);
courrier_store_sql::credential_repo!(PgTx);
courrier_store_sql::bounce_repo!(PgTx);
courrier_store_sql::idempotency_repo!(PgTx);
courrier_store_sql::inbox_repo!(PgTx);
courrier_store_sql::me_repo!(PgTx);
courrier_store_sql::moderation_repo!(PgTx);
/// `courrier store copy --to postgres://...`: an SQLite installation into an empty PostgreSQL one.
pub mod store_copy;
pub use data_key::DataKeyError;
pub use limits::PgLimits;
pub use ocr::PgBlobs;
/// A throw-away server for tests and benchmarks (compiled in always: the benchmark harnesses use
/// it without core's `testing` feature, which would change core's features between builds).
pub mod test_server;
mod webhooks;

use courrier_core::storage::{Database, Store, StoreError, Transaction, WriteKey};
use postgres::types::ToSql;
use postgres::{Client, NoTls, Row};
use r2d2_postgres::PostgresConnectionManager;
use std::time::Duration;

type Pool = r2d2::Pool<Manager>;
type Conn = r2d2::PooledConnection<Manager>;

/// How long a writer waits for the write lock, and a caller for a free connection, before giving
/// up with [`StoreError::Busy`] (SQLite's busy time-out).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
const POOL_SIZE: u32 = 16;
/// The advisory lock every write transaction takes ("courrier" + 2 as one number): exclusively
/// for an unkeyed write, shared for a keyed one.
const WRITE_LOCK: i64 = 0x636f_7572_7269_6502;
/// The class of a write key's advisory lock ("cour"): the two-number form, a space of its own
/// beside the one-number locks (the write lock, the job locks).
const KEY_LOCK_CLASS: i32 = 0x636f_7572;

/// A write key's lock number: 32 bits of FNV-1a over its text, the same in every process (std's
/// hasher is seeded per process). Two keys that collide only take turns that they need not.
fn key_lock(key: &courrier_core::storage::WriteKey) -> i32 {
    let hash = key.as_str().bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    i32::from_ne_bytes(hash.to_ne_bytes())
}

/// Statements kept prepared per connection (each is parsed and planned once per connection, not
/// at every use: a round trip saved per statement). Past this many, the cache starts again.
const STATEMENT_CACHE: usize = 256;

/// A client closed on a thread of its own. `postgres::Client` is the async driver run on a private
/// runtime: its drop blocks on that runtime to say goodbye to the server, which panics on a thread
/// already driving a runtime (a server dropping its store at shutdown: every pooled connection is
/// closed there). The join keeps the drop synchronous: the connection is gone when it returns.
pub(crate) struct OwnedClient(Option<Client>);

impl std::ops::Deref for OwnedClient {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.0.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for OwnedClient {
    fn deref_mut(&mut self) -> &mut Client {
        self.0.as_mut().expect("present until dropped")
    }
}

impl Drop for OwnedClient {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            let closing = std::thread::Builder::new().name("courrier-pg-close".into()).spawn(move || drop(client));
            if let Ok(handle) = closing {
                let _ = handle.join();
            }
        }
    }
}

/// A pooled connection with the statements prepared on it.
pub(crate) struct PgConn {
    client: OwnedClient,
    statements: std::collections::HashMap<String, postgres::Statement>,
}

/// r2d2_postgres's manager, its connections set up and given a statement cache.
#[derive(Debug)]
struct Manager(PostgresConnectionManager<NoTls>);

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        let mut client = self.0.connect()?;
        // A lock not granted in time (the write lock above all) fails with 55P03, mapped to Busy.
        // `synchronous_commit` on: `commit` returns once the writes are durable.
        client.batch_execute(&format!(
            "SET lock_timeout = {}; SET synchronous_commit = on; SET application_name = 'courrier'",
            BUSY_TIMEOUT.as_millis()
        ))?;
        Ok(PgConn { client: OwnedClient(Some(client)), statements: std::collections::HashMap::new() })
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), postgres::Error> {
        self.0.is_valid(&mut conn.client)
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        self.0.has_broken(&mut conn.client)
    }
}

pub struct PostgresStore {
    pool: Pool,
    /// `server_version`, `fsync` and `synchronous_commit` as the server reported them at open.
    described: String,
    /// How to connect: the job locks hold sessions of their own (`jobs.rs`).
    config: postgres::Config,
}

/// Checks `COURRIER_DATABASE_URL`'s form without connecting: a `postgres://` or `postgresql://`
/// URL the driver accepts.
pub fn check_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        // Not echoed: a `key=value` string may hold a password anywhere.
        return Err("it is not a postgres://user:password@host:port/database URL".into());
    }
    url.parse::<postgres::Config>().map(drop).map_err(|e| format!("{}: {e}", redacted(url)))
}

/// The URL without its password (in the user part or a `password=` parameter), for messages.
fn redacted(url: &str) -> String {
    let url = match url.find("password=") {
        Some(at) => {
            let value = at + "password=".len();
            let end = url[value..].find('&').map_or(url.len(), |e| value + e);
            format!("{}***{}", &url[..value], &url[end..])
        }
        None => url.to_owned(),
    };
    let url = url.as_str();
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!("{}{}:***{}", &url[..scheme + 3], &userinfo[..colon], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The server's version and durability settings, as `backend()` names them.
fn describe(client: &mut Client) -> Result<String, postgres::Error> {
    let mut show = |what: &str| client.query_one(&format!("SHOW {what}"), &[]).and_then(|r| r.try_get::<_, String>(0));
    let version = show("server_version")?;
    Ok(format!("postgresql {version} (fsync={}, synchronous_commit=on)", show("fsync")?))
}

/// What `courrier version` prints with `COURRIER_DATABASE_URL`: the server asked, nothing created
/// nor migrated; an unreachable server is said so (without the password).
pub fn describe_backend(url: &str) -> String {
    let asked = url.parse::<postgres::Config>().and_then(|mut config| {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(BUSY_TIMEOUT);
        }
        describe(&mut config.connect(NoTls)?)
    });
    asked.unwrap_or_else(|e| format!("postgresql at {} (not reachable: {e})", redacted(url)))
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:pass@host:port/db`) and brings its
    /// schema up to date.
    pub fn open(url: &str, now_micros: i64) -> Result<Self, StoreError> {
        let open_err = |reason: String| StoreError::Open { path: redacted(url), reason };
        let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| open_err(e.to_string()))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(BUSY_TIMEOUT);
        }
        // Connect and migrate on one plain connection first: a wrong URL fails here at once, where
        // a pool would retry until its time-out.
        let mut client = config.connect(NoTls).map_err(|e| open_err(e.to_string()))?;
        migrations::apply(&mut client, now_micros)?;
        let described = describe(&mut client).map_err(|e| open_err(e.to_string()))?;
        drop(client);
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(1))
            .connection_timeout(BUSY_TIMEOUT)
            .build(Manager(PostgresConnectionManager::new(config.clone(), NoTls)))
            .map_err(|e| open_err(e.to_string()))?;
        Ok(Self { pool, described, config })
    }

    fn connection(&self) -> Result<Conn, StoreError> {
        self.pool.get().map_err(|e| {
            tracing::warn!(error = %e, "no PostgreSQL connection free in time");
            StoreError::Busy
        })
    }

    fn begin(&self, write: Option<Write<'_>>) -> Result<Box<PgTx>, StoreError> {
        let mut conn = self.connection()?;
        let begin = match write {
            Some(Write::All) => {
                format!("BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITE_LOCK})")
            }
            Some(Write::Keyed(key)) => format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock_shared({WRITE_LOCK}); \
                 SELECT pg_advisory_xact_lock({KEY_LOCK_CLASS}, {})",
                key_lock(key)
            ),
            None => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_owned(),
        };
        if let Err(e) = conn.client.batch_execute(&begin) {
            // The lock was not granted in time: end the transaction before the connection goes back.
            let _ = conn.client.batch_execute("ROLLBACK");
            return Err(map_err(e));
        }
        Ok(Box::new(PgTx { conn: Some(conn), nested: 0, poisoned: false }))
    }

    /// A connection of its own, outside the pool and its transactions (`store copy`'s batches).
    pub(crate) fn plain_client(&self) -> Result<OwnedClient, StoreError> {
        let client = self.config.connect(NoTls).map_err(map_err)?;
        Ok(OwnedClient(Some(client)))
    }

    /// Quotas and limits counted in this database, shared by every server on it.
    pub fn limits(&self) -> PgLimits {
        PgLimits::new(self.pool.clone())
    }

    /// The OCR documents' bytes in this database: every server reads what any of them stored.
    pub fn blobs(&self) -> PgBlobs {
        PgBlobs::new(self.pool.clone())
    }
}

/// What a write transaction waits for at `BEGIN`.
enum Write<'a> {
    /// Every other writer.
    All,
    /// The writers of this key, and unkeyed writers.
    Keyed(&'a WriteKey),
}

/// One database, seen by each context through its own transaction: [`PgTx`] implements every
/// repository of the contexts on PostgreSQL so far.
macro_rules! store_of {
    ($($tx:path),*) => {$(
        impl $tx for PgTx {}
        impl Store<dyn $tx> for PostgresStore {
            fn write(&self) -> Result<Box<dyn $tx>, StoreError> {
                Ok(self.begin(Some(Write::All))?)
            }
            fn write_keyed(&self, key: &WriteKey) -> Result<Box<dyn $tx>, StoreError> {
                Ok(self.begin(Some(Write::Keyed(key)))?)
            }
            fn read(&self) -> Result<Box<dyn $tx>, StoreError> {
                Ok(self.begin(None)?)
            }
        }
    )*};
}
store_of!(courrier_core::access::ports::Tx, courrier_core::mailing::ports::Tx, courrier_core::ocr::ports::Tx);

impl Database for PostgresStore {
    fn backend(&self) -> String {
        self.described.clone()
    }

    fn is_shared(&self) -> bool {
        true
    }

    /// The server's WAL insert position: it moves with every commit of every server (and with
    /// writes that do not commit, which only makes a cache look again). No table is read.
    fn change_marker(&self) -> Result<u64, StoreError> {
        let mut conn = self.connection()?;
        let row = conn
            .client
            .query_one("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::BIGINT", &[])
            .map_err(map_err)?;
        let lsn: i64 = row.try_get(0).map_err(map_err)?;
        Ok(lsn as u64)
    }

    /// The shared counter `access_version` (migration 2), moved by any server's commit of users,
    /// roles or keys: one primary-key read per check.
    fn access_marker(&self) -> Result<u64, StoreError> {
        let mut conn = self.connection()?;
        let row = conn.client.query_one("SELECT v FROM access_version WHERE id = 1", &[]).map_err(map_err)?;
        let v: i64 = row.try_get(0).map_err(map_err)?;
        Ok(v as u64)
    }
}

/// A transaction on a pooled connection. Repositories are implemented on it, one file each.
pub(crate) struct PgTx {
    /// `None` once committed; present on drop means roll back.
    conn: Option<Conn>,
    /// Nested units open ([`Transaction::begin_nested`]).
    nested: u32,
    /// A statement failed outside a savepoint: PostgreSQL aborted the transaction.
    poisoned: bool,
}

/// Parameters of one statement.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl PgTx {
    fn client(&mut self) -> &mut Client {
        // Only `commit` takes the connection, and it consumes the transaction.
        &mut self.conn.as_mut().expect("transaction used after commit").client
    }

    /// `sql` prepared on this connection, from its cache after the first time.
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, postgres::Error> {
        self.prepared(sql, str::to_owned)
    }

    /// `sql` as `text` writes it for the server, prepared on this connection the first time and
    /// taken from the cache by `sql` after.
    fn prepared(
        &mut self,
        sql: &str,
        text: impl FnOnce(&str) -> String,
    ) -> Result<postgres::Statement, postgres::Error> {
        let conn = self.conn.as_mut().expect("transaction used after commit");
        if let Some(st) = conn.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = conn.client.prepare(&text(sql))?;
        if conn.statements.len() >= STATEMENT_CACHE {
            conn.statements.clear();
        }
        conn.statements.insert(sql.to_owned(), st.clone());
        Ok(st)
    }

    fn track<T>(&mut self, out: Result<T, postgres::Error>) -> Result<T, StoreError> {
        out.map_err(|e| {
            self.poisoned = true;
            map_err(e)
        })
    }

    pub(crate) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, StoreError> {
        let out = self.statement(sql).and_then(|st| self.client().query(&st, params));
        self.track(out)
    }

    pub(crate) fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, StoreError> {
        let out = self.statement(sql).and_then(|st| self.client().query_opt(&st, params));
        self.track(out)
    }

    pub(crate) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, StoreError> {
        let out = self.statement(sql).and_then(|st| self.client().query_one(&st, params));
        self.track(out)
    }

    pub(crate) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, StoreError> {
        let out = self.statement(sql).and_then(|st| self.client().execute(&st, params));
        self.track(out)
    }

    /// Runs statements that may break a uniqueness rule in a savepoint of their own: a
    /// [`StoreError::Duplicate`] (or any failure) takes back those statements only, and the
    /// transaction goes on.
    pub(crate) fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let begun = self.client().batch_execute("SAVEPOINT statement");
        self.track(begun)?;
        match f(self) {
            Ok(out) => {
                let released = self.client().batch_execute("RELEASE statement");
                self.track(released)?;
                Ok(out)
            }
            Err(e) => {
                let undone = self.client().batch_execute("ROLLBACK TO statement; RELEASE statement");
                self.track(undone)?;
                // What failed inside the savepoint went with it.
                self.poisoned = false;
                Err(e)
            }
        }
    }
}

impl Transaction for PgTx {
    fn commit(mut self: Box<Self>) -> Result<(), StoreError> {
        let poisoned = self.poisoned;
        let mut conn = self.conn.take().expect("transaction committed twice");
        if poisoned {
            // PostgreSQL would answer COMMIT with ROLLBACK, and no error.
            let _ = conn.client.batch_execute("ROLLBACK");
            return Err(StoreError::Backend("a statement of the transaction failed: nothing was committed".into()));
        }
        if let Err(e) = conn.client.batch_execute("COMMIT") {
            let _ = conn.client.batch_execute("ROLLBACK");
            return Err(map_err(e));
        }
        Ok(())
    }

    fn begin_nested(&mut self) -> Result<(), StoreError> {
        let out = self.client().batch_execute("SAVEPOINT nested");
        self.track(out)?;
        self.nested += 1;
        Ok(())
    }

    fn keep_nested(&mut self) -> Result<(), StoreError> {
        assert!(self.nested > 0, "keep_nested without begin_nested");
        let out = self.client().batch_execute("RELEASE nested");
        self.track(out)?;
        self.nested -= 1;
        Ok(())
    }

    fn undo_nested(&mut self) -> Result<(), StoreError> {
        assert!(self.nested > 0, "undo_nested without begin_nested");
        let out = self.client().batch_execute("ROLLBACK TO nested; RELEASE nested");
        self.track(out)?;
        // What failed inside the nested unit is taken back with it: the transaction is usable.
        self.poisoned = false;
        self.nested -= 1;
        Ok(())
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take()
            && let Err(e) = conn.client.batch_execute("ROLLBACK")
        {
            tracing::warn!(error = %e, "rollback failed");
        }
    }
}

/// A page of a listing: `count_sql` (returning one BIGINT) and `select_sql` (ending before its
/// `LIMIT`) share `args`; the window's two placeholders are appended after them.
pub(crate) fn paged<T>(
    tx: &mut PgTx,
    count_sql: &str,
    select_sql: &str,
    args: &[&(dyn ToSql + Sync)],
    page: courrier_core::kernel::Page,
    row: impl Fn(&Row) -> Result<T, StoreError>,
) -> Result<courrier_core::kernel::Paged<T>, StoreError> {
    let total: i64 = get(&tx.query_one(count_sql, args)?, 0)?;
    let (limit, offset) = (i64::from(page.limit()), i64::try_from(page.offset()).unwrap_or(i64::MAX));
    let mut window: Vec<&(dyn ToSql + Sync)> = args.to_vec();
    window.push(&limit);
    window.push(&offset);
    let n = args.len();
    let rows = tx.query(&format!("{select_sql} LIMIT ${} OFFSET ${}", n + 1, n + 2), &window)?;
    let items = rows.iter().map(row).collect::<Result<Vec<_>, _>>()?;
    Ok(courrier_core::kernel::Paged { items, total: u64::try_from(total).unwrap_or(0), page })
}

/// A column of a row; a type that does not match is the schema's fault, never a panic.
pub(crate) fn get<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, StoreError> {
    row.try_get(i).map_err(map_err)
}

/// The one place where PostgreSQL's errors become the port's.
pub(crate) fn map_err(e: postgres::Error) -> StoreError {
    use postgres::error::SqlState;
    // `Display` of a server's error says only "db error": the detail is in the error itself.
    let describe = |e: &postgres::Error| match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection failed or closed, or a value did not convert.
        let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
        return if e.is_closed() || io { StoreError::Busy } else { StoreError::Backend(e.to_string()) };
    };
    if *code == SqlState::UNIQUE_VIOLATION {
        StoreError::Duplicate
    } else if [
        SqlState::LOCK_NOT_AVAILABLE,
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::QUERY_CANCELED,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::ADMIN_SHUTDOWN,
    ]
    .contains(code)
        || code.code().starts_with("08")
    {
        StoreError::Busy
    } else {
        StoreError::Backend(describe(&e))
    }
}

pub(crate) use courrier_store_sql::sql::corrupt;

#[cfg(test)]
mod tests;
