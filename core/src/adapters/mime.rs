//! `MimeReader` over mail-parser and mail-builder: a received message flattened into the parts
//! bounce recognition reads (`mailing::bounces::recognise::Parsed`), read for the post, request
//! and moderation rules (`mailing::model::ReadMail`, header fields, first text), and a post
//! rebuilt for its copies (`mailing::model::RebuiltPost`). mail-parser never panics on input; a
//! message without headers is `None`.

use crate::mailing::bounces::MimeReader;
use crate::mailing::bounces::recognise::{MAX_PART_TEXT, MAX_PARTS, Parsed, Part};
use crate::mailing::model::{FromHandling, HeaderField, ListFields, PostCopySpec, ReadMail, RebuiltPost, SendCopySpec};
use mail_builder::headers::address::Address;
use mail_builder::headers::content_type::ContentType;
use mail_builder::headers::{HeaderType, message_id::MessageId, raw::Raw, text::Text};
use mail_builder::mime::{BodyPart, MimePart};
use mail_parser::{Message, MessageParser, MimeHeaders, PartType};

/// Nested messages are followed this deep (a bounce of a bounce of a digest...).
const MAX_DEPTH: usize = 4;

#[derive(Debug, Clone, Copy, Default)]
pub struct MailParserReader;

impl MimeReader for MailParserReader {
    fn read(&self, raw: &[u8]) -> Option<Parsed> {
        let message = MessageParser::default().parse(raw)?;
        let from = message
            .from()
            .and_then(|a| a.first())
            .map(|a| format!("{} <{}>", a.name().unwrap_or(""), a.address().unwrap_or("")))
            .unwrap_or_default();
        let auto_submitted = message.header_raw("Auto-Submitted").map(|v| v.trim().to_ascii_lowercase());
        let mut parsed =
            Parsed { from, subject: message.subject().unwrap_or("").to_owned(), auto_submitted, parts: Vec::new() };
        flatten(&message, false, 0, &mut parsed.parts);
        Some(parsed)
    }

    fn read_mail(&self, raw: &[u8]) -> Option<ReadMail> {
        let m = MessageParser::default().parse(raw)?;
        let first = m.from().and_then(|a| a.first());
        let html = if m.html_body_count() > 0 && m.html_part(0).is_some_and(|p| p.is_text_html()) {
            m.body_html(0).map(|t| t.into_owned())
        } else {
            None
        };
        Some(ReadMail {
            from_address: first.and_then(|a| a.address()).map(str::to_owned),
            from_name: first.and_then(|a| a.name()).map(str::to_owned),
            subject: m.subject().map(str::to_owned),
            message_id: m.message_id().map(str::to_owned),
            text: m.body_text(0).map(|t| t.into_owned()),
            html,
            headers: fields(&m, raw),
            auto_submitted: m.header_raw("Auto-Submitted").map(str::to_owned),
            precedence: m.header_raw("Precedence").map(str::to_owned),
        })
    }

    fn header_fields(&self, raw: &[u8]) -> Vec<HeaderField> {
        MessageParser::default().parse_headers(raw).map(|m| fields(&m, raw)).unwrap_or_default()
    }

    fn first_text(&self, raw: &[u8]) -> Option<String> {
        let m = MessageParser::default().parse(raw)?;
        let part = m.text_part(0).or_else(|| m.html_part(0))?;
        part.text_contents().map(str::to_owned)
    }

