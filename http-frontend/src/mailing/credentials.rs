//! `/api/v1/domains/{domain}/lists/{list}/credentials`: the list's mail accounts (list, store,
//! delete, test). Parse, call core, render. The password is read from the body and goes no
//! further than core: no answer carries it.

use super::{LIST, invalid, names};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::body::Json;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::routes::{Access, Param, ParamKind, Perm, Route, Success, route};
use crate::schema;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use courrier_core::kernel::Code;
use courrier_core::mailing::accounts::Security;
use courrier_core::mailing::credentials::{self, CredentialKind, CredentialRequest};
use courrier_core::mailing::views;
use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

const KIND: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
    Param {
        name: "kind",
        kind: ParamKind::Text,
        description: "ingest (IMAP mailbox) or submission (SMTP account); anything else is 404",
    },
];

pub static ROUTES: &[Route] = &[
    route!(GET "/api/v1/domains/{domain}/lists/{list}/credentials", "listCredentials",
        "The list's mail accounts, never their passwords", "credentials", Access::Perm(Perm::Read),
        params: LIST, query: &[], request: None, success: Success::Data(200, schema::CREDENTIALS), errors: &[],
        list_credentials),
    route!(PUT "/api/v1/domains/{domain}/lists/{list}/credentials/{kind}", "putCredential",
        "Store the list's account of this kind; without password an existing one keeps its own, an empty one is 422; a host that does not resolve to public addresses is 422 url_refused; no keyring configured: 503 credential_keyring_missing",
        "credentials", Access::Perm(Perm::Manage), params: KIND, query: &[], request: Some(schema::CREDENTIAL_PUT),
        success: Success::Data(200, schema::CREDENTIAL), errors: &[503], put_credential),
    route!(DELETE "/api/v1/domains/{domain}/lists/{list}/credentials/{kind}", "deleteCredential",
        "Delete the list's account of this kind; no keyring configured: 503 credential_keyring_missing",
        "credentials", Access::Perm(Perm::Manage), params: KIND, query: &[], request: None, success: Success::NoContent,
        errors: &[503], delete_credential),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/credentials/{kind}/test", "testCredential",
        "Open a real session with the account (TLS, authentication, and for IMAP the folder; nothing sent or fetched); the outcome is recorded; a refusal is 422 account_refused with the provider's words, no session 422 account_unreachable",
        "credentials", Access::Perm(Perm::Manage), params: KIND, query: &[], request: None,
        success: Success::Data(200, schema::CREDENTIAL_TEST), errors: &[503], test_credential),
];

fn kind_of(raw: &str) -> Result<CredentialKind, ApiError> {
    CredentialKind::parse(raw)
        .ok_or_else(|| ApiError::new(Code::NotFound, "no such kind of credential (ingest or submission)"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialBody {
    host: String,
    port: i64,
    security: String,
    username: String,
    password: Option<String>,
    folder: Option<String>,
}

async fn list_credentials(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(credentials::list(&app, &p, &ctx, &d, &l)?)).await?;
    Ok(Reply::ok(json!(found.iter().map(views::credential).collect::<Vec<_>>())))
}

async fn put_credential(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, kind)): Path<(String, String, String)>,
    Json(body): Json<CredentialBody>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let kind = kind_of(&kind)?;
    let port = u16::try_from(body.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| invalid("port must be a number from 1 to 65535"))?;
    let security = Security::parse(&body.security)
        .ok_or_else(|| invalid(format!("security {:?} is not one of tls, starttls", body.security)))?;
    let req = CredentialRequest {
        host: body.host,
        port,
        security,
        username: body.username,
        password: body.password,
        folder: body.folder,
    };
    let app = state.mailing.clone();
    let stored = run_blocking(move || Ok(credentials::put(&app, &p, &ctx, &d, &l, kind, req)?)).await?;
    Ok(Reply::ok(views::credential(&stored)))
}

async fn delete_credential(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, kind)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let kind = kind_of(&kind)?;
    let app = state.mailing.clone();
    run_blocking(move || Ok(credentials::delete(&app, &p, &ctx, &d, &l, kind)?)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn test_credential(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, kind)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let kind = kind_of(&kind)?;
    let app = state.mailing.clone();
    run_blocking(move || Ok(credentials::test(&app, &p, &ctx, &d, &l, kind)?)).await?;
    Ok(Reply::ok(json!({ "ok": true })))
}
