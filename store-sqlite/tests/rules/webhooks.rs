//! The delivery worker on a real SQLite store, with a clock that moves only when told, a DNS
//! table and a scripted HTTPS port.

use crate::prelude::*;
use serde_json::json;

use courrier_core::access::users::{self, NewUser};
use courrier_core::egress::{AllowList, Egress, HttpsClient, PostRequest};
use courrier_core::kernel::{EmailAddress, NewEvent, TableDns};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_core::mailing::webhooks::*;
use courrier_core::mailing::{domains, lists};
use courrier_core::testing::{FixedClock, RecordingTransport};
use courrier_store_sqlite::SqliteStore;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Answers from a script (the last answer repeats), recording every request.
#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Result<PostReply, String>>>,
    seen: Mutex<Vec<(String, Vec<Header>, String)>>,
    /// A receiver this slow: each POST moves the clock on by this many seconds.
    slow: Mutex<Option<(Arc<FixedClock>, i64)>>,
}

impl HttpsClient for Script {
    fn post(&self, req: &PostRequest<'_>) -> Result<PostReply, String> {
        if let Some((clock, secs)) = &*self.slow.lock().unwrap() {
            clock.advance_secs(*secs);
        }
        let body = String::from_utf8(req.body.to_vec()).unwrap();
        self.seen.lock().unwrap().push((req.url.normalized(), req.headers.to_vec(), body));
        let mut a = self.answers.lock().unwrap();
        let next = if a.len() > 1 { a.pop_front() } else { a.front().cloned() };
        next.unwrap_or(Ok(PostReply { status: 200, retry_after: None }))
    }
}

fn reply(status: u16) -> Result<PostReply, String> {
    Ok(PostReply { status, retry_after: None })
}

struct World {
    app: courrier_core::mailing::Service,
    clock: Arc<FixedClock>,
    http: Arc<Script>,
    _dir: tempfile::TempDir,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(FixedClock::at(Timestamp::from_unix_secs(1_800_000_000)));
    let store = SqliteStore::open(&dir.path().join("t.db"), clock.now().unix_micros()).unwrap();
    let http = Arc::new(Script::default());
    let dns = TableDns::default().with_ip("hooks.example.com", &[&["93.184.215.14"]]);
    let egress = Egress { dns: Arc::new(dns), https: http.clone(), allow: AllowList::default() };
    let app = courrier_core::testing::mailing(
        Arc::new(store),
        clock.clone(),
        Arc::new(RecordingTransport::default()),
        egress,
    );
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let d = DomainName::parse("example.org").unwrap();
    let owner = EmailAddress::parse("owner@example.org").unwrap();
    users::create(&app.access, &p, &ctx, NewUser { email: owner.clone(), profile: Default::default(), password: None })
        .unwrap();
    domains::create(
        &app,
        &p,
        &ctx,
        domains::NewDomainRequest { name: d.clone(), dkim_selector: None, default_subscription_policy: None },
    )
    .unwrap();
    for name in ["news", "other"] {
        let new_list = lists::NewList {
            name: ListName::parse(name).unwrap(),
            display_name: name.into(),
            owner: owner.clone(),
            kind: None,
            subscription_policy: Some(SubscriptionPolicy::Open),
        };
        lists::create(&app, &p, &ctx, &d, new_list).unwrap();
    }
    World { app, clock, http, _dir: dir }
}

fn list_id(w: &World, name: &str) -> ListId {
    let d = DomainName::parse("example.org").unwrap();
    in_read(&*w.app.store, |tx| tx.list_by_name(&d, &ListName::parse(name).unwrap())).unwrap().unwrap().id
}

fn hook(w: &World, events: &[EventName], list: Option<ListId>) -> Created {
    let req = NewWebhookRequest {
        url: "https://hooks.example.com/in".into(),
        events: events.to_vec(),
        domain_id: None,
        list_id: list,
    };
    create(&w.app, &Principal::operator(), &RequestCtx::cli(), req).unwrap()
}

fn emit(w: &World, name: EventName, list: ListId) {
    let now = w.clock.now();
    let l = in_read(&*w.app.store, |tx| tx.list_by_id(list)).unwrap().unwrap();
    in_write(&*w.app.store, |tx| {
        tx.append_event(&NewEvent {
            name,
            at: now,
            domain_id: Some(l.domain_id.get()),
            list_id: Some(list.get()),
            data: json!({ "n": 1 }),
        })
    })
    .unwrap();
}

fn header<'a>(headers: &'a [Header], name: &str) -> &'a str {
    &headers.iter().find(|(k, _)| *k == name).unwrap().1
}

fn cfg() -> WebhookConfig {
    WebhookConfig { retry_base_secs: 10, ..WebhookConfig::default() }
}

