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
    use crate::access::Principal;
    use crate::access::principal::RequestCtx;
    use crate::access::users::{self, NewUser};
    use crate::adapters::sqlite::SqliteStore;
    use crate::kernel::Clock;
    use crate::kernel::{DomainName, EmailAddress, ListName};
    use crate::mailing::members::{self, AddMember};
    use crate::mailing::model::SubscriptionPolicy;
    use crate::mailing::{domains, lists, sends};
    use crate::testing::{FixedClock, RecordingTransport};
    use std::sync::Arc;

    struct World {
        app: crate::mailing::Service,
        clock: Arc<FixedClock>,
        mail: Arc<RecordingTransport>,
        _dir: tempfile::TempDir,
    }

    /// A real SQLite store, a clock that moves only when told, and a recording transport; a list
    /// with `n` active regular members and one send to them.
    fn world(n: usize) -> (World, crate::mailing::model::SendId) {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
        let store = SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
        let mail = Arc::new(RecordingTransport::default());
        let app =
            crate::testing::mailing(Arc::new(store), clock.clone(), mail.clone(), crate::egress::Egress::offline());
        let (p, ctx) = (Principal::operator(), RequestCtx::cli());
        let (d, l) = (DomainName::parse("example.org").unwrap(), ListName::parse("news").unwrap());
        let owner = EmailAddress::parse("owner@example.org").unwrap();
        users::create(
            &app.access,
            &p,
            &ctx,
            NewUser { email: owner.clone(), profile: Default::default(), password: None },
        )
        .unwrap();
        domains::create(
            &app,
            &p,
            &ctx,
            domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None },
        )
        .unwrap();
        let new_list = lists::NewList {
            name: l.clone(),
            display_name: "News".into(),
            owner,
            kind: None,
            subscription_policy: Some(SubscriptionPolicy::Open),
        };
        lists::create(&app, &p, &ctx, &d, new_list).unwrap();
        for i in 0..n {
            let req = AddMember::regular(EmailAddress::parse(&format!("m{i}@example.net")).unwrap());
            members::add(&app, &p, &ctx, None, &d, &l, req).unwrap();
        }
        mail.sent.lock().unwrap().clear(); // the owner's invitation
        let msg = sends::NewMessage { subject: "Hi".into(), text: Some("x".into()), html: None };
        let send = sends::submit(&app, &p, &ctx, None, &d, &l, msg).unwrap().ran().unwrap().send_id;
        (World { app, clock, mail, _dir: dir }, send)
    }

    fn events(app: &Service, name: EventName) -> usize {
        in_read(&*app.store, |tx| tx.events_after(None, 10_000)).unwrap().iter().filter(|e| e.name == name).count()
    }

    #[test]
    fn a_worker_that_dies_holding_a_lease_loses_no_copy_and_cannot_overwrite_its_successor() {
        let (w, _) = world(3);
        let cfg = DeliveryConfig::default();
        let now = w.clock.now();
        // A worker claims everything, then dies before sending.
        let dead = in_write(&*w.app.store, |tx| tx.claim_copies(now, now.plus_secs(cfg.lease_secs), 100, 20)).unwrap();
        assert_eq!(dead.len(), 3);
        assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0, "leased copies are not claimed twice");
        w.clock.advance_secs(cfg.lease_secs + 1);
        let round = run_once(&w.app, &cfg).unwrap();
        assert_eq!((round.requeued, round.sent), (3, 3));
        assert_eq!(w.mail.sent.lock().unwrap().len(), 3);
        // The dead worker wakes up and reports: its lease is gone, nothing changes.
        let later = w.clock.now();
        let stale =
            in_write(&*w.app.store, |tx| tx.finish_copy(dead[0].id, CopyState::Failed, None, Some("late"), later));
        assert_eq!(stale, Ok(false));
        assert_eq!(events(&w.app, EventName::SendCompleted), 1);
        assert_eq!(settle(&w.app).unwrap(), 0, "the aggregate is recorded once");
        assert_eq!(events(&w.app, EventName::SendCompleted), 1);
    }

    #[test]
    fn a_destination_domain_gets_at_most_its_concurrency_in_batches_at_once() {
        let (w, _) = world(5);
        let lease = |tx: &mut dyn crate::mailing::ports::Tx, at: Timestamp, per_domain| {
            tx.claim_copies(at, at.plus_secs(300), 2, per_domain)
        };
        let t0 = w.clock.now();
        let first = in_write(&*w.app.store, |tx| lease(tx, t0, 1)).unwrap();
        assert_eq!(first.len(), 2);
        w.clock.advance_secs(1);
        let t1 = w.clock.now();
        // example.net has one batch in flight: with a limit of 1 nothing more goes there.
        assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t1, 1)).unwrap().len(), 0);
        // A limit of 2 lets a second batch go.
        assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t1, 2)).unwrap().len(), 2);
        w.clock.advance_secs(1);
        let t2 = w.clock.now();
        assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t2, 2)).unwrap().len(), 0);
        // The first batch finishes: room for one more.
        in_write(&*w.app.store, |tx| {
            for c in &first {
                tx.finish_copy(c.id, CopyState::Sent, None, None, t2)?;
            }
            Ok::<_, crate::storage::StoreError>(())
        })
        .unwrap();
        assert_eq!(in_write(&*w.app.store, |tx| lease(tx, t2, 2)).unwrap().len(), 1);
    }

    /// `COURRIER_DOMAIN_CONCURRENCY` holds across processes: the claim counts the batches leased
    /// in the database, whichever process leased them (here a second store on the same file, as a
    /// `courrier worker` beside the server opens it).
    #[test]
    fn a_destination_domains_concurrency_counts_the_batches_another_process_leased() {
        let (w, _) = world(4);
        let other = SqliteStore::open(&w._dir.path().join("t.db"), w.clock.now().unix_micros()).unwrap();
        let other: &dyn crate::storage::Store<dyn crate::mailing::ports::Tx> = &other;
        let t0 = w.clock.now();
        let first = in_write(&*w.app.store, |tx| tx.claim_copies(t0, t0.plus_secs(300), 2, 1)).unwrap();
        assert_eq!(first.len(), 2);
        let t1 = t0.plus_secs(1);
        let none = in_write(other, |tx| tx.claim_copies(t1, t1.plus_secs(300), 2, 1)).unwrap();
        assert!(none.is_empty(), "example.net has its one batch in flight, leased by the other process");
        let second = in_write(other, |tx| tx.claim_copies(t1, t1.plus_secs(300), 2, 2)).unwrap();
        assert_eq!(second.len(), 2, "a limit of 2 lets the other process lease a second batch");
    }

    fn member0(w: &World) -> crate::mailing::model::Member {
        in_read(&*w.app.store, |tx| {
            let list =
                tx.list_by_name(&DomainName::parse("example.org").unwrap(), &ListName::parse("news").unwrap())?;
            tx.member_by_email(list.unwrap().id, &EmailAddress::parse("m0@example.net").unwrap())
        })
        .unwrap()
        .unwrap()
    }

    #[test]
    fn temporary_failures_back_off_then_fail_as_a_soft_bounce_past_the_retry_horizon() {
        let (w, send) = world(1);
        let cfg = DeliveryConfig { retry_horizon_secs: 30, retry_base_secs: 10, ..DeliveryConfig::default() };
        *w.mail.fail_with.lock().unwrap() = Some(SendError::Temporary("451 4.3.0 try later".into()));
        assert_eq!(run_once(&w.app, &cfg).unwrap().deferred, 1);
        assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0, "not before its time");
        w.clock.advance_secs(10);
        assert_eq!(run_once(&w.app, &cfg).unwrap().deferred, 1, "second attempt");
        w.clock.advance_secs(19);
        assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0, "the second wait is twice the first");
        w.clock.advance_secs(1);
        assert_eq!(run_once(&w.app, &cfg).unwrap().failed, 1, "30 s after it was queued: past the horizon");
        let list = in_read(&*w.app.store, |tx| tx.send_list(send)).unwrap().unwrap();
        let s = in_read(&*w.app.store, |tx| tx.send_by_id(list, send)).unwrap().unwrap();
        assert_eq!(s.state, SendState::Failed);
        assert_eq!(events(&w.app, EventName::SendFailed), 1);
        // A soft bounce: recorded, not scored, no event.
        let m = member0(&w);
        assert_eq!((m.bounce_score, m.last_bounce_at), (0, None));
        let recorded = in_read(&*w.app.store, |tx| tx.member_bounces(m.id, 10)).unwrap();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].permanence, Permanence::Temporary);
        assert_eq!(recorded[0].source, BounceSource::Expired);
        assert!(!recorded[0].scored);
        assert_eq!(events(&w.app, EventName::MemberBounced), 0);
    }

    #[test]
    fn a_5xx_of_the_receiving_server_bounces_the_copy_and_scores_its_member() {
        let (w, send) = world(1);
        *w.mail.fail_with.lock().unwrap() =
            Some(SendError::Permanent("550 5.1.1 <m0@example.net>: no such user".into()));
        let round = run_once(&w.app, &DeliveryConfig::default()).unwrap();
        assert_eq!((round.sent, round.failed), (0, 1));
        let counts = in_read(&*w.app.store, |tx| tx.copy_counts(send)).unwrap();
        assert_eq!(counts.get(CopyState::Bounced), 1);
        let m = member0(&w);
        assert_eq!(m.bounce_score, 1);
        assert_eq!(m.last_bounce_at, Some(w.clock.now()));
        let recorded = in_read(&*w.app.store, |tx| tx.member_bounces(m.id, 10)).unwrap();
        assert_eq!(recorded[0].status_code.as_deref(), Some("5.1.1"));
        assert_eq!(recorded[0].source, BounceSource::Smtp);
        let evs = in_read(&*w.app.store, |tx| tx.events_after(None, 100)).unwrap();
        let bounced: Vec<_> = evs.iter().filter(|e| e.name == EventName::MemberBounced).collect();
        assert_eq!(bounced.len(), 1);
        assert_eq!(bounced[0].data["score"], 1);
        assert_eq!(bounced[0].data["status_code"], "5.1.1");
        assert_eq!(bounced[0].data["member"]["email"], "m0@example.net");
        assert_eq!(events(&w.app, EventName::SendFailed), 1, "no copy was delivered");
    }

    #[test]
    fn smtp_replies_give_their_status_code() {
        let f = smtp_bounce(Permanence::Permanent, BounceSource::Smtp, "550 5.7.1 blocked");
        assert_eq!(f.status_code.as_deref(), Some("5.7.1"));
        let f = smtp_bounce(Permanence::Permanent, BounceSource::Smtp, "554 go away");
        assert_eq!(f.status_code.as_deref(), Some("554"));
        assert_eq!(smtp_bounce(Permanence::Permanent, BounceSource::Smtp, "").status_code, None);
    }

    /// Accounts whose every submission goes to one recording transport.
    struct OneAccount(Arc<RecordingTransport>);

    impl crate::mailing::accounts::MailAccounts for OneAccount {
        fn check_imap(
            &self,
            _: &crate::mailing::accounts::Endpoint,
            _: &crate::mailing::accounts::Login,
            _: &str,
        ) -> Result<(), crate::mailing::accounts::AccountError> {
            Ok(())
        }
        fn check_smtp(
            &self,
            _: &crate::mailing::accounts::Endpoint,
            _: &crate::mailing::accounts::Login,
        ) -> Result<(), crate::mailing::accounts::AccountError> {
            Ok(())
        }
        fn submission(
            &self,
            _: crate::mailing::accounts::Endpoint,
            login: crate::mailing::accounts::Login,
        ) -> Arc<dyn MailTransport> {
            assert_eq!(login.password, "pw", "the password opened from the keyring");
            Arc::clone(&self.0) as Arc<dyn MailTransport>
        }
        fn open_mailbox(
            &self,
            _: &crate::mailing::accounts::Endpoint,
            _: &crate::mailing::accounts::Login,
            _: &str,
        ) -> Result<Box<dyn crate::mailing::accounts::Mailbox>, crate::mailing::accounts::AccountError> {
            Err(crate::mailing::accounts::AccountError::Failed("no mailbox".into()))
        }
    }

    /// Gives "news" a submission account (a recording transport) that answers `answer`.
    fn with_account(w: &mut World, answer: SendError) -> Arc<RecordingTransport> {
        let d = DomainName::parse("example.org").unwrap();
        let account = Arc::new(RecordingTransport::default());
        *account.fail_with.lock().unwrap() = Some(answer);
        let keyring = crate::kernel::keyring::Keyring::parse("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=").unwrap();
        let news =
            in_read(&*w.app.store, |tx| tx.list_by_name(&d, &ListName::parse("news").unwrap())).unwrap().unwrap();
        let now = w.clock.now();
        let cred = credentials::MailCredential {
            list_id: news.id,
            kind: CredentialKind::Submission,
            host: "smtp.example.net".into(),
            port: 587,
            security: crate::mailing::accounts::Security::StartTls,
            username: "news".into(),
            password_sealed: keyring
                .seal(b"pw", &crate::kernel::keyring::Keyring::binding(news.id.get(), "submission")),
            folder: None,
            last_ok_at: None,
            last_error: None,
            last_error_at: None,
            created_at: now,
            updated_at: now,
        };
        in_write(&*w.app.store, |tx| tx.upsert_credential(&cred)).unwrap();
        w.app.credentials = credentials::Credentials::new(Some(keyring), Arc::new(OneAccount(Arc::clone(&account))));
        account
    }

    #[test]
    fn a_submission_account_answering_5xx_fails_the_copies_and_scores_no_member() {
        let (mut w, send) = world(2);
        let account = with_account(&mut w, SendError::Permanent("535 5.7.8 authentication failed".into()));
        let round = run_once(&w.app, &DeliveryConfig::default()).unwrap();
        assert_eq!((round.sent, round.failed), (0, 2), "{round:?}");
        let counts = in_read(&*w.app.store, |tx| tx.copy_counts(send)).unwrap();
        assert_eq!(counts.get(CopyState::Failed), 2);
        assert_eq!(counts.get(CopyState::Bounced), 0);
        assert!(account.sent.lock().unwrap().is_empty());
        assert!(w.mail.sent.lock().unwrap().is_empty(), "never through the relay instead");
        let m = member0(&w);
        assert_eq!((m.bounce_score, m.last_bounce_at), (0, None));
        assert!(in_read(&*w.app.store, |tx| tx.member_bounces(m.id, 10)).unwrap().is_empty());
        assert_eq!(events(&w.app, EventName::MemberBounced), 0);
    }

    #[test]
    fn a_submission_account_answering_4xx_slows_its_list_only_and_loses_no_copy() {
        let (mut w, _) = world(3);
        let (p, ctx) = (Principal::operator(), RequestCtx::cli());
        let d = DomainName::parse("example.org").unwrap();
        // A second list, without an account: its copies go through the relay (`w.mail`).
        let other = ListName::parse("other").unwrap();
        let new_list = lists::NewList {
            name: other.clone(),
            display_name: "Other".into(),
            owner: EmailAddress::parse("owner@example.org").unwrap(),
            kind: None,
            subscription_policy: Some(SubscriptionPolicy::Open),
        };
        lists::create(&w.app, &p, &ctx, &d, new_list).unwrap();
        for i in 0..2 {
            let req = AddMember::regular(EmailAddress::parse(&format!("o{i}@example.com")).unwrap());
            members::add(&w.app, &p, &ctx, None, &d, &other, req).unwrap();
        }
        let msg = sends::NewMessage { subject: "Other".into(), text: Some("x".into()), html: None };
        sends::submit(&w.app, &p, &ctx, None, &d, &other, msg).unwrap();
        w.mail.sent.lock().unwrap().clear();
        // "news" has a submission account, which answers 451.
        let account = with_account(&mut w, SendError::Temporary("451 4.7.0 rate limit".into()));
        let cfg = DeliveryConfig { retry_base_secs: 60, ..DeliveryConfig::default() };

        let round = run_once(&w.app, &cfg).unwrap();
        // One copy of "news" met the 451 and waits; its two others went back untried; the other
        // list's two copies went out through the relay.
        assert_eq!((round.claimed, round.deferred, round.sent), (5, 1, 2), "{round:?}");
        assert_eq!(w.mail.sent.lock().unwrap().len(), 2, "the other list is not slowed");
        assert!(w.mail.sent.lock().unwrap().iter().all(|m| m.recipients[0].to_string().ends_with("example.com")));
        assert!(account.sent.lock().unwrap().is_empty());
        // While the account rests, nothing of "news" is claimed, whatever is due.
        w.clock.advance_secs(30);
        assert_eq!(run_once(&w.app, &cfg).unwrap().claimed, 0);
        // After the rest, the account takes mail again: every copy arrives, once, through it.
        *account.fail_with.lock().unwrap() = None;
        w.clock.advance_secs(31);
        let mut sent = 0;
        for _ in 0..5 {
            sent += run_once(&w.app, &cfg).unwrap().sent;
            w.clock.advance_secs(61);
        }
        assert_eq!(sent, 3);
        assert_eq!(account.sent.lock().unwrap().len(), 3);
        assert_eq!(w.mail.sent.lock().unwrap().len(), 2, "no copy of news left through the relay");
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
