//! The moderation queues: subscriptions a moderated list holds for a moderator (approve, reject),
//! and the notice each owner and moderator gets, one mail per held item, with its link.
//!
//! Deciding runs in one write transaction that reads the item again under the write lock: of two
//! moderators deciding the same item at once, the first decides and the second finds nothing to
//! decide (404, as for any item already decided). A refusal's audit entry is committed.

use super::model::{HeaderField, ListId, MailingList, Member, MemberId, PendingReason};
use super::posts::{self, HeldId, HeldPost};
use super::sends::Submitted;
use super::state::{self, MemberState, Trigger};
use super::{MailingError, Service, domains, lists};
use crate::access::principal::{InTx, RequestCtx, audit_done};
use crate::access::{Perm, Principal};
use crate::kernel::{Actor, DomainName, EmailAddress, EventName, ListName, NewAuditEntry, Notice, Page, Paged};
use crate::kernel::{Outcome as Audited, RequestId, Timestamp};
use crate::mailing::ports::Tx;
use crate::storage::{in_nested, in_read, in_write, in_write_keeping_refusals};
use serde_json::json;

/// The first text part of a held post is shown up to this many bytes.
pub const MAX_HELD_TEXT: usize = 64 * 1024;
/// A held post's `headers` object: at most this many fields, each value at most this long.
const MAX_HEADERS: usize = 200;
const MAX_HEADER_VALUE: usize = 8 * 1024;
/// A rejection's reason, as mailed to the poster.
pub const MAX_REJECT_REASON: usize = 4096;

/// The API resource of a queue, which the notices spell out for moderators working by API key.
pub fn queue_link(app: &Service, list: &MailingList, queue: &str) -> String {
    format!("{}/api/v1/domains/{}/lists/{}/moderation/{queue}", app.settings.public_url, list.domain, list.name)
}

/// The administration page where a moderator reads and decides (`rest`: empty for the list's
/// queues, or `/messages/{id}` for one held post): what a person follows from the notice.
pub fn page_link(app: &Service, list: &MailingList, rest: &str) -> String {
    format!("{}/admin/domains/{}/lists/{}/moderation{rest}", app.settings.public_url, list.domain, list.name)
}

/// The subscriptions waiting for a moderator (members `pending` with reason `moderation`).
pub fn subscriptions(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    page: Page,
) -> Result<Paged<Member>, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Moderate, domain, name, "moderation.subscription.list")?;
    Ok(in_read(&*app.store, |tx| tx.pending_moderation(list.id, page))?)
}

/// A moderator's decision on a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The member becomes `active` (`subscription.confirmed`, `member.added`).
    Approve,
    /// The member becomes `removed` (`member.removed`); the requester is told by mail.
    Reject,
}

impl Decision {
    fn action(self) -> &'static str {
        match self {
            Decision::Approve => "moderation.subscription.approve",
            Decision::Reject => "moderation.subscription.reject",
        }
    }
}

/// Approves or rejects a subscription waiting for a moderator. 404 when the member is not (or no
/// longer) waiting for one: unknown, already decided, or waiting for its own confirmation.
/// Answers the member as it now stands.
pub fn decide_subscription(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    id: MemberId,
    decision: Decision,
) -> Result<Member, MailingError> {
    let now = app.clock.now();
    let action = decision.action();
    let (list, member) = in_write_keeping_refusals(&*app.store, |tx| {
        let list = lists::authorized(InTx(&mut *tx, now), p, ctx, Perm::Moderate, domain, name, action)?;
        let target = format!("member:{}:{id}", list.address());
        let waiting = tx
            .member_by_id(list.id, id)?
            .filter(|m| MemberState::of(m.status, m.pending_reason) == MemberState::Pending(PendingReason::Moderation));
        let Some(mut m) = waiting else {
            let e = MailingError::NotFound("subscription waiting for moderation");
            return Err(domains::refuse(InTx(&mut *tx, now), p, ctx, action, &target, e));
        };
        apply(tx, &list, &mut m, decision, now)?;
        audit_done(tx, p, ctx, now, action, &target)?;
        Ok::<_, MailingError>((list, m))
    })?;
    if decision == Decision::Reject {
        tell_rejected(app, &list, &member.email, now);
    }
    Ok(member)
}

