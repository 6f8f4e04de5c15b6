//! The delivery worker: claims due copies with a lease, composes and hands each to the mail
//! transport outside any transaction, records each outcome (4xx -> deferred with backoff, failed
//! as a temporary bounce once past the retry horizon; 5xx -> bounced, a permanent bounce of the
//! member), and records every settled send's aggregate exactly once. Also the unsubscription
//! links that the copies carry.

use super::MailingError;
use super::Service;
use super::bounces::{self, BounceFacts};
use super::compose;
use super::credentials::{self, CredentialKind};
use super::members;
use super::model::{BounceSource, CopyState, MailingList, Permanence, SendRecord, SendState};
use super::state::Trigger;
use super::{dkim, lists};
use crate::kernel::{EventName, MailTransport, SendError, Timestamp, secrets};
use crate::storage::{in_read, in_write};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

pub const UNSUBSCRIBE: &str = "unsubscribe";
/// Unsubscription links work this long after the copy went out (then the mailto form remains).
pub const UNSUBSCRIBE_TTL_SECS: i64 = 90 * 24 * 3600;

/// How long a copy is retried after a temporary failure (Postfix's `maximal_queue_lifetime`).
pub const RETRY_HORIZON_SECS: i64 = 5 * 24 * 3600;

#[derive(Debug, Clone, Copy)]
pub struct DeliveryConfig {
    /// Copies claimed per round.
    pub batch: u32,
    /// A claimed copy is the worker's for this long; then it returns to the queue.
    pub lease_secs: i64,
    /// The first retry waits this long, doubling per attempt up to six hours.
    pub retry_base_secs: i64,
    /// A copy still refused temporarily this long after it was queued fails as a temporary
    /// (soft) bounce.
    pub retry_horizon_secs: i64,
    /// Batches delivered at once to one destination domain, across every worker and process
    /// (Postfix's `default_destination_concurrency_limit` is 20): a big list mostly at one
    /// provider does not open more sessions towards it than this.
    pub domain_concurrency: u32,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            batch: 100,
            lease_secs: 300,
            retry_base_secs: 30,
            retry_horizon_secs: RETRY_HORIZON_SECS,
            domain_concurrency: 20,
        }
    }
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    pub claimed: u64,
    pub sent: u64,
    pub deferred: u64,
    pub failed: u64,
    pub requeued: u64,
}

/// The wait before attempt `attempts + 1`.
pub fn backoff(base_secs: i64, attempts: u32) -> i64 {
    let doubled = base_secs.saturating_mul(1_i64 << attempts.saturating_sub(1).min(30));
    doubled.min(6 * 3600)
}

