//! Posts by mail: what a message to `L@D` becomes. Loops, robots and repeated Message-IDs are
//! dropped; the list's `posting_policy` (and its state) decides between [`publish`] (a send
//! through the same path as `POST .../sends`) and [`hold`] (a held post for a moderator,
//! `message.held`). Moderation's approve calls [`publish`] too.

use super::bounces::MimeReader;
use super::dmarc::FromCheck;
use super::inbound::{self, InboundId, InboundMessage};
pub use super::model::{HeldId, HeldPost, HoldReason};
use super::model::{ListId, ListStatus, MailingList, MemberStatus, PostingPolicy, ReadMail, SendKind};
use super::ports::{NewHeldPost, NewSend, Tx};
use super::sends::{self, Submitted};
use super::{MailingError, Service, lists};
use crate::access::model::Role as AccessRole;
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{Principal, model::UserStatus};
use crate::kernel::{EmailAddress, EventName, Timestamp, secrets};
use crate::storage::in_read;
use serde_json::json;

/// A Message-ID seen on the list this recently makes a post a duplicate.
pub const DUPLICATE_WINDOW_SECS: i64 = 7 * 24 * 3600;
/// The longest text kept on a send made from a post (digests read it).
const MAX_TEXT_BYTES: usize = 256 * 1024;

/// Why a post was not posted and not held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// It carries this list's `List-Id` or `X-BeenThere`: it came from the list.
    Loop,
    /// `Auto-Submitted` other than `no`: a robot's mail (vacation replies, bounces).
    AutoReply,
    /// Its Message-ID was posted to (or held for) the list in the last 7 days.
    Duplicate,
}

/// What became of a post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Posted(Submitted),
    Held(HeldId, HoldReason),
    Dropped(Dropped),
}

impl Outcome {
    /// The inbound store's `outcome`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Posted(_) => "posted",
            Outcome::Held(..) => "held",
            Outcome::Dropped(Dropped::Loop) => "loop",
            Outcome::Dropped(Dropped::AutoReply) => "auto_reply",
            Outcome::Dropped(Dropped::Duplicate) => "duplicate",
        }
    }
}

/// What the rules read from a post, parsed once (mail-parser; never by hand).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The `From` address (the envelope sender when the header has none that parses).
    pub from: Option<EmailAddress>,
    pub from_name: Option<String>,
    /// Decoded, control characters made spaces, at most 998 characters.
    pub subject: String,
    /// Without angle brackets.
    pub message_id: Option<String>,
    pub text: Option<String>,
    pub html: Option<String>,
    /// Every `List-Id` and `X-BeenThere` value, lowercased.
    pub loop_marks: Vec<String>,
    /// `Auto-Submitted` (lowercased, up to `;`), when present.
    pub auto_submitted: Option<String>,
    /// Whether `from` may stand for its address (the poster's DMARC policy and DKIM signatures):
    /// set by mail in's processing, which has the DNS; as written until then.
    pub from_check: FromCheck,
}

fn clean_line(s: &str, max: usize) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).take(max).collect::<String>().trim().to_owned()
}

fn bounded(mut s: String) -> String {
    if s.len() > MAX_TEXT_BYTES {
        let mut cut = MAX_TEXT_BYTES;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Reads a post (through the MIME port). A message that cannot be read at all is an empty
/// summary (it is then held or refused by the policy like any other).
pub fn summarize(mime: &dyn MimeReader, raw: &[u8], envelope_from: Option<&str>) -> Summary {
    summary_of(mime.read_mail(raw).as_ref(), envelope_from)
}

/// The summary of a message read by the MIME port (`None`: it could not be read).
pub fn summary_of(read: Option<&ReadMail>, envelope_from: Option<&str>) -> Summary {
    let Some(m) = read else {
        return Summary {
            from: envelope_from.and_then(|e| EmailAddress::parse(e).ok()),
            from_name: None,
            subject: String::new(),
            message_id: None,
            text: None,
            html: None,
            loop_marks: Vec::new(),
            auto_submitted: None,
            from_check: FromCheck::AsWritten,
        };
    };
    let from = m.from_address.as_deref().and_then(|a| EmailAddress::parse(a.trim()).ok());
    let from_name = m.from_name.as_deref().map(|n| clean_line(n, 200)).filter(|n| !n.is_empty());
    let from = from.or_else(|| envelope_from.and_then(|e| EmailAddress::parse(e).ok()));
    let loop_marks = m
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("List-Id") || h.name.eq_ignore_ascii_case("X-BeenThere"))
        .map(|h| h.value.trim().to_ascii_lowercase())
        .collect();
    let auto_submitted =
        m.auto_submitted.as_deref().map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let text = m.text.clone().map(bounded);
    let html = m.html.clone().map(bounded);
    Summary {
        from,
        from_name,
        subject: clean_line(m.subject.as_deref().unwrap_or(""), sends::MAX_SUBJECT),
        message_id: m.message_id.as_deref().map(|id| clean_line(id, 250)).filter(|id| !id.is_empty()),
        text: text.filter(|t| !t.trim().is_empty()),
        html: html.filter(|t| !t.trim().is_empty()),
        loop_marks,
        auto_submitted,
        from_check: FromCheck::AsWritten,
    }
}

/// The rule on loops and robots: `Some` when the post is not to be posted at all.
pub fn robot_or_loop(list: &MailingList, s: &Summary) -> Option<Dropped> {
    let list_id = format!("{}.{}", list.name, list.domain);
    let address = list.address();
    let ours = |mark: &String| {
        let m = mark.trim();
        m == address
            || m.trim_start_matches('<').trim_end_matches('>') == address
            || m.contains(&format!("<{list_id}>"))
            || m == list_id
    };
    if s.loop_marks.iter().any(ours) {
        return Some(Dropped::Loop);
    }
    if s.auto_submitted.as_deref().is_some_and(|v| v != "no") {
        return Some(Dropped::AutoReply);
    }
    None
}

/// Who the poster is to the list, as the posting policy asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Standing {
    pub active_member: bool,
    /// Owner or moderator of the list.
    pub owner: bool,
}

