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

/// `YYYY-MM` with a month from 01 to 12 (the schema's pattern says the same).
fn is_month(m: &str) -> bool {
    let b = m.as_bytes();
    b.len() == 7
        && b[4] == b'-'
        && b.iter().enumerate().all(|(i, c)| i == 4 || c.is_ascii_digit())
        && matches!(&m[5..], "01" | "02" | "03" | "04" | "05" | "06" | "07" | "08" | "09" | "10" | "11" | "12")
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
    input.require_strings(&["month"])?;
    // The month as sent (a blank or padded one is not YYYY-MM, as the schema's pattern says).
    let month = match input.get("month") {
        None => None,
        Some(m) if is_month(m) => Some(m.to_owned()),
        Some(m) => {
            return Err(
                ApiError::new(Code::ValidationFailed, format!("month {m:?} is not YYYY-MM (month 01 to 12)")).into()
            );
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn months_are_01_to_12() {
        for good in ["2026-01", "2026-12", "0001-09"] {
            assert!(super::is_month(good), "{good}");
        }
        for bad in ["2026-13", "2026-00", "2026-1", "2026/01", "20x6-01", "2026-01-01", "２026-01"] {
            assert!(!super::is_month(bad), "{bad}");
        }
    }
}
