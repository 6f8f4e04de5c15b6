//! The installation's periodic chores, started alike by `courrier serve` and `courrier worker`:
//! digests, the Idempotency-Key purge, held-post expiry, bounce-score decay and OCR retention. Each
//! runs under its job lock (`courrier_core::storage::jobs`): whichever processes share the
//! installation, one runs it, the others skip it and take it over once that one stops or dies.
//! Mailbox polling is the sixth job: the ingest supervisor holds it (`workers.rs`).
//!
//! This module only wires: the rules are core's, the lock rule is `JobSlot`'s.

use crate::server::Services;
use courrier_core::storage::jobs::{Job, JobLocks, JobSlot};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A job held by another process is looked at again this often (or at its own period, if
/// shorter): how long a stopped holder's job waits for a successor at most.
const TAKEOVER: Duration = Duration::from_secs(60);

struct Chore {
    slot: JobSlot,
    every: Duration,
    /// When this process last ran it; `None` when it never has since it took the job, so a new
    /// holder runs it at once (as a start does).
    last_run: Option<Instant>,
    next_look: Instant,
    work: Box<dyn FnMut() + Send>,
}

/// The chores' thread.
pub struct Chores {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

/// Starts the chores on a thread of their own.
pub fn start(services: &Services) -> Chores {
    let chores = chores(services);
    let locks = Arc::clone(&services.jobs);
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("courrier-chores".into())
        .spawn(move || run(&*locks, chores, &flag))
        .expect("cannot start the chores thread");
    Chores { stop, thread }
}

impl Chores {
    /// Lets the chore running finish, then lets every job go (another process may take them at
    /// once).
    pub fn stop(self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        wake.notify_all();
        let _ = self.thread.join();
    }
}

fn run(locks: &dyn JobLocks, mut chores: Vec<Chore>, stop: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = stop;
    loop {
        let now = Instant::now();
        for chore in chores.iter_mut().filter(|c| c.next_look <= now) {
            if chore.slot.hold(locks) {
                if chore.last_run.is_none_or(|at| now.duration_since(at) >= chore.every) {
                    // A panic ends this run only; the chore runs again at its next period.
                    let work = std::panic::AssertUnwindSafe(|| (chore.work)());
                    if std::panic::catch_unwind(work).is_err() {
                        tracing::error!(job = chore.slot.job().name(), "a periodic chore panicked");
                    }
                    chore.last_run = Some(now);
                }
            } else {
                chore.last_run = None;
            }
            chore.next_look = now + chore.every.min(TAKEOVER);
        }
        let Some(next) = chores.iter().map(|c| c.next_look).min() else { return };
        let guard = stopped.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *guard {
            return;
        }
        let wait = next.saturating_duration_since(Instant::now());
        let (guard, _) = wake.wait_timeout(guard, wait).unwrap_or_else(std::sync::PoisonError::into_inner);
        if *guard {
            return;
        }
    }
}

fn chore(job: Job, every: Duration, work: impl FnMut() + Send + 'static) -> Chore {
    Chore { slot: JobSlot::new(job), every, last_run: None, next_look: Instant::now(), work: Box::new(work) }
}

/// Due digests are built every minute; expired Idempotency-Key records are deleted hourly (they
/// answer nothing once expired; deleting keeps the registry the size of one day); held posts past
/// their list's `held_days` are discarded hourly; bounce scores quiet for 7 days go back to 0 every
/// minute (each bounce also applies it to its member); OCR documents past their retention
/// (`COURRIER_OCR_RETENTION_DAYS`) are deleted every tenth of the retention (between a second and an
/// hour), never when documents are kept for ever. Each at once when this process takes its job.
fn chores(services: &Services) -> Vec<Chore> {
    const MINUTE: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);
    let app = Arc::clone(&services.mailing);
    let mut chores =
        vec![chore(Job::Digests, MINUTE, move || match courrier_core::mailing::digests::run(&app, None, false) {
            Ok(built) => {
                for b in built {
                    tracing::info!(list = %b.list_address, posts = b.posts, recipients = b.recipients, "digest queued");
                }
            }
            Err(e) => tracing::warn!(error = %e, "digest run failed"),
        })];
    let app = Arc::clone(&services.mailing);
    chores.push(chore(Job::IdempotencyPurge, HOUR, move || {
        match courrier_core::mailing::idempotency::purge(&app, app.clock.now()) {
            Ok(0) => {}
            Ok(n) => tracing::info!(records = n, "expired idempotency records deleted"),
            Err(e) => tracing::warn!(error = %e, "idempotency purge failed"),
        }
    }));
    let app = Arc::clone(&services.mailing);
    chores.push(chore(Job::HeldPostExpiry, HOUR, move || {
        match courrier_core::mailing::moderation::expire_held(&app) {
            Ok(0) => {}
            Ok(n) => tracing::info!(posts = n, "held posts past their list's held_days discarded"),
            Err(e) => tracing::warn!(error = %e, "held post expiry failed"),
        }
    }));
    let app = Arc::clone(&services.mailing);
    chores.push(chore(Job::BounceDecay, MINUTE, move || match courrier_core::mailing::bounces::decay(&app) {
        Ok(0) => {}
        Ok(n) => tracing::info!(members = n, "bounce scores back to 0 after 7 quiet days"),
        Err(e) => tracing::warn!(error = %e, "bounce score decay failed"),
    }));
    if let Some(every) = services.ocr.limits.retention.sweep_every() {
        let app = Arc::clone(&services.ocr);
        chores.push(chore(Job::OcrRetention, every, move || match courrier_core::ocr::retention::sweep(&app) {
            Ok(0) => {}
            Ok(n) => tracing::info!(documents = n, "OCR documents past their retention deleted"),
            Err(e) => tracing::warn!(error = %e, "OCR retention sweep failed"),
        }));
    }
    chores
}

/// `courrier jobs`: which process of the installation runs each periodic job now.
pub fn jobs(config: &crate::config::Config, json: bool) -> Result<(), crate::error::CliError> {
    let services = crate::server::wire(config, crate::build_info())?;
    let held = services.jobs.holders()?;
    let holder = |job: Job| held.iter().find(|(j, _)| *j == job).map(|(_, h)| h);
    let items: Vec<_> = Job::ALL
        .into_iter()
        .map(|job| {
            let by = holder(job).map(|h| serde_json::json!({ "host": h.host, "pid": h.pid }));
            serde_json::json!({ "job": job.name(), "holder": by })
        })
        .collect();
    crate::output::emit(json, &serde_json::json!({ "items": items }), || {
        let rows = Job::ALL
            .into_iter()
            .map(|job| {
                let by = holder(job).map_or_else(|| "- (no process runs it now)".to_owned(), |h| h.to_string());
                vec![job.name().to_owned(), by]
            })
            .collect();
        crate::output::table(&["JOB", "HELD BY"], rows)
    });
    Ok(())
}
