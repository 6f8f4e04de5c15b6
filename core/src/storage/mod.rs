//! The storage machinery every context shares: the transaction (commit, rollback, nested units),
//! the kernel's two repositories (the audit trail and the outbox of events), and the runners that
//! open and close a transaction around a rule.
//!
//! Each context declares its own transaction (`access::ports::Tx`, `mailing::ports::Tx`,
//! `ocr::ports::Tx`: this [`Transaction`] plus the repositories its rules use) and takes a
//! [`Store`] of it; a storage adapter implements every context's. This module names no context.
//! The port is object-safe and dialect-neutral (integer ids, integer microsecond timestamps, no
//! SQLite-only semantics in core), so a PostgreSQL adapter can implement it and run the same
//! suites.

use crate::kernel::{
    AuditEntry, AuditFilter, AuditId, Code, CoreError, Event, EventId, NewAuditEntry, NewEvent, Page, Paged,
};

pub mod jobs;
#[cfg(any(test, feature = "testing"))]
pub mod suite;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Another writer held the database for longer than the busy time-out, or the pool had no
    /// free connection in time. The caller may retry.
    #[error("the database is busy, try again")]
    Busy,
    /// A uniqueness rule of the schema refused the write. Rules that expect it check first and
    /// return their own error; reaching the caller as this means a race they lost.
    #[error("a record with the same identity already exists")]
    Duplicate,
    #[error("the database schema is at version {found}, newer than this binary knows ({known}): run a newer courrier")]
    SchemaTooNew { found: i64, known: i64 },
    #[error("cannot open the database {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("storage failed: {0}")]
    Backend(String),
}

impl CoreError for StoreError {
    fn code(&self) -> Code {
        match self {
            StoreError::Busy | StoreError::SchemaTooNew { .. } | StoreError::Open { .. } => Code::StorageUnavailable,
            StoreError::Duplicate => Code::Conflict,
            StoreError::Backend(_) => Code::Internal,
        }
    }
}

/// The audit trail.
pub trait AuditRepo {
    fn append_audit(&mut self, entry: &NewAuditEntry) -> Result<AuditId, StoreError>;
    /// Newest first; `total` counts every entry the filter keeps.
    fn list_audit(&mut self, filter: &AuditFilter, page: Page) -> Result<Paged<AuditEntry>, StoreError>;
}

/// The transactional outbox of lifecycle events.
pub trait OutboxRepo {
    fn append_event(&mut self, event: &NewEvent) -> Result<Event, StoreError>;
    /// Records events of one name, time and scope whose `data` are already JSON objects: an
    /// import records one per row, built without a `serde_json::Value`.
    fn append_events_json(
        &mut self,
        name: crate::kernel::EventName,
        at: crate::kernel::Timestamp,
        scope: (Option<i64>, Option<i64>),
        data: &[String],
    ) -> Result<(), StoreError>;
    /// The id of the last event [`OutboxRepo::events_after`] would give now.
    fn last_event_id(&mut self) -> Result<Option<EventId>, StoreError>;
    /// Events after `after` (exclusive), in an order where an event committed later never comes
    /// before one already given: a reader that moves its cursor to the last event it got skips
    /// none, however its writers' commits interleave. (The order they were committed in on a
    /// store with one writer at a time; on one whose writers commit together, an event of a
    /// transaction still running is given only once it and every older one have ended.)
    fn events_after(&mut self, after: Option<EventId>, limit: u32) -> Result<Vec<Event>, StoreError>;
}

