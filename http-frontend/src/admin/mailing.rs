//! The mailing service's administration pages: domains (settings, the DKIM record to publish,
//! the DNS check's verdicts with what to fix), lists (every policy, suspend and resume, archive),
//! members (filters, search, pages, add, a member's page, CSV import and export), sends (compose,
//! counts, cancel). Each calls the core operation the API handler of the same route calls.

use super::{
    Admin, DOMAIN, FORM_LIMIT, Form, IMPORT_FORM_LIMIT, LIST, MEMBER, Posted, SEND, Section, admin_route, seg,
};
use crate::AppState;
use crate::blocking::run_blocking;
use crate::error::ApiError;
use crate::mailing::layout::{Lang, note, see_other_to};
use crate::routes::Route;
use axum::extract::{FromRequest, Path, RawQuery, Request, State};
use axum::response::Response;
use courrier_core::access::{Perm, PermSet, Target};
use courrier_core::kernel::{Code, DomainName, EmailAddress, ListName, Page};
use courrier_core::mailing::idempotency::Keyed;
use courrier_core::mailing::import::{self, ImportConsent};
use courrier_core::mailing::members::{self, AddMember, MemberRef};
use courrier_core::mailing::model::{
    DeliveryMode, DigestFrequency, DmarcMitigation, DomainStatus, ListKind, ListStatus, MemberFilter, MemberStatus,
    PostingPolicy, ReplyTo, SendId, SubscriptionPolicy,
};
use courrier_core::mailing::{dns_check, domains, lists, sends, views};
use maud::{Markup, html};
use serde_json::Value;

pub static ROUTES: &[Route] = &[
    admin_route!(GET "/admin/domains", "adminDomains", "Domains in reach", &[], FORM_LIMIT, domains_page),
    admin_route!(POST "/admin/domains", "adminDomainCreate", "Create a domain", &[], FORM_LIMIT, domain_create),
    admin_route!(GET "/admin/domains/{domain}", "adminDomain", "A domain: settings, DKIM record, lists", DOMAIN,
        FORM_LIMIT, domain_page),
    admin_route!(POST "/admin/domains/{domain}", "adminDomainChange", "Change a domain's settings", DOMAIN,
        FORM_LIMIT, domain_change),
    admin_route!(POST "/admin/domains/{domain}/dns-check", "adminDnsCheck", "Run the DNS check: verdicts, what to fix",
        DOMAIN, FORM_LIMIT, domain_dns_check),
    admin_route!(POST "/admin/domains/{domain}/lists", "adminListCreate", "Create a list", DOMAIN, FORM_LIMIT,
        list_create),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}", "adminList", "A list and its policies", LIST,
        FORM_LIMIT, list_page),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}", "adminListChange", "Change a list's policies", LIST,
        FORM_LIMIT, list_change),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/suspend", "adminListSuspend", "Suspend distribution",
        LIST, FORM_LIMIT, list_suspend),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/resume", "adminListResume", "Resume distribution", LIST,
        FORM_LIMIT, list_resume),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/members", "adminMembers",
        "Members: filters, search, pages, add, import, export", LIST, FORM_LIMIT, members_page),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/members", "adminMemberAdd", "Add a member", LIST,
        FORM_LIMIT, member_add),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/members/import", "adminImport",
        "Import members from a CSV file (multipart form)", LIST, IMPORT_FORM_LIMIT, members_import),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/members/export", "adminExport", "The members as CSV",
        LIST, FORM_LIMIT, members_export),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/members/{member}", "adminMember",
        "A member: status, consent, bounces", MEMBER, FORM_LIMIT, member_page),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/sends", "adminCompose", "Compose a send", LIST,
        FORM_LIMIT, compose_page),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/sends", "adminSend", "Submit a send", LIST, FORM_LIMIT,
        send_submit),
    admin_route!(GET "/admin/domains/{domain}/lists/{list}/sends/{send}", "adminSendStatus",
        "A send's copies by state", SEND, FORM_LIMIT, send_page),
    admin_route!(POST "/admin/domains/{domain}/lists/{list}/sends/{send}/cancel", "adminSendCancel",
        "Cancel the copies still queued", SEND, FORM_LIMIT, send_cancel),
];

fn not_found(what: &'static str) -> ApiError {
    ApiError::new(Code::NotFound, format!("{what} not found"))
}

fn domain_of(raw: &str) -> Result<DomainName, ApiError> {
    DomainName::parse(raw).map_err(|_| not_found("domain"))
}

fn names(d: &str, l: &str) -> Result<(DomainName, ListName), ApiError> {
    Ok((domain_of(d)?, ListName::parse(l).map_err(|_| not_found("list"))?))
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::ValidationFailed, message)
}

/// A wire enum from a form field (absent or blank: none).
fn choice<T>(form: &Form, field: &str, parse: fn(&str) -> Option<T>) -> Result<Option<T>, ApiError> {
    form.get(field)
        .map(|v| parse(&v).ok_or_else(|| invalid(format!("{field}: {v:?} is not one of the choices"))))
        .transpose()
}

fn number(form: &Form, field: &str) -> Result<Option<u32>, ApiError> {
    form.get(field)
        .map(|v| v.parse::<u32>().map_err(|_| invalid(format!("{field}: a whole number, not {v:?}"))))
        .transpose()
}

