//! Requests by mail: what a message to `L-request@D` (`subscribe`, `unsubscribe`, `help` in the
//! subject or the first body line), `L-join@D`, `L-leave@D` or `L-owner@D` becomes.
//!
//! A request acts for the address in the message's `From` (the envelope sender when it has none),
//! and never on the mail's word alone: a subscription becomes pending a confirmation whatever
//! the list's policy (following the mailed link applies the policy, so a moderated list then
//! holds it for a moderator), and an unsubscription mails a confirmation link too (a `From` can
//! be forged; the link goes to the address itself). Every request is answered, except what a
//! robot sent (`Precedence: bulk|junk|list`, `Auto-Submitted` other than `no`, the null sender):
//! answering robots is how mail loops start. Mail to `L-owner@D` is forwarded to the owners.
//!
//! The request's writes and the inbound message's outcome commit together (processed once); the
//! reply goes out after the commit.

use super::bounces::MimeReader;
use super::inbound::{InboundMessage, Role};
use super::members::{self, AddMember, AddOutcome};
use super::model::{DeliveryMode, MailingList, MemberStatus};
use super::posts;
use super::state::Trigger;
use super::{MailingError, Service, delivery, subscriptions};
use crate::kernel::{Actor, EmailAddress, NewAuditEntry, Notice, Outcome as Audited, OutgoingMessage, RequestId};
use crate::kernel::{Timestamp, secrets};
use crate::mailing::ports::Tx;

/// An unsubscription link mailed in answer to a request works this long.
pub const UNSUBSCRIBE_REQUEST_TTL_SECS: i64 = 7 * 24 * 3600;
/// How much of a message's subject and body a command is looked for in.
const COMMAND_SCAN_CHARS: usize = 1000;

/// A command to `L-request@D`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Subscribe,
    Unsubscribe,
    Help,
}

/// What a request became (the inbound store's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A subscription waits for its confirmation: the link was mailed.
    ConfirmationSent,
    /// The address was already subscribed (told so).
    AlreadySubscribed,
    /// The subscription was already waiting for a moderator (told so).
    AwaitingModeration,
    /// The list takes no subscriptions (told so).
    Closed,
    /// An unsubscription link was mailed.
    UnsubscribeLinkSent,
    /// The address is not subscribed (told so).
    NotSubscribed,
    /// The help text was mailed.
    Help,
    /// No command was recognised: the help text was mailed.
    NotUnderstood,
    /// Mail to `L-owner@D`, forwarded to the owners.
    Forwarded,
    /// `L-owner@D` mail the list has no owner to forward to.
    NoOwner,
    /// A robot's mail, or a bounce: not answered.
    Robot,
    /// Mail that came back to this address (a loop): dropped.
    Loop,
    /// No sender address to act for or answer.
    NoSender,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::ConfirmationSent => "confirmation_sent",
            Outcome::AlreadySubscribed => "already_subscribed",
            Outcome::AwaitingModeration => "awaiting_moderation",
            Outcome::Closed => "closed",
            Outcome::UnsubscribeLinkSent => "unsubscribe_link_sent",
            Outcome::NotSubscribed => "not_subscribed",
            Outcome::Help => "help",
            Outcome::NotUnderstood => "not_understood",
            Outcome::Forwarded => "forwarded",
            Outcome::NoOwner => "no_owner",
            Outcome::Robot => "robot",
            Outcome::Loop => "loop",
            Outcome::NoSender => "no_sender",
        }
    }
}

/// What the rules read from a request, parsed once with mail-parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMail {
    /// Who the request acts for: `From`, else the envelope sender.
    pub sender: Option<EmailAddress>,
    /// Decoded subject.
    pub subject: String,
    /// The first text part (at most [`COMMAND_SCAN_CHARS`] characters).
    pub text: String,
    /// A robot sent it: `Precedence: bulk|junk|list`, `Auto-Submitted` other than `no`, or the
    /// null envelope sender.
    pub robot: bool,
    /// Every `X-BeenThere` value, lowercased (a forward that came back).
    pub been_there: Vec<String>,
    pub message_id: Option<String>,
}