#[test]
fn signatures_match_the_reference_vectors_of_both_schemes() {
    // Standard Webhooks' own example (keyed with the decoded part), and the contract's signature
    // of the same body keyed with the whole secret string (Python's
    // `hmac.new(b"whsec_MfKQ…", body, sha256)`).
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let key = secret_key(secret).unwrap();
    let body = br#"{"test": 2432232314}"#;
    assert_eq!(
        standard_signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    );
    assert_eq!(svc_signature(secret, body), "sha256=80ec8a89ce3cd22133a1066caecb4d04fea7467657c8514d717ec42c38a5c94c");
    assert_eq!(secret_string(&key), secret, "the key gives back the string the client holds");
    assert_eq!(secret_key("nope"), None);
}

#[test]
fn events_go_to_the_webhooks_that_want_them_signed_once_each() {
    let w = world();
    let news = list_id(&w, "news");
    let all = hook(&w, &[EventName::MemberAdded, EventName::SendCompleted], None);
    let only_other = hook(&w, &[EventName::MemberAdded], Some(list_id(&w, "other")));
    assert!(all.secret.starts_with("whsec_"));
    assert!(!all.webhook.secret_sealed.contains(&all.secret[6..]), "sealed, not in clear");
    emit(&w, EventName::MemberAdded, news);
    emit(&w, EventName::MemberRemoved, news);
    let round = run_once(&w.app, &cfg()).unwrap();
    assert_eq!((round.fanned_out, round.delivered), (1, 1), "{round:?}");
    let seen = w.http.seen.lock().unwrap();
    let (url, headers, body) = &seen[0];
    assert_eq!(url, "https://hooks.example.com/in");
    let key = secret_key(&all.secret).unwrap();
    let doc: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(doc["type"], "member.added");
    let id = doc["id"].as_str().unwrap();
    assert_eq!(header(headers, "X-Svc-Delivery"), id);
    assert_eq!(header(headers, "webhook-id"), id);
    assert_eq!(header(headers, "X-Svc-Event"), "member.added");
    assert_eq!(header(headers, "X-Svc-Signature"), svc_signature(&all.secret, body.as_bytes()));
    let ts: i64 = header(headers, "webhook-timestamp").parse().unwrap();
    assert_eq!(ts, w.clock.now().unix_secs());
    assert_eq!(header(headers, "webhook-signature"), standard_signature(&key, id, ts, body.as_bytes()));
    drop(seen);
    let counts = in_read(&*w.app.store, |tx| tx.delivery_counts(only_other.webhook.id)).unwrap();
    assert!(counts.is_empty(), "another list's webhook got nothing");
    let hooked = in_read(&*w.app.store, |tx| tx.webhook_by_id(all.webhook.id)).unwrap().unwrap();
    assert_eq!(hooked.last_success_at, Some(w.clock.now()));
}

#[test]
fn failures_retry_with_the_same_body_and_id_after_the_backoff() {
    let w = world();
    let created = hook(&w, &[EventName::MemberAdded], None);
    *w.http.answers.lock().unwrap() = VecDeque::from([reply(500), reply(500), reply(200)]);
    emit(&w, EventName::MemberAdded, list_id(&w, "news"));
    assert_eq!(run_once(&w.app, &cfg()).unwrap().retrying, 1);
    let failed = in_read(&*w.app.store, |tx| tx.webhook_by_id(created.webhook.id)).unwrap().unwrap();
    assert_eq!(failed.last_error.as_deref(), Some("HTTP 500"));
    assert_eq!(failed.last_error_at, Some(w.clock.now()));
    assert_eq!(run_once(&w.app, &cfg()).unwrap().claimed, 0, "not before its time");
    w.clock.advance_secs(10);
    assert_eq!(run_once(&w.app, &cfg()).unwrap().retrying, 1, "second attempt");
    w.clock.advance_secs(19);
    assert_eq!(run_once(&w.app, &cfg()).unwrap().claimed, 0, "the second wait is twice the first");
    w.clock.advance_secs(1);
    assert_eq!(run_once(&w.app, &cfg()).unwrap().delivered, 1);
    let seen = w.http.seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|(_, h, b)| b == &seen[0].2 && header(h, "X-Svc-Delivery") == header(&seen[0].1, "X-Svc-Delivery"))
    );
    assert_ne!(header(&seen[0].1, "webhook-timestamp"), header(&seen[2].1, "webhook-timestamp"), "signed anew");
}

#[test]
fn retry_after_is_honoured_and_410_disables_the_webhook() {
    let w = world();
    let created = hook(&w, &[EventName::MemberAdded], None);
    *w.http.answers.lock().unwrap() =
        VecDeque::from([Ok(PostReply { status: 503, retry_after: Some(120) }), reply(410)]);
    emit(&w, EventName::MemberAdded, list_id(&w, "news"));
    run_once(&w.app, &cfg()).unwrap();
    w.clock.advance_secs(119);
    assert_eq!(run_once(&w.app, &cfg()).unwrap().claimed, 0, "Retry-After is longer than the backoff");
    w.clock.advance_secs(1);
    assert_eq!(run_once(&w.app, &cfg()).unwrap().failed, 1);
    let gone = in_read(&*w.app.store, |tx| tx.webhook_by_id(created.webhook.id)).unwrap().unwrap();
    assert!(gone.disabled_at.is_some());
    emit(&w, EventName::MemberAdded, list_id(&w, "news"));
    assert_eq!(run_once(&w.app, &cfg()).unwrap().fanned_out, 0, "a disabled webhook gets nothing more");
}

