//! The access context's administration pages: users and their roles (invite, disable, grant,
//! revoke), API keys (create: the secret shown once; revoke), the audit log with its filters.
//! Each calls the core operation the API handler of the same route calls.

use super::{Admin, FORM_LIMIT, Form, ID, Posted, Section, admin_route, role_text};
use crate::AppState;
use crate::blocking::run_blocking;
use crate::error::ApiError;
use crate::mailing::layout::{alert, note, see_other, see_other_to};
use crate::routes::Route;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use courrier_core::access::model::{KeyId, KeyScope, Profile, Role, RoleKind, UserId, UserStatus};
use courrier_core::access::{Perm, keys, roles, users};
use courrier_core::kernel::{AuditFilter, Code, DomainName, EmailAddress, ListName, Page, Timestamp};
use maud::{Markup, html};

pub static ROUTES: &[Route] = &[
    admin_route!(GET "/admin/users", "adminUsers", "Accounts in reach; invite", &[], FORM_LIMIT, users_page),
    admin_route!(POST "/admin/users", "adminInvite", "Invite an account (a mail to set its password)", &[],
        FORM_LIMIT, user_invite),
    admin_route!(GET "/admin/users/{id}", "adminUser", "An account and its roles", ID, FORM_LIMIT, user_page),
    admin_route!(POST "/admin/users/{id}/status", "adminUserStatus", "Disable or enable an account", ID, FORM_LIMIT,
        user_status),
    admin_route!(POST "/admin/users/{id}/roles", "adminGrant", "Grant a role", ID, FORM_LIMIT, role_grant),
    admin_route!(POST "/admin/users/{id}/roles/revoke", "adminRevoke", "Revoke a role", ID, FORM_LIMIT, role_revoke),
    admin_route!(GET "/admin/apikeys", "adminKeys", "Your API keys; create one", &[], FORM_LIMIT, keys_page),
    admin_route!(POST "/admin/apikeys", "adminKeyCreate", "Create an API key: its secret shown once", &[],
        FORM_LIMIT, key_create),
    admin_route!(POST "/admin/apikeys/{id}/revoke", "adminKeyRevoke", "Revoke an API key", ID, FORM_LIMIT, key_revoke),
    admin_route!(GET "/admin/audit", "adminAudit", "The audit log, newest first, with its filters", &[], FORM_LIMIT,
        audit_page),
];

macro_rules! core {
    ($a:expr, $back:expr, $body:expr) => {
        match run_blocking(move || Ok($body)).await {
            Ok(v) => v,
            Err(e) => return $a.failure(e, &$back),
        }
    };
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationFailed, message)
}

fn user_id(raw: &str) -> Result<UserId, ApiError> {
    UserId::parse(raw).map_err(|_| ApiError::new(Code::NotFound, "user not found"))
}

fn offset_of(q: &Form) -> u64 {
    q.get("offset").and_then(|o| o.parse::<u64>().ok()).unwrap_or(0)
}

fn page_at(offset: u64) -> Result<Page, ApiError> {
    Ok(Page::parse(Some("50"), Some(&offset.to_string()))?)
}

fn field(id: &str, label: &str, kind: &str, required: bool) -> Markup {
    html! {
        label for=(id) { (label) }
        input id=(id) name=(id) type=(kind) required[required];
    }
}

// ---------------------------------------------------------------------------------------------
// Users and roles.

