//! One recipient's copy of a list message: a real RFC 5322 message with the list headers of
//! RFC 2369/2919, one-click unsubscription (RFC 8058), footers, and a VERP return path that names
//! the copy, so that a bounce names its member.

use super::model::{MailingList, ReplyTo, SendRecord};
use crate::kernel::mail::{encode_header_text, quoted_printable, rfc5322_date};
use crate::kernel::{EmailAddress, OutgoingMessage, Timestamp, secrets};
use std::fmt::Write as _;

pub struct Copy<'a> {
    pub list: &'a MailingList,
    pub send: &'a SendRecord,
    pub copy_id: i64,
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

/// The return path of a copy: `news-bounces+{copy}@example.org`.
pub fn verp(list: &MailingList, copy_id: i64) -> Option<EmailAddress> {
    EmailAddress::parse(&format!("{}-bounces+{copy_id}@{}", list.name, list.domain)).ok()
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
        envelope_from: verp(list, c.copy_id),
        recipients: vec![c.recipient.clone()],
        data: h.into_bytes(),
    }
}

/// What happens to a post's `From` (DMARC mitigation, decided by the delivery worker from the
/// poster's `_dmarc` policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromHandling {
    /// The poster's `From` goes out as it came.
    Keep,
    /// `"Poster via List" <list address>`, the poster in `Reply-To`: the poster's domain publishes
    /// `p=reject` or `p=quarantine`, so a copy signed by the list's domain would fail its DMARC.
    Munge,
}

/// Nested multiparts deeper than this are kept as one opaque part.
const MAX_MIME_DEPTH: usize = 32;

/// A post's copy made once per send and delivery round: every header but the recipient's own
/// (`List-Unsubscribe`), and the body rebuilt from the parsed post with mail-builder (its MIME
/// structure and attachments kept, the footer added). Each copy is these bytes with its
/// unsubscription link spliced in.
#[derive(Debug, Clone)]
pub struct PostTemplate {
    head: Vec<u8>,
    body: Vec<u8>,
}

/// Writes `Name: value` through mail-builder's header encoders (RFC 2047 words, folding, CRLF).
fn put(out: &mut Vec<u8>, name: &str, value: impl Into<mail_builder::headers::HeaderType<'static>>) {
    use mail_builder::headers::Header as _;
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    value.into().write_header(out, name.len() + 2);
}