#[test]
fn a_delivery_still_failing_after_24_hours_is_abandoned_and_shown() {
    let w = world();
    let created = hook(&w, &[EventName::MemberAdded], None);
    *w.http.answers.lock().unwrap() = VecDeque::from([Err("connection refused".to_owned())]);
    emit(&w, EventName::MemberAdded, list_id(&w, "news"));
    let config = WebhookConfig { retry_base_secs: 3600, ..WebhookConfig::default() };
    let mut failed = 0;
    for _ in 0..20 {
        failed += run_once(&w.app, &config).unwrap().failed;
        w.clock.advance_secs(6 * 3600);
    }
    assert_eq!(failed, 1);
    let hooked = in_read(&*w.app.store, |tx| tx.webhook_by_id(created.webhook.id)).unwrap().unwrap();
    assert!(hooked.last_error.unwrap().starts_with("abandoned after 24 h"), "shown on the webhook");
    let counts = in_read(&*w.app.store, |tx| tx.delivery_counts(created.webhook.id)).unwrap();
    assert_eq!(counts, vec![(DeliveryState::Failed, 1)]);
}

#[test]
fn a_worker_that_dies_mid_post_loses_no_delivery_and_cannot_overwrite_its_successor() {
    let w = world();
    hook(&w, &[EventName::MemberAdded], None);
    emit(&w, EventName::MemberAdded, list_id(&w, "news"));
    let config = cfg();
    let now = w.clock.now();
    // A worker fans out and leases, then dies before its POST returns.
    let dead = in_write(&*w.app.store, |tx| {
        fan_out(tx, now)?;
        Ok::<_, MailingError>(tx.claim_deliveries(now, now.plus_secs(config.lease_secs), 10)?)
    })
    .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(run_once(&w.app, &config).unwrap().claimed, 0, "a leased delivery is not claimed twice");
    w.clock.advance_secs(config.lease_secs + 1);
    let round = run_once(&w.app, &config).unwrap();
    assert_eq!((round.requeued, round.delivered), (1, 1));
    let late = w.clock.now();
    let stale =
        in_write(&*w.app.store, |tx| tx.finish_delivery(dead[0].id, DeliveryState::Failed, None, Some("late"), late));
    assert_eq!(stale, Ok(false));
}

#[test]
fn a_slow_receiver_gives_the_rest_of_the_batch_back_before_its_lease_could_expire() {
    let w = world();
    hook(&w, &[EventName::MemberAdded], None);
    for _ in 0..3 {
        emit(&w, EventName::MemberAdded, list_id(&w, "news"));
    }
    let config = cfg();
    *w.http.slow.lock().unwrap() = Some((w.clock.clone(), config.lease_secs / 2 + 1));
    let round = run_once(&w.app, &config).unwrap();
    assert_eq!((round.claimed, round.delivered, round.requeued), (3, 1, 2), "{round:?}");
    *w.http.slow.lock().unwrap() = None;
    assert_eq!(run_once(&w.app, &config).unwrap().delivered, 2, "given back due at once");
}

#[test]
fn a_webhook_receives_no_event_recorded_before_it_existed() {
    let w = world();
    emit(&w, EventName::MemberAdded, list_id(&w, "news"));
    w.clock.advance_secs(1);
    hook(&w, &[EventName::MemberAdded], None);
    assert_eq!(run_once(&w.app, &cfg()).unwrap().fanned_out, 0);
}

#[test]
fn creation_refuses_internal_urls_and_empty_event_lists() {
    let w = world();
    let (p, ctx) = (Principal::operator(), RequestCtx::cli());
    let req = |url: &str, events: Vec<EventName>| NewWebhookRequest {
        url: url.into(),
        events,
        domain_id: None,
        list_id: None,
    };
    let e = create(&w.app, &p, &ctx, req("https://10.0.0.1/x", vec![EventName::MemberAdded])).unwrap_err();
    assert_eq!(e.code(), courrier_core::kernel::Code::UrlRefused);
    let e = create(&w.app, &p, &ctx, req("http://hooks.example.com/", vec![EventName::MemberAdded])).unwrap_err();
    assert_eq!(e.code(), courrier_core::kernel::Code::UrlRefused);
    let e = create(&w.app, &p, &ctx, req("https://hooks.example.com/", vec![])).unwrap_err();
    assert_eq!(e.code(), courrier_core::kernel::Code::ValidationFailed);
}

use courrier_core::kernel::{Clock, CoreError};
