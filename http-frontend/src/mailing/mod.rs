//! `/api/v1/domains/...` (domains, lists, members, CSV import and export), `/dashboard` and
//! `/system/queue`: parse, call core, render.

pub(crate) mod credentials;
mod dashboard;
mod domains;
pub(crate) mod export;
mod idempotency;
mod import;
pub(crate) mod layout;
mod lists;
pub(crate) mod me;
pub(crate) mod me_pages;
mod members;
pub(crate) mod moderation;
pub(crate) mod pages;
mod sends;
pub(crate) mod webhooks;

use crate::error::ApiError;
use crate::routes::{Access, Api, Param, ParamKind, Perm, QueryParam, Route, Success, route};
use crate::schema::{self, Schema};
use axum::routing::on;
use courrier_core::kernel::{Code, DomainName, ListName};
use courrier_core::mailing::model::SubscriptionPolicy;
use http::Method;
use serde_json::json;

const DOMAIN: &[Param] =
    &[Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" }];
pub(super) const LIST: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
];
const MEMBER: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
    Param { name: "member", kind: ParamKind::Text, description: "the member's numeric id or URL-encoded address" },
];
const LIMIT: QueryParam = QueryParam { name: "limit", schema: schema::LIMIT, description: "1 to 500, default 50" };
const OFFSET: QueryParam = QueryParam { name: "offset", schema: schema::OFFSET, description: "default 0" };
const PAGE: &[QueryParam] = &[LIMIT, OFFSET];
const DOMAIN_QUERY: &[QueryParam] =
    &[LIMIT, OFFSET, QueryParam { name: "status", schema: schema::DOMAIN_STATUS, description: "domain status" }];
const STATUS: QueryParam = QueryParam { name: "status", schema: schema::MEMBER_STATUS, description: "member status" };
const MODE: QueryParam =
    QueryParam { name: "delivery_mode", schema: schema::DELIVERY_MODE, description: "delivery mode" };
const MEMBER_QUERY: &[QueryParam] = &[
    LIMIT,
    OFFSET,
    STATUS,
    MODE,
    QueryParam { name: "min_bounce_score", schema: schema::BOUNCE_FLOOR, description: "bounce score floor" },
    QueryParam {
        name: "email_contains",
        schema: schema::EMAIL_CONTAINS,
        description: "case-insensitive substring of the address (2 characters at least; % and _ are literal)",
    },
];
const EXPORT_QUERY: &[QueryParam] = &[STATUS, MODE];
const SEND: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name, e.g. example.org" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part, e.g. news" },
    Param { name: "send", kind: ParamKind::Id, description: "the send's id" },
];
const IMPORT_QUERY: &[QueryParam] = &[QueryParam {
    name: "consent_evidence",
    schema: schema::CONSENT_EVIDENCE,
    description: "the consent covering every row (or a form field before the file part)",
}];
/// The CSV import's body: the document itself or a multipart form.
const IMPORT_REQUEST: Schema = Schema(|| {
    json!({ "x-content": {
        "text/csv": { "schema": { "type": "string" } },
        "multipart/form-data": { "schema": {
            "type": "object",
            "required": ["file"],
            "properties": {
                "consent_evidence": { "type": "string" },
                "file": { "type": "string", "contentMediaType": "text/csv" }
            }
        } }
    } })
});
/// Declared lengths past this are refused before reading (400). Within it, the importer reads
/// the document up to the contract's 25 MiB and answers 413 past that, keeping the rows before
/// the cut: a client sending a 30 MiB file learns where the cut fell.
pub const IMPORT_BODY_LIMIT: usize = 256 * 1024 * 1024;

