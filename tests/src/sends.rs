//! Sends against the real server and a real SMTP server (aiosmtpd): the copies per delivery mode,
//! the list headers, one-click unsubscription, permanent and temporary refusals, suspension,
//! cancellation, the queue, and the aggregate events exactly once.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::members::events;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::EventName;
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_tests::harness::{Resp, SmtpSink, TestApp};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

fn setup(sink: &SmtpSink, extra: &[(&str, &str)]) -> (TestApp, String) {
    let url = sink.url();
    let mut env = vec![("COURRIER_SMTP_URL", url.as_str()), ("COURRIER_PUBLIC_URL", "https://lists.example.org")];
    env.extend_from_slice(extra);
    let app = TestApp::spawn_with(&env);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    (app, key)
}

fn post(app: &TestApp, key: &str, path: &str, body: Value) -> Resp {
    call(app, "POST", path, &[bearer(key)], Some(&body))
}

fn get(app: &TestApp, key: &str, path: &str) -> Value {
    let r = call(app, "GET", path, &[bearer(key)], None);
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    r.json()["data"].clone()
}

fn add(app: &TestApp, key: &str, email: &str, mode: &str) {
    let r = post(app, key, &format!("{NEWS}/members"), json!({ "email": email, "delivery_mode": mode }));
    assert_eq!(r.status, 201, "{}", r.body);
}

fn submit(app: &TestApp, key: &str, subject: &str) -> (i64, u64) {
    let r = post(
        app,
        key,
        &format!("{NEWS}/sends"),
        json!({ "subject": subject, "text": "Hello all", "html": "<p>Hello all</p>" }),
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let d = r.json()["data"].clone();
    (d["send_id"].as_i64().unwrap(), d["recipients"].as_u64().unwrap())
}

/// Polls the send until `done` holds of it (at most 20 s).
fn wait_send(app: &TestApp, key: &str, id: i64, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = get(app, key, &format!("{NEWS}/sends/{id}"));
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "the send did not get there: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn header<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    let head = message.split("\n\n").next().unwrap_or(message);
    head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

#[test]
fn a_send_reaches_every_active_regular_member_once_with_the_list_headers() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    for (email, mode) in [
        ("a@example.net", "regular"),
        ("b@example.net", "regular"),
        ("c@example.com", "regular"),
        ("d@example.net", "digest"),
        ("e@example.net", "nomail"),
    ] {
        add(&app, &key, email, mode);
    }
    let r = call(
        &app,
        "PATCH",
        NEWS,
        &[bearer(&key)],
        Some(&json!({ "subject_tag": "[news]", "footer_text": "You are on news." })),
    );
    assert_eq!(r.status, 200);
    let (id, recipients) = submit(&app, &key, "First issue");
    assert_eq!(recipients, 3, "regular members only: digest and nomail get no copy");
    let s = wait_send(&app, &key, id, |s| s["state"] == "completed");
    assert_eq!((s["counts"]["sent"].as_u64(), s["counts"]["queued"].as_u64()), (Some(3), Some(0)), "{s}");
    assert!(s["completed_at"].is_string());
    let messages = sink.wait_for(3, Duration::from_secs(5));
    assert_eq!(messages.len(), 3);
    let mut to: Vec<&str> = messages.iter().map(|m| header(m, "To").unwrap()).collect();
    to.sort_unstable();
    assert_eq!(to, ["a@example.net", "b@example.net", "c@example.com"]);
    let m = &messages[0];
    assert_eq!(header(m, "Subject"), Some("[news] First issue"));
    assert_eq!(header(m, "Precedence"), Some("list"));
    assert_eq!(header(m, "List-Unsubscribe-Post"), Some("List-Unsubscribe=One-Click"));
    assert_eq!(header(m, "List-Post"), Some("<mailto:news@example.org>"));
    assert!(header(m, "List-Id").unwrap().ends_with("<news.example.org>"), "{m}");
    assert!(header(m, "List-Help").unwrap().contains("news-request@example.org"));
    let unsubscribe = header(m, "List-Unsubscribe").unwrap();
    assert!(
        unsubscribe.contains("<mailto:news-unsubscribe@example.org")
            && unsubscribe.contains("<https://lists.example.org/p/unsubscribe/"),
        "{unsubscribe}"
    );
    let message_ids: std::collections::HashSet<_> = messages.iter().map(|m| header(m, "Message-ID").unwrap()).collect();
    assert_eq!(message_ids.len(), 1, "every copy of one post carries its Message-ID");
    assert!(m.contains("multipart/alternative") && m.contains("You are on news."), "{m}");
    // VERP: the return path names the copy.
    let mail_from = header(m, "X-MailFrom").unwrap();
    assert!(mail_from.starts_with("news-bounces+") && mail_from.ends_with("@example.org"), "{mail_from}");
    assert_eq!(events(&app.core, EventName::SendSubmitted).len(), 1);
    std::thread::sleep(Duration::from_millis(600));
    let completed = events(&app.core, EventName::SendCompleted);
    assert_eq!(completed.len(), 1, "exactly once: {completed:?}");
    assert_eq!(completed[0]["sent"], 3);
    assert!(events(&app.core, EventName::SendFailed).is_empty());
    let q = get(&app, &key, "/api/v1/system/queue");
    assert_eq!((q["depth"].as_u64(), q["oldest_queued_at"].clone()), (Some(0), Value::Null), "{q}");
    assert_eq!(get(&app, &key, "/api/v1/dashboard")["sends_in_flight"], 0);
}

#[test]
fn one_click_unsubscribes_without_a_login_and_a_get_changes_nothing() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    add(&app, &key, "ann@example.net", "regular");
    submit(&app, &key, "Hi");
    let m = sink.wait_for(1, Duration::from_secs(20)).remove(0);
    let unsubscribe = header(&m, "List-Unsubscribe").unwrap();
    let url = unsubscribe.split('<').find(|p| p.starts_with("https://")).unwrap().trim_end_matches(['>', ' ', ',']);
    let path = &url["https://lists.example.org".len()..];
    let page = app.get(path);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("ann@example.net"));
    assert_eq!(
        get(&app, &key, &format!("{NEWS}/members/ann%40example.net"))["status"],
        "active",
        "a GET changes nothing"
    );
    let h = [("content-type", "application/x-www-form-urlencoded")];
    let done = app.client.request("POST", path, &h, Some(b"List-Unsubscribe=One-Click"));
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(get(&app, &key, &format!("{NEWS}/members/ann%40example.net"))["status"], "unsubscribed");
    assert_eq!(events(&app.core, EventName::MemberRemoved).len(), 1);
    assert_eq!(app.client.request("POST", path, &h, Some(b"List-Unsubscribe=One-Click")).status, 200, "repeatable");
    assert_eq!(events(&app.core, EventName::MemberRemoved).len(), 1, "no second event");
    assert_eq!(app.client.request("POST", "/p/unsubscribe/forged", &h, Some(b"")).status, 404);
    // The next send skips the unsubscribed member.
    let (_, recipients) = submit(&app, &key, "Again");
    assert_eq!(recipients, 0);
}