/// One transaction. Dropped without [`Transaction::commit`], it rolls back.
///
/// A write transaction is a *unit of work*: an adapter may run several units of concurrent callers
/// in one database transaction (group commit: one flush to disk for all of them), each unit in its
/// own savepoint. What a caller sees does not change: its unit's writes land together or not at
/// all, a failing unit takes only its own writes back, and `commit` returns `Ok` only once the
/// writes are durable.
pub trait Transaction: AuditRepo + OutboxRepo {
    /// Makes the unit's writes durable; `Ok` only once they are.
    fn commit(self: Box<Self>) -> Result<(), StoreError>;
    /// Takes the unit's writes back, like dropping it, and says whether the unit saw only durable
    /// data: `Err` when it ran after other units of the same group commit, read their writes, and
    /// their commit then failed (so a refusal it decided on may rest on writes that never were).
    fn rollback(self: Box<Self>) -> Result<(), StoreError> {
        drop(self);
        Ok(())
    }
    /// Opens a nested unit inside this transaction (SQL `SAVEPOINT`); end it with
    /// [`Transaction::keep_nested`] or [`Transaction::undo_nested`]. Nested units nest.
    fn begin_nested(&mut self) -> Result<(), StoreError>;
    /// Ends the innermost nested unit, keeping its writes in the transaction.
    fn keep_nested(&mut self) -> Result<(), StoreError>;
    /// Ends the innermost nested unit, taking its writes back; the transaction goes on.
    fn undo_nested(&mut self) -> Result<(), StoreError>;
}

/// A database as a whole: what does not depend on the context that uses it. Shared by every thread
/// of the process (and, for a server backend, by processes).
pub trait Database: Send + Sync {
    /// A short description for the version object, e.g. `sqlite 3.50.4 (WAL, synchronous=FULL)`.
    fn backend(&self) -> String;
    /// A number that changes whenever anything is committed to the database, by this process or
    /// another (the `courrier` CLI next to a running server): what in-memory caches of stored state
    /// check before trusting an entry. Cheap: it reads no table.
    fn change_marker(&self) -> Result<u64, StoreError>;
    /// Whether the database is a server several processes share over the network: then nothing
    /// of it (not even a marker) is read on an async runtime's thread, and quotas are shared.
    /// An embedded file by default.
    fn is_shared(&self) -> bool {
        false
    }
    /// A number that changes whenever what authenticating a key reads (users, roles, API keys) is
    /// committed, by this process or another: what the key cache checks. By default the change
    /// marker, which moves at least as often.
    fn access_marker(&self) -> Result<u64, StoreError> {
        self.change_marker()
    }
}

/// What a write serialises on when it need not exclude every other writer: the writes of one key
/// take turns, writes of different keys commit together (on a server database; an embedded file
/// has one writer at a time anyway). A rule that runs under a key vouches that everything it reads
/// and writes is that key's, or is kept consistent by the database itself (a uniqueness rule, a
/// row's own update, a counter's increment): e.g. one list's members, tallies, events and audit
/// entries under the list's key. A write with no key excludes all others, keyed or not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriteKey(String);

