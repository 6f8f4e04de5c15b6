//! Webhooks: creation (the URL through the egress guard, a signing secret returned once and
//! sealed at rest), listing, deletion, a signed test ping, and the delivery worker fed by the
//! events outbox.
//!
//! Every delivery is a POST of `{"id","type","created_at","data"}` carrying two signatures made
//! with the same key (`decisions.md`): the contract's `X-Svc-Signature: sha256=<hex HMAC-SHA256 of
//! the raw body>`, which signs no time and so could be replayed for ever, and the Standard
//! Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC of
//! "{id}.{timestamp}.{body}">`), which let a receiver refuse stale or repeated deliveries. The
//! secret is `whsec_<base64 of 32 random bytes>`, as Standard Webhooks writes them. The two HMACs
//! are keyed differently, each as its own scheme says: `X-Svc-Signature` with the secret string
//! exactly as creation returned it (`whsec_` included, its UTF-8 bytes: all a client of the
//! contract knows is "the webhook secret"), `webhook-signature` with the 32 decoded bytes.
//!
//! Delivery is at least once: the worker fans new outbox events out to the webhooks that want
//! them (one row per webhook and event, the body built once so every attempt sends the same
//! bytes under the same `X-Svc-Delivery`), leases due deliveries (`UPDATE ... RETURNING`, like
//! copies), POSTs outside any transaction, and records each outcome only while it still holds
//! the lease. 2xx delivers; 410 disables the webhook; anything else retries after 30 s doubling
//! up to 6 h (`Retry-After` of a 429 or 503 honoured when longer), and is abandoned 24 h after
//! the event, logged and shown on the webhook (`last_error`, `last_error_at`).

use super::MailingError;
use super::Service;
use super::delivery::backoff;
use super::model::{Delivery, DeliveryState, DomainId, ListId, Webhook, WebhookId};
use crate::access::model::{KeyScope, Role, UserId, UserStatus};
use crate::access::principal::Via;
use crate::access::principal::{RequestCtx, audit_done, audited_refusal};
use crate::access::{AccessError, Perm, Principal, Target};
use crate::egress::{EgressError, Header, PostReply, parse_url};
use crate::kernel::{DomainName, Event, EventName, ListName, Page, Paged, Timestamp, secrets};
use crate::mailing::ports::{CallResult, NewWebhook, Tx};
use crate::storage::{in_read, in_write};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::json;

/// The X-Svc-Event of the test ping (not one of the ten events: nothing subscribes to it).
pub const PING: &str = "webhook.ping";
const SECRET_PREFIX: &str = "whsec_";

#[derive(Debug, Clone)]
pub struct NewWebhookRequest {
    pub url: String,
    pub events: Vec<EventName>,
    pub domain_id: Option<DomainId>,
    pub list_id: Option<ListId>,
}

/// A created webhook and its secret, shown this once.
#[derive(Debug, Clone)]
pub struct Created {
    pub webhook: Webhook,
    pub secret: String,
}

/// What the test ping got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingOutcome {
    pub delivered: bool,
    pub status: Option<u16>,
    pub error: Option<String>,
}

/// The authorisation target of a webhook's filter, by names: a list, a domain, or (no filter)
/// the installation.
enum Scope {
    Installation,
    Domain(DomainName),
    List(DomainName, ListName),
}

impl Scope {
    fn target(&self) -> Target<'_> {
        match self {
            Scope::Installation => Target::Installation,
            Scope::Domain(d) => Target::Domain(d),
            Scope::List(d, l) => Target::List(d, l),
        }
    }

    fn label(&self) -> String {
        match self {
            Scope::Installation => "installation".into(),
            Scope::Domain(d) => format!("domain:{d}"),
            Scope::List(d, l) => format!("list:{l}@{d}"),
        }
    }
}

