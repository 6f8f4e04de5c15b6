//! `ping`, `profile`, `login`, `logout`, `register` and `ruok`.

use super::input;
use super::reply::{OcrError, ok};
use super::{JSON_LIMITS, gate};
use crate::AppState;
use crate::auth::{Auth, Ctx, authenticate, credential_of};
use crate::blocking::run_blocking;
use crate::error::ApiError;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use courrier_core::access::model::{Profile, User};
use courrier_core::access::{AccessError, Credential, Principal, users};
use courrier_core::kernel::{Code, EmailAddress, parse_positive_id};
use courrier_core::ocr::accounts;
use courrier_core::ocr::engine::Language;
use courrier_core::ocr::status::{self, Component};
use http::{Method, header};
use serde_json::{Value, json};

/// The contract's profile object of the key's user.
fn profile(user: &User) -> Value {
    json!({
        "id": user.id.get(),
        "firstname": user.profile.firstname.clone().unwrap_or_default(),
        "name": user.profile.name.clone().unwrap_or_default(),
        "email": user.email.to_string(),
        "email_verified_at": user.email_verified_at.map(|t| t.to_rfc3339()),
        "language_code_id": user.profile.language_code_id,
        "mobile": user.profile.mobile.clone().unwrap_or_default(),
        "created_at": user.created_at.to_rfc3339(),
        "updated_at": user.updated_at.to_rfc3339(),
        "deleted_at": Value::Null,
    })
}

fn user_of(p: &Principal) -> Result<&User, OcrError> {
    p.user.as_ref().ok_or_else(|| ApiError::new(Code::Forbidden, "the operator has no profile").into())
}

fn ping_answer(p: &Principal) -> Result<Response, OcrError> {
    Ok(ok(&json!({ "profile": profile(user_of(p)?), "message": "the server is ready", "status": 1 })))
}

/// `POST /api/ping`. Like `/api/profile`, `/api/login` and `/api/logout` it answers during
/// maintenance: ScanInvoices' setup page calls them, and takes a refusal for a bad key.
pub async fn ping(Auth(p): Auth) -> Result<Response, OcrError> {
    ping_answer(&p)
}

/// `GET /api/ping`: without a credential, a client's availability probe sent before it has a
/// key (200 `{"status":"ok","protocol":"1"}`); with one, checked and answered as `POST` does.
pub async fn ping_probe(State(state): State<AppState>, req: Request) -> Result<Response, OcrError> {
    if credential_of(req.headers()) == Credential::None {
        return Ok(ok(&json!({ "status": "ok", "protocol": "1" })));
    }
    let p = authenticate(&state, &req).await?;
    ping_answer(&p)
}

pub async fn get_profile(Auth(p): Auth) -> Result<Response, OcrError> {
    Ok(ok(&profile(user_of(&p)?)))
}

fn client_name(req: &Request) -> String {
    req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
}

pub async fn login(State(state): State<AppState>, Ctx(ctx): Ctx, req: Request) -> Result<Response, OcrError> {
    let client = client_name(&req);
    let input = input::read(req, &state, JSON_LIMITS).await?;
    let email = input.require("email")?.to_owned();
    let password = input.get("password").unwrap_or("").to_owned();
    let client = input.text("client").map(str::to_owned).unwrap_or(client);
    let app = state.ocr.clone();
    let key =
        run_blocking(move || accounts::login(&app, &ctx, &email, &password, &client).map_err(ApiError::from)).await?;
    Ok(ok(&json!({ "access_token": key.secret, "token_type": "Bearer" })))
}

pub async fn logout(State(state): State<AppState>, Auth(p): Auth, Ctx(ctx): Ctx) -> Result<Response, OcrError> {
    let app = state.ocr.clone();
    run_blocking(move || accounts::logout(&app, &p, &ctx).map_err(ApiError::from)).await?;
    Ok(ok(&json!({ "success": "logged out", "message": "the key is revoked" })))
}

