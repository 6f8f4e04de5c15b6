//! Subscriber self-service (`/api/v1/me/...` and the `/p/me` pages, one set of operations for
//! both): the one-time login link mailed to an address, the subscriber session it opens (cookie
//! `svc_subscriber`), the address's subscriptions, and the public subscription form.
//!
//! The session's scope is one address, applied in every query: a client names only a list id,
//! and a list the address is not subscribed to answers 404 like an unknown one. The session
//! carries no administration authority (it is not a [`crate::access::Principal`]).

use super::MailingError;
use super::Service;
use super::members::{self, AddMember, AddOutcome};
use super::model::{DeliveryMode, ListId, ListStatus, MailingList, MemberStatus, SubscriptionPolicy};
use super::ports::{SubscriptionRecord, Tx};
use super::state::Trigger;
use super::subscriptions;
use crate::access::AccessError;
use crate::access::limits::Window;
use crate::access::principal::RequestCtx;
use crate::kernel::{
    Actor, DomainName, EmailAddress, ListName, NewAuditEntry, Notice, Outcome, Page, Paged, Timestamp, secrets,
};
use crate::storage::{in_read, in_write};

/// A login link works once, for this long.
pub const LINK_TTL_SECS: i64 = 3600;
/// Links (login links and public-form confirmations) per address per hour, then per source per
/// minute and per hour (`mailing-service.md`, "Limits").
pub const LINKS_PER_ADDRESS_PER_HOUR: usize = 3;
pub const LINKS_PER_SOURCE_PER_MINUTE: usize = 5;
pub const LINKS_PER_SOURCE_PER_HOUR: usize = 20;
/// A subscriber session slides with one hour of inactivity, twelve hours at most.
pub const SESSION_IDLE_SECS: i64 = 3600;
pub const SESSION_MAX_SECS: i64 = 12 * 3600;
/// `last_seen_at` is written at most this often (a write per request costs an fsync).
const TOUCH_EVERY_SECS: i64 = 60;

/// The statuses in which an address is subscribed to a list: what the session lists and may
/// change. An unsubscribed or removed address is not subscribed (404).
pub const SUBSCRIBED: &[MemberStatus] = &[MemberStatus::Active, MemberStatus::Pending, MemberStatus::Disabled];

/// Counts one link request (a login link, or a public-form subscription) against the address
/// and the source: 429 past [`LINKS_PER_ADDRESS_PER_HOUR`], [`LINKS_PER_SOURCE_PER_MINUTE`] or
/// [`LINKS_PER_SOURCE_PER_HOUR`]. Counted through the access context's `Counters` port. The
/// address is counted as typed (trimmed, lowercased), known or not.
pub fn take_link_request(app: &Service, ctx: &RequestCtx, address: &str) -> Result<(), MailingError> {
    let now = app.clock.now();
    let mut windows = vec![Window {
        key: format!("link-address:{}", address.trim().to_lowercase()),
        allowed: LINKS_PER_ADDRESS_PER_HOUR,
        window_secs: 3600,
    }];
    if let Some(source) = ctx.source.as_deref() {
        windows.push(Window {
            key: format!("link-source-minute:{source}"),
            allowed: LINKS_PER_SOURCE_PER_MINUTE,
            window_secs: 60,
        });
        windows.push(Window {
            key: format!("link-source-hour:{source}"),
            allowed: LINKS_PER_SOURCE_PER_HOUR,
            window_secs: 3600,
        });
    }
    app.access.counters.take_all(&windows, now).map_err(|e| {
        tracing::info!(source = ?ctx.source, "link request over the limits");
        MailingError::Access(e)
    })
}