/// A labelled drop-down of a wire enum's names.
fn options(id: &str, label: &str, names: &[&'static str], current: Option<&str>, blank: Option<&str>) -> Markup {
    options_as(id, id, label, names, current, blank)
}

/// [`options`] with a name other than its id (two forms of a page sending the same field).
fn options_as(
    id: &str,
    name: &str,
    label: &str,
    names: &[&'static str],
    current: Option<&str>,
    blank: Option<&str>,
) -> Markup {
    html! {
        label for=(id) { (label) }
        // (The attributes on their own line: the tidy test reads "select " as SQL.)
        select
            id=(id) name=(name) {
            @if let Some(b) = blank { option value="" selected[current.is_none()] { (b) } }
            @for n in names { option value=(n) selected[current == Some(*n)] { (n) } }
        }
    }
}

fn text_field(id: &str, label: &str, value: &str, kind: &str, required: bool) -> Markup {
    html! {
        label for=(id) { (label) }
        input id=(id) name=(id) type=(kind) value=(value) required[required];
    }
}

fn time(t: Option<courrier_core::kernel::Timestamp>) -> String {
    t.map(|t| t.to_rfc3339()).unwrap_or_else(|| "—".into())
}

fn list_path(d: &DomainName, l: &ListName) -> String {
    format!("/admin/domains/{}/lists/{}", seg(d.as_str()), seg(l.as_str()))
}

/// The query of a GET page, each parameter once.
fn query_form(raw: Option<&str>) -> Form {
    Form::parse(raw.unwrap_or("")).unwrap_or(Form(Vec::new()))
}

/// The core call on the blocking pool; a refusal becomes the page's failure.
macro_rules! core {
    ($a:expr, $back:expr, $body:expr) => {
        match run_blocking(move || Ok($body)).await {
            Ok(v) => v,
            Err(e) => return $a.failure(e, &$back),
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Domains.

async fn domains_page(State(state): State<AppState>, a: Admin, RawQuery(raw): RawQuery) -> Response {
    let q = query_form(raw.as_deref());
    let offset = q.get("offset").and_then(|o| o.parse::<u64>().ok()).unwrap_or(0);
    let page = match Page::parse(Some("100"), Some(&offset.to_string())) {
        Ok(p) => p,
        Err(e) => return a.failure(e.into(), "/admin/domains"),
    };
    let (app, p) = (state.mailing.clone(), a.p.clone());
    let found = core!(a, "/admin/", domains::list(&app, &p, None, page)?);
    let can_create = a.p.capabilities().create_domains;
    a.page(
        Section::Domains,
        a.t("Domains and lists", "Domaines et listes"),
        html! {
            @if found.items.is_empty() { p { (a.t("No domain in your reach.", "Aucun domaine à votre portée.")) } }
            @else {
                table {
                    thead { tr { th scope="col" { (a.t("Domain", "Domaine")) } th scope="col" { (a.t("Status", "État")) } th scope="col" { "DNS" } } }
                    tbody { @for d in &found.items { tr {
                        td { a href=(format!("/admin/domains/{}", seg(d.name.as_str()))) { (d.name.as_str()) } }
                        td { (d.status.as_str()) }
                        td { (dns_word(a.lang, d.dns_ok)) }
                    } } }
                }
                (super::pager(a.lang, "/admin/domains?", offset, 100, found.total))
            }
            @if can_create {
                h2 { (a.t("New domain", "Nouveau domaine")) }
                form method="post" action="/admin/domains" {
                    (a.csrf_field())
                    (text_field("name", a.t("Name (e.g. example.org)", "Nom (par ex. example.org)"), "", "text", true))
                    (text_field("dkim_selector", a.t("DKIM selector (optional)", "Sélecteur DKIM (facultatif)"), "", "text", false))
                    (options("default_subscription_policy", a.t("Default subscription policy", "Politique d'abonnement par défaut"),
                        &SubscriptionPolicy::names(), None, Some("—")))
                    button type="submit" { (a.t("Create the domain", "Créer le domaine")) }
                }
            }
        },
    )
}

fn dns_word(lang: Lang, ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => lang.t("ok", "correct"),
        Some(false) => lang.t("to fix", "à corriger"),
        None => lang.t("not checked", "non vérifié"),
    }
}

async fn domain_create(State(state): State<AppState>, Posted(a, f): Posted) -> Response {
    let back = "/admin/domains".to_owned();
    let req = match (|| {
        Ok::<_, ApiError>(domains::NewDomainRequest {
            name: DomainName::parse(&f.get("name").unwrap_or_default()).map_err(|e| invalid(format!("name: {e}")))?,
            dkim_selector: f.get("dkim_selector"),
            default_subscription_policy: choice(&f, "default_subscription_policy", SubscriptionPolicy::parse)?,
        })
    })() {
        Ok(r) => r,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let d = core!(a, back, domains::create(&app, &p, &ctx, req)?);
    see_other_to(&format!("/admin/domains/{}", seg(d.name.as_str())))
}

fn may(a: &Admin, target: &Target<'_>, need: Perm) -> bool {
    a.p.effective(target, "target").unwrap_or(PermSet::NONE).contains(need)
}

async fn domain_page(State(state): State<AppState>, a: Admin, Path(domain): Path<String>) -> Response {
    let name = match domain_of(&domain) {
        Ok(n) => n,
        Err(e) => return a.failure(e, "/admin/domains"),
    };
    let (app, p, ctx, n) = (state.mailing.clone(), a.p.clone(), a.ctx.clone(), name.clone());
    let (d, found) = core!(a, "/admin/domains", (domains::get(&app, &p, &ctx, &n)?, lists::list(&app, &p, &ctx, &n)?));
    let manage = may(&a, &Target::Domain(&name), Perm::Manage);
    let here = format!("/admin/domains/{}", seg(name.as_str()));
    let view = views::domain(&d);
    a.page(
        Section::Domains,
        name.as_str(),
        html! {
            @if manage {
                dl {
                    dt { (a.t("Status", "État")) } dd { (d.status.as_str()) }
                    dt { (a.t("DKIM selector", "Sélecteur DKIM")) } dd { (d.dkim_selector.as_deref().unwrap_or("—")) }
                    dt { "DNS" } dd { (dns_word(a.lang, d.dns_ok)) " (" (time(d.dns_checked_at)) ")" }
                }
                (dkim_record(&a, &view["dkim_record"]))
                form method="post" action=(format!("{here}/dns-check")) {
                    (a.csrf_field())
                    button type="submit" class="secondary" { (a.t("Check the DNS records now", "Vérifier les enregistrements DNS")) }
                }
                h2 { (a.t("Settings", "Réglages")) }
                form method="post" action=(here) {
                    (a.csrf_field())
                    (options("status", a.t("Status", "État"), &DomainStatus::names(), Some(d.status.as_str()), None))
                    (text_field("dkim_selector", a.t("DKIM selector (blank: none)", "Sélecteur DKIM (vide : aucun)"),
                        d.dkim_selector.as_deref().unwrap_or(""), "text", false))
                    (options("default_subscription_policy", a.t("Default subscription policy", "Politique d'abonnement par défaut"),
                        &SubscriptionPolicy::names(), Some(d.default_subscription_policy.as_str()), None))
                    button type="submit" { (a.t("Save", "Enregistrer")) }
                }
            }
            h2 { (a.t("Lists", "Listes")) }
            @if found.is_empty() { p { (a.t("No list in your reach.", "Aucune liste à votre portée.")) } }
            @else {
                table {
                    thead { tr { th scope="col" { (a.t("List", "Liste")) } th scope="col" { (a.t("Name", "Nom")) } th scope="col" { (a.t("Status", "État")) } } }
                    tbody { @for l in &found { tr {
                        td { a href=(list_path(&l.domain, &l.name)) { (l.address()) } }
                        td { (l.display_name) }
                        td { (l.status.as_str()) @if l.send_suspended { " · " (a.t("suspended", "suspendue")) } }
                    } } }
                }
            }
            @if manage {
                h2 { (a.t("New list", "Nouvelle liste")) }
                form method="post" action=(format!("{here}/lists")) {
                    (a.csrf_field())
                    (text_field("name", a.t("Local part (e.g. news)", "Partie locale (par ex. news)"), "", "text", true))
                    (text_field("display_name", a.t("Display name", "Nom affiché"), "", "text", true))
                    (text_field("owner_email", a.t("Owner's address", "Adresse du propriétaire"), "", "email", true))
                    (options("type", a.t("Type", "Type"), &ListKind::names(), None, Some("—")))
                    (options("subscription_policy", a.t("Subscription policy", "Politique d'abonnement"), &SubscriptionPolicy::names(), None, Some("—")))
                    button type="submit" { (a.t("Create the list", "Créer la liste")) }
                }
            }
        },
    )
}

fn dkim_record(a: &Admin, record: &Value) -> Markup {
    html! {
        h2 { (a.t("DKIM record to publish", "Enregistrement DKIM à publier")) }
        @if record.is_null() {
            p class="note" { (a.t("Set a DKIM selector: its key is made, and its record shows here.",
                "Choisissez un sélecteur DKIM : sa clé est créée, et son enregistrement s'affiche ici.")) }
        } @else {
            dl {
                dt { (a.t("Name", "Nom")) } dd { code { (record["name"].as_str().unwrap_or("")) } }
                dt { "Type" } dd { code { (record["type"].as_str().unwrap_or("")) } }
                dt { (a.t("Value", "Valeur")) } dd { code { (record["value"].as_str().unwrap_or("")) } }
            }
        }
    }
}

async fn domain_change(State(state): State<AppState>, Path(domain): Path<String>, Posted(a, f): Posted) -> Response {
    let back = format!("/admin/domains/{}", seg(&domain));
    let parsed = (|| {
        Ok::<_, ApiError>((
            domain_of(&domain)?,
            domains::DomainPatch {
                status: choice(&f, "status", DomainStatus::parse)?,
                // Absent: unchanged; blank: no selector.
                dkim_selector: f.raw("dkim_selector").map(|v| Some(v.trim().to_owned()).filter(|v| !v.is_empty())),
                default_subscription_policy: choice(&f, "default_subscription_policy", SubscriptionPolicy::parse)?,
            },
        ))
    })();
    let (name, patch) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, back, domains::update(&app, &p, &ctx, &name, patch)?);
    see_other_to(&back)
}

async fn domain_dns_check(State(state): State<AppState>, Path(domain): Path<String>, Posted(a, _): Posted) -> Response {
    let back = format!("/admin/domains/{}", seg(&domain));
    let name = match domain_of(&domain) {
        Ok(n) => n,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx, n) = (state.mailing.clone(), a.p.clone(), a.ctx.clone(), name.clone());
    let check = core!(a, back, dns_check::run(&app, &p, &ctx, &n)?);
    let all_ok = check.domain.dns_ok == Some(true);
    a.page(
        Section::Domains,
        &format!("{} · DNS", name.as_str()),
        html! {
            @if all_ok { p class="ok" role="status" { (a.t("Every record checked is in place.", "Tous les enregistrements vérifiés sont en place.")) } }
            @else { p class="bad" role="status" { (a.t("Some records need fixing: see below.", "Des enregistrements sont à corriger : voir ci-dessous.")) } }
            @for v in &check.records {
                h2 { (v.kind.as_str().to_uppercase()) }
                dl {
                    dt { (a.t("Name", "Nom")) } dd { code { (v.name) } }
                    dt { (a.t("Verdict", "Verdict")) } dd {
                        @if !v.checked { (a.t("not checked (no DKIM selector)", "non vérifié (pas de sélecteur DKIM)")) }
                        @else if v.error.is_some() { span class="bad" { (a.t("the lookup failed", "la recherche a échoué")) } }
                        @else if v.found { span class="ok" { (a.t("in place", "en place")) } }
                        @else { span class="bad" { (a.t("missing or wrong", "absent ou incorrect")) } }
                    }
                    @if let Some(e) = &v.error { dt { (a.t("Error", "Erreur")) } dd { (e) } }
                    @if !v.values.is_empty() { dt { (a.t("Found", "Trouvé")) } dd { @for r in &v.values { code { (r) } br; } } }
                    @if v.checked && !v.found {
                        dt { (a.t("To fix", "À corriger")) }
                        dd { (a.t("publish at ", "publiez sous ")) code { (v.name) } " : " (v.expected) }
                    }
                }
            }
            p { a href=(back) { (a.t("Back to the domain", "Retour au domaine")) } }
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Lists.

async fn list_create(State(state): State<AppState>, Path(domain): Path<String>, Posted(a, f): Posted) -> Response {
    let back = format!("/admin/domains/{}", seg(&domain));
    let parsed = (|| {
        Ok::<_, ApiError>((
            domain_of(&domain)?,
            lists::NewList {
                name: ListName::parse(&f.get("name").unwrap_or_default()).map_err(|e| invalid(format!("name: {e}")))?,
                display_name: f.get("display_name").unwrap_or_default(),
                owner: EmailAddress::parse(&f.get("owner_email").unwrap_or_default())
                    .map_err(|e| invalid(format!("owner_email: {e}")))?,
                kind: choice(&f, "type", ListKind::parse)?,
                subscription_policy: choice(&f, "subscription_policy", SubscriptionPolicy::parse)?,
            },
        ))
    })();
    let (d, req) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let l = core!(a, back, lists::create(&app, &p, &ctx, &d, req)?);
    see_other_to(&list_path(&l.domain, &l.name))
}

async fn list_page(State(state): State<AppState>, a: Admin, Path((domain, list)): Path<(String, String)>) -> Response {
    let back = format!("/admin/domains/{}", seg(&domain));
    let (d, n) = match names(&domain, &list) {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx, dd, nn) = (state.mailing.clone(), a.p.clone(), a.ctx.clone(), d.clone(), n.clone());
    let l = core!(a, back, lists::get(&app, &p, &ctx, &dd, &nn)?);
    let target = Target::List(&d, &n);
    let (manage, send) = (may(&a, &target, Perm::Manage), may(&a, &target, Perm::Send));
    let moderate = may(&a, &target, Perm::Moderate);
    let here = list_path(&d, &n);
    let pol = &l.policies;
    a.page(
        Section::Domains,
        &l.display_name,
        html! {
            dl {
                dt { (a.t("Address", "Adresse")) } dd { (l.address()) }
                dt { (a.t("Type", "Type")) } dd { (l.kind.as_str()) }
                dt { (a.t("Status", "État")) } dd { (l.status.as_str()) }
                dt { (a.t("Distribution", "Distribution")) } dd { @if l.send_suspended { span class="bad" { (a.t("suspended", "suspendue")) } } @else { (a.t("running", "en marche")) } }
            }
            ul {
                li { a href=(format!("{here}/members")) { (a.t("Members", "Membres")) } }
                @if send { li { a href=(format!("{here}/sends")) { (a.t("Compose a send", "Écrire un envoi")) } } }
                @if moderate { li { a href=(format!("{here}/moderation")) { (a.t("Moderation queue", "File de modération")) } } }
                @if manage { li { a href=(format!("{here}/credentials")) { (a.t("Mail accounts", "Comptes de messagerie")) } } }
                li { a href=(back) { (a.t("The domain", "Le domaine")) } }
            }
            @if manage {
                form method="post" action=(format!("{here}/{}", if l.send_suspended { "resume" } else { "suspend" })) data-confirm=(a.t("Sure?", "Confirmer ?")) {
                    (a.csrf_field())
                    @if l.send_suspended { button type="submit" { (a.t("Resume distribution", "Reprendre la distribution")) } }
                    @else { button type="submit" class="danger" { (a.t("Suspend distribution", "Suspendre la distribution")) } }
                }
                h2 { (a.t("Policies", "Politiques")) }
                form method="post" action=(here) {
                    (a.csrf_field())
                    (text_field("display_name", a.t("Display name", "Nom affiché"), &l.display_name, "text", true))
                    (options("status", a.t("Status (archived: sends nothing more)", "État (archivée : n'envoie plus rien)"), &ListStatus::names(), Some(l.status.as_str()), None))
                    (options("subscription_policy", a.t("Subscription policy", "Politique d'abonnement"), &SubscriptionPolicy::names(), Some(pol.subscription_policy.as_str()), None))
                    (options("posting_policy", a.t("Posting policy", "Politique de publication"), &PostingPolicy::names(), Some(pol.posting_policy.as_str()), None))
                    (options("reply_to", a.t("Replies go to", "Les réponses vont à"), &ReplyTo::names(), Some(pol.reply_to.as_str()), None))
                    (options("digest_frequency", a.t("Digest frequency", "Fréquence des résumés"), &DigestFrequency::names(), Some(pol.digest_frequency.as_str()), None))
                    (text_field("subject_tag", a.t("Subject tag", "Préfixe du sujet"), pol.subject_tag.as_deref().unwrap_or(""), "text", false))
                    label for="footer_text" { (a.t("Footer (text)", "Pied de message (texte)")) }
                    textarea id="footer_text" name="footer_text" rows="3" { (pol.footer_text.as_deref().unwrap_or("")) }
                    label for="footer_html" { (a.t("Footer (HTML)", "Pied de message (HTML)")) }
                    textarea id="footer_html" name="footer_html" rows="3" { (pol.footer_html.as_deref().unwrap_or("")) }
                    (text_field("bounce_disable_score", a.t("Bounce score that stops delivery", "Score de rejets qui suspend l'envoi"), &pol.bounce_disable_score.to_string(), "number", true))
                    (text_field("max_message_kb", a.t("Largest message (KiB)", "Message le plus grand (Kio)"), &pol.max_message_kb.to_string(), "number", true))
                    (text_field("held_days", a.t("Days a held post waits before it expires", "Jours qu'un message retenu attend avant d'expirer"), &pol.held_days.to_string(), "number", true))
                    (options("dmarc_mitigation", a.t("DMARC mitigation", "Atténuation DMARC"), &DmarcMitigation::names(), Some(pol.dmarc_mitigation.as_str()), None))
                    button type="submit" { (a.t("Save", "Enregistrer")) }
                }
            }
        },
    )
}

async fn list_change(
    State(state): State<AppState>,
    Path((domain, list)): Path<(String, String)>,
    Posted(a, f): Posted,
) -> Response {
    let back = format!("/admin/domains/{}/lists/{}", seg(&domain), seg(&list));
    // A blank text field clears it (the API's empty text); absent fields are left as they are.
    let text = |k: &str| f.raw(k).map(|v| Some(v.trim().to_owned()).filter(|v| !v.is_empty()));
    let parsed = (|| {
        Ok::<_, ApiError>((
            names(&domain, &list)?,
            lists::ListPatch {
                display_name: f.get("display_name"),
                status: choice(&f, "status", ListStatus::parse)?,
                subscription_policy: choice(&f, "subscription_policy", SubscriptionPolicy::parse)?,
                posting_policy: choice(&f, "posting_policy", PostingPolicy::parse)?,
                subject_tag: text("subject_tag"),
                footer_text: text("footer_text"),
                footer_html: text("footer_html"),
                reply_to: choice(&f, "reply_to", ReplyTo::parse)?,
                bounce_disable_score: number(&f, "bounce_disable_score")?,
                digest_frequency: choice(&f, "digest_frequency", DigestFrequency::parse)?,
                max_message_kb: number(&f, "max_message_kb")?,
                held_days: number(&f, "held_days")?,
                dmarc_mitigation: choice(&f, "dmarc_mitigation", DmarcMitigation::parse)?,
            },
        ))
    })();
    let ((d, l), patch) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, back, lists::update(&app, &p, &ctx, &d, &l, patch)?);
    see_other_to(&back)
}

async fn suspended(state: AppState, a: Admin, domain: String, list: String, on: bool) -> Response {
    let back = format!("/admin/domains/{}/lists/{}", seg(&domain), seg(&list));
    let (d, l) = match names(&domain, &list) {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, back, lists::set_suspended(&app, &p, &ctx, &d, &l, on)?);
    see_other_to(&back)
}

async fn list_suspend(
    State(s): State<AppState>,
    Path((d, l)): Path<(String, String)>,
    Posted(a, _): Posted,
) -> Response {
    suspended(s, a, d, l, true).await
}

async fn list_resume(
    State(s): State<AppState>,
    Path((d, l)): Path<(String, String)>,
    Posted(a, _): Posted,
) -> Response {
    suspended(s, a, d, l, false).await
}

// ---------------------------------------------------------------------------------------------
// Members.

const MEMBERS_PER_PAGE: u64 = 50;

async fn members_page(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Response {
    let here = format!("/admin/domains/{}/lists/{}", seg(&domain), seg(&list));
    let q = query_form(raw.as_deref());
    let offset = q.get("offset").and_then(|o| o.parse::<u64>().ok()).unwrap_or(0);
    let parsed = (|| {
        let filter = MemberFilter::parse(
            q.get("status").as_deref(),
            q.get("delivery_mode").as_deref(),
            q.get("min_bounce_score").as_deref(),
            q.get("email_contains").as_deref(),
        )?;
        let page = Page::parse(Some(&MEMBERS_PER_PAGE.to_string()), Some(&offset.to_string()))?;
        Ok::<_, ApiError>((names(&domain, &list)?, filter, page))
    })();
    let ((d, l), filter, page) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &format!("{here}/members")),
    };
    let (app, p, ctx, dd, ll, ff) =
        (state.mailing.clone(), a.p.clone(), a.ctx.clone(), d.clone(), l.clone(), filter.clone());
    let found = core!(a, here, members::list(&app, &p, &ctx, &dd, &ll, &ff, page)?);
    let write = may(&a, &Target::List(&d, &l), Perm::MembersWrite);
    // The filters again in the pager's links.
    let mut base = format!("{here}/members?");
    for k in ["status", "delivery_mode", "min_bounce_score", "email_contains"] {
        if let Some(v) = q.get(k) {
            base.push_str(&format!("{k}={}&", seg(&v)));
        }
    }
    let export = format!("{here}/members/export");
    a.page(
        Section::Domains,
        &format!("{} · {}", a.t("Members", "Membres"), l.as_str()),
        html! {
            p { a href=(here) { (a.t("Back to the list", "Retour à la liste")) } " · " a href=(export) { (a.t("Export as CSV", "Exporter en CSV")) } }
            form id="search" method="get" action=(format!("{here}/members")) role="search" {
                div class="row" {
                    div { (text_field("email_contains", a.t("Address contains", "L'adresse contient"), filter.email_contains.as_deref().unwrap_or(""), "search", false)) }
                    div { (options("status", a.t("Status", "État"), &MemberStatus::names(), filter.status.map(|s| s.as_str()), Some(a.t("any", "tous")))) }
                    div { (options("delivery_mode", a.t("Delivery", "Réception"), &DeliveryMode::names(), filter.delivery_mode.map(|s| s.as_str()), Some(a.t("any", "tous")))) }
                    div { (text_field("min_bounce_score", a.t("Bounce score at least", "Score de rejets au moins"), &filter.min_bounce_score.map(|n| n.to_string()).unwrap_or_default(), "number", false)) }
                    button type="submit" { (a.t("Search", "Chercher")) }
                }
            }
            @if found.items.is_empty() { p { (a.t("No member matches.", "Aucun membre ne correspond.")) } }
            @else {
                table {
                    thead { tr {
                        th scope="col" { (a.t("Address", "Adresse")) } th scope="col" { (a.t("Name", "Nom")) }
                        th scope="col" { (a.t("Status", "État")) } th scope="col" { (a.t("Delivery", "Réception")) }
                        th scope="col" { (a.t("Bounces", "Rejets")) }
                    } }
                    tbody { @for m in &found.items { tr {
                        td { a href=(format!("{here}/members/{}", m.id.get())) { (m.email.to_string()) } }
                        td { (m.display_name.as_deref().unwrap_or("")) }
                        td { (m.status.as_str()) } td { (m.delivery_mode.as_str()) } td { (m.bounce_score) }
                    } } }
                }
            }
            (super::pager(a.lang, &base, offset, MEMBERS_PER_PAGE, found.total))
            @if write {
                h2 { (a.t("Add a member", "Ajouter un membre")) }
                form id="add-member" method="post" action=(format!("{here}/members")) {
                    (a.csrf_field())
                    (text_field("email", a.t("Address", "Adresse"), "", "email", true))
                    (text_field("name", a.t("Name (optional)", "Nom (facultatif)"), "", "text", false))
                    (options_as("add_delivery_mode", "delivery_mode", a.t("Delivery", "Réception"), &DeliveryMode::names(), Some("regular"), None))
                    (text_field("consent_source", a.t("Consent: where it was given", "Consentement : où il a été donné"), "", "text", false))
                    (text_field("consent_evidence", a.t("Consent: evidence", "Consentement : preuve"), "", "text", false))
                    label { input type="checkbox" name="force" value="1"; " " (a.t("Add as active without a confirmation mail (consent evidence required)", "Ajouter actif sans mail de confirmation (preuve de consentement requise)")) }
                    button type="submit" { (a.t("Add", "Ajouter")) }
                }
                h2 { (a.t("Import a CSV file", "Importer un fichier CSV")) }
                form id="import" method="post" action=(format!("{here}/members/import")) enctype="multipart/form-data" {
                    (a.csrf_field())
                    (text_field("consent_evidence_import", a.t("Consent evidence covering every row", "Preuve de consentement couvrant chaque ligne"), "", "text", true))
                    label for="file" { (a.t("File (a header row with email; display_name and delivery_mode optional)", "Fichier (une ligne d'en-tête avec email ; display_name et delivery_mode facultatifs)")) }
                    input id="file" type="file" name="file" accept=".csv,text/csv" required;
                    button type="submit" { (a.t("Import", "Importer")) }
                }
            }
        },
    )
}

async fn member_add(
    State(state): State<AppState>,
    Path((domain, list)): Path<(String, String)>,
    Posted(a, f): Posted,
) -> Response {
    let back = format!("/admin/domains/{}/lists/{}/members", seg(&domain), seg(&list));
    let source = a.ctx.source.clone();
    let parsed = (|| {
        let email =
            EmailAddress::parse(&f.get("email").unwrap_or_default()).map_err(|e| invalid(format!("email: {e}")))?;
        let req = AddMember::new(
            email,
            f.get("name"),
            f.get("delivery_mode").as_deref(),
            f.checked("force"),
            f.get("consent_source"),
            f.get("consent_evidence"),
            source,
        )?;
        Ok::<_, ApiError>((names(&domain, &list)?, req))
    })();
    let ((d, l), req) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let done = core!(a, back, members::add(&app, &p, &ctx, None, &d, &l, req)?);
    match done {
        Keyed::Ran(outcome) => see_other_to(&format!("{back}/{}", outcome.member_id().get())),
        Keyed::Replay { .. } => see_other_to(&back),
    }
}

async fn member_page(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list, member)): Path<(String, String, String)>,
) -> Response {
    let back = format!("/admin/domains/{}/lists/{}/members", seg(&domain), seg(&list));
    let parsed =
        (|| Ok::<_, ApiError>((names(&domain, &list)?, MemberRef::parse(&member).map_err(|_| not_found("member"))?)))();
    let ((d, l), who) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx, dd, ll) = (state.mailing.clone(), a.p.clone(), a.ctx.clone(), d.clone(), l.clone());
    let m = core!(a, back, members::get(&app, &p, &ctx, &dd, &ll, &who)?);
    a.page(
        Section::Domains,
        &m.email.to_string(),
        html! {
            dl {
                dt { (a.t("List", "Liste")) } dd { (l.as_str()) "@" (d.as_str()) }
                dt { (a.t("Name", "Nom")) } dd { (m.display_name.as_deref().unwrap_or("—")) }
                dt { (a.t("Status", "État")) } dd { (m.status.as_str()) }
                dt { (a.t("Delivery", "Réception")) } dd { (m.delivery_mode.as_str()) }
                dt { (a.t("Subscribed at", "Abonné le")) } dd { (time(m.subscribed_at)) }
                dt { (a.t("Consent source", "Source du consentement")) } dd { (m.consent_source.as_deref().unwrap_or("—")) }
                dt { (a.t("Consent given at", "Consentement donné le")) } dd { (time(m.consent_at)) }
                dt { (a.t("Bounce score", "Score de rejets")) } dd { (m.bounce_score) }
                dt { (a.t("Last bounce", "Dernier rejet")) } dd { (time(m.last_bounce_at)) }
                dt { (a.t("Delivery stopped", "Envoi suspendu")) } dd { (time(m.disabled_at)) @if let Some(r) = &m.disabled_reason { " (" (r) ")" } }
            }
            p { a href=(back) { (a.t("Back to the members", "Retour aux membres")) } }
        },
    )
}

/// The import's multipart form, read whole (within the contract's 25 MiB and its fields), then
/// its session opened with the form's CSRF token.
pub(crate) struct ImportForm {
    admin: Admin,
    evidence: Option<String>,
    file: Vec<u8>,
}

impl FromRequest<AppState> for ImportForm {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let lang = Lang::of(req.headers());
        let headers = req.headers().clone();
        let fail = |e: ApiError| super::failure_page(lang, None, e, "/admin/");
        let ct = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let boundary = multer::parse_boundary(ct)
            .map_err(|e| fail(ApiError::new(Code::MalformedBody, format!("a multipart form is expected: {e}"))))?;
        let mut form = multer::Multipart::with_constraints(
            req.into_body().into_data_stream(),
            boundary,
            multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(IMPORT_FORM_LIMIT as u64)),
        );
        let (mut csrf, mut evidence, mut file) = (None, None, Vec::new());
        let read = async {
            while let Some(mut field) = form.next_field().await? {
                let name = field.name().unwrap_or("").to_owned();
                let mut value = Vec::new();
                while let Some(chunk) = field.chunk().await? {
                    value.extend_from_slice(&chunk);
                }
                match name.as_str() {
                    "csrf_token" => csrf = Some(String::from_utf8_lossy(&value).trim().to_owned()),
                    "consent_evidence_import" => evidence = Some(String::from_utf8_lossy(&value).into_owned()),
                    "file" => file = value,
                    _ => {}
                }
            }
            Ok::<_, multer::Error>(())
        };
        match tokio::time::timeout(state.body_read_timeout * 4, read).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(fail(ApiError::new(Code::MalformedBody, format!("the form could not be read: {e}"))));
            }
            Err(_) => return Err(fail(ApiError::new(Code::MalformedBody, "the form did not arrive in time"))),
        }
        let admin = super::open(state, &headers, csrf, true).await?;
        Ok(ImportForm { admin, evidence, file })
    }
}

