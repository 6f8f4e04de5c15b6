//! The moderation queues: subscriptions a moderated list holds for a moderator (approve, reject),
//! and the notice each owner and moderator gets, one mail per held item, with its link.
//!
//! Deciding runs in one write transaction that reads the item again under the write lock: of two
//! moderators deciding the same item at once, the first decides and the second finds nothing to
//! decide (404, as for any item already decided). A refusal's audit entry is committed.

use super::model::{MailingList, Member, MemberId, PendingReason};
use super::state::{self, MemberState, Trigger};
use super::{MailingError, Service, domains, lists};
use crate::access::principal::{InTx, RequestCtx, audit_done};
use crate::access::{Perm, Principal};
use crate::kernel::{DomainName, EmailAddress, EventName, ListName, Notice, Page, Paged, Timestamp};
use crate::mailing::ports::Tx;
use crate::storage::{in_read, in_write_keeping_refusals};
use serde_json::json;

/// Where a moderator decides, as the notices link it: the API resource of the queue (there is
/// no administration page yet; this is the one place to point the link elsewhere).
pub fn queue_link(app: &Service, list: &MailingList, queue: &str) -> String {
    format!("{}/api/v1/domains/{}/lists/{}/moderation/{queue}", app.settings.public_url, list.domain, list.name)
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
            (
                format!("Subscription to {} waits for moderation: {email}", list.address()),
                format!(
                    "Hello,\n\n{email} asked to subscribe to the list \"{}\" ({}), which holds new \
                     subscriptions for a moderator.\n\n\
                     The queue: {queue}\n\
                     Approve: POST {queue}/{member}/approve\n\
                     Reject: POST {queue}/{member}/reject\n",
                    list.display_name,
                    list.address()
                ),
            )
        }
        HeldItem::Post { id, from, subject, reason } => {
            let queue = queue_link(app, list, "messages");
            (
                format!("Message to {} held for moderation: {subject}", list.address()),
                format!(
                    "Hello,\n\nA message to the list \"{}\" ({}) was held ({reason}).\n\n\
                     From: {from}\nSubject: {subject}\n\n\
                     Read it: {queue}/{id}\n\
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
