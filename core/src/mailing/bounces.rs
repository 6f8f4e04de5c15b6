//! Bounces: what arrives at a copy's VERP address (`L-bounces+<copy>@D`) and what the receiving
//! server answers during delivery, scored per `decisions.md`: a permanent failure adds 1 to the
//! member's `bounce_score` at most once a (UTC) day, sets `last_bounce_at`, marks the copy
//! `bounced` and emits `member.bounced`; a temporary one is recorded only. A score that reaches the
//! list's `bounce_disable_score` disables the member (`disabled_reason: "bounces"`) and mails the
//! address one re-enable link (`/p/reenable/{token}`); 7 days without a bounce bring the score
//! back to 0. A message nobody recognises is forwarded to the list's owners.

pub mod recognise;

use super::MailingError;
use super::Service;
use super::lists;
use super::model::{BounceSource, CopyId, ListId, MailingList, Member, MemberId, MemberStatus, Permanence};
use super::model::{HeaderField, PostCopySpec, ReadMail, RebuiltPost, SendCopySpec};
use super::ports::{NewBounce, Tx};
use super::state::{self, MemberState, Trigger};
use super::views;
use crate::kernel::sealed::DataKey;
use crate::kernel::{EmailAddress, EventName, Notice, Timestamp, secrets};
use crate::storage::{StoreError, in_read, in_write};
use recognise::{Parsed, Verdict};
use serde_json::json;

/// The MIME port (mail-parser and mail-builder, in `adapters/mime.rs`): reads received messages
/// for bounces, posts, requests and moderation, rebuilds a post and builds an API send for their
/// copies. The rules
/// work on what it gives; no rule parses or writes MIME itself.
pub trait MimeReader: Send + Sync {
    /// A message flattened into its parts, for bounce recognition. `None` when the bytes hold
    /// no message at all.
    fn read(&self, raw: &[u8]) -> Option<Parsed>;
    /// A post or request as the rules read it. `None` when the bytes hold no message at all.
    fn read_mail(&self, raw: &[u8]) -> Option<ReadMail>;
    /// The header fields only (empty when there are none).
    fn header_fields(&self, raw: &[u8]) -> Vec<HeaderField>;
    /// The first text part's text (else the first HTML part's), whole.
    fn first_text(&self, raw: &[u8]) -> Option<String>;
    /// The post rebuilt for its copies as `spec` says: its MIME structure and attachments kept,
    /// the footer added, `From`, `To`, `Cc`, `Subject`, `Date`, `Message-ID`, `In-Reply-To`,
    /// `References` and `Reply-To` written. `None` when the post does not parse.
    fn rebuild_post(&self, raw: &[u8], spec: &PostCopySpec<'_>) -> Option<RebuiltPost>;
    /// The copies of an API send as `spec` says: `From`, `Subject`, `Date`, `Message-ID`,
    /// `Reply-To`, the list fields, and the text and HTML bodies (`To` is each copy's own).
    fn build_send(&self, spec: &SendCopySpec<'_>) -> RebuiltPost;
}

pub const REENABLE: &str = "reenable";
/// A re-enable link works this long (the subscriber may read the mail weeks later).
pub const REENABLE_TTL_SECS: i64 = 60 * 24 * 3600;
/// A score with no new bounce for this long returns to 0.
pub const DECAY_SECS: i64 = 7 * 24 * 3600;
/// The part of an unrecognised message forwarded to the owners.
pub const MAX_FORWARDED: usize = 64 * 1024;
const DAY_SECS: i64 = 24 * 3600;

/// One bounce of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BounceFacts {
    pub permanence: Permanence,
    pub source: BounceSource,
    pub status_code: Option<String>,
    pub diagnostic: Option<String>,
}

/// What recording a bounce did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub member_id: MemberId,
    pub permanence: Permanence,
    /// Whether it added to the score (a permanent failure, the first of its day).
    pub scored: bool,
    pub score: u32,
    /// The member was disabled by this bounce: the re-enable mail to send once committed.
    pub reenable: Option<ReenableMail>,
}

