//! `courrier store copy --to postgres://...` (issue 25): an SQLite installation, documents
//! included, into an empty PostgreSQL database.
//!
//! - **Consistent**: the SQLite file is read in ONE read transaction for the whole run (a WAL
//!   snapshot), so a copy made while the SQLite server runs is the installation as it stood when
//!   the copy began; what the server writes afterwards is not in it (stop the server first to
//!   move everything). A resumed run reads a new snapshot: rows already copied are not read again.
//! - **Resumable**: each table is copied in primary-key order, in batches each committed on its
//!   own; a run continues every table after the greatest key PostgreSQL already holds (text keys
//!   compared byte-wise, `COLLATE "C"`, as SQLite's BINARY collation does). `store_copy` (PG
//!   migration 7) names the installation being copied (its data key's id): a database holding
//!   rows of anything else is refused before anything is written.
//! - **Ids kept**: every row keeps its id; identity sequences are moved past them at the end.
//! - **Member tallies**: not copied. PostgreSQL's statement triggers count the members as they
//!   are inserted; the tally sums are compared with SQLite's at the end.
//! - **Secrets**: webhook secrets and DKIM keys are copied sealed as they are; the SQLite
//!   installation's data key (`data.key`) is stored in `installation_secrets` sealed by
//!   `COURRIER_MASTER_KEY`, where every PostgreSQL server reads it.
//! - **Documents**: the files of the documents directory go into `ocr_blobs` (checked against their
//!   SHA-256 names), unless the installation keeps them in `COURRIER_DOCUMENTS_DIR` (no copy).
//! - **Verified**: every table's rows counted on both sides, the documents' count and bytes; the
//!   copy is marked finished only when all agree.
//!
//! SQL to both databases stays in this adapter; the CLI gives a progress callback and prints the
//! counts it returns.

use crate::{OwnedClient, PostgresStore, data_key, map_err};
use courrier_core::adapters::data_key::{FILE_NAME as DATA_KEY_FILE, MasterKey};
use courrier_core::kernel::Code;
use courrier_core::kernel::sealed::DataKey;
use courrier_core::ocr::blobs::BlobId;
use courrier_core::storage::StoreError;
use postgres::types::ToSql;
use rusqlite::types::{Value, ValueRef};
use std::path::{Path, PathBuf};

/// Tables copied row for row, in an order every foreign key allows.
pub const TABLES: &[&str] = &[
    "users",
    "roles",
    "api_keys",
    "sessions",
    "one_time_tokens",
    "audit_log",
    "outbox_events",
    "domains",
    "lists",
    "consents",
    "members",
    "idempotency_keys",
    "sends",
    "copies",
    "digest_state",
    "webhooks",
    "webhook_deliveries",
    "subscriber_links",
    "subscriber_sessions",
    "inbound",
    "held_posts",
    "mail_credentials",
    "bounces",
    "ocr_documents",
    "ocr_maintenance",
    "ocr_suppliers",
    "ocr_supplier_zones",
    "ocr_usage",
    "ocr_plans",
    "ocr_software",
];

/// SQLite tables not copied row for row, and why.
pub const NOT_COPIED: &[(&str, &str)] = &[
    ("schema_migrations", "each backend versions its own schema"),
    ("member_tallies", "PostgreSQL's triggers count the members as they are inserted"),
    ("member_changes", "SQLite's search change log: a trigram index on PostgreSQL"),
    ("access_version", "PostgreSQL's triggers move its own counter"),
    ("webhook_cursor", "its one value is set on PostgreSQL's one row"),
];

/// The session advisory lock a copy holds on its target ("courrier" + 3 as one number): a second
/// copy into the same database at the same time is refused instead of racing the first.
const COPY_LOCK: i64 = 0x636f_7572_7269_6503;

/// Rows per batch (each batch is one PostgreSQL transaction), and bytes at most (documents,
/// messages): whichever is reached first.
const BATCH_ROWS: usize = 2000;
const BATCH_BYTES: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum StoreCopyError {
    #[error("no SQLite installation at {0}: COURRIER_DATA_DIR (or --data-dir) names the installation to copy")]
    NoSource(String),
    #[error("cannot read the installation's data key {0}")]
    DataKey(String),
    #[error("the SQLite database: {0}")]
    Source(String),
    #[error(transparent)]
    Target(#[from] StoreError),
    #[error("the target database is not empty ({0}): store copy fills an empty database only")]
    NotEmpty(String),
    #[error("the target database already holds a finished copy of this installation: nothing to do")]
    Finished,
    #[error("COURRIER_MASTER_KEY {0}")]
    MasterKey(String),
    #[error("this build cannot copy {0}")]
    Schema(String),
    #[error("{table}.{column} (row {key}) holds a value PostgreSQL's {pg_type} cannot take")]
    Value { table: String, column: String, key: String, pg_type: String },
    #[error("the document {0}")]
    Document(String),
    #[error("stopped after {0} batches (COURRIER_STORE_COPY_STOP_AFTER_BATCHES): run the copy again to continue")]
    Stopped(u64),
    #[error("the copy does not match its source: {0}")]
    Mismatch(String),
    #[error(
        "{0} message(s) accepted over LMTP are still in spool.db, not yet moved into the database: \
         start the SQLite server (or `courrier worker`) until they are processed, stop it, then copy"
    )]
    Spooled(u64),
}