fn owned_address(a: &mail_parser::Addr<'_>) -> Option<mail_builder::headers::address::Address<'static>> {
    let email = a.address()?.trim().to_owned();
    let name = a.name().map(|n| n.chars().filter(|c| !c.is_control()).collect::<String>()).filter(|n| !n.is_empty());
    Some(mail_builder::headers::address::Address::new_address(name, email))
}

fn address_list(a: Option<&mail_parser::Address<'_>>) -> Option<mail_builder::headers::address::Address<'static>> {
    let items: Vec<_> = a?.iter().filter_map(owned_address).collect();
    (!items.is_empty()).then(|| mail_builder::headers::address::Address::new_list(items))
}

/// The post's MIME tree, rebuilt part by part from what mail-parser decoded: text parts as
/// UTF-8 text, the rest as their bytes, names, dispositions and Content-IDs kept.
fn rebuild(
    m: &mail_parser::Message<'_>,
    part: &mail_parser::MessagePart<'_>,
    depth: usize,
) -> mail_builder::mime::MimePart<'static> {
    use mail_builder::headers::content_type::ContentType;
    use mail_builder::mime::{BodyPart, MimePart};
    use mail_parser::{MimeHeaders, PartType};
    let (ctype, attributes): (String, Vec<(String, String)>) = match part.content_type() {
        Some(ct) => (
            match ct.subtype() {
                Some(sub) => format!("{}/{}", ct.ctype(), sub),
                None => ct.ctype().to_owned(),
            }
            .to_ascii_lowercase(),
            ct.attributes()
                .unwrap_or_default()
                .iter()
                .filter(|a| !a.name.eq_ignore_ascii_case("boundary") && !a.name.eq_ignore_ascii_case("charset"))
                .map(|a| (a.name.to_string(), a.value.to_string()))
                .collect(),
        ),
        None => (String::new(), Vec::new()),
    };
    let content_type = |default: &str, text: bool| {
        let mut ct = ContentType::new(if ctype.is_empty() { default.to_owned() } else { ctype.clone() });
        for (k, v) in &attributes {
            ct = ct.attribute(k.clone(), v.clone());
        }
        if text {
            ct = ct.attribute("charset", "utf-8");
        }
        ct
    };
    let mut out = match &part.body {
        PartType::Text(t) => MimePart::new(content_type("text/plain", true), BodyPart::Text(t.to_string().into())),
        PartType::Html(t) => MimePart::new(content_type("text/html", true), BodyPart::Text(t.to_string().into())),
        PartType::Binary(b) | PartType::InlineBinary(b) => {
            MimePart::new(content_type("application/octet-stream", false), BodyPart::Binary(b.to_vec().into()))
        }
        PartType::Message(_) => {
            // An attached message goes as it came (RFC 2046 5.2.1: no base64 for message/rfc822).
            let raw = m.raw_message.get(part.offset_body as usize..part.offset_end as usize).unwrap_or_default();
            MimePart::new(content_type("message/rfc822", false), BodyPart::Binary(raw.to_vec().into()))
                .transfer_encoding("8bit")
        }
        PartType::Multipart(ids) if depth < MAX_MIME_DEPTH => {
            let children =
                ids.iter().filter_map(|id| m.parts.get(*id as usize)).map(|p| rebuild(m, p, depth + 1)).collect();
            MimePart::new(content_type("multipart/mixed", false), BodyPart::Multipart(children))
        }
        PartType::Multipart(_) => {
            let raw = m.raw_message.get(part.offset_body as usize..part.offset_end as usize).unwrap_or_default();
            MimePart::new(ContentType::new("application/octet-stream"), BodyPart::Binary(raw.to_vec().into()))
        }
    };
    if let Some(d) = part.content_disposition() {
        let mut cd = ContentType::new(d.ctype().to_ascii_lowercase());
        if let Some(name) = part.attachment_name() {
            cd = cd.attribute("filename", name.to_owned());
        }
        out = out.header("Content-Disposition", cd);
    } else if let Some(name) = part.attachment_name() {
        out = out.header("Content-Disposition", ContentType::new("attachment").attribute("filename", name.to_owned()));
    }
    if let Some(id) = part.content_id() {
        out = out.cid(id.trim_start_matches('<').trim_end_matches('>').to_owned());
    }
    out
}

/// The body with the list's footer: appended to a single text part, else as a text/plain part
/// at the end of a multipart/mixed (the post's own tree inside it when it was not mixed).
fn with_post_footer(
    root: mail_builder::mime::MimePart<'static>,
    footer_text: Option<&str>,
    footer_html: Option<&str>,
) -> mail_builder::mime::MimePart<'static> {
    use mail_builder::mime::{BodyPart, MimePart};
    let (Some(text_footer), html_footer) =
        (footer_text.filter(|f| !f.is_empty()), footer_html.filter(|f| !f.is_empty()))
    else {
        return root;
    };
    let ctype = root.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("Content-Type")).and_then(|(_, v)| match v {
        mail_builder::headers::HeaderType::ContentType(ct) => Some(ct.c_type.to_string()),
        _ => None,
    });
    let attachment = root.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("Content-Disposition"));
    let footer = || MimePart::new("text/plain", BodyPart::Text(text_footer.to_owned().into())).inline();
    match (ctype.as_deref(), root.contents) {
        (Some("text/plain"), BodyPart::Text(t)) if !attachment => {
            let mut part =
                MimePart::new("text/plain", BodyPart::Text(format!("{}\n\n-- \n{text_footer}", t.trim_end()).into()));
            part.headers.retain(|(n, _)| n.eq_ignore_ascii_case("Content-Type"));
            part
        }
        (Some("text/html"), BodyPart::Text(t)) if !attachment && html_footer.is_some() => {
            MimePart::new("text/html", BodyPart::Text(format!("{t}\n<hr>\n{}", html_footer.unwrap_or_default()).into()))
        }
        (Some("multipart/mixed"), BodyPart::Multipart(mut children)) => {
            children.push(footer());
            MimePart { headers: root.headers, contents: BodyPart::Multipart(children) }
        }
        (_, contents) => MimePart::new(
            "multipart/mixed",
            BodyPart::Multipart(vec![MimePart { headers: root.headers, contents }, footer()]),
        ),
    }
}

