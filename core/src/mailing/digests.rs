//! Digests: the posts a list received since its last digest, gathered into one RFC 1153 plain
//! text digest and queued like any send, to the list's active `digest` members. Due at the list's
//! `digest_frequency` (the server looks every minute); `courrier digests run` builds them at once.

use super::MailingError;
use super::Service;
use super::lists;
use super::model::{DeliveryMode, DigestFrequency, ListId, MailingList, SendId, SendKind, SendRecord};
use crate::kernel::{EventName, Timestamp, secrets};
use crate::mailing::ports::NewSend;
use crate::storage::{in_read, in_write};
use serde_json::json;
use std::fmt::Write as _;

/// A digest queued by a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    pub list_address: String,
    pub send_id: SendId,
    pub posts: usize,
    pub recipients: u64,
}

fn period_secs(f: DigestFrequency) -> i64 {
    match f {
        DigestFrequency::Daily => 24 * 3600,
        DigestFrequency::Weekly => 7 * 24 * 3600,
    }
}

/// Builds the digests that are due (`now = true`: every list with new posts, whatever its
/// frequency), optionally for one list only.
pub fn run(app: &Service, only: Option<ListId>, now_regardless: bool) -> Result<Vec<Built>, MailingError> {
    let candidates = in_read(&*app.store, |tx| tx.lists_with_digest_members())?;
    let mut built = Vec::new();
    for list_id in candidates.into_iter().filter(|l| only.is_none_or(|o| o == *l)) {
        if let Some(b) = run_list(app, list_id, now_regardless)? {
            built.push(b);
        }
    }
    Ok(built)
}

fn run_list(app: &Service, list_id: ListId, now_regardless: bool) -> Result<Option<Built>, MailingError> {
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let Some(list) = tx.list_by_id(list_id)? else { return Ok(None) };
        let state = tx.digest_state(list.id)?;
        let due = now_regardless
            || state.is_none_or(|(_, last)| last.plus_secs(period_secs(list.policies.digest_frequency)) <= now);
        if !due {
            return Ok(None);
        }
        let posts = tx.posts_between(list.id, state.map(|(covered, _)| covered), now)?;
        let Some(last) = posts.last() else { return Ok(None) };
        let covered_until = last.created_at;
        let volume = format!("{}, {}", list.display_name, &now.to_rfc3339()[..10]);
        let subject = format!("{volume} ({} message{})", posts.len(), if posts.len() == 1 { "" } else { "s" });
        let text = rfc1153(&list, &volume, &posts);
        let message_id = format!("digest.{}.{}@{}", now.unix_secs(), secrets::random_hex(8), list.domain);
        let new = NewSend {
            list_id: list.id,
            subject: &subject,
            text: Some(&text),
            html: None,
            message_id: &message_id,
            created_by: None,
            kind: SendKind::Digest,
            raw: None,
        };
        let send_id = tx.insert_send(&new, now)?;
        let recipients = tx.fan_out(send_id, list.id, DeliveryMode::Digest, now)?;
        tx.set_digest_state(list.id, covered_until, now)?;
        let data = json!({ "send_id": send_id.get(), "recipients": recipients, "subject": subject, "digest": true });
        lists::emit(tx, EventName::SendSubmitted, &list, data, now)?;
        Ok(Some(Built { list_address: list.address(), send_id, posts: posts.len(), recipients }))
    })
}

/// The RFC 1153 digest: a table of contents, then each message with its headers, separated by the
/// RFC's lines, so that digest readers split it back into messages.
fn rfc1153(list: &MailingList, volume: &str, posts: &[SendRecord]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{volume}\n\nToday's Topics:\n");
    for (i, p) in posts.iter().enumerate() {
        let _ = writeln!(out, "   {}. {}", i + 1, one_line(&p.subject));
    }
    out.push('\n');
    out.push_str(&"-".repeat(70));
    out.push('\n');
    for (i, p) in posts.iter().enumerate() {
        let body = p.text.clone().unwrap_or_else(|| strip_tags(p.html.as_deref().unwrap_or("")));
        let _ = write!(
            out,
            "\nMessage: {}\nDate: {}\nFrom: {}\nSubject: {}\n\n{}\n\n{}\n",
            i + 1,
            date(p.created_at),
            list.address(),
            one_line(&p.subject),
            // A line of exactly 30 dashes would end the message early: RFC 1153 escapes it.
            body.lines()
                .map(|l| if l == "-".repeat(30) { " -".to_owned() + &l[1..] } else { l.to_owned() })
                .collect::<Vec<_>>()
                .join("\n"),
            "-".repeat(30)
        );
    }
    let _ = write!(out, "\nEnd of {volume}\n{}\n", "*".repeat(volume.len() + 7));
    out
}

fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

fn date(t: Timestamp) -> String {
    let iso = t.to_rfc3339();
    format!("{} {} UTC", &iso[..10], &iso[11..19])
}

/// The text of an HTML-only post, for the plain-text digest.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_only_posts_read_as_text() {
        assert_eq!(strip_tags("<p>Hi &amp; <b>bye</b></p>"), "Hi & bye");
    }
}
