//! `POST /api/ocrs` (upload) and `GET /api/ocrs` (a stored document, or its page as JPEG).

use super::gate;
use super::input::{self, Input, Limits};
use super::reply::{OcrError, ok};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use courrier_core::kernel::Code;
use courrier_core::ocr::documents::{self, Action, Document, Profile, Submitted, Upload};
use courrier_core::ocr::engine::Language;
use http::{HeaderValue, Method, header};
use serde_json::{Value, json};

/// Multipart framing and the other fields around the file.
const FORM_OVERHEAD: usize = 1024 * 1024;

pub fn upload_limits(state: &AppState) -> Limits {
    let file = state.ocr.limits.max_document_bytes;
    Limits { body: file + FORM_OVERHEAD, file }
}

fn language(input: &Input) -> Result<Language, ApiError> {
    let raw = input.require("lang")?;
    Language::parse(raw).ok_or_else(|| {
        ApiError::new(
            Code::ValidationFailed,
            format!("lang {raw:?} is not one of fr, de, it, en (or fra, deu, ita, eng)"),
        )
    })
}

pub async fn post_ocrs(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    req: Request,
) -> Result<Response, OcrError> {
    gate(&state, &Method::POST).await?;
    let limits = upload_limits(&state);
    // Refused before reading a byte when the client declares it: 413, as documented.
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limits.body) {
        return Err(ApiError::new(
            Code::DocumentTooLarge,
            format!("the document is larger than the limit of {} bytes", limits.file),
        )
        .into());
    }
    let input = input::read(req, &state, limits).await?;
    let lang = language(&input)?;
    let profile = Profile::parse(input.get("profile").unwrap_or(""));
    let action_raw = input.get("action").unwrap_or("");
    let action = Action::parse(action_raw).ok_or_else(|| {
        ApiError::new(
            Code::ValidationFailed,
            format!("action {action_raw:?} is not one of default, storeOnly, ocrFailed"),
        )
    })?;
    let file = input
        .file
        .clone()
        .ok_or_else(|| ApiError::new(Code::ValidationFailed, "the file part pdf is required (multipart/form-data)"))?;
    let app = state.ocr.clone();
    let yaml_filter = input.get("yamlFilter").map(str::to_owned);
    let upload = Upload { bytes: file.to_vec(), lang, profile, action, yaml_filter };
    let submitted = run_blocking(move || documents::submit(&app, &p, &ctx, upload).map_err(ApiError::from)).await?;
    let mut resp = ok(&processing(&submitted));
    // Where the time went (decode, render, deskew, engine, extract, store): the benchmark reads it.
    if let Ok(timing) = HeaderValue::from_str(&submitted.timings.server_timing()) {
        resp.headers_mut().insert(header::HeaderName::from_static("server-timing"), timing);
    }
    Ok(resp)
}

/// The processing response object of an upload (decisions.md): strings, and `meta` the invoice's
/// fields (an object; a `yamlFilter`'s laid over the extracted ones) or `""`.
fn processing(s: &Submitted) -> Value {
    let d = &s.document;
    let success = match (s.page.is_some(), d.state) {
        (true, _) => "document stored and converted to JPEG",
        (false, documents::DocumentState::Failed) => "document kept for analysis",
        (false, _) => "document processed",
    };
    let mut body = json!({
        "ocrID": d.ocr_id.as_str(),
        "success": success,
        "message": match &s.template_note {
            Some(note) => format!("{} page(s), {}; {note}", d.pages, d.kind.as_str()),
            None => format!("{} page(s), {}", d.pages, d.kind.as_str()),
        },
        "errors": "",
        "result": d.text,
        "meta": d.meta,
    });
    if let Some(page) = &s.page {
        body["jpeg"] = format!("{}.jpg", d.ocr_id.as_str()).into();
        body["jpegBase64"] = B64.encode(&page.jpeg).into();
        body["ocrResults"] = json!({
            "ratio": "1",
            "width": page.width,
            "height": page.height,
            "page": page.page,
            "pages": page.pages,
        })
        .to_string()
        .into();
    }
    if let Some(pdf) = &s.pdf {
        body["pdfBase64"] = B64.encode(pdf).into();
    }
    body
}

fn stored(d: &Document) -> Value {
    json!({
        "ocrID": d.ocr_id.as_str(),
        "success": "document found",
        "message": format!("{} page(s), {}, {}", d.pages, d.kind.as_str(), d.state.as_str()),
        "errors": "",
        "result": d.text,
        "meta": d.meta,
    })
}

pub async fn get_ocrs(State(state): State<AppState>, Auth(p): Auth, req: Request) -> Result<Response, OcrError> {
    if let Some(page) = gate(&state, &Method::GET).await? {
        return Ok(page);
    }
    let input = input::read(req, &state, super::JSON_LIMITS).await?;
    let ocr_id = input.require("ocrID")?.to_owned();
    let page = match input.text("page") {
        None => 1,
        Some(raw) => raw.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
            ApiError::new(Code::ValidationFailed, format!("page {raw:?} is not a page number from 1"))
        })?,
    };
    let download = match input.text("action") {
        None => false,
        Some(a) if a.eq_ignore_ascii_case("default") => false,
        Some(a) if a.eq_ignore_ascii_case("jpegDownload") => true,
        Some(other) => {
            return Err(ApiError::new(Code::ValidationFailed, format!("action {other:?} is not jpegDownload")).into());
        }
    };
    let app = state.ocr.clone();
    if download {
        let jpeg =
            run_blocking(move || documents::download_jpeg(&app, &p, &ocr_id, page).map_err(ApiError::from)).await?;
        let mut resp = jpeg.jpeg.into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("image/jpeg"));
        return Ok(resp);
    }
    let document = run_blocking(move || documents::find(&app, &p, &ocr_id).map_err(ApiError::from)).await?;
    Ok(ok(&stored(&document)))
}