#[test]
fn refusals_fail_or_defer_copies_and_a_send_with_none_delivered_fails_once() {
    let sink = SmtpSink::start_refusing(550);
    let (app, key) = setup(&sink, &[]);
    add(&app, &key, "refuse-1@example.net", "regular");
    add(&app, &key, "refuse-2@example.net", "regular");
    let (id, _) = submit(&app, &key, "Nobody gets this");
    let s = wait_send(&app, &key, id, |s| s["state"] == "failed");
    // The receiving server's 5xx is a permanent bounce of each copy (bounces.rs scores it).
    assert_eq!(s["counts"]["bounced"], 2, "{s}");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(events(&app.core, EventName::SendFailed).len(), 1);
    assert!(events(&app.core, EventName::SendCompleted).is_empty());

    let sink = SmtpSink::start_refusing(451);
    let (app, key) = setup(&sink, &[("COURRIER_RETRY_BASE_SECS", "60")]);
    add(&app, &key, "refuse-later@example.net", "regular");
    add(&app, &key, "ok@example.net", "regular");
    let (id, _) = submit(&app, &key, "Some get it now");
    let s = wait_send(&app, &key, id, |s| s["counts"]["sent"] == 1 && s["counts"]["deferred"] == 1);
    assert_eq!(s["state"], "sending", "a deferred copy keeps the send open: {s}");
    let q = get(&app, &key, "/api/v1/system/queue");
    assert_eq!((q["depth"].as_u64(), q["by_state"]["deferred"].as_u64()), (Some(1), Some(1)), "{q}");
    assert!(q["oldest_queued_at"].is_string());
    // Cancelling takes the deferred copy; the send then completes (one copy was delivered).
    let c = post(&app, &key, &format!("{NEWS}/sends/{id}/cancel"), json!({}));
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(
        (c.json()["data"]["counts"]["cancelled"].as_u64(), c.json()["data"]["state"].as_str()),
        (Some(1), Some("completed"))
    );
    post(&app, &key, &format!("{NEWS}/sends/{id}/cancel"), json!({})).expect_error(409, "conflict");
    assert_eq!(events(&app.core, EventName::SendCompleted).len(), 1);
}

