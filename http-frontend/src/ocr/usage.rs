//! `GET /api/subscriptions` (the caller's plan) and `GET|POST /api/subscriptions/stats/{email}`
//! (usage by month).

use super::input;
use super::reply::{OcrError, ok};
use super::{JSON_LIMITS, gate};
use crate::AppState;
use crate::auth::Auth;
use crate::blocking::run_blocking;
use crate::error::ApiError;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use courrier_core::kernel::Code;
use courrier_core::ocr::usage::{self, MonthUsage};
use http::Method;
use serde_json::{Value, json};

fn month_json(m: &MonthUsage) -> Value {
    json!({ "month": m.month, "documents": m.documents, "pages": m.pages, "cuts": m.cuts })
}

pub async fn subscription(State(state): State<AppState>, Auth(p): Auth) -> Result<Response, OcrError> {
    if let Some(page) = gate(&state, &Method::GET).await? {
        return Ok(page);
    }
    let app = state.ocr.clone();
    let s = run_blocking(move || usage::subscription(&app, &p).map_err(ApiError::from)).await?;
    Ok(ok(&json!({
        "plan": s.plan.name(),
        "pages_per_month": s.plan.pages_per_month,
        "period_start": s.period.start,
        "period_end": s.period.end,
        "usage": month_json(&s.used),
    })))
}

/// GET, or POST with an optional `month` (`YYYY-MM`) to see one month only.
pub async fn stats(
    State(state): State<AppState>,
    Auth(p): Auth,
    Path(email): Path<String>,
    req: Request,
) -> Result<Response, OcrError> {
    let method = req.method().clone();
    if let Some(page) = gate(&state, &method).await? {
        return Ok(page);
    }
    let input = input::read(req, &state, JSON_LIMITS).await?;
    let month = match input.text("month") {
        None => None,
        Some(m)
            if m.len() == 7
                && m.as_bytes()[4] == b'-'
                && m.bytes().enumerate().all(|(i, b)| i == 4 || b.is_ascii_digit()) =>
        {
            Some(m.to_owned())
        }
        Some(m) => return Err(ApiError::new(Code::ValidationFailed, format!("month {m:?} is not YYYY-MM")).into()),
    };
    let app = state.ocr.clone();
    let s = run_blocking(move || usage::stats(&app, &p, &email).map_err(ApiError::from)).await?;
    let months: Vec<Value> =
        s.months.iter().filter(|m| month.as_deref().is_none_or(|want| m.month == want)).map(month_json).collect();
    Ok(ok(&json!({
        "email": s.user.email.to_string(),
        "plan": s.plan.name(),
        "pages_per_month": s.plan.pages_per_month,
        "months": months,
    })))
}
