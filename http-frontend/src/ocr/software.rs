//! `/api/softwareInfos`: records of client software; reading is open to every key, writing
//! needs a site admin's `manage` key.

use super::input::{self, Input};
use super::reply::{OcrError, ok};
use super::{JSON_LIMITS, gate};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::error::ApiError;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use courrier_core::ocr::software::{self, Software, SoftwareFields, SoftwareId};
use http::Method;
use serde_json::{Value, json};

fn record(s: &Software) -> Value {
    let f = &s.fields;
    json!({
        "id": s.id.as_str(),
        "name": f.name,
        "latest_version": f.latest_version,
        "min_version": f.min_version,
        "download_url": f.download_url,
        "notes": f.notes,
        "created_at": s.created_at.to_rfc3339(),
        "updated_at": s.updated_at.to_rfc3339(),
    })
}

/// The record's fields are strings (the schema's `type`); a boolean or an object is refused, not
/// stored as its JSON text.
const STRING_FIELDS: &[&str] = &["id", "name", "latest_version", "min_version", "download_url", "notes"];

fn fields(input: &Input) -> Result<SoftwareFields, ApiError> {
    input.require_strings(STRING_FIELDS)?;
    let get = |k: &str| input.get(k).unwrap_or("");
    Ok(SoftwareFields::new(get("name"), get("latest_version"), get("min_version"), get("download_url"), get("notes"))?)
}

pub async fn list(State(state): State<AppState>, Auth(_p): Auth) -> Result<Response, OcrError> {
    if let Some(page) = gate(&state, &Method::GET).await? {
        return Ok(page);
    }
    let app = state.ocr.clone();
    let all = run_blocking(move || software::list(&app).map_err(ApiError::from)).await?;
    Ok(ok(&json!({ "data": all.iter().map(record).collect::<Vec<_>>() })))
}

pub async fn get(State(state): State<AppState>, Auth(_p): Auth, Path(id): Path<String>) -> Result<Response, OcrError> {
    if let Some(page) = gate(&state, &Method::GET).await? {
        return Ok(page);
    }
    let app = state.ocr.clone();
    let one = run_blocking(move || software::get(&app, &id).map_err(ApiError::from)).await?;
    Ok(ok(&record(&one)))
}

pub async fn create(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    req: Request,
) -> Result<Response, OcrError> {
    gate(&state, &Method::POST).await?;
    let input = input::read(req, &state, JSON_LIMITS).await?;
    let fields = fields(&input)?;
    // Without an id, core makes one from the name (returned in the answer).
    let id = input.get("id").map(SoftwareId::parse).transpose().map_err(ApiError::from)?;
    let app = state.ocr.clone();
    let made = run_blocking(move || software::create(&app, &p, &ctx, id, fields).map_err(ApiError::from)).await?;
    Ok(ok(&record(&made)))
}

pub async fn replace(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
    req: Request,
) -> Result<Response, OcrError> {
    gate(&state, &Method::PUT).await?;
    let input = input::read(req, &state, JSON_LIMITS).await?;
    let fields = fields(&input)?;
    let app = state.ocr.clone();
    let done = run_blocking(move || software::replace(&app, &p, &ctx, &id, fields).map_err(ApiError::from)).await?;
    Ok(ok(&record(&done)))
}

pub async fn delete(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Response, OcrError> {
    gate(&state, &Method::DELETE).await?;
    let app = state.ocr.clone();
    run_blocking(move || software::delete(&app, &p, &ctx, &id).map_err(ApiError::from)).await?;
    Ok(ok(&json!({ "success": "deleted", "message": "" })))
}
