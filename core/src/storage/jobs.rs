//! Periodic work that runs once for the installation, however many `courrier serve` and `courrier
//! worker` processes share it: each [`Job`] is held by one process at a time ([`JobLocks`], a port
//! every storage backend implements: a session advisory lock on PostgreSQL, a lock file per job on
//! one host), and [`JobSlot`] is the rule a scheduler follows: run a job's work only while holding
//! it, skip it (logged at debug) while another process does, and take it over once that process
//! has let it go or died.
//!
//! A job is held for as long as the process keeps running it, not per run: the holder's own runs
//! follow each other, so "once" never depends on two processes' clocks agreeing.

use super::StoreError;

/// The installation's periodic work. Each has a stable number, its lock key on PostgreSQL: never
/// renumber one, only add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Job {
    /// Building the digests that are due.
    Digests,
    /// Deleting expired Idempotency-Key records.
    IdempotencyPurge,
    /// Discarding held posts past their list's `held_days`.
    HeldPostExpiry,
    /// Bounce scores quiet for 7 days back to 0.
    BounceDecay,
    /// Polling the mail accounts of kind `ingest`.
    MailboxPolling,
    /// Deleting OCR documents past their retention.
    OcrRetention,
}

impl Job {
    pub const ALL: [Job; 6] = [
        Job::Digests,
        Job::IdempotencyPurge,
        Job::HeldPostExpiry,
        Job::BounceDecay,
        Job::MailboxPolling,
        Job::OcrRetention,
    ];

    /// Its name in logs, lock files and `courrier jobs`.
    pub fn name(self) -> &'static str {
        match self {
            Job::Digests => "digests",
            Job::IdempotencyPurge => "idempotency-purge",
            Job::HeldPostExpiry => "held-post-expiry",
            Job::BounceDecay => "bounce-decay",
            Job::MailboxPolling => "mailbox-polling",
            Job::OcrRetention => "ocr-retention",
        }
    }

    /// Its stable number (1, 2, ...).
    pub fn number(self) -> i32 {
        match self {
            Job::Digests => 1,
            Job::IdempotencyPurge => 2,
            Job::HeldPostExpiry => 3,
            Job::BounceDecay => 4,
            Job::MailboxPolling => 5,
            Job::OcrRetention => 6,
        }
    }

    pub fn from_number(n: i64) -> Option<Job> {
        Job::ALL.into_iter().find(|j| i64::from(j.number()) == n)
    }
}

/// The process holding a job: what an administrator needs to find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
}

impl Holder {
    /// `pid@host`, as lock files and PostgreSQL's `application_name` carry it.
    pub fn label(&self) -> String {
        format!("{}@{}", self.pid, self.host)
    }

    /// The reverse of [`Holder::label`]; `None` for anything else.
    pub fn parse_label(s: &str) -> Option<Holder> {
        let (pid, host) = s.trim().split_once('@')?;
        Some(Holder { host: host.to_owned(), pid: pid.parse().ok()? })
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "process {} on {}", self.pid, self.host)
    }
}

/// What keeps a job held in a backend (an open lock file, a database session).
pub trait HeldLock: Send {
    /// Whether the job is still ours: `false` once the backend let it go behind our back (the
    /// database session holding it was closed or killed).
    fn still_held(&mut self) -> bool;
}

/// A job this process holds: while it lives, no other process holds it. Dropped, the job is free;
/// if the process dies, the backend frees it by itself (the kernel closes the lock file, the
/// database ends the session).
pub struct JobLease {
    job: Job,
    held: Box<dyn HeldLock>,
}

impl JobLease {
    pub fn new(job: Job, held: Box<dyn HeldLock>) -> Self {
        Self { job, held }
    }

    pub fn job(&self) -> Job {
        self.job
    }

    pub fn still_held(&mut self) -> bool {
        self.held.still_held()
    }
}

impl std::fmt::Debug for JobLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobLease").field("job", &self.job).finish_non_exhaustive()
    }
}

/// The port: one lock per job for the whole installation, taken in the name of this process.
pub trait JobLocks: Send + Sync {
    /// Takes `job` for this process if no process holds it; `None` if one does (this process
    /// included, through another lease).
    fn try_hold(&self, job: Job) -> Result<Option<JobLease>, StoreError>;
    /// The jobs held now and who holds each, in [`Job::ALL`]'s order (free jobs are absent).
    fn holders(&self) -> Result<Vec<(Job, Holder)>, StoreError>;
}

/// A scheduler's place for one job: the lease, once taken, kept across runs.
pub struct JobSlot {
    job: Job,
    lease: Option<JobLease>,
    /// Logged once per change, not at every skipped run.
    skipping: bool,
}

impl JobSlot {
    pub fn new(job: Job) -> Self {
        Self { job, lease: None, skipping: false }
    }

    pub fn job(&self) -> Job {
        self.job
    }

    /// Whether this process holds the job now: the lease it keeps, if the backend still has it,
    /// else a new one if the job is free. A job held elsewhere is logged at debug.
    pub fn hold(&mut self, locks: &dyn JobLocks) -> bool {
        if let Some(lease) = &mut self.lease {
            if lease.still_held() {
                return true;
            }
            tracing::warn!(job = self.job.name(), "this process lost its hold on a periodic job");
            self.lease = None;
        }
        match locks.try_hold(self.job) {
            Ok(Some(lease)) => {
                tracing::info!(job = self.job.name(), "this process now runs a periodic job");
                self.lease = Some(lease);
                self.skipping = false;
                true
            }
            Ok(None) => {
                if !self.skipping {
                    tracing::debug!(job = self.job.name(), "periodic job held by another process: skipped");
                }
                self.skipping = true;
                false
            }
            Err(e) => {
                tracing::warn!(job = self.job.name(), error = %e, "cannot take a periodic job's lock: skipped");
                false
            }
        }
    }

