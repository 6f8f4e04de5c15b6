//! A list's moderation queues (subscriptions waiting for a moderator: approve, reject; held posts
//! with their text: approve, reject, discard) and its
//! mail-account credentials (set, test with the provider's answer, last error, delete). Each
//! calls the core operation the API handler of the same route calls.

use super::{Admin, FORM_LIMIT, LIST, Posted, Section, admin_route, seg};
use crate::AppState;
use crate::blocking::run_blocking;
use crate::error::ApiError;
use crate::mailing::layout::{note, see_other_to};
use crate::routes::{Param, ParamKind, Route};
use axum::extract::{Path, State};
use axum::response::Response;
use courrier_core::kernel::{Code, DomainName, ListName, Page};
use courrier_core::mailing::accounts::Security;
use courrier_core::mailing::credentials::{self, CredentialKind, CredentialRequest};
use courrier_core::mailing::model::MemberId;
use courrier_core::mailing::moderation::{self, Decision, MessageDecision};
use courrier_core::mailing::posts::HeldId;
use maud::html;

const ITEM: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part" },
    Param { name: "id", kind: ParamKind::Text, description: "the member's id" },
];
const KIND: &[Param] = &[
    Param { name: "domain", kind: ParamKind::Text, description: "the domain's name" },
    Param { name: "list", kind: ParamKind::Text, description: "the list's local part" },
    Param { name: "kind", kind: ParamKind::Text, description: "ingest or submission" },
];

pub static ROUTES: &[Route] = &[
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/moderation", "adminModeration",
        "Subscriptions waiting for a moderator", LIST, FORM_LIMIT, moderation_page),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/moderation/{id}/approve", "adminApprove",
        "Approve a subscription", ITEM, FORM_LIMIT, approve),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/moderation/{id}/reject", "adminReject",
        "Reject a subscription", ITEM, FORM_LIMIT, reject),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/moderation/messages/{id}", "adminHeldMessage",
        "A held post: its header fields and text", ITEM, FORM_LIMIT, held_page),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/moderation/messages/{id}/approve", "adminHeldApprove",
        "Approve a held post: posted to the list", ITEM, FORM_LIMIT, held_approve),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/moderation/messages/{id}/reject", "adminHeldReject",
        "Reject a held post: the poster is told", ITEM, FORM_LIMIT, held_reject),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/moderation/messages/{id}/discard", "adminHeldDiscard",
        "Discard a held post: nobody is told", ITEM, FORM_LIMIT, held_discard),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/credentials", "adminCredentials",
        "The list's mail accounts: set, test, last error", LIST, FORM_LIMIT, credentials_page),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/credentials/{kind}", "adminCredentialSet",
        "Store the list's account of this kind", KIND, FORM_LIMIT, credential_set),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/credentials/{kind}/test", "adminCredentialTest",
        "Open a session with the account and show the outcome", KIND, FORM_LIMIT, credential_test),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/credentials/{kind}/delete", "adminCredentialDelete",
        "Delete the list's account of this kind", KIND, FORM_LIMIT, credential_delete),
];

macro_rules! core {
    ($a:expr, $back:expr, $body:expr) => {
        match run_blocking(move || Ok($body)).await {
            Ok(v) => v,
            Err(e) => return $a.failure(e, &$back),
        }
    };
}

fn names(d: &str, l: &str) -> Result<(DomainName, ListName), ApiError> {
    let nf = |what: &str| ApiError::new(Code::NotFound, format!("{what} not found"));
    Ok((DomainName::parse(d).map_err(|_| nf("domain"))?, ListName::parse(l).map_err(|_| nf("list"))?))
}

fn list_path(d: &str, l: &str) -> String {
    format!("/admin/domains/{}/lists/{}", seg(d), seg(l))
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationFailed, message)
}

// ---------------------------------------------------------------------------------------------
// The moderation queue.

