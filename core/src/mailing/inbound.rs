//! Mail in: the one pipeline every received message takes, whatever brought it (the LMTP
//! frontend now, an `ingest` mailbox later). A recipient address names a list and a role
//! ([`parse_recipient`], [`resolve`]); the message is stored durably ([`store`]) before the
//! sender is told it was taken, then processed ([`process_batch`]: runs of stored messages in one
//! write transaction, each in its own nested unit): a post goes through [`super::posts`], a
//! request through [`super::requests`], a bounce through [`super::bounces`]. A message stored and
//! not processed (a crash between the two) is processed at the next start ([`process_waiting`]),
//! once: its outcome commits with what it did.
//!
//! With a spool ([`MailIn::spool`]), the LMTP frontend's messages are committed there instead
//! (`super::accept`), and processing first moves them into the inbound store ([`move_spooled`]):
//! each one in the same transaction as its spool key, then deleted from the spool. A crash
//! between the two repeats the move, which finds the key and adds nothing: nothing accepted is
//! lost or doubled.

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
#[derive(Debug, Clone, thiserror::Error)]
pub enum InboundError {
    #[error("{0} names no list here")]
    UnknownAddress(String),
    #[error("the message is larger than the list's limit of {limit_kb} KiB")]
    TooLarge { limit_kb: u32 },
    #[error("the message could not be stored: {0}")]
    Store(#[from] StoreError),
}

impl InboundError {
    /// The store did not answer (its thread ended, a call failed): the client may try again later.
    pub fn unavailable() -> Self {
        InboundError::Store(StoreError::Busy)
    }
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

/// Processes one stored message by its role: [`process_batch`] of one.
pub fn process(app: &Service, id: InboundId) -> Result<Processed, super::MailingError> {
    Ok(process_batch(app, &[id])?.pop().map_or(Processed::AlreadyDone, |(_, p)| p))
}

/// A batch of stored messages takes at most this many...
pub const BATCH_MESSAGES: u32 = 64;
/// ...and no further message once its transaction has been open this long, so that the LMTP
/// stores queued behind it on the write lane (which then join its commit) do not wait long.
pub const BATCH_TIME: std::time::Duration = std::time::Duration::from_millis(10);

/// A stored message as read before the write transaction (parsing holds no lock).
#[doc(hidden)]
pub enum Read {
    Post(posts::Summary),
    Request(super::requests::RequestMail),
    Bounce(super::bounces::ReadBounce),
}

fn read(app: &Service, m: &InboundMessage) -> Read {
    match &m.role {
        Role::Post => {
            let mut summary = posts::summarize(&*app.mime, &m.raw, m.envelope_from.as_deref());
            summary.from_check = super::dmarc::check_from(
                &app.mail_in.dmarc,
                &*app.egress.dns,
                &*app.dkim_verifying,
                summary.from.as_ref().map(|f| f.domain().as_str()),
                &m.raw,
                app.clock.now(),
            );
            Read::Post(summary)
        }
        Role::Request | Role::Join | Role::Leave | Role::Owner => {
            Read::Request(super::requests::read(&*app.mime, &m.raw, m.envelope_from.as_deref()))
        }
        Role::Bounces { token } => {
            Read::Bounce(super::bounces::read(app, token.as_deref().unwrap_or_default(), &m.raw))
        }
    }
}

/// What a message's unit did in the batch's transaction; what follows its commit.
#[doc(hidden)]
pub enum Acted {
    Post(posts::Outcome),
    Request(super::requests::Outcome, super::requests::After),
    Bounce(super::bounces::Acted),
}

/// Below the service's operations: public for the rule tests over a real store
/// (`courrier-store-sqlite`'s `rules`), which inject a failing rule.
#[doc(hidden)]
pub fn act(
    app: &Service,
    tx: &mut dyn super::ports::Tx,
    m: &InboundMessage,
    read: &Read,
    now: crate::kernel::Timestamp,
) -> Result<Option<Acted>, super::MailingError> {
    Ok(match read {
        Read::Post(summary) => posts::act(&*app.mime, tx, m, summary, now)?.map(Acted::Post),
        Read::Request(mail) => super::requests::act(app, tx, m, mail, now)?.map(|(o, a)| Acted::Request(o, a)),
        Read::Bounce(b) => super::bounces::act(tx, m.list_id, b, Some(m.id), now)?.map(Acted::Bounce),
    })
}

/// One message's unit in a batch.
enum Unit {
    /// Not there, or already processed before the batch began.
    Skipped,
    Acted(Box<Acted>),
    /// Already processed by someone else meanwhile: its writes were undone.
    Raced,
    /// The rules refused it: its writes were undone and it is recorded `failed` (`false`: it had
    /// been processed meanwhile, nothing recorded).
    Failed(String, bool),
}

/// Processes stored messages in `ids`' order, as many as one batch takes: every message's
/// effect and its outcome in one write transaction (one commit, one fsync, for the batch), each
/// message inside its own nested unit, so that a message the rules refuse takes back only its own
/// writes and is recorded `failed` in the same transaction. What must follow the commit (the
/// moderators' notices, replies, re-enable mails, forwards) is done after it. Returns the
/// messages looked at, a prefix of `ids` (at least one, unless `Err`). A database error on a
/// message after the first ends the batch before it (the earlier ones commit); on the first it
/// is the answer (the message stays `received`, processed again later).
pub fn process_batch(app: &Service, ids: &[InboundId]) -> Result<Vec<(InboundId, Processed)>, super::MailingError> {
    batch_with(app, ids, &act)
}

/// A message's rule as a batch runs it (the rules by role: [`act`]).
pub type ActFn = dyn Fn(
    &Service,
    &mut dyn super::ports::Tx,
    &InboundMessage,
    &Read,
    crate::kernel::Timestamp,
) -> Result<Option<Acted>, super::MailingError>;

/// Below the service's operations: public for the rule tests over a real store
/// (`courrier-store-sqlite`'s `rules`), which inject a failing rule.
#[doc(hidden)]
pub fn batch_with(
    app: &Service,
    ids: &[InboundId],
    act: &ActFn,
) -> Result<Vec<(InboundId, Processed)>, super::MailingError> {
    let ids = &ids[..ids.len().min(BATCH_MESSAGES as usize)];
    let messages: Vec<Option<InboundMessage>> = in_read(&*app.store, |tx| {
        ids.iter()
            .map(|id| Ok(tx.inbound_by_id(*id)?.filter(|m| m.state != InboundState::Done)))
            .collect::<Result<_, StoreError>>()
    })?;
    let reads: Vec<Option<Read>> = messages.iter().map(|m| m.as_ref().map(|m| read(app, m))).collect();
    let units = in_write(&*app.store, |tx| {
        let opened = std::time::Instant::now();
        let mut units = Vec::with_capacity(ids.len());
        for (m, r) in messages.iter().zip(&reads) {
            if !units.is_empty() && opened.elapsed() >= BATCH_TIME {
                break;
            }
            let (Some(m), Some(r)) = (m, r) else {
                units.push(Unit::Skipped);
                continue;
            };
            let now = app.clock.now();
            tx.begin_nested()?;
            match act(app, tx, m, r, now) {
                Ok(Some(acted)) => {
                    tx.keep_nested()?;
                    units.push(Unit::Acted(Box::new(acted)));
                }
                Ok(None) => {
                    tx.undo_nested()?;
                    units.push(Unit::Raced);
                }
                Err(super::MailingError::Store(e)) => {
                    tx.undo_nested()?;
                    if units.is_empty() {
                        return Err(super::MailingError::Store(e));
                    }
                    tracing::warn!(inbound = m.id.get(), error = %e, "a received message could not be processed yet");
                    break;
                }
                Err(e) => {
                    tx.undo_nested()?;
                    let recorded = tx.finish_inbound(m.id, "failed", now)?;
                    units.push(Unit::Failed(e.to_string(), recorded));
                }
            }
        }
        Ok::<_, super::MailingError>(units)
    })?;
    let mut out = Vec::with_capacity(units.len());
    for (unit, (id, m)) in units.into_iter().zip(ids.iter().zip(&messages)) {
        out.push((*id, m.as_ref().map_or(Processed::AlreadyDone, |m| after(app, m, unit))));
    }
    Ok(out)
}

/// What follows a unit's commit (failures are logged: the unit's writes stand), and how it is told.
fn after(app: &Service, m: &InboundMessage, unit: Unit) -> Processed {
    let now = app.clock.now();
    let acted = match unit {
        Unit::Skipped | Unit::Raced | Unit::Failed(_, false) => return Processed::AlreadyDone,
        Unit::Failed(why, true) => {
            tracing::error!(inbound = m.id.get(), error = %why, "a received message could not be processed");
            return Processed::Failed(why);
        }
        Unit::Acted(acted) => *acted,
    };
    match acted {
        Acted::Post(outcome) => {
            tracing::info!(inbound = m.id.get(), list = m.list_id.get(), outcome = outcome.as_str(), "post processed");
            // A post just held: its list's owners and moderators are told, once it is committed.
            if let posts::Outcome::Held(held, _) = &outcome {
                super::moderation::announce_held(app, m.list_id, *held);
            }
            Processed::Done(outcome)
        }
        Acted::Request(outcome, then) => {
            super::requests::after(app, m, outcome, then, now);
            Processed::Request(outcome)
        }
        Acted::Bounce(acted) => match super::bounces::after(app, acted, &m.raw, now) {
            Ok(received) => Processed::Bounce(received),
            Err(e) => {
                tracing::warn!(inbound = m.id.get(), error = %e, "forwarding an unrecognised bounce failed");
                Processed::Bounce(super::bounces::Received::Forwarded(0))
            }
        },
    }
}

/// Processes every message still `received` (at start: what a crash left between the store and
/// the processing); how many were processed now.
pub fn process_waiting(app: &Service) -> Result<u64, super::MailingError> {
    process_after(app, &mut None)
}

/// Processes the messages still `received` with an id above `cursor`, moving it past them, in
/// batches ([`process_batch`]): a processing loop keeps its cursor, so a message left waiting for
/// another role's handler is looked at once per start, not on every round. Before each look, the
/// spool's oldest messages are moved in ([`move_spooled`]). How many were processed.
pub fn process_after(app: &Service, cursor: &mut Option<InboundId>) -> Result<u64, super::MailingError> {
    let mut n = 0;
    loop {
        move_spooled(app)?;
        let ids = in_read(&*app.store, |tx| tx.inbound_waiting(*cursor, BATCH_MESSAGES))?;
        if ids.is_empty() {
            return Ok(n);
        }
        let mut rest = &ids[..];
        while !rest.is_empty() {
            let done = process_batch(app, rest)?;
            for (id, p) in &done {
                if let Processed::Done(_) | Processed::Request(_) | Processed::Bounce(_) = p {
                    n += 1;
                }
                *cursor = Some(*id);
            }
            rest = &rest[done.len().max(1).min(rest.len())..];
        }
    }
}

/// Messages moved from the spool per transaction of the main database.
pub const MOVE_BATCH: u32 = 64;
/// Batches moved per call of [`move_spooled`]: while LMTP keeps the spool filling, processing
/// (which calls it before each look at the inbound store) still gets its turn.
pub const MOVE_BATCHES: usize = 4;

/// Moves the oldest messages in the spool (if any) into the inbound store, at most
/// [`MOVE_BATCHES`] batches: each batch one write transaction of the main database recording
/// every message's spool key with it, then deleted from the spool. A message whose key is
/// already there (a move repeated after a crash between the commit and the delete) is not added
/// again. How many were added.
pub fn move_spooled(app: &Service) -> Result<u64, super::MailingError> {
    let Some(spool) = &app.mail_in.spool else { return Ok(0) };
    let mut n = 0;
    for _ in 0..MOVE_BATCHES {
        let batch = spool.oldest(MOVE_BATCH)?;
        if batch.is_empty() {
            break;
        }
        n += copy_spooled(app, &batch)?;
        let keys: Vec<String> = batch.into_iter().map(|m| m.key).collect();
        spool.forget(&keys)?;
    }
    Ok(n)
}

/// The first half of a move: the messages added to the inbound store with their spool keys, in
/// one transaction (those already there skipped); how many were added. Until the spool forgets
/// them, a repeated move finds them here.
pub fn copy_spooled(app: &Service, batch: &[super::ports::Spooled]) -> Result<u64, super::MailingError> {
    Ok(in_write(&*app.store, |tx| {
        let mut added = 0;
        for m in batch {
            let new = NewInbound {
                list_id: m.list_id,
                role: &m.role,
                recipient: &m.recipient,
                envelope_from: m.envelope_from.as_deref(),
                raw: &m.raw,
            };
            if tx.insert_spooled(&new, &m.key, m.received_at)?.is_some() {
                added += 1;
            }
        }
        Ok::<_, StoreError>(added)
    })?)
}

/// Messages received and not processed yet: those still in the spool and those `received` in
/// the inbound store (up to `limit` of the latter are counted).
pub fn waiting(app: &Service, limit: u32) -> Result<u64, super::MailingError> {
    let spooled = app.mail_in.spool.as_ref().map(|s| s.count()).transpose()?.unwrap_or(0);
    let stored = in_read(&*app.store, |tx| tx.inbound_waiting(None, limit))?.len() as u64;
    Ok(spooled + stored)
}

/// Mail in's state shared by the frontends and the processing loop of one process.
#[derive(Debug, Default)]
pub struct MailIn {
    /// Where the LMTP frontend commits what it accepts, when not in the main database: the
    /// SQLite installation's `spool.db`. A spool is local to one server's data directory; a server
    /// that stops for good leaves its spooled messages there until a server starts on that
    /// directory again (like a Postfix queue directory).
    pub spool: Option<std::sync::Arc<dyn super::ports::Spool>>,
    pub wakeup: Wakeup,
    /// Whether the receiving frontends are busy, for processing to give way to them
    /// ([`Activity::wait_quiet`]).
    pub activity: std::sync::Arc<Activity>,
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

/// How long after the last message a receiving frontend answered it counts as quiet: a sender
/// with more to send is back with its next `MAIL` well within this.
pub const QUIET_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

/// What the receiving frontends are doing, published by the LMTP store thread
/// ([`super::accept::Acceptor`]): how many messages are between a session's `MAIL` and its
/// answer (received, queued or being stored), and when that last changed. Processing, which
/// nobody waits on, gives way to accepting, which a sender waits on: on 2 cores, processing
/// and delivering posts (10 copies each composed, signed and sent) costs several times the CPU
/// and disk of accepting them, so run beside a burst of posts it makes every accept slower.
#[derive(Debug, Default)]
pub struct Activity {
    busy: std::sync::atomic::AtomicUsize,
    /// Microseconds since [`Activity::epoch`] of the last change; 0: never.
    last: std::sync::atomic::AtomicU64,
}

impl Activity {
    fn epoch() -> std::time::Instant {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(std::time::Instant::now)
    }