/// The scope a filter names; `None` when a named domain or list does not exist.
fn scope_of(
    tx: &mut dyn Tx,
    domain_id: Option<DomainId>,
    list_id: Option<ListId>,
) -> Result<Option<(Scope, Option<DomainId>)>, MailingError> {
    if let Some(l) = list_id {
        let Some(list) = tx.list_by_id(l)? else { return Ok(None) };
        if domain_id.is_some_and(|d| d != list.domain_id) {
            return Err(MailingError::Invalid(format!(
                "list_id {l} is not a list of domain_id {}",
                domain_id.map_or(0, DomainId::get)
            )));
        }
        return Ok(Some((Scope::List(list.domain.clone(), list.name.clone()), Some(list.domain_id))));
    }
    if let Some(d) = domain_id {
        let Some(domain) = tx.domain_by_id(d)? else { return Ok(None) };
        return Ok(Some((Scope::Domain(domain.name), Some(d))));
    }
    Ok(Some((Scope::Installation, None)))
}

fn new_secret() -> (String, Vec<u8>) {
    let mut key = vec![0u8; 32];
    secrets::fill_random(&mut key);
    (secret_string(&key), key)
}

/// The Standard Webhooks HMAC key of a secret `whsec_<base64>`: its decoded bytes.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    B64.decode(secret.strip_prefix(SECRET_PREFIX)?).ok().filter(|k| !k.is_empty())
}

/// The secret as creation returned it, from its decoded key (the inverse of [`secret_key`]: the
/// standard base64 of a key is unique, so the string is the one the client holds).
pub fn secret_string(key: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", B64.encode(key))
}

/// What binds a sealed secret to its webhook: the URL, which never changes.
fn binding(url: &str) -> String {
    format!("webhook:{url}")
}

/// What a request without `domain_id` and `list_id` means (`decisions.md`: "every domain or list
/// in the creator's scope"): the filter to store and whether the webhook follows its creator.
/// - an installation administrator (site admin, user-level credential): the whole installation,
///   as before;
/// - a key scoped to a domain or a list: that domain or list, stored as the filter (a key's scope
///   never changes, and the webhook is then managed like any other of that domain or list);
/// - anyone else (a session or a user-level key): no filter stored, the creator's roles read at
///   each fan-out ([`CreatorReach`]), so a revoked role stops the events it gave at once.
fn unfiltered_means(
    app: &Service,
    p: &Principal,
    req: &NewWebhookRequest,
) -> Result<(Option<DomainId>, Option<ListId>, bool), MailingError> {
    if req.domain_id.is_some() || req.list_id.is_some() || p.authorize(Perm::Manage, &Target::Installation, "").is_ok()
    {
        return Ok((req.domain_id, req.list_id, false));
    }
    let Via::Key(key) = &p.via else { return Ok((None, None, true)) };
    match &key.scope {
        KeyScope::User => Ok((None, None, true)),
        KeyScope::Domain(d) => {
            let found = in_read(&*app.store, |tx| tx.domain_by_name(d))?;
            Ok((Some(found.ok_or(MailingError::NotFound("domain"))?.id), None, false))
        }
        KeyScope::List(d, l) => {
            let found = in_read(&*app.store, |tx| tx.list_by_name(d, l))?;
            Ok((None, Some(found.ok_or(MailingError::NotFound("list"))?.id), false))
        }
    }
}

/// Whether `p` manages webhook `w` whose filter's scope is `scope`: `manage` on that scope, or,
/// for a webhook without filter, being its creator with a user-level credential holding `manage`.
fn may_manage(p: &Principal, w: &Webhook, scope: &Scope) -> Result<(), AccessError> {
    let by_scope = p.authorize(Perm::Manage, &scope.target(), "webhook");
    if by_scope.is_err()
        && matches!(scope, Scope::Installation)
        && w.created_by.is_some()
        && w.created_by == p.actor().user_id
    {
        return p.authorize_self(Perm::Manage);
    }
    by_scope
}

