//! Bounce recognition: from a message parsed into its parts ([`Parsed`], made by the
//! [`super::MimeReader`] port) to what failed for whom. Pure functions, no store, no clock.
//!
//! An RFC 3464 DSN is read from its `message/delivery-status` part: one [`Failure`] per recipient
//! block (`Action`, `Status`, `Final-Recipient`, `Diagnostic-Code`). A report that is not a DSN is
//! recognised by the plain-text formats of the common MTAs and providers: a bounce's sender or
//! subject, and a failure line in its text (an enhanced status `5.x.x`, a `550` reply, or the
//! phrases they write); the member is then known from the VERP token, not from the text. Anything
//! else is [`Verdict::Unrecognised`] (forwarded to the list's owners by the caller).

pub use crate::mailing::model::Permanence;
use regex::Regex;
use std::sync::LazyLock;

/// At most this much of one part's text is read (a bounce's report is short; the returned
/// original may be long and is not read at all).
pub const MAX_PART_TEXT: usize = 64 * 1024;
/// At most this many parts are looked at.
pub const MAX_PARTS: usize = 32;

/// A message as recognition needs it, made by the MIME reader adapter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    pub from: String,
    pub subject: String,
    /// `Auto-Submitted`, lowercased, when present.
    pub auto_submitted: Option<String>,
    /// Leaf parts in order, multiparts flattened.
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// `type/subtype`, lowercased (`text/plain` for a part without a content type).
    pub content_type: String,
    /// Decoded text (HTML turned into text); a `message/delivery-status` part's fields.
    pub text: String,
    /// Inside the returned original message (`message/rfc822`, `text/rfc822-headers`): never
    /// read for failure lines, which a post may well contain.
    pub returned: bool,
}

/// What a report says of one recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub permanence: Permanence,
    /// `Action` of a DSN (`failed`, `delayed`); `None` for a non-standard report.
    pub action: Option<String>,
    /// `Status` (`5.1.1`), or the code found in a non-standard report.
    pub status: Option<String>,
    /// `Final-Recipient`'s address (or `Original-Recipient`'s), or an address named in a
    /// non-standard report's failure lines.
    pub final_recipient: Option<String>,
    /// `Diagnostic-Code`, or the failure line of a non-standard report.
    pub diagnostic: Option<String>,
}

/// What a message at a bounce address is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A DSN or a recognised report: at least one failure.
    Bounce { dsn: bool, failures: Vec<Failure> },
    /// A DSN that reports no failure (`delivered`, `relayed`, `expanded`): nothing to do.
    NoFailure,
    /// Not recognised as a bounce: forwarded to the list's owners.
    Unrecognised,
}

impl Verdict {
    /// The failure that concerns `member` (the address the copy went to): the one naming it, else
    /// the most serious one (the VERP token names the copy even when the report names the
    /// address it was forwarded to).
    pub fn for_member(&self, member: &str) -> Option<&Failure> {
        let Verdict::Bounce { failures, .. } = self else { return None };
        failures
            .iter()
            .find(|f| f.final_recipient.as_deref().is_some_and(|r| r.eq_ignore_ascii_case(member)))
            .or_else(|| failures.iter().max_by_key(|f| f.permanence.rank()))
    }
}

/// Recognises a message that arrived at a bounce address.
pub fn recognise(m: &Parsed) -> Verdict {
    let parts = &m.parts[..m.parts.len().min(MAX_PARTS)];
    let mut dsn_failures = Vec::new();
    let mut delivered = false;
    for p in parts.iter().filter(|p| !p.returned && is_delivery_status(&p.content_type)) {
        for block in delivery_status(bounded(&p.text)) {
            delivered |= block
                .action
                .as_deref()
                .is_some_and(|a| ["delivered", "relayed", "expanded"].iter().any(|ok| a.eq_ignore_ascii_case(ok)));
            dsn_failures.extend(block.failure());
        }
    }
    if !dsn_failures.is_empty() {
        // A DSN whose blocks name no recipient still failed for the copy the token names.
        return Verdict::Bounce { dsn: true, failures: dsn_failures };
    }
    if delivered {
        // A DSN of a delivery: its text part says so in words a failure report also uses.
        return Verdict::NoFailure;
    }
    // A DSN whose fields say nothing usable is read as the plain-text report it also is.
    match plain_report(m, parts) {
        Some(f) => Verdict::Bounce { dsn: false, failures: f },
        None => Verdict::Unrecognised,
    }
}