/// The posting rule: `None` to post, else why it is held. An archived or suspended list holds
/// whatever the policy; then `open` posts, `members` needs an active member, `moderated` holds
/// all, `owners` needs an owner or moderator.
pub fn policy(list: &MailingList, standing: Standing) -> Option<HoldReason> {
    if list.status == ListStatus::Archived {
        return Some(HoldReason::Archived);
    }
    if list.send_suspended {
        return Some(HoldReason::Suspended);
    }
    match list.policies.posting_policy {
        PostingPolicy::Open => None,
        PostingPolicy::Members if standing.active_member || standing.owner => None,
        PostingPolicy::Members => Some(HoldReason::NotMember),
        PostingPolicy::Moderated => Some(HoldReason::Moderated),
        PostingPolicy::Owners if standing.owner => None,
        PostingPolicy::Owners => Some(HoldReason::OwnersOnly),
    }
}

/// The poster's standing, read in `tx`.
fn standing(tx: &mut dyn Tx, list: &MailingList, from: Option<&EmailAddress>) -> Result<Standing, MailingError> {
    let Some(from) = from else { return Ok(Standing::default()) };
    let active_member = tx.member_by_email(list.id, from)?.is_some_and(|m| m.status == MemberStatus::Active);
    let owner = match tx.user_by_email(from)? {
        Some(u) if u.user.status == UserStatus::Active => tx.roles_of(u.user.id)?.iter().any(|g| match &g.role {
            AccessRole::Owner(d, l) | AccessRole::Moderator(d, l) => *d == list.domain && *l == list.name,
            _ => false,
        }),
        _ => false,
    };
    Ok(Standing { active_member, owner })
}

/// Processes a stored post in `tx`: dropped, held or posted, recorded with the inbound message's
/// outcome. `summary` is the post as [`summarize`] read it (outside the transaction). `None` when
/// the message was already processed (the caller undoes what this wrote).
pub(super) fn act(
    mime: &dyn MimeReader,
    tx: &mut dyn Tx,
    m: &InboundMessage,
    summary: &Summary,
    now: Timestamp,
) -> Result<Option<Outcome>, MailingError> {
    let (p, ctx) = inbound::actor();
    let Some(list) = tx.list_by_id(m.list_id)? else { return Err(MailingError::NotFound("list")) };
    let outcome = decide_and_act(mime, tx, &list, m, summary, &p, &ctx, now)?;
    if !tx.finish_inbound(m.id, outcome.as_str(), now)? {
        return Ok(None);
    }
    Ok(Some(outcome))
}