    /// Publishes how many messages the frontend is receiving or storing now.
    pub fn set_busy(&self, n: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.busy.store(n, Relaxed);
        let at = u64::try_from(Self::epoch().elapsed().as_micros()).unwrap_or(u64::MAX).max(1);
        self.last.store(at, Relaxed);
    }

    /// Whether no message is being received or stored and none was for `quiet`.
    pub fn is_quiet(&self, quiet: std::time::Duration) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let last = self.last.load(Relaxed);
        if self.busy.load(Relaxed) > 0 {
            return false;
        }
        last == 0 || Self::epoch().elapsed().saturating_sub(std::time::Duration::from_micros(last)) >= quiet
    }

    /// Waits until the frontends are quiet ([`Self::is_quiet`] for [`QUIET_AFTER`]), at most
    /// `max` (zero: not at all), or until `stop` says so; whether it had to give up waiting at
    /// `max` (the frontends still busy). The bound is what keeps a sustained stream of messages
    /// processed: the caller waits only once it has caught up with what was stored, so a message
    /// waits at most `max` plus the processing of those stored before it.
    pub fn wait_quiet(&self, max: std::time::Duration, stop: impl Fn() -> bool) -> bool {
        let until = std::time::Instant::now() + max;
        loop {
            if self.is_quiet(QUIET_AFTER) || stop() {
                return false;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(std::time::Duration::from_millis(2)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(address: &str, expect: Option<(&str, &str, Role)>) {
        let got = parse_recipient(address).map(|r| (r.domain.to_string(), r.list.to_string(), r.role));
        let expect = expect.map(|(d, l, r)| (d.to_owned(), l.to_owned(), r));
        assert_eq!(got, expect, "{address}");
    }

    #[test]
    fn the_frontends_are_quiet_only_with_nothing_received_or_stored_for_the_quiet_time() {
        use std::time::Duration;
        let a = Activity::default();
        assert!(a.is_quiet(QUIET_AFTER), "never busy");
        a.set_busy(2);
        assert!(!a.is_quiet(Duration::ZERO), "two messages under way");
        assert!(a.wait_quiet(Duration::ZERO, || false), "gave up at once: the bound is zero");
        assert!(!a.wait_quiet(Duration::from_secs(3600), || true), "stopped");
        a.set_busy(0);
        assert!(!a.is_quiet(Duration::from_secs(3600)), "just answered: a sender may be back");
        assert!(a.is_quiet(Duration::ZERO));
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

    #[test]
    fn anything_else_names_no_list() {
        for a in ["news+tag@example.org", "-request@example.org", "no-at-sign", "news@", "a b@example.org", "@x.org"] {
            check(a, None);
        }
    }
}