fn is_delivery_status(ct: &str) -> bool {
    matches!(ct, "message/delivery-status" | "message/global-delivery-status")
}

fn bounded(s: &str) -> &str {
    if s.len() <= MAX_PART_TEXT {
        return s;
    }
    let mut end = MAX_PART_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// One per-recipient block of a `message/delivery-status` part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RecipientBlock {
    action: Option<String>,
    status: Option<String>,
    final_recipient: Option<String>,
    original_recipient: Option<String>,
    diagnostic: Option<String>,
}

impl RecipientBlock {
    fn is_empty(&self) -> bool {
        self.action.is_none() && self.status.is_none() && self.final_recipient.is_none() && self.diagnostic.is_none()
    }

    fn failure(self) -> Option<Failure> {
        let action = self.action.as_deref().map(str::to_ascii_lowercase);
        let class = self.status.as_deref().and_then(|s| s.chars().next());
        let permanence = match (action.as_deref(), class) {
            (Some("failed"), _) => Permanence::Permanent,
            (Some("delayed"), _) => Permanence::Temporary,
            (Some("delivered" | "relayed" | "expanded"), _) => return None,
            (_, Some('5')) => Permanence::Permanent,
            (_, Some('4')) => Permanence::Temporary,
            _ => return None,
        };
        Some(Failure {
            permanence,
            action,
            status: self.status,
            final_recipient: self.final_recipient.or(self.original_recipient),
            diagnostic: self.diagnostic,
        })
    }
}

/// The RFC 3464 fields: header-like lines with continuations, blocks separated by blank lines
/// (the first block is per message). A recipient block is also closed by a second
/// `Final-Recipient` (reports written without their blank lines).
fn delivery_status(text: &str) -> Vec<RecipientBlock> {
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut blocks = Vec::new();
    let mut current = RecipientBlock::default();
    let flush = |current: &mut RecipientBlock, blocks: &mut Vec<RecipientBlock>| {
        if !current.is_empty() {
            blocks.push(std::mem::take(current));
        }
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            fields.push((String::new(), String::new()));
        } else if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = fields.last_mut() {
                v.push(' ');
                v.push_str(line.trim());
            }
        } else if let Some((k, v)) = line.split_once(':') {
            fields.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    for (k, v) in fields {
        match k.as_str() {
            "" => flush(&mut current, &mut blocks),
            "final-recipient" => {
                if current.final_recipient.is_some() {
                    flush(&mut current, &mut blocks);
                }
                current.final_recipient = address_of_field(&v);
            }
            "original-recipient" => current.original_recipient = address_of_field(&v),
            "action" => current.action = Some(v),
            "status" => current.status = STATUS.find(&v).map(|m| m.as_str().to_owned()).or(Some(v)),
            "diagnostic-code" => {
                current.diagnostic = Some(v.split_once(';').map_or(v.as_str(), |(_, d)| d).trim().to_owned())
            }
            _ => {}
        }
    }
    flush(&mut current, &mut blocks);
    blocks
}

/// `rfc822; user@example.org` (or `<user@example.org>`) -> `user@example.org`.
fn address_of_field(v: &str) -> Option<String> {
    let addr = v.split_once(';').map_or(v, |(_, a)| a).trim();
    let addr = addr.trim_start_matches('<').trim_end_matches('>').trim();
    (!addr.is_empty()).then(|| addr.to_owned())
}