#[allow(clippy::too_many_arguments)]
fn decide_and_act(
    mime: &dyn MimeReader,
    tx: &mut dyn Tx,
    list: &MailingList,
    m: &InboundMessage,
    summary: &Summary,
    p: &Principal,
    ctx: &RequestCtx,
    now: Timestamp,
) -> Result<Outcome, MailingError> {
    if let Some(d) = robot_or_loop(list, summary) {
        return Ok(Outcome::Dropped(d));
    }
    if let Some(id) = &summary.message_id
        && tx.message_id_seen(list.id, id, now.plus_secs(-DUPLICATE_WINDOW_SECS))?
    {
        return Ok(Outcome::Dropped(Dropped::Duplicate));
    }
    let reason = if m.raw.len() > list.policies.max_message_kb as usize * 1024 {
        Some(HoldReason::TooLarge)
    } else {
        // A `From` its own domain disowns is nobody's: not a member's, not an owner's.
        let from = summary.from.as_ref().filter(|_| summary.from_check != FromCheck::Unaligned);
        policy(list, standing(tx, list, from)?)
    };
    let to_hold = |reason| ToHold {
        raw: &m.raw,
        envelope_from: m.envelope_from.as_deref(),
        reason,
        inbound: Some(m.id),
        received_at: m.received_at,
    };
    match reason {
        Some(reason) => Ok(Outcome::Held(hold(mime, tx, list, &to_hold(reason), p, ctx, now)?, reason)),
        None => Ok(Outcome::Posted(publish_summary(tx, list, &m.raw, summary, p, ctx, now)?)),
    }
}

/// A post to hold.
#[derive(Debug, Clone, Copy)]
pub struct ToHold<'a> {
    pub raw: &'a [u8],
    pub envelope_from: Option<&'a str>,
    pub reason: HoldReason,
    /// The inbound message it came as (none when held from elsewhere).
    pub inbound: Option<InboundId>,
    pub received_at: Timestamp,
}

/// Holds a post for the list's moderators: the held post, `message.held` and the audit entry,
/// in the caller's transaction.
pub fn hold(
    mime: &dyn MimeReader,
    tx: &mut dyn Tx,
    list: &MailingList,
    post: &ToHold<'_>,
    p: &Principal,
    ctx: &RequestCtx,
    now: Timestamp,
) -> Result<HeldId, MailingError> {
    let s = summarize(mime, post.raw, post.envelope_from);
    let from = s.from.as_ref().map(ToString::to_string);
    let id = tx.insert_held(
        &NewHeldPost {
            list_id: list.id,
            inbound_id: post.inbound,
            raw: post.raw,
            envelope_from: post.envelope_from,
            from: from.as_deref(),
            subject: Some(s.subject.as_str()),
            message_id: s.message_id.as_deref(),
            reason: post.reason,
        },
        post.received_at,
    )?;
    let data = json!({
        "held_id": id.get(),
        "reason": post.reason.as_str(),
        "from": from,
        "subject": s.subject,
        "size": post.raw.len(),
    });
    lists::emit(tx, EventName::MessageHeld, list, data, now)?;
    audit_done(tx, p, ctx, now, "message.hold", &format!("held:{}:{id}", list.address()))?;
    Ok(id)
}

/// Posts a message received by mail to the list: a send through the same path as `POST
/// .../sends` (same queue, aggregates, digests, `send.submitted`) carrying the raw post, from
/// which each copy is built. In the caller's transaction. An archived list sends nothing (409).
pub fn publish(
    mime: &dyn MimeReader,
    tx: &mut dyn Tx,
    list: &MailingList,
    raw: &[u8],
    p: &Principal,
    ctx: &RequestCtx,
    now: Timestamp,
) -> Result<Submitted, MailingError> {
    let summary = summarize(mime, raw, None);
    publish_summary(tx, list, raw, &summary, p, ctx, now)
}

fn publish_summary(
    tx: &mut dyn Tx,
    list: &MailingList,
    raw: &[u8],
    s: &Summary,
    p: &Principal,
    ctx: &RequestCtx,
    now: Timestamp,
) -> Result<Submitted, MailingError> {
    if list.status == ListStatus::Archived {
        return Err(MailingError::Conflict("the list is archived: it sends nothing".into()));
    }
    let message_id = s
        .message_id
        .clone()
        .unwrap_or_else(|| format!("{}.{}@{}", now.unix_secs(), secrets::random_hex(12), list.domain));
    let subject = if s.subject.is_empty() { "(no subject)" } else { s.subject.as_str() };
    let new = NewSend {
        list_id: list.id,
        subject,
        text: s.text.as_deref(),
        html: s.html.as_deref(),
        message_id: &message_id,
        created_by: p.user.as_ref().map(|u| u.id.get()),
        kind: SendKind::Post,
        raw: Some(raw),
    };
    sends::enqueue(tx, list, &new, p, ctx, now)
}

/// Reads a stored post's first text part, for the moderation view (at most `max` bytes).
pub fn first_text(mime: &dyn MimeReader, raw: &[u8], max: usize) -> Option<String> {
    let text = mime.first_text(raw)?;
    let mut cut = text.len().min(max);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(text[..cut].to_owned())
}

