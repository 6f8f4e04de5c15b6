//! `GET /api/companyinfo/{id}`: a supplier of the directory, by its id or its VAT number.

use super::gate;
use super::reply::{OcrError, ok};
use crate::AppState;
use crate::auth::Auth;
use crate::blocking::run_blocking;
use crate::error::ApiError;
use axum::extract::{Path, State};
use axum::response::Response;
use courrier_core::ocr::suppliers;
use http::Method;
use serde_json::json;

pub async fn company_info(
    State(state): State<AppState>,
    Auth(_p): Auth,
    Path(id): Path<String>,
) -> Result<Response, OcrError> {
    if let Some(page) = gate(&state, &Method::GET).await? {
        return Ok(page);
    }
    let app = state.ocr.clone();
    let s = run_blocking(move || suppliers::company_info(&app, &id).map_err(ApiError::from)).await?;
    Ok(ok(&json!({
        "id": s.id.get(),
        "siret": s.siret,
        "siren": s.siren,
        "name": s.name,
        "adresse": s.adresse,
        "cp": s.cp,
        "ville": s.ville,
        "pays": s.pays,
        "codePays": s.code_pays,
        "numeroTvaIntra": s.vat_number.as_ref().map(|v| v.as_str()).unwrap_or(""),
        "source": s.source.as_str(),
        "error": "",
    })))
}
