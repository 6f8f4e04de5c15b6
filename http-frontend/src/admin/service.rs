//! The installation's other pages: webhooks (create: the secret shown once; the test ping and
//! what the receiver answered; the last error; delete), and the OCR service (documents kept and
//! failed, usage and plans, maintenance on and off). Each calls the core operation the API
//! handler or the CLI command of the same operation calls.

use super::{Admin, FORM_LIMIT, Form, ID, Posted, Section, admin_route, seg};
use crate::AppState;
use crate::blocking::run_blocking;
use crate::error::ApiError;
use crate::mailing::layout::{alert, note, see_other};
use crate::routes::Route;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use courrier_core::kernel::{Code, DomainName, EventName, ListName, Page};
use courrier_core::mailing::model::WebhookId;
use courrier_core::mailing::{domains, lists, webhooks};
use courrier_core::ocr::documents::{self, DocumentState};
use courrier_core::ocr::{maintenance, usage};
use maud::html;

pub static ROUTES: &[Route] = &[
    admin_route!(GET "/admin/webhooks", "adminWebhooks", "Webhooks: last success and error; create", &[], FORM_LIMIT,
        webhooks_page),
    admin_route!(POST "/admin/webhooks", "adminWebhookCreate", "Create a webhook: its secret shown once", &[],
        FORM_LIMIT, webhook_create),
    admin_route!(POST "/admin/webhooks/{id}/test", "adminWebhookTest", "Ping a webhook and show the answer", ID,
        FORM_LIMIT, webhook_test),
    admin_route!(POST "/admin/webhooks/{id}/delete", "adminWebhookDelete", "Delete a webhook", ID, FORM_LIMIT,
        webhook_delete),
    admin_route!(GET "/admin/ocr", "adminOcr", "The OCR service: maintenance, usage and plans, documents", &[],
        FORM_LIMIT, ocr_page),
    admin_route!(POST "/admin/ocr/maintenance", "adminMaintenance", "Maintenance on or off", &[], FORM_LIMIT,
        maintenance_submit),
    admin_route!(POST "/admin/ocr/plan", "adminPlan", "Set a user's monthly pages", &[], FORM_LIMIT, plan_submit),
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

fn time(t: Option<courrier_core::kernel::Timestamp>) -> String {
    t.map(|t| t.to_rfc3339()).unwrap_or_else(|| "—".into())
}

// ---------------------------------------------------------------------------------------------
// Webhooks.

async fn webhooks_page(State(state): State<AppState>, a: Admin) -> Response {
    let (app, p) = (state.mailing.clone(), a.p.clone());
    let found = core!(a, "/admin/", webhooks::list(&app, &p, Page::first(Page::MAX_LIMIT))?);
    a.page(
        Section::Webhooks,
        a.t("Webhooks", "Webhooks"),
        html! {
            @if found.items.is_empty() { (note(a.t("No webhook yet.", "Aucun webhook pour l'instant."))) }
            @for w in &found.items {
                section aria-labelledby=(format!("webhook-{}", w.id.get())) {
                    h2 id=(format!("webhook-{}", w.id.get())) { (w.url) }
                    dl {
                        dt { (a.t("Events", "Événements")) } dd { (w.events.iter().map(|e| e.as_str()).collect::<Vec<_>>().join(", ")) }
                        dt { (a.t("Last success", "Dernier succès")) } dd { (time(w.last_success_at)) }
                        dt { (a.t("Last error", "Dernière erreur")) } dd { @if let Some(e) = &w.last_error { span class="bad" { (e) } " (" (time(w.last_error_at)) ")" } @else { "—" } }
                    }
                    div class="row" {
                        form method="post" action=(format!("/admin/webhooks/{}/test", w.id.get())) {
                            (a.csrf_field())
                            button type="submit" class="secondary" aria-label=(format!("{} {}", a.t("Send a test ping", "Envoyer un ping de test"), w.url)) { (a.t("Send a test ping", "Envoyer un ping de test")) }
                        }
                        form method="post" action=(format!("/admin/webhooks/{}/delete", w.id.get())) data-confirm=(a.t("Delete this webhook?", "Supprimer ce webhook ?")) {
                            (a.csrf_field())
                            button type="submit" class="danger" aria-label=(format!("{} {}", a.t("Delete", "Supprimer"), w.url)) { (a.t("Delete", "Supprimer")) }
                        }
                    }
                }
            }
            h2 { (a.t("New webhook", "Nouveau webhook")) }
            form method="post" action="/admin/webhooks" {
                (a.csrf_field())
                label for="url" { (a.t("Address (https://…)", "Adresse (https://…)")) }
                input id="url" name="url" type="url" required;
                fieldset {
                    legend { (a.t("Events", "Événements")) }
                    @for e in EventName::ALL {
                        label { input type="checkbox" name="events" value=(e.as_str()); " " (e.as_str()) }
                    }
                }
                label for="domain" { (a.t("Only this domain (optional)", "Seulement ce domaine (facultatif)")) }
                input id="domain" name="domain" type="text";
                label for="list" { (a.t("Only this list of it (optional)", "Seulement cette liste du domaine (facultatif)")) }
                input id="list" name="list" type="text";
                button type="submit" { (a.t("Create the webhook", "Créer le webhook")) }
            }
        },
    )
}

async fn webhook_create(State(state): State<AppState>, Posted(a, f): Posted) -> Response {
    let back = "/admin/webhooks";
    let parsed = (|| {
        let events = f
            .all("events")
            .iter()
            .map(|e| EventName::parse(e).ok_or_else(|| invalid(format!("events: {e:?} is not an event"))))
            .collect::<Result<Vec<_>, _>>()?;
        let domain = f.get("domain").map(|d| DomainName::parse(&d)).transpose()?;
        let list = f.get("list").map(|l| ListName::parse(&l)).transpose()?;
        if list.is_some() && domain.is_none() {
            return Err(invalid("a list is named with its domain"));
        }
        Ok::<_, ApiError>((f.get("url").unwrap_or_default(), events, domain, list))
    })();
    let (url, events, domain, list) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    // The filter by names, found as the API's ids are (the same reads, the same refusals).
    let created = core!(a, back, {
        let domain_id = match &domain {
            Some(d) => Some(domains::get(&app, &p, &ctx, d)?.id),
            None => None,
        };
        let list_id = match (&domain, &list) {
            (Some(d), Some(l)) => Some(lists::get(&app, &p, &ctx, d, l)?.id),
            _ => None,
        };
        webhooks::create(&app, &p, &ctx, webhooks::NewWebhookRequest { url, events, domain_id, list_id })?
    });
    a.page(
        Section::Webhooks,
        a.t("Webhook created", "Webhook créé"),
        html! {
            (alert(a.t("Copy the signing secret now: it is shown this once and never again.",
                "Copiez le secret de signature maintenant : il n'est montré que cette fois.")))
            p { label for="secret" { (a.t("Secret of ", "Secret de ")) (created.webhook.url) }
                input id="secret" class="secret" type="text" readonly value=(created.secret); }
            p { a href="/admin/webhooks" { (a.t("Back to the webhooks", "Retour aux webhooks")) } }
        },
    )
}

fn webhook_id(raw: &str) -> Result<WebhookId, ApiError> {
    WebhookId::parse(raw).map_err(|_| ApiError::new(Code::NotFound, "webhook not found"))
}

async fn webhook_test(State(state): State<AppState>, Path(raw): Path<String>, Posted(a, _): Posted) -> Response {
    let back = "/admin/webhooks";
    let id = match webhook_id(&raw) {
        Ok(id) => id,
        Err(e) => return a.failure(e, back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let ping = core!(a, back, webhooks::test(&app, &p, &ctx, id)?);
    a.page(
        Section::Webhooks,
        a.t("Test ping", "Ping de test"),
        html! {
            @if ping.delivered { p class="ok" role="status" { (a.t("The receiver took the ping.", "Le destinataire a accepté le ping.")) } }
            @else { p class="bad" role="status" { (a.t("The ping was not taken.", "Le ping n'a pas été accepté.")) } }
            dl {
                dt { (a.t("HTTP status", "Statut HTTP")) } dd { (ping.status.map(|s| s.to_string()).unwrap_or_else(|| "—".into())) }
                dt { (a.t("Error", "Erreur")) } dd { (ping.error.as_deref().unwrap_or("—")) }
            }
            p { a href=(back) { (a.t("Back to the webhooks", "Retour aux webhooks")) } }
        },
    )
}

async fn webhook_delete(State(state): State<AppState>, Path(raw): Path<String>, Posted(a, _): Posted) -> Response {
    let back = "/admin/webhooks";
    let id = match webhook_id(&raw) {
        Ok(id) => id,
        Err(e) => return a.failure(e, back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, back, webhooks::delete(&app, &p, &ctx, id)?);
    see_other(back)
}

// ---------------------------------------------------------------------------------------------
// The OCR service.

async fn ocr_page(State(state): State<AppState>, a: Admin, RawQuery(raw): RawQuery) -> Response {
    let q = Form::parse(raw.as_deref().unwrap_or("")).unwrap_or(Form(Vec::new()));
    let who = q.get("email");
    let (app, p, asked) = (state.ocr.clone(), a.p.clone(), who.clone());
    let (mine, status, failed, kept, stats) = core!(a, "/admin/", {
        let mine = usage::subscription(&app, &p)?;
        let status = maintenance::status(&app)?;
        let first = Page::first(50);
        let failed = documents::in_state(&app, &p, DocumentState::Failed, first)?;
        let kept = documents::in_state(&app, &p, DocumentState::Recognized, first)?;
        let stats = match &asked {
            Some(e) => Some(usage::stats(&app, &p, e)?),
            None => None,
        };
        (mine, status, failed, kept, stats)
    });
    let on = matches!(status, maintenance::Maintenance::On { .. });
    let docs = |title: &str, list: &courrier_core::kernel::Paged<courrier_core::ocr::documents::Document>| {
        html! {
            h2 { (title) " (" (list.total) ")" }
            @if !list.items.is_empty() {
                table {
                    thead { tr { th scope="col" { "ocrId" } th scope="col" { (a.t("Pages", "Pages")) } th scope="col" { (a.t("Size", "Taille")) } th scope="col" { (a.t("Received", "Reçu")) } } }
                    tbody { @for d in &list.items { tr {
                        td { code { (d.ocr_id.as_str()) } } td { (d.pages) } td { (d.size_bytes) } td { (d.created_at.to_rfc3339()) }
                    } } }
                }
            }
        }
    };
    a.page(
        Section::Ocr,
        a.t("OCR service", "Service OCR"),
        html! {
            h2 { (a.t("Maintenance", "Maintenance")) }
            p role="status" { @if on { span class="bad" { (a.t("On: the OCR routes answer 503.", "Active : les routes OCR répondent 503.")) } }
                @else { span class="ok" { (a.t("Off: the service answers.", "Inactive : le service répond.")) } } }
            form method="post" action="/admin/ocr/maintenance" data-confirm=(a.t("Sure?", "Confirmer ?")) {
                (a.csrf_field())
                input type="hidden" name="state" value=(if on { "off" } else { "on" });
                button type="submit" class=(if on { "secondary" } else { "danger" }) {
                    @if on { (a.t("Turn maintenance off", "Désactiver la maintenance")) } @else { (a.t("Turn maintenance on", "Activer la maintenance")) }
                }
            }
            h2 { (a.t("Your usage this month", "Votre consommation ce mois-ci")) }
            dl {
                dt { (a.t("Plan", "Formule")) } dd { (mine.plan.name()) " · " (mine.plan.pages_per_month) " " (a.t("pages a month", "pages par mois")) }
                dt { (a.t("Month", "Mois")) } dd { (mine.period.month) }
                dt { (a.t("Documents", "Documents")) } dd { (mine.used.documents) }
                dt { (a.t("Pages", "Pages")) } dd { (mine.used.pages) }
            }
            h2 { (a.t("A user's usage and plan", "Consommation et formule d'un utilisateur")) }
            form method="get" action="/admin/ocr" role="search" {
                label for="email" { (a.t("Address", "Adresse")) }
                input id="email" name="email" type="email" value=(who.as_deref().unwrap_or("")) required;
                button type="submit" { (a.t("Show", "Afficher")) }
            }
            @if let Some(s) = &stats {
                p { b { (s.user.email.to_string()) } " · " (s.plan.name()) " · " (s.plan.pages_per_month) " " (a.t("pages a month", "pages par mois")) }
                table {
                    thead { tr { th scope="col" { (a.t("Month", "Mois")) } th scope="col" { (a.t("Documents", "Documents")) } th scope="col" { (a.t("Pages", "Pages")) } th scope="col" { (a.t("Cuts", "Découpes")) } } }
                    tbody { @for m in &s.months { tr { td { (m.month) } td { (m.documents) } td { (m.pages) } td { (m.cuts) } } } }
                }
                form method="post" action="/admin/ocr/plan" {
                    (a.csrf_field())
                    input type="hidden" name="email" value=(s.user.email.to_string());
                    label for="pages" { (a.t("Pages a month (blank: the default plan)", "Pages par mois (vide : la formule par défaut)")) }
                    input id="pages" name="pages" type="number" min="0";
                    button type="submit" { (a.t("Set the plan", "Enregistrer la formule")) }
                }
            }
            (docs(a.t("Documents read", "Documents lus"), &kept))
            (docs(a.t("Documents kept as failed", "Documents gardés en échec"), &failed))
        },
    )
}

async fn maintenance_submit(State(state): State<AppState>, Posted(a, f): Posted) -> Response {
    let on = match f.get("state").as_deref() {
        Some("on") => true,
        Some("off") => false,
        _ => return a.failure(invalid("state: on or off"), "/admin/ocr"),
    };
    let (app, p, ctx) = (state.ocr.clone(), a.p.clone(), a.ctx.clone());
    core!(a, "/admin/ocr", maintenance::switch(&app, &p, &ctx, on)?);
    see_other("/admin/ocr")
}

async fn plan_submit(State(state): State<AppState>, Posted(a, f): Posted) -> Response {
    let email = f.get("email").unwrap_or_default();
    let back = format!("/admin/ocr?email={}", seg(&email));
    let pages = match f.get("pages").map(|v| v.parse::<u32>()).transpose() {
        Ok(p) => p,
        Err(_) => return a.failure(invalid("pages: a whole number"), &back),
    };
    let (app, p, ctx, address) = (state.ocr.clone(), a.p.clone(), a.ctx.clone(), email.clone());
    core!(a, back, usage::set_plan_as(&app, &p, &ctx, &address, pages)?);
    crate::mailing::layout::see_other_to(&back)
}
