//! How the mailing context's records look on the wire: the documents the HTTP API answers and
//! the CLI's `--json` prints alike (views, not serde derives on the domain types).

use super::dashboard::{Dashboard, QueueStats};
use super::import::ImportReport;
use super::model::{Domain, MailingList, Member, StatusCounts};
use crate::kernel::json_time as time;
use serde_json::{Value, json};

pub fn domain(d: &Domain) -> Value {
    json!({
        "id": d.id.get(),
        "name": d.name.as_str(),
        "status": d.status.as_str(),
        "dkim_selector": d.dkim_selector,
        "default_subscription_policy": d.default_subscription_policy.as_str(),
        "dns_ok": d.dns_ok,
        "dns_checked_at": time(d.dns_checked_at),
        "dkim_record": dkim_record(d),
        "created_at": d.created_at.to_rfc3339(),
        "updated_at": d.updated_at.to_rfc3339(),
    })
}

/// The TXT record the operator publishes for the domain's current selector, once its key exists.
fn dkim_record(d: &Domain) -> Value {
    match (&d.dkim_selector, &d.dkim_public_key) {
        (Some(selector), Some((made_for, key))) if selector == made_for => json!({
            "name": format!("{selector}._domainkey.{}", d.name),
            "type": "TXT",
            "value": format!("v=DKIM1; k=rsa; p={key}"),
        }),
        _ => Value::Null,
    }
}

/// The contract's List summary.
pub fn list_summary(l: &MailingList) -> Value {
    json!({
        "id": l.id.get(),
        "name": l.name.as_str(),
        "display_name": l.display_name,
        "type": l.kind.as_str(),
        "status": l.status.as_str(),
        "send_suspended": l.send_suspended,
    })
}

/// A list's detail: the summary, its address, and its policies.
pub fn list_detail(l: &MailingList) -> Value {
    let p = &l.policies;
    let mut v = list_summary(l);
    let extra = json!({
        "address": l.address(),
        "domain": l.domain.as_str(),
        "subscription_policy": p.subscription_policy.as_str(),
        "posting_policy": p.posting_policy.as_str(),
        "subject_tag": p.subject_tag,
        "footer_text": p.footer_text,
        "footer_html": p.footer_html,
        "reply_to": p.reply_to.as_str(),
        "bounce_disable_score": p.bounce_disable_score,
        "held_days": p.held_days,
        "digest_frequency": p.digest_frequency.as_str(),
        "max_message_kb": p.max_message_kb,
        "dmarc_mitigation": p.dmarc_mitigation.as_str(),
        "created_at": l.created_at.to_rfc3339(),
        "updated_at": l.updated_at.to_rfc3339(),
    });
    for (k, e) in extra.as_object().into_iter().flatten() {
        v[k] = e.clone();
    }
    v
}

/// The contract's Member object. Consent evidence is never part of it.
pub fn member(m: &Member) -> Value {
    json!({
        "id": m.id.get(),
        "email": m.email.to_string(),
        "display_name": m.display_name,
        "status": m.status.as_str(),
        "delivery_mode": m.delivery_mode.as_str(),
        "bounce_score": m.bounce_score,
        "subscribed_at": time(m.subscribed_at),
        "last_bounce_at": time(m.last_bounce_at),
        "disabled_reason": m.disabled_reason,
        "disabled_at": time(m.disabled_at),
        "consent_source": m.consent_source,
        "consent_at": time(m.consent_at),
    })
}

/// [`member`]'s document written straight into `out`, byte for byte what `member(m).to_string()`
/// gives (the keys in serde_json's order), without its tree: a page of 500 members is 500 of these.
pub fn write_member(out: &mut String, m: &Member) {
    use std::fmt::Write as _;
    let _ = write!(out, "{{\"bounce_score\":{},\"consent_at\":", m.bounce_score);
    write_time(out, m.consent_at);
    out.push_str(",\"consent_source\":");
    write_opt_str(out, m.consent_source.as_deref());
    out.push_str(",\"delivery_mode\":");
    write_str(out, m.delivery_mode.as_str());
    out.push_str(",\"disabled_at\":");
    write_time(out, m.disabled_at);
    out.push_str(",\"disabled_reason\":");
    write_opt_str(out, m.disabled_reason.as_deref());
    out.push_str(",\"display_name\":");
    write_opt_str(out, m.display_name.as_deref());
    out.push_str(",\"email\":");
    // A quoted local part may hold `"` or `\\`: such an address is escaped whole, as a string.
    let (local, domain) = (m.email.local_part(), m.email.domain().as_str());
    if needs_escape(local) || needs_escape(domain) {
        write_str(out, &m.email.to_string());
    } else {
        out.push('"');
        out.push_str(local);
        out.push('@');
        out.push_str(domain);
        out.push('"');
    }
    let _ = write!(out, ",\"id\":{},\"last_bounce_at\":", m.id.get());
    write_time(out, m.last_bounce_at);
    out.push_str(",\"status\":");
    write_str(out, m.status.as_str());
    out.push_str(",\"subscribed_at\":");
    write_time(out, m.subscribed_at);
    out.push('}');
}

