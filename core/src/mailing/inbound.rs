//! Mail in: the one pipeline every received message takes, whatever brought it (the LMTP
//! frontend now, an `ingest` mailbox later). A recipient address names a list and a role
//! ([`parse_recipient`], [`resolve`]); the message is stored durably ([`store`]) before the
//! sender is told it was taken, then processed ([`process`]): a post goes through
//! [`super::posts`]. A message stored and not processed (a crash between the two) is processed
//! at the next start ([`process_waiting`]), once: its outcome commits with what it did.

use super::Service;
use super::model::MailingList;
pub use super::model::{InboundId, InboundMessage, InboundState, Role};
use super::ports::NewInbound;
use super::posts;
use crate::access::Principal;
use crate::access::principal::RequestCtx;
use crate::kernel::{DomainName, ListName, RequestId};
use crate::storage::{StoreError, in_read, in_write};

/// A recipient address read as a list address: which list, and which of its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    pub domain: DomainName,
    pub list: ListName,
    pub role: Role,
}

/// The suffixes of a list's own addresses, longest match first where one ends another.
const SUFFIXES: &[(&str, Role)] = &[
    ("-request", Role::Request),
    ("-subscribe", Role::Join),
    ("-join", Role::Join),
    ("-unsubscribe", Role::Leave),
    ("-leave", Role::Leave),
    ("-owner", Role::Owner),
    ("-bounces", Role::Bounces { token: None }),
];

/// Reads `L@D`, `L-request@D`, `L-join@D`, `L-leave@D`, `L-owner@D`, `L-bounces+token@D` (and
/// the `-subscribe`/`-unsubscribe` aliases); `None` for anything else. A detail (`+...`) is only
/// taken on a bounce address. List names cannot end with these suffixes, so the reading is
/// unambiguous.
pub fn parse_recipient(address: &str) -> Option<Recipient> {
    let address = address.trim().trim_start_matches('<').trim_end_matches('>');
    let (local, domain) = address.rsplit_once('@')?;
    let domain = DomainName::parse(domain).ok()?;
    let local = local.to_ascii_lowercase();
    let (base, detail) = match local.split_once('+') {
        Some((b, d)) => (b.to_owned(), Some(d.to_owned())),
        None => (local, None),
    };
    let (name, role) = match SUFFIXES.iter().find(|(s, _)| base.ends_with(s) && base.len() > s.len()) {
        Some((suffix, role)) => (&base[..base.len() - suffix.len()], role.clone()),
        None => (base.as_str(), Role::Post),
    };
    let role = match (role, detail) {
        (Role::Bounces { .. }, token) => Role::Bounces { token: token.filter(|t| !t.is_empty() && t.len() <= 128) },
        (role, None) => role,
        (_, Some(_)) => return None,
    };
    Some(Recipient { domain, list: ListName::parse(name).ok()?, role })
}

/// A recipient address found to name a list of this installation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The address as given (kept for the record).
    pub address: String,
    pub list: MailingList,
    pub role: Role,
}

impl Resolved {
    /// The largest message the list takes, in bytes (`max_message_kb`).
    pub fn max_bytes(&self) -> usize {
        self.list.policies.max_message_kb as usize * 1024
    }
}

/// Why a message was not taken for a recipient. The frontend maps each to its reply (LMTP: 550
/// 5.1.1, 552 5.3.4, 451 4.3.0).
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    #[error("{0} names no list here")]
    UnknownAddress(String),
    #[error("the message is larger than the list's limit of {limit_kb} KiB")]
    TooLarge { limit_kb: u32 },
    #[error("the message could not be stored: {0}")]
    Store(#[from] StoreError),
}

/// The list and role an address names; [`InboundError::UnknownAddress`] when it names none.
pub fn resolve(app: &Service, address: &str) -> Result<Resolved, InboundError> {
    let unknown = || InboundError::UnknownAddress(address.chars().take(256).collect());
    let r = parse_recipient(address).ok_or_else(unknown)?;
    let list = in_read(&*app.store, |tx| tx.list_by_name(&r.domain, &r.list))?.ok_or_else(unknown)?;
    Ok(Resolved { address: address.to_owned(), list, role: r.role })
}