pub static ROUTES: &[Route] = &[
    route!(GET "/api/v1/dashboard", "getDashboard", "Counts adapted to the caller's reach", "system",
        Access::Perm(Perm::Read), params: &[], query: &[], request: None, success: Success::Data(200, schema::DASHBOARD),
        errors: &[], dashboard::get_dashboard),
    route!(GET "/api/v1/system/queue", "getQueue", "Depth of the outgoing queue", "system", Access::Perm(Perm::Read),
        params: &[], query: &[], request: None, success: Success::Data(200, schema::QUEUE), errors: &[], dashboard::get_queue),
    route!(GET "/api/v1/domains", "listDomains", "Domains in scope", "domains", Access::Perm(Perm::Read),
        params: &[], query: DOMAIN_QUERY, request: None, success: Success::Collection(schema::DOMAIN), errors: &[],
        domains::list_domains),
    route!(POST "/api/v1/domains", "createDomain", "Create a domain (state pending_mta)", "domains",
        Access::Perm(Perm::Manage), params: &[], query: &[], request: Some(schema::DOMAIN_CREATE),
        success: Success::Data(201, schema::DOMAIN), errors: &[409], domains::create_domain),
    route!(GET "/api/v1/domains/{domain}", "getDomain", "A domain's detail and defaults", "domains",
        Access::Perm(Perm::Read), params: DOMAIN, query: &[], request: None, success: Success::Data(200, schema::DOMAIN),
        errors: &[], domains::get_domain),
    route!(PATCH "/api/v1/domains/{domain}", "updateDomain", "Change a domain: settings and status", "domains",
        Access::Perm(Perm::Manage), params: DOMAIN, query: &[], request: Some(schema::DOMAIN_PATCH),
        success: Success::Data(200, schema::DOMAIN), errors: &[], domains::update_domain),
    route!(GET "/api/v1/domains/{domain}/lists", "listLists", "The domain's lists visible to the caller", "lists",
        Access::Perm(Perm::Read), params: DOMAIN, query: PAGE, request: None,
        success: Success::Collection(schema::LIST_SUMMARY), errors: &[], lists::list_lists),
    route!(POST "/api/v1/domains/{domain}/lists", "createList", "Create a list with its owner", "lists",
        Access::Perm(Perm::Manage), params: DOMAIN, query: &[], request: Some(schema::LIST_CREATE),
        success: Success::Data(201, schema::LIST_DETAIL), errors: &[409], lists::create_list),
    route!(GET "/api/v1/domains/{domain}/lists/{list}", "getList", "A list's detail and policies", "lists",
        Access::Perm(Perm::Read), params: LIST, query: &[], request: None,
        success: Success::Data(200, schema::LIST_DETAIL), errors: &[], lists::get_list),
    route!(PATCH "/api/v1/domains/{domain}/lists/{list}", "updateList",
        "Change a list: only present fields apply; an empty text clears it", "lists",
        Access::Perm(Perm::Manage), params: LIST, query: &[], request: Some(schema::LIST_PATCH),
        success: Success::Data(200, schema::LIST_DETAIL), errors: &[], lists::update_list),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/suspend", "suspendList",
        "Suspend distribution (circuit breaker; queued copies stay queued)", "lists", Access::Perm(Perm::Manage),
        params: LIST, query: &[], request: None, success: Success::Data(200, schema::LIST_DETAIL), errors: &[],
        lists::suspend_list),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/resume", "resumeList", "Resume distribution", "lists",
        Access::Perm(Perm::Manage), params: LIST, query: &[], request: None,
        success: Success::Data(200, schema::LIST_DETAIL), errors: &[], lists::resume_list),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/members", "listMembers",
        "Members of the list, ordered by id, every filter applied in the query", "members", Access::Perm(Perm::Read),
        params: LIST, query: MEMBER_QUERY, request: None, success: Success::Collection(schema::MEMBER), errors: &[],
        members::list_members),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/members", "addMember",
        "Add or subscribe a member (201 active, 202 pending); Idempotency-Key honoured", "members",
        Access::Perm(Perm::MembersWrite), params: LIST, query: &[], request: Some(schema::MEMBER_ADD),
        success: Success::DataEither(201, 202, schema::MEMBER_ADDED), errors: &[409], members::add_member),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/members/export", "exportMembers",
        "The members as CSV (email,display_name,delivery_mode,status,subscribed_at), streamed", "members",
        Access::Perm(Perm::Read), params: LIST, query: EXPORT_QUERY, request: None,
        success: Success::Raw("text/csv", schema::CSV), errors: &[], export::export_members),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/members/{member}", "getMember",
        "One member, by numeric id or URL-encoded address", "members", Access::Perm(Perm::Read), params: MEMBER,
        query: &[], request: None, success: Success::Data(200, schema::MEMBER), errors: &[], members::get_member),
    route!(PATCH "/api/v1/domains/{domain}/lists/{list}/members/{member}", "updateMember",
        "Re-enable a member disabled by bounces (status: active; score back to 0); audited", "members",
        Access::Perm(Perm::MembersWrite), params: MEMBER, query: &[], request: Some(schema::MEMBER_PATCH),
        success: Success::Data(200, schema::MEMBER), errors: &[409], members::update_member),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/sends", "submitSend",
        "Submit a message to the list: one copy per active regular member; Idempotency-Key honoured", "sends",
        Access::Perm(Perm::Send), params: LIST, query: &[], request: Some(schema::SEND_REQUEST),
        success: Success::Data(202, schema::SEND_SUBMITTED), errors: &[409], sends::submit_send),
    route!(GET "/api/v1/domains/{domain}/lists/{list}/sends/{send}", "getSend", "A send and its copies by state",
        "sends", Access::Perm(Perm::Read), params: SEND, query: &[], request: None,
        success: Success::Data(200, schema::SEND_STATUS), errors: &[], sends::get_send),
    route!(POST "/api/v1/domains/{domain}/lists/{list}/sends/{send}/cancel", "cancelSend",
        "Cancel the copies still queued (409 when none is)", "sends", Access::Perm(Perm::Send), params: SEND,
        query: &[], request: None, success: Success::Data(200, schema::SEND_STATUS), errors: &[409], sends::cancel_send),
    Route {
        method: Method::POST,
        path: "/api/v1/domains/{domain}/lists/{list}/members/import",
        api: Api::Mailing,
        operation_id: "importMembers",
        summary: "CSV import (text/csv, or multipart with a file part); 25 MiB at most",
        tag: "members",
        access: Access::Perm(Perm::MembersWrite),
        params: LIST,
        query: IMPORT_QUERY,
        request: Some(IMPORT_REQUEST),
        success: Success::Data(200, schema::IMPORT_REPORT),
        body_limit: IMPORT_BODY_LIMIT,
        errors: &[413],
        handler: |m| on(m, import::import_members),
    },
];