/// The re-enable mail, sent after the transaction that disabled the member committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReenableMail {
    pub to: EmailAddress,
    pub list_address: String,
    pub list_display_name: String,
    pub token: String,
}

fn day(t: Timestamp) -> i64 {
    t.unix_secs().div_euclid(DAY_SECS)
}

/// Records one bounce of `member` in `tx` (the rules above); the copy's own state is the
/// caller's (a DSN marks a delivered copy `bounced`; the delivery worker records its outcome).
/// Public for the rule tests over a real store.
#[doc(hidden)]
pub fn record(
    tx: &mut dyn Tx,
    list: &MailingList,
    member: &mut Member,
    copy: Option<CopyId>,
    facts: &BounceFacts,
    now: Timestamp,
) -> Result<Recorded, StoreError> {
    let scoring = matches!(member.status, MemberStatus::Active | MemberStatus::Disabled);
    let permanent = facts.permanence == Permanence::Permanent;
    let mut scored = false;
    let mut reenable = None;
    if permanent && scoring {
        // The decay applies first: a score quiet for 7 days is 0 whether or not the sweep ran.
        if member.last_bounce_at.is_some_and(|t| t.plus_secs(DECAY_SECS) <= now) {
            member.bounce_score = 0;
        }
        // At most one point a day; a score of 0 (re-enabled today) takes its first point anyway.
        if member.bounce_score == 0 || member.last_bounce_at.is_none_or(|t| day(t) != day(now)) {
            member.bounce_score = member.bounce_score.saturating_add(1);
            scored = true;
        }
        member.last_bounce_at = Some(now);
        let threshold = list.policies.bounce_disable_score;
        if threshold > 0
            && member.bounce_score >= threshold
            && let Ok(MemberState::Disabled) =
                state::next(MemberState::of(member.status, member.pending_reason), Trigger::DisableForBounces)
        {
            member.status = MemberStatus::Disabled;
            member.pending_reason = None;
            member.disabled_reason = Some("bounces".into());
            member.disabled_at = Some(now);
            let token = secrets::random_token(32);
            let hash = secrets::sha256_hex(token.as_bytes());
            tx.insert_token(REENABLE, &hash, None, Some(member.id.get()), now, now.plus_secs(REENABLE_TTL_SECS))?;
            reenable = Some(ReenableMail {
                to: member.email.clone(),
                list_address: list.address(),
                list_display_name: list.display_name.clone(),
                token,
            });
        }
        tx.update_member(member, None, now)?;
    }
    tx.insert_bounce(
        &NewBounce {
            list_id: list.id,
            member_id: member.id,
            copy_id: copy,
            permanence: facts.permanence,
            source: facts.source,
            status_code: facts.status_code.as_deref(),
            diagnostic: facts.diagnostic.as_deref(),
            scored,
        },
        now,
    )?;
    if permanent {
        let data = json!({
            "member": views::member(member),
            "member_id": member.id.get(),
            "email": member.email.to_string(),
            "score": member.bounce_score,
            "status_code": facts.status_code,
            "diagnostic": facts.diagnostic,
            "source": facts.source.as_str(),
            "disabled": reenable.is_some(),
        });
        lists::emit(tx, EventName::MemberBounced, list, data, now)?;
    }
    Ok(Recorded { member_id: member.id, permanence: facts.permanence, scored, score: member.bounce_score, reenable })
}