#[test]
fn a_suspended_list_keeps_its_copies_queued_until_it_resumes() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    add(&app, &key, "a@example.net", "regular");
    add(&app, &key, "b@example.net", "regular");
    assert_eq!(post(&app, &key, &format!("{NEWS}/suspend"), json!({})).status, 200);
    let (id, _) = submit(&app, &key, "Held back");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(sink.messages().is_empty(), "nothing leaves a suspended list");
    let s = get(&app, &key, &format!("{NEWS}/sends/{id}"));
    assert_eq!((s["state"].as_str(), s["counts"]["queued"].as_u64()), (Some("queued"), Some(2)), "{s}");
    assert_eq!(get(&app, &key, "/api/v1/system/queue")["depth"], 2);
    assert_eq!(get(&app, &key, "/api/v1/dashboard")["sends_in_flight"], 1);
    assert_eq!(post(&app, &key, &format!("{NEWS}/resume"), json!({})).status, 200);
    wait_send(&app, &key, id, |s| s["state"] == "completed");
    assert_eq!(sink.wait_for(2, Duration::from_secs(5)).len(), 2);

    // Cancelled before any copy left: the send is cancelled, and its aggregate says no copy went.
    post(&app, &key, &format!("{NEWS}/suspend"), json!({}));
    let (id, _) = submit(&app, &key, "Never mind");
    let c = post(&app, &key, &format!("{NEWS}/sends/{id}/cancel"), json!({}));
    assert_eq!(c.json()["data"]["state"], "cancelled", "{}", c.body);
    assert_eq!(events(&app.core, EventName::SendFailed).len(), 1);
    post(&app, &key, &format!("{NEWS}/resume"), json!({}));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(sink.messages().len(), 2, "cancelled copies never leave");
}

#[test]
fn sends_refuse_what_they_cannot_send() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    post(&app, &key, &format!("{NEWS}/sends"), json!({ "subject": "", "text": "x" }))
        .expect_error(422, "validation_failed");
    post(&app, &key, &format!("{NEWS}/sends"), json!({ "subject": "No body" })).expect_error(422, "validation_failed");
    post(&app, &key, &format!("{NEWS}/sends"), json!({ "subject": "a\nb", "text": "x" }))
        .expect_error(422, "validation_failed");
    post(&app, &key, &format!("{NEWS}/sends"), json!({ "subject": "x", "text": "x", "to": "all" }))
        .expect_error(422, "validation_failed");
    call(&app, "GET", &format!("{NEWS}/sends/999"), &[bearer(&key)], None).expect_error(404, "not_found");
    call(&app, "GET", &format!("{NEWS}/sends/abc"), &[bearer(&key)], None).expect_error(422, "invalid_path_id");
    post(&app, &key, &format!("{NEWS}/sends/999/cancel"), json!({})).expect_error(404, "not_found");
    let admin = courrier_core::access::users::by_email(
        &app.core.access,
        &courrier_core::kernel::EmailAddress::parse("admin@example.org").unwrap(),
    )
    .unwrap()
    .0;
    let reader = make_key(&app.core, &admin, KeyScope::User, &[Perm::Read], None);
    post(&app, &reader, &format!("{NEWS}/sends"), json!({ "subject": "x", "text": "x" }))
        .expect_error(403, "forbidden");
    // Idempotency-Key: one send for two identical submissions.
    let auth = format!("Bearer {key}");
    let h = [("authorization", auth.as_str()), ("content-type", "application/json"), ("idempotency-key", "send-1")];
    let body = json!({ "subject": "Once", "text": "x" }).to_string();
    let first = app.client.request("POST", &format!("{NEWS}/sends"), &h, Some(body.as_bytes()));
    let again = app.client.request("POST", &format!("{NEWS}/sends"), &h, Some(body.as_bytes()));
    assert_eq!((first.status, again.status, again.header("idempotent-replay")), (202, 202, Some("true")));
    assert_eq!(first.json()["data"], again.json()["data"]);
    assert_eq!(events(&app.core, EventName::SendSubmitted).len(), 1);
}

