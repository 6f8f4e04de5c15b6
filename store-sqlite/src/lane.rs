//! The write lane: this process's writers queue here, in order, instead of in SQLite's busy
//! handler, and the units of work that were waiting together share one transaction and one fsync
//! (group commit).
//!
//! One connection does every write of the process. A writer waits for it (a condition variable,
//! not the busy handler's growing sleeps), runs its unit inside a `SAVEPOINT` (only when earlier
//! units left writes in the transaction: a unit alone needs none), and releases it.
//! Then, if other writers are already waiting, it hands them the connection with the transaction
//! still open and waits for the batch's outcome; the last unit of a batch (nobody waiting, or the
//! batch full or old) runs the one `COMMIT` and tells every unit of the batch how it went. So:
//!
//! - a unit that fails rolls back to its savepoint: its own writes go, the batch's stay;
//! - no caller hears "committed" before the shared `COMMIT` returned, and a failed `COMMIT`
//!   reaches every caller of the batch;
//! - a unit that saw the uncommitted writes of earlier units and then rolled back hears about a
//!   failed `COMMIT` too (its refusal may rest on writes that never became durable).
//!
//! Other processes (the CLI, a second server) still meet this one through SQLite's own locking:
//! a batch opens with `BEGIN IMMEDIATE`, which waits for them in the busy handler as before.

use super::map_err;
use courrier_core::storage::StoreError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A batch takes no more units than this...
pub(super) const MAX_UNITS: usize = 64;
/// ...and none once it has been open this long, so the first unit's caller is not kept waiting
/// behind a stream of later ones.
const MAX_AGE: Duration = Duration::from_millis(10);

/// The outcome of one batch's `COMMIT`, waited for by every unit that joined it.
#[derive(Default)]
struct Outcome {
    result: Mutex<Option<Result<(), StoreError>>>,
    done: Condvar,
}

impl Outcome {
    fn publish(&self, result: Result<(), StoreError>) {
        *lock(&self.result) = Some(result);
        self.done.notify_all();
    }