/// Mails a login link to `email` when the address is subscribed to some list; otherwise sends
/// nothing. Whether it did is returned for the log only: the caller answers the same either way,
/// before calling this (call [`take_link_request`] first).
pub fn send_login_link(app: &Service, ctx: &RequestCtx, email: &EmailAddress) -> Result<bool, MailingError> {
    let now = app.clock.now();
    let token = secrets::random_token(32);
    let hash = secrets::sha256_hex(token.as_bytes());
    let known = in_write(&*app.store, |tx| {
        if tx.subscriptions_of(email, SUBSCRIBED, Page::first(1))?.total == 0 {
            return Ok::<_, MailingError>(false);
        }
        tx.insert_login_link(&hash, email, now, now.plus_secs(LINK_TTL_SECS))?;
        Ok(true)
    })?;
    if !known {
        tracing::info!(request_id = %ctx.request_id.as_str(), "login link asked for an address with no subscription");
        return Ok(false);
    }
    let link = format!("{}/p/me/login/{token}", app.settings.public_url);
    let body = format!(
        "Hello,\n\nSomeone, probably you, asked to manage the subscriptions of {email}.\n\
         Open this link to sign in (it works once, for one hour):\n\n{link}\n\n\
         If you did not ask for this, ignore this message.\n\n\
         Bonjour,\n\nPour gérer les abonnements de {email}, ouvrez ce lien (valable une fois, une heure) :\n\n{link}\n"
    );
    let subject = "Manage your subscriptions / Gérer vos abonnements";
    let notice = Notice { from: &app.settings.mail_from, to: email, subject, body: &body, date: now };
    app.mail.send(&notice.compose())?;
    Ok(true)
}

/// A session just opened: the cookie's value (shown once, stored hashed) and its CSRF token.
#[derive(Debug, Clone)]
pub struct Opened {
    pub token: String,
    pub subscriber: Subscriber,
}

/// An authenticated subscriber: one address, for the session's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriber {
    pub session_id: i64,
    pub email: EmailAddress,
    /// When the session ends unless used again (the sliding hour, within the absolute ceiling).
    pub expires_at: Timestamp,
    pub csrf_token: String,
}

/// The CSRF synchronizer token of a subscriber session, derived from its token (never equal to
/// an administrator session's token of the same value).
pub fn csrf_token_for(session_token: &str) -> String {
    crate::access::principal::csrf_token_for(&format!("subscriber:{session_token}"))
}

fn unauthenticated(reason: &'static str) -> MailingError {
    tracing::info!(reason, "subscriber authentication refused");
    MailingError::Access(AccessError::Unauthenticated)
}

/// What a login link would open, without using it (the GET page only shows a button: mail
/// scanners follow links). `None` for an unknown, used or expired link.
pub fn peek_login_link(app: &Service, token: &str) -> Result<Option<EmailAddress>, MailingError> {
    let hash = secrets::sha256_hex(token.as_bytes());
    let now = app.clock.now();
    let link = in_read(&*app.store, |tx| tx.login_link_by_hash(&hash))?;
    Ok(link.filter(|l| l.used_at.is_none() && l.expires_at > now).map(|l| l.email))
}

/// Uses a login link (once, within the hour) and opens a session: 401 for an unknown, used or
/// expired link, one answer whatever the reason (logged).
pub fn open_session(app: &Service, ctx: &RequestCtx, token: &str) -> Result<Opened, MailingError> {
    let now = app.clock.now();
    let hash = secrets::sha256_hex(token.as_bytes());
    let session_token = secrets::random_token(32);
    let session_hash = secrets::sha256_hex(session_token.as_bytes());
    let expires_at = now.plus_secs(SESSION_MAX_SECS);
    let (id, email) = in_write(&*app.store, |tx| {
        let link = tx.login_link_by_hash(&hash)?.ok_or_else(|| unauthenticated("unknown login link"))?;
        if link.used_at.is_some() {
            return Err(unauthenticated("login link used already"));
        }
        if link.expires_at <= now {
            return Err(unauthenticated("login link expired"));
        }
        if !tx.use_login_link(link.id, now)? {
            return Err(unauthenticated("login link used already"));
        }
        let id = tx.insert_subscriber_session(&session_hash, &link.email, now, expires_at)?;
        tx.append_audit(&NewAuditEntry {
            at: now,
            request_id: ctx.request_id.clone(),
            actor: Actor::default(),
            action: "subscriber.login".into(),
            target: format!("subscriber_session:{id}"),
            outcome: Outcome::Done,
        })?;
        Ok((id, link.email))
    })?;
    let csrf_token = csrf_token_for(&session_token);
    let subscriber =
        Subscriber { session_id: id, email, expires_at: now.plus_secs(SESSION_IDLE_SECS).min(expires_at), csrf_token };
    Ok(Opened { token: session_token, subscriber })
}

