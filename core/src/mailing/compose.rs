//! One recipient's copy of a list message: a real RFC 5322 message with the list headers of
//! RFC 2369/2919, one-click unsubscription (RFC 8058), footers, and a VERP return path that names
//! the copy, so that a bounce names its member.

use super::bounces::MimeReader;
use super::model::{MailingList, PostCopySpec, RebuiltPost, ReplyTo, SendRecord};
use crate::kernel::mail::{encode_header_text, quoted_printable, rfc5322_date};
use crate::kernel::{EmailAddress, OutgoingMessage, Timestamp, secrets};
use std::fmt::Write as _;

pub struct Copy<'a> {
    pub list: &'a MailingList,
    pub send: &'a SendRecord,
    /// The copy's VERP token (`bounces::verp_token`), in its return path.
    pub bounce_token: &'a str,
    pub recipient: &'a EmailAddress,
    /// `https://.../p/unsubscribe/{token}`: this copy's one-click link.
    pub unsubscribe_url: &'a str,
    pub now: Timestamp,
}

/// `"Display" <address>`, with an encoded word when the name is not plain ASCII.
fn mailbox(display: &str, address: &str) -> String {
    let plain = display.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
    if plain { format!("\"{display}\" <{address}>") } else { format!("{} <{address}>", encode_header_text(display)) }
}

/// The subject with the list's tag, unless a reply already carries it.
pub fn tagged_subject(tag: Option<&str>, subject: &str) -> String {
    match tag {
        Some(t) if !subject.contains(t) => format!("{t} {subject}"),
        _ => subject.to_owned(),
    }
}

/// The return path of a copy: `news-bounces+{token}@example.org`, the token naming the copy
/// (`bounces::verp_token`: the copy id and its keyed tag).
pub fn verp(list: &MailingList, token: &str) -> Option<EmailAddress> {
    EmailAddress::parse(&format!("{}-bounces+{token}@{}", list.name, list.domain)).ok()
}

pub fn compose(c: &Copy<'_>) -> OutgoingMessage {
    let list = c.list;
    let p = &list.policies;
    let address = list.address();
    let mut h = String::new();
    let _ = write!(h, "From: {}\r\n", mailbox(&list.display_name, &address));
    let _ = write!(h, "To: {}\r\n", c.recipient);
    let subject = tagged_subject(p.subject_tag.as_deref(), &c.send.subject);
    let _ = write!(h, "Subject: {}\r\n", encode_header_text(&subject));
    let _ = write!(h, "Date: {}\r\n", rfc5322_date(c.now));
    let _ = write!(h, "Message-ID: <{}>\r\n", c.send.message_id);
    if p.reply_to == ReplyTo::List {
        let _ = write!(h, "Reply-To: <{address}>\r\n");
    }
    let _ = write!(
        h,
        "List-Id: {}\r\n",
        mailbox(&list.display_name, &format!("{}.{}", list.name, list.domain)).replace('"', "")
    );
    let post = match list.kind {
        super::model::ListKind::Announce => "NO".to_owned(),
        super::model::ListKind::Discussion => format!("<mailto:{address}>"),
    };
    let _ = write!(h, "List-Post: {post}\r\n");
    let _ = write!(h, "List-Help: <mailto:{}-request@{}?subject=help>\r\n", list.name, list.domain);
    let _ = write!(
        h,
        "List-Unsubscribe: <mailto:{}-unsubscribe@{}?subject=unsubscribe>, <{}>\r\n",
        list.name, list.domain, c.unsubscribe_url
    );
    h.push_str("List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n");
    h.push_str("Precedence: list\r\n");
    h.push_str("MIME-Version: 1.0\r\n");
    let text = c.send.text.as_deref().map(|t| with_footer(t, p.footer_text.as_deref(), "\n\n-- \n"));
    let html = c.send.html.as_deref().map(|t| with_footer(t, p.footer_html.as_deref(), "\n<hr>\n"));
    let part = |kind: &str, body: &str| {
        format!(
            "Content-Type: text/{kind}; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n{}",
            quoted_printable(body)
        )
    };
    match (text, html) {
        (Some(t), Some(html)) => {
            let boundary = format!("=_courrier_{}", secrets::random_hex(12));
            let _ = write!(h, "Content-Type: multipart/alternative; boundary=\"{boundary}\"\r\n\r\n");
            let _ = write!(
                h,
                "--{boundary}\r\n{}--{boundary}\r\n{}--{boundary}--\r\n",
                part("plain", &t),
                part("html", &html)
            );
        }
        (Some(t), None) => h.push_str(&part("plain", &t)),
        (None, Some(html)) => h.push_str(&part("html", &html)),
        (None, None) => h.push_str(&part("plain", "")),
    }
    OutgoingMessage {
        envelope_from: verp(list, c.bounce_token),
        recipients: vec![c.recipient.clone()],
        data: h.into_bytes(),
    }
}

pub use super::model::FromHandling;

/// A post's copy made once per send and delivery round: every header but the recipient's own
/// (`List-Unsubscribe`), and the body rebuilt from the post by the MIME port (its MIME structure
/// and attachments kept, the footer added). Each copy is these bytes with its unsubscription link
/// spliced in.
#[derive(Debug, Clone)]
pub struct PostTemplate {
    head: Vec<u8>,
    body: Vec<u8>,
}