#[test]
fn digest_members_get_one_digest_of_the_posts_and_regular_members_the_posts() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    add(&app, &key, "regular@example.net", "regular");
    add(&app, &key, "d1@example.net", "digest");
    add(&app, &key, "d2@example.net", "digest");
    let (first, _) = submit(&app, &key, "Spring meeting");
    let (second, _) = submit(&app, &key, "Summer picnic");
    wait_send(&app, &key, second, |s| s["state"] == "completed");
    wait_send(&app, &key, first, |s| s["state"] == "completed");
    assert_eq!(sink.wait_for(2, Duration::from_secs(5)).len(), 2, "the regular member's two posts");
    let built = courrier_core::mailing::digests::run(&app.core.mailing, None, true).unwrap();
    assert_eq!(built.len(), 1);
    assert_eq!((built[0].posts, built[0].recipients), (2, 2));
    let digest_id = built[0].send_id.get();
    wait_send(&app, &key, digest_id, |s| s["state"] == "completed");
    let all = sink.wait_for(4, Duration::from_secs(5));
    let digests: Vec<&String> = all.iter().filter(|m| header(m, "To").is_some_and(|t| t.starts_with('d'))).collect();
    assert_eq!(digests.len(), 2, "one digest per digest member");
    let d = digests[0];
    assert!(d.contains("Today's Topics:") && d.contains("Spring meeting") && d.contains("Summer picnic"), "{d}");
    assert!(header(d, "List-Unsubscribe").is_some());
    assert!(
        courrier_core::mailing::digests::run(&app.core.mailing, None, true).unwrap().is_empty(),
        "nothing new: no digest"
    );
    let (third, _) = submit(&app, &key, "Autumn fair");
    wait_send(&app, &key, third, |s| s["state"] == "completed");
    assert!(
        courrier_core::mailing::digests::run(&app.core.mailing, None, false).unwrap().is_empty(),
        "not due before a day"
    );
    let next = courrier_core::mailing::digests::run(&app.core.mailing, None, true).unwrap();
    assert_eq!(next[0].posts, 1, "only what the last digest did not cover");
}

/// The harness's CLI against a data directory, asserting success; stdout back.
fn cli_in(dir: &std::path::Path, args: &[&str]) -> String {
    let (status, out, err) = courrier_tests::harness::run_cli_in(dir, args, &[], None);
    assert!(status.success(), "courrier {args:?}: {out}{err}");
    out
}