pub fn create(app: &Service, p: &Principal, ctx: &RequestCtx, req: NewWebhookRequest) -> Result<Created, MailingError> {
    if req.events.is_empty() {
        return Err(MailingError::Invalid("events must name at least one event".into()));
    }
    let (domain_filter, list_filter, for_creator) = unfiltered_means(app, p, &req)?;
    if for_creator {
        // No filter, and the caller is not an installation administrator: the webhook follows
        // its creator's scope (see `CreatorReach`), so the caller must manage some domain or list.
        let manages_some = p.roles.iter().any(|r| matches!(r, Role::DomainAdmin(_) | Role::Owner(..)));
        let allowed = p.authorize_self(Perm::Manage).and_then(|()| {
            if manages_some {
                Ok(())
            } else {
                Err(AccessError::Forbidden(
                    "a webhook without domain_id or list_id needs the manage permission on a domain or a list".into(),
                ))
            }
        });
        allowed.map_err(|e| {
            MailingError::Access(audited_refusal(&*app.access, p, ctx, "webhook.create", "creator scope", e))
        })?;
    }
    let found = in_read(&*app.store, |tx| scope_of(tx, domain_filter, list_filter))?;
    let label = found.as_ref().map_or_else(|| "webhook".to_owned(), |(s, _)| s.label());
    let allowed = match &found {
        _ if for_creator => Ok(()),
        None => Err(AccessError::NotFound(if list_filter.is_some() { "list" } else { "domain" })),
        Some((scope, _)) => p.authorize(Perm::Manage, &scope.target(), "webhook scope"),
    };
    allowed.map_err(|e| MailingError::Access(audited_refusal(&*app.access, p, ctx, "webhook.create", &label, e)))?;
    let Some((_, domain_id)) = found else { return Err(MailingError::NotFound("domain")) };
    // The guard: HTTPS, resolvable, and only to addresses outside the exclusion list.
    let url = app.egress.check(&req.url)?.normalized();
    let mut events = req.events.clone();
    events.sort_by_key(|e| e.as_str());
    events.dedup();
    let (secret, key) = new_secret();
    let sealed = app.data_key.seal(&key, &binding(&url));
    let now = app.clock.now();
    let webhook = in_write(&*app.store, |tx| {
        if tx.all_webhooks()?.is_empty()
            && let Some(last) = tx.last_event_id()?
        {
            // With no webhook, the worker leaves the outbox unread (`run_once`); the first one
            // receives what comes after it (as any webhook), so its fan-out starts from here
            // rather than reading the whole backlog.
            tx.set_webhook_cursor(last)?;
        }
        let new = NewWebhook {
            url: &url,
            events: &events,
            domain_id,
            list_id: list_filter,
            secret_sealed: &sealed,
            created_by: p.actor().user_id,
        };
        let id = tx.insert_webhook(&new, now)?;
        audit_done(tx, p, ctx, now, "webhook.create", &format!("webhook:{id}"))?;
        tx.webhook_by_id(id)?.ok_or(MailingError::NotFound("webhook"))
    })?;
    Ok(Created { webhook, secret })
}

fn scope_of_webhook(tx: &mut dyn Tx, w: &Webhook) -> Result<Option<Scope>, MailingError> {
    Ok(scope_of(tx, w.domain_id, w.list_id)?.map(|(s, _)| s))
}

/// The webhooks the caller manages (those whose scope it holds `manage` on), by id.
pub fn list(app: &Service, p: &Principal, page: Page) -> Result<Paged<Webhook>, MailingError> {
    if !p.credential_perms().contains(Perm::Manage) {
        return Err(AccessError::Forbidden("this needs the manage permission".into()).into());
    }
    let visible: Vec<Webhook> = in_read(&*app.store, |tx| {
        let mut out = Vec::new();
        for w in tx.all_webhooks()? {
            let Some(scope) = scope_of_webhook(tx, &w)? else { continue };
            if may_manage(p, &w, &scope).is_ok() {
                out.push(w);
            }
        }
        Ok::<_, MailingError>(out)
    })?;
    let total = visible.len() as u64;
    let items = visible
        .into_iter()
        .skip(usize::try_from(page.offset()).unwrap_or(usize::MAX))
        .take(page.limit() as usize)
        .collect();
    Ok(Paged { items, total, page })
}