impl WriteKey {
    /// The key of `kind` (e.g. `"list"`) named by `parts` (e.g. its domain and name).
    pub fn new(kind: &str, parts: &[&str]) -> Self {
        let mut key = String::from(kind);
        for part in parts {
            key.push('\u{1f}');
            key.push_str(part);
        }
        WriteKey(key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A database seen through one context's transaction `T` (e.g. `dyn mailing::ports::Tx`).
pub trait Store<T: ?Sized + Transaction>: Database {
    /// A transaction that will write: it takes the write lock at once, so two writers queue
    /// instead of failing half-way when one tries to upgrade a read lock.
    fn write(&self) -> Result<Box<T>, StoreError>;
    /// A write under `key` ([`WriteKey`]): it waits for the writes of the same key and for
    /// unkeyed writes, and runs beside the writes of other keys. By default, an unkeyed write.
    fn write_keyed(&self, key: &WriteKey) -> Result<Box<T>, StoreError> {
        let _ = key;
        self.write()
    }
    /// A transaction that only reads: one consistent snapshot, no write lock.
    fn read(&self) -> Result<Box<T>, StoreError>;
    /// Hands `job` to the store's writer thread, which runs the units waiting together back to
    /// back in one transaction with one `COMMIT` and calls each one's [`WriteJob::done`] from
    /// there: a caller that only waits for the answer needs no thread of its own to write.
    /// `Err(job)` when the store has none (the caller runs it with [`run_here`]).
    fn submit(&self, job: Box<dyn WriteJob<T>>) -> Result<(), Box<dyn WriteJob<T>>> {
        Err(job)
    }
}

/// A write as a store's writer thread runs it ([`Store::submit`]), or the caller's thread
/// ([`run_here`]): the same unit of work, committed with the same guarantees.
pub trait WriteJob<X: ?Sized>: Send {
    /// Runs inside the unit of work; `true` keeps its writes (to commit), `false` takes them back.
    /// It must not open transactions of its own.
    fn run(&mut self, tx: &mut X) -> bool;
    /// Called once, when the unit's fate is known: `Ok` when its writes are durable (or, taken
    /// back, it saw only durable data), `Err` when the commit failed or the unit could not start
    /// (then [`WriteJob::run`] was never called). On a writer thread: hand the answer on, do not
    /// block.
    fn done(self: Box<Self>, outcome: Result<(), StoreError>);
    /// The key the unit serialises on ([`Store::write_keyed`]); `None`: it excludes every writer.
    fn key(&self) -> Option<&WriteKey> {
        None
    }
}

impl<X: ?Sized, J: WriteJob<X> + ?Sized> WriteJob<X> for Box<J> {
    fn run(&mut self, tx: &mut X) -> bool {
        (**self).run(tx)
    }

    fn key(&self) -> Option<&WriteKey> {
        (**self).key()
    }

    fn done(self: Box<Self>, outcome: Result<(), StoreError>) {
        (*self).done(outcome);
    }
}

/// Hands `job` to `store`'s writer thread ([`Store::submit`]), where it runs in the caller's
/// tracing span (its log lines carry the request's id) and is answered once its commit is decided.
/// Where the store has no writer thread, the write comes back as `Some(run)`: call it on a thread
/// that may block (it runs the job with [`run_here`]). So the rule's service decides where its
/// writes run, and a frontend only picks the thread that may wait.
pub fn submit_write<X: ?Sized + Transaction + 'static>(
    store: std::sync::Arc<dyn Store<X>>,
    job: impl WriteJob<X> + 'static,
) -> Option<impl FnOnce() + Send + 'static> {
    let job = InSpan { job, span: tracing::Span::current() };
    match store.submit(Box::new(job)) {
        Ok(()) => None,
        Err(job) => Some(move || run_here(&*store, job)),
    }
}

/// A write run in the span it was handed over in.
struct InSpan<J> {
    job: J,
    span: tracing::Span,
}

impl<X: ?Sized, J: WriteJob<X>> WriteJob<X> for InSpan<J> {
    fn run(&mut self, tx: &mut X) -> bool {
        let Self { job, span } = self;
        span.in_scope(|| job.run(tx))
    }

    fn done(self: Box<Self>, outcome: Result<(), StoreError>) {
        let Self { job, span } = *self;
        span.in_scope(|| Box::new(job).done(outcome));
    }