async fn users_page(State(state): State<AppState>, a: Admin, RawQuery(raw): RawQuery) -> Response {
    let offset = offset_of(&Form::parse(raw.as_deref().unwrap_or("")).unwrap_or(Form(Vec::new())));
    let page = match page_at(offset) {
        Ok(p) => p,
        Err(e) => return a.failure(e, "/admin/users"),
    };
    let (app, p) = (state.access.clone(), a.p.clone());
    let found = core!(a, "/admin/", users::list(&app, &p, page)?);
    a.page(
        Section::Users,
        a.t("Users", "Utilisateurs"),
        html! {
            table {
                thead { tr { th scope="col" { (a.t("Address", "Adresse")) } th scope="col" { (a.t("Status", "État")) } th scope="col" { (a.t("Password set", "Mot de passe choisi")) } } }
                tbody { @for u in &found.items { tr {
                    td { a href=(format!("/admin/users/{}", u.id.get())) { (u.email.to_string()) } }
                    td { (u.status.as_str()) }
                    td { (if u.has_password { a.t("yes", "oui") } else { a.t("no", "non") }) }
                } } }
            }
            (super::pager(a.lang, "/admin/users?", offset, 50, found.total))
            h2 { (a.t("Invite someone", "Inviter quelqu'un")) }
            form method="post" action="/admin/users" {
                (a.csrf_field())
                (field("email", a.t("Address", "Adresse"), "email", true))
                (field("firstname", a.t("First name (optional)", "Prénom (facultatif)"), "text", false))
                (field("name", a.t("Name (optional)", "Nom (facultatif)"), "text", false))
                button type="submit" { (a.t("Send the invitation", "Envoyer l'invitation")) }
            }
        },
    )
}

async fn user_invite(State(state): State<AppState>, Posted(a, f): Posted) -> Response {
    let email = match EmailAddress::parse(&f.get("email").unwrap_or_default()) {
        Ok(e) => e,
        Err(e) => return a.failure(invalid(format!("email: {e}")), "/admin/users"),
    };
    let new = users::NewUser {
        email,
        profile: Profile { firstname: f.get("firstname"), name: f.get("name"), mobile: None, language_code_id: None },
        password: None,
    };
    let (app, p, ctx) = (state.access.clone(), a.p.clone(), a.ctx.clone());
    let (user, _) = core!(a, "/admin/users", users::create(&app, &p, &ctx, new)?);
    see_other_to(&format!("/admin/users/{}", user.id.get()))
}

async fn user_page(State(state): State<AppState>, a: Admin, Path(raw): Path<String>) -> Response {
    let id = match user_id(&raw) {
        Ok(id) => id,
        Err(e) => return a.failure(e, "/admin/users"),
    };
    let (app, p, ctx) = (state.access.clone(), a.p.clone(), a.ctx.clone());
    let (user, grants) = core!(a, "/admin/users", users::get(&app, &p, &ctx, id)?);
    let here = format!("/admin/users/{}", id.get());
    let active = user.status == UserStatus::Active;
    a.page(
        Section::Users,
        &user.email.to_string(),
        html! {
            dl {
                dt { (a.t("Status", "État")) } dd { (user.status.as_str()) }
                dt { (a.t("Password set", "Mot de passe choisi")) } dd { (if user.has_password { a.t("yes", "oui") } else { a.t("no (invited)", "non (invité)") }) }
                dt { (a.t("Created at", "Créé le")) } dd { (user.created_at.to_rfc3339()) }
            }
            form method="post" action=(format!("{here}/status")) data-confirm=(a.t("Sure?", "Confirmer ?")) {
                (a.csrf_field())
                input type="hidden" name="status" value=(if active { "disabled" } else { "active" });
                @if active { button type="submit" class="danger" { (a.t("Disable the account", "Désactiver le compte")) } }
                @else { button type="submit" { (a.t("Enable the account", "Réactiver le compte")) } }
            }
            h2 { (a.t("Roles", "Rôles")) }
            @if grants.is_empty() { p { (a.t("No role you can see.", "Aucun rôle visible pour vous.")) } }
            ul class="subs" { @for g in &grants { li {
                (role_text(a.lang, &g.role))
                form method="post" action=(format!("{here}/roles/revoke")) data-confirm=(a.t("Revoke this role?", "Retirer ce rôle ?")) {
                    (a.csrf_field())
                    input type="hidden" name="role" value=(g.role.kind().as_str());
                    @if let Some(d) = g.role.domain() { input type="hidden" name="domain" value=(d.as_str()); }
                    @if let Some(l) = g.role.list() { input type="hidden" name="list" value=(l.as_str()); }
                    button type="submit" class="danger" aria-label=(format!("{} {}", a.t("Revoke", "Retirer"), role_text(a.lang, &g.role))) { (a.t("Revoke", "Retirer")) }
                }
            } } }
            h2 { (a.t("Grant a role", "Attribuer un rôle")) }
            form method="post" action=(format!("{here}/roles")) {
                (a.csrf_field())
                label for="role" { (a.t("Role", "Rôle")) }
                select
                    id="role" name="role" {
                    @for k in ["site_admin", "domain_admin", "owner", "moderator"] { option value=(k) { (k) } }
                }
                (field("domain", a.t("Domain (for every role but site_admin)", "Domaine (pour tout rôle sauf site_admin)"), "text", false))
                (field("list", a.t("List (for owner and moderator)", "Liste (pour owner et moderator)"), "text", false))
                button type="submit" { (a.t("Grant", "Attribuer")) }
            }
            p { a href="/admin/users" { (a.t("Back to the users", "Retour aux utilisateurs")) } }
        },
    )
}