async fn moderation_page(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list)): Path<(String, String)>,
) -> Response {
    let here = list_path(&domain, &list);
    let (d, l) = match names(&domain, &list) {
        Ok(v) => v,
        Err(e) => return a.failure(e, &here),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let (waiting, held) = core!(a, here, {
        let first = Page::first(Page::MAX_LIMIT);
        (
            moderation::subscriptions(&app, &p, &ctx, &d, &l, first)?,
            moderation::messages(&app, &p, &ctx, &d, &l, first)?,
        )
    });
    a.page(
        Section::Domains,
        &format!("{} · {}@{}", a.t("Moderation", "Modération"), list, domain),
        html! {
            p { a href=(here) { (a.t("Back to the list", "Retour à la liste")) } }
            h2 { (a.t("Subscriptions waiting", "Abonnements en attente")) " (" (waiting.total) ")" }
            @if waiting.items.is_empty() { (note(a.t("Nothing waits for a moderator.", "Rien n'attend de modérateur."))) }
            ul class="subs" { @for m in &waiting.items { li {
                b { (m.email.to_string()) } @if let Some(n) = &m.display_name { " (" (n) ")" }
                p class="note" { (a.t("Asked at ", "Demandé le ")) (m.updated_at.to_rfc3339()) }
                div class="row" {
                    form method="post" action=(format!("{here}/moderation/{}/approve", m.id.get())) {
                        (a.csrf_field())
                        button type="submit" aria-label=(format!("{} {}", a.t("Approve", "Accepter"), m.email)) { (a.t("Approve", "Accepter")) }
                    }
                    form method="post" action=(format!("{here}/moderation/{}/reject", m.id.get())) data-confirm=(a.t("Reject this subscription?", "Refuser cet abonnement ?")) {
                        (a.csrf_field())
                        button type="submit" class="danger" aria-label=(format!("{} {}", a.t("Reject", "Refuser"), m.email)) { (a.t("Reject", "Refuser")) }
                    }
                }
            } } }
            h2 { (a.t("Held posts", "Messages retenus")) " (" (held.total) ")" }
            @if held.items.is_empty() { (note(a.t("No post is held.", "Aucun message n'est retenu."))) }
            @else {
                table {
                    thead { tr {
                        th scope="col" { (a.t("Subject", "Sujet")) } th scope="col" { (a.t("From", "De")) }
                        th scope="col" { (a.t("Why", "Pourquoi")) } th scope="col" { (a.t("Received", "Reçu")) }
                    } }
                    tbody { @for h in &held.items { tr {
                        td { a href=(format!("{here}/moderation/messages/{}", h.id.get())) { (h.subject.as_deref().filter(|s| !s.is_empty()).unwrap_or("—")) } }
                        td { (h.from.as_deref().unwrap_or("—")) } td { (h.reason.as_str()) } td { (h.received_at.to_rfc3339()) }
                    } } }
                }
            }
        },
    )
}

async fn decide(state: AppState, a: Admin, domain: String, list: String, id: String, decision: Decision) -> Response {
    let back = format!("{}/moderation", list_path(&domain, &list));
    let parsed = (|| {
        let id = courrier_core::kernel::parse_positive_id(&id)
            .map(MemberId::from_stored)
            .map_err(|_| ApiError::new(Code::NotFound, "subscription not found"))?;
        Ok::<_, ApiError>((names(&domain, &list)?, id))
    })();
    let ((d, l), id) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, back, moderation::decide_subscription(&app, &p, &ctx, &d, &l, id, decision)?);
    see_other_to(&back)
}

async fn approve(
    State(s): State<AppState>,
    Path((d, l, id)): Path<(String, String, String)>,
    Posted(a, _): Posted,
) -> Response {
    decide(s, a, d, l, id, Decision::Approve).await
}

async fn reject(
    State(s): State<AppState>,
    Path((d, l, id)): Path<(String, String, String)>,
    Posted(a, _): Posted,
) -> Response {
    decide(s, a, d, l, id, Decision::Reject).await
}

fn held_id(raw: &str) -> Result<HeldId, ApiError> {
    HeldId::parse(raw).map_err(|_| ApiError::new(Code::NotFound, "held message not found"))
}