    fn rebuild_post(&self, raw: &[u8], spec: &PostCopySpec<'_>) -> Option<RebuiltPost> {
        let m = MessageParser::default().parse(raw)?;
        let address = spec.list_address.to_owned();
        let poster = m.from().and_then(|a| a.first()).and_then(owned_address);
        let mut h: Vec<u8> = Vec::with_capacity(1024);
        match (spec.from, &poster) {
            (FromHandling::Munge, Some(Address::Address(a))) => {
                let who = a.name.as_deref().unwrap_or(a.email.as_ref()).to_owned();
                put(
                    &mut h,
                    "From",
                    Address::new_address(Some(format!("{who} via {}", spec.list_display_name)), address.clone()),
                );
            }
            (_, Some(a)) => put(&mut h, "From", a.clone()),
            (_, None) => {
                put(&mut h, "From", Address::new_address(Some(spec.list_display_name.to_owned()), address.clone()))
            }
        }
        put(
            &mut h,
            "To",
            address_list(m.to()).unwrap_or_else(|| Address::new_address(None::<String>, address.clone())),
        );
        if let Some(cc) = address_list(m.cc()) {
            put(&mut h, "Cc", cc);
        }
        put(&mut h, "Subject", Text::new(spec.subject.to_owned()));
        let date = m.date().map(|d| d.to_rfc822()).unwrap_or_else(|| spec.date.to_owned());
        put(&mut h, "Date", Raw::new(date));
        put(&mut h, "Message-ID", MessageId::new(spec.message_id.to_owned()));
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
        if spec.reply_to_list {
            reply_to.push(Address::new_address(None::<String>, address.clone()));
        } else if let Some(Address::List(items)) = address_list(m.reply_to()) {
            reply_to.extend(items);
        }
        if spec.from == FromHandling::Munge
            && let Some(a) = &poster
        {
            reply_to.push(a.clone());
        }
        if !reply_to.is_empty() {
            put(&mut h, "Reply-To", Address::new_list(reply_to));
        }
        list_fields(&mut h, &spec.list);
        put(&mut h, "X-BeenThere", Raw::new(address));
        put(&mut h, "Precedence", Raw::new("list"));
        put(&mut h, "MIME-Version", Raw::new("1.0"));
        let root = rebuild(&m, m.root_part(), 0);
        let root = with_post_footer(root, spec.footer_text, spec.footer_html);
        let mut body = Vec::with_capacity(raw.len() + 1024);
        root.write_part(&mut body);
        Some(RebuiltPost { head: h, body })
    }

    fn build_send(&self, spec: &SendCopySpec<'_>) -> RebuiltPost {
        let address = spec.list_address.to_owned();
        let mut h: Vec<u8> = Vec::with_capacity(1024);
        put(&mut h, "From", Address::new_address(Some(spec.list_display_name.to_owned()), address.clone()));
        put(&mut h, "Subject", Text::new(spec.subject.to_owned()));
        put(&mut h, "Date", Raw::new(spec.date.to_owned()));
        put(&mut h, "Message-ID", MessageId::new(spec.message_id.to_owned()));
        if spec.reply_to_list {
            put(&mut h, "Reply-To", Address::new_address(None::<String>, address));
        }
        list_fields(&mut h, &spec.list);
        put(&mut h, "Precedence", Raw::new("list"));
        put(&mut h, "MIME-Version", Raw::new("1.0"));
        // mail-builder picks each part's transfer encoding (7bit, quoted-printable or base64)
        // from its text: long lines and non-ASCII are encoded.
        let part = |kind: &str, text: &str| {
            MimePart::new(
                ContentType::new(format!("text/{kind}")).attribute("charset", "utf-8"),
                BodyPart::Text(text.to_owned().into()),
            )
        };
        let root = match (spec.text, spec.html) {
            (Some(text), Some(html)) => MimePart::new(
                ContentType::new("multipart/alternative"),
                BodyPart::Multipart(vec![part("plain", text), part("html", html)]),
            ),
            (Some(text), None) => part("plain", text),
            (None, Some(html)) => part("html", html),
            (None, None) => part("plain", ""),
        };
        let mut body = Vec::with_capacity(root.size() + 256);
        root.write_part(&mut body);
        RebuiltPost { head: h, body }
    }
}