/// The decision's writes and events, in `tx`.
fn apply(
    tx: &mut dyn Tx,
    list: &MailingList,
    m: &mut Member,
    decision: Decision,
    now: Timestamp,
) -> Result<(), MailingError> {
    let trigger = match decision {
        Decision::Approve => Trigger::Approve,
        Decision::Reject => Trigger::Reject,
    };
    let next = state::next(MemberState::of(m.status, m.pending_reason), trigger).ok().and_then(MemberState::stored);
    let Some((status, reason)) = next else {
        return Err(MailingError::NotFound("subscription waiting for moderation"));
    };
    m.status = status;
    m.pending_reason = reason;
    match decision {
        Decision::Approve => {
            m.subscribed_at = Some(now);
            tx.update_member(m, None, now)?;
            let data = json!({ "member_id": m.id.get(), "email": m.email.to_string(), "delivery_mode": m.delivery_mode.as_str() });
            lists::emit(tx, EventName::SubscriptionConfirmed, list, data.clone(), now)?;
            lists::emit(tx, EventName::MemberAdded, list, data, now)?;
        }
        Decision::Reject => {
            m.disabled_reason = None;
            tx.update_member(m, None, now)?;
            let data = json!({ "member_id": m.id.get(), "email": m.email.to_string(), "reason": "rejected" });
            lists::emit(tx, EventName::MemberRemoved, list, data, now)?;
        }
    }
    Ok(())
}

/// Tells the requester the moderators declined. A failure is logged: the decision stands.
fn tell_rejected(app: &Service, list: &MailingList, to: &EmailAddress, now: Timestamp) {
    let subject = format!("Your subscription to {} was declined", list.address());
    let body = format!(
        "Hello,\n\nThe moderators of the list \"{}\" ({}) declined the request to subscribe {to}.\n\
         You are not subscribed and will receive no messages from it.\n",
        list.display_name,
        list.address()
    );
    let notice = Notice { from: &app.settings.mail_from, to, subject: &subject, body: &body, date: now };
    if let Err(e) = app.mail.send(&notice.compose()) {
        tracing::warn!(list = %list.address(), error = %e, "rejection mail failed");
    }
}

/// Something a list holds for its moderators.
#[derive(Debug, Clone)]
pub enum HeldItem {
    /// A subscription waiting for a moderator.
    Subscription { member: MemberId, email: EmailAddress },
    /// A post held by the posting policy.
    Post { id: i64, from: String, subject: String, reason: String },
}

/// Mails each owner and moderator of the list (active accounts) one notice about `item`, with
/// the link where it is decided. Called after the item's transaction committed; a failed mail is
/// logged and the item waits in its queue all the same. How many notices went out.
pub fn notify_moderators(app: &Service, list: &MailingList, item: &HeldItem) -> usize {
    let moderators = match in_read(&*app.store, |tx| tx.list_moderators(&list.domain, &list.name)) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(list = %list.address(), error = %e, "cannot read the list's moderators");
            return 0;
        }
    };
    let (subject, body) = notice_text(app, list, item);
    let now = app.clock.now();
    let mut sent = 0;
    for to in &moderators {
        let notice = Notice { from: &app.settings.mail_from, to, subject: &subject, body: &body, date: now };
        match app.mail.send(&notice.compose()) {
            Ok(()) => sent += 1,
            Err(e) => tracing::warn!(list = %list.address(), to = %to, error = %e, "moderation notice failed"),
        }
    }
    sent
}