async fn held_page(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list, id)): Path<(String, String, String)>,
) -> Response {
    let queue = format!("{}/moderation", list_path(&domain, &list));
    let parsed = (|| Ok::<_, ApiError>((names(&domain, &list)?, held_id(&id)?)))();
    let ((d, l), id) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &queue),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let m = core!(a, queue, moderation::message(&app, &p, &ctx, &d, &l, id)?);
    let here = format!("{queue}/messages/{}", id.get());
    a.page(
        Section::Domains,
        &format!("{} · {}", a.t("Held post", "Message retenu"), m.post.subject.as_deref().unwrap_or("—")),
        html! {
            p { a href=(queue) { (a.t("Back to the queue", "Retour à la file")) } }
            dl {
                dt { (a.t("Why it is held", "Pourquoi il est retenu")) } dd { (m.post.reason.as_str()) }
                dt { (a.t("Received", "Reçu")) } dd { (m.post.received_at.to_rfc3339()) }
                @for (name, value) in m.headers.iter().filter(|(n, _)| ["from", "to", "cc", "subject", "date"].contains(&n.to_ascii_lowercase().as_str())) {
                    dt { (name) } dd { (value) }
                }
            }
            h2 { (a.t("Text", "Texte")) }
            pre { (m.text.as_deref().unwrap_or("")) }
            div class="row" {
                form method="post" action=(format!("{here}/approve")) {
                    (a.csrf_field())
                    button type="submit" { (a.t("Approve: post it", "Accepter : le diffuser")) }
                }
                form method="post" action=(format!("{here}/discard")) data-confirm=(a.t("Discard it?", "L'écarter ?")) {
                    (a.csrf_field())
                    button type="submit" class="secondary" { (a.t("Discard (nobody is told)", "Écarter (personne n'est prévenu)")) }
                }
            }
            form method="post" action=(format!("{here}/reject")) {
                (a.csrf_field())
                label for="reason" { (a.t("Reason told to the poster (optional)", "Raison donnée à l'auteur (facultative)")) }
                input id="reason" name="reason" type="text" maxlength="1000";
                button type="submit" class="danger" { (a.t("Reject", "Refuser")) }
            }
        },
    )
}

async fn decide_held(
    state: AppState,
    a: Admin,
    domain: String,
    list: String,
    id: String,
    decision: MessageDecision,
) -> Response {
    let queue = format!("{}/moderation", list_path(&domain, &list));
    let parsed = (|| Ok::<_, ApiError>((names(&domain, &list)?, held_id(&id)?)))();
    let ((d, l), id) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &queue),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, queue, moderation::decide_message(&app, &p, &ctx, &d, &l, id, decision)?);
    see_other_to(&queue)
}

async fn held_approve(
    State(s): State<AppState>,
    Path((d, l, id)): Path<(String, String, String)>,
    Posted(a, _): Posted,
) -> Response {
    decide_held(s, a, d, l, id, MessageDecision::Approve).await
}

async fn held_reject(
    State(s): State<AppState>,
    Path((d, l, id)): Path<(String, String, String)>,
    Posted(a, f): Posted,
) -> Response {
    decide_held(s, a, d, l, id, MessageDecision::Reject(f.get("reason"))).await
}

async fn held_discard(
    State(s): State<AppState>,
    Path((d, l, id)): Path<(String, String, String)>,
    Posted(a, _): Posted,
) -> Response {
    decide_held(s, a, d, l, id, MessageDecision::Discard).await
}

// ---------------------------------------------------------------------------------------------
// Mail-account credentials.

