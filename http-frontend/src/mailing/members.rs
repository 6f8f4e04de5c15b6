//! A list's members: listing, one member, adding one (Idempotency-Key honoured).

use super::idempotency::{read_json_body, refused, render, request_key};
use super::{invalid, names};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::{run_blocking, run_write};
use crate::body::{Json, parse_json};
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use courrier_core::kernel::{Code, EmailAddress};
use courrier_core::mailing::idempotency::Keyed;
use courrier_core::mailing::members::{self, AddMember, MemberRef};
use courrier_core::mailing::model::MemberFilter;
use http::HeaderMap;
use serde::Deserialize;

pub(super) async fn list_members(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(
        raw.as_deref(),
        &["limit", "offset", "status", "delivery_mode", "min_bounce_score", "email_contains"],
    )?;
    let page = q.page()?;
    let filter = MemberFilter::parse(
        q.get("status"),
        q.get("delivery_mode"),
        q.get("min_bounce_score"),
        q.get("email_contains"),
    )?;
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(members::list(&app, &p, &ctx, &d, &l, &filter, page)?)).await?;
    // Written straight from the members into the body's one buffer (about 330 bytes a member).
    Ok(Reply::collection_written(found.total, page, found.items.len() * 400, |out| {
        courrier_core::mailing::views::write_members(out, &found.items)
    }))
}

pub(super) async fn get_member(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, member)): Path<(String, String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let who = MemberRef::parse(&member).map_err(|_| ApiError::new(Code::NotFound, "member not found"))?;
    let app = state.mailing.clone();
    let m = run_blocking(move || Ok(members::get(&app, &p, &ctx, &d, &l, &who)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::member(&m)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MemberPatchBody {
    status: String,
}

pub(super) async fn update_member(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list, member)): Path<(String, String, String)>,
    Json(b): Json<MemberPatchBody>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let who = MemberRef::parse(&member).map_err(|_| ApiError::new(Code::NotFound, "member not found"))?;
    let app = state.mailing.clone();
    let m = run_blocking(move || Ok(members::set_status(&app, &p, &ctx, &d, &l, &who, &b.status)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::member(&m)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MemberBody {
    email: String,
    name: Option<String>,
    delivery_mode: Option<String>,
    force: Option<bool>,
    consent_source: Option<String>,
    consent_evidence: Option<String>,
}

pub(super) fn member_request(body: &[u8], source_ip: Option<String>) -> Result<AddMember, ApiError> {
    let b: MemberBody = parse_json(body)?;
    let email = EmailAddress::parse(&b.email).map_err(|e| invalid(format!("email: {e}")))?;
    Ok(AddMember::new(
        email,
        b.name,
        b.delivery_mode.as_deref(),
        b.force.unwrap_or(false),
        b.consent_source,
        b.consent_evidence,
        source_ip,
    )?)
}

pub(super) async fn add_member(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = read_json_body(&headers, body, &state).await?;
    let path = format!("/api/v1/domains/{domain}/lists/{list}/members");
    let ((d, l), req) = match names(&domain, &list).and_then(|n| Ok((n, member_request(&bytes, ctx.source.clone())?))) {
        Ok(parsed) => parsed,
        Err(e) => return refused(&state, &p, &headers, "POST", &path, &bytes, e).await,
    };
    let key = request_key(&p, &headers, "POST", &path, &bytes)?;
    // The write runs on the store's writer thread, answered from there after its group's commit.
    let app = &state.mailing;
    let added = run_write(|answer| members::add_submitted(app, p, ctx, key, d, l, req, answer)).await??;
    let done = match added {
        // A confirmation or a moderators' notice is sent after the commit, off the async threads.
        Keyed::Ran(added) if added.sends_mail() => {
            let app = app.clone();
            Keyed::Ran(run_blocking(move || Ok(added.after_commit(&app))).await?)
        }
        other => other.map(|added| added.outcome()),
    };
    Ok(render(done.map(|o| (o.status(), o.view()))))
}
