//! `/api/v1/domains[/{domain}]`: list, create, read, change.

use super::{domain_name, invalid, parse_enum, patch_text, policy};
use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::body::Json;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use axum::extract::{Path, RawQuery, State};
use courrier_core::kernel::DomainName;
use courrier_core::mailing::domains;
use courrier_core::mailing::model::DomainStatus;
use serde::Deserialize;

pub(super) async fn list_domains(
    State(state): State<AppState>,
    Auth(p): Auth,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["limit", "offset", "status"])?;
    let page = q.page()?;
    let status = parse_enum("status", q.get("status").map(str::to_owned), DomainStatus::parse, &DomainStatus::names())?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(domains::list(&app, &p, status, page)?)).await?;
    Ok(Reply::collection(found.items.iter().map(courrier_core::mailing::views::domain).collect(), found.total, page))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DomainBody {
    name: String,
    dkim_selector: Option<String>,
    default_subscription_policy: Option<String>,
}

pub(super) async fn create_domain(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Json(body): Json<DomainBody>,
) -> Result<Reply, ApiError> {
    let req = domains::NewDomainRequest {
        name: DomainName::parse(&body.name).map_err(|e| invalid(format!("name: {e}")))?,
        dkim_selector: body.dkim_selector.filter(|s| !s.is_empty()),
        default_subscription_policy: policy("default_subscription_policy", body.default_subscription_policy)?,
    };
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(domains::create(&app, &p, &ctx, req)?)).await?;
    Ok(Reply::created(courrier_core::mailing::views::domain(&d)))
}

pub(super) async fn get_domain(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
) -> Result<Reply, ApiError> {
    let name = domain_name(&domain)?;
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(domains::get(&app, &p, &ctx, &name)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::domain(&d)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DomainPatchBody {
    status: Option<String>,
    #[serde(default, with = "patch_text")]
    dkim_selector: Option<Option<String>>,
    default_subscription_policy: Option<String>,
}

pub(super) async fn update_domain(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
    Json(body): Json<DomainPatchBody>,
) -> Result<Reply, ApiError> {
    let name = domain_name(&domain)?;
    let patch = domains::DomainPatch {
        status: parse_enum("status", body.status, DomainStatus::parse, &DomainStatus::names())?,
        dkim_selector: body.dkim_selector,
        default_subscription_policy: policy("default_subscription_policy", body.default_subscription_policy)?,
    };
    let app = state.mailing.clone();
    let d = run_blocking(move || Ok(domains::update(&app, &p, &ctx, &name, patch)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::domain(&d)))
}