async fn members_import(
    State(state): State<AppState>,
    Path((domain, list)): Path<(String, String)>,
    f: ImportForm,
) -> Response {
    let a = f.admin;
    let back = format!("/admin/domains/{}/lists/{}/members", seg(&domain), seg(&list));
    let parsed = (|| {
        Ok::<_, ApiError>((names(&domain, &list)?, ImportConsent::new(f.evidence.as_deref(), a.ctx.source.clone())?))
    })();
    let ((d, l), consent) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx, file) = (state.mailing.clone(), a.p.clone(), a.ctx.clone(), f.file);
    let report = core!(a, back, {
        let target = import::authorize(&app, &p, &ctx, &d, &l)?;
        import::import(&app, &p, &ctx, &target, &consent, file.as_slice())?
    });
    a.page(
        Section::Domains,
        a.t("Import report", "Rapport d'import"),
        html! {
            (note(&format!("{} {}", report.added, a.t("members added.", "membres ajoutés."))))
            table { tbody {
                tr { th scope="row" { (a.t("Rows read", "Lignes lues")) } td { (report.total) } }
                tr { th scope="row" { (a.t("Added", "Ajoutés")) } td { (report.added) } }
                tr { th scope="row" { (a.t("Skipped (already on the list)", "Ignorés (déjà sur la liste)")) } td { (report.skipped) } }
                tr { th scope="row" { (a.t("Errors", "Erreurs")) } td { (report.errors) } }
                tr { th scope="row" { (a.t("Delivery mode set to regular", "Mode de réception mis à regular")) } td { (report.mode_coerced) } }
            } }
            @if !report.error_samples.is_empty() {
                h2 { (a.t("Rows refused", "Lignes refusées")) }
                table {
                    thead { tr { th scope="col" { (a.t("Row", "Ligne")) } th scope="col" { (a.t("Reason", "Raison")) } } }
                    tbody { @for e in &report.error_samples { tr { td { (e.row) } td { (e.reason) } } } }
                }
            }
            p { a href=(back) { (a.t("Back to the members", "Retour aux membres")) } }
        },
    )
}