    fn wait(&self) -> Result<(), StoreError> {
        let mut r = lock(&self.result);
        loop {
            if let Some(result) = &*r {
                return result.clone();
            }
            r = self.done.wait(r).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The open transaction that units join.
struct Batch {
    outcome: Arc<Outcome>,
    opened: Instant,
    /// Units started in it.
    units: usize,
    /// Units whose writes it keeps (released savepoints): it needs a `COMMIT` only if some.
    kept: usize,
}

/// When a unit of a group hears its fate ([`Lane::run_group`]).
enum Told {
    Now(Result<(), StoreError>),
    /// With its batch's `COMMIT`.
    After(Arc<Outcome>),
}

/// What passes from writer to writer: the connection and the transaction open on it.
pub(super) struct Token {
    conn: rusqlite::Connection,
    batch: Option<Batch>,
}

struct State {
    /// `None` while a writer holds the lane.
    token: Option<Token>,
    /// Writers waiting for the token.
    waiting: usize,
}

pub(super) struct Lane {
    state: Mutex<State>,
    /// Signalled once per hand-over, to ONE waiter: every waiter wants the same token, and waking
    /// them all (8 or 32 concurrent adds) cost a futex wake and a context switch per waiter and
    /// unit on a 2-core machine, for all but one to sleep again. A waiter always takes a token it
    /// finds (even past its deadline), so a signal is never lost on one that gives up.
    free: Condvar,
    /// How long a writer waits for the lane before [`StoreError::Busy`].
    timeout: Duration,
    /// A batch older than this commits even with writers waiting ([`MAX_AGE`]; tests of the
    /// grouping raise it, so that a loaded machine does not close their batch before the writers
    /// they queue have joined it).
    max_age: Duration,
    /// `COMMIT`s run, and units committed by them (for tests and a glance in a debugger).
    commits: std::sync::atomic::AtomicU64,
    units_committed: std::sync::atomic::AtomicU64,
}

/// One statement without parameters, prepared once per connection (parsing `SAVEPOINT` or
/// `COMMIT` again on every unit showed in the profile).
pub(super) fn run(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks leaves consistent data (plain assignments).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One writer's turn: the connection, inside the unit's savepoint.
pub(super) struct Unit {
    token: Token,
    outcome: Arc<Outcome>,
    /// Whether earlier units of the batch had left writes in it when this one began.
    saw_uncommitted: bool,
}

impl Unit {
    pub(super) fn conn(&self) -> &rusqlite::Connection {
        &self.token.conn
    }
}

/// How a unit ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Keep,
    Undo,
}

impl Lane {
    pub(super) fn new(conn: rusqlite::Connection, timeout: Duration) -> Arc<Self> {
        Self::with_max_age(conn, timeout, MAX_AGE)
    }

    fn with_max_age(conn: rusqlite::Connection, timeout: Duration, max_age: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State { token: Some(Token { conn, batch: None }), waiting: 0 }),
            free: Condvar::new(),
            timeout,
            max_age,
            commits: std::sync::atomic::AtomicU64::new(0),
            units_committed: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Waits for the lane, joins the open batch or opens one (`BEGIN IMMEDIATE`), and starts the
    /// unit's savepoint.
    pub(super) fn begin(&self) -> Result<Unit, StoreError> {
        let token = self.acquire()?;
        self.start(token)
    }

    /// Waits for the token.
    fn acquire(&self) -> Result<Token, StoreError> {
        let deadline = Instant::now() + self.timeout;
        let mut st = lock(&self.state);
        st.waiting += 1;
        let token = loop {
            if let Some(t) = st.token.take() {
                break t;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                st.waiting -= 1;
                tracing::warn!("no turn on the write lane in time");
                return Err(StoreError::Busy);
            }
            st = self.free.wait_timeout(st, left).unwrap_or_else(PoisonError::into_inner).0;
        };
        st.waiting -= 1;
        Ok(token)
    }

    /// Starts a unit with the token held: in its open batch, or a new one. On failure the token
    /// is given back.
    fn start(&self, mut token: Token) -> Result<Unit, StoreError> {
        if token.batch.is_none() {
            if !token.conn.is_autocommit() {
                // A rollback that failed earlier left a transaction open: nothing in it is owed
                // to anyone.
                let _ = run(&token.conn, "ROLLBACK");
            }
            if let Err(e) = run(&token.conn, "BEGIN IMMEDIATE") {
                self.give_back(token);
                return Err(map_err(e));
            }
            token.batch = Some(Batch { outcome: Arc::default(), opened: Instant::now(), units: 0, kept: 0 });
        }
        let unit = self.unit_of(token);
        // A unit needs its own savepoint only when the batch holds writes of earlier units to
        // protect from its failure; alone, a failure rolls the transaction back (and a big unit,
        // an import's chunk or a send's fan-out, pays no savepoint journal).
        if unit.saw_uncommitted
            && let Err(e) = run(unit.conn(), "SAVEPOINT unit")
        {
            let e = map_err(e);
            // Nothing of this unit to undo; the batch goes on (or is closed) as usual.
            let _ = self.end(unit, End::Undo);
            return Err(e);
        }
        Ok(unit)
    }

    /// Runs `jobs` back to back on the calling thread, holding the lane between them: they join
    /// one batch (or more, past [`MAX_UNITS`] or [`MAX_AGE`]) without a hand-over each, and each
    /// is told its fate once its batch's `COMMIT` is decided, with the guarantees of
    /// [`Lane::commit`] and [`Lane::rollback`]. `run` runs a job's unit and says whether to keep
    /// its writes; `done` gets the job and its outcome (also when its unit could not start).
    pub(super) fn run_group<J>(
        &self,
        jobs: Vec<J>,
        mut run: impl FnMut(&mut J, Unit) -> (Unit, bool),
        mut done: impl FnMut(J, Result<(), StoreError>),
    ) {
        let mut told: Vec<(J, Told)> = Vec::with_capacity(jobs.len());
        let mut held: Option<Token> = None;
        for mut job in jobs {
            let started = match held.take() {
                Some(token) if token.batch.as_ref().is_some_and(|b| self.is_full(b)) => {
                    // Commit what the batch holds (its units hear it below), then queue again.
                    self.close(token);
                    self.begin()
                }
                Some(token) => self.start(token),
                None => self.begin(),
            };
            let unit = match started {
                Ok(unit) => unit,
                Err(e) => {
                    told.push((job, Told::Now(Err(e))));
                    continue;
                }
            };
            let (unit, keep) = run(&mut job, unit);
            let (token, fate) = self.settle(unit, if keep { End::Keep } else { End::Undo });
            held = Some(token);
            told.push((job, fate));
        }
        if let Some(token) = held {
            self.finish(token);
        }
        for (job, fate) in told {
            let outcome = match fate {
                Told::Now(r) => r,
                Told::After(outcome) => outcome.wait(),
            };
            done(job, outcome);
        }
    }

    fn is_full(&self, batch: &Batch) -> bool {
        batch.units >= MAX_UNITS || batch.opened.elapsed() >= self.max_age
    }

    /// Ends `unit` and keeps the token for the caller's next unit: what [`Lane::commit`] or
    /// [`Lane::rollback`] does to the unit, without handing the batch over or closing it.
    fn settle(&self, unit: Unit, how: End) -> (Token, Told) {
        let Unit { mut token, outcome, saw_uncommitted } = unit;
        let mut how = how;
        let mut own_error = None;
        if !token.conn.is_autocommit() {
            let conn = &token.conn;
            match how {
                End::Keep if saw_uncommitted => {
                    if let Err(e) = run(conn, "RELEASE unit") {
                        // Undo it, and answer this unit's error.
                        let _ = run(conn, "ROLLBACK TO unit").and_then(|()| run(conn, "RELEASE unit"));
                        own_error = Some(map_err(e));
                        how = End::Undo;
                    }
                }
                End::Keep => {}
                End::Undo if saw_uncommitted => {
                    if let Err(e) = run(conn, "ROLLBACK TO unit").and_then(|()| run(conn, "RELEASE unit")) {
                        tracing::warn!(error = %e, "rolling back to a unit's savepoint failed");
                    }
                }
                End::Undo => {
                    // The batch holds nothing but this unit's writes: roll it back; the next
                    // unit opens a fresh one.
                    if let Err(e) = run(conn, "ROLLBACK") {
                        tracing::warn!(error = %e, "rollback failed");
                    }
                    token.batch = None;
                    outcome.publish(Ok(()));
                    return (token, Told::Now(Ok(())));
                }
            }
        }
        if token.conn.is_autocommit() {
            // SQLite rolled the whole transaction back: every unit of the batch lost its writes.
            token.batch = None;
            let e = StoreError::Backend("the transaction was rolled back by the database".into());
            outcome.publish(Err(e.clone()));
            let fate = if how == End::Keep || saw_uncommitted { Err(e) } else { own_error.map_or(Ok(()), Err) };
            return (token, Told::Now(fate));
        }
        if how == End::Keep {
            token.batch.as_mut().expect("a unit runs inside a batch").kept += 1;
        }
        let fate = match own_error {
            Some(e) => Told::Now(Err(e)),
            None if how == End::Keep || saw_uncommitted => Told::After(outcome),
            None => Told::Now(Ok(())),
        };
        (token, fate)
    }

    /// After a group: hands the open batch to a waiting writer, or closes it.
    fn finish(&self, token: Token) {
        let mut st = lock(&self.state);
        if st.waiting > 0 && token.batch.as_ref().is_some_and(|b| !self.is_full(b)) {
            st.token = Some(token);
            drop(st);
            self.free.notify_one();
            return;
        }
        drop(st);
        self.close(token);
    }

    /// Commits the token's batch (rolls it back if it kept nothing), tells its units, and gives
    /// the token back.
    fn close(&self, mut token: Token) {
        if let Some(batch) = token.batch.take() {
            let result = self.commit_batch(&token.conn, &batch);
            batch.outcome.publish(result);
        }
        self.give_back(token);
    }

    fn commit_batch(&self, conn: &rusqlite::Connection, batch: &Batch) -> Result<(), StoreError> {
        if batch.kept > 0 {
            self.commits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.units_committed.fetch_add(batch.kept as u64, std::sync::atomic::Ordering::Relaxed);
            run(conn, "COMMIT").map_err(|e| {
                // A failed COMMIT leaves the transaction open: roll back before anyone else writes.
                let _ = run(conn, "ROLLBACK");
                tracing::error!(error = %e, units = batch.kept, "a grouped commit failed");
                map_err(e)
            })
        } else {
            // Nothing kept: no fsync needed.
            run(conn, "ROLLBACK").map_err(map_err)
        }
    }

    fn unit_of(&self, mut token: Token) -> Unit {
        let batch = token.batch.as_mut().expect("a unit runs inside a batch");
        batch.units += 1;
        let outcome = Arc::clone(&batch.outcome);
        let saw_uncommitted = batch.kept > 0;
        Unit { token, outcome, saw_uncommitted }
    }

    /// Ends the unit keeping its writes; `Ok` only once the batch's `COMMIT` succeeded.
    pub(super) fn commit(&self, unit: Unit) -> Result<(), StoreError> {
        if unit.saw_uncommitted
            && let Err(e) = run(unit.conn(), "RELEASE unit")
        {
            let e = map_err(e);
            // The savepoint could not be released: undo it, and answer this unit's error.
            let _ = self.rollback(unit);
            return Err(e);
        }
        self.end(unit, End::Keep)
    }

    /// Ends the unit undoing its writes. `Err` when the unit had seen writes of earlier units that
    /// then failed to commit.
    pub(super) fn rollback(&self, unit: Unit) -> Result<(), StoreError> {
        let conn = unit.conn();
        if conn.is_autocommit() {
            // SQLite already rolled everything back; `end` tells the batch.
            return self.end_after_undo(unit);
        }
        if unit.saw_uncommitted {
            // `ROLLBACK TO` keeps the savepoint open; `RELEASE` then pops it.
            if let Err(e) = run(conn, "ROLLBACK TO unit").and_then(|()| run(conn, "RELEASE unit")) {
                tracing::warn!(error = %e, "rolling back to a unit's savepoint failed");
            }
            return self.end_after_undo(unit);
        }
        // The batch holds nothing but this unit's writes: roll the transaction back, and let
        // the next writer open a fresh one.
        let Unit { mut token, outcome, .. } = unit;
        let result = run(&token.conn, "ROLLBACK").map_err(map_err);
        if let Err(e) = &result {
            tracing::warn!(error = %e, "rollback failed");
        }
        token.batch = None;
        self.give_back(token);
        // Units that undid before this one in the same batch wait for nothing; publish anyway.
        outcome.publish(Ok(()));
        Ok(())
    }

    fn end_after_undo(&self, unit: Unit) -> Result<(), StoreError> {
        let saw = unit.saw_uncommitted;
        let outcome = Arc::clone(&unit.outcome);
        self.end(unit, End::Undo)?;
        if saw { outcome.wait() } else { Ok(()) }
    }

    /// Hands the open batch to the next waiting writer, or closes it.
    fn end(&self, unit: Unit, how: End) -> Result<(), StoreError> {
        let Unit { mut token, outcome, saw_uncommitted } = unit;
        if token.conn.is_autocommit() {
            // SQLite rolled the whole transaction back (an I/O error, a full disk): every unit of
            // the batch, this one included, lost its writes.
            token.batch = None;
            let e = StoreError::Backend("the transaction was rolled back by the database".into());
            outcome.publish(Err(e.clone()));
            self.give_back(token);
            // A unit that was undoing anyway answers its own error, unless it saw lost writes.
            return if how == End::Keep || saw_uncommitted { Err(e) } else { Ok(()) };
        }
        let batch = token.batch.as_mut().expect("a unit runs inside a batch");
        if how == End::Keep {
            batch.kept += 1;
        }
        let mut st = lock(&self.state);
        let full = self.is_full(batch);
        if st.waiting > 0 && !full {
            st.token = Some(token);
            drop(st);
            self.free.notify_one();
            return if how == End::Keep { outcome.wait() } else { Ok(()) };
        }
        drop(st);
        let batch = token.batch.take().expect("a unit runs inside a batch");
        let result = self.commit_batch(&token.conn, &batch);
        self.give_back(token);
        outcome.publish(result.clone());
        match how {
            End::Keep => result,
            End::Undo => Ok(()),
        }
    }

    fn give_back(&self, token: Token) {
        lock(&self.state).token = Some(token);
        self.free.notify_one();
    }

    /// `COMMIT`s run so far, and the units they committed.
    #[cfg(test)]
    pub(super) fn commits(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.commits.load(Relaxed), self.units_committed.load(Relaxed))
    }

    /// Writers waiting for their turn (for tests).
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        lock(&self.state).waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn lane() -> (tempfile::TempDir, Arc<Lane>) {
        let dir = tempfile::tempdir().unwrap();
        let conn = rusqlite::Connection::open(dir.path().join("l.db")).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;
             CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (id INTEGER PRIMARY KEY,
                                 p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        // Batches close when nobody waits (or at MAX_UNITS), not by age: under a loaded machine's
        // scheduling, a 10 ms age closed them before the writers a test queues could join.
        (dir, Lane::with_max_age(conn, Duration::from_secs(5), Duration::from_secs(60)))
    }

    fn write(lane: &Lane, sql: &str) -> Result<(), StoreError> {
        let unit = lane.begin()?;
        match unit.conn().execute_batch(sql) {
            Ok(()) => lane.commit(unit),
            Err(e) => {
                lane.rollback(unit)?;
                Err(map_err(e))
            }
        }
    }

    fn count(lane: &Lane, table: &str) -> i64 {
        let unit = lane.begin().unwrap();
        let n = unit.conn().query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0)).unwrap();
        lane.rollback(unit).unwrap();
        n
    }

    /// Holds the lane with a first unit until `n` writers wait behind it, then commits it.
    fn group(lane: &Arc<Lane>, first_sql: &str, sqls: &[&'static str]) -> Vec<Result<(), StoreError>> {
        let first = lane.begin().unwrap();
        first.conn().execute_batch(first_sql).unwrap();
        let threads: Vec<_> = sqls
            .iter()
            .map(|sql| {
                let lane = Arc::clone(lane);
                let sql = *sql;
                std::thread::spawn(move || write(&lane, sql))
            })
            .collect();
        while lane.waiting() < sqls.len() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut out = vec![lane.commit(first)];
        out.extend(threads.into_iter().map(|t| t.join().unwrap()));
        out
    }

    #[test]
    fn waiting_writers_share_one_commit_and_a_failing_one_fails_alone() {
        let (_dir, lane) = lane();
        let before = lane.commits();
        let out = group(
            &lane,
            "INSERT INTO parent VALUES (1)",
            &[
                "INSERT INTO parent VALUES (2)",
                "INSERT INTO parent VALUES (1)", // a duplicate: this unit fails
                "INSERT INTO parent VALUES (3)",
                "INSERT INTO child VALUES (1, 1)",
            ],
        );
        assert!(out[0].is_ok() && out[1].is_ok() && out[3].is_ok() && out[4].is_ok(), "{out:?}");
        assert_eq!(out[2], Err(StoreError::Duplicate));
        assert_eq!((count(&lane, "parent"), count(&lane, "child")), (3, 1));
        let after = lane.commits();
        assert_eq!(after.1 - before.1, 4, "four units committed");
        assert!(after.0 - before.0 < 4, "in fewer COMMITs than units: {before:?} -> {after:?}");
    }

    #[test]
    fn a_failed_commit_reaches_every_caller_of_the_batch_and_nothing_stays() {
        let (_dir, lane) = lane();
        // The child's deferred foreign key is checked only by COMMIT, which then fails.
        let out = group(
            &lane,
            "INSERT INTO parent VALUES (1)",
            &["INSERT INTO parent VALUES (2)", "INSERT INTO child VALUES (1, 99)", "INSERT INTO parent VALUES (3)"],
        );
        assert_eq!(out.len(), 4);
        assert!(out.iter().all(Result::is_err), "every caller hears the failed COMMIT: {out:?}");
        assert_eq!((count(&lane, "parent"), count(&lane, "child")), (0, 0));
        // The lane goes on.
        write(&lane, "INSERT INTO parent VALUES (5)").unwrap();
        assert_eq!(count(&lane, "parent"), 1);
    }

    #[test]
    fn a_unit_that_undid_after_reading_uncommitted_writes_hears_of_the_failed_commit() {
        let (_dir, lane) = lane();
        let first = lane.begin().unwrap();
        first.conn().execute_batch("INSERT INTO child VALUES (1, 99)").unwrap();
        let reader = {
            let lane = Arc::clone(&lane);
            std::thread::spawn(move || {
                let unit = lane.begin().unwrap();
                let seen: i64 = unit.conn().query_row("SELECT COUNT(*) FROM child", [], |r| r.get(0)).unwrap();
                // A rule that refuses because of what it saw.
                (seen, lane.rollback(unit))
            })
        };
        while lane.waiting() < 1 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(lane.commit(first).is_err());
        let (seen, undone) = reader.join().unwrap();
        assert_eq!(seen, 1, "it read the first unit's uncommitted row");
        assert!(undone.is_err(), "and is told that row never became durable");
    }

    #[test]
    fn no_write_is_lost_under_concurrency() {
        let (_dir, lane) = lane();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let lane = Arc::clone(&lane);
                std::thread::spawn(move || {
                    for i in 0..100 {
                        write(&lane, &format!("INSERT INTO parent VALUES ({})", t * 1000 + i)).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count(&lane, "parent"), 800);
        let (commits, units) = lane.commits();
        assert_eq!(units, 800);
        assert!(commits <= 800);
    }

    /// Runs `sqls` as one group on this thread; per unit, whether its SQL ran and its outcome.
    fn run_group(lane: &Lane, sqls: &[&str]) -> Vec<(bool, Result<(), StoreError>)> {
        let mut out: Vec<Option<(bool, Result<(), StoreError>)>> = vec![None; sqls.len()];
        lane.run_group(
            (0..sqls.len()).map(|i| (i, false)).collect(),
            |(i, ran), unit| {
                *ran = unit.conn().execute_batch(sqls[*i]).is_ok();
                let keep = *ran;
                (unit, keep)
            },
            |(i, ran), outcome| out[i] = Some((ran, outcome)),
        );
        out.into_iter().map(|o| o.expect("every unit is told")).collect()
    }

    #[test]
    fn a_group_run_by_one_thread_shares_one_commit_and_a_failing_unit_fails_alone() {
        let (_dir, lane) = lane();
        let out = run_group(
            &lane,
            &[
                "INSERT INTO parent VALUES (1)",
                "INSERT INTO parent VALUES (2)",
                "INSERT INTO parent VALUES (1)", // a duplicate: undone alone
                "INSERT INTO child VALUES (1, 1)",
            ],
        );
        assert_eq!(out, vec![(true, Ok(())), (true, Ok(())), (false, Ok(())), (true, Ok(()))]);
        assert_eq!(lane.commits(), (1, 3), "three units kept, one COMMIT");
        assert_eq!((count(&lane, "parent"), count(&lane, "child")), (2, 1));
    }

    #[test]
    fn a_failed_commit_reaches_every_unit_of_a_group_that_kept_or_saw_writes() {
        let (_dir, lane) = lane();
        let out = run_group(
            &lane,
            &[
                "INSERT INTO parent VALUES (1)",
                "INSERT INTO child VALUES (1, 99)", // checked by COMMIT only: it fails
                "INSERT INTO parent VALUES (1)",    // undone after seeing the batch's writes
            ],
        );
        assert!(out[0].1.is_err() && out[1].1.is_err(), "{out:?}");
        assert!(!out[2].0, "{out:?}");
        assert!(out[2].1.is_err(), "its refusal rests on writes that never became durable: {out:?}");
        assert_eq!((count(&lane, "parent"), count(&lane, "child")), (0, 0));
        // The lane goes on, and a unit alone that undoes hears nothing of others.
        assert_eq!(run_group(&lane, &["INSERT INTO nowhere VALUES (1)"]), vec![(false, Ok(()))]);
        write(&lane, "INSERT INTO parent VALUES (5)").unwrap();
        assert_eq!(count(&lane, "parent"), 1);
    }

    #[test]
    fn a_group_longer_than_a_batch_commits_in_as_many_batches_as_it_needs() {
        let (_dir, lane) = lane();
        let sqls: Vec<String> = (0..MAX_UNITS + 6).map(|i| format!("INSERT INTO parent VALUES ({i})")).collect();
        let sqls: Vec<&str> = sqls.iter().map(String::as_str).collect();
        let out = run_group(&lane, &sqls);
        assert!(out.iter().all(|o| *o == (true, Ok(()))), "{out:?}");
        assert_eq!(lane.commits(), (2, (MAX_UNITS + 6) as u64));
        assert_eq!(count(&lane, "parent"), (MAX_UNITS + 6) as i64);
    }

    #[test]
    fn a_group_hands_its_open_batch_to_a_writer_waiting_and_hears_that_batch_s_commit() {
        let (_dir, lane) = lane();
        let other = {
            let first = lane.begin().unwrap();
            first.conn().execute_batch("INSERT INTO parent VALUES (1)").unwrap();
            // A writer of another thread queues behind this unit...
            let waiting = {
                let lane = Arc::clone(&lane);
                std::thread::spawn(move || write(&lane, "INSERT INTO child VALUES (1, 1)"))
            };
            while lane.waiting() < 1 {
                std::thread::sleep(Duration::from_millis(5));
            }
            // ...and this one's units were the group, already holding the lane: end them so.
            let (token, fate) = lane.settle(first, End::Keep);
            lane.finish(token);
            let Told::After(outcome) = fate else { panic!("a kept unit hears its batch's commit") };
            (waiting, outcome)
        };
        let (waiting, outcome) = other;
        assert_eq!(waiting.join().unwrap(), Ok(()));
        assert_eq!(outcome.wait(), Ok(()));
        assert_eq!(lane.commits(), (1, 2), "the waiting writer's unit joined the group's batch");
        assert_eq!((count(&lane, "parent"), count(&lane, "child")), (1, 1));
    }

    #[test]
    fn a_writer_that_cannot_get_its_turn_in_time_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let lane = Lane::new(rusqlite::Connection::open(dir.path().join("b.db")).unwrap(), Duration::from_millis(100));
        let held = lane.begin().unwrap();
        assert!(matches!(lane.begin(), Err(StoreError::Busy)));
        lane.commit(held).unwrap();
        assert!(lane.begin().is_ok());
    }
}