/// Stores one message for each recipient in one transaction, durable when this returns `Ok`
/// (the write lane's commit is `synchronous=FULL`). The size is checked by the caller against
/// each recipient's [`Resolved::max_bytes`] ([`check_size`]).
pub fn store(
    app: &Service,
    envelope_from: Option<&str>,
    recipients: &[&Resolved],
    raw: &[u8],
) -> Result<Vec<InboundId>, InboundError> {
    let now = app.clock.now();
    Ok(in_write(&*app.store, |tx| {
        recipients
            .iter()
            .map(|r| {
                tx.insert_inbound(
                    &NewInbound { list_id: r.list.id, role: &r.role, recipient: &r.address, envelope_from, raw },
                    now,
                )
            })
            .collect::<Result<Vec<_>, StoreError>>()
    })?)
}

/// [`InboundError::TooLarge`] when `size` bytes exceed what the list takes.
pub fn check_size(r: &Resolved, size: usize) -> Result<(), InboundError> {
    if size > r.max_bytes() {
        return Err(InboundError::TooLarge { limit_kb: r.list.policies.max_message_kb });
    }
    Ok(())
}

/// What to do with a message over its list's size limit when the sender cannot be told "no"
/// (a mailbox already holds it): hold it for a moderator (`too_large`), or refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oversize {
    /// The sender is still on the line (LMTP): refuse it (552).
    Refuse,
    /// The message was fetched from a mailbox: hold it as `too_large` when it is a post.
    Hold,
}

/// The whole pipeline for one message and one recipient, as a mailbox fetcher uses it: resolve,
/// check the size, store, process. Returns the stored id (processing errors are logged: the
/// message stays `received` and is processed again at the next start).
pub fn receive(
    app: &Service,
    envelope_from: Option<&str>,
    recipient: &str,
    raw: &[u8],
    oversize: Oversize,
) -> Result<InboundId, InboundError> {
    let r = resolve(app, recipient)?;
    let too_large = check_size(&r, raw.len()).is_err();
    if too_large && (oversize == Oversize::Refuse || r.role != Role::Post) {
        check_size(&r, raw.len())?;
    }
    let id = store(app, envelope_from, &[&r], raw)?.remove(0);
    if let Err(e) = process(app, id) {
        tracing::warn!(inbound = id.get(), error = %e, "a received message could not be processed yet");
    }
    Ok(id)
}

/// What processing did with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed {
    /// Done; the outcome as recorded (`posted`, `held`, `duplicate`, `loop`, ...).
    Done(posts::Outcome),
    /// A request (`L-request`, `L-join`, `L-leave`) or owner mail, done; the outcome as recorded.
    Request(super::requests::Outcome),
    /// A message at a bounce address, recognised and recorded, or forwarded to the owners.
    Bounce(super::bounces::Received),
    /// Its role's handler is not part of this pipeline yet: left `received`.
    Waiting,
    /// The rules could not process it (its list is gone, ...): recorded `failed` and logged, so
    /// it does not come back at every round.
    Failed(String),
    /// Already processed (by another process, or before a restart).
    AlreadyDone,
}

/// The principal and request context mail-in acts as: the installation itself, audited as
/// `mail-in`.
pub fn actor() -> (Principal, RequestCtx) {
    (Principal::operator(), RequestCtx { request_id: RequestId::internal("mail-in"), source: None })
}

/// Processes one stored message by its role. Posts go through [`posts::accept`]; requests,
/// joins, leaves and owner mail through [`super::requests::accept`]; bounces are left
/// `received` for their handler.
pub fn process(app: &Service, id: InboundId) -> Result<Processed, super::MailingError> {
    let Some(m) = in_read(&*app.store, |tx| tx.inbound_by_id(id))? else { return Ok(Processed::AlreadyDone) };
    if m.state == InboundState::Done {
        return Ok(Processed::AlreadyDone);
    }
    match m.role {
        Role::Post => match posts::accept(app, &m) {
            Ok(done) => {
                // A post just held: its list's owners and moderators are told, once it is committed.
                if let Some(posts::Outcome::Held(held, _)) = &done {
                    super::moderation::announce_held(app, m.list_id, *held);
                }
                Ok(done.map_or(Processed::AlreadyDone, Processed::Done))
            }
            Err(e) => failed(app, id, e),
        },
        Role::Request | Role::Join | Role::Leave | Role::Owner => match super::requests::accept(app, &m) {
            Ok(done) => Ok(done.map_or(Processed::AlreadyDone, Processed::Request)),
            Err(e) => failed(app, id, e),
        },
        Role::Bounces { .. } => match super::bounces::receive_inbound(app, &m) {
            Ok(done) => Ok(done.map_or(Processed::AlreadyDone, Processed::Bounce)),
            Err(e) => failed(app, id, e),
        },
    }
}