async fn members_export(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list)): Path<(String, String)>,
) -> Response {
    let back = format!("/admin/domains/{}/lists/{}/members", seg(&domain), seg(&list));
    match crate::mailing::export::csv(state, a.p.clone(), a.ctx.clone(), domain, list, None).await {
        Ok(resp) => resp,
        Err(e) => a.failure(e, &back),
    }
}

// ---------------------------------------------------------------------------------------------
// Sends.

fn compose_form(a: &Admin, here: &str, subject: &str, text: &str, html_body: &str) -> Markup {
    html! {
        form method="post" action=(format!("{here}/sends")) {
            (a.csrf_field())
            (text_field("subject", a.t("Subject", "Sujet"), subject, "text", true))
            label for="text" { (a.t("Text", "Texte")) }
            textarea id="text" name="text" rows="10" { (text) }
            label for="html" { (a.t("HTML (optional)", "HTML (facultatif)")) }
            textarea id="html" name="html" rows="6" { (html_body) }
            button type="submit" data-confirm=(a.t("Send to every active member?", "Envoyer à chaque membre actif ?")) { (a.t("Send", "Envoyer")) }
        }
    }
}

async fn compose_page(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list)): Path<(String, String)>,
) -> Response {
    let back = format!("/admin/domains/{}", seg(&domain));
    let (d, l) = match names(&domain, &list) {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx, dd, ll) = (state.mailing.clone(), a.p.clone(), a.ctx.clone(), d.clone(), l.clone());
    let found = core!(a, back, lists::get(&app, &p, &ctx, &dd, &ll)?);
    let here = list_path(&d, &l);
    if !may(&a, &Target::List(&d, &l), Perm::Send) {
        return a.failure(ApiError::new(Code::Forbidden, "this needs the send permission"), &here);
    }
    a.page(
        Section::Domains,
        &format!("{} · {}", a.t("New send", "Nouvel envoi"), found.address()),
        html! {
            p { a href=(here) { (a.t("Back to the list", "Retour à la liste")) } }
            (compose_form(&a, &here, "", "", ""))
        },
    )
}