/// A JSON array of [`write_member`]s in one buffer sized for them up front.
pub fn write_members(out: &mut String, members: &[Member]) {
    out.reserve(members.len() * 400 + 2);
    out.push('[');
    for (i, m) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_member(out, m);
    }
    out.push(']');
}

/// What serde_json escapes: `"`, `\\` and control characters.
fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

fn write_str(out: &mut String, s: &str) {
    if needs_escape(s) {
        out.push_str(&Value::from(s).to_string());
    } else {
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

fn write_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.push_str("null"),
    }
}

fn write_time(out: &mut String, t: Option<crate::kernel::Timestamp>) {
    match t {
        Some(t) => {
            out.push('"');
            t.write_rfc3339(out);
            out.push('"');
        }
        None => out.push_str("null"),
    }
}

/// One subscription of a subscriber (`GET /me/subscriptions`): the list, and how the address
/// stands on it.
pub fn subscription(s: &super::ports::SubscriptionRecord) -> Value {
    json!({
        "list_id": s.list.id.get(),
        "list_address": s.list.address(),
        "display_name": s.list.display_name,
        "delivery_mode": s.member.delivery_mode.as_str(),
        "status": s.member.status.as_str(),
        "subscribed_at": time(s.member.subscribed_at),
    })
}

/// The subscriber session (`GET /me/session`): address, expiry, CSRF token.
pub fn subscriber_session(s: &super::me::Subscriber) -> Value {
    json!({
        "email": s.email.to_string(),
        "expires_at": s.expires_at.to_rfc3339(),
        "csrf_token": s.csrf_token,
    })
}

pub fn import_report(r: &ImportReport) -> Value {
    json!({
        "total": r.total,
        "added": r.added,
        "skipped": r.skipped,
        "errors": r.errors,
        "mode_coerced": r.mode_coerced,
        "error_samples": r.error_samples.iter().map(|e| json!({ "row": e.row, "reason": e.reason })).collect::<Vec<_>>(),
    })
}

fn status_counts(c: &StatusCounts) -> Value {
    json!({
        "pending": c.pending,
        "active": c.active,
        "disabled": c.disabled,
        "unsubscribed": c.unsubscribed,
        "removed": c.removed,
    })
}

pub fn dashboard(d: &Dashboard) -> Value {
    json!({
        "domains": d.domains,
        "lists": d.lists,
        "members": status_counts(&d.members),
        "sends_in_flight": d.sends_in_flight,
        "held_messages": d.held_messages,
        "pending_subscriptions": d.pending_subscriptions,
        "bounces_last_7_days": { "permanent": d.bounces_7d.0, "temporary": d.bounces_7d.1 },
    })
}

pub fn queue(q: &QueueStats) -> Value {
    let by_state: serde_json::Map<String, Value> =
        q.by_state.iter().map(|(s, n)| ((*s).to_owned(), json!(n))).collect();
    json!({ "depth": q.depth, "by_state": by_state, "oldest_queued_at": time(q.oldest_queued_at) })
}

/// A webhook as listed: never its secret.
pub fn webhook(w: &super::model::Webhook) -> Value {
    json!({
        "id": w.id.get(),
        "url": w.url,
        "events": w.events.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
        "domain_id": w.domain_id.map(|d| d.get()),
        "list_id": w.list_id.map(|l| l.get()),
        "created_at": w.created_at.to_rfc3339(),
        "disabled_at": time(w.disabled_at),
        "last_success_at": time(w.last_success_at),
        "last_error": w.last_error,
        "last_error_at": time(w.last_error_at),
    })
}

/// The creation answer: the webhook and, this once, its secret.
pub fn webhook_created(w: &super::model::Webhook, secret: &str) -> Value {
    let mut v = webhook(w);
    v["secret"] = json!(secret);
    v
}

pub fn webhook_ping(o: &super::webhooks::PingOutcome) -> Value {
    json!({ "delivered": o.delivered, "status": o.status, "error": o.error })
}

/// The DNS check result: one verdict per record, and the domain with its stored verdict.
pub fn dns_check(c: &super::dns_check::DnsCheck) -> Value {
    let records: Vec<Value> = c
        .records
        .iter()
        .map(|v| {
            json!({
                "type": v.kind.as_str(),
                "name": v.name,
                "checked": v.checked,
                "found": v.found,
                "expected": v.expected,
                "values": v.values,
                "error": v.error,
            })
        })
        .collect();
    json!({
        "domain": c.domain.name.as_str(),
        "dns_ok": c.domain.dns_ok,
        "dns_checked_at": time(c.domain.dns_checked_at),
        "records": records,
    })
}