    /// Runs `work` if this process holds the job (see [`JobSlot::hold`]); `None` when skipped.
    pub fn run<T>(&mut self, locks: &dyn JobLocks, work: impl FnOnce() -> T) -> Option<T> {
        self.hold(locks).then(work)
    }

    /// Lets the job go (another process may take it at once).
    pub fn release(&mut self) {
        self.lease = None;
    }

    pub fn holds(&self) -> bool {
        self.lease.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    /// Several processes' locks on one installation: who holds what, and a way to make the
    /// backend drop a holder (its session killed).
    #[derive(Default)]
    struct Table {
        held: Mutex<HashMap<Job, (u32, Arc<std::sync::atomic::AtomicBool>)>>,
    }

    struct Process {
        table: Arc<Table>,
        pid: u32,
    }

    struct Held {
        table: Arc<Table>,
        job: Job,
        alive: Arc<std::sync::atomic::AtomicBool>,
    }

    impl HeldLock for Held {
        fn still_held(&mut self) -> bool {
            self.alive.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl Drop for Held {
        fn drop(&mut self) {
            let mut held = self.table.held.lock().unwrap();
            if held.get(&self.job).is_some_and(|(_, a)| Arc::ptr_eq(a, &self.alive)) {
                held.remove(&self.job);
            }
        }
    }

    impl Table {
        /// The backend ends a process's hold (its database session died).
        fn kill(&self, pid: u32) {
            self.held.lock().unwrap().retain(|_, (p, alive)| {
                if *p == pid {
                    alive.store(false, std::sync::atomic::Ordering::SeqCst);
                }
                *p != pid
            });
        }
    }

    impl JobLocks for Process {
        fn try_hold(&self, job: Job) -> Result<Option<JobLease>, StoreError> {
            let mut held = self.table.held.lock().unwrap();
            if held.contains_key(&job) {
                return Ok(None);
            }
            let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
            held.insert(job, (self.pid, Arc::clone(&alive)));
            Ok(Some(JobLease::new(job, Box::new(Held { table: Arc::clone(&self.table), job, alive }))))
        }

        fn holders(&self) -> Result<Vec<(Job, Holder)>, StoreError> {
            let held = self.table.held.lock().unwrap();
            Ok(Job::ALL
                .into_iter()
                .filter_map(|j| held.get(&j).map(|(pid, _)| (j, Holder { host: "h".into(), pid: *pid })))
                .collect())
        }
    }

    fn two_processes() -> (Arc<Table>, Process, Process) {
        let table = Arc::new(Table::default());
        (Arc::clone(&table), Process { table: Arc::clone(&table), pid: 1 }, Process { table, pid: 2 })
    }

    #[test]
    fn a_job_held_by_another_process_is_skipped_and_taken_over_when_it_lets_go() {
        let (_, one, two) = two_processes();
        let (mut first, mut second) = (JobSlot::new(Job::Digests), JobSlot::new(Job::Digests));
        let mut runs = Vec::new();
        for _ in 0..3 {
            first.run(&one, || runs.push(1));
            second.run(&two, || runs.push(2));
        }
        assert_eq!(runs, [1, 1, 1], "only the first holder runs, at every tick");
        assert_eq!(two.holders().unwrap(), [(Job::Digests, Holder { host: "h".into(), pid: 1 })]);
        first.release();
        second.run(&two, || runs.push(2));
        first.run(&one, || runs.push(1));
        assert_eq!(runs, [1, 1, 1, 2], "the second takes over; the first now skips");
    }

    #[test]
    fn a_holder_whose_lock_the_backend_dropped_stops_running_and_another_takes_over() {
        let (table, one, two) = two_processes();
        let (mut first, mut second) = (JobSlot::new(Job::HeldPostExpiry), JobSlot::new(Job::HeldPostExpiry));
        assert!(first.hold(&one));
        assert!(!second.hold(&two));
        table.kill(1);
        assert_eq!(second.run(&two, || "second"), Some("second"));
        assert_eq!(first.run(&one, || "first"), None, "its lease was gone: it did not run on a stale one");
        assert!(!first.holds());
    }

    #[test]
    fn each_job_has_its_own_lock() {
        let (_, one, two) = two_processes();
        let mut digests = JobSlot::new(Job::Digests);
        let mut purge = JobSlot::new(Job::IdempotencyPurge);
        assert!(digests.hold(&one));
        assert!(purge.hold(&two), "another job is free while digests are held");
    }

    #[test]
    fn job_numbers_and_labels_round_trip() {
        for job in Job::ALL {
            assert_eq!(Job::from_number(job.number().into()), Some(job));
        }
        assert_eq!(Job::from_number(0), None);
        let h = Holder { host: "mx1.example.net".into(), pid: 42 };
        assert_eq!(Holder::parse_label(&h.label()), Some(h));
        assert_eq!(Holder::parse_label("garbage"), None);
    }
}