/// Loads a webhook the caller manages: 404 when unknown or out of reach, 403 inside without
/// `manage`; refusals audited.
fn authorized(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    id: WebhookId,
    action: &str,
) -> Result<Webhook, MailingError> {
    let found = in_read(&*app.store, |tx| {
        let Some(w) = tx.webhook_by_id(id)? else { return Ok(None) };
        Ok::<_, MailingError>(scope_of_webhook(tx, &w)?.map(|s| (w, s)))
    })?;
    let checked = match &found {
        None => Err(AccessError::NotFound("webhook")),
        Some((w, scope)) => may_manage(p, w, scope),
    };
    checked.map_err(|e| {
        MailingError::Access(audited_refusal(&*app.access, p, ctx, action, &format!("webhook:{id}"), e))
    })?;
    found.map(|(w, _)| w).ok_or(MailingError::NotFound("webhook"))
}

pub fn delete(app: &Service, p: &Principal, ctx: &RequestCtx, id: WebhookId) -> Result<(), MailingError> {
    authorized(app, p, ctx, id, "webhook.delete")?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        if !tx.delete_webhook(id)? {
            return Err(MailingError::NotFound("webhook"));
        }
        audit_done(tx, p, ctx, now, "webhook.delete", &format!("webhook:{id}"))?;
        Ok(())
    })
}

/// Signs and sends a ping now, and shows what the receiver answered (also recorded on the
/// webhook, like any delivery).
pub fn test(app: &Service, p: &Principal, ctx: &RequestCtx, id: WebhookId) -> Result<PingOutcome, MailingError> {
    let w = authorized(app, p, ctx, id, "webhook.test")?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        Ok::<_, MailingError>(audit_done(tx, p, ctx, now, "webhook.test", &format!("webhook:{id}"))?)
    })?;
    let event_id = format!("evt_{}", secrets::random_hex(16));
    let body = json!({
        "id": event_id,
        "type": PING,
        "created_at": now.to_rfc3339(),
        "data": { "webhook_id": w.id.get(), "url": w.url },
    })
    .to_string();
    let result = post(app, &w, PING, &event_id, &body);
    let done = app.clock.now();
    let outcome = match &result {
        Ok(r) if (200..300).contains(&r.status) => PingOutcome { delivered: true, status: Some(r.status), error: None },
        Ok(r) => PingOutcome { delivered: false, status: Some(r.status), error: Some(status_error(r.status)) },
        Err(e) => PingOutcome { delivered: false, status: None, error: Some(e.to_string()) },
    };
    in_write(&*app.store, |tx| {
        let call = match &outcome.error {
            None => CallResult::Success,
            Some(e) => CallResult::Error(e),
        };
        Ok::<_, MailingError>(tx.record_call(w.id, call, done)?)
    })?;
    Ok(outcome)
}

fn status_error(status: u16) -> String {
    match status {
        300..=399 => format!("HTTP {status} (redirects are not followed)"),
        _ => format!("HTTP {status}"),
    }
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`: the contract's `X-Svc-Signature`, keyed with the
/// whole secret string (`whsec_…`, UTF-8), not its decoded part (`decisions.md`).
pub fn svc_signature(secret: &str, body: &[u8]) -> String {
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes()), body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`: Standard Webhooks' signature.
pub fn standard_signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut ctx = ring::hmac::Context::with_key(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key));
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("v1,{}", B64.encode(ctx.sign().as_ref()))
}

/// The headers of one attempt: both signatures (each keyed as its scheme says, from the one
/// decoded key), the timestamp of now.
pub fn signed_headers(key: &[u8], event: &str, id: &str, timestamp: i64, body: &[u8]) -> Vec<Header> {
    vec![
        ("X-Svc-Event", event.to_owned()),
        ("X-Svc-Delivery", id.to_owned()),
        ("X-Svc-Signature", svc_signature(&secret_string(key), body)),
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", standard_signature(key, id, timestamp, body)),
    ]
}

/// One signed POST to a webhook (the URL re-checked by the guard now).
fn post(app: &Service, w: &Webhook, event: &str, id: &str, body: &str) -> Result<PostReply, DeliveryFailure> {
    let key =
        app.data_key.open(&w.secret_sealed, &binding(&w.url)).map_err(|e| DeliveryFailure::Secret(e.to_string()))?;
    let url = parse_url(&w.url)?;
    let headers = signed_headers(&key, event, id, app.clock.now().unix_secs(), body.as_bytes());
    Ok(app.egress.post(&url, &headers, body.as_bytes())?)
}