/// A send and its copies counted by state.
pub fn send_status(send: &super::model::SendRecord, counts: &super::model::CopyCounts) -> Value {
    use super::model::CopyState;
    let by_state: serde_json::Map<String, Value> =
        CopyState::ALL.iter().map(|s| (s.as_str().to_owned(), json!(counts.get(*s)))).collect();
    json!({
        "id": send.id.get(),
        "state": send.state.as_str(),
        "subject": send.subject,
        "recipients": send.recipients,
        "counts": by_state,
        "created_at": send.created_at.to_rfc3339(),
        "completed_at": send.completed_at.map(|t| t.to_rfc3339()),
    })
}

/// A subscription waiting for a moderator (`GET .../moderation/subscriptions`): when it began
/// to wait is the member's last change.
pub fn pending_subscription(m: &Member) -> Value {
    json!({
        "id": m.id.get(),
        "email": m.email.to_string(),
        "display_name": m.display_name,
        "requested_at": time(Some(m.updated_at)),
    })
}

/// A held post as listed (`GET .../moderation/messages`).
pub fn held_message(h: &super::posts::HeldPost) -> Value {
    json!({
        "id": h.id.get(),
        "from": h.from.as_deref().or(h.envelope_from.as_deref()),
        "subject": h.subject.as_deref().unwrap_or(""),
        "received_at": time(Some(h.received_at)),
        "reason": h.reason.as_str(),
        "size": h.size,
    })
}

/// A held post as read (`GET .../moderation/messages/{id}`): the listing's fields, `headers`
/// (an object: a repeated field's values joined by a line break) and `text`.
pub fn held_message_detail(m: &super::moderation::HeldMessage) -> Value {
    let mut v = held_message(&m.post);
    let headers: serde_json::Map<String, Value> =
        m.headers.iter().map(|(k, val)| (k.clone(), Value::String(val.clone()))).collect();
    v["headers"] = Value::Object(headers);
    v["text"] = json!(m.text);
    v
}

/// An approved held post: the send it became.
pub fn held_approved(id: super::posts::HeldId, s: &super::sends::Submitted) -> Value {
    json!({ "id": id.get(), "decision": "approved", "send_id": s.send_id.get(), "recipients": s.recipients })
}

/// A held post rejected or discarded.
pub fn held_decided(id: super::posts::HeldId, decision: &str) -> Value {
    json!({ "id": id.get(), "decision": decision })
}

/// A mail-account credential: never its password, sealed or not.
pub fn credential(c: &super::credentials::MailCredential) -> Value {
    json!({
        "kind": c.kind.as_str(),
        "host": c.host,
        "port": c.port,
        "security": c.security.as_str(),
        "username": c.username,
        "folder": c.folder,
        "last_ok_at": time(c.last_ok_at),
        "last_error": c.last_error,
        "last_error_at": time(c.last_error_at),
        "updated_at": c.updated_at.to_rfc3339(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{EmailAddress, Timestamp};
    use crate::mailing::model::{DeliveryMode, ListId, MemberId, MemberStatus, PendingReason};

    fn sample(i: usize) -> Member {
        let t = |k: usize| {
            (!i.is_multiple_of(k)).then(|| Timestamp::from_unix_micros(1_795_425_649_123_456 + i as i64 * 7))
        };
        let text = |k: usize| {
            ["Ann", "Zoë \"Z\" Lee", "tab\there\nline", "back\\slash \u{1}\u{1f}\u{7f}", "", "l'été 日本"]
                .get(i % k)
                .map(|s| (*s).to_owned())
        };
        Member {
            id: MemberId::from_stored(i as i64 + 1),
            list_id: ListId::from_stored(3),
            email: EmailAddress::parse(&format!("o'brien+{i}.x_y@Sub.Example.NET")).unwrap(),
            display_name: text(7),
            status: [MemberStatus::Active, MemberStatus::Pending, MemberStatus::Disabled, MemberStatus::Removed][i % 4],
            pending_reason: (i % 4 == 1).then_some(PendingReason::Confirmation),
            delivery_mode: [DeliveryMode::Regular, DeliveryMode::Digest, DeliveryMode::Nomail][i % 3],
            bounce_score: (i * 13 % 40) as u32,
            subscribed_at: t(2),
            last_bounce_at: t(3),
            disabled_reason: text(9),
            disabled_at: t(5),
            consent_source: text(6),
            consent_at: t(4),
            created_at: Timestamp::from_unix_micros(i as i64),
            updated_at: Timestamp::from_unix_micros(-1_000_001 * i as i64),
        }
    }

    #[test]
    fn a_page_of_members_is_written_as_the_member_view_would_serialize() {
        let members: Vec<Member> = (0..200).map(sample).collect();
        for m in &members {
            let mut out = String::new();
            write_member(&mut out, m);
            assert_eq!(out, member(m).to_string());
        }
        let mut out = String::new();
        write_members(&mut out, &members);
        assert_eq!(out, Value::Array(members.iter().map(member).collect()).to_string());
        let mut out = String::new();
        write_members(&mut out, &[]);
        assert_eq!(out, "[]");
    }
}
