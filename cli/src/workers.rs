//! Delivery worker threads: inside `courrier serve`, or alone in `courrier worker`. Each loops on
//! `delivery::run_once` (claim a batch under a lease, deliver, record), resting briefly when the
//! queue is empty. Several workers and several processes may run: the lease is the only lock.
//! Beside them, one webhook worker loops on `webhooks::run_once` (fan the outbox out, lease due
//! deliveries, POST them) the same way.

use courrier_core::mailing::Service;
use courrier_core::mailing::delivery::{self, DeliveryConfig};
use courrier_core::mailing::inbound;
use courrier_core::mailing::ingest::{self, IngestConfig, MailIntake};
use courrier_core::mailing::webhooks::{self, WebhookConfig};
use courrier_core::storage::jobs::{Job, JobLocks, JobSlot};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long an idle worker waits before looking at the queue again.
const IDLE: Duration = Duration::from_millis(250);

pub struct Workers {
    app: Arc<Service>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// `n` delivery threads and, when `n > 0`, one webhook thread and one thread processing mail in.
/// The delivery and processing threads run `niceness` below the process's priority (0: at it);
/// processing waits up to `defer` for this process's LMTP sessions to fall quiet ([`work_inbound`]).
pub fn start(
    app: Arc<Service>,
    cfg: DeliveryConfig,
    hooks: WebhookConfig,
    n: usize,
    niceness: i32,
    defer: Duration,
) -> Workers {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads: Vec<_> = (0..n)
        .map(|i| {
            let (app, stop) = (Arc::clone(&app), Arc::clone(&stop));
            std::thread::Builder::new()
                .name(format!("courrier-delivery-{i}"))
                .spawn(move || {
                    lower_this_threads_priority(niceness);
                    work(&app, &cfg, &stop)
                })
                .expect("cannot start a delivery worker thread")
        })
        .collect();
    if n > 0 {
        let (inbound_app, inbound_stop) = (Arc::clone(&app), Arc::clone(&stop));
        let inbound_thread = std::thread::Builder::new()
            .name("courrier-inbound".into())
            .spawn(move || {
                lower_this_threads_priority(niceness);
                work_inbound(&inbound_app, &inbound_stop, defer)
            })
            .expect("cannot start the inbound processing thread");
        threads.push(inbound_thread);
        let (app, stop) = (Arc::clone(&app), Arc::clone(&stop));
        let hooks_thread = std::thread::Builder::new()
            .name("courrier-webhooks".into())
            .spawn(move || work_webhooks(&app, &hooks, &stop))
            .expect("cannot start the webhook worker thread");
        threads.push(hooks_thread);
    }
    Workers { app, stop, threads }
}

/// Raises the calling thread's nice value by `niceness` (Linux: `setpriority(PRIO_PROCESS, tid)`
/// applies to the one thread), at most to 19. Best effort: without it the thread runs at the
/// process's priority.
fn lower_this_threads_priority(niceness: i32) {
    if niceness <= 0 {
        return;
    }
    let tid = Some(rustix::thread::gettid());
    let nice = rustix::process::getpriority_process(tid).unwrap_or(0).saturating_add(niceness).min(19);
    if let Err(e) = rustix::process::setpriority_process(tid, nice) {
        tracing::debug!(error = %e, "could not lower a worker thread's priority");
    }
}

fn work_webhooks(app: &Service, cfg: &WebhookConfig, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match webhooks::run_once(app, cfg) {
            Ok(round) if round.claimed > 0 => tracing::debug!(?round, "webhook round"),
            Ok(_) => std::thread::sleep(IDLE),
            Err(e) => {
                tracing::warn!(error = %e, "webhook round failed");
                std::thread::sleep(IDLE * 4);
            }
        }
    }
}

/// Mail received and stored (LMTP, mailboxes) is processed here: at start everything a stop or
/// a crash left unprocessed, then each message as the frontends ring, or within a second.
/// Once caught up, it gives way to the LMTP sessions before each round: while they are receiving
/// or storing messages (a burst of posts), it waits for them to fall quiet, at most `defer`;
/// then it processes until caught up again without waiting, so under a sustained stream a
/// message waits at most `defer` plus the processing of those stored before it.
fn work_inbound(app: &Service, stop: &AtomicBool, defer: Duration) {
    let mut cursor = None;
    while !stop.load(Ordering::Relaxed) {
        match inbound::process_after(app, &mut cursor) {
            Ok(n) if n > 0 => tracing::debug!(messages = n, "inbound round"),
            Ok(_) => {
                app.mail_in.wakeup.wait(Duration::from_secs(1));
                if app.mail_in.activity.wait_quiet(defer, || stop.load(Ordering::Relaxed)) {
                    tracing::debug!(waited = ?defer, "inbound: LMTP still busy, processing anyway");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "inbound processing failed");
                std::thread::sleep(IDLE * 4);
            }
        }
    }
}