#[derive(Debug, thiserror::Error)]
enum DeliveryFailure {
    #[error(transparent)]
    Egress(#[from] EgressError),
    #[error("the webhook's secret cannot be opened: {0}")]
    Secret(String),
}

/// The delivery worker's settings.
#[derive(Debug, Clone, Copy)]
pub struct WebhookConfig {
    /// Deliveries leased per round.
    pub batch: u32,
    /// A leased delivery is the worker's for this long (well over a POST's bounded time).
    pub lease_secs: i64,
    /// The first retry waits this long, doubling per attempt up to six hours.
    pub retry_base_secs: i64,
    /// A delivery still failing this long after its event is abandoned.
    pub give_up_secs: i64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self { batch: 50, lease_secs: 120, retry_base_secs: 30, give_up_secs: 24 * 3600 }
    }
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    pub fanned_out: u64,
    pub claimed: u64,
    pub delivered: u64,
    pub retrying: u64,
    pub failed: u64,
    pub requeued: u64,
}

/// The body of an event's delivery.
pub fn event_body(e: &Event) -> String {
    json!({ "id": e.public_id, "type": e.name.as_str(), "created_at": e.at.to_rfc3339(), "data": e.data }).to_string()
}

/// Whose scope bounds a webhook's events beyond its filter. A webhook without `domain_id` and
/// `list_id` made by a user follows that user's roles as they are at each fan-out (read here,
/// not captured at creation): a domain admin's gets that domain's events, an owner's its lists',
/// a site admin's everything, and a revoked role or a disabled account stops them at once, as a
/// revoked role takes effect on the very next request. The operator's (the command line) and
/// every filtered webhook: the filter alone decides.
enum CreatorReach {
    All,
    Roles(Vec<Role>),
}

/// Names of the domains and lists events refer to, looked up once per fan-out.
#[derive(Default)]
struct Names {
    domains: std::collections::HashMap<i64, Option<DomainName>>,
    lists: std::collections::HashMap<i64, Option<(DomainName, ListName)>>,
}

impl CreatorReach {
    fn of(tx: &mut dyn Tx, w: &Webhook) -> Result<Self, MailingError> {
        let Some(creator) = w.created_by.filter(|_| w.domain_id.is_none() && w.list_id.is_none()) else {
            return Ok(CreatorReach::All);
        };
        let id = UserId::from_stored(creator);
        let active = tx.user_by_id(id)?.is_some_and(|u| u.user.status == UserStatus::Active);
        let roles: Vec<Role> = if active { tx.roles_of(id)?.into_iter().map(|g| g.role).collect() } else { Vec::new() };
        Ok(if roles.contains(&Role::SiteAdmin) { CreatorReach::All } else { CreatorReach::Roles(roles) })
    }

    /// Whether the creator's roles give `manage` on the event's list (or domain).
    fn covers(&self, tx: &mut dyn Tx, names: &mut Names, e: &Event) -> Result<bool, MailingError> {
        let CreatorReach::Roles(roles) = self else { return Ok(true) };
        if roles.is_empty() {
            return Ok(false);
        }
        let manages = |target: Target<'_>| roles.iter().any(|r| r.perms_on(&target).contains(Perm::Manage));
        if let Some(l) = e.list_id {
            if let std::collections::hash_map::Entry::Vacant(slot) = names.lists.entry(l) {
                slot.insert(tx.list_by_id(ListId::from_stored(l))?.map(|x| (x.domain, x.name)));
            }
            return Ok(names.lists[&l].as_ref().is_some_and(|(d, n)| manages(Target::List(d, n))));
        }
        let Some(d) = e.domain_id else { return Ok(false) };
        if let std::collections::hash_map::Entry::Vacant(slot) = names.domains.entry(d) {
            slot.insert(tx.domain_by_id(DomainId::from_stored(d))?.map(|x| x.name));
        }
        Ok(names.domains[&d].as_ref().is_some_and(|n| manages(Target::Domain(n))))
    }
}

