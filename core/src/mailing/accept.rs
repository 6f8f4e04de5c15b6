//! Accepting mail: the durable stores of the messages a receiving frontend (LMTP) takes, grouped
//! into shared commits by one store thread per frontend.
//!
//! A sender that waits for its 250 can only be answered once its message is committed with
//! `synchronous=FULL`, so N sessions put at most N messages in one fsync. To get there:
//!
//! - every store is a [`Job`] handed to the [`Acceptor`]'s one thread (no hop through a blocking
//!   pool, no hand-over of the write lane between the sessions' threads); the thread stores every
//!   job it finds queued in one write transaction, each job in its own nested unit (a job that
//!   fails takes back only its own rows), and answers each job after the one `COMMIT`;
//! - a commit delay, like PostgreSQL's `commit_delay`/`commit_siblings`: while other sessions are
//!   in the middle of a message ([`Acceptor::receiving`]: from their `MAIL` to the end of their
//!   data), or were just answered and not back yet (a sender with more to send starts its next
//!   message at once: without them, 4 sessions settle into commits of 2, half answered while the
//!   other half is stored), the thread waits for their jobs, at most [`COMMIT_DELAY`], so that
//!   their stores join the same commit instead of each paying its own. With nobody else receiving
//!   it commits at once.
//! - the recipients' lists are looked up again inside the store's transaction (one indexed read
//!   each, on pages the writer has cached): a frontend may answer `RCPT` from what it looked up
//!   earlier in the connection ([`Resolved`] kept per connection), and a list deleted or renamed
//!   since is found here ([`InboundError::UnknownAddress`] for that recipient), its size limit as
//!   it is now ([`InboundError::TooLarge`]).
//! - with a spool ([`super::inbound::MailIn::spool`], the SQLite installation's `spool.db`), the
//!   jobs' messages are committed there, not in the main database: the lists are looked up in a
//!   read transaction of the main database (a reader never waits for its writer), and the one
//!   commit is the spool's, whose writer is this thread alone (processing only deletes what it
//!   moved, without an fsync). An accept then never queues behind processing's and delivery's
//!   commits. Processing moves the spooled messages into the inbound store
//!   ([`super::inbound::move_spooled`]).
//! - the thread publishes how many messages are between a session's `MAIL` and its answer
//!   ([`super::inbound::Activity`]): processing, once caught up, waits for that to fall to zero
//!   (bounded) before it processes what was stored, so a burst of posts is accepted with the
//!   cores and the disk to itself.

use super::Service;
use super::inbound::{InboundError, InboundId, Resolved, parse_recipient};
use super::model::ListId;
use super::ports::{NewInbound, Spool};
use crate::storage::{StoreError, in_nested, in_read, in_write};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The longest a store waits for the stores of sessions still receiving their message. A
/// message of 10 KiB arrives over a local connection in well under this; a slower sender only
/// costs the others this much once per commit.
pub const COMMIT_DELAY: Duration = Duration::from_millis(1);
/// Jobs stored in one transaction at most.
const MAX_JOBS: usize = 64;

/// What one receiving connection remembers of the recipients it resolved, so that a repeated
/// `RCPT` needs no read: at most `capacity` addresses (then it forgets them all), each for `ttl`.
/// Safe because the store looks every list up again; what `ttl` bounds is how long a limit
/// *raised* meanwhile can still refuse a message whose size was not declared. A remembered list
/// that would refuse the declared size is not used: its limit may have been raised since.
#[derive(Debug)]
pub struct RecipientMemory {
    known: HashMap<String, (Resolved, Instant)>,
    capacity: usize,
    ttl: Duration,
}