static STATUS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b[245]\.\d{1,3}\.\d{1,3}\b").expect("status pattern"));
static REPLY_CODE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?:^|[\s:(\[#"'])([45][0-5]\d)(?:[\s\-.]|$)"#).expect("reply code pattern"));
static ADDRESS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+")
        .expect("address pattern")
});

/// Who sends bounces.
const BOUNCE_SENDERS: &[&str] = &["mailer-daemon", "postmaster", "mail delivery", "mail-daemon", "mdaemon", "nobody@"];

/// Subjects of bounces, lowercased.
const BOUNCE_SUBJECTS: &[&str] = &[
    "undeliver",
    "delivery status notification",
    "delivery failure",
    "delivery failed",
    "delivery has failed",
    "failure notice",
    "returned mail",
    "returned to sender",
    "mail delivery failed",
    "mail error",
    "nondeliverable",
    "non-deliverable",
    "non delivery",
    "could not be delivered",
    "delivery problem",
    "warning: could not send",
    "delivery notification",
    "message not delivered",
    "mail system error",
    "not delivered",
    "delivery report",
    "delayed mail",
    "delivery delay",
    "failed mail",
    "mail failed",
    "mail failure",
    "undelivered",
];

/// Lines that say a delivery failed for good, lowercased.
const FAILED: &[&str] = &[
    "user unknown",
    "unknown user",
    "no such user",
    "no such mailbox",
    "no such recipient",
    "no such address",
    "does not exist",
    "doesn't exist",
    "not exist",
    "invalid recipient",
    "invalid address",
    "invalid mailbox",
    "unknown recipient",
    "unknown address",
    "recipient unknown",
    "mailbox unavailable",
    "mailbox not found",
    "mailbox is disabled",
    "account has been disabled",
    "account is disabled",
    "account disabled",
    "account expired",
    "not a valid user",
    "not a valid recipient",
    "is not a valid",
    "unrouteable address",
    "address rejected",
    "recipient rejected",
    "rejected your message",
    "could not be delivered",
    "couldn't be delivered",
    "cannot be delivered",
    "can not be delivered",
    "was not delivered",
    "wasn't able to deliver",
    "unable to deliver",
    "delivery has failed",
    "delivery failed",
    "delivery to the following recipient",
    "permanent error",
    "permanent failure",
    "permanently",
    "fatal error",
    "undeliverable",
    "not deliverable",
    "failed after",
    "i've given up",
    "not going to try again",
    "exceeded maximum delivery attempts",
    "too many hops",
    "host unknown",
    "domain not found",
    "no mailbox here",
    "not listed in",
    "following address(es) failed",
    "following addresses had permanent",
    "returned to sender",
    "bad destination",
    "message could not be delivered",
    "not delivered",
    "did not reach",
    "not recognized",
    "did not exactly match",
    "does not have a final",
    "could not be reached",
    "could not find a gateway",
    "was aborted",
    "no valid recipients",
    "unknown host",
    "invalid final delivery",
    "delivery problems",
    "user not known",
    "not accepted",
    "is unavailable",
    "user not found",
    "no matches to nameserver",
    "mailbox is full",
    "mailbox full",
    "quota exceeded",
    "over quota",
    "overquota",
    "disk quota",
    "space not enough",
    "recipients failed",
    "not able to deliver",
    "encountered an error",
    "mail has been returned",
    "error-for:",
    "not been delivered",
    "no longer valid",
    "exceeding their quota",
];

/// Lines that say a delivery is late and still tried: temporary. (A full mailbox the MTA gave up
/// on is a failure, as flufl.bounce's own test data count it.)
const WARNINGS: &[&str] = &[
    "not yet been delivered",
    "has not been delivered yet",
    "will continue",
    "will be retried",
    "will retry",
    "still trying",
    "delayed",
    "delivery delay",
    "no action is required",
    "warning: message",
    "this is a warning",
    "is only a warning",
    "temporarily",
];

/// Addresses that are the reporting system's own, not the failed recipient's.
fn is_system_address(a: &str) -> bool {
    let l = a.to_ascii_lowercase();
    ["mailer-daemon@", "postmaster@", "mail-daemon@", "-bounces", "-admin@", "-owner@"].iter().any(|s| l.contains(s))
}

/// A report in plain text (the MTAs' and the providers' formats).
fn plain_report(m: &Parsed, parts: &[Part]) -> Option<Vec<Failure>> {
    let from = m.from.to_ascii_lowercase();
    let subject = m.subject.to_ascii_lowercase();
    let bounce_sender = BOUNCE_SENDERS.iter().any(|s| from.contains(s));
    let bounce_subject = BOUNCE_SUBJECTS.iter().any(|s| subject.contains(s));
    let mut failed_line: Option<String> = None;
    let mut warning = false;
    let mut permanent_phrase = false;
    let mut status: Option<String> = None;
    let mut addresses: Vec<String> = Vec::new();
    for p in parts.iter().filter(|p| !p.returned && p.content_type.starts_with("text/")) {
        let lines: Vec<&str> = bounded(&p.text).lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let l = line.to_ascii_lowercase();
            if l.starts_with("--- below this line")
                || l.starts_with("--- original message")
                || l.starts_with("------ this is a copy")
                || l.starts_with("----- original message")
                || l.starts_with("   ----- original message")
                || l.contains("original message follows")
                || l.starts_with("---- header of the source mail")
            {
                break;
            }
            let code = STATUS
                .find(line)
                .filter(|m| !m.as_str().starts_with('2'))
                .map(|m| m.as_str().to_owned())
                .or_else(|| REPLY_CODE.captures(line).map(|c| c[1].to_owned()));
            let phrase = FAILED.iter().any(|f| l.contains(f));
            let warns = WARNINGS.iter().any(|w| l.contains(w));
            warning |= warns;
            if phrase && !warns {
                permanent_phrase = true;
            }
            if code.is_some() || phrase || warns {
                if status.is_none() {
                    status = code.clone();
                }
                if failed_line.is_none() || (code.is_some() && failed_line.as_deref().is_some_and(|f| !has_code(f))) {
                    failed_line = Some(line.trim().chars().take(500).collect());
                }
                // The failed address is on this line or the next few.
                for near in lines.iter().skip(i).take(4) {
                    for a in ADDRESS.find_iter(near) {
                        let a = a.as_str().to_owned();
                        if !is_system_address(&a) && !addresses.iter().any(|x| x.eq_ignore_ascii_case(&a)) {
                            addresses.push(a);
                        }
                    }
                }
            } else if l.trim_start().starts_with('<') && l.trim_end().ends_with(">:") {
                // qmail and Yahoo: `<user@example.org>:` then the reason.
                for a in ADDRESS.find_iter(line) {
                    let a = a.as_str().to_owned();
                    if !is_system_address(&a) && !addresses.iter().any(|x| x.eq_ignore_ascii_case(&a)) {
                        addresses.push(a);
                    }
                }
            }
        }
    }
    // A mailer-daemon listing addresses in qmail's form (`<user@example.org>:`) without a reason
    // we can read (a language we have no phrases of) is reporting failures all the same.
    let failed_line = match failed_line {
        Some(l) => l,
        None if bounce_sender && !addresses.is_empty() => {
            permanent_phrase = true;
            "(the report gives no reason in a language we read)".to_owned()
        }
        None => return None,
    };
    let bounce = bounce_sender || bounce_subject || permanent_phrase;
    if !bounce {
        return None;
    }
    let code_class = status.as_deref().and_then(|s| s.chars().next());
    let permanence = if permanent_phrase && !warning {
        Permanence::Permanent
    } else if warning && !matches!(code_class, Some('5')) {
        Permanence::Temporary
    } else if matches!(code_class, Some('5')) || permanent_phrase {
        Permanence::Permanent
    } else if matches!(code_class, Some('4')) {
        Permanence::Temporary
    } else {
        return None;
    };
    let failure = |addr: Option<String>| Failure {
        permanence,
        action: None,
        status: status.clone(),
        final_recipient: addr,
        diagnostic: Some(failed_line.clone()),
    };
    Some(if addresses.is_empty() {
        vec![failure(None)]
    } else {
        addresses.into_iter().map(|a| failure(Some(a))).collect()
    })
}

