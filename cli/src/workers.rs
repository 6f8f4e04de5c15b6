//! Delivery worker threads: inside `courrier serve`, or alone in `courrier worker`. Each loops on
//! `delivery::run_once` (claim a batch under a lease, deliver, record), resting briefly when the
//! queue is empty. Several workers and several processes may run: the lease is the only lock.

use courrier_core::Courrier;
use courrier_core::mailing::delivery::{self, DeliveryConfig};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long an idle worker waits before looking at the queue again.
const IDLE: Duration = Duration::from_millis(250);

pub struct Workers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

pub fn start(app: Arc<Courrier>, cfg: DeliveryConfig, n: usize) -> Workers {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..n)
        .map(|i| {
            let (app, stop) = (Arc::clone(&app), Arc::clone(&stop));
            std::thread::Builder::new()
                .name(format!("courrier-delivery-{i}"))
                .spawn(move || work(&app, &cfg, &stop))
                .expect("cannot start a delivery worker thread")
        })
        .collect();
    Workers { stop, threads }
}

fn work(app: &Courrier, cfg: &DeliveryConfig, stop: &AtomicBool) {
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
        for t in self.threads {
            let _ = t.join();
        }
    }
}