async fn credentials_page(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list)): Path<(String, String)>,
) -> Response {
    let here = list_path(&domain, &list);
    let (d, l) = match names(&domain, &list) {
        Ok(v) => v,
        Err(e) => return a.failure(e, &here),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let stored = core!(a, here, credentials::list(&app, &p, &ctx, &d, &l)?);
    a.page(
        Section::Domains,
        &format!("{} · {}@{}", a.t("Mail accounts", "Comptes de messagerie"), list, domain),
        html! {
            p { a href=(here) { (a.t("Back to the list", "Retour à la liste")) } }
            p class="note" { (a.t(
                "ingest: an IMAP mailbox read for the list's mail; submission: the SMTP account its copies go out through.",
                "ingest : une boîte IMAP lue pour le courrier de la liste ; submission : le compte SMTP par lequel partent ses copies.")) }
            @for kind in CredentialKind::ALL {
                @let c = stored.iter().find(|c| c.kind == kind);
                @let k = kind.as_str();
                section aria-labelledby=(format!("kind-{k}")) {
                    h2 id=(format!("kind-{k}")) { (k) }
                    @if let Some(c) = c {
                        dl {
                            dt { (a.t("Last success", "Dernier succès")) } dd { (c.last_ok_at.map(|t| t.to_rfc3339()).unwrap_or_else(|| "—".into())) }
                            dt { (a.t("Last error", "Dernière erreur")) } dd { @if let Some(e) = &c.last_error { span class="bad" { (e) } } @else { "—" } }
                        }
                        div class="row" {
                            form method="post" action=(format!("{here}/credentials/{k}/test")) {
                                (a.csrf_field())
                                button type="submit" class="secondary" aria-label=(format!("{} {k}", a.t("Test the account", "Tester le compte"))) { (a.t("Test the account", "Tester le compte")) }
                            }
                            form method="post" action=(format!("{here}/credentials/{k}/delete")) data-confirm=(a.t("Delete this account?", "Supprimer ce compte ?")) {
                                (a.csrf_field())
                                button type="submit" class="danger" aria-label=(format!("{} {k}", a.t("Delete", "Supprimer"))) { (a.t("Delete", "Supprimer")) }
                            }
                        }
                    } @else { (note(a.t("No account of this kind.", "Aucun compte de ce type."))) }
                    form method="post" action=(format!("{here}/credentials/{k}")) {
                        (a.csrf_field())
                        label for=(format!("{k}-host")) { (a.t("Host", "Hôte")) }
                        input id=(format!("{k}-host")) name="host" type="text" required value=(c.map(|c| c.host.as_str()).unwrap_or(""));
                        label for=(format!("{k}-port")) { (a.t("Port", "Port")) }
                        input id=(format!("{k}-port")) name="port" type="number" min="1" max="65535" required value=(c.map(|c| c.port.to_string()).unwrap_or_default());
                        label for=(format!("{k}-security")) { (a.t("Security", "Sécurité")) }
                        select
                            id=(format!("{k}-security")) name="security" {
                            @for s in ["tls", "starttls"] { option value=(s) selected[c.is_some_and(|c| c.security.as_str() == s)] { (s) } }
                        }
                        label for=(format!("{k}-username")) { (a.t("User name", "Identifiant")) }
                        input id=(format!("{k}-username")) name="username" type="text" required autocomplete="off" value=(c.map(|c| c.username.as_str()).unwrap_or(""));
                        label for=(format!("{k}-password")) { (a.t("Password (blank: keep the stored one)", "Mot de passe (vide : garder l'actuel)")) }
                        input id=(format!("{k}-password")) name="password" type="password" autocomplete="new-password";
                        @if kind == CredentialKind::Ingest {
                            label for=(format!("{k}-folder")) { (a.t("Folder", "Dossier")) }
                            input id=(format!("{k}-folder")) name="folder" type="text" value=(c.and_then(|c| c.folder.as_deref()).unwrap_or(credentials::DEFAULT_FOLDER));
                        }
                        button type="submit" { (a.t("Save the account", "Enregistrer le compte")) }
                    }
                }
            }
        },
    )
}

fn kind_of(raw: &str) -> Result<CredentialKind, ApiError> {
    CredentialKind::parse(raw).ok_or_else(|| ApiError::new(Code::NotFound, "no such kind of credential"))
}

async fn credential_set(
    State(state): State<AppState>,
    Path((domain, list, kind)): Path<(String, String, String)>,
    Posted(a, f): Posted,
) -> Response {
    let back = format!("{}/credentials", list_path(&domain, &list));
    let parsed = (|| {
        let port = f
            .get("port")
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| invalid("port must be a number from 1 to 65535"))?;
        let security = f
            .get("security")
            .as_deref()
            .and_then(Security::parse)
            .ok_or_else(|| invalid("security: tls or starttls"))?;
        let req = CredentialRequest {
            host: f.get("host").unwrap_or_default(),
            port,
            security,
            username: f.get("username").unwrap_or_default(),
            password: f.raw("password").filter(|p| !p.is_empty()).map(str::to_owned),
            folder: f.get("folder"),
        };
        Ok::<_, ApiError>((names(&domain, &list)?, kind_of(&kind)?, req))
    })();
    let ((d, l), kind, req) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, back, credentials::put(&app, &p, &ctx, &d, &l, kind, req)?);
    see_other_to(&back)
}

async fn credential_test(
    State(state): State<AppState>,
    Path((domain, list, kind)): Path<(String, String, String)>,
    Posted(a, _): Posted,
) -> Response {
    let back = format!("{}/credentials", list_path(&domain, &list));
    let parsed = (|| Ok::<_, ApiError>((names(&domain, &list)?, kind_of(&kind)?)))();
    let ((d, l), kind) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    // A refusal by the provider is a failure page with its words; the outcome is recorded either way.
    core!(a, back, credentials::test(&app, &p, &ctx, &d, &l, kind)?);
    see_other_to(&back)
}

async fn credential_delete(
    State(state): State<AppState>,
    Path((domain, list, kind)): Path<(String, String, String)>,
    Posted(a, _): Posted,
) -> Response {
    let back = format!("{}/credentials", list_path(&domain, &list));
    let parsed = (|| Ok::<_, ApiError>((names(&domain, &list)?, kind_of(&kind)?)))();
    let ((d, l), kind) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, back, credentials::delete(&app, &p, &ctx, &d, &l, kind)?);
    see_other_to(&back)
}
