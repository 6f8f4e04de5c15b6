//! Mail-account credentials against real servers on 127.0.0.1, each a scratch process the test
//! starts and kills: Dovecot (IMAP, STARTTLS and TLS, a CA of its own) and an aiosmtpd submission
//! server requiring AUTH (TLS, STARTTLS, or no TLS at all). Courrier trusts their CAs through
//! `COURRIER_EXTRA_CA`; loopback is allowed by `COURRIER_EGRESS_ALLOW`, as in production it would
//! not be; the passwords are sealed by a keyring file (`COURRIER_KEYRING`).

use crate::access::{bearer, call, make_key, make_list, make_user};
use courrier_benches::mailpeers::{Dovecot, Mode, PASSWORD, Submission, USER};
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_tests::harness::{Resp, SmtpSink, TestApp, venv_python};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

struct World {
    app: TestApp,
    key: String,
    relay: SmtpSink,
    _files: tempfile::TempDir,
}

fn python() -> std::path::PathBuf {
    venv_python("aiosmtpd")
}

/// A keyring file of two keys (the first seals), and a PEM file of the given CAs.
fn files(cas: &[&Path]) -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let keyring = dir.path().join("keyring");
    std::fs::write(
        &keyring,
        "# courrier test keyring\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n\
         ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n",
    )
    .unwrap();
    let bundle = dir.path().join("cas.pem");
    let pem: String = cas.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    std::fs::write(&bundle, pem).unwrap();
    (dir, keyring.display().to_string(), bundle.display().to_string())
}

fn world(cas: &[&Path], keyring: bool) -> World {
    let relay = SmtpSink::start();
    let (dir, ring, bundle) = files(cas);
    let url = relay.url();
    let mut env = vec![
        ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ("COURRIER_SMTP_URL", url.as_str()),
        ("COURRIER_RETRY_BASE_SECS", "1"),
    ];
    if keyring {
        env.push(("COURRIER_KEYRING", ring.as_str()));
    }
    if !cas.is_empty() {
        env.push(("COURRIER_EXTRA_CA", bundle.as_str()));
    }
    let app = TestApp::spawn_with(&env);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    World { app, key, relay, _files: dir }
}

fn req(w: &World, method: &str, path: &str, body: Option<Value>) -> Resp {
    call(&w.app, method, path, &[bearer(&w.key)], body.as_ref())
}

fn put(w: &World, kind: &str, body: Value) -> Resp {
    req(w, "PUT", &format!("{NEWS}/credentials/{kind}"), Some(body))
}

fn test(w: &World, kind: &str) -> Resp {
    req(w, "POST", &format!("{NEWS}/credentials/{kind}/test"), None)
}