fn notice_text(app: &Service, list: &MailingList, item: &HeldItem) -> (String, String) {
    match item {
        HeldItem::Subscription { member, email } => {
            let queue = queue_link(app, list, "subscriptions");
            let page = page_link(app, list, "");
            (
                format!("Subscription to {} waits for moderation: {email}", list.address()),
                format!(
                    "Hello,\n\n{email} asked to subscribe to the list \"{}\" ({}), which holds new \
                     subscriptions for a moderator.\n\n\
                     Decide on the administration page: {page}\n\n\
                     Or with the API. The queue: {queue}\n\
                     Approve: POST {queue}/{member}/approve\n\
                     Reject: POST {queue}/{member}/reject\n",
                    list.display_name,
                    list.address()
                ),
            )
        }
        HeldItem::Post { id, from, subject, reason } => {
            let queue = queue_link(app, list, "messages");
            let page = page_link(app, list, &format!("/messages/{id}"));
            (
                format!("Message to {} held for moderation: {subject}", list.address()),
                format!(
                    "Hello,\n\nA message to the list \"{}\" ({}) was held ({reason}).\n\n\
                     From: {from}\nSubject: {subject}\n\n\
                     Read and decide on the administration page: {page}\n\n\
                     Or with the API. Read it: {queue}/{id}\n\
                     Approve: POST {queue}/{id}/approve\n\
                     Reject (the sender is told): POST {queue}/{id}/reject\n\
                     Discard (nobody is told): POST {queue}/{id}/discard\n",
                    list.display_name,
                    list.address()
                ),
            )
        }
    }
}

/// The posts the list holds for its moderators, oldest first.
pub fn messages(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    page: Page,
) -> Result<Paged<HeldPost>, MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Moderate, domain, name, "moderation.message.list")?;
    Ok(in_read(&*app.store, |tx| tx.held_posts(list.id, page))?)
}

/// A held post as a moderator reads it: the listing's fields, its header fields (unfolded, in
/// order; a repeated field's values joined by a line break) and its first text part.
#[derive(Debug, Clone)]
pub struct HeldMessage {
    pub post: HeldPost,
    pub headers: Vec<(String, String)>,
    pub text: Option<String>,
}

/// One held post; 404 when it is not held on this list (unknown, or decided).
pub fn message(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    id: HeldId,
) -> Result<HeldMessage, MailingError> {
    let action = "moderation.message.read";
    let list = lists::authorized(app, p, ctx, Perm::Moderate, domain, name, action)?;
    let Some(post) = in_read(&*app.store, |tx| tx.held_by_id(list.id, id))? else {
        let e = MailingError::NotFound("held message");
        return Err(domains::refuse(app, p, ctx, action, &format!("held:{}:{id}", list.address()), e));
    };
    let headers = header_fields(app.mime.header_fields(&post.raw));
    let text = posts::first_text(&*app.mime, &post.raw, MAX_HELD_TEXT);
    Ok(HeldMessage { post, headers, text })
}

/// The header fields of a message (as the MIME port finds them), unfolded and bounded.
fn header_fields(fields: Vec<HeaderField>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for h in fields {
        let value: String = h
            .value
            .split(['\r', '\n'])
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_HEADER_VALUE)
            .collect();
        let name = h.name;
        let full = out.len() >= MAX_HEADERS;
        match out.iter_mut().find(|(n, _)| n.eq_ignore_ascii_case(&name)) {
            Some((_, v)) if v.len() < MAX_HEADER_VALUE => {
                v.push('\n');
                v.push_str(&value);
            }
            None if !full => out.push((name, value)),
            Some(_) | None => {}
        }
    }
    out
}

/// A moderator's decision on a held post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageDecision {
    /// Posted as if the policy had let it through (`send.submitted`).
    Approve,
    /// Deleted; the poster gets a rejection mail, with the reason when one is given.
    Reject(Option<String>),
    /// Deleted; nobody is told.
    Discard,
}

impl MessageDecision {
    fn action(&self) -> &'static str {
        match self {
            MessageDecision::Approve => "moderation.message.approve",
            MessageDecision::Reject(_) => "moderation.message.reject",
            MessageDecision::Discard => "moderation.message.discard",
        }
    }
}

