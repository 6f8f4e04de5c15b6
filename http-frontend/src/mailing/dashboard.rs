//! `/api/v1/dashboard` and `/api/v1/system/queue`.

use crate::AppState;
use crate::auth::Auth;
use crate::blocking::run_blocking;
use crate::envelope::Reply;
use crate::error::ApiError;
use axum::extract::State;
use courrier_core::mailing::dashboard;

pub(super) async fn get_dashboard(State(state): State<AppState>, Auth(p): Auth) -> Result<Reply, ApiError> {
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(dashboard::dashboard(&app, &p)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::dashboard(&d)))
}

pub(super) async fn get_queue(State(state): State<AppState>, Auth(p): Auth) -> Result<Reply, ApiError> {
    let app = state.mailing.clone();
    let q = run_blocking(move || Ok(dashboard::queue(&app, &p)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::queue(&q)))
}