fn listed(w: &World, kind: &str) -> Value {
    let r = req(w, "GET", &format!("{NEWS}/credentials"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["data"].as_array().unwrap().iter().find(|c| c["kind"] == kind).cloned().unwrap_or(Value::Null)
}

fn imap(port: u16, security: &str, password: &str, folder: &str) -> Value {
    json!({ "host": "127.0.0.1", "port": port, "security": security, "username": USER, "password": password, "folder": folder })
}

fn smtp(port: impl Into<u32>, security: &str, password: &str) -> Value {
    json!({ "host": "127.0.0.1", "port": port.into(), "security": security, "username": USER, "password": password })
}

#[test]
fn an_imap_mailbox_and_a_submission_account_pass_their_test_over_tls_and_starttls() {
    let dovecot = Dovecot::start().unwrap();
    let sub_tls = Submission::start(&python(), Mode::Tls).unwrap();
    let sub_starttls = Submission::start(&python(), Mode::StartTls).unwrap();
    let dca = &dovecot.ca.as_ref().unwrap().ca_pem;
    let w = world(&[dca, &sub_tls.ca.ca_pem, &sub_starttls.ca.ca_pem], true);

    for (port, security) in [(dovecot.imap_port, "starttls"), (dovecot.imaps_port, "tls")] {
        let r = put(&w, "ingest", imap(port, security, PASSWORD, "INBOX"));
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(!r.body.contains(PASSWORD), "{}", r.body);
        let d = r.json()["data"].clone();
        assert_eq!(
            (d["kind"].as_str(), d["security"].as_str(), d["folder"].as_str()),
            (Some("ingest"), Some(security), Some("INBOX"))
        );
        assert!(d["last_ok_at"].is_null());
        let t = test(&w, "ingest");
        assert_eq!(t.status, 200, "{security}: {}\n{}", t.body, dovecot.log());
        assert_eq!(t.json()["data"], json!({ "ok": true }));
        assert!(listed(&w, "ingest")["last_ok_at"].is_string(), "the outcome is recorded");
    }
    // The test selected the folder and fetched nothing: Dovecot logged a login and no fetch.
    assert!(dovecot.log().contains("Login: user=<lists@example.org>"), "{}", dovecot.log());

    for (peer, security) in [(&sub_tls, "tls"), (&sub_starttls, "starttls")] {
        let r = put(&w, "submission", smtp(peer.port, security, PASSWORD));
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.json()["data"]["folder"].is_null());
        let t = test(&w, "submission");
        assert_eq!(t.status, 200, "{security}: {}\n{}", t.body, peer.log());
        assert_eq!(peer.count(), 0, "the test sends nothing");
    }
    let all = req(&w, "GET", &format!("{NEWS}/credentials"), None);
    assert_eq!(all.json()["data"].as_array().unwrap().len(), 2);
    assert!(!all.body.contains(PASSWORD) && !all.body.contains("password"), "{}", all.body);
}

#[test]
fn a_credential_update_without_password_keeps_it_and_an_empty_one_is_refused() {
    let dovecot = Dovecot::start().unwrap();
    let w = world(&[&dovecot.ca.as_ref().unwrap().ca_pem], true);
    assert_eq!(put(&w, "ingest", imap(dovecot.imaps_port, "tls", PASSWORD, "INBOX")).status, 200);
    // No password on update: the stored one is kept, and still opens the mailbox.
    let mut body = imap(dovecot.imap_port, "starttls", PASSWORD, "INBOX");
    body.as_object_mut().unwrap().remove("password");
    let r = put(&w, "ingest", body.clone());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["data"]["port"], dovecot.imap_port);
    assert_eq!(test(&w, "ingest").status, 200, "{}", dovecot.log());
    // An empty password is refused, and changes nothing.
    body["password"] = json!("");
    put(&w, "ingest", body).expect_error(422, "validation_failed");
    assert_eq!(test(&w, "ingest").status, 200);
    // A new credential needs its password.
    let mut fresh = smtp(2525u16, "tls", "x");
    fresh.as_object_mut().unwrap().remove("password");
    put(&w, "submission", fresh).expect_error(422, "validation_failed");
    // The folder is an ingest field.
    let mut with_folder = smtp(2525u16, "tls", "x");
    with_folder["folder"] = json!("INBOX");
    put(&w, "submission", with_folder).expect_error(422, "validation_failed");
    // Any other kind is not found, on every route.
    put(&w, "pop3", smtp(2525u16, "tls", "x")).expect_error(404, "not_found");
    req(&w, "DELETE", &format!("{NEWS}/credentials/pop3"), None).expect_error(404, "not_found");
    req(&w, "POST", &format!("{NEWS}/credentials/imap/test"), None).expect_error(404, "not_found");
    // Bad values.
    put(&w, "submission", smtp(0u16, "tls", "x")).expect_error(422, "validation_failed");
    put(&w, "submission", smtp(70_000u32, "tls", "x")).expect_error(422, "validation_failed");
    put(&w, "submission", smtp(2525u16, "ssl", "x")).expect_error(422, "validation_failed");
    // Delete, then it is gone.
    assert_eq!(req(&w, "DELETE", &format!("{NEWS}/credentials/ingest"), None).status, 204);
    req(&w, "DELETE", &format!("{NEWS}/credentials/ingest"), None).expect_error(404, "not_found");
    test(&w, "ingest").expect_error(404, "not_found");
    assert_eq!(listed(&w, "ingest"), Value::Null);
}