/// Checks a subscriber session cookie: 401 when unknown, logged out, idle for an hour or older
/// than twelve; a `mutating` request must carry the session's CSRF token (403 `csrf_failed`).
pub fn authenticate(
    app: &Service,
    token: &str,
    csrf: Option<&str>,
    mutating: bool,
) -> Result<Subscriber, MailingError> {
    let now = app.clock.now();
    let hash = secrets::sha256_hex(token.as_bytes());
    let session = in_read(&*app.store, |tx| tx.subscriber_session_by_hash(&hash))?
        .ok_or_else(|| unauthenticated("unknown subscriber session"))?;
    if session.revoked_at.is_some() {
        return Err(unauthenticated("subscriber session logged out"));
    }
    if session.expires_at <= now || session.last_seen_at.plus_secs(SESSION_IDLE_SECS) <= now {
        return Err(unauthenticated("subscriber session expired"));
    }
    let csrf_token = csrf_token_for(token);
    if mutating && !secrets::constant_time_eq(csrf_token.as_bytes(), csrf.unwrap_or("").as_bytes()) {
        tracing::info!("subscriber CSRF token missing or wrong");
        return Err(MailingError::Access(AccessError::CsrfFailed));
    }
    let mut seen = session.last_seen_at;
    if seen.plus_secs(TOUCH_EVERY_SECS) <= now {
        in_write(&*app.store, |tx| tx.touch_subscriber_session(session.id, now))?;
        seen = now;
    }
    Ok(Subscriber {
        session_id: session.id,
        email: session.email,
        expires_at: seen.plus_secs(SESSION_IDLE_SECS).min(session.expires_at),
        csrf_token,
    })
}

/// Ends the session of `token`, if there is one (twice is not an error).
pub fn logout(app: &Service, token: &str) -> Result<(), MailingError> {
    let now = app.clock.now();
    let hash = secrets::sha256_hex(token.as_bytes());
    in_write(&*app.store, |tx| {
        if let Some(s) = tx.subscriber_session_by_hash(&hash)? {
            tx.revoke_subscriber_session(s.id, now)?;
        }
        Ok(())
    })
}

/// The subscriber's subscriptions, ordered by list id.
pub fn subscriptions(app: &Service, s: &Subscriber, page: Page) -> Result<Paged<SubscriptionRecord>, MailingError> {
    Ok(in_read(&*app.store, |tx| tx.subscriptions_of(&s.email, SUBSCRIBED, page))?)
}

/// The subscription of the session's address on `list`, read in `tx`; `None` when the list is
/// unknown or the address not subscribed to it (one answer: 404).
fn own_subscription(tx: &mut dyn Tx, s: &Subscriber, list: ListId) -> Result<Option<SubscriptionRecord>, MailingError> {
    let Some(list) = tx.list_by_id(list)? else { return Ok(None) };
    let Some(member) = tx.member_by_email(list.id, &s.email)? else { return Ok(None) };
    Ok(SUBSCRIBED.contains(&member.status).then_some(SubscriptionRecord { member, list }))
}

/// Writes the audit entry of a subscriber's refusal (404) in `tx`, then hands the error back.
fn refused(tx: &mut dyn Tx, ctx: &RequestCtx, now: Timestamp, action: &str, list: ListId) -> MailingError {
    let entry = NewAuditEntry {
        at: now,
        request_id: ctx.request_id.clone(),
        actor: Actor::default(),
        action: action.to_owned(),
        target: format!("list:{}", list.get()),
        outcome: Outcome::NotFound,
    };
    if let Err(e) = tx.append_audit(&entry) {
        tracing::error!(error = %e, "cannot audit a refusal");
    }
    MailingError::NotFound("subscription")
}

fn audit_by_member(
    tx: &mut dyn Tx,
    ctx: &RequestCtx,
    now: Timestamp,
    action: &str,
    sub: &SubscriptionRecord,
) -> Result<(), MailingError> {
    tx.append_audit(&NewAuditEntry {
        at: now,
        request_id: ctx.request_id.clone(),
        actor: Actor { user_id: None, key_id: None, member_id: Some(sub.member.id.get()) },
        action: action.to_owned(),
        target: format!("member:{}:{}", sub.list.address(), sub.member.id),
        outcome: Outcome::Done,
    })?;
    Ok(())
}