#[test]
fn a_server_killed_mid_delivery_loses_no_copy_and_completes_the_send_once() {
    const MEMBERS: usize = 5_000;
    let sink = SmtpSink::start();
    let dir = tempfile::tempdir().unwrap();
    cli_in(dir.path(), &["user", "create", "--email", "admin@example.org", "--site-admin"]);
    let key = cli_in(
        dir.path(),
        &[
            "create-api-key",
            "--email",
            "admin@example.org",
            "--scope",
            "user",
            "--perms",
            "read,members:write,send,manage",
            "--name",
            "crash",
            "--rate-limit-per-min",
            "100000",
        ],
    )
    .trim()
    .to_owned();
    cli_in(dir.path(), &["domain", "create", "example.org"]);
    cli_in(
        dir.path(),
        &[
            "list",
            "create",
            "--domain",
            "example.org",
            "--list",
            "news",
            "--display-name",
            "News",
            "--owner",
            "admin@example.org",
        ],
    );
    let csv: String = (0..MEMBERS).map(|i| format!("m{i}@example.net\n")).collect();
    let file = dir.path().join("members.csv");
    std::fs::write(&file, format!("email\n{csv}")).unwrap();
    cli_in(
        dir.path(),
        &[
            "members",
            "import",
            "--domain",
            "example.org",
            "--list",
            "news",
            "--consent-evidence",
            "crash test",
            &file.display().to_string(),
        ],
    );

    let url = sink.url();
    // A short lease, so the dead server's claimed copies return within the test.
    let env = [
        ("COURRIER_SMTP_URL", url.as_str()),
        ("COURRIER_PUBLIC_URL", "https://lists.example.org"),
        ("COURRIER_DELIVERY_LEASE_SECS", "3"),
        ("COURRIER_LOG", "warn"),
    ];
    let auth = format!("Bearer {key}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &env);
    let body = json!({ "subject": "Crash", "text": "Hello all" }).to_string();
    let resp = app.client.request("POST", &format!("{NEWS}/sends"), &headers, Some(body.as_bytes()));
    assert_eq!(resp.status, 202, "{}", resp.body);
    let send_id = resp.json()["data"]["send_id"].as_i64().unwrap();

    // Killed while it delivers: some copies out, most still queued or leased.
    sink.wait_for(300, Duration::from_secs(120));
    let dir = app.crash();
    let before = sink.messages().len();
    assert!(before < MEMBERS, "the crash came after the whole send ({before} delivered): nothing was tested");

    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &env);
    let deadline = Instant::now() + Duration::from_secs(300);
    let send = loop {
        let r = app.client.request("GET", &format!("{NEWS}/sends/{send_id}"), &headers[..1], None);
        let s = r.json()["data"].clone();
        if s["state"] == "completed" {
            break s;
        }
        assert!(Instant::now() < deadline, "the send did not complete after the restart: {s}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(send["counts"]["sent"].as_u64(), Some(MEMBERS as u64), "{send}");

    // Every member got the post at least once (a copy sent just before the kill may go twice).
    let mut seen = std::collections::HashSet::new();
    for m in sink.messages() {
        if let Some(rcpt) = header(&m, "X-RcptTo") {
            seen.insert(rcpt.trim().to_owned());
        }
    }
    for i in 0..MEMBERS {
        assert!(seen.contains(&format!("m{i}@example.net")), "m{i} never got the post");
    }
    let delivered = sink.messages().len();
    println!("{before} delivered before the kill, {delivered} in all for {MEMBERS} members");
    // Exactly one send.completed in the outbox, read from the database the two servers shared.
    let dir = app.crash();
    let store = courrier_tests::harness::open_mailing_store(dir.path());
    let mut completed = 0;
    let mut after = None;
    loop {
        let page = courrier_core::storage::in_read(&*store, |tx| tx.events_after(after, 1_000)).unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.id);
        completed += page.iter().filter(|e| e.name == EventName::SendCompleted).count();
    }
    assert_eq!(completed, 1, "send.completed recorded exactly once");
}

/// dkimpy's verdict on a delivered message, the selector's record given as published.
fn dkimpy_verifies(message: &str, record: &str) -> bool {
    let file = tempfile::NamedTempFile::new().unwrap();
    // The sink appends its own X-Peer/X-MailFrom/X-RcptTo headers after the message's: a relay's
    // additions, which DKIM tolerates as long as they are not signed.
    std::fs::write(file.path(), message).unwrap();
    let script = courrier_tests::harness::workspace_root().join("tests/peers/dkim_verify.py");
    let out = std::process::Command::new(courrier_tests::harness::venv_python("dkim"))
        .arg(&script)
        .arg(file.path())
        .arg(record)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

#[test]
fn copies_are_dkim_signed_with_the_domains_key_and_dkimpy_verifies_them() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    // The domain has no selector yet: no record, unsigned copies.
    let d = get(&app, &key, "/api/v1/domains/example.org");
    assert_eq!(d["dkim_record"], Value::Null, "{d}");
    let r =
        call(&app, "PATCH", "/api/v1/domains/example.org", &[bearer(&key)], Some(&json!({ "dkim_selector": "s2026" })));
    assert_eq!(r.status, 200, "{}", r.body);
    let record = r.json()["data"]["dkim_record"].clone();
    assert_eq!(record["name"], "s2026._domainkey.example.org", "{record}");
    let txt = record["value"].as_str().unwrap().to_owned();
    assert!(txt.starts_with("v=DKIM1; k=rsa; p=MII"), "{txt}");
    // The same selector again keeps the key; the record is shown on every read.
    let again =
        call(&app, "PATCH", "/api/v1/domains/example.org", &[bearer(&key)], Some(&json!({ "dkim_selector": "s2026" })));
    assert_eq!(again.json()["data"]["dkim_record"]["value"], txt.as_str());

    add(&app, &key, "ann@example.net", "regular");
    let (id, _) = submit(&app, &key, "Signed");
    wait_send(&app, &key, id, |s| s["state"] == "completed");
    let message = sink.wait_for(1, Duration::from_secs(20)).pop().unwrap();
    let sig = header(&message, "DKIM-Signature").expect("signed");
    assert!(sig.contains("d=example.org") && sig.contains("s=s2026"), "{sig}");
    for signed in ["list-unsubscribe", "list-unsubscribe-post", "list-id", "from", "subject"] {
        assert!(sig.contains(signed), "{signed} is signed: {sig}");
    }
    assert!(dkimpy_verifies(&message, &txt), "dkimpy verifies the copy");
    // A changed body or another key fails.
    assert!(!dkimpy_verifies(&message.replace("Hello all", "Hello some"), &txt));
    let other = "v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAtamperedtamperedtamperedtampered";
    assert!(!dkimpy_verifies(&message, other));

    // A new selector makes a new key.
    let rotated =
        call(&app, "PATCH", "/api/v1/domains/example.org", &[bearer(&key)], Some(&json!({ "dkim_selector": "s2027" })));
    let new_txt = rotated.json()["data"]["dkim_record"]["value"].as_str().unwrap().to_owned();
    assert_ne!(new_txt, txt);
    // Without a selector, copies go unsigned.
    let cleared =
        call(&app, "PATCH", "/api/v1/domains/example.org", &[bearer(&key)], Some(&json!({ "dkim_selector": null })));
    assert_eq!(cleared.json()["data"]["dkim_record"], Value::Null);
    let (id, _) = submit(&app, &key, "Unsigned");
    wait_send(&app, &key, id, |s| s["state"] == "completed");
    let all = sink.wait_for(2, Duration::from_secs(20));
    let unsigned = all.iter().find(|m| header(m, "Subject") == Some("Unsigned")).expect("the second copy");
    assert_eq!(header(unsigned, "DKIM-Signature"), None, "{unsigned}");
}

/// A delivered copy as Python's `email` package reads it (`tests/peers/read_copy.py`).
fn python_reads(message: &str) -> Value {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), message).unwrap();
    let script = courrier_tests::harness::workspace_root().join("tests/peers/read_copy.py");
    let out = std::process::Command::new(courrier_tests::harness::venv_python("email"))
        .arg(&script)
        .arg(file.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_send_with_a_long_non_ascii_subject_name_and_lines_reads_back_in_python_and_dkimpy_verifies_it() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    let name = "Les Nouvelles d'été, Zürich";
    let r = call(&app, "PATCH", NEWS, &[bearer(&key)], Some(&json!({ "display_name": name })));
    assert_eq!(r.status, 200, "{}", r.body);
    let r =
        call(&app, "PATCH", "/api/v1/domains/example.org", &[bearer(&key)], Some(&json!({ "dkim_selector": "s2026" })));
    assert_eq!(r.status, 200, "{}", r.body);
    let txt = r.json()["data"]["dkim_record"]["value"].as_str().unwrap().to_owned();
    add(&app, &key, "ann@example.net", "regular");
    // 900 bytes of UTF-8: one encoded word of it would make a line of over 1,200 characters.
    let subject = format!("Réunion d'été ✓ {}", "é".repeat(440));
    let long_line = format!("{} fin", "mot très long ".repeat(120));
    let text = format!("Bonjour à tous,\n{long_line}\nÀ bientôt");
    let html = format!("<p>{long_line}</p>");
    let r = post(&app, &key, &format!("{NEWS}/sends"), json!({ "subject": subject, "text": text, "html": html }));
    assert_eq!(r.status, 202, "{}", r.body);
    let message = sink.wait_for(1, Duration::from_secs(20)).pop().unwrap();
    let read = python_reads(&message);
    // RFC 5322 2.1.1: no line of a message is longer than 998 characters.
    assert!(read["longest_line"].as_u64().unwrap() <= 998, "{read}");
    assert_eq!(read["defects"], json!([]), "{read}");
    assert_eq!(read["subject"], subject.as_str());
    assert_eq!((read["from_name"].as_str(), read["from_address"].as_str()), (Some(name), Some("news@example.org")));
    assert!(read["list_id"].as_str().unwrap().ends_with("<news.example.org>"), "{read}");
    assert_eq!(read["content_type"], "multipart/alternative");
    let parts = read["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{read}");
    assert_eq!(parts[0]["content_type"], "text/plain");
    assert_eq!(parts[0]["text"].as_str().unwrap().replace("\r\n", "\n").trim_end(), text);
    assert_eq!(parts[1]["content_type"], "text/html");
    assert_eq!(parts[1]["text"].as_str().unwrap().replace("\r\n", "\n").trim_end(), html);
    assert!(dkimpy_verifies(&message, &txt), "dkimpy verifies the copy:\n{message}");
}