async fn user_status(State(state): State<AppState>, Path(raw): Path<String>, Posted(a, f): Posted) -> Response {
    let here = format!("/admin/users/{}", super::seg(&raw));
    let parsed = (|| {
        let status = f
            .get("status")
            .as_deref()
            .and_then(UserStatus::parse)
            .ok_or_else(|| invalid("status: active or disabled"))?;
        Ok::<_, ApiError>((user_id(&raw)?, status))
    })();
    let (id, status) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &here),
    };
    let patch =
        users::UserPatch { status: Some(status), firstname: None, name: None, mobile: None, language_code_id: None };
    let (app, p, ctx) = (state.access.clone(), a.p.clone(), a.ctx.clone());
    core!(a, here, users::update(&app, &p, &ctx, id, patch)?);
    see_other_to(&here)
}

fn role_of(f: &Form) -> Result<Role, ApiError> {
    let raw = f.get("role").unwrap_or_default();
    let kind = RoleKind::parse(&raw).ok_or_else(|| invalid(format!("unknown role {raw:?}")))?;
    let domain = f.get("domain").as_deref().map(DomainName::parse).transpose()?;
    let list = f.get("list").as_deref().map(ListName::parse).transpose()?;
    Role::new(kind, domain, list).map_err(|e| invalid(e.to_string()))
}

async fn role_grant(State(state): State<AppState>, Path(raw): Path<String>, Posted(a, f): Posted) -> Response {
    roles_change(state, raw, a, f, true).await
}

async fn role_revoke(State(state): State<AppState>, Path(raw): Path<String>, Posted(a, f): Posted) -> Response {
    roles_change(state, raw, a, f, false).await
}

async fn roles_change(state: AppState, raw: String, a: Admin, f: Form, grant: bool) -> Response {
    let here = format!("/admin/users/{}", super::seg(&raw));
    let parsed = (|| Ok::<_, ApiError>((user_id(&raw)?, role_of(&f)?)))();
    let (id, role) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &here),
    };
    let (app, p, ctx) = (state.access.clone(), a.p.clone(), a.ctx.clone());
    if grant {
        core!(a, here, roles::grant(&app, &p, &ctx, id, role).map(|_| ())?);
    } else {
        core!(a, here, roles::revoke(&app, &p, &ctx, id, role)?);
    }
    see_other_to(&here)
}

// ---------------------------------------------------------------------------------------------
// API keys.

fn key_form(a: &Admin) -> Markup {
    html! {
        form method="post" action="/admin/apikeys" {
            (a.csrf_field())
            (field("name", a.t("Name", "Nom"), "text", true))
            label for="scope_kind" { (a.t("Scope", "Portée")) }
            select
                id="scope_kind" name="scope_kind" {
                option value="user" { (a.t("everything I may do (user)", "tout ce que je peux faire (user)")) }
                option value="domain" { (a.t("one domain", "un domaine")) }
                option value="list" { (a.t("one list", "une liste")) }
            }
            (field("domain", a.t("Domain (domain and list scopes)", "Domaine (portées domaine et liste)"), "text", false))
            (field("list", a.t("List (list scope)", "Liste (portée liste)"), "text", false))
            fieldset {
                legend { (a.t("Permissions", "Permissions")) }
                @for perm in Perm::ALL {
                    label { input type="checkbox" name="perms" value=(perm.as_str()) checked[perm == Perm::Read]; " " (perm.as_str()) }
                }
            }
            (field("expires_at", a.t("Expires on (optional, YYYY-MM-DD)", "Expire le (facultatif, AAAA-MM-JJ)"), "date", false))
            (field("rate_limit_per_min", a.t("Requests per minute at most (optional)", "Requêtes par minute au plus (facultatif)"), "number", false))
            button type="submit" { (a.t("Create the key", "Créer la clé")) }
        }
    }
}