fn has_code(line: &str) -> bool {
    STATUS.is_match(line) || REPLY_CODE.is_match(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dsn(fields: &str) -> Parsed {
        Parsed {
            from: "MAILER-DAEMON@mx.example.net".into(),
            subject: "Undelivered Mail Returned to Sender".into(),
            auto_submitted: Some("auto-replied".into()),
            parts: vec![
                Part { content_type: "text/plain".into(), text: "Sorry.".into(), returned: false },
                Part { content_type: "message/delivery-status".into(), text: fields.into(), returned: false },
                Part { content_type: "text/rfc822-headers".into(), text: "Subject: 550 5.1.1".into(), returned: true },
            ],
        }
    }

    #[test]
    fn a_dsn_gives_each_recipient_its_action_status_and_diagnostic() {
        let v = recognise(&dsn("Reporting-MTA: dns; mx.example.net\n\nFinal-Recipient: rfc822; ann@example.org\n\
             Action: failed\nStatus: 5.1.1\nDiagnostic-Code: smtp; 550 5.1.1 <ann@example.org>: Recipient\n  address rejected\n\n\
             Final-Recipient: rfc822;bob@example.org\nAction: delayed\nStatus: 4.4.1\n"));
        let Verdict::Bounce { dsn: true, failures } = &v else { panic!("{v:?}") };
        assert_eq!(failures.len(), 2);
        assert_eq!(failures[0].permanence, Permanence::Permanent);
        assert_eq!(failures[0].status.as_deref(), Some("5.1.1"));
        assert_eq!(failures[0].final_recipient.as_deref(), Some("ann@example.org"));
        assert_eq!(failures[0].diagnostic.as_deref(), Some("550 5.1.1 <ann@example.org>: Recipient address rejected"));
        assert_eq!(failures[1].permanence, Permanence::Temporary);
        assert_eq!(v.for_member("BOB@example.org").unwrap().status.as_deref(), Some("4.4.1"));
        assert_eq!(
            v.for_member("carol@example.org").unwrap().permanence,
            Permanence::Permanent,
            "forwarded: the worst"
        );
    }

    #[test]
    fn a_dsn_of_a_delivery_is_no_failure() {
        let v = recognise(&dsn("Final-Recipient: rfc822; ann@example.org\nAction: delivered\nStatus: 2.0.0\n"));
        assert_eq!(v, Verdict::NoFailure);
    }

    #[test]
    fn a_plain_text_report_with_a_550_line_is_a_permanent_bounce() {
        let m = Parsed {
            from: "Mail Delivery Subsystem <mailer-daemon@googlemail.com>".into(),
            subject: "Delivery Status Notification (Failure)".into(),
            auto_submitted: None,
            parts: vec![Part {
                content_type: "text/plain".into(),
                text: "The response from the remote server was:\n550 5.1.1 The email account that you tried to reach does not exist.".into(),
                returned: false,
            }],
        };
        let Verdict::Bounce { dsn: false, failures } = recognise(&m) else { panic!() };
        assert_eq!(failures[0].permanence, Permanence::Permanent);
        assert_eq!(failures[0].status.as_deref(), Some("5.1.1"));
    }

    #[test]
    fn a_vacation_reply_or_a_person_writing_is_unrecognised() {
        let m = Parsed {
            from: "ann@example.org".into(),
            subject: "Out of office".into(),
            auto_submitted: Some("auto-replied".into()),
            parts: vec![Part { content_type: "text/plain".into(), text: "I am away.".into(), returned: false }],
        };
        assert_eq!(recognise(&m), Verdict::Unrecognised);
        let m = Parsed {
            from: "ann@example.org".into(),
            subject: "Re: your post".into(),
            auto_submitted: None,
            parts: vec![Part {
                content_type: "text/plain".into(),
                text: "Thanks, see 550 pages.".into(),
                returned: false,
            }],
        };
        assert_eq!(recognise(&m), Verdict::Unrecognised);
    }

    #[test]
    fn failure_lines_in_the_returned_original_are_not_read() {
        let m = Parsed {
            from: "mailer-daemon@example.net".into(),
            subject: "hello".into(),
            auto_submitted: None,
            parts: vec![Part {
                content_type: "text/plain".into(),
                text: "550 5.1.1 user unknown".into(),
                returned: true,
            }],
        };
        assert_eq!(recognise(&m), Verdict::Unrecognised);
    }
}
