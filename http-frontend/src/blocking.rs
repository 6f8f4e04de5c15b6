//! The bridges from async handlers to synchronous core: the blocking pool (vaultwarden's
//! `run_blocking`), and a thread of lower priority for bulk work (`run_bulk`).

use crate::error::ApiError;

/// Runs `f` on tokio's blocking pool. A panic inside `f` is logged and becomes a plain 500;
/// the server goes on serving.
pub async fn run_blocking<T, F>(f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    // Core's own log lines carry the request's id (made here, not for requests that never reach
    // core, to keep the cheapest routes cheap).
    let span = tracing::info_span!("request", request_id = %crate::envelope::current_request_id());
    match tokio::task::spawn_blocking(move || span.in_scope(f)).await {
        Ok(out) => out,
        Err(join) if join.is_panic() => {
            let payload = join.into_panic();
            Err(ApiError::internal(&format!("panic in core: {}", crate::server::panic_message(&*payload))))
        }
        Err(join) => Err(ApiError::internal(&format!("blocking task cancelled: {join}"))),
    }
}

/// Starts a write through its context's service (`start`, e.g. `members::add_submitted`), in the
/// request's span, and waits for its answer: the service hands it to the store's writer thread,
/// which answers from there once its commit is decided, or gives it back (`Some(run)`), and then
/// it runs on the blocking pool.
pub async fn run_write<T, F, R>(start: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(Box<dyn FnOnce(T) + Send>) -> Option<R>,
    R: FnOnce() + Send + 'static,
{
    let span = tracing::info_span!("request", request_id = %crate::envelope::current_request_id());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let given_back = span.in_scope(|| start(Box::new(move |out| drop(tx.send(out)))));
    if let Some(run) = given_back {
        run_blocking(move || {
            run();
            Ok(())
        })
        .await?;
    }
    // Dropped unanswered only by a panic (logged where it happened).
    rx.await.map_err(|_| ApiError::internal(&"a write ended without an answer"))
}

/// How much lower than the request handlers' the priority of bulk work is by default (a nice
/// value; 19 is the lowest priority). At 10 it gets about a tenth of a core that a request handler
/// also wants; on a machine shared with other busy programs, far less (`COURRIER_IMPORT_NICENESS`).
pub const DEFAULT_BULK_NICENESS: i32 = 10;

/// Runs `f`, a long piece of bulk work (an import), on a thread of its own at a lower CPU
/// priority than the request handlers, so that on a busy machine readers and small writes are
/// scheduled first and the bulk work takes what they leave. The thread is new and ends with `f`
/// (a pool thread could not be given its priority back without privileges). A panic inside `f`
/// becomes a plain 500, as in [`run_blocking`].
pub async fn run_bulk<T, F>(niceness: i32, f: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    let span = tracing::info_span!("request", request_id = %crate::envelope::current_request_id());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new().name("courrier-bulk".into()).spawn(move || {
        if niceness > 0 {
            lower_this_threads_priority(niceness);
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| span.in_scope(f)));
        let _ = tx.send(out);
    });
    if let Err(e) = spawned {
        return Err(ApiError::internal(&format!("no thread for bulk work: {e}")));
    }
    match rx.await {
        Ok(Ok(out)) => out,
        Ok(Err(payload)) => {
            Err(ApiError::internal(&format!("panic in core: {}", crate::server::panic_message(&*payload))))
        }
        Err(_) => Err(ApiError::internal(&"the bulk work's thread ended without an answer")),
    }
}

/// Raises the calling thread's nice value (Linux: `setpriority(PRIO_PROCESS, tid)` applies to
/// the one thread). Best effort: without it the work runs at the handlers' priority.
fn lower_this_threads_priority(niceness: i32) {
    let tid = Some(rustix::thread::gettid());
    // Relative to the thread's own (inherited from the process), at most the lowest priority.
    let nice = rustix::process::getpriority_process(tid).unwrap_or(0).saturating_add(niceness).min(19);
    if let Err(e) = rustix::process::setpriority_process(tid, nice) {
        tracing::debug!(error = %e, "could not lower a bulk thread's priority");
    }
}

/// The calling thread's nice value (tests).
#[cfg(test)]
fn this_threads_niceness() -> i32 {
    rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("getpriority")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bulk_work_runs_at_a_lower_priority_than_the_pool_and_leaves_the_pool_alone() {
        let pool = run_blocking(|| Ok(this_threads_niceness())).await.unwrap();
        let bulk = run_bulk(DEFAULT_BULK_NICENESS, || Ok(this_threads_niceness())).await.unwrap();
        assert_eq!(bulk, (pool + DEFAULT_BULK_NICENESS).min(19), "pool {pool}, bulk {bulk}");
        let after = run_blocking(|| Ok(this_threads_niceness())).await.unwrap();
        assert_eq!(after, pool, "the pool's threads keep their priority");
        let same = run_bulk(0, || Ok(this_threads_niceness())).await.unwrap();
        assert_eq!(same, pool, "0: the handlers' priority");
    }

    #[tokio::test]
    async fn a_panic_in_bulk_work_is_a_500_not_a_crash() {
        let out: Result<(), ApiError> = run_bulk(0, || panic!("boom")).await;
        assert!(out.is_err());
    }
}