/// `List-Id`, `List-Post`, `List-Help` (RFC 2919, RFC 2369).
fn list_fields(h: &mut Vec<u8>, list: &ListFields<'_>) {
    put(h, "List-Id", Address::new_address(Some(list.id_name.to_owned()), list.id.to_owned()));
    put(h, "List-Post", Raw::new(list.post.to_owned()));
    put(h, "List-Help", Raw::new(list.help.to_owned()));
}

/// The top-level header fields: each name and its value as written.
fn fields(m: &Message<'_>, raw: &[u8]) -> Vec<HeaderField> {
    m.headers()
        .iter()
        .map(|h| {
            let value = raw.get(h.offset_start() as usize..h.offset_end() as usize).unwrap_or_default();
            HeaderField { name: h.name().to_owned(), value: String::from_utf8_lossy(value).into_owned() }
        })
        .collect()
}

/// Nested multiparts deeper than this are kept as one opaque part.
const MAX_MIME_DEPTH: usize = 32;

/// Writes `Name: value` through mail-builder's header encoders (RFC 2047 words, folding, CRLF).
fn put(out: &mut Vec<u8>, name: &str, value: impl Into<HeaderType<'static>>) {
    use mail_builder::headers::Header as _;
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    value.into().write_header(out, name.len() + 2);
}