impl RecipientMemory {
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self { known: HashMap::new(), capacity, ttl }
    }

    /// What `address` resolved to, when remembered, fresh and not refusing `declared_size`.
    pub fn recall(&self, address: &str, declared_size: Option<usize>) -> Option<Resolved> {
        let (r, at) = self.known.get(&address.to_ascii_lowercase())?;
        let usable = at.elapsed() < self.ttl && declared_size.is_none_or(|s| super::inbound::check_size(r, s).is_ok());
        usable.then(|| Resolved { address: address.to_owned(), ..r.clone() })
    }

    /// Learns what resolving `address` found; a refusal forgets it.
    pub fn learn(&mut self, address: &str, found: &Result<Resolved, InboundError>) {
        let key = address.to_ascii_lowercase();
        match found {
            Ok(r) => {
                if self.known.len() >= self.capacity {
                    self.known.clear();
                }
                self.known.insert(key, (r.clone(), Instant::now()));
            }
            Err(_) => {
                self.known.remove(&key);
            }
        }
    }

    /// Takes in a store's outcome for `address`: a list gone, renamed or with its limit lowered
    /// since the `RCPT` makes what was remembered of it stale.
    pub fn stored(&mut self, address: &str, outcome: &Result<Taken, InboundError>) {
        if matches!(outcome, Err(InboundError::UnknownAddress(_) | InboundError::TooLarge { .. })) {
            self.known.remove(&address.to_ascii_lowercase());
        }
    }
}

/// Where an accepted message was committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// In the inbound store of the main database, under this id.
    Inbound(InboundId),
    /// In the spool, under this key (moved into the inbound store by processing).
    Spool(String),
}

/// Each recipient's outcome, in the job's order: where the message was committed, or why not.
pub type Stored = Vec<Result<Taken, InboundError>>;
type Done = Box<dyn FnOnce(Stored) + Send>;

/// One message to store for its recipients; `done` is called once with the outcome, after the
/// commit (or its failure).
pub struct Job {
    pub envelope_from: Option<String>,
    pub recipients: Vec<Resolved>,
    pub raw: Vec<u8>,
    pub done: Done,
}

struct State {
    queue: Vec<Job>,
    /// Sessions between their `MAIL` and the end of their data (their job not queued yet).
    receiving: usize,
    /// Sessions of the last batch answered, not back with another message yet, and when they were
    /// answered: expected for at most the commit delay after that.
    returning: usize,
    answered_at: Instant,
    /// Jobs taken from the queue and not answered yet.
    storing: usize,
    stop: bool,
}

impl State {
    /// Messages between a session's `MAIL` and its answer: what processing gives way to.
    fn busy(&self) -> usize {
        self.receiving + self.queue.len() + self.storing
    }
}

struct Shared {
    state: Mutex<State>,
    bell: Condvar,
    delay: Duration,
    /// Where the state's [`State::busy`] is published for processing.
    activity: Arc<super::inbound::Activity>,
    /// Transactions run and jobs stored by them (for tests).
    commits: std::sync::atomic::AtomicU64,
    jobs: std::sync::atomic::AtomicU64,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // Plain assignments under the lock: a panic leaves it consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The store thread of one frontend and its queue. Dropping it stops the thread once the jobs
/// already queued are stored.
pub struct Acceptor {
    shared: Arc<Shared>,
}

impl Acceptor {
    /// Starts the store thread; `delay` is the commit delay ([`COMMIT_DELAY`]).
    pub fn start(app: Arc<Service>, delay: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: Vec::new(),
                receiving: 0,
                returning: 0,
                answered_at: Instant::now(),
                storing: 0,
                stop: false,
            }),
            bell: Condvar::new(),
            delay,
            activity: Arc::clone(&app.mail_in.activity),
            commits: std::sync::atomic::AtomicU64::new(0),
            jobs: std::sync::atomic::AtomicU64::new(0),
        });
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new().name("courrier-accept".into()).spawn(move || run(&app, &thread_shared))?;
        Ok(Self { shared })
    }

    /// Marks a session as receiving a message until the guard is dropped or handed to
    /// [`Self::submit`]; `returning`: its previous message was the last one stored on this
    /// connection (it is back).
    pub fn receiving(&self, returning: bool) -> Receiving {
        let mut st = lock(&self.shared.state);
        st.receiving += 1;
        if returning {
            st.returning = st.returning.saturating_sub(1);
        }
        self.shared.activity.set_busy(st.busy());
        drop(st);
        Receiving { shared: Some(Arc::clone(&self.shared)) }
    }

    /// Queues a job; its session's [`Receiving`] guard (if any) ends with it, in the same step,
    /// so the store thread never sees the session neither receiving nor queued.
    pub fn submit(&self, receiving: Option<Receiving>, job: Job) {
        let mut st = lock(&self.shared.state);
        if st.stop {
            drop(st);
            let n = job.recipients.len();
            (job.done)(vec![Err(InboundError::Store(StoreError::Busy)); n]);
            return;
        }
        st.queue.push(job);
        if let Some(mut r) = receiving
            && r.shared.take().is_some()
        {
            st.receiving -= 1;
        }
        self.shared.activity.set_busy(st.busy());
        drop(st);
        self.shared.bell.notify_all();
    }

    /// Transactions run and jobs they stored so far.
    pub fn commits(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.shared.commits.load(Relaxed), self.shared.jobs.load(Relaxed))
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.bell.notify_all();
    }
}