async fn keys_page(State(state): State<AppState>, a: Admin, RawQuery(raw): RawQuery) -> Response {
    let offset = offset_of(&Form::parse(raw.as_deref().unwrap_or("")).unwrap_or(Form(Vec::new())));
    let page = match page_at(offset) {
        Ok(p) => p,
        Err(e) => return a.failure(e, "/admin/apikeys"),
    };
    let (app, p) = (state.access.clone(), a.p.clone());
    let found = core!(a, "/admin/", keys::list(&app, &p, page)?);
    a.page(
        Section::Keys,
        a.t("API keys", "Clés d'API"),
        html! {
            @if found.items.is_empty() { p { (a.t("No key yet.", "Aucune clé pour l'instant.")) } }
            @else {
                table {
                    thead { tr {
                        th scope="col" { (a.t("Name", "Nom")) } th scope="col" { (a.t("Prefix", "Préfixe")) }
                        th scope="col" { (a.t("Scope", "Portée")) } th scope="col" { "Permissions" }
                        th scope="col" { (a.t("State", "État")) } th scope="col" { span class="note" { (a.t("Action", "Action")) } }
                    } }
                    tbody { @for k in &found.items { tr {
                        td { (k.name) } td { code { (k.prefix) } }
                        td { (k.scope.kind_str()) @match &k.scope {
                            KeyScope::User => {},
                            KeyScope::Domain(d) => { " " (d.as_str()) },
                            KeyScope::List(d, l) => { " " (l.as_str()) "@" (d.as_str()) },
                        } }
                        td { (k.perms.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")) }
                        td { @if k.revoked_at.is_some() { (a.t("revoked", "révoquée")) } @else { (a.t("active", "active")) } }
                        td { @if k.revoked_at.is_none() {
                            form method="post" action=(format!("/admin/apikeys/{}/revoke", k.id.get())) data-confirm=(a.t("Revoke this key?", "Révoquer cette clé ?")) {
                                (a.csrf_field())
                                button type="submit" class="danger" aria-label=(format!("{} {}", a.t("Revoke", "Révoquer"), k.name)) { (a.t("Revoke", "Révoquer")) }
                            }
                        } }
                    } } }
                }
                (super::pager(a.lang, "/admin/apikeys?", offset, 50, found.total))
            }
            h2 { (a.t("New key", "Nouvelle clé")) }
            (key_form(&a))
        },
    )
}

async fn key_create(State(state): State<AppState>, Posted(a, f): Posted) -> Response {
    let parsed = (|| {
        let rate = f
            .get("rate_limit_per_min")
            .map(|v| v.parse::<u32>().map_err(|_| invalid(format!("rate_limit_per_min: a whole number, not {v:?}"))))
            .transpose()?;
        Ok::<_, ApiError>(keys::NewKey::parse(
            f.get("name").unwrap_or_default(),
            &f.get("scope_kind").unwrap_or_default(),
            f.get("domain").as_deref(),
            f.get("list").as_deref(),
            &f.all("perms"),
            f.get("expires_at").as_deref(),
            rate,
        )?)
    })();
    let new = match parsed {
        Ok(n) => n,
        Err(e) => return a.failure(e, "/admin/apikeys"),
    };
    let (app, p, ctx) = (state.access.clone(), a.p.clone(), a.ctx.clone());
    let created = core!(a, "/admin/apikeys", keys::create_own(&app, &p, &ctx, new)?);
    a.page(
        Section::Keys,
        a.t("Key created", "Clé créée"),
        html! {
            (alert(a.t("Copy the secret now: it is shown this once and never again.",
                "Copiez le secret maintenant : il n'est montré que cette fois.")))
            p { label for="secret" { (a.t("Secret of ", "Secret de ")) (created.key.name) }
                input id="secret" class="secret" type="text" readonly value=(created.secret); }
            p { a href="/admin/apikeys" { (a.t("Back to the keys", "Retour aux clés")) } }
        },
    )
}

async fn key_revoke(State(state): State<AppState>, Path(raw): Path<String>, Posted(a, _): Posted) -> Response {
    let id = match KeyId::parse(&raw) {
        Ok(id) => id,
        Err(_) => return a.failure(ApiError::new(Code::NotFound, "key not found"), "/admin/apikeys"),
    };
    let (app, p, ctx) = (state.access.clone(), a.p.clone(), a.ctx.clone());
    core!(a, "/admin/apikeys", keys::revoke(&app, &p, &ctx, id)?);
    see_other("/admin/apikeys")
}

// ---------------------------------------------------------------------------------------------
// The audit log.

async fn audit_page(State(state): State<AppState>, a: Admin, RawQuery(raw): RawQuery) -> Response {
    let q = Form::parse(raw.as_deref().unwrap_or("")).unwrap_or(Form(Vec::new()));
    let offset = offset_of(&q);
    let parsed = (|| {
        let ts = |k: &str| {
            q.get(k)
                .map(|v| {
                    // A date field gives a day: from its first microsecond (since) or to its last (until).
                    let full = if v.len() == 10 {
                        if k == "since" { format!("{v}T00:00:00Z") } else { format!("{v}T23:59:59.999999Z") }
                    } else {
                        v.clone()
                    };
                    Timestamp::parse_rfc3339(&full).ok_or_else(|| invalid(format!("{k}: a date, not {v:?}")))
                })
                .transpose()
        };
        let filter = AuditFilter {
            action: q.get("action"),
            actor_user_id: q
                .get("actor_user_id")
                .map(|v| {
                    courrier_core::kernel::parse_positive_id(&v).map_err(|e| invalid(format!("actor_user_id: {e}")))
                })
                .transpose()?,
            since: ts("since")?,
            until: ts("until")?,
        };
        Ok::<_, ApiError>((filter, page_at(offset)?))
    })();
    let (filter, page) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, "/admin/audit"),
    };
    let (app, p) = (state.access.clone(), a.p.clone());
    let found = core!(a, "/admin/", courrier_core::system::audit(&app, &p, filter, page)?);
    let mut base = "/admin/audit?".to_owned();
    for k in ["action", "actor_user_id", "since", "until"] {
        if let Some(v) = q.get(k) {
            base.push_str(&format!("{k}={}&", super::seg(&v)));
        }
    }
    let value = |k: &str| q.get(k).unwrap_or_default();
    a.page(
        Section::Audit,
        a.t("Audit log", "Journal d'audit"),
        html! {
            form method="get" action="/admin/audit" role="search" {
                div class="row" {
                    div { label for="action" { (a.t("Action (e.g. user.create)", "Action (par ex. user.create)")) } input id="action" name="action" type="text" value=(value("action")); }
                    div { label for="actor_user_id" { (a.t("User id", "N° d'utilisateur")) } input id="actor_user_id" name="actor_user_id" type="number" min="1" value=(value("actor_user_id")); }
                    div { label for="since" { (a.t("Since", "Depuis")) } input id="since" name="since" type="date" value=(value("since")); }
                    div { label for="until" { (a.t("Until", "Jusqu'au")) } input id="until" name="until" type="date" value=(value("until")); }
                    button type="submit" { (a.t("Filter", "Filtrer")) }
                }
            }
            @if found.items.is_empty() { (note(a.t("No entry matches.", "Aucune entrée ne correspond."))) }
            @else {
                table {
                    thead { tr {
                        th scope="col" { (a.t("When", "Quand")) } th scope="col" { (a.t("Action", "Action")) }
                        th scope="col" { (a.t("Target", "Cible")) } th scope="col" { (a.t("User", "Utilisateur")) }
                        th scope="col" { (a.t("Outcome", "Résultat")) }
                    } }
                    tbody { @for e in &found.items { tr {
                        td { (e.at.to_rfc3339()) } td { (e.action) } td { (e.target) }
                        td { (e.actor.user_id.map(|u| u.to_string()).unwrap_or_default()) @if let Some(k) = e.actor.key_id { " (" (a.t("key", "clé")) " " (k) ")" } }
                        td { (e.outcome.as_str()) }
                    } } }
                }
                (super::pager(a.lang, &base, offset, 50, found.total))
            }
        },
    )
}