impl StoreCopyError {
    pub fn code(&self) -> Code {
        match self {
            StoreCopyError::NoSource(_) | StoreCopyError::MasterKey(_) => Code::ValidationFailed,
            StoreCopyError::NotEmpty(_) | StoreCopyError::Finished | StoreCopyError::Spooled(_) => Code::Conflict,
            StoreCopyError::Target(e) => courrier_core::kernel::CoreError::code(e),
            StoreCopyError::DataKey(_)
            | StoreCopyError::Source(_)
            | StoreCopyError::Schema(_)
            | StoreCopyError::Value { .. }
            | StoreCopyError::Document(_)
            | StoreCopyError::Stopped(_)
            | StoreCopyError::Mismatch(_) => Code::Internal,
        }
    }
}

fn source_err(e: rusqlite::Error) -> StoreCopyError {
    StoreCopyError::Source(e.to_string())
}

fn target_err(e: postgres::Error) -> StoreCopyError {
    StoreCopyError::Target(map_err(e))
}

/// What to copy where.
pub struct CopyRequest<'a> {
    /// The SQLite installation's data directory (its `courrier.db` and `data.key`).
    pub data_dir: &'a Path,
    /// Where its documents are: `Some` copies them into the database; `None` when the
    /// installation keeps them in `COURRIER_DOCUMENTS_DIR`, which the PostgreSQL servers mount.
    pub documents: Option<PathBuf>,
    pub url: &'a str,
    pub master: &'a MasterKey,
    pub now_micros: i64,
    /// A test's hook: stop (as a killed copy would) after this many batches committed.
    pub stop_after_batches: Option<u64>,
}

/// Where the copy stands, for a progress bar.
#[derive(Debug, Clone)]
pub struct Progress {
    pub table: &'static str,
    /// Rows in PostgreSQL, of all tables (a resumed copy starts past 0).
    pub rows_done: u64,
    pub rows_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// One line of the count table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    pub what: String,
    pub sqlite: u64,
    pub postgres: u64,
}

#[derive(Debug, Clone)]
pub struct CopyReport {
    /// Each table's rows, then the member tallies' sums, then (when copied) the documents and
    /// their bytes.
    pub counts: Vec<Count>,
    /// A copy begun by an earlier run was continued.
    pub resumed: bool,
    /// Rows of the tables and bytes of documents this run wrote, and how long each took.
    pub rows_copied: u64,
    pub bytes_copied: u64,
    pub rows_time: std::time::Duration,
    pub documents_time: std::time::Duration,
}

impl CopyReport {
    /// The lines whose two sides differ.
    pub fn mismatches(&self) -> Vec<&Count> {
        self.counts.iter().filter(|c| c.sqlite != c.postgres).collect()
    }
}

/// A PostgreSQL column type this copy converts SQLite values to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PgType {
    Int8,
    Int4,
    Bool,
    Text,
    Bytea,
}

impl PgType {
    fn parse(data_type: &str) -> Option<Self> {
        Some(match data_type {
            "bigint" => PgType::Int8,
            "integer" => PgType::Int4,
            "boolean" => PgType::Bool,
            "text" => PgType::Text,
            "bytea" => PgType::Bytea,
            _ => return None,
        })
    }

    fn array(self) -> &'static str {
        match self {
            PgType::Int8 => "bigint[]",
            PgType::Int4 => "integer[]",
            PgType::Bool => "boolean[]",
            PgType::Text => "text[]",
            PgType::Bytea => "bytea[]",
        }
    }
}

/// One column of a batch, as the array `unnest` reads.
enum Column {
    Int8(Vec<Option<i64>>),
    Int4(Vec<Option<i32>>),
    Bool(Vec<Option<bool>>),
    Text(Vec<Option<String>>),
    Bytea(Vec<Option<Vec<u8>>>),
}

impl Column {
    fn new(t: PgType) -> Self {
        match t {
            PgType::Int8 => Column::Int8(Vec::new()),
            PgType::Int4 => Column::Int4(Vec::new()),
            PgType::Bool => Column::Bool(Vec::new()),
            PgType::Text => Column::Text(Vec::new()),
            PgType::Bytea => Column::Bytea(Vec::new()),
        }
    }

    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Column::Int8(v) => v,
            Column::Int4(v) => v,
            Column::Bool(v) => v,
            Column::Text(v) => v,
            Column::Bytea(v) => v,
        }
    }

    /// Appends SQLite's `value`; `None` when PostgreSQL's type cannot take it. Returns its size.
    fn push(&mut self, value: ValueRef<'_>) -> Option<usize> {
        let null = matches!(value, ValueRef::Null);
        match (self, value) {
            (Column::Int8(v), ValueRef::Integer(i)) => v.push(Some(i)),
            (Column::Int8(v), _) if null => v.push(None),
            (Column::Int4(v), ValueRef::Integer(i)) => v.push(Some(i32::try_from(i).ok()?)),
            (Column::Int4(v), _) if null => v.push(None),
            // SQLite's booleans are integers 0 and 1.
            (Column::Bool(v), ValueRef::Integer(i)) => v.push(Some(i != 0)),
            (Column::Bool(v), _) if null => v.push(None),
            (Column::Text(v), ValueRef::Text(t)) => {
                v.push(Some(String::from_utf8(t.to_vec()).ok()?));
                return Some(t.len());
            }
            (Column::Text(v), _) if null => v.push(None),
            (Column::Bytea(v), ValueRef::Blob(b) | ValueRef::Text(b)) => {
                v.push(Some(b.to_vec()));
                return Some(b.len());
            }
            (Column::Bytea(v), _) if null => v.push(None),
            _ => return None,
        }
        Some(8)
    }
}

