//! One recipient's copy of a list message: a real RFC 5322 message with the list headers of
//! RFC 2369/2919, one-click unsubscription (RFC 8058), footers, and a VERP return path that names
//! the copy, so that a bounce names its member. The MIME is written by the MIME port
//! (mail-builder, `adapters/mime.rs`) once per send and round; each copy splices in its own
//! recipient and unsubscription link.

use super::bounces::MimeReader;
use super::model::{ListFields, MailingList, PostCopySpec, RebuiltPost, ReplyTo, SendCopySpec, SendRecord};
use crate::kernel::mail::rfc5322_date;
use crate::kernel::{EmailAddress, OutgoingMessage, Timestamp};
use std::fmt::Write as _;

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

pub use super::model::FromHandling;

/// The list's own header values, owned for the time a template is built.
struct ListValues {
    id: String,
    post: String,
    help: String,
}

impl ListValues {
    fn of(list: &MailingList) -> Self {
        let post = match list.kind {
            super::model::ListKind::Announce => "NO".to_owned(),
            super::model::ListKind::Discussion => format!("<mailto:{}>", list.address()),
        };
        Self {
            id: format!("{}.{}", list.name, list.domain),
            post,
            help: format!("<mailto:{}-request@{}?subject=help>", list.name, list.domain),
        }
    }

    fn fields<'a>(&'a self, list: &'a MailingList) -> ListFields<'a> {
        ListFields { id_name: &list.display_name, id: &self.id, post: &self.post, help: &self.help }
    }
}

/// The copies of one send, made once per send and delivery round by the MIME port: every header
/// but the recipient's own (`To` for an API send, `List-Unsubscribe`), and the body. Each copy is
/// these bytes with its recipient and unsubscription link spliced in.
#[derive(Debug, Clone)]
pub struct CopyTemplate {
    head: Vec<u8>,
    body: Vec<u8>,
    /// An API send is addressed to each member; a post keeps its own `To`.
    to_each: bool,
}

/// Prepares the copies of an API send: its text and HTML with the list's footers, the tagged
/// subject, the list fields.
pub fn send_template(mime: &dyn MimeReader, list: &MailingList, send: &SendRecord, now: Timestamp) -> CopyTemplate {
    let p = &list.policies;
    let address = list.address();
    // A subject is one line: control characters (a CR LF smuggling a header) become spaces.
    let subject: String = tagged_subject(p.subject_tag.as_deref(), &send.subject)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = send.text.as_deref().map(|t| with_footer(t, p.footer_text.as_deref(), "\n\n-- \n"));
    let html = send.html.as_deref().map(|t| with_footer(t, p.footer_html.as_deref(), "\n<hr>\n"));
    let date = rfc5322_date(now);
    let values = ListValues::of(list);
    let spec = SendCopySpec {
        list_address: &address,
        list_display_name: &list.display_name,
        subject: &subject,
        message_id: &send.message_id,
        date: &date,
        reply_to_list: p.reply_to == ReplyTo::List,
        text: text.as_deref(),
        html: html.as_deref(),
        list: values.fields(list),
    };
    let RebuiltPost { head, body } = mime.build_send(&spec);
    CopyTemplate { head, body, to_each: true }
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
) -> Option<CopyTemplate> {
    let p = &list.policies;
    let address = list.address();
    let subject = tagged_subject(p.subject_tag.as_deref(), &send.subject);
    let date = rfc5322_date(now);
    let values = ListValues::of(list);
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
        list: values.fields(list),
    };
    let RebuiltPost { head, body } = mime.rebuild_post(raw, &spec)?;
    Some(CopyTemplate { head, body, to_each: false })
}

/// `fmt::Write` over a byte buffer (header lines are ASCII).
struct Lines<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Lines<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

impl CopyTemplate {
    /// One member's copy: the template with its `To` (an API send), `List-Unsubscribe` and VERP
    /// return path. The spliced values are ASCII: a parsed address, the list's names, a URL of
    /// the installation's with a hex token.
    pub fn copy(
        &self,
        list: &MailingList,
        bounce_token: &str,
        recipient: &EmailAddress,
        unsubscribe_url: &str,
    ) -> OutgoingMessage {
        let mut data = Vec::with_capacity(self.head.len() + self.body.len() + 256);
        data.extend_from_slice(&self.head);
        if self.to_each {
            let _ = write!(Lines(&mut data), "To: {recipient}\r\n");
        }
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

    #[test]
    fn a_reply_keeps_one_tag() {
        assert_eq!(tagged_subject(Some("[news]"), "Re: [news] Hi"), "Re: [news] Hi");
        assert_eq!(tagged_subject(None, "Hi"), "Hi");
    }
}