/// Mails the re-enable link. A failure is logged: the administrator can still re-enable.
pub(super) fn send_reenable(app: &Service, mail: &ReenableMail, now: Timestamp) {
    let link = format!("{}/p/reenable/{}", app.settings.public_url, mail.token);
    let body = format!(
        "Hello,\n\nMail from the list \"{}\" ({}) to {} has been returned as undeliverable several times,\n\
         so the list stopped sending to this address.\n\n\
         If the address works again, open this link to receive the list's mail again:\n\n{link}\n\n\
         If you no longer want the list's mail, ignore this message.\n",
        mail.list_display_name, mail.list_address, mail.to
    );
    let subject = format!("Your subscription to {} is paused", mail.list_address);
    let notice = Notice { from: &app.settings.mail_from, to: &mail.to, subject: &subject, body: &body, date: now };
    if let Err(e) = app.mail.send(&notice.compose()) {
        tracing::warn!(list = %mail.list_address, error = %e, "re-enable mail failed");
    }
}

/// What a message at a bounce address came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A bounce of the member the token names, recorded.
    Recorded(Recorded),
    /// A DSN reporting no failure (a delivery, a relay): nothing to do.
    NoFailure,
    /// Not recognised (or naming no copy of this list): forwarded to the owners, to this many.
    Forwarded(usize),
}

/// A message delivered to `L-bounces+<token>@D` of list `list_id`: recognised and recorded for the
/// member of the copy the token names, or forwarded to the list's owners.
pub fn receive(app: &Service, list_id: ListId, token: &str, raw: &[u8]) -> Result<Received, MailingError> {
    let read = read(app, token, raw);
    let now = app.clock.now();
    let acted = in_write(&*app.store, |tx| act(tx, list_id, &read, None, now))?;
    // Without an inbound message to mark, `act` always acts.
    match acted {
        Some(acted) => after(app, acted, raw, now),
        None => Ok(Received::NoFailure),
    }
}

/// A message at a bounce address as read before any transaction: its parts, the recognition's
/// verdict, the copy its token names.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct ReadBounce {
    parsed: Parsed,
    verdict: Verdict,
    copy_id: Option<CopyId>,
}

/// Reads and recognises a message at `L-bounces+<token>@D` (no store access: done outside the
/// write transaction).
pub(super) fn read(app: &Service, token: &str, raw: &[u8]) -> ReadBounce {
    let parsed = app.mime.read(raw).unwrap_or_default();
    let verdict = recognise::recognise(&parsed);
    let copy_id = copy_of_token(&app.data_key, token);
    ReadBounce { parsed, verdict, copy_id }
}

const VERP_PURPOSE: &str = "verp";
/// The bytes of the keyed tag a VERP token carries (64 bits: guessing one for a given copy takes
/// 2^63 tries on average, each a mail to the bounce address).
const VERP_TAG_BYTES: usize = 8;

/// The token of a copy's return path (`L-bounces+<token>@D`): the copy id and a tag keyed with
/// the installation's data key, `<id>-<16 hex digits>`. Only this installation can make one, so a
/// forged DSN cannot name another copy (and score or disable another member) by its id alone.
pub fn verp_token(key: &DataKey, copy: CopyId) -> String {
    let id = copy.get().to_string();
    let mut token = format!("{id}-");
    secrets::push_hex(&mut token, &key.mac(VERP_PURPOSE, id.as_bytes())[..VERP_TAG_BYTES]);
    token
}

/// The copy a VERP token names, when its tag is this installation's (compared in constant time);
/// `None` for anything else, bare copy ids included.
pub fn copy_of_token(key: &DataKey, token: &str) -> Option<CopyId> {
    let (id, _) = token.split_once('-')?;
    let copy = CopyId::from_stored(id.parse::<i64>().ok().filter(|id| *id > 0)?);
    let expected = verp_token(key, copy);
    secrets::constant_time_eq(expected.as_bytes(), token.to_ascii_lowercase().as_bytes()).then_some(copy)
}

/// What [`act`] did in the transaction; [`after`] finishes it once committed.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct Acted {
    /// The list and the message's subject, when the message is to be forwarded to its owners
    /// (`outcome` is `None`).
    forward: Option<(MailingList, String)>,
    outcome: Option<Received>,
}

