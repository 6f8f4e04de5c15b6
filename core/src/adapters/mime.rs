//! `MimeReader` over mail-parser: a received message flattened into the parts bounce recognition
//! reads (`mailing::bounces::recognise::Parsed`). mail-parser never panics on input; a message
//! without headers is `None`.

use crate::mailing::bounces::MimeReader;
use crate::mailing::bounces::recognise::{MAX_PART_TEXT, MAX_PARTS, Parsed, Part};
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
