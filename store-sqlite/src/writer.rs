//! The writer thread: writes handed over whole ([`courrier_core::storage::Store::submit`]) run here, on
//! the write lane, back to back, and are answered from here once their group's `COMMIT` is
//! decided. A request that only waits for its answer then costs one hand-over each way (its task
//! to this thread, this thread to its task) instead of a blocking-pool thread's plus the lane's.

use super::lane::{Lane, MAX_UNITS};
use super::{SqliteTx, TxConn};
use courrier_core::storage::{StoreError, WriteJob};
use std::sync::Arc;
use std::sync::mpsc;

/// A write of any context, on the adapter's one transaction type.
trait LaneJob: Send {
    fn run(&mut self, tx: &mut SqliteTx) -> bool;
    fn done(self: Box<Self>, outcome: Result<(), StoreError>);
}

/// A context's job with the view of [`SqliteTx`] as that context's transaction.
struct ForContext<X: ?Sized + 'static> {
    job: Box<dyn WriteJob<X>>,
    view: fn(&mut SqliteTx) -> &mut X,
}

impl<X: ?Sized + 'static> LaneJob for ForContext<X> {
    fn run(&mut self, tx: &mut SqliteTx) -> bool {
        self.job.run((self.view)(tx))
    }

    fn done(self: Box<Self>, outcome: Result<(), StoreError>) {
        self.job.done(outcome);
    }
}

pub(super) struct Writer {
    jobs: Option<mpsc::Sender<Box<dyn LaneJob>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    pub(super) fn start(lane: Arc<Lane>) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel();
        let thread = std::thread::Builder::new().name("courrier-writer".into()).spawn(move || serve(&lane, &queue))?;
        Ok(Self { jobs: Some(jobs), thread: Some(thread) })
    }

    pub(super) fn submit<X: ?Sized + 'static>(
        &self,
        job: Box<dyn WriteJob<X>>,
        view: fn(&mut SqliteTx) -> &mut X,
    ) -> Result<(), Box<dyn WriteJob<X>>> {
        let Some(jobs) = &self.jobs else { return Err(job) };
        if let Err(mpsc::SendError(job)) = jobs.send(Box::new(ForContext { job, view })) {
            // The thread is gone (it only ends with the store): answer rather than hang.
            job.done(Err(StoreError::Backend("the writer thread has stopped".into())));
        }
        Ok(())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Its queue closed, the thread ends once the jobs it holds are answered.
        self.jobs = None;
        if let Some(thread) = self.thread.take()
            && thread.thread().id() != std::thread::current().id()
        {
            let _ = thread.join();
        }
    }
}

/// Takes what is queued (up to a batch's worth), runs it as one group on the lane, answers it.
fn serve(lane: &Arc<Lane>, queue: &mpsc::Receiver<Box<dyn LaneJob>>) {
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        while group.len() < MAX_UNITS
            && let Ok(job) = queue.try_recv()
        {
            group.push(job);
        }
        lane.run_group(
            group,
            |job, unit| {
                let mut tx = SqliteTx::on_writer_thread(unit, Arc::clone(lane));
                let keep = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(&mut tx))).unwrap_or_else(
                    |payload| {
                        tracing::error!(panic = %panic_text(&*payload), "a write panicked on the writer thread");
                        false
                    },
                );
                // A nested unit undone without its savepoint: the lane undoes the unit instead.
                let keep = keep && !tx.must_undo_unit();
                let Some(TxConn::Write(unit, _)) = tx.conn.take() else {
                    unreachable!("a job sees the transaction by reference and cannot end it")
                };
                (unit, keep)
            },
            |job, outcome| {
                if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.done(outcome))) {
                    tracing::error!(panic = %panic_text(&*payload), "answering a write panicked");
                }
            },
        );
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic")
}