#[test]
fn a_wrong_password_or_folder_is_422_echoing_the_provider_and_recorded() {
    let dovecot = Dovecot::start().unwrap();
    let sub = Submission::start(&python(), Mode::StartTls).unwrap();
    let w = world(&[&dovecot.ca.as_ref().unwrap().ca_pem, &sub.ca.ca_pem], true);

    assert_eq!(put(&w, "ingest", imap(dovecot.imaps_port, "tls", "not-the-password", "INBOX")).status, 200);
    let e = test(&w, "ingest").expect_error(422, "account_refused");
    let message = e["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("Authentication failed"), "{message}");
    assert!(!message.contains("not-the-password"), "{message}");
    let c = listed(&w, "ingest");
    assert!(c["last_error"].as_str().unwrap().contains("Authentication failed"), "{c}");
    assert!(c["last_error_at"].is_string() && c["last_ok_at"].is_null(), "{c}");

    assert_eq!(put(&w, "ingest", imap(dovecot.imaps_port, "tls", PASSWORD, "Archives")).status, 200);
    let e = test(&w, "ingest").expect_error(422, "account_refused");
    assert!(e["error"]["message"].as_str().unwrap().contains("Mailbox doesn't exist"), "{e}");
    assert!(listed(&w, "ingest")["last_error"].as_str().unwrap().contains("Mailbox doesn't exist"));

    assert_eq!(put(&w, "submission", smtp(sub.port, "starttls", "not-the-password")).status, 200);
    let e = test(&w, "submission").expect_error(422, "account_refused");
    assert!(e["error"]["message"].as_str().unwrap().contains("535"), "{e}");
    assert!(listed(&w, "submission")["last_error"].as_str().unwrap().contains("535"));
}

#[test]
fn an_untrusted_certificate_or_a_server_without_starttls_is_never_used() {
    // Trusted: only the submission CA. Dovecot's own CA is not in COURRIER_EXTRA_CA.
    let untrusted = Dovecot::start().unwrap();
    let no_tls = Dovecot::start_with(false).unwrap();
    let plain_smtp = Submission::start(&python(), Mode::Plain).unwrap();
    let trusted = Submission::start(&python(), Mode::Tls).unwrap();
    let w = world(&[&trusted.ca.ca_pem], true);

    assert_eq!(put(&w, "ingest", imap(untrusted.imaps_port, "tls", PASSWORD, "INBOX")).status, 200);
    let e = test(&w, "ingest").expect_error(422, "account_unreachable");
    assert!(e["error"]["message"].as_str().unwrap().contains("certificate"), "{e}");
    assert!(!untrusted.log().contains("Login: user="), "no password was sent: {}", untrusted.log());

    assert_eq!(put(&w, "ingest", imap(no_tls.imap_port, "starttls", PASSWORD, "INBOX")).status, 200);
    let e = test(&w, "ingest").expect_error(422, "account_refused");
    assert!(e["error"]["message"].as_str().unwrap().contains("does not offer STARTTLS"), "{e}");
    assert!(!no_tls.log().contains("Login: user="), "no login in plain text: {}", no_tls.log());

    assert_eq!(put(&w, "submission", smtp(plain_smtp.port, "starttls", PASSWORD)).status, 200);
    let e = test(&w, "submission").expect_error(422, "account_refused");
    assert!(e["error"]["message"].as_str().unwrap().contains("does not offer STARTTLS"), "{e}");
}

#[test]
fn a_host_on_a_private_address_is_refused() {
    let w = world(&[], true);
    for host in ["10.1.2.3", "192.168.0.10", "169.254.169.254", "0x7f.1.2.3.4", "[fd00::1]"] {
        let mut body = smtp(587u16, "starttls", "x");
        body["host"] = json!(host);
        let r = put(&w, "submission", body);
        assert_eq!(r.status, 422, "{host}: {}", r.body);
    }
    let mut body = smtp(587u16, "starttls", "x");
    body["host"] = json!("10.1.2.3");
    put(&w, "submission", body).expect_error(422, "url_refused");
    assert_eq!(listed(&w, "submission"), Value::Null, "nothing stored");
}

#[test]
fn without_a_keyring_credential_writes_are_503_and_the_rest_works() {
    let w = world(&[], false);
    put(&w, "ingest", imap(993, "tls", "x", "INBOX")).expect_error(503, "credential_keyring_missing");
    req(&w, "DELETE", &format!("{NEWS}/credentials/ingest"), None).expect_error(503, "credential_keyring_missing");
    let r = req(&w, "GET", &format!("{NEWS}/credentials"), None);
    assert_eq!((r.status, r.json()["data"].clone()), (200, json!([])));
    assert_eq!(req(&w, "GET", NEWS, None).status, 200);
}

#[test]
fn a_malformed_or_missing_keyring_stops_the_server_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, "c2hvcnQ=\n").unwrap();
    for path in [bad.display().to_string(), dir.path().join("absent").display().to_string()] {
        let env = |k: &str| match k {
            "COURRIER_LISTEN" => Some("127.0.0.1:0".to_owned()),
            "COURRIER_KEYRING" => Some(path.clone()),
            _ => None,
        };
        let config = courrier_cli::config::Config::from_env(env, Some(dir.path().join("data"))).unwrap();
        let err = match courrier_cli::server::bind(&config, courrier_cli::build_info()) {
            Ok(_) => panic!("the server started with the keyring {path}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("COURRIER_KEYRING"), "{err}");
        assert!(!err.contains("c2hvcnQ"), "the key's text is not echoed: {err}");
    }
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_send_to_a_list_with_a_submission_account_goes_out_authenticated_through_it_not_the_relay() {
    let sub = Submission::start(&python(), Mode::StartTls).unwrap();
    let w = world(&[&sub.ca.ca_pem], true);
    assert_eq!(put(&w, "submission", smtp(sub.port, "starttls", PASSWORD)).status, 200);
    for m in ["ann@example.net", "bob@example.net", "cy@example.com"] {
        assert_eq!(req(&w, "POST", &format!("{NEWS}/members"), Some(json!({ "email": m }))).status, 201);
    }
    let before = w.relay.messages().len(); // the owner's invitation went through the relay
    let r =
        req(&w, "POST", &format!("{NEWS}/sends"), Some(json!({ "subject": "Through the account", "text": "hello" })));
    assert_eq!(r.status, 202, "{}", r.body);
    wait_until("three copies at the submission server", Duration::from_secs(30), || sub.count() >= 3);
    let got = sub.messages();
    assert_eq!(got.len(), 3, "{}", sub.log());
    for m in &got {
        assert!(m.starts_with(&format!("X-Peer-Auth: {USER}\r\n")), "{m}");
        assert!(m.contains("Subject: Through the account"), "{m}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(w.relay.messages().len(), before, "no copy went through COURRIER_SMTP_URL");
}

#[test]
fn a_slowed_down_submission_account_keeps_its_copies_and_delivers_them_later() {
    let sub = Submission::start(&python(), Mode::Tls).unwrap();
    let w = world(&[&sub.ca.ca_pem], true);
    assert_eq!(put(&w, "submission", smtp(sub.port, "tls", PASSWORD)).status, 200);
    for m in ["ann@example.net", "bob@example.net"] {
        assert_eq!(req(&w, "POST", &format!("{NEWS}/members"), Some(json!({ "email": m }))).status, 201);
    }
    sub.throttle(true);
    let r = req(&w, "POST", &format!("{NEWS}/sends"), Some(json!({ "subject": "Later", "text": "x" })));
    let send = r.json()["data"]["send_id"].as_i64().unwrap();
    let status = |w: &World| req(w, "GET", &format!("{NEWS}/sends/{send}"), None).json()["data"].clone();
    wait_until("a copy deferred by the 451", Duration::from_secs(30), || {
        status(&w)["counts"]["deferred"].as_u64().unwrap_or(0) >= 1
    });
    assert_eq!(sub.count(), 0);
    sub.throttle(false);
    wait_until("both copies delivered once the account takes mail again", Duration::from_secs(60), || sub.count() >= 2);
    assert_eq!(sub.count(), 2);
}

#[test]
fn the_database_and_its_wal_never_hold_a_password_in_clear() {
    if courrier_tests::harness::skip_on_postgres("reads the SQLite file and its WAL") {
        return;
    }
    let dovecot = Dovecot::start().unwrap();
    let sub = Submission::start(&python(), Mode::Tls).unwrap();
    let w = world(&[&dovecot.ca.as_ref().unwrap().ca_pem, &sub.ca.ca_pem], true);
    assert_eq!(put(&w, "ingest", imap(dovecot.imaps_port, "tls", PASSWORD, "INBOX")).status, 200);
    assert_eq!(test(&w, "ingest").status, 200);
    assert_eq!(put(&w, "submission", smtp(sub.port, "tls", PASSWORD)).status, 200);
    assert_eq!(test(&w, "submission").status, 200);
    let wrong = "Wr0ng-but-secret-too";
    assert_eq!(put(&w, "ingest", imap(dovecot.imaps_port, "tls", wrong, "INBOX")).status, 200);
    assert_eq!(test(&w, "ingest").status, 422);
    let audit = req(&w, "GET", "/api/v1/audit?limit=500", None);
    assert!(audit.body.contains("credential.put"), "{}", audit.body);
    for file in ["courrier.db", "courrier.db-wal"] {
        let path = w.app.dir.path().join(file);
        let bytes = std::fs::read(&path).unwrap_or_default();
        if file == "courrier.db-wal" {
            assert!(!bytes.is_empty(), "the WAL holds the recent writes");
        }
        for secret in [PASSWORD, wrong] {
            let found = bytes.windows(secret.len()).any(|win| win == secret.as_bytes());
            assert!(!found, "{file} holds the password {secret} in clear");
        }
    }
    for secret in [PASSWORD, wrong] {
        assert!(!audit.body.contains(secret));
    }
}

/// APPENDs `message` to the account's INBOX with Python's imaplib (a client of its own, over TLS).
fn append(dovecot: &Dovecot, message: &str) {
    let script = "import imaplib, ssl, sys\n\
                  ctx = ssl.create_default_context(cafile=sys.argv[2])\n\
                  m = imaplib.IMAP4_SSL('127.0.0.1', int(sys.argv[1]), ssl_context=ctx)\n\
                  m.login(sys.argv[3], sys.argv[4])\n\
                  typ, data = m.append('INBOX', None, None, sys.stdin.buffer.read())\n\
                  assert typ == 'OK', data\n\
                  m.logout()\n";
    let mut child = std::process::Command::new("python3")
        .args(["-c", script, &dovecot.imaps_port.to_string()])
        .arg(&dovecot.ca.as_ref().unwrap().ca_pem)
        .args([USER, PASSWORD])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(message.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success(), "APPEND failed");
}

#[test]
fn a_post_appended_to_the_ingest_mailbox_reaches_the_members_and_leaves_the_mailbox() {
    let dovecot = Dovecot::start().unwrap();
    let w = world(&[&dovecot.ca.as_ref().unwrap().ca_pem], true);
    for m in ["ann@example.net", "bob@example.net"] {
        assert_eq!(req(&w, "POST", &format!("{NEWS}/members"), Some(json!({ "email": m }))).status, 201);
    }
    let r = put(&w, "ingest", imap(dovecot.imaps_port, "tls", PASSWORD, "INBOX"));
    assert_eq!(r.status, 200, "{}", r.body);
    let before = w.relay.messages().len();
    append(
        &dovecot,
        "From: Ann <ann@example.net>\r\nTo: news@example.org\r\nSubject: Fetched by IMAP\r\n\
         Message-ID: <imap-1@example.net>\r\nDate: Thu, 26 Nov 2026 09:00:00 +0000\r\n\r\nHello from the mailbox.\r\n",
    );
    wait_until("the post's copies at the relay", Duration::from_secs(60), || {
        w.relay.messages().iter().filter(|m| m.contains("Fetched by IMAP")).count() >= 2
    });
    wait_until("the mailbox emptied", Duration::from_secs(30), || dovecot.inbox_count() == 0);
    let copies: Vec<String> =
        w.relay.messages().into_iter().skip(before).filter(|m| m.contains("Fetched by IMAP")).collect();
    assert_eq!(copies.len(), 2, "one copy per member, the post once");
    assert!(copies.iter().all(|m| m.contains("Hello from the mailbox.")));
    assert!(listed(&w, "ingest")["last_error"].is_null(), "{}", listed(&w, "ingest"));
}

/// `courrier credential set|list|test|delete` on the server's own data directory: the password
/// comes from standard input and is never printed; what the command line does, the API shows.
#[test]
fn the_command_line_sets_lists_tests_and_deletes_an_account_without_printing_its_password() {
    let sub = Submission::start(&python(), Mode::Tls).unwrap();
    let w = world(&[&sub.ca.ca_pem], true);
    // The same keyring as the server's (`files` writes the same keys), so either opens what the
    // other sealed.
    let (_dir, ring, bundle) = files(&[&sub.ca.ca_pem]);
    let env = [
        ("COURRIER_KEYRING", ring.as_str()),
        ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ("COURRIER_EXTRA_CA", bundle.as_str()),
    ];
    let port = sub.port.to_string();
    let cli = |args: &[&str], stdin: Option<&str>| {
        let all: Vec<&str> = ["--json", "credential"].into_iter().chain(args.iter().copied()).collect();
        courrier_tests::harness::run_cli_in(w.app.dir.path(), &all, &env, stdin)
    };
    let set = |password: &str| {
        cli(
            &[
                "set",
                "--domain",
                "example.org",
                "--list",
                "news",
                "submission",
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--security",
                "tls",
                "--username",
                USER,
            ],
            Some(password),
        )
    };
    let on_news = ["--domain", "example.org", "--list", "news", "submission"];

    // Refusals first: nothing is stored by them.
    let (st, out, err) = cli(
        &[
            "set",
            "--domain",
            "example.org",
            "--list",
            "news",
            "outbox",
            "--host",
            "h",
            "--port",
            "1",
            "--username",
            "u",
        ],
        Some("pw"),
    );
    assert!(!st.success() && err.contains("ingest, submission"), "{out}{err}");
    let (st, _, err) = set("");
    assert!(!st.success() && err.contains("standard input"), "{err}");
    let (st, _, err) = cli(&["test", "--domain", "example.org", "--list", "news", "submission"], None);
    assert_eq!(st.code(), Some(3), "no account yet: not found; {err}");
    assert!(listed(&w, "submission").is_null());

    // A wrong password: stored, and its test fails with the provider's words, recorded.
    let (st, out, err) = set("not the password\n");
    assert!(st.success(), "{out}{err}");
    assert!(!out.contains("not the password") && !err.contains("not the password"), "{out}{err}");
    let (st, _, err) = cli(&[&["test"][..], &on_news[..]].concat(), None);
    assert!(!st.success(), "a refused login fails the command: {err}");
    assert!(listed(&w, "submission")["last_error"].is_string(), "the refusal is recorded");

    // The right one: the test opens a real authenticated session with the server.
    let (st, out, err) = set(&format!("{PASSWORD}\n"));
    assert!(st.success(), "{out}{err}");
    assert!(!out.contains(PASSWORD) && !err.contains(PASSWORD), "{out}{err}");
    let (st, out, err) = cli(&[&["test"][..], &on_news[..]].concat(), None);
    assert!(st.success(), "{out}{err}\n{}", sub.log());
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), json!({ "ok": true }));
    assert!(listed(&w, "submission")["last_ok_at"].is_string());

    let (st, out, _) = cli(&["list", "--domain", "example.org", "--list", "news"], None);
    assert!(st.success());
    assert!(!out.contains(PASSWORD), "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["data"][0]["kind"], "submission");
    assert_eq!(doc["data"][0]["username"], USER);

    let (st, _, err) = cli(&[&["delete"][..], &on_news[..]].concat(), None);
    assert!(st.success(), "{err}");
    assert!(listed(&w, "submission").is_null(), "gone for the API too");
    let (st, _, _) = cli(&[&["delete"][..], &on_news[..]].concat(), None);
    assert_eq!(st.code(), Some(3), "deleting it again: not found");
}