/// Prepares the copies of a send made from a post. `None` when the stored post does not parse
/// (the send's text then goes out as an ordinary copy).
pub fn post_template(
    list: &MailingList,
    send: &SendRecord,
    raw: &[u8],
    from: FromHandling,
    now: Timestamp,
) -> Option<PostTemplate> {
    use mail_builder::headers::{address::Address, message_id::MessageId, raw::Raw, text::Text};
    let m = mail_parser::MessageParser::default().parse(raw)?;
    let p = &list.policies;
    let address = list.address();
    let poster = m.from().and_then(|a| a.first()).and_then(owned_address);
    let mut h: Vec<u8> = Vec::with_capacity(1024);
    match (from, &poster) {
        (FromHandling::Munge, Some(Address::Address(a))) => {
            let who = a.name.as_deref().unwrap_or(a.email.as_ref()).to_owned();
            put(
                &mut h,
                "From",
                Address::new_address(Some(format!("{who} via {}", list.display_name)), address.clone()),
            );
        }
        (_, Some(a)) => put(&mut h, "From", a.clone()),
        (_, None) => put(&mut h, "From", Address::new_address(Some(list.display_name.clone()), address.clone())),
    }
    put(&mut h, "To", address_list(m.to()).unwrap_or_else(|| Address::new_address(None::<String>, address.clone())));
    if let Some(cc) = address_list(m.cc()) {
        put(&mut h, "Cc", cc);
    }
    put(&mut h, "Subject", Text::new(tagged_subject(p.subject_tag.as_deref(), &send.subject)));
    let date = m.date().map(|d| d.to_rfc822()).unwrap_or_else(|| rfc5322_date(now));
    put(&mut h, "Date", Raw::new(date));
    put(&mut h, "Message-ID", MessageId::new(send.message_id.clone()));
    for (name, value) in [("In-Reply-To", m.in_reply_to()), ("References", m.references())] {
        let ids: Vec<String> = match value {
            mail_parser::HeaderValue::Text(t) => vec![t.to_string()],
            mail_parser::HeaderValue::TextList(l) => l.iter().map(ToString::to_string).collect(),
            _ => Vec::new(),
        };
        let ids: Vec<String> =
            ids.into_iter().filter(|i| !i.is_empty() && !i.chars().any(char::is_control)).take(100).collect();
        if !ids.is_empty() {
            put(&mut h, name, MessageId::new_list(ids.into_iter()));
        }
    }
    let mut reply_to: Vec<Address<'static>> = Vec::new();
    if p.reply_to == ReplyTo::List {
        reply_to.push(Address::new_address(None::<String>, address.clone()));
    } else if let Some(Address::List(items)) = address_list(m.reply_to()) {
        reply_to.extend(items);
    }
    if from == FromHandling::Munge
        && let Some(a) = &poster
    {
        reply_to.push(a.clone());
    }
    if !reply_to.is_empty() {
        put(&mut h, "Reply-To", Address::new_list(reply_to));
    }
    let id = mailbox(&list.display_name, &format!("{}.{}", list.name, list.domain)).replace('"', "");
    let _ = write!(Lines(&mut h), "List-Id: {id}\r\n");
    let post = match list.kind {
        super::model::ListKind::Announce => "NO".to_owned(),
        super::model::ListKind::Discussion => format!("<mailto:{address}>"),
    };
    let _ = write!(Lines(&mut h), "List-Post: {post}\r\n");
    let _ = write!(Lines(&mut h), "List-Help: <mailto:{}-request@{}?subject=help>\r\n", list.name, list.domain);
    let _ = write!(Lines(&mut h), "X-BeenThere: {address}\r\nPrecedence: list\r\nMIME-Version: 1.0\r\n");
    let root = rebuild(&m, m.root_part(), 0);
    let root = with_post_footer(root, p.footer_text.as_deref(), p.footer_html.as_deref());
    let mut body = Vec::with_capacity(raw.len() + 1024);
    root.write_part(&mut body);
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
        copy_id: i64,
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
        OutgoingMessage { envelope_from: verp(list, copy_id), recipients: vec![recipient.clone()], data }
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
            copy_id: 42,
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

    const POST: &str = "From: =?utf-8?q?Ann=C3=A9?= <ann@example.net>\r\nTo: news@example.org\r\n\
        Subject: Re: [news] Minutes\r\nMessage-ID: <p1@example.net>\r\nIn-Reply-To: <p0@example.net>\r\n\
        MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"XX\"\r\n\r\n\
        --XX\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
        caf=E9 at noon\r\n--XX\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=\"m.pdf\"\r\n\
        Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--XX--\r\n";

    fn post_copy(raw: &str, from: FromHandling) -> String {
        let l = list();
        let send = SendRecord {
            id: SendId::from_stored(7),
            list_id: l.id,
            subject: "Re: [news] Minutes".into(),
            text: None,
            html: None,
            message_id: "p1@example.net".into(),
            state: SendState::Queued,
            recipients: 1,
            created_at: Timestamp::from_unix_secs(0),
            completed_at: None,
        };
        let t = post_template(&l, &send, raw.as_bytes(), from, Timestamp::from_unix_secs(1_795_425_649)).unwrap();
        let to = EmailAddress::parse("bob@example.com").unwrap();
        let m = t.copy(&l, 42, &to, "https://lists.example.org/p/unsubscribe/tok");
        assert_eq!(m.envelope_from.unwrap().to_string(), "news-bounces+42@example.org");
        String::from_utf8(m.data).unwrap()
    }

    #[test]
    fn a_post_copy_keeps_its_attachment_and_gains_the_list_headers_and_footer() {
        let text = post_copy(POST, FromHandling::Keep);
        let parsed = mail_parser::MessageParser::default().parse(text.as_bytes()).unwrap();
        assert_eq!(parsed.subject(), Some("Re: [news] Minutes"), "the tag once");
        assert_eq!(parsed.from().unwrap().first().unwrap().address(), Some("ann@example.net"));
        assert_eq!(parsed.message_id(), Some("p1@example.net"));
        assert_eq!(parsed.attachment_count(), 1, "the PDF (the footer is an inline text part)");
        let pdf = parsed.attachment(0).unwrap();
        assert_eq!(mail_parser::MimeHeaders::attachment_name(pdf), Some("m.pdf"));
        assert_eq!(pdf.contents(), b"%PDF-1.4\n");
        assert!(parsed.body_text(0).unwrap().contains("café at noon"));
        for needle in [
            "List-Id: ",
            "List-Unsubscribe: <mailto:news-unsubscribe@example.org?subject=unsubscribe>, <https://lists.example.org/p/unsubscribe/tok>\r\n",
            "X-BeenThere: news@example.org\r\n",
            "Reply-To: <news@example.org>\r\n",
            "In-Reply-To: <p0@example.net>\r\n",
            "Unsubscribe any time.",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        assert!(!text.replace("\r\n", "").contains('\n'), "CRLF only");
    }

    #[test]
    fn a_single_text_post_gets_its_footer_appended_and_a_munged_from() {
        let raw = "From: Ann <ann@strict.test>\r\nSubject: Hi\r\nMessage-ID: <p1@x>\r\n\r\nHello all\r\n";
        let text = post_copy(raw, FromHandling::Munge);
        let parsed = mail_parser::MessageParser::default().parse(text.as_bytes()).unwrap();
        let from = parsed.from().unwrap().first().unwrap();
        assert_eq!(from.address(), Some("news@example.org"));
        assert_eq!(from.name(), Some("Ann via Nouvelles d'été"));
        let reply: Vec<_> = parsed.reply_to().unwrap().iter().filter_map(|a| a.address()).collect();
        assert_eq!(reply, ["news@example.org", "ann@strict.test"]);
        assert_eq!(parsed.attachment_count(), 0);
        let body = parsed.body_text(0).unwrap().replace("\r\n", "\n");
        assert_eq!(body.trim_end(), "Hello all\n\n-- \nUnsubscribe any time.");
    }

    #[test]
    fn a_reply_keeps_one_tag() {
        assert_eq!(tagged_subject(Some("[news]"), "Re: [news] Hi"), "Re: [news] Hi");
        assert_eq!(tagged_subject(None, "Hi"), "Hi");
    }
}