/// A domain named in a path: a name that cannot exist is simply not found.
fn domain_name(raw: &str) -> Result<DomainName, ApiError> {
    DomainName::parse(raw).map_err(|_| ApiError::new(Code::NotFound, "domain not found"))
}

fn list_name(raw: &str) -> Result<ListName, ApiError> {
    ListName::parse(raw).map_err(|_| ApiError::new(Code::NotFound, "list not found"))
}

fn names(domain: &str, list: &str) -> Result<(DomainName, ListName), ApiError> {
    Ok((domain_name(domain)?, list_name(list)?))
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationFailed, message)
}

/// A wire enum from a body field.
fn parse_enum<T>(
    field: &str,
    raw: Option<String>,
    parse: fn(&str) -> Option<T>,
    allowed: &[&str],
) -> Result<Option<T>, ApiError> {
    raw.map(|v| parse(&v).ok_or_else(|| invalid(format!("{field} {v:?} is not one of {}", allowed.join(", ")))))
        .transpose()
}

fn policy(field: &str, raw: Option<String>) -> Result<Option<SubscriptionPolicy>, ApiError> {
    parse_enum(field, raw, SubscriptionPolicy::parse, &SubscriptionPolicy::names())
}

/// A JSON PATCH text field: absent -> `None`, `null` or `""` -> `Some(None)` (clear), text -> set.
mod patch_text {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
        Ok(Some(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty())))
    }
}