pub async fn register(State(state): State<AppState>, Ctx(ctx): Ctx, req: Request) -> Result<Response, OcrError> {
    if !state.ocr_registration {
        return Err(ApiError::new(Code::NotFound, "no such route").into());
    }
    gate(&state, &Method::POST).await?;
    let client = client_name(&req);
    let input = input::read(req, &state, JSON_LIMITS).await?;
    let email = EmailAddress::parse(input.require("email")?).map_err(ApiError::from)?;
    let password = input.require("password")?.to_owned();
    if input.get("password_confirmation").is_some_and(|c| c != password) {
        return Err(ApiError::new(Code::ValidationFailed, "password_confirmation does not match password").into());
    }
    let profile = Profile {
        firstname: input.text("firstname").map(str::to_owned),
        name: input.text("name").map(str::to_owned),
        ..Profile::default()
    };
    let app = state.ocr.clone();
    let key = run_blocking(move || {
        {
            let address = email.to_string();
            // Self-registration is the installation's decision (COURRIER_OCR_REGISTRATION): the account
            // is created with the operator's authority, then logged in like any other.
            let new = users::NewUser { email, profile, password: Some(password.clone()) };
            users::create(&app.access, &Principal::operator(), &ctx, new)?;
            accounts::login(&app, &ctx, &address, &password, &client)
        }
        .map_err(|e: AccessError| ApiError::from(e))
    })
    .await?;
    Ok(ok(&json!({ "access_token": key.secret, "token_type": "Bearer" })))
}

fn ruok_html(results: &[(Component, bool)]) -> String {
    let rows: String = results
        .iter()
        .map(|(c, up)| format!("<li>{}: {}</li>", c.name(), if *up { "ok" } else { "unavailable" }))
        .collect();
    format!("<div class=\"ruok\"><ul>{rows}</ul></div>")
}

async fn check(state: &AppState, components: Vec<Component>) -> Result<Vec<(Component, bool)>, OcrError> {
    let app = state.ocr.clone();
    Ok(run_blocking(move || {
        Ok(components
            .into_iter()
            .map(|c| {
                let result = status::check(&app, c);
                if let Err(why) = &result {
                    tracing::warn!(component = c.name(), reason = %why, "ruok: component unavailable");
                }
                (c, result.is_ok())
            })
            .collect())
    })
    .await?)
}

fn ruok_body(results: &[(Component, bool)]) -> Result<Response, OcrError> {
    if results.iter().any(|(_, up)| !up) {
        return Err(ApiError::new(Code::OcrUnavailable, ruok_html(results)).into());
    }
    // Objects, as ScanInvoices' import page reads them (`->code`, `->lang`, `->name`).
    let langs: Vec<Value> = (1..)
        .zip(Language::ALL)
        .map(|(id, l)| json!({ "id": id, "code": l.iso(), "lang": l.tesseract_code(), "name": l.native_name() }))
        .collect();
    Ok(ok(&json!({
        "data": { "json": { "protocol": "1", "srvlangs": langs }, "html": ruok_html(results) },
        "status": "imok",
    })))
}

pub async fn ruok(State(state): State<AppState>, Auth(_p): Auth) -> Result<Response, OcrError> {
    if let Some(page) = gate(&state, &Method::GET).await? {
        return Ok(page);
    }
    let results = check(&state, Component::ALL.to_vec()).await?;
    ruok_body(&results)
}

pub async fn ruok_one(
    State(state): State<AppState>,
    Auth(_p): Auth,
    Path(id): Path<String>,
) -> Result<Response, OcrError> {
    if let Some(page) = gate(&state, &Method::GET).await? {
        return Ok(page);
    }
    let id =
        parse_positive_id(&id).map_err(|e| ApiError::new(Code::InvalidPathId, format!("path parameter id: {e}")))?;
    let component = Component::from_id(id).ok_or_else(|| {
        ApiError::new(Code::NotFound, "component not found (1 database, 2 OCR engine, 3 document store)")
    })?;
    let results = check(&state, vec![component]).await?;
    ruok_body(&results)
}