fn owned_address(a: &mail_parser::Addr<'_>) -> Option<Address<'static>> {
    let email = a.address()?.trim().to_owned();
    let name = a.name().map(|n| n.chars().filter(|c| !c.is_control()).collect::<String>()).filter(|n| !n.is_empty());
    Some(Address::new_address(name, email))
}

fn address_list(a: Option<&mail_parser::Address<'_>>) -> Option<Address<'static>> {
    let items: Vec<_> = a?.iter().filter_map(owned_address).collect();
    (!items.is_empty()).then(|| Address::new_list(items))
}

fn flatten(message: &Message<'_>, returned: bool, depth: usize, out: &mut Vec<Part>) {
    for part in &message.parts {
        if out.len() >= MAX_PARTS {
            return;
        }
        let content_type = part
            .content_type()
            .map(|c| format!("{}/{}", c.ctype(), c.subtype().unwrap_or("")).to_ascii_lowercase())
            .unwrap_or_else(|| "text/plain".to_owned());
        let text: String = match &part.body {
            PartType::Multipart(_) => continue,
            PartType::Message(inner) => {
                if depth < MAX_DEPTH {
                    // A report wrapped whole by a gateway is still the report; anything else
                    // nested is the returned original.
                    let report = inner.root_part().content_type().is_some_and(|c| {
                        c.ctype().eq_ignore_ascii_case("multipart")
                            && c.subtype().is_some_and(|s| s.eq_ignore_ascii_case("report"))
                    });
                    flatten(inner, returned || !report, depth + 1, out);
                }
                continue;
            }
            PartType::Text(t) => cut(t).to_owned(),
            PartType::Html(h) => mail_parser::decoders::html::html_to_text(cut(h)),
            PartType::Binary(b) | PartType::InlineBinary(b) => {
                if !(content_type.starts_with("message/") || content_type.starts_with("text/")) {
                    continue;
                }
                String::from_utf8_lossy(&b[..b.len().min(MAX_PART_TEXT)]).into_owned()
            }
        };
        let returned = returned || content_type == "text/rfc822-headers";
        out.push(Part { content_type, text, returned });
    }
}

/// The first [`MAX_PART_TEXT`] bytes, cut on a character boundary.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(MAX_PART_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The post's MIME tree, rebuilt part by part from what mail-parser decoded: text parts as
/// UTF-8 text, the rest as their bytes, names, dispositions and Content-IDs kept.
fn rebuild(m: &Message<'_>, part: &mail_parser::MessagePart<'_>, depth: usize) -> MimePart<'static> {
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
    root: MimePart<'static>,
    footer_text: Option<&str>,
    footer_html: Option<&str>,
) -> MimePart<'static> {
    let (Some(text_footer), html_footer) =
        (footer_text.filter(|f| !f.is_empty()), footer_html.filter(|f| !f.is_empty()))
    else {
        return root;
    };
    let ctype = root.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("Content-Type")).and_then(|(_, v)| match v {
        HeaderType::ContentType(ct) => Some(ct.c_type.to_string()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{DomainName, EmailAddress, ListName, Timestamp};
    use crate::mailing::compose::post_template;
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
        let t =
            post_template(&MailParserReader, &l, &send, raw.as_bytes(), from, Timestamp::from_unix_secs(1_795_425_649))
                .unwrap();
        let to = EmailAddress::parse("bob@example.com").unwrap();
        let m = t.copy(&l, "42", &to, "https://lists.example.org/p/unsubscribe/tok");
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
    fn a_send_copy_carries_the_list_headers_both_parts_and_no_injected_header() {
        let l = list();
        let long = format!("Ligne très longue {}", "é".repeat(200));
        let send = SendRecord {
            id: SendId::from_stored(7),
            list_id: l.id,
            subject: "Hello\r\nBcc: evil@x.org".into(),
            text: Some(format!("Hi all\n{long}")),
            html: Some("<p>Hi all</p>".into()),
            message_id: "abc@example.org".into(),
            state: SendState::Queued,
            recipients: 1,
            created_at: Timestamp::from_unix_secs(0),
            completed_at: None,
        };
        let t = crate::mailing::compose::send_template(
            &MailParserReader,
            &l,
            &send,
            Timestamp::from_unix_secs(1_795_425_649),
        );
        let to = EmailAddress::parse("ann@example.net").unwrap();
        let m = t.copy(&l, "42", &to, "https://lists.example.org/p/unsubscribe/tok");
        assert_eq!(m.envelope_from.unwrap().to_string(), "news-bounces+42@example.org");
        assert_eq!(m.recipients, vec![to]);
        let text = String::from_utf8(m.data).unwrap();
        assert!(text.is_ascii(), "7-bit: {text}");
        // Folded or encoded by mail-builder; the spliced List-Unsubscribe stays on one line (as
        // long as the installation's URL makes it, far under 998).
        assert!(text.lines().all(|l| l.len() <= 78 || l.starts_with("List-Unsubscribe: ")), "{text}");
        assert!(!text.replace("\r\n", "").contains('\n'), "CRLF only");
        assert!(!text.contains("\r\nBcc:"), "no header injection");
        for needle in [
            "List-Post: <mailto:news@example.org>\r\n",
            "List-Help: <mailto:news-request@example.org?subject=help>\r\n",
            "List-Unsubscribe: <mailto:news-unsubscribe@example.org?subject=unsubscribe>, <https://lists.example.org/p/unsubscribe/tok>\r\n",
            "List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n",
            "Precedence: list\r\n",
            "To: ann@example.net\r\n",
            "Subject: [news] Hello  Bcc: evil@x.org\r\n",
            "Message-ID: <abc@example.org>\r\n",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        let parsed = mail_parser::MessageParser::default().parse(text.as_bytes()).unwrap();
        let from = parsed.from().unwrap().first().unwrap();
        assert_eq!((from.name(), from.address()), (Some("Nouvelles d'été"), Some("news@example.org")));
        let id = parsed.header("List-Id").and_then(|h| h.as_address()).and_then(|a| a.first()).unwrap();
        assert_eq!((id.name(), id.address()), (Some("Nouvelles d'été"), Some("news.example.org")));
        assert_eq!(parsed.reply_to().unwrap().first().unwrap().address(), Some("news@example.org"));
        let ct = parsed.content_type().unwrap();
        assert_eq!((ct.ctype(), ct.subtype()), ("multipart", Some("alternative")));
        let body = parsed.body_text(0).unwrap().replace("\r\n", "\n");
        assert_eq!(body, format!("Hi all\n{long}\n\n-- \nUnsubscribe any time."));
        assert_eq!(parsed.body_html(0).unwrap(), "<p>Hi all</p>");
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
}