/// A session receiving a message (see [`Acceptor::receiving`]).
pub struct Receiving {
    shared: Option<Arc<Shared>>,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let mut st = lock(&shared.state);
            st.receiving = st.receiving.saturating_sub(1);
            shared.activity.set_busy(st.busy());
            drop(st);
            shared.bell.notify_all();
        }
    }
}

fn run(app: &Service, shared: &Shared) {
    loop {
        let jobs = {
            let mut st = lock(&shared.state);
            while st.queue.is_empty() && !st.stop {
                st = shared.bell.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            if st.queue.is_empty() {
                return;
            }
            // The commit delay: wait for the sessions still receiving or on their way back, bounded.
            let deadline = Instant::now() + shared.delay;
            while (st.receiving > 0 || (st.returning > 0 && st.answered_at.elapsed() < shared.delay))
                && st.queue.len() < MAX_JOBS
                && !st.stop
            {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                st = shared.bell.wait_timeout(st, left).unwrap_or_else(PoisonError::into_inner).0;
            }
            let n = st.queue.len().min(MAX_JOBS);
            st.storing = n;
            st.queue.drain(..n).collect::<Vec<_>>()
        };
        let outcomes = store_jobs(app, &jobs);
        {
            use std::sync::atomic::Ordering::Relaxed;
            shared.commits.fetch_add(1, Relaxed);
            shared.jobs.fetch_add(jobs.len() as u64, Relaxed);
            let mut st = lock(&shared.state);
            st.returning = jobs.len();
            st.answered_at = Instant::now();
            st.storing = 0;
            shared.activity.set_busy(st.busy());
        }
        for (job, outcome) in jobs.into_iter().zip(outcomes) {
            (job.done)(outcome);
        }
    }
}

/// Stores the jobs in one transaction (the spool's when there is one), each in its own nested
/// unit; each job's outcome.
fn store_jobs(app: &Service, jobs: &[Job]) -> Vec<Stored> {
    if let Some(spool) = &app.mail_in.spool {
        return spool_jobs(app, &**spool, jobs);
    }
    let now = app.clock.now();
    let stored = in_write(&*app.store, |tx| {
        Ok::<_, StoreError>(
            jobs.iter()
                .map(|job| in_nested(tx, |tx| store_one(tx, job, now)))
                .collect::<Vec<Result<Stored, StoreError>>>(),
        )
    });
    let all_failed = |job: &Job, e: &StoreError| vec![Err(InboundError::Store(e.clone())); job.recipients.len()];
    match stored {
        Ok(outcomes) => {
            outcomes.into_iter().zip(jobs).map(|(o, job)| o.unwrap_or_else(|e| all_failed(job, &e))).collect()
        }
        Err(e) => jobs.iter().map(|job| all_failed(job, &e)).collect(),
    }
}

/// The jobs' messages committed in the spool, in one commit: the lists checked first in one read
/// transaction of the main database ([`check_one`]). A refusal stays the recipient's; a failed
/// read or commit answers every other recipient with the store's error (the MTA retries).
fn spool_jobs(app: &Service, spool: &dyn Spool, jobs: &[Job]) -> Vec<Stored> {
    let now = app.clock.now();
    let all_failed = |e: &StoreError| -> Vec<Stored> {
        jobs.iter().map(|job| vec![Err(InboundError::Store(e.clone())); job.recipients.len()]).collect()
    };
    let checked = match in_read(&*app.store, |tx| {
        jobs.iter().map(|job| check_one(tx, job)).collect::<Result<Vec<_>, StoreError>>()
    }) {
        Ok(checked) => checked,
        Err(e) => return all_failed(&e),
    };
    let mut rows = Vec::new();
    for (job, checked) in jobs.iter().zip(&checked) {
        for (r, c) in job.recipients.iter().zip(checked) {
            if let Ok(list_id) = c {
                rows.push(NewInbound {
                    list_id: *list_id,
                    role: &r.role,
                    recipient: &r.address,
                    envelope_from: job.envelope_from.as_deref(),
                    raw: &job.raw,
                });
            }
        }
    }
    let keys = if rows.is_empty() { Ok(Vec::new()) } else { spool.put(&rows, now) };
    let mut keys = match keys {
        Ok(keys) => keys.into_iter(),
        Err(e) => return all_failed(&e),
    };
    checked
        .into_iter()
        .map(|checked| {
            checked
                .into_iter()
                .map(|c| match c {
                    Ok(_) => keys.next().map(Taken::Spool).ok_or(InboundError::Store(StoreError::Busy)),
                    Err(e) => Err(e),
                })
                .collect()
        })
        .collect()
}

/// One job's rows: for each recipient whose list is still there under the same name, and whose
/// size limit the message fits, one stored message.
fn store_one(tx: &mut dyn super::ports::Tx, job: &Job, now: crate::kernel::Timestamp) -> Result<Stored, StoreError> {
    let checked = check_one(tx, job)?;
    let mut out = Vec::with_capacity(checked.len());
    for (r, c) in job.recipients.iter().zip(checked) {
        out.push(match c {
            Ok(list_id) => Ok(Taken::Inbound(tx.insert_inbound(
                &NewInbound {
                    list_id,
                    role: &r.role,
                    recipient: &r.address,
                    envelope_from: job.envelope_from.as_deref(),
                    raw: &job.raw,
                },
                now,
            )?)),
            Err(e) => Err(e),
        });
    }
    Ok(out)
}

/// Each recipient's list as it is now: its id when it is still there under the same name and the
/// message fits its size limit, or why not.
fn check_one(tx: &mut dyn super::ports::Tx, job: &Job) -> Result<Vec<Result<ListId, InboundError>>, StoreError> {
    let mut out = Vec::with_capacity(job.recipients.len());
    for r in &job.recipients {
        let unknown = || InboundError::UnknownAddress(r.address.chars().take(256).collect());
        let Some(parsed) = parse_recipient(&r.address) else {
            out.push(Err(unknown()));
            continue;
        };
        let list = match tx.list_by_name(&parsed.domain, &parsed.list)? {
            Some(list) if list.id == r.list.id => list,
            _ => {
                out.push(Err(unknown()));
                continue;
            }
        };
        if job.raw.len() > list.policies.max_message_kb as usize * 1024 {
            out.push(Err(InboundError::TooLarge { limit_kb: list.policies.max_message_kb }));
            continue;
        }
        out.push(Ok(list.id));
    }
    Ok(out)
}
