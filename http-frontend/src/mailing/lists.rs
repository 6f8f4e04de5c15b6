//! `/api/v1/domains/{domain}/lists[/{list}]`: list, create, read, change, suspend, resume.

use super::{domain_name, invalid, names, parse_enum, patch_text, policy};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::body::Json;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use axum::extract::{Path, RawQuery, State};
use courrier_core::access::Principal;
use courrier_core::kernel::{EmailAddress, ListName};
use courrier_core::mailing::lists;
use courrier_core::mailing::model::{DigestFrequency, DmarcMitigation, ListKind, ListStatus, PostingPolicy, ReplyTo};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

pub(super) async fn list_lists(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?;
    let page = q.page()?;
    let name = domain_name(&domain)?;
    let app = state.mailing.clone();
    let all = run_blocking(move || Ok(lists::list(&app, &p, &ctx, &name)?)).await?;
    let window: Vec<Value> = all
        .iter()
        .skip(usize::try_from(page.offset()).unwrap_or(usize::MAX))
        .take(page.limit() as usize)
        .map(courrier_core::mailing::views::list_summary)
        .collect();
    Ok(Reply::collection(window, all.len() as u64, page))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListBody {
    name: String,
    display_name: String,
    owner_email: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    subscription_policy: Option<String>,
}

pub(super) async fn create_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
    Json(body): Json<ListBody>,
) -> Result<Reply, ApiError> {
    let domain = domain_name(&domain)?;
    let req = lists::NewList {
        name: ListName::parse(&body.name).map_err(|e| invalid(format!("name: {e}")))?,
        display_name: body.display_name,
        owner: EmailAddress::parse(&body.owner_email).map_err(|e| invalid(format!("owner_email: {e}")))?,
        kind: parse_enum("type", body.kind, ListKind::parse, &ListKind::names())?,
        subscription_policy: policy("subscription_policy", body.subscription_policy)?,
    };
    let app = state.mailing.clone();
    let l = run_blocking(move || Ok(lists::create(&app, &p, &ctx, &domain, req)?)).await?;
    Ok(Reply::created(courrier_core::mailing::views::list_detail(&l)))
}

pub(super) async fn get_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(lists::get(&app, &p, &ctx, &d, &l)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::list_detail(&found)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListPatchBody {
    display_name: Option<String>,
    status: Option<String>,
    subscription_policy: Option<String>,
    posting_policy: Option<String>,
    #[serde(default, with = "patch_text")]
    subject_tag: Option<Option<String>>,
    #[serde(default, with = "patch_text")]
    footer_text: Option<Option<String>>,
    #[serde(default, with = "patch_text")]
    footer_html: Option<Option<String>>,
    reply_to: Option<String>,
    #[serde(default, with = "crate::body::whole")]
    bounce_disable_score: Option<u32>,
    #[serde(default, with = "crate::body::whole")]
    held_days: Option<u32>,
    digest_frequency: Option<String>,
    #[serde(default, with = "crate::body::whole")]
    max_message_kb: Option<u32>,
    dmarc_mitigation: Option<String>,
}

pub(super) async fn update_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
    Json(b): Json<ListPatchBody>,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let patch = lists::ListPatch {
        display_name: b.display_name,
        status: parse_enum("status", b.status, ListStatus::parse, &ListStatus::names())?,
        subscription_policy: policy("subscription_policy", b.subscription_policy)?,
        posting_policy: parse_enum("posting_policy", b.posting_policy, PostingPolicy::parse, &PostingPolicy::names())?,
        subject_tag: b.subject_tag,
        footer_text: b.footer_text,
        footer_html: b.footer_html,
        reply_to: parse_enum("reply_to", b.reply_to, ReplyTo::parse, &ReplyTo::names())?,
        bounce_disable_score: b.bounce_disable_score,
        held_days: b.held_days,
        digest_frequency: parse_enum(
            "digest_frequency",
            b.digest_frequency,
            DigestFrequency::parse,
            &DigestFrequency::names(),
        )?,
        max_message_kb: b.max_message_kb,
        dmarc_mitigation: parse_enum(
            "dmarc_mitigation",
            b.dmarc_mitigation,
            DmarcMitigation::parse,
            &DmarcMitigation::names(),
        )?,
    };
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(lists::update(&app, &p, &ctx, &d, &l, patch)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::list_detail(&found)))
}

pub(super) async fn set_suspended(
    state: AppState,
    p: Arc<Principal>,
    ctx: courrier_core::access::principal::RequestCtx,
    domain: String,
    list: String,
    on: bool,
) -> Result<Reply, ApiError> {
    let (d, l) = names(&domain, &list)?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(lists::set_suspended(&app, &p, &ctx, &d, &l, on)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::list_detail(&found)))
}

pub(super) async fn suspend_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Reply, ApiError> {
    set_suspended(state, p, ctx, domain, list, true).await
}

pub(super) async fn resume_list(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path((domain, list)): Path<(String, String)>,
) -> Result<Reply, ApiError> {
    set_suspended(state, p, ctx, domain, list, false).await
}