/// Prepares the copies of a send made from a post. `None` when the stored post does not parse
/// (the send's text then goes out as an ordinary copy).
pub fn post_template(
    mime: &dyn MimeReader,
    list: &MailingList,
    send: &SendRecord,
    raw: &[u8],
    from: FromHandling,
    now: Timestamp,
) -> Option<PostTemplate> {
    let p = &list.policies;
    let address = list.address();
    let subject = tagged_subject(p.subject_tag.as_deref(), &send.subject);
    let date = rfc5322_date(now);
    let spec = PostCopySpec {
        list_address: &address,
        list_display_name: &list.display_name,
        subject: &subject,
        message_id: &send.message_id,
        date: &date,
        reply_to_list: p.reply_to == ReplyTo::List,
        from,
        footer_text: p.footer_text.as_deref(),
        footer_html: p.footer_html.as_deref(),
    };
    let RebuiltPost { head: mut h, body } = mime.rebuild_post(raw, &spec)?;
    let id = mailbox(&list.display_name, &format!("{}.{}", list.name, list.domain)).replace('"', "");
    let _ = write!(Lines(&mut h), "List-Id: {id}\r\n");
    let post = match list.kind {
        super::model::ListKind::Announce => "NO".to_owned(),
        super::model::ListKind::Discussion => format!("<mailto:{address}>"),
    };
    let _ = write!(Lines(&mut h), "List-Post: {post}\r\n");
    let _ = write!(Lines(&mut h), "List-Help: <mailto:{}-request@{}?subject=help>\r\n", list.name, list.domain);
    let _ = write!(Lines(&mut h), "X-BeenThere: {address}\r\nPrecedence: list\r\nMIME-Version: 1.0\r\n");
    Some(PostTemplate { head: h, body })
}

/// `fmt::Write` over a byte buffer (header lines are ASCII).
struct Lines<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Lines<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl PostTemplate {
    /// One member's copy: the template with its `List-Unsubscribe` and VERP return path.
    pub fn copy(
        &self,
        list: &MailingList,
        bounce_token: &str,
        recipient: &EmailAddress,
        unsubscribe_url: &str,
    ) -> OutgoingMessage {
        let mut data = Vec::with_capacity(self.head.len() + self.body.len() + 256);
        data.extend_from_slice(&self.head);
        let _ = write!(
            Lines(&mut data),
            "List-Unsubscribe: <mailto:{}-unsubscribe@{}?subject=unsubscribe>, <{unsubscribe_url}>\r\n\
             List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n",
            list.name,
            list.domain
        );
        data.extend_from_slice(&self.body);
        OutgoingMessage { envelope_from: verp(list, bounce_token), recipients: vec![recipient.clone()], data }
    }
}

fn with_footer(body: &str, footer: Option<&str>, separator: &str) -> String {
    match footer {
        Some(f) if !f.is_empty() => format!("{body}{separator}{f}"),
        _ => body.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{DomainName, ListName};
    use crate::mailing::model::*;

    fn list() -> MailingList {
        let t = Timestamp::from_unix_secs(1_795_425_649);
        let mut policies = ListPolicies::defaults(SubscriptionPolicy::Open, ListKind::Discussion);
        policies.subject_tag = Some("[news]".into());
        policies.footer_text = Some("Unsubscribe any time.".into());
        MailingList {
            id: ListId::from_stored(1),
            domain_id: DomainId::from_stored(1),
            domain: DomainName::parse("example.org").unwrap(),
            name: ListName::parse("news").unwrap(),
            display_name: "Nouvelles d'été".into(),
            kind: ListKind::Discussion,
            status: ListStatus::Active,
            send_suspended: false,
            policies,
            created_at: t,
            updated_at: t,
        }
    }

    #[test]
    fn a_copy_carries_the_list_headers_and_both_parts() {
        let l = list();
        let send = SendRecord {
            id: SendId::from_stored(7),
            list_id: l.id,
            subject: "Hello\r\nBcc: evil@x.org".into(),
            text: Some("Hi all".into()),
            html: Some("<p>Hi all</p>".into()),
            message_id: "abc@example.org".into(),
            state: SendState::Queued,
            recipients: 1,
            created_at: Timestamp::from_unix_secs(0),
            completed_at: None,
        };
        let to = EmailAddress::parse("ann@example.net").unwrap();
        let m = compose(&super::Copy {
            list: &l,
            send: &send,
            bounce_token: "42",
            recipient: &to,
            unsubscribe_url: "https://lists.example.org/p/unsubscribe/tok",
            now: Timestamp::from_unix_secs(1_795_425_649),
        });
        let text = String::from_utf8(m.data).unwrap();
        assert!(text.is_ascii());
        for needle in [
            "List-Id: =?utf-8?B?",
            "List-Post: <mailto:news@example.org>\r\n",
            "List-Unsubscribe: <mailto:news-unsubscribe@example.org?subject=unsubscribe>, <https://lists.example.org/p/unsubscribe/tok>\r\n",
            "List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n",
            "Precedence: list\r\n",
            "Message-ID: <abc@example.org>\r\n",
            "Subject: [news] Hello  Bcc: evil@x.org\r\n",
            "multipart/alternative",
            "Unsubscribe any time.",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        assert!(!text.contains("\r\nBcc:"), "no header injection");
        assert_eq!(m.envelope_from.unwrap().to_string(), "news-bounces+42@example.org");
        assert_eq!(m.recipients, vec![to]);
    }

    #[test]
    fn a_reply_keeps_one_tag() {
        assert_eq!(tagged_subject(Some("[news]"), "Re: [news] Hi"), "Re: [news] Hi");
        assert_eq!(tagged_subject(None, "Hi"), "Hi");
    }
}