/// Fans the outbox's new events out to the webhooks that want them; how many deliveries. Public
/// for the rule tests over a real store (a worker that dies after fanning out).
#[doc(hidden)]
pub fn fan_out(tx: &mut dyn Tx, now: Timestamp) -> Result<u64, MailingError> {
    let mut queued = 0;
    let hooks = tx.all_webhooks()?;
    if hooks.is_empty() {
        // Nobody to tell: skip the events rather than read them (an import records one per row).
        if let Some(last) = tx.last_event_id()? {
            tx.set_webhook_cursor(last)?;
        }
        return Ok(0);
    }
    let reaches = hooks.iter().map(|w| CreatorReach::of(tx, w)).collect::<Result<Vec<_>, _>>()?;
    let mut names = Names::default();
    loop {
        let cursor = tx.webhook_cursor()?;
        let events = tx.events_after(cursor, 500)?;
        let Some(last) = events.last().map(|e| e.id) else { return Ok(queued) };
        for e in &events {
            // A webhook receives the events recorded after it was created, not before; one
            // without filter only those in its creator's scope now.
            for (w, reach) in hooks.iter().zip(&reaches) {
                if !(w.created_at <= e.at
                    && w.wants(e.name, e.domain_id, e.list_id)
                    && reach.covers(tx, &mut names, e)?)
                {
                    continue;
                }
                tx.enqueue_delivery(w.id, e, &event_body(e), now)?;
                queued += 1;
            }
        }
        tx.set_webhook_cursor(last)?;
        if events.len() < 500 {
            return Ok(queued);
        }
    }
}

/// One round: fan out new events, requeue expired leases, lease a batch, POST each, record.
pub fn run_once(app: &Service, cfg: &WebhookConfig) -> Result<Round, MailingError> {
    let now = app.clock.now();
    let mut round = Round::default();
    // Idle rounds (most of them) only read: the write lock is taken when there is work. With no
    // webhook at all there is none, however many events come (an import records one per row:
    // taking the write lock for each round would only make the importer wait).
    let idle = in_read(&*app.store, |tx| {
        if tx.deliveries_waiting(now)? {
            return Ok::<_, MailingError>(false);
        }
        if tx.all_webhooks()?.is_empty() {
            return Ok(true);
        }
        let cursor = tx.webhook_cursor()?;
        Ok(tx.events_after(cursor, 1)?.is_empty())
    })?;
    if idle {
        return Ok(round);
    }
    let (claimed, hooks) = in_write(&*app.store, |tx| {
        round.fanned_out = fan_out(tx, now)?;
        round.requeued = tx.requeue_expired_deliveries(now)?;
        let claimed = tx.claim_deliveries(now, now.plus_secs(cfg.lease_secs), cfg.batch)?;
        let mut hooks = std::collections::HashMap::new();
        for d in &claimed {
            if let std::collections::hash_map::Entry::Vacant(e) = hooks.entry(d.webhook_id.get())
                && let Some(w) = tx.webhook_by_id(d.webhook_id)?
            {
                e.insert(w);
            }
        }
        Ok::<_, MailingError>((claimed, hooks))
    })?;
    round.claimed = claimed.len() as u64;
    // Outcomes are recorded together, at most a second apart: one commit (an fsync) per delivery
    // capped the worker at about 200 deliveries/s (BENCHMARKS.md). A crash before the record only
    // repeats deliveries, which at-least-once allows.
    let mut pending: Vec<Recorded> = Vec::new();
    let mut flushed_at = now;
    // Past half the lease, the rest of the batch goes back to the queue rather than risk a POST
    // whose lease another worker may take over (slow receivers hold the whole batch up).
    let stop_at = now.plus_secs(cfg.lease_secs / 2);
    for (i, d) in claimed.iter().enumerate() {
        if app.clock.now() >= stop_at {
            let later: Vec<&Delivery> = claimed[i..].iter().collect();
            release(app, &later)?;
            round.requeued += later.len() as u64;
            break;
        }
        let Some(w) = hooks.get(&d.webhook_id.get()) else { continue };
        let result = post(app, w, &d.event_name, &d.event_public_id, &d.body);
        let done = app.clock.now();
        let (state, next, error) = outcome(cfg, d, &result, done);
        if let Some(e) = &error {
            tracing::warn!(webhook = w.id.get(), delivery = %d.event_public_id, attempt = d.attempts, error = %e, "webhook delivery failed");
        }
        let call = match (&result, &error) {
            (Ok(r), Some(_)) if r.status == 410 => Call::Gone,
            (_, Some(_)) => Call::Error,
            (_, None) => Call::Success,
        };
        pending.push(Recorded { delivery: d.id, webhook: w.id, state, next, error, call, at: done });
        if done >= flushed_at.plus_secs(1) {
            record(app, &mut pending, &mut round)?;
            flushed_at = done;
        }
    }
    record(app, &mut pending, &mut round)?;
    Ok(round)
}

