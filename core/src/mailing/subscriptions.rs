//! Double opt-in: the confirmation mail with its single-use, expiring link, and what following
//! the link does (the pending member becomes active).

use super::MailingError;
use super::Service;
use super::model::{Consent, MailingList, MemberId};
use super::state::{self, MemberState, Trigger};
use super::{lists, members, moderation};
use crate::kernel::{EmailAddress, EventName, Notice, Timestamp, secrets};
use crate::mailing::ports::Tx;
use crate::storage::{StoreError, in_read, in_write};
use serde_json::json;

/// Confirmation links live this long (a subscriber may read the mail days later).
pub const CONFIRM_TTL_SECS: i64 = 7 * 24 * 3600;
pub const CONFIRM_SUBSCRIPTION: &str = "confirm_subscription";

pub(super) fn store_token(tx: &mut dyn Tx, member: MemberId, token: &str, now: Timestamp) -> Result<(), StoreError> {
    let hash = secrets::sha256_hex(token.as_bytes());
    tx.insert_token(CONFIRM_SUBSCRIPTION, &hash, None, Some(member.get()), now, now.plus_secs(CONFIRM_TTL_SECS))
}

/// Mails the confirmation link. A failure is logged, not returned: the request stays pending and
/// asking again sends a new link.
pub(super) fn send_confirmation(app: &Service, list: &MailingList, to: &EmailAddress, token: &str, now: Timestamp) {
    let link = format!("{}/p/confirm/{token}", app.settings.public_url);
    let body = format!(
        "Hello,\n\nSomeone, probably you, asked to subscribe {to} to the list \"{}\" ({}).\n\
         To confirm, open this link (it works once, for 7 days):\n\n{link}\n\n\
         If you did not ask for this, ignore this message: you will not be subscribed.\n",
        list.display_name,
        list.address()
    );
    let subject = format!("Confirm your subscription to {}", list.address());
    let notice = Notice { from: &app.settings.mail_from, to, subject: &subject, body: &body, date: now };
    if let Err(e) = app.mail.send(&notice.compose()) {
        tracing::warn!(list = %list.address(), error = %e, "confirmation mail failed");
    }
}

/// What a confirmation link stands for, for its page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub list_address: String,
    pub list_display_name: String,
    pub email: EmailAddress,
    /// Where the confirmation left the subscription: active, or waiting for a moderator (a
    /// moderated list).
    pub now_active: bool,
}

/// Why a link does not work. One message for the page: unknown, used and expired links are not
/// told apart (the reason is logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkUnusable;

fn find(app: &Service, token: &str) -> Result<Option<(i64, super::model::Member, MailingList)>, MailingError> {
    let hash = secrets::sha256_hex(token.as_bytes());
    let now = app.clock.now();
    in_read(&*app.store, |tx| {
        let Some(t) = tx.token_by_hash(CONFIRM_SUBSCRIPTION, &hash)? else { return Ok(None) };
        if t.used_at.is_some() || t.expires_at <= now {
            tracing::info!(token = t.id, used = t.used_at.is_some(), "confirmation link no longer valid");
            return Ok(None);
        }
        let Some(member) = t.subject_id.map(|id| tx.find_member(MemberId::from_stored(id))).transpose()?.flatten()
        else {
            return Ok(None);
        };
        let Some(list) = tx.list_by_id(member.list_id)? else { return Ok(None) };
        Ok(Some((t.id, member, list)))
    })
}

/// What the link would confirm, without using it (the page asks before acting, so a mail
/// scanner that follows links cannot subscribe anyone).
pub fn peek(app: &Service, token: &str) -> Result<Result<Pending, LinkUnusable>, MailingError> {
    Ok(match find(app, token)? {
        Some((_, m, l)) => Ok(Pending {
            list_address: l.address(),
            list_display_name: l.display_name,
            email: m.email,
            now_active: false,
        }),
        None => Err(LinkUnusable),
    })
}

/// Uses the link: the pending member becomes active (`subscription.confirmed`, `member.added`),
/// or, on a moderated list, waits for a moderator (`subscription.pending`).
pub fn confirm(
    app: &Service,
    token: &str,
    source_ip: Option<String>,
) -> Result<Result<Pending, LinkUnusable>, MailingError> {
    let Some((token_id, found, list)) = find(app, token)? else { return Ok(Err(LinkUnusable)) };
    let now = app.clock.now();
    let confirmed = in_write(&*app.store, |tx| -> Result<_, MailingError> {
        if !tx.use_token(token_id, now)? {
            return Ok(Err(LinkUnusable));
        }
        // Read again under the write lock: the state and the policy may have moved since.
        let Some(mut m) = tx.find_member(found.id)? else { return Ok(Err(LinkUnusable)) };
        let list = tx.list_by_id(list.id)?.unwrap_or(list);
        let from = MemberState::of(m.status, m.pending_reason);
        let Ok(to) = state::next(from, Trigger::Confirm(members::effective_policy(&list))) else {
            tracing::info!(member = m.id.get(), state = ?from, "confirmation of a member that is not waiting for one");
            return Ok(Err(LinkUnusable));
        };
        let (status, reason) = to.stored().expect("a confirmation leads to a stored state");
        let consent_id = tx.insert_consent(&Consent {
            source: Some("double_opt_in".into()),
            evidence: Some(format!("confirmation link followed ({CONFIRM_SUBSCRIPTION} #{token_id})")),
            ip: source_ip,
            at: now,
        })?;
        let now_active = to == MemberState::Active;
        m.status = status;
        m.pending_reason = reason;
        if now_active {
            m.subscribed_at = Some(now);
        }
        m.consent_source = Some("double_opt_in".into());
        m.consent_at = Some(now);
        tx.update_member(&m, Some(consent_id), now)?;
        let data =
            json!({ "member_id": m.id.get(), "email": m.email.to_string(), "delivery_mode": m.delivery_mode.as_str() });
        if now_active {
            lists::emit(tx, EventName::SubscriptionConfirmed, &list, data.clone(), now)?;
            lists::emit(tx, EventName::MemberAdded, &list, data, now)?;
        } else {
            let mut data = data;
            data["pending_reason"] = json!("moderation");
            lists::emit(tx, EventName::SubscriptionPending, &list, data, now)?;
        }
        Ok(Ok((
            Pending {
                list_address: list.address(),
                list_display_name: list.display_name.clone(),
                email: m.email,
                now_active,
            },
            list,
            m.id,
        )))
    })?;
    // A confirmed request that now waits for a moderator: the moderators are told.
    Ok(confirmed.map(|(pending, list, member)| {
        if !pending.now_active {
            let item = moderation::HeldItem::Subscription { member, email: pending.email.clone() };
            moderation::notify_moderators(app, &list, &item);
        }
        pending
    }))
}