/// A table as both sides have it: its columns (PostgreSQL's order and types) and its primary key.
struct Plan {
    table: &'static str,
    columns: Vec<(String, PgType)>,
    /// Positions in `columns`.
    key: Vec<usize>,
    /// Identity columns, whose sequences must pass the copied ids.
    identities: Vec<String>,
}

impl Plan {
    fn column_list(&self) -> String {
        self.columns.iter().map(|(c, _)| format!("\"{c}\"")).collect::<Vec<_>>().join(", ")
    }

    fn key_list(&self, pg: bool, desc: bool) -> String {
        self.key
            .iter()
            .map(|&i| {
                let (name, t) = &self.columns[i];
                let collate = if pg && *t == PgType::Text { " COLLATE \"C\"" } else { "" };
                format!("\"{name}\"{collate}{}", if desc { " DESC" } else { "" })
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The SQLite read of the batch after `after` (the last key copied; none: from the start).
    fn select_sql(&self, after: bool) -> String {
        let keys = self.key_list(false, false);
        let filter = if after {
            let marks = (1..=self.key.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ");
            format!(" WHERE ({keys}) > ({marks})")
        } else {
            String::new()
        };
        format!("SELECT {} FROM \"{}\"{filter} ORDER BY {keys} LIMIT {BATCH_ROWS}", self.column_list(), self.table)
    }

    /// PostgreSQL's insert of a batch: one array per column.
    fn insert_sql(&self) -> String {
        let arrays =
            self.columns.iter().enumerate().map(|(i, (_, t))| format!("${}::{}", i + 1, t.array())).collect::<Vec<_>>();
        format!("INSERT INTO \"{}\" ({}) SELECT * FROM unnest({})", self.table, self.column_list(), arrays.join(", "))
    }
}

/// The SQLite side: one connection, one read transaction for the whole run.
struct Source {
    conn: rusqlite::Connection,
}

impl Source {
    fn open(path: &Path) -> Result<Self, StoreCopyError> {
        use rusqlite::OpenFlags;
        let conn = rusqlite::Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(source_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(source_err)?;
        // The snapshot begins at the first read and lasts until the connection goes.
        conn.execute_batch("BEGIN DEFERRED; SELECT COUNT(*) FROM sqlite_master;").map_err(source_err)?;
        Ok(Self { conn })
    }

    fn tables(&self) -> Result<Vec<String>, StoreCopyError> {
        let mut st = self
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .map_err(source_err)?;
        let names = st.query_map([], |r| r.get::<_, String>(0)).map_err(source_err)?;
        names.collect::<Result<_, _>>().map_err(source_err)
    }

    fn columns(&self, table: &str) -> Result<Vec<String>, StoreCopyError> {
        let mut st = self.conn.prepare(&format!("PRAGMA table_info(\"{table}\")")).map_err(source_err)?;
        let names = st.query_map([], |r| r.get::<_, String>(1)).map_err(source_err)?;
        names.collect::<Result<_, _>>().map_err(source_err)
    }

    fn count(&self, sql: &str) -> Result<u64, StoreCopyError> {
        let n: i64 = self.conn.query_row(sql, [], |r| r.get(0)).map_err(source_err)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

/// Checks the SQLite installation's tables against what this build copies: every table is copied
/// or named in [`NOT_COPIED`], and every copied one exists.
pub fn check_tables(found: &[String]) -> Result<(), String> {
    for t in found {
        if !TABLES.contains(&t.as_str()) && !NOT_COPIED.iter().any(|(n, _)| n == t) {
            return Err(format!("the SQLite table {t} (this build does not know it)"));
        }
    }
    for t in TABLES {
        if !found.iter().any(|f| f == t) {
            return Err(format!("an installation without the table {t}"));
        }
    }
    Ok(())
}

/// PostgreSQL's own columns, which SQLite has no use for and a copied row takes from their
/// default: the writing transaction's id that orders the outbox (PG migration 9).
const PG_ONLY: &[(&str, &str)] = &[("outbox_events", "xid")];

/// Pairs SQLite's columns of a table with PostgreSQL's: the same names, none left over on either
/// side (a column missing in PostgreSQL would be lost) but PostgreSQL's own ([`PG_ONLY`]).
pub fn match_columns(table: &str, sqlite: &[String], pg: &[(String, String)]) -> Result<Vec<(String, String)>, String> {
    for c in sqlite {
        if !pg.iter().any(|(p, _)| p == c) {
            return Err(format!("{table}.{c}: PostgreSQL has no such column"));
        }
    }
    let own = |p: &str| PG_ONLY.contains(&(table, p));
    for (p, _) in pg {
        if !sqlite.contains(p) && !own(p) {
            return Err(format!("{table}.{p}: SQLite has no such column"));
        }
    }
    Ok(pg.iter().filter(|(p, _)| !own(p)).cloned().collect())
}

/// The ids of the document files: distinct, in byte order (SQLite's BINARY, PostgreSQL's "C").
fn blob_ids(source: &Source) -> Result<Vec<String>, StoreCopyError> {
    let mut st = source.conn.prepare("SELECT DISTINCT blob FROM ocr_documents ORDER BY blob").map_err(source_err)?;
    let ids = st.query_map([], |r| r.get::<_, String>(0)).map_err(source_err)?;
    ids.collect::<Result<_, _>>().map_err(source_err)
}

fn blob_path(dir: &Path, id: &str) -> Result<PathBuf, StoreCopyError> {
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(StoreCopyError::Document(format!("name {id:?} is not a SHA-256")));
    }
    let (head, rest) = id.split_at(2);
    Ok(dir.join(head).join(rest))
}

fn pg_count(pg: &mut postgres::Client, sql: &str) -> Result<u64, StoreCopyError> {
    let n: i64 = pg.query_one(sql, &[]).and_then(|r| r.try_get(0)).map_err(target_err)?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Copies the SQLite installation of `req.data_dir` into the PostgreSQL database at `req.url`
/// (created or continued), calling `progress` after every batch; answers the count table.
pub fn copy(req: &CopyRequest<'_>, progress: &mut dyn FnMut(&Progress)) -> Result<CopyReport, StoreCopyError> {
    let db_path = req.data_dir.join("courrier.db");
    if !db_path.is_file() {
        return Err(StoreCopyError::NoSource(db_path.display().to_string()));
    }
    // Acknowledged mail still in the spool would not reach PostgreSQL (its servers keep none).
    let spool_path = req.data_dir.join("spool.db");
    if spool_path.is_file() {
        use courrier_core::mailing::ports::Spool as _;
        let spool =
            courrier_store_sqlite::SqliteSpool::open(&spool_path).map_err(|e| StoreCopyError::Source(e.to_string()))?;
        let spooled = spool.count().map_err(|e| StoreCopyError::Source(e.to_string()))?;
        if spooled > 0 {
            return Err(StoreCopyError::Spooled(spooled));
        }
    }
    // Its schema brought up to date, as every command does, then read on a connection of its own.
    drop(
        courrier_store_sqlite::SqliteStore::open(&db_path, req.now_micros)
            .map_err(|e| StoreCopyError::Source(e.to_string()))?,
    );
    let key_path = req.data_dir.join(DATA_KEY_FILE);
    let key_bytes: [u8; 32] = std::fs::read(&key_path)
        .map_err(|e| StoreCopyError::DataKey(format!("{}: {e}", key_path.display())))?
        .as_slice()
        .try_into()
        .map_err(|_| StoreCopyError::DataKey(format!("{}: not a 32-byte key", key_path.display())))?;
    let source_id = DataKey::from_bytes(&key_bytes).id().to_owned();

    let store = PostgresStore::open(req.url, req.now_micros)?;
    let mut pg: OwnedClient = store.plain_client()?;
    drop(store);
    let alone: bool = pg
        .query_one("SELECT pg_try_advisory_lock($1)", &[&COPY_LOCK])
        .and_then(|r| r.try_get(0))
        .map_err(target_err)?;
    if !alone {
        return Err(StoreCopyError::NotEmpty("another store copy is writing into it now".into()));
    }
    let source = Source::open(&db_path)?;
    check_tables(&source.tables()?).map_err(StoreCopyError::Schema)?;
    let resumed = claim(&mut pg, req, &source_id, &key_bytes)?;

    let mut plans = Vec::new();
    for table in TABLES {
        plans.push(plan(&mut pg, &source, table)?);
    }
    let blobs = match &req.documents {
        Some(dir) => {
            let ids = blob_ids(&source)?;
            let mut sizes = Vec::with_capacity(ids.len());
            for id in &ids {
                let path = blob_path(dir, id)?;
                let len = std::fs::metadata(&path)
                    .map_err(|e| StoreCopyError::Document(format!("{id} ({}): {e}", path.display())))?
                    .len();
                sizes.push(len);
            }
            Some((dir.clone(), ids, sizes))
        }
        None => None,
    };

    let mut state = Progress { table: "", rows_done: 0, rows_total: 0, bytes_done: 0, bytes_total: 0 };
    let mut sqlite_counts = Vec::new();
    for p in &plans {
        let n = source.count(&format!("SELECT COUNT(*) FROM \"{}\"", p.table))?;
        state.rows_total += n;
        state.rows_done += pg_count(&mut pg, &format!("SELECT COUNT(*) FROM \"{}\"", p.table))?;
        sqlite_counts.push(n);
    }
    if let Some((_, ids, sizes)) = &blobs {
        state.bytes_total = sizes.iter().sum();
        state.rows_total += ids.len() as u64;
        let (n, bytes) = pg_blobs(&mut pg)?;
        state.rows_done += n;
        state.bytes_done = bytes;
    }
    progress(&state);

    let mut batches = 0u64;
    let (mut rows_copied, mut bytes_copied) = (0u64, 0u64);
    let stop = |batches: u64| req.stop_after_batches.is_some_and(|n| batches >= n);
    let started = std::time::Instant::now();
    for p in &plans {
        state.table = p.table;
        progress(&state);
        let mut after = last_key(&mut pg, p)?;
        loop {
            if stop(batches) {
                return Err(StoreCopyError::Stopped(batches));
            }
            let (columns, last, n) = read_batch(&source, p, after.as_deref())?;
            if n == 0 {
                break;
            }
            let params: Vec<&(dyn ToSql + Sync)> = columns.iter().map(Column::as_sql).collect();
            let mut tx = pg.transaction().map_err(target_err)?;
            tx.execute(&p.insert_sql(), &params).map_err(target_err)?;
            tx.commit().map_err(target_err)?;
            batches += 1;
            rows_copied += n as u64;
            state.rows_done += n as u64;
            progress(&state);
            after = Some(last);
        }
    }
    let rows_time = started.elapsed();
    let started = std::time::Instant::now();
    if let Some((dir, ids, sizes)) = &blobs {
        state.table = "ocr_blobs";
        progress(&state);
        let done: Option<String> = pg
            .query_opt("SELECT id FROM ocr_blobs ORDER BY id COLLATE \"C\" DESC LIMIT 1", &[])
            .map_err(target_err)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(target_err)?;
        let mut pending: Vec<(String, Vec<u8>)> = Vec::new();
        let mut pending_bytes = 0usize;
        let todo = ids.iter().zip(sizes).filter(|(id, _)| done.as_ref().is_none_or(|d| id.as_str() > d.as_str()));
        let mut todo = todo.peekable();
        while let Some((id, _)) = todo.next() {
            let path = blob_path(dir, id)?;
            let bytes = std::fs::read(&path)
                .map_err(|e| StoreCopyError::Document(format!("{id} ({}): {e}", path.display())))?;
            if BlobId::of(&bytes).as_str() != id {
                return Err(StoreCopyError::Document(format!(
                    "{id} ({}): its bytes do not hash to its name (the file was altered)",
                    path.display()
                )));
            }
            pending_bytes += bytes.len();
            pending.push((id.clone(), bytes));
            if pending_bytes >= BATCH_BYTES || pending.len() >= BATCH_ROWS || todo.peek().is_none() {
                if stop(batches) {
                    return Err(StoreCopyError::Stopped(batches));
                }
                let (names, contents): (Vec<String>, Vec<Vec<u8>>) = std::mem::take(&mut pending).into_iter().unzip();
                let mut tx = pg.transaction().map_err(target_err)?;
                tx.execute(
                    "INSERT INTO ocr_blobs (id, bytes) SELECT * FROM unnest($1::text[], $2::bytea[]) \
                     ON CONFLICT (id) DO NOTHING",
                    &[&names, &contents],
                )
                .map_err(target_err)?;
                tx.commit().map_err(target_err)?;
                batches += 1;
                bytes_copied += pending_bytes as u64;
                state.rows_done += names.len() as u64;
                state.bytes_done += pending_bytes as u64;
                pending_bytes = 0;
                progress(&state);
            }
        }
    }

    let documents_time = started.elapsed();
    finish(&mut pg, &source, &plans)?;
    let mut counts = Vec::new();
    for (p, n) in plans.iter().zip(sqlite_counts) {
        let on_pg = pg_count(&mut pg, &format!("SELECT COUNT(*) FROM \"{}\"", p.table))?;
        counts.push(Count { what: p.table.to_owned(), sqlite: n, postgres: on_pg });
    }
    counts.push(Count {
        what: "member_tallies (members counted)".into(),
        sqlite: source.count("SELECT COALESCE(SUM(n), 0) FROM member_tallies")?,
        postgres: pg_count(&mut pg, "SELECT COALESCE(SUM(n), 0)::BIGINT FROM member_tallies")?,
    });
    if let Some((_, ids, sizes)) = &blobs {
        let (n, bytes) = pg_blobs(&mut pg)?;
        counts.push(Count { what: "documents (files)".into(), sqlite: ids.len() as u64, postgres: n });
        counts.push(Count { what: "documents (bytes)".into(), sqlite: sizes.iter().sum(), postgres: bytes });
    }
    let report = CopyReport { counts, resumed, rows_copied, bytes_copied, rows_time, documents_time };
    if report.mismatches().is_empty() {
        pg.execute("UPDATE store_copy SET finished_at = $1 WHERE id = 1", &[&req.now_micros]).map_err(target_err)?;
    }
    Ok(report)
}

fn pg_blobs(pg: &mut postgres::Client) -> Result<(u64, u64), StoreCopyError> {
    let row = pg
        .query_one("SELECT COUNT(*), COALESCE(SUM(octet_length(bytes)), 0)::BIGINT FROM ocr_blobs", &[])
        .map_err(target_err)?;
    let (n, bytes): (i64, i64) = (row.try_get(0).map_err(target_err)?, row.try_get(1).map_err(target_err)?);
    Ok((n as u64, bytes as u64))
}

/// Starts the copy in the target, or finds the one in progress: `true` when resumed. Refuses a
/// database holding anything else, before writing anything.
fn claim(
    pg: &mut postgres::Client,
    req: &CopyRequest<'_>,
    source_id: &str,
    key_bytes: &[u8; 32],
) -> Result<bool, StoreCopyError> {
    let mut tx = pg.transaction().map_err(target_err)?;
    tx.execute("LOCK TABLE store_copy IN EXCLUSIVE MODE", &[]).map_err(target_err)?;
    let row = tx.query_opt("SELECT source, finished_at FROM store_copy WHERE id = 1", &[]).map_err(target_err)?;
    if let Some(row) = row {
        let (source, finished): (String, Option<i64>) =
            (row.try_get(0).map_err(target_err)?, row.try_get(1).map_err(target_err)?);
        if source != source_id {
            return Err(StoreCopyError::NotEmpty(format!(
                "it holds a copy of another installation, whose data key is {source}"
            )));
        }
        if finished.is_some() {
            return Err(StoreCopyError::Finished);
        }
        let sealed: Option<String> = tx
            .query_opt("SELECT sealed FROM installation_secrets WHERE name = 'data_key'", &[])
            .map_err(target_err)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(target_err)?;
        let sealed = sealed.ok_or_else(|| StoreCopyError::NotEmpty("its data key is gone".into()))?;
        match data_key::open(req.master, &sealed) {
            Ok(bytes) if &bytes == key_bytes => {}
            Ok(_) => return Err(StoreCopyError::NotEmpty("it holds another data key".into())),
            Err(e) => return Err(StoreCopyError::MasterKey(format!("is not the one the interrupted copy used: {e}"))),
        }
        return Ok(true);
    }
    for table in TABLES.iter().chain(&["installation_secrets", "ocr_blobs"]) {
        let any: bool = tx
            .query_one(&format!("SELECT EXISTS (SELECT 1 FROM \"{table}\")"), &[])
            .and_then(|r| r.try_get(0))
            .map_err(target_err)?;
        if any {
            return Err(StoreCopyError::NotEmpty(format!("{table} has rows")));
        }
    }
    let (name, sealed) = data_key::seal(req.master, key_bytes);
    tx.execute(
        "INSERT INTO installation_secrets (name, sealed, created_at) VALUES ($1, $2, $3)",
        &[&name, &sealed, &req.now_micros],
    )
    .map_err(target_err)?;
    tx.execute("INSERT INTO store_copy (id, source, started_at) VALUES (1, $1, $2)", &[&source_id, &req.now_micros])
        .map_err(target_err)?;
    tx.commit().map_err(target_err)?;
    Ok(false)
}

/// Both sides' columns of `table`, PostgreSQL's types, its primary key and identity columns.
fn plan(pg: &mut postgres::Client, source: &Source, table: &'static str) -> Result<Plan, StoreCopyError> {
    let rows = pg
        .query(
            "SELECT column_name::TEXT, data_type::TEXT, is_identity::TEXT FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
            &[&table],
        )
        .map_err(target_err)?;
    let mut pg_columns = Vec::new();
    let mut identities = Vec::new();
    for r in &rows {
        let (name, t, identity): (String, String, String) =
            (r.try_get(0).map_err(target_err)?, r.try_get(1).map_err(target_err)?, r.try_get(2).map_err(target_err)?);
        if identity == "YES" {
            identities.push(name.clone());
        }
        pg_columns.push((name, t));
    }
    let matched = match_columns(table, &source.columns(table)?, &pg_columns).map_err(StoreCopyError::Schema)?;
    let columns = matched
        .into_iter()
        .map(|(name, t)| {
            PgType::parse(&t)
                .map(|pt| (name.clone(), pt))
                .ok_or_else(|| StoreCopyError::Schema(format!("{table}.{name} of PostgreSQL type {t}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let key_rows = pg
        .query(
            "SELECT a.attname::TEXT FROM pg_index i \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
             WHERE i.indrelid = $1::TEXT::regclass AND i.indisprimary \
             ORDER BY array_position(i.indkey::SMALLINT[], a.attnum)",
            &[&table],
        )
        .map_err(target_err)?;
    let mut key = Vec::new();
    for r in &key_rows {
        let name: String = r.try_get(0).map_err(target_err)?;
        key.push(
            columns.iter().position(|(c, _)| *c == name).ok_or_else(|| {
                StoreCopyError::Schema(format!("{table}: its primary key column {name} is not copied"))
            })?,
        );
    }
    if key.is_empty() {
        return Err(StoreCopyError::Schema(format!("{table}: a table without a primary key")));
    }
    Ok(Plan { table, columns, key, identities })
}

/// The greatest key PostgreSQL holds of the table: the copy continues after it.
fn last_key(pg: &mut postgres::Client, p: &Plan) -> Result<Option<Vec<Value>>, StoreCopyError> {
    let names = p.key.iter().map(|&i| format!("\"{}\"", p.columns[i].0)).collect::<Vec<_>>().join(", ");
    let sql = format!("SELECT {names} FROM \"{}\" ORDER BY {} LIMIT 1", p.table, p.key_list(true, true));
    let Some(row) = pg.query_opt(&sql, &[]).map_err(target_err)? else { return Ok(None) };
    let mut key = Vec::new();
    for (n, &i) in p.key.iter().enumerate() {
        key.push(match p.columns[i].1 {
            PgType::Int8 => Value::Integer(row.try_get::<_, i64>(n).map_err(target_err)?),
            PgType::Int4 => Value::Integer(i64::from(row.try_get::<_, i32>(n).map_err(target_err)?)),
            PgType::Text => Value::Text(row.try_get::<_, String>(n).map_err(target_err)?),
            other => return Err(StoreCopyError::Schema(format!("{}: a primary key of type {other:?}", p.table))),
        });
    }
    Ok(Some(key))
}

/// The next batch of `p` after `after`: its columns, its last key and its number of rows.
fn read_batch(
    source: &Source,
    p: &Plan,
    after: Option<&[Value]>,
) -> Result<(Vec<Column>, Vec<Value>, usize), StoreCopyError> {
    let mut st = source.conn.prepare_cached(&p.select_sql(after.is_some())).map_err(source_err)?;
    let mut rows = match after {
        Some(key) => st.query(rusqlite::params_from_iter(key.iter())).map_err(source_err)?,
        None => st.query([]).map_err(source_err)?,
    };
    let mut columns: Vec<Column> = p.columns.iter().map(|(_, t)| Column::new(*t)).collect();
    let (mut n, mut bytes, mut last) = (0usize, 0usize, Vec::new());
    while let Some(row) = rows.next().map_err(source_err)? {
        let key: Vec<Value> =
            p.key.iter().map(|&i| row.get::<_, Value>(i)).collect::<Result<_, _>>().map_err(source_err)?;
        for (i, col) in columns.iter_mut().enumerate() {
            let value = row.get_ref(i).map_err(source_err)?;
            bytes += col.push(value).ok_or_else(|| StoreCopyError::Value {
                table: p.table.to_owned(),
                column: p.columns[i].0.clone(),
                key: format!("{key:?}"),
                pg_type: format!("{:?}", p.columns[i].1),
            })?;
        }
        last = key;
        n += 1;
        // A batch of large rows (messages, raw posts) ends early; the next read continues after it.
        if bytes >= BATCH_BYTES {
            break;
        }
    }
    Ok((columns, last, n))
}

/// What is set once the rows are in: the webhook cursor's one value, and every identity sequence
/// moved past the copied ids (the next row made on PostgreSQL takes the next id).
fn finish(pg: &mut postgres::Client, source: &Source, plans: &[Plan]) -> Result<(), StoreCopyError> {
    let cursor: Option<i64> = source
        .conn
        .query_row("SELECT event_id FROM webhook_cursor WHERE id = 1", [], |r| r.get(0))
        .map(Some)
        .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })
        .map_err(source_err)?;
    let mut tx = pg.transaction().map_err(target_err)?;
    if let Some(event_id) = cursor {
        tx.execute(
            "INSERT INTO webhook_cursor (id, event_id) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET event_id = $1",
            &[&event_id],
        )
        .map_err(target_err)?;
    }
    for p in plans {
        for column in &p.identities {
            tx.execute(
                &format!(
                    "SELECT setval(pg_get_serial_sequence($1, $2), COALESCE((SELECT MAX(\"{column}\") FROM \"{}\"), 0) + 1, false)",
                    p.table
                ),
                &[&p.table, &column],
            )
            .map_err(target_err)?;
        }
    }
    tx.commit().map_err(target_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_of_a_fresh_sqlite_installation_is_copied_or_said_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("courrier.db");
        drop(courrier_store_sqlite::SqliteStore::open(&path, 0).unwrap());
        let source = Source::open(&path).unwrap();
        let tables = source.tables().unwrap();
        check_tables(&tables).unwrap();
        let mut unknown = tables.clone();
        unknown.push("mystery".into());
        assert!(check_tables(&unknown).unwrap_err().contains("mystery"));
        let missing: Vec<String> = tables.iter().filter(|t| *t != "members").cloned().collect();
        assert!(check_tables(&missing).unwrap_err().contains("members"));
    }

    /// An SQLite installation with two accounts, in `dir`.
    fn two_users(dir: &Path) {
        drop(courrier_store_sqlite::SqliteStore::open(&dir.join("courrier.db"), 0).unwrap());
        courrier_core::adapters::data_key::load_or_create(dir).unwrap();
        let conn = rusqlite::Connection::open(dir.join("courrier.db")).unwrap();
        for who in ["ann", "bob"] {
            conn.execute(
                "INSERT INTO users (email, email_key, status, created_at, updated_at) VALUES (?1, ?1, 'active', 0, 0)",
                [format!("{who}@example.org")],
            )
            .unwrap();
        }
    }

    /// The tests' master key (any 32 bytes).
    fn master_key() -> MasterKey {
        use base64::Engine;
        MasterKey::parse(&base64::engine::general_purpose::STANDARD.encode([7u8; 32])).unwrap()
    }

    /// A copy of `data_dir`'s SQLite installation, no documents, into `url`.
    fn request<'a>(
        data_dir: &'a std::path::Path,
        url: &'a str,
        master: &'a MasterKey,
        stop_after_batches: Option<u64>,
    ) -> CopyRequest<'a> {
        CopyRequest { data_dir, documents: None, url, master, now_micros: 1, stop_after_batches }
    }

    #[test]
    fn mail_still_in_the_spool_is_never_left_behind() {
        use courrier_core::mailing::ports::Spool as _;
        let dir = tempfile::tempdir().unwrap();
        two_users(dir.path());
        let spool = courrier_store_sqlite::SqliteSpool::open(&dir.path().join("spool.db")).unwrap();
        let role = courrier_core::mailing::model::Role::Post;
        let message = courrier_core::mailing::ports::NewInbound {
            list_id: courrier_core::mailing::model::ListId::from_stored(1),
            role: &role,
            recipient: "news@example.org",
            envelope_from: Some("ann@example.net"),
            raw: b"Subject: hi\r\n\r\nhello\r\n",
        };
        let keys = spool.put(&[message], courrier_core::kernel::Timestamp::from_unix_secs(1)).unwrap();
        let master = master_key();
        let req = request(dir.path(), "postgres://nobody@127.0.0.1:9/none", &master, None);
        let refused = copy(&req, &mut |_| {}).map(drop).unwrap_err();
        assert!(matches!(refused, StoreCopyError::Spooled(1)), "{refused}");
        assert_eq!(refused.code(), Code::Conflict);
        spool.forget(&keys).unwrap();
        let past = copy(&req, &mut |_| {}).map(drop).unwrap_err();
        assert!(!matches!(past, StoreCopyError::Spooled(_)), "an empty spool lets the copy go on: {past}");
    }

    #[test]
    fn a_copy_whose_counts_differ_is_reported_and_never_marked_finished() {
        use crate::test_server::{TestServer, TestServerError};
        let server = match TestServer::start() {
            Err(e @ TestServerError::NoBinaries) => return eprintln!("SKIPPED: {e}"),
            other => other.unwrap(),
        };
        let dir = tempfile::tempdir().unwrap();
        two_users(dir.path());
        let url = server.fresh_database().unwrap();
        let master = master_key();
        let mut req = request(dir.path(), &url, &master, Some(1));
        assert!(matches!(copy(&req, &mut |_| {}), Err(StoreCopyError::Stopped(1))));
        // A row taken away behind the copy's back, below where it continues.
        let mut pg = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        assert_eq!(pg.execute("DELETE FROM users WHERE email = 'ann@example.org'", &[]).unwrap(), 1);
        req.stop_after_batches = None;
        let report = copy(&req, &mut |_| {}).unwrap();
        assert!(report.resumed);
        let wrong: Vec<_> = report.mismatches().into_iter().cloned().collect();
        assert_eq!(wrong, [Count { what: "users".into(), sqlite: 2, postgres: 1 }]);
        let finished: Option<i64> = pg.query_one("SELECT finished_at FROM store_copy", &[]).unwrap().get(0);
        assert_eq!(finished, None, "not finished: a run again is still a copy in progress");
        assert!(copy(&req, &mut |_| {}).unwrap().resumed);
    }

    #[test]
    fn a_second_copy_into_the_same_database_at_once_is_refused_and_writes_nothing() {
        use crate::test_server::{TestServer, TestServerError};
        let server = match TestServer::start() {
            Err(e @ TestServerError::NoBinaries) => return eprintln!("SKIPPED: {e}"),
            other => other.unwrap(),
        };
        let dir = tempfile::tempdir().unwrap();
        two_users(dir.path());
        let url = server.fresh_database().unwrap();
        let master = master_key();
        let req = request(dir.path(), &url, &master, None);
        // The first copy, as another process holds it.
        let mut first = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        first.execute("SELECT pg_advisory_lock($1)", &[&COPY_LOCK]).unwrap();
        let refused = copy(&req, &mut |_| {}).map(drop).unwrap_err();
        assert!(refused.to_string().contains("another store copy is writing into it"), "{refused}");
        assert_eq!(refused.code(), Code::Conflict);
        let claimed: i64 = first.query_one("SELECT COUNT(*) FROM store_copy", &[]).unwrap().get(0);
        assert_eq!(claimed, 0, "nothing written");
        drop(first);
        assert!(copy(&req, &mut |_| {}).unwrap().mismatches().is_empty(), "once it is gone, the copy runs");
    }

    #[test]
    fn columns_must_be_the_same_on_both_sides() {
        let s = |v: &[&str]| v.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        let p = |v: &[&str]| v.iter().map(|c| ((*c).to_owned(), "text".to_owned())).collect::<Vec<_>>();
        assert_eq!(match_columns("t", &s(&["a", "b"]), &p(&["b", "a"])).unwrap(), p(&["b", "a"]), "PostgreSQL's order");
        assert!(match_columns("t", &s(&["a", "b", "c"]), &p(&["a", "b"])).unwrap_err().contains("t.c"));
        assert!(match_columns("t", &s(&["a"]), &p(&["a", "z"])).unwrap_err().contains("t.z"));
        let outbox = match_columns("outbox_events", &s(&["id"]), &p(&["id", "xid"])).unwrap();
        assert_eq!(outbox, p(&["id"]), "PostgreSQL's own column left to its default");
    }

    #[test]
    fn sqlite_values_convert_to_postgres_types_or_are_refused() {
        let mut b = Column::new(PgType::Bool);
        assert!(b.push(ValueRef::Integer(1)).is_some() && b.push(ValueRef::Integer(0)).is_some());
        assert!(b.push(ValueRef::Null).is_some());
        let Column::Bool(v) = &b else { unreachable!() };
        assert_eq!(v, &[Some(true), Some(false), None]);
        assert!(Column::new(PgType::Int4).push(ValueRef::Integer(i64::from(i32::MAX) + 1)).is_none());
        assert!(Column::new(PgType::Int8).push(ValueRef::Text(b"12")).is_none(), "no silent conversion");
        assert!(Column::new(PgType::Text).push(ValueRef::Text(&[0xff, 0xfe])).is_none(), "not UTF-8");
        assert_eq!(Column::new(PgType::Bytea).push(ValueRef::Blob(&[1, 2, 3])), Some(3));
    }

    #[test]
    fn a_batch_continues_after_the_last_key_in_sqlite_order() {
        let plan = Plan {
            table: "ocr_usage",
            columns: vec![
                ("user_id".into(), PgType::Int8),
                ("month".into(), PgType::Text),
                ("pages".into(), PgType::Int8),
            ],
            key: vec![0, 1],
            identities: vec![],
        };
        assert_eq!(
            plan.select_sql(true),
            format!(
                "SELECT \"user_id\", \"month\", \"pages\" FROM \"ocr_usage\" WHERE (\"user_id\", \"month\") > (?1, ?2) \
                 ORDER BY \"user_id\", \"month\" LIMIT {BATCH_ROWS}"
            )
        );
        assert_eq!(plan.key_list(true, true), "\"user_id\" DESC, \"month\" COLLATE \"C\" DESC");
        assert_eq!(
            plan.insert_sql(),
            "INSERT INTO \"ocr_usage\" (\"user_id\", \"month\", \"pages\") SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])"
        );
    }
}
