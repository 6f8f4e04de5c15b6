//! `courrier store copy --to postgres://...` (issue 25): an SQLite installation made by a real
//! server and the real CLI, copied by the real binary into a throw-away PostgreSQL (Debian's
//! binaries; the tests say they were skipped when there are none), then served from there by a
//! real server given the master key.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::ocr::{fixture, upload};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::{Perm, Principal};
use courrier_core::kernel::{DomainName, EmailAddress, ListName};
use courrier_core::mailing::domains;
use courrier_core::mailing::model::{DeliveryMode, MemberStatus, NewMember, PendingReason, SubscriptionPolicy};
use courrier_core::storage::{in_read, in_write};
use courrier_store_postgres::test_server::{
    TestServer as PostgresTestServer, TestServerError as PostgresTestServerError,
};
use courrier_tests::harness::{SmtpSink, TestApp, free_port, run_cli_in};
use courrier_tests::peers::{DnsServer, Receiver};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

/// A throw-away PostgreSQL, or `None` (the test says it is skipped) without its binaries.
fn postgres(test: &str) -> Option<PostgresTestServer> {
    match PostgresTestServer::start() {
        Ok(pg) => Some(pg),
        Err(e @ PostgresTestServerError::NoBinaries) => {
            eprintln!("SKIPPED {test}: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn master_key() -> String {
    B64.encode([0x33; 32])
}

/// `courrier store copy --to URL` on the installation of `dir` (SQLite, whatever the suite runs
/// on), with the master key unless `extra` sets another.
fn store_copy(dir: &Path, url: &str, extra: &[(&str, &str)]) -> (i32, String, String) {
    let key = master_key();
    let mut env = vec![("COURRIER_DATABASE_URL", ""), ("COURRIER_MASTER_KEY", key.as_str())];
    env.extend_from_slice(extra);
    let (status, stdout, stderr) = run_cli_in(dir, &["store", "copy", "--to", url], &env, None);
    (status.code().unwrap_or(-1), stdout, stderr)
}

/// The line of the count table naming `what`: its two counts.
fn counted(stdout: &str, what: &str) -> (u64, u64) {
    let line =
        stdout.lines().find(|l| l.starts_with(&format!("{what} "))).unwrap_or_else(|| panic!("{what}: {stdout}"));
    let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    (n[0], n[1])
}

fn get(app: &TestApp, key: &str, path: &str) -> Value {
    let r = call(app, "GET", path, &[bearer(key)], None);
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    r.json()
}

/// A member of `news` stored in `status` through core (only `active` comes from the API).
fn member_in(app: &TestApp, address: &str, status: MemberStatus, pending: Option<PendingReason>) {
    let news = in_read(&*app.core.mailing.store, |tx| {
        tx.list_by_name(&DomainName::parse("example.org").unwrap(), &ListName::parse("news").unwrap())
    })
    .unwrap()
    .unwrap();
    let m = NewMember {
        list_id: news.id,
        email: EmailAddress::parse(address).unwrap(),
        display_name: Some(format!("{status:?}")),
        status,
        pending_reason: pending,
        delivery_mode: DeliveryMode::Regular,
        subscribed_at: None,
        consent_source: None,
        consent_at: None,
        consent_id: None,
    };
    let now = app.core.mailing.clock.now();
    in_write(&*app.core.mailing.store, |tx| tx.insert_member(&m, now)).unwrap();
}

#[test]
fn an_sqlite_installation_copied_to_postgres_serves_the_same_members_send_document_key_and_webhook_secret() {
    let Some(pg) = postgres("store copy round trip") else { return };
    let (receiver, dns, sink) =
        (Receiver::start(), DnsServer::start(&["address=/hooks.test/127.0.0.1"]), SmtpSink::start());
    let (ca, dns_addr, smtp) = (receiver.ca.ca_pem.display().to_string(), dns.addr(), sink.url());
    let peers = [
        ("COURRIER_EXTRA_CA", ca.as_str()),
        ("COURRIER_DNS_SERVER", dns_addr.as_str()),
        ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ("COURRIER_SMTP_URL", smtp.as_str()),
        ("COURRIER_PUBLIC_URL", "https://lists.example.org"),
    ];
    // The source: an SQLite installation (whatever backend the suite runs on).
    let mut source_env = vec![("COURRIER_DATABASE_URL", "")];
    source_env.extend_from_slice(&peers);
    let mut source = TestApp::spawn_with(&source_env);
    let admin = make_user(&source.core, "admin@example.org", &[Role::SiteAdmin]);
    let req = domains::NewDomainRequest {
        name: DomainName::parse("example.org").unwrap(),
        dkim_selector: Some("s1".into()),
        default_subscription_policy: None,
    };
    domains::create(&source.core.mailing, &Principal::operator(), &RequestCtx::cli(), req).unwrap();
    make_list(&source.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&source.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    let post = |app: &TestApp, path: &str, body: Value| call(app, "POST", path, &[bearer(&key)], Some(&body));
    for address in ["ann@example.net", "bob@example.net"] {
        assert_eq!(post(&source, &format!("{NEWS}/members"), json!({ "email": address })).status, 201);
    }
    member_in(&source, "pat@example.net", MemberStatus::Pending, Some(PendingReason::Confirmation));
    member_in(&source, "dan@example.net", MemberStatus::Disabled, None);
    member_in(&source, "uma@example.net", MemberStatus::Unsubscribed, None);
    member_in(&source, "rob@example.net", MemberStatus::Removed, None);
    // A send delivered to the two active members.
    let r = post(&source, &format!("{NEWS}/sends"), json!({ "subject": "Before the move", "text": "Hello" }));
    assert_eq!(r.status, 202, "{}", r.body);
    let send_id = r.json()["data"]["send_id"].as_i64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let send = loop {
        let s = get(&source, &key, &format!("{NEWS}/sends/{send_id}"));
        if s["data"]["state"] == "completed" {
            break s["data"].clone();
        }
        assert!(Instant::now() < deadline, "{s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(sink.wait_for(2, Duration::from_secs(10)).len(), 2);
    // A webhook (its secret sealed by the SQLite installation's data key) and a document.
    let url = format!("https://hooks.test:{}/copied", receiver.port);
    let r = post(&source, "/api/v1/webhooks", json!({ "url": url, "events": ["list.suspended"] }));
    assert_eq!(r.status, 201, "{}", r.body);
    let (hook_id, secret) =
        (r.json()["data"]["id"].as_i64().unwrap(), r.json()["data"]["secret"].as_str().unwrap().to_owned());
    let r = upload(
        &source,
        &key,
        "invoice-scan.pdf",
        &fixture("invoice-scan.pdf"),
        &[("lang", "fr"), ("action", "storeOnly")],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let ocr_id = r.json()["ocrID"].as_str().unwrap().to_owned();
    let members = get(&source, &key, &format!("{NEWS}/members?limit=100"))["data"].clone();
    assert_eq!(members.as_array().unwrap().len(), 6, "{members}");
    let domain = get(&source, &key, "/api/v1/domains/example.org")["data"].clone();
    assert!(domain.to_string().contains("s1"), "a DKIM key: {domain}");
    // Stopped, the data directory kept: the copy is of an installation at rest.
    let dir = std::mem::replace(&mut source.dir, tempfile::tempdir().unwrap());
    source.stop();

    let target = pg.fresh_database().unwrap();
    let (code, stdout, stderr) = store_copy(dir.path(), &target, &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stderr.contains("store copy: "), "plain progress lines when stderr is no terminal: {stderr}");
    for (what, n) in
        [("members", 6), ("sends", 1), ("copies", 2), ("webhooks", 1), ("api_keys", 1), ("documents (files)", 1)]
    {
        assert_eq!(counted(&stdout, what), (n, n), "{stdout}");
    }
    assert_eq!(counted(&stdout, "member_tallies (members counted)"), (6, 6), "{stdout}");
    assert!(stdout.contains("verified: every count matches"), "{stdout}");

    // A server on PostgreSQL with the master key: no file of the SQLite installation.
    let key_text = master_key();
    let mut env = vec![
        ("COURRIER_DATABASE_URL", target.as_str()),
        ("COURRIER_MASTER_KEY", key_text.as_str()),
        ("COURRIER_LMTP_LISTEN", "off"),
    ];
    env.extend_from_slice(&peers);
    let app = TestApp::spawn_with(&env);
    let version = get(&app, &key, "/api/v1/system/version");
    assert!(version["data"]["backend"].as_str().unwrap().starts_with("postgresql"), "{version}");
    assert_eq!(
        get(&app, &key, &format!("{NEWS}/members?limit=100"))["data"],
        members,
        "the same members, statuses and all"
    );
    for (status, n) in [("active", 2), ("pending", 1), ("disabled", 1), ("unsubscribed", 1), ("removed", 1)] {
        let page = get(&app, &key, &format!("{NEWS}/members?status={status}"));
        assert_eq!(page["meta"]["total"], n, "{status}: {page}");
    }
    assert_eq!(get(&app, &key, &format!("{NEWS}/sends/{send_id}"))["data"], send, "the same send");
    assert_eq!(get(&app, &key, "/api/v1/domains/example.org")["data"], domain, "the same domain, DKIM key included");
    let (status, _, jpeg) = app.client.request_bytes(
        "GET",
        &format!("/api/ocrs?ocrID={ocr_id}&action=jpegDownload"),
        &[("authorization", &format!("Bearer {key}"))],
        None,
    );
    assert_eq!(status, 200);
    assert!(jpeg == fixture("invoice-scan.jpg"), "the document's bytes were copied into the database");
    // The webhook secret, sealed by the SQLite data key, opens on PostgreSQL: the data key was
    // stored sealed by the master key. The ping is signed with the secret shown at creation.
    let r = post(&app, &format!("/api/v1/webhooks/{hook_id}/test"), json!({}));
    assert_eq!(r.json()["data"]["delivered"], true, "{}", r.body);
    let ping = &receiver.wait_for(1, |r| r["path"] == "/copied")[0];
    assert_eq!(receiver.verify(&secret, ping)["as_received"], "ok");
    // New rows take ids after the copied ones.
    let r = post(&app, &format!("{NEWS}/members"), json!({ "email": "new@example.net" }));
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["data"]["member_id"], 7, "{}", r.body);
}

/// An installation made with the CLI: an account, a list and `members` members.
fn cli_installation(members: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = [("COURRIER_DATABASE_URL", "")];
    let run = |args: &[&str], stdin: Option<&str>| {
        let (status, stdout, stderr) = run_cli_in(dir.path(), args, &sqlite, stdin);
        assert!(status.success(), "{args:?}: {stdout}{stderr}");
    };
    run(
        &["user", "create", "--email", "admin@example.org", "--site-admin", "--password-stdin"],
        Some("pass-word-1234\n"),
    );
    run(&["domain", "create", "example.org"], None);
    let list = ["list", "create", "--domain", "example.org", "--list", "news", "--display-name", "News"];
    run(&[&list[..], &["--owner", "admin@example.org", "--subscription-policy", "open"]].concat(), None);
    let mut csv = String::from("email,display_name,delivery_mode\n");
    for i in 0..members {
        csv.push_str(&format!("m{i}@example.net,Member {i},{}\n", if i % 3 == 0 { "digest" } else { "regular" }));
    }
    let file = dir.path().join("members.csv");
    std::fs::write(&file, csv).unwrap();
    let import = ["members", "import", "--domain", "example.org", "--list", "news", "--consent-evidence", "test"];
    run(&[&import[..], &[file.to_str().unwrap()]].concat(), None);
    dir
}

#[test]
fn a_copy_stopped_half_way_continues_where_it_stopped_and_ends_with_the_counts_of_a_whole_copy() {
    let Some(pg) = postgres("store copy resume") else { return };
    let dir = cli_installation(9000);
    let (whole, resumed) = (pg.fresh_database().unwrap(), pg.fresh_database().unwrap());
    let (code, reference, stderr) = store_copy(dir.path(), &whole, &[]);
    assert_eq!(code, 0, "{stderr}");

    // Stopped in the middle of the members (as a killed copy: each batch is committed on its own;
    // before them, a batch each of users, roles, audit_log, domains, lists and consents, and five
    // of the outbox's 9000 events).
    let (code, _, stderr) = store_copy(dir.path(), &resumed, &[("COURRIER_STORE_COPY_STOP_AFTER_BATCHES", "13")]);
    assert_eq!(code, 70, "{stderr}");
    assert!(stderr.contains("stopped after 13 batches"), "{stderr}");
    let last = stderr.lines().rfind(|l| l.starts_with("store copy: ")).unwrap_or_default();
    assert!(last.ends_with(", members"), "stopped while copying the members: {stderr}");
    let (code, stdout, stderr) = store_copy(dir.path(), &resumed, &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("(a copy continued)"), "{stdout}");
    let table =
        |out: &str| out.lines().take_while(|l| !l.contains("copied by this run")).collect::<Vec<_>>().join("\n");
    assert_eq!(table(&stdout), table(&reference), "the same counts as a copy in one go");
    assert_eq!(counted(&stdout, "members"), (9000, 9000));
    let copied_now = |out: &str| {
        let line = out.lines().find(|l| l.contains("copied by this run")).unwrap();
        line.split_whitespace().next().unwrap().parse::<u64>().unwrap()
    };
    assert!(
        copied_now(&stdout) < copied_now(&reference),
        "the second run copied only the rest:\n{stdout}\n{reference}"
    );
    // Finished: a third run has nothing to do, and says so.
    let (code, _, stderr) = store_copy(dir.path(), &resumed, &[]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("already holds a finished copy"), "{stderr}");
}

#[test]
fn store_copy_refuses_another_installations_database_no_master_key_an_unreachable_server_and_a_non_postgres_url() {
    let Some(pg) = postgres("store copy refusals") else { return };
    let (one, other) = (cli_installation(3), cli_installation(2));
    let db = pg.fresh_database().unwrap();
    assert_eq!(store_copy(other.path(), &db, &[]).0, 0);
    let json = |dir: &Path, url: &str, extra: &[(&str, &str)]| {
        let key = master_key();
        let mut env = vec![("COURRIER_DATABASE_URL", ""), ("COURRIER_MASTER_KEY", key.as_str())];
        env.extend_from_slice(extra);
        let (status, _, stderr) = run_cli_in(dir, &["--json", "store", "copy", "--to", url], &env, None);
        let err: Value = serde_json::from_str(stderr.lines().last().unwrap_or_default()).unwrap_or(Value::Null);
        (status.code().unwrap_or(-1), err["error"]["code"].as_str().unwrap_or_default().to_owned(), stderr)
    };
    // A database holding another installation: refused, nothing written (the other's copy is
    // still finished and whole).
    let (code, error, stderr) = json(one.path(), &db, &[]);
    assert_eq!((code, error.as_str()), (4, "conflict"), "{stderr}");
    assert!(stderr.contains("not empty") && stderr.contains("another installation"), "{stderr}");
    let (code, _, stderr) = store_copy(other.path(), &db, &[]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("finished copy"), "{stderr}");

    let fresh = pg.fresh_database().unwrap();
    let (code, error, stderr) = json(one.path(), &fresh, &[("COURRIER_MASTER_KEY", "")]);
    assert_eq!((code, error.as_str()), (1, "validation_failed"), "{stderr}");
    assert!(stderr.contains("COURRIER_MASTER_KEY is required"), "{stderr}");

    let unreachable = format!("postgres://courrier@127.0.0.1:{}/nowhere", free_port());
    let (code, error, stderr) = json(one.path(), &unreachable, &[]);
    assert_eq!((code, error.as_str()), (69, "storage_unavailable"), "{stderr}");
    assert!(stderr.contains("cannot open the database"), "{stderr}");

    let (code, error, stderr) = json(one.path(), "mysql://root@127.0.0.1/courrier", &[]);
    assert_eq!((code, error.as_str()), (1, "validation_failed"), "{stderr}");
    assert!(stderr.contains("--to is not valid: it is not a postgres://"), "{stderr}");

    // The refusals wrote nothing: the fresh database takes the copy.
    let (code, stdout, stderr) = store_copy(one.path(), &fresh, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(counted(&stdout, "members"), (3, 3));
}

/// The copy reads one snapshot of the SQLite file: made while the server goes on adding members,
/// every count it verifies is the snapshot's, and the copy is whole and verified.
#[test]
fn a_copy_made_while_the_sqlite_server_adds_members_is_one_consistent_snapshot() {
    let Some(pg) = postgres("store copy of a running server") else { return };
    let source = TestApp::spawn_with(&[("COURRIER_DATABASE_URL", ""), ("COURRIER_LMTP_LISTEN", "off")]);
    let admin = make_user(&source.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&source.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&source.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    let mut csv = String::from("email,display_name,delivery_mode\n");
    for i in 0..20_000 {
        csv.push_str(&format!("m{i}@example.net,,regular\n"));
    }
    let file = source.dir.path().join("members.csv");
    std::fs::write(&file, csv).unwrap();
    let import = ["members", "import", "--domain", "example.org", "--list", "news", "--consent-evidence", "test"];
    let (status, _, stderr) = run_cli_in(
        source.dir.path(),
        &[&import[..], &[file.to_str().unwrap()]].concat(),
        &[("COURRIER_DATABASE_URL", "")],
        None,
    );
    assert!(status.success(), "{stderr}");

    let writing = std::sync::atomic::AtomicBool::new(true);
    let target = pg.fresh_database().unwrap();
    let (added, (code, stdout, stderr)) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0;
            while writing.load(std::sync::atomic::Ordering::Relaxed) {
                let r = call(
                    &source,
                    "POST",
                    &format!("{NEWS}/members"),
                    &[bearer(&key)],
                    Some(&json!({ "email": format!("late{n}@example.net") })),
                );
                assert_eq!(r.status, 201, "{}", r.body);
                n += 1;
            }
            n
        });
        // Some members added before the copy begins, more while it runs.
        while call(&source, "GET", &format!("{NEWS}/members?email_contains=late"), &[bearer(&key)], None).json()["meta"]
            ["total"]
            == 0
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let copied = store_copy(source.dir.path(), &target, &[]);
        writing.store(false, std::sync::atomic::Ordering::Relaxed);
        (writer.join().unwrap(), copied)
    });
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("verified: every count matches"), "{stdout}");
    let (sqlite, postgres) = counted(&stdout, "members");
    assert_eq!(sqlite, postgres);
    assert!(sqlite > 20_000 && sqlite <= 20_000 + added, "{sqlite} of {} members", 20_000 + added);
    assert_eq!(counted(&stdout, "member_tallies (members counted)"), (sqlite, sqlite), "{stdout}");
}