/// A held post, read for a moderator (`None` when it is not on the list, or already decided).
pub fn held(app: &Service, list: ListId, id: HeldId) -> Result<Option<HeldPost>, MailingError> {
    Ok(in_read(&*app.store, |tx| tx.held_by_id(list, id))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::mime::MailParserReader;
    use crate::kernel::{DomainName, ListName};
    use crate::mailing::model::*;

    fn list(policy: PostingPolicy) -> MailingList {
        let t = Timestamp::from_unix_secs(1_795_425_649);
        let mut policies = ListPolicies::defaults(SubscriptionPolicy::Open, ListKind::Discussion);
        policies.posting_policy = policy;
        MailingList {
            id: ListId::from_stored(1),
            domain_id: DomainId::from_stored(1),
            domain: DomainName::parse("example.org").unwrap(),
            name: ListName::parse("news").unwrap(),
            display_name: "News".into(),
            kind: ListKind::Discussion,
            status: ListStatus::Active,
            send_suspended: false,
            policies,
            created_at: t,
            updated_at: t,
        }
    }

    fn check(policy_: PostingPolicy, standing: Standing, expect: Option<HoldReason>) {
        assert_eq!(policy(&list(policy_), standing), expect, "{policy_:?} {standing:?}");
    }

    #[test]
    fn the_posting_policy_decides_who_posts_and_why_others_are_held() {
        let nobody = Standing::default();
        let member = Standing { active_member: true, owner: false };
        let owner = Standing { active_member: false, owner: true };
        check(PostingPolicy::Open, nobody, None);
        check(PostingPolicy::Members, nobody, Some(HoldReason::NotMember));
        check(PostingPolicy::Members, member, None);
        check(PostingPolicy::Members, owner, None);
        check(PostingPolicy::Moderated, owner, Some(HoldReason::Moderated));
        check(PostingPolicy::Owners, member, Some(HoldReason::OwnersOnly));
        check(PostingPolicy::Owners, owner, None);
        let mut archived = list(PostingPolicy::Open);
        archived.status = ListStatus::Archived;
        assert_eq!(policy(&archived, owner), Some(HoldReason::Archived));
        let mut suspended = list(PostingPolicy::Open);
        suspended.send_suspended = true;
        assert_eq!(policy(&suspended, owner), Some(HoldReason::Suspended));
    }

    fn summary(raw: &str) -> Summary {
        summarize(&MailParserReader, raw.as_bytes(), Some("bounce@example.net"))
    }

    #[test]
    fn loops_and_robots_are_recognised() {
        let l = list(PostingPolicy::Open);
        let plain = "From: Ann <ann@example.net>\r\nSubject: Hi\r\nMessage-ID: <a@b>\r\n\r\nHello\r\n";
        assert_eq!(robot_or_loop(&l, &summary(plain)), None);
        let ours = format!("List-Id: News <news.example.org>\r\n{plain}");
        assert_eq!(robot_or_loop(&l, &summary(&ours)), Some(Dropped::Loop));
        let other = format!("List-Id: Other <other.example.org>\r\n{plain}");
        assert_eq!(robot_or_loop(&l, &summary(&other)), None);
        let been = format!("X-BeenThere: news@example.org\r\n{plain}");
        assert_eq!(robot_or_loop(&l, &summary(&been)), Some(Dropped::Loop));
        let auto = format!("Auto-Submitted: auto-replied\r\n{plain}");
        assert_eq!(robot_or_loop(&l, &summary(&auto)), Some(Dropped::AutoReply));
        let human = format!("Auto-Submitted: no\r\n{plain}");
        assert_eq!(robot_or_loop(&l, &summary(&human)), None);
    }

    #[test]
    fn a_summary_decodes_the_subject_and_finds_the_poster() {
        let s = summary(
            "From: =?utf-8?q?Ann=C3=A9?= <Ann@Example.net>\r\nSubject: =?utf-8?q?caf=C3=A9?= time\r\n\
             Message-ID: <x1@example.net>\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nBody\r\n",
        );
        assert_eq!(s.from.unwrap().to_string(), "Ann@example.net");
        assert_eq!(s.from_name.as_deref(), Some("Anné"));
        assert_eq!(s.subject, "café time");
        assert_eq!(s.message_id.as_deref(), Some("x1@example.net"));
        assert_eq!(s.text.as_deref().map(str::trim), Some("Body"));
        let garbage = summarize(&MailParserReader, b"", Some("e@example.net"));
        assert_eq!(garbage.from.unwrap().to_string(), "e@example.net");
    }
}