/// Changes the delivery mode of the subscriber's subscription to `list` (audited with the
/// subscriber, the member, as actor); 404 when not subscribed.
pub fn set_delivery_mode(
    app: &Service,
    s: &Subscriber,
    ctx: &RequestCtx,
    list: ListId,
    mode: DeliveryMode,
) -> Result<SubscriptionRecord, MailingError> {
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let Some(mut sub) = own_subscription(tx, s, list)? else {
            return Ok(Err(refused(tx, ctx, now, "member.delivery_mode", list)));
        };
        if sub.member.delivery_mode != mode {
            sub.member.delivery_mode = mode;
            tx.update_member(&sub.member, None, now)?;
            audit_by_member(tx, ctx, now, "member.delivery_mode", &sub)?;
        }
        Ok::<_, MailingError>(Ok(sub))
    })?
}

/// Ends the subscriber's subscription to `list` (`member.removed`, audited with the subscriber
/// as actor); 404 when not subscribed.
pub fn unsubscribe(app: &Service, s: &Subscriber, ctx: &RequestCtx, list: ListId) -> Result<(), MailingError> {
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let Some(mut sub) = own_subscription(tx, s, list)? else {
            return Ok(Err(refused(tx, ctx, now, "member.unsubscribe", list)));
        };
        if !members::leave(tx, &sub.list, &mut sub.member, Trigger::Unsubscribe, "self_service", now)? {
            return Ok(Err(refused(tx, ctx, now, "member.unsubscribe", list)));
        }
        audit_by_member(tx, ctx, now, "member.unsubscribe", &sub)?;
        Ok::<_, MailingError>(Ok(()))
    })?
}

/// The list of a public subscription form: one whose policy is not `closed` and which is not
/// archived; anything else is 404 (the page's HTML 404), unknown or not.
pub fn form_list(app: &Service, domain: &str, name: &str) -> Result<MailingList, MailingError> {
    let not_found = || MailingError::NotFound("list");
    let (Ok(domain), Ok(name)) = (DomainName::parse(domain), ListName::parse(name)) else { return Err(not_found()) };
    let list = in_read(&*app.store, |tx| tx.list_by_name(&domain, &name))?.ok_or_else(not_found)?;
    let closed = list.status == ListStatus::Archived || list.policies.subscription_policy == SubscriptionPolicy::Closed;
    if closed { Err(not_found()) } else { Ok(list) }
}

/// A request through the public form (after [`take_link_request`], and after the page has
/// answered, so that neither the page nor its timing tells whether the address is subscribed):
/// the address becomes pending a confirmation whatever the policy, and the confirmation mail goes
/// out; following it applies the list's policy (`subscriptions::confirm`). An address already
/// subscribed gets nothing. Whether a mail went out is returned for the log only.
pub fn request_by_form(
    app: &Service,
    ctx: &RequestCtx,
    list: &MailingList,
    email: &EmailAddress,
    display_name: Option<String>,
) -> Result<bool, MailingError> {
    let now = app.clock.now();
    let req = AddMember {
        email: email.clone(),
        display_name,
        delivery_mode: DeliveryMode::Regular,
        force: false,
        consent_source: Some("public_form".into()),
        consent_evidence: Some(format!(
            "subscription form {}/p/subscribe/{}/{}",
            app.settings.public_url, list.domain, list.name
        )),
        source_ip: ctx.source.clone(),
    };
    let token = secrets::random_token(32);
    let pending = in_write(&*app.store, |tx| {
        let Some(list) = tx.list_by_id(list.id)? else { return Ok(None) };
        let trigger = Trigger::SubscribeByForm(members::effective_policy(&list));
        let outcome = match members::apply_add(tx, &list, &req, trigger, now) {
            Ok(o) => o,
            Err(MailingError::AlreadySubscribed(_) | MailingError::SubscriptionClosed) => return Ok(None),
            Err(e) => return Err(e),
        };
        let AddOutcome::PendingConfirmation(id) = outcome else { return Ok(None) };
        subscriptions::store_token(tx, id, &token, now)?;
        tx.append_audit(&NewAuditEntry {
            at: now,
            request_id: ctx.request_id.clone(),
            actor: Actor { user_id: None, key_id: None, member_id: Some(id.get()) },
            action: "member.subscribe_form".into(),
            target: format!("member:{}:{id}", list.address()),
            outcome: Outcome::Done,
        })?;
        Ok::<_, MailingError>(Some(list))
    })?;
    match pending {
        Some(list) => {
            subscriptions::send_confirmation(app, &list, email, &token, now);
            Ok(true)
        }
        None => {
            tracing::info!(list = %list.address(), "public form request for an address already subscribed or waiting");
            Ok(false)
        }
    }
}