fn work(app: &Service, cfg: &DeliveryConfig, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match delivery::run_once(app, cfg) {
            Ok(round) if round.claimed > 0 => {
                tracing::debug!(?round, "delivery round");
                continue;
            }
            Ok(_) => std::thread::sleep(IDLE),
            Err(e) => {
                tracing::warn!(error = %e, "delivery round failed");
                std::thread::sleep(IDLE * 4);
            }
        }
    }
}

impl Workers {
    /// Asks every worker to stop after its current round, and waits for them.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.app.mail_in.wakeup.ring();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// How often the ingest supervisor looks for new, changed or deleted ingest credentials.
const INGEST_SCAN: Duration = Duration::from_secs(5);

/// The ingest supervisor: one poller thread per `ingest` credential (started when one appears;
/// a poller ends by itself when its credential changes or goes, and the next scan starts the new
/// one), each handing messages to `intake`.
pub struct Ingest {
    stop: Arc<ingest::Stop>,
    thread: std::thread::JoinHandle<()>,
}

pub fn start_ingest(
    app: Arc<Service>,
    intake: Arc<dyn MailIntake>,
    cfg: IngestConfig,
    locks: Arc<dyn JobLocks>,
) -> Ingest {
    let stop = Arc::new(ingest::Stop::default());
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("courrier-ingest".into())
        .spawn(move || supervise(&app, &intake, &cfg, &flag, &*locks))
        .expect("cannot start the ingest supervisor thread");
    Ingest { stop, thread }
}

/// Polls only while this process holds the installation's mailbox-polling job: one process of the
/// installation polls the mailboxes, the others take over when it stops or dies.
fn supervise(
    app: &Arc<Service>,
    intake: &Arc<dyn MailIntake>,
    cfg: &IngestConfig,
    stop: &Arc<ingest::Stop>,
    locks: &dyn JobLocks,
) {
    let mut job = JobSlot::new(Job::MailboxPolling);
    // The pollers of this hold of the job, stopped together if it is lost.
    let mut polling = Arc::new(ingest::Stop::default());
    let mut pollers: HashMap<i64, (i64, std::thread::JoinHandle<()>)> = HashMap::new();
    while !stop.is_set() {
        pollers.retain(|_, (_, t)| !t.is_finished());
        if !job.hold(locks) {
            if !pollers.is_empty() {
                polling.stop();
                for (_, (_, t)) in pollers.drain() {
                    let _ = t.join();
                }
                polling = Arc::new(ingest::Stop::default());
            }
        } else {
            match ingest::credentials(app) {
                Ok(creds) => {
                    for cred in creds {
                        let key = cred.list_id.get();
                        if pollers.get(&key).is_some_and(|(at, _)| *at == cred.updated_at.unix_micros()) {
                            continue;
                        }
                        if pollers.contains_key(&key) {
                            continue; // the old poller is ending (its credential changed); next scan.
                        }
                        let (app, intake, stop, cfg) =
                            (Arc::clone(app), Arc::clone(intake), Arc::clone(&polling), *cfg);
                        let at = cred.updated_at.unix_micros();
                        let spawned =
                            std::thread::Builder::new().name(format!("courrier-ingest-{key}")).spawn(move || {
                                // A panic in a session (a library's) ends this poller only; the next
                                // scan starts another.
                                let run =
                                    std::panic::AssertUnwindSafe(|| ingest::poll(&app, &*intake, &cred, &cfg, &stop));
                                if std::panic::catch_unwind(run).is_err() {
                                    tracing::error!(list = key, "an ingest poller panicked");
                                }
                            });
                        match spawned {
                            Ok(t) => {
                                pollers.insert(key, (at, t));
                            }
                            Err(e) => tracing::warn!(error = %e, "cannot start an ingest poller"),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the ingest credentials"),
            }
        }
        let until = std::time::Instant::now() + INGEST_SCAN;
        while std::time::Instant::now() < until && !stop.is_set() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // An IDLE's connection is closed: its poller ends at once.
    polling.stop();
    for (_, (_, t)) in pollers {
        let _ = t.join();
    }
}

impl Ingest {
    /// Asks the supervisor and its pollers to stop (an IDLE's connection is closed: it ends at
    /// once), and waits for them.
    pub fn stop(self) {
        self.stop.stop();
        let _ = self.thread.join();
    }
}
