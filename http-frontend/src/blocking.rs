//! The one bridge from async handlers to synchronous core (vaultwarden's `run_blocking`).

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