/// A message the rules could not process: a database error is transient (it is processed again
/// later); anything else is recorded `failed` and logged, so it does not come back at every round.
fn failed(app: &Service, id: InboundId, e: super::MailingError) -> Result<Processed, super::MailingError> {
    if let super::MailingError::Store(_) = e {
        return Err(e);
    }
    tracing::error!(inbound = id.get(), error = %e, "a received message could not be processed");
    let now = app.clock.now();
    in_write(&*app.store, |tx| tx.finish_inbound(id, "failed", now))?;
    Ok(Processed::Failed(e.to_string()))
}

/// Processes every message still `received` (at start: what a crash left between the store and
/// the processing); how many were processed now.
pub fn process_waiting(app: &Service) -> Result<u64, super::MailingError> {
    process_after(app, &mut None)
}

/// Processes the messages still `received` with an id above `cursor`, moving it past them: a
/// processing loop keeps its cursor, so a message left waiting for another role's handler is
/// looked at once per start, not on every round. How many were processed.
pub fn process_after(app: &Service, cursor: &mut Option<InboundId>) -> Result<u64, super::MailingError> {
    let mut n = 0;
    loop {
        let ids = in_read(&*app.store, |tx| tx.inbound_waiting(*cursor, 100))?;
        let Some(last) = ids.last().copied() else { return Ok(n) };
        for id in ids {
            if let Processed::Done(_) | Processed::Request(_) | Processed::Bounce(_) = process(app, id)? {
                n += 1;
            }
            *cursor = Some(id);
        }
        *cursor = Some(last);
    }
}

/// Mail in's state shared by the frontends and the processing loop of one process.
#[derive(Debug, Default)]
pub struct MailIn {
    pub wakeup: Wakeup,
    /// Posters' DMARC policies, for the copies' `From`.
    pub dmarc: super::dmarc::Cache,
}

/// Tells the processing loop that messages were stored (the LMTP frontend rings it after its
/// replies); the loop also looks on its own now and then.
#[derive(Debug, Default)]
pub struct Wakeup {
    rung: std::sync::Mutex<bool>,
    bell: std::sync::Condvar,
}

impl Wakeup {
    pub fn ring(&self) {
        if let Ok(mut rung) = self.rung.lock() {
            *rung = true;
            self.bell.notify_all();
        }
    }

    /// Waits until rung or `timeout` passed; whether it was rung.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let Ok(rung) = self.rung.lock() else { return false };
        let Ok((mut rung, _)) = self.bell.wait_timeout_while(rung, timeout, |r| !*r) else { return false };
        std::mem::take(&mut *rung)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Timestamp;

    fn check(address: &str, expect: Option<(&str, &str, Role)>) {
        let got = parse_recipient(address).map(|r| (r.domain.to_string(), r.list.to_string(), r.role));
        let expect = expect.map(|(d, l, r)| (d.to_owned(), l.to_owned(), r));
        assert_eq!(got, expect, "{address}");
    }

    #[test]
    fn a_list_address_names_its_list_and_role() {
        check("news@example.org", Some(("example.org", "news", Role::Post)));
        check("<News@Example.org>", Some(("example.org", "news", Role::Post)));
        check("news-request@example.org", Some(("example.org", "news", Role::Request)));
        check("news-join@example.org", Some(("example.org", "news", Role::Join)));
        check("news-subscribe@example.org", Some(("example.org", "news", Role::Join)));
        check("news-leave@example.org", Some(("example.org", "news", Role::Leave)));
        check("news-unsubscribe@example.org", Some(("example.org", "news", Role::Leave)));
        check("news-owner@example.org", Some(("example.org", "news", Role::Owner)));
        check("my-news-owner@example.org", Some(("example.org", "my-news", Role::Owner)));
        check("news-bounces+42@example.org", Some(("example.org", "news", Role::Bounces { token: Some("42".into()) })));
        check("news-bounces@example.org", Some(("example.org", "news", Role::Bounces { token: None })));
    }

