//! A list's sends: submit (Idempotency-Key honoured), status, cancel.

use super::idempotency::keyed;
use super::idempotency::read_json_body;
use super::names;
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::body::parse_json;
use crate::envelope::Reply;
use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use courrier_core::mailing::idempotency::Replayable;
use courrier_core::mailing::model::SendId;
use courrier_core::mailing::sends;
use courrier_core::mailing::views;
use http::HeaderMap;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SendBody {
    subject: String,
    text: Option<String>,
    html: Option<String>,
}

pub(super) async fn submit_send(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_json_body(&headers, body, &state).await?;
    let path = format!("/api/v1/domains/{domain}/lists/{list}/sends");
    let input = bytes.clone();
    let parse = move || {
        let b: SendBody = parse_json(&input)?;
        Ok((names(&domain, &list)?, sends::NewMessage { subject: b.subject, text: b.text, html: b.html }))
    };
    keyed(&state, &p, &headers, "POST", &path, &bytes, parse, move |app, p, key, ((d, l), message)| {
        Ok(sends::submit(app, p, &ctx, key, &d, &l, message)?.map(|s| (s.status(), s.view())))
    })
    .await
}

pub(super) async fn get_send(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, send)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let id = SendId::parse(&send)?;
    let app = state.mailing.clone();
    let (s, counts) = run_blocking(move || Ok(sends::get(&app, &p, &ctx, &d, &l, id)?)).await?;
    Ok(Reply::ok(views::send_status(&s, &counts)))
}

pub(super) async fn cancel_send(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, send)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let id = SendId::parse(&send)?;
    let app = state.mailing.clone();
    let (s, counts) = run_blocking(move || Ok(sends::cancel(&app, &p, &ctx, &d, &l, id)?)).await?;
    Ok(Reply::ok(views::send_status(&s, &counts)))
}