/// One round: requeue expired leases, claim a batch, deliver it, record outcomes and aggregates.
pub fn run_once(app: &Service, cfg: &DeliveryConfig) -> Result<Round, MailingError> {
    let now = app.clock.now();
    let mut round = Round::default();
    // Idle rounds (most of them) only read: several workers each taking the write lock four
    // times a second made every other writer (an import, an added member) wait its turn.
    if !in_read(&*app.store, |tx| tx.copies_due(now))? {
        settle(app)?;
        return Ok(round);
    }
    let claimed = in_write(&*app.store, |tx| {
        round.requeued = tx.requeue_expired(now)?;
        let copies = tx.claim_copies(now, now.plus_secs(cfg.lease_secs), cfg.batch, cfg.domain_concurrency)?;
        let mut sends: HashMap<i64, SendRecord> = HashMap::new();
        let mut posts: HashMap<i64, Vec<u8>> = HashMap::new();
        let mut lists: HashMap<i64, MailingList> = HashMap::new();
        let mut signers: HashMap<i64, Option<dkim::Signer>> = HashMap::new();
        // A list with a submission account sends through it (never through the relay instead).
        let mut accounts: HashMap<i64, Result<Arc<dyn MailTransport>, String>> = HashMap::new();
        let mut prepared = Vec::with_capacity(copies.len());
        for copy in copies {
            if let std::collections::hash_map::Entry::Vacant(e) = sends.entry(copy.send_id.get())
                && let Some(s) = tx.send_by_id(copy.list_id, copy.send_id)?
            {
                tx.mark_sending(s.id)?;
                if let Some(raw) = tx.send_raw(s.id)? {
                    posts.insert(s.id.get(), raw);
                }
                e.insert(s);
            }
            if let std::collections::hash_map::Entry::Vacant(e) = lists.entry(copy.list_id.get())
                && let Some(l) = tx.list_by_id(copy.list_id)?
            {
                if let std::collections::hash_map::Entry::Vacant(s) = signers.entry(l.domain_id.get()) {
                    s.insert(dkim::signer_for(app, tx, l.domain_id)?);
                }
                if let Some(cred) = tx.credential(l.id, CredentialKind::Submission)? {
                    accounts.insert(l.id.get(), credentials::submission_transport(app, &cred));
                }
                e.insert(l);
            }
            // Each copy carries its own unsubscription link, stored hashed like every token.
            let token = secrets::random_token(16);
            let hash = secrets::sha256_hex(token.as_bytes());
            tx.insert_token(
                UNSUBSCRIBE,
                &hash,
                None,
                Some(copy.member_id.get()),
                now,
                now.plus_secs(UNSUBSCRIBE_TTL_SECS),
            )?;
            prepared.push((copy, token));
        }
        Ok::<_, MailingError>((prepared, sends, lists, signers, posts, accounts))
    })?;
    let (prepared, sends, lists, signers, posts, accounts) = claimed;
    // Each send's copies are built once for the batch by the MIME port: from the post for a
    // send made from one (the poster's DMARC policy looked up outside any transaction), else
    // from the send's text and HTML (also when the stored post no longer parses).
    let templates: HashMap<i64, compose::CopyTemplate> = sends
        .iter()
        .filter_map(|(id, send)| {
            let list = lists.get(&send.list_id.get())?;
            let from_post = posts.get(id).and_then(|raw| {
                let poster = super::posts::summarize(&*app.mime, raw, None).from;
                let domain = poster.as_ref().map(|a| a.domain().as_str());
                let from = super::dmarc::from_handling(&app.mail_in.dmarc, &*app.egress.dns, list, domain, now);
                compose::post_template(&*app.mime, list, send, raw, from, now)
            });
            Some((*id, from_post.unwrap_or_else(|| compose::send_template(&*app.mime, list, send, now))))
        })
        .collect();
    round.claimed = prepared.len() as u64;
    let mut outcomes = Vec::with_capacity(prepared.len());
    // Accounts that answered "not now" in this round, and until when they rest: their other
    // copies go back to the queue untried; other lists' copies go on.
    let mut throttled: HashMap<i64, Timestamp> = HashMap::new();
    let mut released = Vec::new();
    for (copy, token) in &prepared {
        let list_key = copy.list_id.get();
        if let Some(until) = throttled.get(&list_key) {
            released.push((copy.id, *until));
            continue;
        }
        let (Some(template), Some(list)) = (templates.get(&copy.send_id.get()), lists.get(&copy.list_id.get())) else {
            outcomes.push((copy.id, CopyState::Failed, None, Some("the send or its list is gone".to_owned()), None));
            continue;
        };
        let url = format!("{}/p/unsubscribe/{token}", app.settings.public_url);
        let verp = bounces::verp_token(&app.data_key, copy.id);
        let mut message = template.copy(list, &verp, &copy.recipient, &url);
        dkim::sign_message(signers.get(&list.domain_id.get()).and_then(Option::as_ref), &mut message);
        let transport = match accounts.get(&list_key) {
            None => Arc::clone(&app.mail),
            Some(Ok(account)) => Arc::clone(account),
            Some(Err(why)) => Arc::new(Unusable(why.clone())),
        };
        let sent = transport.send(&message);
        if accounts.contains_key(&list_key)
            && let Err(SendError::Temporary(e)) = &sent
        {
            let until = app.clock.now().plus_secs(cfg.retry_base_secs);
            tracing::info!(list = list_key, until = %until.to_rfc3339(), error = %e, "submission account slowed down");
            throttled.insert(list_key, until);
        }
        let at = app.clock.now();
        let outcome = match sent {
            Ok(()) => (copy.id, CopyState::Sent, None, None, None),
            // A submission account's 5xx is the provider refusing the account or the message
            // (authentication, a sending policy), not the recipient's server: the copy fails and
            // no member is scored for it (a wrong password must not disable a whole list).
            Err(SendError::Permanent(e)) if accounts.contains_key(&list_key) => {
                (copy.id, CopyState::Failed, None, Some(e), None)
            }
            // The receiving server refused the copy: a permanent bounce of its member.
            Err(SendError::Permanent(e)) => {
                let facts = smtp_bounce(Permanence::Permanent, BounceSource::Smtp, &e);
                (copy.id, CopyState::Bounced, None, Some(e), Some((copy.clone(), facts)))
            }
            Err(SendError::Temporary(e)) if at >= copy.created_at.plus_secs(cfg.retry_horizon_secs) => {
                let why = format!(
                    "gave up after {} attempts over {} days: {e}",
                    copy.attempts,
                    cfg.retry_horizon_secs / 86_400
                );
                let facts = smtp_bounce(Permanence::Temporary, BounceSource::Expired, &why);
                (copy.id, CopyState::Failed, None, Some(why), Some((copy.clone(), facts)))
            }
            Err(SendError::Temporary(e)) => {
                let next = at.plus_secs(backoff(cfg.retry_base_secs, copy.attempts));
                (copy.id, CopyState::Deferred, Some(next), Some(e), None)
            }
        };
        outcomes.push(outcome);
    }
    let done = app.clock.now();
    if outcomes.is_empty() && released.is_empty() {
        settle(app)?;
        return Ok(round);
    }
    let reenable = in_write(&*app.store, |tx| {
        for (list, until) in &throttled {
            tx.throttle_submission(super::model::ListId::from_stored(*list), *until)?;
        }
        for (id, at) in &released {
            tx.release_copy(*id, *at)?;
        }
        let mut reenable = Vec::new();
        for (id, state, next, error, bounce) in &outcomes {
            // A copy whose lease expired meanwhile was requeued: its new holder records it.
            if tx.finish_copy(*id, *state, *next, error.as_deref(), done)? {
                match state {
                    CopyState::Sent => round.sent += 1,
                    CopyState::Deferred => round.deferred += 1,
                    _ => round.failed += 1,
                }
                if let Some((copy, facts)) = bounce
                    && let (Some(list), Some(mut member)) =
                        (lists.get(&copy.list_id.get()), tx.find_member(copy.member_id)?)
                {
                    let recorded = bounces::record(tx, list, &mut member, Some(copy.id), facts, done)?;
                    reenable.extend(recorded.reenable);
                }
            }
        }
        Ok::<_, MailingError>(reenable)
    })?;
    for mail in &reenable {
        bounces::send_reenable(app, mail, done);
    }
    settle(app)?;
    Ok(round)
}