    /// A real SQLite store and a list `news@example.org` (posting policy `members`) with one
    /// active member `m@example.net`.
    fn world() -> (Service, tempfile::TempDir) {
        use crate::access::users::{self, NewUser};
        use crate::kernel::{Clock, EmailAddress};
        use crate::mailing::members::{self, AddMember};
        use crate::mailing::model::{DeliveryMode, SubscriptionPolicy};
        use crate::mailing::{domains, lists};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(crate::testing::FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
        let store =
            crate::adapters::sqlite::SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
        let mail = Arc::new(crate::testing::RecordingTransport::default());
        let app = crate::testing::mailing(Arc::new(store), clock, mail, crate::egress::Egress::offline());
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
        let new_domain =
            domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None };
        domains::create(&app, &p, &ctx, new_domain).unwrap();
        let new_list = lists::NewList {
            name: l.clone(),
            display_name: "News".into(),
            owner,
            kind: None,
            subscription_policy: Some(SubscriptionPolicy::Open),
        };
        lists::create(&app, &p, &ctx, &d, new_list).unwrap();
        let req = AddMember {
            email: EmailAddress::parse("m@example.net").unwrap(),
            display_name: None,
            delivery_mode: DeliveryMode::Regular,
            force: false,
            consent_source: None,
            consent_evidence: None,
            source_ip: None,
        };
        members::add(&app, &p, &ctx, None, &d, &l, req).unwrap();
        (app, dir)
    }

    fn post(app: &Service, from: &str, message_id: &str) -> Processed {
        let raw = format!(
            "From: {from}\r\nTo: news@example.org\r\nSubject: Hi\r\nMessage-ID: <{message_id}>\r\n\r\nHello\r\n"
        );
        let r = resolve(app, "news@example.org").unwrap();
        let id = store(app, Some(from), &[&r], raw.as_bytes()).unwrap().remove(0);
        let first = process(app, id).unwrap();
        assert_eq!(process(app, id).unwrap(), Processed::AlreadyDone, "processed once");
        first
    }

    fn outcome(p: &Processed) -> &'static str {
        match p {
            Processed::Done(o) => o.as_str(),
            Processed::Request(o) => o.as_str(),
            Processed::Bounce(_) => "bounce",
            Processed::Waiting => "waiting",
            Processed::Failed(_) => "failed",
            Processed::AlreadyDone => "already",
        }
    }

    #[test]
    fn a_stored_post_is_posted_held_or_dropped_once() {
        let (app, _dir) = world();
        assert_eq!(outcome(&post(&app, "m@example.net", "a@x")), "posted");
        assert_eq!(outcome(&post(&app, "m@example.net", "a@x")), "duplicate");
        let held = post(&app, "stranger@example.net", "b@x");
        let Processed::Done(posts::Outcome::Held(id, posts::HoldReason::NotMember)) = held else { panic!("{held:?}") };
        let list = in_read(&*app.store, |tx| {
            tx.list_by_name(&DomainName::parse("example.org").unwrap(), &ListName::parse("news").unwrap())
        })
        .unwrap()
        .unwrap();
        let h = posts::held(&app, list.id, id).unwrap().unwrap();
        assert_eq!((h.from.as_deref(), h.subject.as_deref()), (Some("stranger@example.net"), Some("Hi")));
        let events = in_read(&*app.store, |tx| tx.events_after(None, 100)).unwrap();
        assert_eq!(events.iter().filter(|e| e.name == crate::kernel::EventName::MessageHeld).count(), 1);
        assert_eq!(events.iter().filter(|e| e.name == crate::kernel::EventName::SendSubmitted).count(), 1);
        assert!(matches!(resolve(&app, "nope@example.org"), Err(InboundError::UnknownAddress(_))));
        let r = resolve(&app, "news-request@example.org").unwrap();
        let id = store(&app, None, &[&r], b"Subject: help\r\n\r\n").unwrap().remove(0);
        assert_eq!(
            process(&app, id).unwrap(),
            Processed::Request(crate::mailing::requests::Outcome::Robot),
            "a request from the null sender is not answered"
        );
    }

    #[test]
    fn anything_else_names_no_list() {
        for a in ["news+tag@example.org", "-request@example.org", "no-at-sign", "news@", "a b@example.org", "@x.org"] {
            check(a, None);
        }
    }
}