#[derive(Debug, Clone, Copy)]
enum Call {
    Success,
    Error,
    Gone,
}

/// An attempt's outcome, waiting to be recorded.
struct Recorded {
    delivery: super::model::DeliveryId,
    webhook: WebhookId,
    state: DeliveryState,
    next: Option<Timestamp>,
    error: Option<String>,
    call: Call,
    at: Timestamp,
}

/// Records the outcomes in one transaction, each only if its delivery is still leased (else its
/// lease expired and another worker holds it now).
fn record(app: &Service, pending: &mut Vec<Recorded>, round: &mut Round) -> Result<(), MailingError> {
    if pending.is_empty() {
        return Ok(());
    }
    in_write(&*app.store, |tx| {
        for r in pending.iter() {
            if tx.finish_delivery(r.delivery, r.state, r.next, r.error.as_deref(), r.at)? {
                let error = r.error.as_deref().unwrap_or("");
                let call = match r.call {
                    Call::Success => CallResult::Success,
                    Call::Error => CallResult::Error(error),
                    Call::Gone => CallResult::Gone(error),
                };
                tx.record_call(r.webhook, call, r.at)?;
                match r.state {
                    DeliveryState::Delivered => round.delivered += 1,
                    DeliveryState::Queued => round.retrying += 1,
                    _ => round.failed += 1,
                }
            }
        }
        Ok::<_, MailingError>(())
    })?;
    pending.clear();
    Ok(())
}

/// Gives leased deliveries back to the queue, due now, untried.
fn release(app: &Service, deliveries: &[&Delivery]) -> Result<(), MailingError> {
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        for d in deliveries {
            tx.release_delivery(d.id, now)?;
        }
        Ok::<_, MailingError>(())
    })
}

/// What an attempt's result makes of the delivery: its next state, when to retry, the error.
fn outcome(
    cfg: &WebhookConfig,
    d: &Delivery,
    result: &Result<PostReply, DeliveryFailure>,
    now: Timestamp,
) -> (DeliveryState, Option<Timestamp>, Option<String>) {
    let (error, retry_after) = match result {
        Ok(r) if (200..300).contains(&r.status) => return (DeliveryState::Delivered, None, None),
        Ok(r) if r.status == 410 => {
            return (DeliveryState::Failed, None, Some("HTTP 410: the receiver is gone; webhook disabled".into()));
        }
        Ok(r) if r.status == 429 || r.status == 503 => (status_error(r.status), r.retry_after),
        Ok(r) => (status_error(r.status), None),
        Err(e) => (e.to_string(), None),
    };
    let wait = backoff(cfg.retry_base_secs, d.attempts)
        .max(retry_after.map_or(0, |s| i64::try_from(s.min(6 * 3600)).unwrap_or(0)));
    let next = now.plus_secs(wait);
    if next >= d.created_at.plus_secs(cfg.give_up_secs) {
        let hours = cfg.give_up_secs / 3600;
        return (
            DeliveryState::Failed,
            None,
            Some(format!("abandoned after {hours} h and {} attempts: {error}", d.attempts)),
        );
    }
    (DeliveryState::Queued, Some(next), Some(error))
}