/// The transport of an account that cannot be used now (no keyring, a key missing from it): the
/// copy waits, with the reason as its error.
struct Unusable(String);

impl MailTransport for Unusable {
    fn send(&self, _: &crate::kernel::OutgoingMessage) -> Result<(), SendError> {
        Err(SendError::Temporary(self.0.clone()))
    }
}

/// Records the aggregate of every send whose copies are all terminal: `send.completed` when at
/// least one was delivered, `send.failed` otherwise. Guarded by the send's state change in the
/// database, so it happens once whatever the number of workers and processes.
pub fn settle(app: &Service) -> Result<u64, MailingError> {
    let mut closed = 0;
    loop {
        let ids = in_read(&*app.store, |tx| tx.settled_sends(100))?;
        if ids.is_empty() {
            return Ok(closed);
        }
        let n = ids.len();
        for id in ids {
            let now = app.clock.now();
            in_write(&*app.store, |tx| {
                let counts = tx.copy_counts(id)?;
                let total: u64 = counts.0.iter().map(|(_, n)| n).sum();
                let sent = counts.get(CopyState::Sent);
                let (state, event) = if sent > 0 || total == 0 {
                    (SendState::Completed, EventName::SendCompleted)
                } else if counts.get(CopyState::Cancelled) == total {
                    (SendState::Cancelled, EventName::SendFailed)
                } else {
                    (SendState::Failed, EventName::SendFailed)
                };
                if tx.close_send(id, state, now)? {
                    let list_id = in_list(tx, id)?;
                    if let Some(list) = list_id.and_then(|l| tx.list_by_id(l).transpose()).transpose()? {
                        let data = json!({
                            "send_id": id.get(),
                            "state": state.as_str(),
                            "recipients": total,
                            "sent": sent,
                            "failed": counts.get(CopyState::Failed) + counts.get(CopyState::Bounced),
                            "cancelled": counts.get(CopyState::Cancelled),
                        });
                        lists::emit(tx, event, &list, data, now)?;
                    }
                    closed += 1;
                }
                Ok::<_, MailingError>(())
            })?;
        }
        if n < 100 {
            return Ok(closed);
        }
    }
}