/// Records a bounce-address message in `tx`: the bounce of the member its copy names, or nothing
/// (to forward); marks the inbound message `inbound` done with the outcome (`bounce`,
/// `no_failure` or `forwarded`). `None` when `inbound` was already handled (the caller undoes
/// what this wrote).
pub(super) fn act(
    tx: &mut dyn Tx,
    list_id: ListId,
    read: &ReadBounce,
    inbound: Option<super::inbound::InboundId>,
    now: Timestamp,
) -> Result<Option<Acted>, MailingError> {
    let Some(list) = tx.list_by_id(list_id)? else { return Err(MailingError::NotFound("list")) };
    let copy = match read.copy_id {
        Some(id) => tx.copy_for_bounce(id)?.filter(|c| c.list_id == list.id),
        None => None,
    };
    let member = match &copy {
        Some(c) => tx.find_member(c.member_id)?,
        None => None,
    };
    let outcome = match (copy, member, &read.verdict) {
        (Some(_), Some(_), Verdict::NoFailure) => Some(Received::NoFailure),
        (Some(copy), Some(mut member), Verdict::Bounce { dsn, .. }) => {
            match read.verdict.for_member(&member.email.to_string()).cloned() {
                Some(f) => {
                    let facts = BounceFacts {
                        permanence: f.permanence,
                        source: if *dsn { BounceSource::Dsn } else { BounceSource::Report },
                        status_code: f.status,
                        diagnostic: f.diagnostic.map(|d| d.chars().take(1000).collect()),
                    };
                    if f.permanence == Permanence::Permanent {
                        let why = facts.diagnostic.as_deref().or(facts.status_code.as_deref()).unwrap_or("bounced");
                        tx.mark_copy_bounced(copy.id, why, now)?;
                    }
                    Some(Received::Recorded(record(tx, &list, &mut member, Some(copy.id), &facts, now)?))
                }
                None => None,
            }
        }
        _ => None,
    };
    if let Some(id) = inbound {
        let name = match &outcome {
            Some(Received::Recorded(_)) => "bounce",
            Some(Received::NoFailure) => "no_failure",
            Some(Received::Forwarded(_)) | None => "forwarded",
        };
        if !tx.finish_inbound(id, name, now)? {
            return Ok(None);
        }
    }
    let forward = if outcome.is_none() { Some((list, read.parsed.subject.clone())) } else { None };
    Ok(Some(Acted { forward, outcome }))
}

/// What follows the commit of [`act`]: the re-enable mail of a member it disabled, or the forward
/// of an unrecognised message to the owners.
pub(super) fn after(app: &Service, acted: Acted, raw: &[u8], now: Timestamp) -> Result<Received, MailingError> {
    Ok(match acted {
        Acted { outcome: Some(Received::Recorded(r)), .. } => {
            if let Some(mail) = &r.reenable {
                send_reenable(app, mail, now);
            }
            Received::Recorded(r)
        }
        Acted { outcome: Some(other), .. } => other,
        Acted { forward: Some((list, subject)), outcome: None } => {
            Received::Forwarded(forward_to_owners(app, &list, &subject, raw, now)?)
        }
        Acted { forward: None, outcome: None } => Received::Forwarded(0),
    })
}

