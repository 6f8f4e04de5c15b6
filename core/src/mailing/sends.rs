//! Sends: `submit` (the path API posts take, and mail posts will) fans a message out to one
//! queued copy per active `regular` member in one transaction with its `send.submitted` event;
//! reading a send's counts; cancelling the copies still waiting.

use super::Service;
use super::delivery;
use super::idempotency::{self, IdempotentRequest, Keyed};
use super::lists;
use super::model::{CopyCounts, DeliveryMode, SendId, SendKind, SendRecord};
use super::{MailingError, check_text};
use crate::access::principal::{InTx, RequestCtx, audit_done};
use crate::access::{Perm, Principal};
use crate::kernel::{DomainName, EventName, ListName, secrets};
use crate::mailing::ports::NewSend;
use crate::storage::{in_nested, in_read, in_write};
use serde_json::json;

pub const MAX_SUBJECT: usize = 998;

#[derive(Debug, Clone)]
pub struct NewMessage {
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
}

/// What submitting did: the send and how many copies were queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted {
    pub send_id: SendId,
    pub recipients: u64,
}

fn check(m: &NewMessage, max_kb: u32) -> Result<(), MailingError> {
    if m.subject.trim().is_empty() {
        return Err(MailingError::Invalid("subject must not be empty".into()));
    }
    check_text("subject", &m.subject, MAX_SUBJECT, false)?;
    let (text, html) = (m.text.as_deref().unwrap_or(""), m.html.as_deref().unwrap_or(""));
    if text.trim().is_empty() && html.trim().is_empty() {
        return Err(MailingError::Invalid("a message needs text or html".into()));
    }
    let size = m.subject.len() + text.len() + html.len();
    if size > max_kb as usize * 1024 {
        return Err(MailingError::Invalid(format!("the message is larger than the list's limit of {max_kb} KiB")));
    }
    Ok(())
}

/// Submits a message to the list: the send, one queued copy per active regular member and
/// `send.submitted`, in one write transaction with, under an Idempotency-Key, the key's check and
/// stored answer ([`idempotency::guarded`]). A refusal's audit entry is committed.
pub fn submit(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    key: Option<&IdempotentRequest>,
    domain: &DomainName,
    name: &ListName,
    message: NewMessage,
) -> Result<Keyed<Submitted>, MailingError> {
    let now = app.clock.now();
    idempotency::guarded(app, Some(lists::write_key(domain, name)), key, |tx| {
        let list = lists::authorized(InTx(&mut *tx, now), p, ctx, Perm::Send, domain, name, "send.submit")?;
        check(&message, list.policies.max_message_kb)?;
        if list.status == super::model::ListStatus::Archived {
            return Err(MailingError::Conflict("the list is archived: it sends nothing".into()));
        }
        let message_id = format!("{}.{}@{}", now.unix_secs(), secrets::random_hex(12), list.domain);
        let text = message.text.filter(|t| !t.is_empty());
        let html = message.html.filter(|t| !t.is_empty());
        in_nested(tx, |tx| {
            let new = NewSend {
                list_id: list.id,
                subject: &message.subject,
                text: text.as_deref(),
                html: html.as_deref(),
                message_id: &message_id,
                created_by: p.user.as_ref().map(|u| u.id.get()),
                kind: SendKind::Post,
                raw: None,
            };
            enqueue(tx, &list, &new, p, ctx, now)
        })
    })
}

/// The send, its queued copies (one per active regular member), `send.submitted` and the audit
/// entry, in the caller's transaction: what every post becomes, from the API or by mail.
pub(crate) fn enqueue(
    tx: &mut dyn crate::mailing::ports::Tx,
    list: &super::model::MailingList,
    new: &NewSend<'_>,
    p: &Principal,
    ctx: &RequestCtx,
    now: crate::kernel::Timestamp,
) -> Result<Submitted, MailingError> {
    let send_id = tx.insert_send(new, now)?;
    let recipients = tx.fan_out(send_id, list.id, DeliveryMode::Regular, now)?;
    let data = json!({ "send_id": send_id.get(), "recipients": recipients, "subject": new.subject });
    lists::emit(tx, EventName::SendSubmitted, list, data, now)?;
    audit_done(tx, p, ctx, now, "send.submit", &format!("send:{}:{send_id}", list.address()))?;
    Ok(Submitted { send_id, recipients })
}

impl idempotency::Replayable for Submitted {
    fn status(&self) -> u16 {
        202
    }

    fn view(&self) -> serde_json::Value {
        json!({ "send_id": self.send_id.get(), "recipients": self.recipients })
    }
}

pub fn get(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    id: SendId,
) -> Result<(SendRecord, CopyCounts), MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Read, domain, name, "send.read")?;
    in_read(&*app.store, |tx| {
        let send = tx.send_by_id(list.id, id)?.ok_or(MailingError::NotFound("send"))?;
        let counts = tx.copy_counts(id)?;
        Ok((send, counts))
    })
}

/// Cancels the copies still waiting (queued or deferred); 409 when none is. Answers the send as
/// it stands after (the `send` permission suffices to see what one cancelled).
pub fn cancel(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    domain: &DomainName,
    name: &ListName,
    id: SendId,
) -> Result<(SendRecord, CopyCounts), MailingError> {
    let list = lists::authorized(app, p, ctx, Perm::Send, domain, name, "send.cancel")?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        tx.send_by_id(list.id, id)?.ok_or(MailingError::NotFound("send"))?;
        let n = tx.cancel_waiting(id, now)?;
        if n == 0 {
            return Err(MailingError::Conflict("nothing to cancel: no copy of this send is still queued".into()));
        }
        audit_done(tx, p, ctx, now, "send.cancel", &format!("send:{}:{id}", list.address()))?;
        Ok(())
    })?;
    // The send may have nothing left in flight: its aggregate is recorded now, not at the next round.
    delivery::settle(app)?;
    in_read(&*app.store, |tx| {
        let send = tx.send_by_id(list.id, id)?.ok_or(MailingError::NotFound("send"))?;
        Ok((send, tx.copy_counts(id)?))
    })
}