/// Decides a held post: approve (posted: the send), reject (the poster told) or discard. 404 when
/// it is not held on the list any more (decided, expired). An approval the list cannot send (an
/// archived list: 409) leaves the post held.
pub fn decide_message(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    id: HeldId,
    decision: MessageDecision,
) -> Result<Option<Submitted>, MailingError> {
    if let MessageDecision::Reject(Some(reason)) = &decision {
        super::check_text("reason", reason, MAX_REJECT_REASON, true)?;
    }
    let now = app.clock.now();
    let action = decision.action();
    let (list, post, submitted) = in_write_keeping_refusals(&*app.store, |tx| {
        let list = lists::authorized(InTx(&mut *tx, now), p, ctx, Perm::Moderate, domain, name, action)?;
        let target = format!("held:{}:{id}", list.address());
        let Some(post) = tx.held_by_id(list.id, id)? else {
            let e = MailingError::NotFound("held message");
            return Err(domains::refuse(InTx(&mut *tx, now), p, ctx, action, &target, e));
        };
        let submitted = in_nested(tx, |tx| {
            if !tx.delete_held(list.id, id)? {
                return Err(MailingError::NotFound("held message"));
            }
            let submitted = match decision {
                MessageDecision::Approve => Some(posts::publish(&*app.mime, tx, &list, &post.raw, p, ctx, now)?),
                MessageDecision::Reject(_) | MessageDecision::Discard => None,
            };
            audit_done(tx, p, ctx, now, action, &target)?;
            Ok::<_, MailingError>(submitted)
        })?;
        Ok::<_, MailingError>((list, post, submitted))
    })?;
    if let MessageDecision::Reject(reason) = &decision {
        tell_poster(app, &list, &post, reason.as_deref(), now);
    }
    Ok(submitted)
}

/// Tells the poster of a rejected post, with the moderator's reason. A failure is logged.
fn tell_poster(app: &Service, list: &MailingList, post: &HeldPost, reason: Option<&str>, now: Timestamp) {
    let to = post.from.as_deref().or(post.envelope_from.as_deref()).and_then(|a| EmailAddress::parse(a).ok());
    let Some(to) = to else {
        tracing::info!(list = %list.address(), held = post.id.get(), "rejected post without an address to tell");
        return;
    };
    let subject = format!("Your message to {} was rejected", list.address());
    let why = reason.map_or_else(String::new, |r| format!("\nThe moderator's reason:\n\n{r}\n"));
    let body = format!(
        "Hello,\n\nYour message to the list \"{}\" ({}) was not distributed: its moderators rejected it.\n\n\
         Subject: {}\n{why}",
        list.display_name,
        list.address(),
        post.subject.as_deref().unwrap_or("")
    );
    let notice = Notice { from: &app.settings.mail_from, to: &to, subject: &subject, body: &body, date: now };
    if let Err(e) = app.mail.send(&notice.compose()) {
        tracing::warn!(list = %list.address(), error = %e, "rejection mail failed");
    }
}

/// Tells the list's owners and moderators about a post just held (after its transaction
/// committed). A post no longer held (decided meanwhile) is not announced.
pub fn announce_held(app: &Service, list: ListId, id: HeldId) {
    let found = in_read(&*app.store, |tx| {
        Ok::<_, crate::storage::StoreError>((tx.list_by_id(list)?, tx.held_by_id(list, id)?))
    });
    match found {
        Ok((Some(list), Some(post))) => {
            let item = HeldItem::Post {
                id: id.get(),
                from: post.from.or(post.envelope_from).unwrap_or_default(),
                subject: post.subject.unwrap_or_default(),
                reason: post.reason.as_str().to_owned(),
            };
            notify_moderators(app, &list, &item);
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(held = id.get(), error = %e, "cannot read a held post to announce it"),
    }
}

/// Held posts past their list's `held_days` are discarded (each audited as the housekeeping's
/// `moderation.message.expire`); how many.
pub fn expire_held(app: &Service) -> Result<u64, MailingError> {
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let expired = tx.expire_held(now)?;
        for (list, id) in &expired {
            let target = match tx.list_by_id(*list)? {
                Some(l) => format!("held:{}:{id}", l.address()),
                None => format!("held:{}:{id}", list.get()),
            };
            tx.append_audit(&NewAuditEntry {
                at: now,
                request_id: RequestId::internal("housekeeping"),
                actor: Actor { user_id: None, key_id: None, member_id: None },
                action: "moderation.message.expire".into(),
                target,
                outcome: Audited::Done,
            })?;
        }
        Ok::<_, MailingError>(expired.len() as u64)
    })
}