/// Reads a request (through the MIME port; never by hand).
pub fn read(mime: &dyn MimeReader, raw: &[u8], envelope_from: Option<&str>) -> RequestMail {
    let parsed = mime.read_mail(raw);
    let summary = posts::summary_of(parsed.as_ref(), envelope_from);
    let precedence = parsed
        .as_ref()
        .and_then(|m| m.precedence.as_deref())
        .map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    let bulk = precedence.as_deref().is_some_and(|p| matches!(p, "bulk" | "junk" | "list"));
    let auto = summary.auto_submitted.as_deref().is_some_and(|v| v != "no");
    let been_there = parsed
        .as_ref()
        .map(|m| {
            m.headers
                .iter()
                .filter(|h| h.name.eq_ignore_ascii_case("X-BeenThere"))
                .map(|h| h.value.trim().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default();
    RequestMail {
        sender: summary.from,
        subject: summary.subject,
        text: summary.text.unwrap_or_default().chars().take(COMMAND_SCAN_CHARS).collect(),
        robot: bulk || auto || envelope_from.is_none_or(|e| e.trim().is_empty()),
        been_there,
        message_id: summary.message_id,
    }
}

/// The command a request carries: the first word of the subject (after any `Re:`), else of the
/// first non-blank body line.
pub fn command(m: &RequestMail) -> Option<Command> {
    let word = |line: &str| -> Option<Command> {
        let mut rest = line.trim();
        while let Some(after) = rest.get(..3).filter(|p| p.eq_ignore_ascii_case("re:")).and_then(|_| rest.get(3..)) {
            rest = after.trim_start();
        }
        let first = rest.split_whitespace().next()?.trim_end_matches([':', '.', ',']).to_ascii_lowercase();
        match first.as_str() {
            "subscribe" | "join" => Some(Command::Subscribe),
            "unsubscribe" | "leave" | "signoff" => Some(Command::Unsubscribe),
            "help" | "info" => Some(Command::Help),
            _ => None,
        }
    };
    word(&m.subject).or_else(|| m.text.lines().find(|l| !l.trim().is_empty()).and_then(word))
}

/// What goes out once the request's transaction committed.
#[derive(Debug)]
#[doc(hidden)]
pub enum After {
    Nothing,
    Confirmation { list: MailingList, to: EmailAddress, token: String },
    Notice { to: EmailAddress, subject: String, body: String },
    Forward(OutgoingMessage),
}

/// Processes a stored request (`L-request`, `L-join`, `L-leave`, `L-owner`) in `tx`: its writes
/// and the inbound message's outcome; the reply to send once committed ([`after`]). `mail` is the
/// request as [`read`] read it (outside the transaction). `None` when the message was already
/// processed (the caller undoes what this wrote).
pub(super) fn act(
    app: &Service,
    tx: &mut dyn Tx,
    m: &InboundMessage,
    mail: &RequestMail,
    now: Timestamp,
) -> Result<Option<(Outcome, After)>, MailingError> {
    let Some(list) = tx.list_by_id(m.list_id)? else { return Err(MailingError::NotFound("list")) };
    let (outcome, after) = decide(app, tx, &list, m, mail, now)?;
    if !tx.finish_inbound(m.id, outcome.as_str(), now)? {
        return Ok(None);
    }
    Ok(Some((outcome, after)))
}

/// The reply to a request, once its transaction committed. A failure is logged (the request's
/// writes stand).
pub(super) fn after(app: &Service, m: &InboundMessage, outcome: Outcome, after: After, now: Timestamp) {
    match after {
        After::Nothing => {}
        After::Confirmation { list, to, token } => subscriptions::send_confirmation(app, &list, &to, &token, now),
        After::Notice { to, subject, body } => {
            let notice = Notice { from: &app.settings.mail_from, to: &to, subject: &subject, body: &body, date: now };
            if let Err(e) = app.mail.send(&notice.compose()) {
                tracing::warn!(inbound = m.id.get(), error = %e, "request reply failed");
            }
        }
        After::Forward(message) => {
            if let Err(e) = app.mail.send(&message) {
                tracing::warn!(inbound = m.id.get(), error = %e, "owner mail forward failed");
            }
        }
    }
    tracing::info!(inbound = m.id.get(), list = m.list_id.get(), outcome = outcome.as_str(), "request processed");
}

fn decide(
    app: &Service,
    tx: &mut dyn Tx,
    list: &MailingList,
    m: &InboundMessage,
    mail: &RequestMail,
    now: Timestamp,
) -> Result<(Outcome, After), MailingError> {
    if m.role == Role::Owner {
        return forward_to_owners(app, tx, list, m, mail);
    }
    if mail.robot {
        return Ok((Outcome::Robot, After::Nothing));
    }
    let Some(sender) = mail.sender.clone() else { return Ok((Outcome::NoSender, After::Nothing)) };
    let cmd = match m.role {
        Role::Join => Some(Command::Subscribe),
        Role::Leave => Some(Command::Unsubscribe),
        _ => command(mail),
    };
    match cmd {
        Some(Command::Subscribe) => subscribe(tx, list, &sender, mail, now),
        Some(Command::Unsubscribe) => unsubscribe(app, tx, list, &sender, now),
        Some(Command::Help) => Ok((Outcome::Help, help(list, &sender, None))),
        None => Ok((Outcome::NotUnderstood, help(list, &sender, Some(&mail.subject)))),
    }
}

fn audit(
    tx: &mut dyn Tx,
    member: Option<i64>,
    action: &str,
    target: String,
    now: Timestamp,
) -> Result<(), MailingError> {
    tx.append_audit(&NewAuditEntry {
        at: now,
        request_id: RequestId::internal("mail-in"),
        actor: Actor { user_id: None, key_id: None, member_id: member },
        action: action.to_owned(),
        target,
        outcome: Audited::Done,
    })?;
    Ok(())
}

fn subscribe(
    tx: &mut dyn Tx,
    list: &MailingList,
    sender: &EmailAddress,
    mail: &RequestMail,
    now: Timestamp,
) -> Result<(Outcome, After), MailingError> {
    let req = AddMember {
        email: sender.clone(),
        display_name: None,
        delivery_mode: DeliveryMode::Regular,
        force: false,
        consent_source: Some("mail_request".into()),
        consent_evidence: Some(format!(
            "subscription request mailed to {}-request@{} (Message-ID {})",
            list.name,
            list.domain,
            mail.message_id.as_deref().unwrap_or("none")
        )),
        source_ip: None,
    };
    let trigger = Trigger::SubscribeByForm(members::effective_policy(list));
    let told = |outcome, what: &str| {
        let body = format!("Hello,\n\n{what}\n\n{}", help_text(list));
        (outcome, After::Notice { to: sender.clone(), subject: format!("Your request to {}", list.address()), body })
    };
    match members::apply_add(tx, list, &req, trigger, now) {
        Ok(AddOutcome::PendingConfirmation(id)) => {
            let token = secrets::random_token(32);
            subscriptions::store_token(tx, id, &token, now)?;
            audit(tx, Some(id.get()), "member.subscribe_mail", format!("member:{}:{id}", list.address()), now)?;
            Ok((Outcome::ConfirmationSent, After::Confirmation { list: list.clone(), to: sender.clone(), token }))
        }
        Ok(AddOutcome::PendingModeration(_)) => Ok(told(
            Outcome::AwaitingModeration,
            &format!("{sender} asked to join {} already: the request waits for its moderators.", list.address()),
        )),
        Ok(AddOutcome::Active(_)) | Err(MailingError::AlreadySubscribed(_)) => {
            Ok(told(Outcome::AlreadySubscribed, &format!("{sender} is already subscribed to {}.", list.address())))
        }
        Err(MailingError::SubscriptionClosed) => Ok(told(
            Outcome::Closed,
            &format!("The list {} takes no subscriptions: {sender} was not subscribed.", list.address()),
        )),
        Err(e) => Err(e),
    }
}

fn unsubscribe(
    app: &Service,
    tx: &mut dyn Tx,
    list: &MailingList,
    sender: &EmailAddress,
    now: Timestamp,
) -> Result<(Outcome, After), MailingError> {
    let subject = format!("Your request to {}", list.address());
    let member = tx
        .member_by_email(list.id, sender)?
        .filter(|m| matches!(m.status, MemberStatus::Active | MemberStatus::Disabled | MemberStatus::Pending));
    let Some(member) = member else {
        let body = format!("Hello,\n\n{sender} is not subscribed to {}: nothing to do.\n", list.address());
        return Ok((Outcome::NotSubscribed, After::Notice { to: sender.clone(), subject, body }));
    };
    let token = secrets::random_token(32);
    tx.insert_token(
        delivery::UNSUBSCRIBE,
        &secrets::sha256_hex(token.as_bytes()),
        None,
        Some(member.id.get()),
        now,
        now.plus_secs(UNSUBSCRIBE_REQUEST_TTL_SECS),
    )?;
    audit(
        tx,
        Some(member.id.get()),
        "member.unsubscribe_mail",
        format!("member:{}:{}", list.address(), member.id),
        now,
    )?;
    let link = format!("{}/p/unsubscribe/{token}", app.settings.public_url);
    let body = format!(
        "Hello,\n\nSomeone, probably you, asked to unsubscribe {sender} from the list \"{}\" ({}).\n\
         To confirm, open this link (it works for 7 days):\n\n{link}\n\n\
         If you did not ask for this, ignore this message: you stay subscribed.\n",
        list.display_name,
        list.address()
    );
    Ok((Outcome::UnsubscribeLinkSent, After::Notice { to: member.email, subject, body }))
}

fn help_text(list: &MailingList) -> String {
    let (l, d) = (&list.name, &list.domain);
    format!(
        "The list \"{}\" ({}) takes these requests by mail:\n\n\
         - to subscribe: write to {l}-join@{d}, or to {l}-request@{d} with \"subscribe\" as the subject;\n\
         - to unsubscribe: write to {l}-leave@{d}, or to {l}-request@{d} with \"unsubscribe\" as the subject;\n\
         - this help: \"help\" to {l}-request@{d};\n\
         - to reach the list's owners: {l}-owner@{d}.\n\n\
         Each subscription or unsubscription is confirmed by a link mailed to the address itself.\n",
        list.display_name,
        list.address()
    )
}

fn help(list: &MailingList, to: &EmailAddress, not_understood: Option<&str>) -> After {
    let intro = match not_understood {
        Some(subject) => format!("Hello,\n\nThe request \"{subject}\" was not understood.\n\n"),
        None => "Hello,\n\n".to_owned(),
    };
    After::Notice {
        to: to.clone(),
        subject: format!("Help for {}", list.address()),
        body: format!("{intro}{}", help_text(list)),
    }
}

/// Mail to `L-owner@D`: the message as it came, to each owner, marked `X-BeenThere: L-owner@D`
/// so that a copy coming back to the same address is recognised and dropped.
fn forward_to_owners(
    app: &Service,
    tx: &mut dyn Tx,
    list: &MailingList,
    m: &InboundMessage,
    mail: &RequestMail,
) -> Result<(Outcome, After), MailingError> {
    let address = format!("{}-owner@{}", list.name, list.domain);
    if mail.been_there.iter().any(|v| v.trim_matches(['<', '>']) == address) {
        return Ok((Outcome::Loop, After::Nothing));
    }
    let owners = tx.list_owners(&list.domain, &list.name)?;
    if owners.is_empty() {
        return Ok((Outcome::NoOwner, After::Nothing));
    }
    let mut data = format!("X-BeenThere: {address}\r\n").into_bytes();
    data.extend_from_slice(&m.raw);
    // Bounces of the forward go to the installation, never back to the owner address.
    let message = OutgoingMessage { envelope_from: Some(app.settings.mail_from.clone()), recipients: owners, data };
    Ok((Outcome::Forwarded, After::Forward(message)))
}