/// Forwards an unrecognised message to the list's owners, as text (never silently dropped).
fn forward_to_owners(
    app: &Service,
    list: &MailingList,
    subject: &str,
    raw: &[u8],
    now: Timestamp,
) -> Result<usize, MailingError> {
    let owners = in_read(&*app.store, |tx| tx.list_owner_emails(list))?;
    let shown = String::from_utf8_lossy(&raw[..raw.len().min(MAX_FORWARDED)]);
    let subject = format!("Unrecognised message at {}-bounces: {}", list.name, one_line(subject));
    let body = format!(
        "A message arrived at the bounce address of {} and was not recognised as a bounce.\n\
         It changed nothing; here it is{}:\n\n{shown}\n",
        list.address(),
        if raw.len() > MAX_FORWARDED { " (cut at 64 KiB)" } else { "" }
    );
    let mut sent = 0;
    for to in &owners {
        let notice = Notice { from: &app.settings.mail_from, to, subject: &subject, body: &body, date: now };
        match app.mail.send(&notice.compose()) {
            Ok(()) => sent += 1,
            Err(e) => tracing::warn!(list = %list.address(), error = %e, "forwarding an unrecognised bounce failed"),
        }
    }
    if owners.is_empty() {
        tracing::warn!(list = %list.address(), "an unrecognised message at the bounce address: the list has no owner to tell");
    }
    Ok(sent)
}

fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(200).collect()
}

/// Brings back to 0 the scores of active members with no bounce for [`DECAY_SECS`]; how many.
/// The server runs it with its housekeeping; [`record`] applies the same rule to the member it
/// scores.
pub fn decay(app: &Service) -> Result<u64, MailingError> {
    let now = app.clock.now();
    Ok(in_write(&*app.store, |tx| tx.decay_bounce_scores(now.plus_secs(-DECAY_SECS), now))?)
}

/// What a re-enable link stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reenable {
    pub list_address: String,
    pub email: String,
}

fn find_link(app: &Service, token: &str) -> Result<Option<(i64, Member, MailingList)>, MailingError> {
    let hash = secrets::sha256_hex(token.as_bytes());
    let now = app.clock.now();
    in_read(&*app.store, |tx| {
        let Some(t) = tx.token_by_hash(REENABLE, &hash)? else { return Ok(None) };
        if t.used_at.is_some() || t.expires_at <= now {
            return Ok(None);
        }
        let Some(m) = t.subject_id.map(|id| tx.find_member(MemberId::from_stored(id))).transpose()?.flatten() else {
            return Ok(None);
        };
        if m.status != MemberStatus::Disabled {
            return Ok(None);
        }
        let Some(l) = tx.list_by_id(m.list_id)? else { return Ok(None) };
        Ok(Some((t.id, m, l)))
    })
}

/// The page behind a re-enable link (GET): what it would re-enable; `None` for an unknown, used
/// or expired link, or a member no longer disabled.
pub fn reenable_peek(app: &Service, token: &str) -> Result<Option<Reenable>, MailingError> {
    Ok(find_link(app, token)?.map(|(_, m, l)| Reenable { list_address: l.address(), email: m.email.to_string() }))
}

/// Uses the link (POST): the disabled member is active again with a score of 0.
pub fn reenable(app: &Service, token: &str) -> Result<Option<Reenable>, MailingError> {
    let Some((token_id, found, list)) = find_link(app, token)? else { return Ok(None) };
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        if !tx.use_token(token_id, now)? {
            return Ok(None);
        }
        let Some(mut m) = tx.find_member(found.id)? else { return Ok(None) };
        if !apply_reenable(tx, &mut m, now)? {
            return Ok(None);
        }
        Ok(Some(Reenable { list_address: list.address(), email: m.email.to_string() }))
    })
}

/// Disabled -> active, score 0, the disabling cleared; `false` (nothing written) from any other
/// state.
pub(super) fn apply_reenable(tx: &mut dyn Tx, m: &mut Member, now: Timestamp) -> Result<bool, StoreError> {
    let Ok(next) = state::next(MemberState::of(m.status, m.pending_reason), Trigger::Reenable) else {
        return Ok(false);
    };
    let Some((status, reason)) = next.stored() else { return Ok(false) };
    m.status = status;
    m.pending_reason = reason;
    m.bounce_score = 0;
    m.disabled_reason = None;
    m.disabled_at = None;
    tx.update_member(m, None, now)?;
    Ok(true)
}

#[cfg(test)]
mod tests;