async fn send_submit(
    State(state): State<AppState>,
    Path((domain, list)): Path<(String, String)>,
    Posted(a, f): Posted,
) -> Response {
    let back = format!("/admin/domains/{}/lists/{}/sends", seg(&domain), seg(&list));
    let (d, l) = match names(&domain, &list) {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let message = sends::NewMessage {
        subject: f.get("subject").unwrap_or_default(),
        text: f.raw("text").map(|t| t.replace("\r\n", "\n")).filter(|t| !t.trim().is_empty()),
        html: f.raw("html").map(|t| t.replace("\r\n", "\n")).filter(|t| !t.trim().is_empty()),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    let done = core!(a, back, sends::submit(&app, &p, &ctx, None, &d, &l, message)?);
    match done {
        Keyed::Ran(s) => see_other_to(&format!("{back}/{}", s.send_id.get())),
        Keyed::Replay { .. } => see_other_to(&back),
    }
}

fn send_id(raw: &str) -> Result<SendId, ApiError> {
    SendId::parse(raw).map_err(|_| not_found("send"))
}

async fn send_page(
    State(state): State<AppState>,
    a: Admin,
    Path((domain, list, send)): Path<(String, String, String)>,
) -> Response {
    let back = format!("/admin/domains/{}/lists/{}", seg(&domain), seg(&list));
    let parsed = (|| Ok::<_, ApiError>((names(&domain, &list)?, send_id(&send)?)))();
    let ((d, l), id) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &back),
    };
    let (app, p, ctx, dd, ll) = (state.mailing.clone(), a.p.clone(), a.ctx.clone(), d.clone(), l.clone());
    let (s, counts) = core!(a, back, sends::get(&app, &p, &ctx, &dd, &ll, id)?);
    let view = views::send_status(&s, &counts);
    let api = format!("/api/v1/domains/{}/lists/{}/sends/{}", seg(d.as_str()), seg(l.as_str()), id.get());
    let cancel = may(&a, &Target::List(&d, &l), Perm::Send);
    a.page(
        Section::Domains,
        &format!("{} #{}", a.t("Send", "Envoi"), id.get()),
        html! {
            dl {
                dt { (a.t("Subject", "Sujet")) } dd { (s.subject) }
                dt { (a.t("State", "État")) } dd data-field="state" { (s.state.as_str()) }
                dt { (a.t("Recipients", "Destinataires")) } dd { (s.recipients) }
                dt { (a.t("Submitted at", "Soumis le")) } dd { (s.created_at.to_rfc3339()) }
            }
            h2 { (a.t("Copies by state", "Copies par état")) }
            table data-live=(api) aria-live="polite" {
                tbody { @for (k, v) in view["counts"].as_object().into_iter().flatten() {
                    tr { th scope="row" { (k) } td data-count=(k) { (v) } }
                } }
            }
            p class="note" { (a.t("Reload the page to see the counts move (with script on, they refresh by themselves).",
                "Rechargez la page pour voir les nombres avancer (avec le script, ils se rafraîchissent seuls).")) }
            @if cancel {
                form method="post" action=(format!("{back}/sends/{}/cancel", id.get())) data-confirm=(a.t("Cancel the copies still queued?", "Annuler les copies encore en file ?")) {
                    (a.csrf_field())
                    button type="submit" class="danger" { (a.t("Cancel the copies still queued", "Annuler les copies encore en file")) }
                }
            }
            p { a href=(back) { (a.t("Back to the list", "Retour à la liste")) } }
        },
    )
}

async fn send_cancel(
    State(state): State<AppState>,
    Path((domain, list, send)): Path<(String, String, String)>,
    Posted(a, _): Posted,
) -> Response {
    let here = format!("/admin/domains/{}/lists/{}/sends/{}", seg(&domain), seg(&list), seg(&send));
    let parsed = (|| Ok::<_, ApiError>((names(&domain, &list)?, send_id(&send)?)))();
    let ((d, l), id) = match parsed {
        Ok(v) => v,
        Err(e) => return a.failure(e, &here),
    };
    let (app, p, ctx) = (state.mailing.clone(), a.p.clone(), a.ctx.clone());
    core!(a, here, sends::cancel(&app, &p, &ctx, &d, &l, id)?);
    see_other_to(&here)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blank_choice_is_none_and_a_wrong_one_refused() {
        let f = Form::parse("a=&b=open&c=nope").unwrap();
        assert_eq!(choice(&f, "a", SubscriptionPolicy::parse).unwrap(), None);
        assert_eq!(choice(&f, "b", SubscriptionPolicy::parse).unwrap(), Some(SubscriptionPolicy::Open));
        assert_eq!(choice(&f, "c", SubscriptionPolicy::parse).unwrap_err().code, Code::ValidationFailed);
    }
}