/// A refusal of the receiving server as a bounce: its enhanced status code (`5.1.1`) or else its
/// reply code (`550`), and the reply as the diagnostic.
fn smtp_bounce(permanence: Permanence, source: BounceSource, reply: &str) -> BounceFacts {
    let words: Vec<&str> = reply.split_whitespace().take(2).collect();
    let enhanced = words.iter().find(|w| {
        let parts: Vec<&str> = w.split('.').collect();
        parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    });
    let basic = words.first().filter(|w| w.len() == 3 && w.bytes().all(|b| b.is_ascii_digit()));
    BounceFacts {
        permanence,
        source,
        status_code: enhanced.or(basic).map(|s| (*s).to_owned()),
        diagnostic: Some(reply.chars().take(1000).collect()),
    }
}

fn in_list(
    tx: &mut dyn crate::mailing::ports::Tx,
    id: super::model::SendId,
) -> Result<Option<super::model::ListId>, MailingError> {
    Ok(tx.send_list(id)?)
}

/// What an unsubscription link stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub list_address: String,
    pub email: String,
}

fn find_link(
    app: &Service,
    token: &str,
    now: Timestamp,
) -> Result<Option<(i64, super::model::Member, MailingList)>, MailingError> {
    let hash = secrets::sha256_hex(token.as_bytes());
    in_read(&*app.store, |tx| {
        let Some(t) = tx.token_by_hash(UNSUBSCRIBE, &hash)? else { return Ok(None) };
        if t.expires_at <= now {
            return Ok(None);
        }
        let Some(m) =
            t.subject_id.map(|id| tx.find_member(super::model::MemberId::from_stored(id))).transpose()?.flatten()
        else {
            return Ok(None);
        };
        let Some(l) = tx.list_by_id(m.list_id)? else { return Ok(None) };
        Ok(Some((t.id, m, l)))
    })
}

/// The page behind a link (GET): what it would unsubscribe; `None` for an unknown or expired link.
pub fn unsubscribe_peek(app: &Service, token: &str) -> Result<Option<Subscription>, MailingError> {
    Ok(find_link(app, token, app.clock.now())?
        .map(|(_, m, l)| Subscription { list_address: l.address(), email: m.email.to_string() }))
}

/// RFC 8058 one-click (POST): unsubscribes without a login. Repeating it is harmless (the member
/// stays unsubscribed); `None` for an unknown or expired link.
pub fn unsubscribe(app: &Service, token: &str) -> Result<Option<Subscription>, MailingError> {
    let now = app.clock.now();
    let Some((token_id, found, list)) = find_link(app, token, now)? else { return Ok(None) };
    in_write(&*app.store, |tx| {
        let Some(mut m) = tx.find_member(found.id)? else { return Ok(None) };
        // Already gone: the link still answers as it did, nothing is written twice.
        members::leave(tx, &list, &mut m, Trigger::Unsubscribe, "unsubscribe_link", now)?;
        tx.use_token(token_id, now)?;
        Ok(Some(Subscription { list_address: list.address(), email: m.email.to_string() }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_replies_give_their_status_code() {
        let f = smtp_bounce(Permanence::Permanent, BounceSource::Smtp, "550 5.7.1 blocked");
        assert_eq!(f.status_code.as_deref(), Some("5.7.1"));
        let f = smtp_bounce(Permanence::Permanent, BounceSource::Smtp, "554 go away");
        assert_eq!(f.status_code.as_deref(), Some("554"));
        assert_eq!(smtp_bounce(Permanence::Permanent, BounceSource::Smtp, "").status_code, None);
    }

    #[test]
    fn backoff_doubles_from_the_base_and_stops_at_six_hours() {
        assert_eq!(backoff(30, 1), 30);
        assert_eq!(backoff(30, 2), 60);
        assert_eq!(backoff(30, 3), 120);
        assert_eq!(backoff(30, 20), 6 * 3600);
        assert_eq!(backoff(1, 0), 1);
    }
}