    fn key(&self) -> Option<&WriteKey> {
        self.job.key()
    }
}

/// Runs `job` on the calling thread: a write transaction (under the job's key, if it has one),
/// committed or rolled back as `run` says.
pub fn run_here<X: ?Sized + Transaction, J: WriteJob<X>>(store: &dyn Store<X>, mut job: J) {
    let begun = match job.key() {
        Some(key) => store.write_keyed(key),
        None => store.write(),
    };
    let mut tx = match begun {
        Ok(tx) => tx,
        Err(e) => return Box::new(job).done(Err(e)),
    };
    let outcome = if job.run(&mut *tx) { tx.commit() } else { tx.rollback() };
    Box::new(job).done(outcome);
}

/// [`in_write`] (or, `keep_refusals`, [`in_write_keeping_refusals`]) as a [`WriteJob`]: `f` is
/// the rule, `answer` gets what the runner would have returned.
pub fn write_job<X, T, E, F, A>(keep_refusals: bool, f: F, answer: A) -> impl WriteJob<X>
where
    X: ?Sized,
    T: Send,
    E: From<StoreError> + Send,
    F: FnOnce(&mut X) -> Result<T, E> + Send,
    A: FnOnce(Result<T, E>) + Send,
{
    RuleJob { f: Some(f), out: None, keep_refusals, answer }
}

struct RuleJob<F, T, E, A> {
    f: Option<F>,
    out: Option<Result<T, E>>,
    keep_refusals: bool,
    answer: A,
}

impl<X, T, E, F, A> WriteJob<X> for RuleJob<F, T, E, A>
where
    X: ?Sized,
    T: Send,
    E: From<StoreError> + Send,
    F: FnOnce(&mut X) -> Result<T, E> + Send,
    A: FnOnce(Result<T, E>) + Send,
{
    fn run(&mut self, tx: &mut X) -> bool {
        let Some(f) = self.f.take() else { return false };
        let out = f(tx);
        let keep = out.is_ok() || self.keep_refusals;
        self.out = Some(out);
        keep
    }

    fn done(self: Box<Self>, outcome: Result<(), StoreError>) {
        let answer = match (self.out, outcome) {
            (None, Err(e)) => Err(e.into()),
            (None, Ok(())) => Err(StoreError::Backend("a write that never ran".into()).into()),
            (Some(Ok(out)), Ok(())) => Ok(out),
            (Some(Ok(_)), Err(e)) => Err(e.into()),
            (Some(Err(refusal)), Ok(())) => Err(refusal),
            (Some(Err(refusal)), Err(e)) if self.keep_refusals => {
                tracing::error!(error = %e, "cannot commit a refusal's audit entry");
                Err(refusal)
            }
            // Undone after reading writes of its group that then failed to commit: its refusal
            // may rest on them (as `in_write`'s rollback says).
            (Some(Err(_)), Err(e)) => Err(e.into()),
        };
        (self.answer)(answer);
    }
}

/// Runs `f` in a write transaction: commits when it returns `Ok`, rolls back when it returns
/// `Err` (the transaction is dropped uncommitted).
pub fn in_write<X: ?Sized + Transaction, T, E: From<StoreError>>(
    store: &dyn Store<X>,
    f: impl FnOnce(&mut X) -> Result<T, E>,
) -> Result<T, E> {
    finish_write(store.write()?, f)
}

/// [`in_write`] under `key` ([`Store::write_keyed`]).
pub fn in_write_keyed<X: ?Sized + Transaction, T, E: From<StoreError>>(
    store: &dyn Store<X>,
    key: &WriteKey,
    f: impl FnOnce(&mut X) -> Result<T, E>,
) -> Result<T, E> {
    finish_write(store.write_keyed(key)?, f)
}

fn finish_write<X: ?Sized + Transaction, T, E: From<StoreError>>(
    mut tx: Box<X>,
    f: impl FnOnce(&mut X) -> Result<T, E>,
) -> Result<T, E> {
    match f(&mut *tx) {
        Ok(out) => {
            tx.commit()?;
            Ok(out)
        }
        Err(e) => {
            tx.rollback()?;
            Err(e)
        }
    }
}

/// Runs `f` in a write transaction that is committed whatever `f` returns. On `Err`, `f` must
/// have left in it only what is to be kept with the refusal (its audit entry): rules undo their
/// own writes with [`in_nested`]. A refusal whose audit entry cannot be committed is still the
/// answer (logged): a refusal does not become a 5xx because its audit entry could not be written.
pub fn in_write_keeping_refusals<X: ?Sized + Transaction, T, E: From<StoreError>>(
    store: &dyn Store<X>,
    f: impl FnOnce(&mut X) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = store.write()?;
    match f(&mut *tx) {
        Ok(out) => {
            tx.commit()?;
            Ok(out)
        }
        Err(e) => {
            if let Err(store) = tx.commit() {
                tracing::error!(error = %store, "cannot commit a refusal's audit entry");
            }
            Err(e)
        }
    }
}

/// Runs `f` in a nested unit of `tx`: its writes stay when it returns `Ok` and are taken back
/// when it returns `Err`, while the transaction goes on either way.
pub fn in_nested<X: ?Sized + Transaction, T, E: From<StoreError>>(
    tx: &mut X,
    f: impl FnOnce(&mut X) -> Result<T, E>,
) -> Result<T, E> {
    tx.begin_nested()?;
    match f(tx) {
        Ok(out) => {
            tx.keep_nested()?;
            Ok(out)
        }
        Err(e) => {
            tx.undo_nested()?;
            Err(e)
        }
    }
}

/// Runs `f` in a read transaction (its snapshot ends when `f` returns).
pub fn in_read<X: ?Sized + Transaction, T, E: From<StoreError>>(
    store: &dyn Store<X>,
    f: impl FnOnce(&mut X) -> Result<T, E>,
) -> Result<T, E> {
    let mut tx = store.read()?;
    f(&mut *tx)
}
