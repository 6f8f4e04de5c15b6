//! `/api/v1/webhooks`: create (the secret shown once), list, delete, and the signed test ping;
//! and `POST /api/v1/domains/{domain}/dns-check`. Parse, call core, render.

use crate::AppState;
use crate::auth::{Auth, Ctx};
use crate::blocking::run_blocking;
use crate::body::Json;
use crate::envelope::Reply;
use crate::error::ApiError;
use crate::query::QueryParams;
use crate::routes::{Access, Param, ParamKind, Perm, QueryParam, Route, Success, route};
use crate::schema;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use courrier_core::kernel::{Code, DomainName, EventName};
use courrier_core::mailing::model::{DomainId, ListId, WebhookId};
use courrier_core::mailing::{dns_check, webhooks};
use http::StatusCode;
use serde::Deserialize;

const ID: &[Param] = &[Param { name: "id", kind: ParamKind::Id, description: "the webhook's id" }];
const PAGE: &[QueryParam] = &[
    QueryParam { name: "limit", schema: schema::LIMIT, description: "1 to 500, default 50" },
    QueryParam { name: "offset", schema: schema::OFFSET, description: "default 0" },
];
const DOMAIN: &[Param] =
    &[Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" }];

pub static ROUTES: &[Route] = &[
    route!(POST "/api/v1/webhooks", "createWebhook",
        "Create a webhook; the signing secret is in this answer only. A URL the anti-SSRF guard refuses (not https, unresolvable, an internal address) is 422 url_refused",
        "webhooks", Access::Perm(Perm::Manage), params: &[], query: &[], request: Some(schema::WEBHOOK_CREATE),
        success: Success::Data(201, schema::WEBHOOK_CREATED), errors: &[], create_webhook),
    route!(GET "/api/v1/webhooks", "listWebhooks", "Webhooks the caller manages, never their secrets", "webhooks",
        Access::Perm(Perm::Manage), params: &[], query: PAGE, request: None,
        success: Success::Collection(schema::WEBHOOK), errors: &[], list_webhooks),
    route!(DELETE "/api/v1/webhooks/{id}", "deleteWebhook", "Delete a webhook and its pending deliveries",
        "webhooks", Access::Perm(Perm::Manage), params: ID, query: &[], request: None, success: Success::NoContent,
        errors: &[], delete_webhook),
    route!(POST "/api/v1/webhooks/{id}/test", "testWebhook",
        "Send a signed ping (X-Svc-Event: webhook.ping) now and show what the receiver answered", "webhooks",
        Access::Perm(Perm::Manage), params: ID, query: &[], request: None,
        success: Success::Data(200, schema::WEBHOOK_PING), errors: &[], test_webhook),
    route!(POST "/api/v1/domains/{domain}/dns-check", "checkDomainDns",
        "Re-run the SPF, DKIM and _dmarc checks; the verdict is stored on the domain (dns_ok, dns_checked_at); 429 rate_limited past 6 checks of a domain or 20 by a caller per minute",
        "domains", Access::Perm(Perm::Manage), params: DOMAIN, query: &[], request: None,
        success: Success::Data(200, schema::DNS_CHECK), errors: &[], dns_check),
];

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationFailed, message)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookBody {
    url: String,
    events: Vec<String>,
    domain_id: Option<i64>,
    list_id: Option<i64>,
}

fn positive(field: &str, v: Option<i64>) -> Result<Option<i64>, ApiError> {
    match v {
        Some(n) if n < 1 => Err(invalid(format!("{field} must be a positive integer"))),
        other => Ok(other),
    }
}

async fn create_webhook(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Json(body): Json<WebhookBody>,
) -> Result<Reply, ApiError> {
    let events = body
        .events
        .iter()
        .map(|e| {
            EventName::parse(e).ok_or_else(|| {
                let names: Vec<&str> = EventName::ALL.iter().map(|n| n.as_str()).collect();
                invalid(format!("events: {e:?} is not one of {}", names.join(", ")))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let req = webhooks::NewWebhookRequest {
        url: body.url,
        events,
        domain_id: positive("domain_id", body.domain_id)?.map(DomainId::from_stored),
        list_id: positive("list_id", body.list_id)?.map(ListId::from_stored),
    };
    let app = state.mailing.clone();
    let created = run_blocking(move || Ok(webhooks::create(&app, &p, &ctx, req)?)).await?;
    Ok(Reply::created(courrier_core::mailing::views::webhook_created(&created.webhook, &created.secret)))
}

async fn list_webhooks(
    State(state): State<AppState>,
    Auth(p): Auth,
    RawQuery(raw): RawQuery,
) -> Result<Reply, ApiError> {
    let q = QueryParams::parse(raw.as_deref(), &["limit", "offset"])?;
    let page = q.page()?;
    let app = state.mailing.clone();
    let found = run_blocking(move || Ok(webhooks::list(&app, &p, page)?)).await?;
    Ok(Reply::collection(found.items.iter().map(courrier_core::mailing::views::webhook).collect(), found.total, page))
}

async fn delete_webhook(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = WebhookId::parse(&id)?;
    let app = state.mailing.clone();
    run_blocking(move || Ok(webhooks::delete(&app, &p, &ctx, id)?)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn test_webhook(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(id): Path<String>,
) -> Result<Reply, ApiError> {
    let id = WebhookId::parse(&id)?;
    let app = state.mailing.clone();
    let outcome = run_blocking(move || Ok(webhooks::test(&app, &p, &ctx, id)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::webhook_ping(&outcome)))
}

async fn dns_check(
    State(state): State<AppState>,
    Auth(p): Auth,
    Ctx(ctx): Ctx,
    Path(domain): Path<String>,
) -> Result<Reply, ApiError> {
    // A name that cannot be a domain is simply not found, as on every domain route.
    let name = DomainName::parse(&domain).map_err(|_| ApiError::new(Code::NotFound, "domain not found"))?;
    let app = state.mailing.clone();
    let check = run_blocking(move || Ok(dns_check::run(&app, &p, &ctx, &name)?)).await?;
    Ok(Reply::ok(courrier_core::mailing::views::dns_check(&check)))
}
