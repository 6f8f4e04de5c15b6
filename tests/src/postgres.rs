//! Several servers on one PostgreSQL database (issue 25): each test starts a throw-away PostgreSQL
//! (Debian's binaries, `initdb` in a temporary directory) and two real servers on it: in process,
//! each with its own key cache and counters, through the same wiring `courrier serve` uses, or
//! `courrier serve` and `courrier worker` processes of the binary (a crash is a real `kill -9`).

use crate::ocr::{expect_refusal, fixture, make_user, upload};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::{Principal, keys};
use courrier_core::kernel::EventName;
use courrier_store_postgres::test_server::TestServer as PostgresTestServer;
use courrier_tests::harness::{Client, ProcessApp, Resp, SmtpSink, TestApp, courrier_bin, run_cli, run_cli_with_stdin};
use courrier_tests::peers::{DnsServer, Receiver};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A master key as an operator makes one (`openssl rand -base64 32`).
fn master_key() -> String {
    B64.encode([0x5a; 32])
}

/// A database and the settings of every server on it.
fn installation(pg: &PostgresTestServer) -> Vec<(&'static str, String)> {
    vec![
        ("COURRIER_DATABASE_URL", pg.fresh_database().unwrap()),
        ("COURRIER_MASTER_KEY", master_key()),
        ("COURRIER_DELIVERY_WORKERS", "0".into()),
        ("COURRIER_LMTP_LISTEN", "off".into()),
    ]
}

fn server(env: &[(&'static str, String)]) -> TestApp {
    let vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    TestApp::spawn_with(&vars)
}

fn key(app: &TestApp, user: &courrier_core::access::model::User, rate: u32) -> keys::CreatedKey {
    let new = keys::NewKey::parse("k".into(), "user", None, None, &["read".into()], None, Some(rate)).unwrap();
    keys::create_for(&app.core.access, &Principal::operator(), &RequestCtx::cli(), user, &[], new).unwrap()
}

fn get(app: &TestApp, path: &str, secret: &str) -> courrier_tests::harness::Resp {
    app.client.request("GET", path, &[("authorization", &format!("Bearer {secret}"))], None)
}

/// Both servers name PostgreSQL; a document uploaded on one is read, bytes and record, on the
/// other (the bytes are in the database: no documents directory exists on either).
#[test]
fn a_document_uploaded_on_one_server_is_downloaded_from_the_other() {
    let pg = PostgresTestServer::start().unwrap();
    let env = installation(&pg);
    let (one, two) = (server(&env), server(&env));
    let failed = upload_on_one_download_on_two(&one, &two);
    for app in [&one, &two] {
        assert!(!app.dir.path().join("documents").exists(), "no documents directory on PostgreSQL");
    }
    assert_eq!(failed_paths(&env), [(failed, None)], "the operator is told the file is in the database");
}

/// `courrier ocr failed --json` on the installation: each document's ocrID and stored file.
fn failed_paths(env: &[(&'static str, String)]) -> Vec<(String, Option<String>)> {
    let vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, stdout, stderr) = run_cli(&["--json", "ocr", "failed"], &vars);
    assert!(status.success(), "{stderr}");
    let listed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let items = listed["items"].as_array().unwrap();
    items.iter().map(|d| (d["ocrID"].as_str().unwrap().to_owned(), d["path"].as_str().map(str::to_owned))).collect()
}

/// With `COURRIER_DOCUMENTS_DIR` (a directory every server mounts) the bytes are files there,
/// named by their SHA-256, and the other server reads them from it.
#[test]
fn documents_in_a_shared_directory_are_read_by_every_server() {
    let pg = PostgresTestServer::start().unwrap();
    let shared = tempfile::tempdir().unwrap();
    let mut env = installation(&pg);
    env.push(("COURRIER_DOCUMENTS_DIR", shared.path().display().to_string()));
    let (one, two) = (server(&env), server(&env));
    upload_on_one_download_on_two(&one, &two);
    let blob = courrier_core::ocr::blobs::BlobId::of(&fixture("truncated.pdf"));
    let (head, rest) = blob.as_str().split_at(2);
    let file = shared.path().join(head).join(rest);
    assert_eq!(std::fs::read(&file).unwrap(), fixture("truncated.pdf"), "the upload is a file of the shared directory");
    assert_eq!(failed_paths(&env)[0].1.as_deref(), Some(file.to_str().unwrap()));
}

/// Uploads a scanned PDF (storeOnly) through `one`; `two` finds its record and downloads its page
/// byte for byte. Then keeps a truncated PDF (ocrFailed) through `one`: its ocrID.
fn upload_on_one_download_on_two(one: &TestApp, two: &TestApp) -> String {
    let user = make_user(&one.core, "ada@example.org");
    let secret = key(one, &user, 10_000).secret;
    for app in [one, two] {
        let version = get(app, "/api/v1/system/version", &secret).json();
        let backend = version["data"]["backend"].as_str().unwrap_or_default().to_owned();
        assert!(backend.starts_with("postgresql 1"), "{version}");
    }
    let resp = upload(
        one,
        &secret,
        "invoice-scan.pdf",
        &fixture("invoice-scan.pdf"),
        &[("lang", "fr"), ("action", "storeOnly")],
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
    let ocr_id = resp.json()["ocrID"].as_str().unwrap().to_owned();
    let found = get(two, &format!("/api/ocrs?ocrID={ocr_id}"), &secret);
    assert_eq!(found.status, 200, "{}", found.body);
    assert_eq!(found.json()["ocrID"], ocr_id.as_str());
    let (status, _, jpeg) = two.client.request_bytes(
        "GET",
        &format!("/api/ocrs?ocrID={ocr_id}&action=jpegDownload"),
        &[("authorization", &format!("Bearer {secret}"))],
        None,
    );
    assert_eq!(status, 200);
    assert!(jpeg == fixture("invoice-scan.jpg"), "the other server read the stored bytes back");
    // And one kept for staff analysis, as the operator lists them.
    let resp = upload(one, &secret, "odd.pdf", &fixture("truncated.pdf"), &[("lang", "fr"), ("action", "ocrFailed")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    resp.json()["ocrID"].as_str().unwrap().to_owned()
}

/// A key's quota is one quota for the installation: requests on either server spend it, the next
/// one is refused on either; a key revoked on one server is refused by the other at its next
/// request, though the other had it cached.
#[test]
fn two_servers_share_a_keys_quota_and_its_revocation() {
    let pg = PostgresTestServer::start().unwrap();
    let env = installation(&pg);
    let (one, two) = (server(&env), server(&env));
    let user = make_user(&one.core, "bob@example.org");
    let limited = key(&one, &user, 3).secret;
    for app in [&one, &two, &one] {
        assert_eq!(get(app, "/api/v1/system/version", &limited).status, 200);
    }
    let refused = get(&two, "/api/v1/system/version", &limited);
    refused.expect_error(429, "rate_limited");
    get(&one, "/api/v1/system/version", &limited).expect_error(429, "rate_limited");

    let revoked = key(&one, &user, 10_000);
    assert_eq!(
        get(&two, "/api/v1/system/version", &revoked.secret).status,
        200,
        "the other server knows and caches it"
    );
    assert_eq!(get(&two, "/api/v1/system/version", &revoked.secret).status, 200);
    keys::revoke(&one.core.access, &Principal::operator(), &RequestCtx::cli(), revoked.key.id).unwrap();
    get(&two, "/api/v1/system/version", &revoked.secret).expect_error(401, "unauthenticated");
    let resp = get(&two, "/api/ocrs?ocrID=00000000000000000000000000000000", &revoked.secret);
    expect_refusal(&resp, 401, "unauthenticated");
}

/// A server on PostgreSQL without the master key, or with a malformed one, refuses to start,
/// naming the variable, before it creates or connects to anything; with another installation's
/// master key it refuses naming it too.
#[test]
fn a_server_on_postgres_refuses_to_start_without_the_right_master_key() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let unreachable = ("COURRIER_DATABASE_URL", "postgres://courrier:pw-s3cret@127.0.0.1:1/courrier");
    for command in [&["serve"][..], &["worker"], &["user", "create", "--email", "a@example.org"]] {
        let args: Vec<&str> =
            ["--data-dir", data.to_str().unwrap()].into_iter().chain(command.iter().copied()).collect();
        let (status, stdout, stderr) = run_cli(&args, &[unreachable]);
        assert_eq!(status.code(), Some(1), "{command:?}: {stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.starts_with("courrier: COURRIER_MASTER_KEY is required"), "{stderr}");
        assert!(stderr.contains("openssl rand -base64 32") && !stderr.contains("pw-s3cret"), "{stderr}");
        assert!(!data.exists(), "{command:?} created the data directory before refusing");
        let short = B64.encode([1u8; 16]);
        let (status, _, stderr) = run_cli(&args, &[unreachable, ("COURRIER_MASTER_KEY", &short)]);
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("courrier: COURRIER_MASTER_KEY is not valid: it holds 16 bytes"), "{stderr}");
        assert!(!stderr.contains(&short), "the value is not echoed: {stderr}");
    }
    let pg = PostgresTestServer::start().unwrap();
    let env = installation(&pg);
    let url = env[0].1.clone();
    let (status, _, stderr) =
        run_cli(&["audit"], &[("COURRIER_DATABASE_URL", &url), ("COURRIER_MASTER_KEY", &master_key())]);
    assert!(status.success(), "the first process seals the data key: {stderr}");
    let other = B64.encode([0x11; 32]);
    let (status, _, stderr) = run_cli(&["audit"], &[("COURRIER_DATABASE_URL", &url), ("COURRIER_MASTER_KEY", &other)]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("courrier: COURRIER_MASTER_KEY is not valid: it does not open the data key"),
        "{stderr}"
    );
}

/// `courrier version` names the backend the configuration points at, asking the server only.
#[test]
fn courrier_version_names_postgresql_with_a_database_url() {
    let pg = PostgresTestServer::start().unwrap();
    let url = pg.fresh_database().unwrap();
    let (status, stdout, stderr) = run_cli(&["version"], &[("COURRIER_DATABASE_URL", &url)]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("backend  postgresql 1"), "{stdout}");
    let (status, stdout, _) =
        run_cli(&["version"], &[("COURRIER_DATABASE_URL", "postgres://courrier:secret@127.0.0.1:1/courrier")]);
    assert!(status.success());
    assert!(
        stdout.contains("backend  postgresql at postgres://courrier:***@127.0.0.1:1/courrier (not reachable"),
        "{stdout}"
    );
}

// Several `courrier serve` and `courrier worker` processes on one database: writes seen
// everywhere, a send delivered once, a crash mid-send, one Idempotency-Key on two servers.

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

/// A throw-away PostgreSQL server, or `None` (with a note) where no PostgreSQL binaries are
/// installed: CI installs them (`scripts/setup-system --test`); elsewhere these tests are skipped.
fn postgres() -> Option<PostgresTestServer> {
    match PostgresTestServer::start() {
        Ok(pg) => Some(pg),
        Err(e) if e.to_string().starts_with("no PostgreSQL binaries") => {
            eprintln!("not run: {e}");
            None
        }
        Err(e) => panic!("the test PostgreSQL server does not start: {e}"),
    }
}

fn vars<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// `env` with `extra` set (replacing what `env` had of them).
fn with(env: &[(&'static str, String)], extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut all: Vec<(&'static str, String)> =
        env.iter().filter(|(k, _)| !extra.iter().any(|(e, _)| e == k)).cloned().collect();
    all.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    all
}

/// A real `courrier serve` process of the installation.
fn serve(env: &[(&'static str, String)]) -> ProcessApp {
    ProcessApp::spawn(&vars(&with(env, &[("COURRIER_LOG", "warn")])))
}

/// A `courrier worker` process of the installation (delivery, webhooks, periodic jobs), killed
/// on drop.
struct Worker {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn worker(env: &[(&'static str, String)]) -> Worker {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(courrier_bin())
        .arg("--data-dir")
        .arg(dir.path())
        .arg("worker")
        .env_remove("COURRIER_DATA_DIR")
        .env("COURRIER_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("courrier worker starts");
    Worker { child, _dir: dir }
}

fn request(client: &Client, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&Value>) -> Resp {
    let mut h = headers.to_vec();
    if body.is_some() {
        h.push(("content-type", "application/json"));
    }
    let bytes = body.map(|b| b.to_string().into_bytes());
    client.request(method, path, &h, bytes.as_deref())
}

/// A request with an API key.
fn api(client: &Client, key: &str, method: &str, path: &str, body: Option<&Value>) -> Resp {
    request(client, method, path, &[("authorization", &format!("Bearer {key}"))], body)
}

fn data(resp: &Resp, status: u16) -> Value {
    assert_eq!(resp.status, status, "{}", resp.body);
    resp.json()["data"].clone()
}

/// The operator's first account (`courrier user create --site-admin`, as an installation
/// starts), then, through `one`, its session and, through `two`, an API key made with that
/// session: an administrator's session and CSRF token opened on one server serve on the other.
fn site_admin_key(env: &[(&'static str, String)], one: &Client, two: &Client) -> String {
    let (status, _, stderr) = run_cli_with_stdin(
        &["user", "create", "--email", "admin@example.org", "--password-stdin", "--site-admin"],
        &vars(env),
        Some("a long enough password"),
    );
    assert!(status.success(), "{stderr}");
    let login = one.post_json(
        "/api/v1/auth/login",
        &json!({ "email": "admin@example.org", "password": "a long enough password" }),
    );
    let csrf = data(&login, 200)["csrf_token"].as_str().unwrap().to_owned();
    let cookie = login.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
    let body = json!({ "name": "ops", "scope_kind": "user", "perms": ["read", "members:write", "send", "moderate", "manage"] });
    let without_csrf = request(two, "POST", "/api/v1/apikeys", &[("cookie", &cookie)], Some(&body));
    without_csrf.expect_error(403, "csrf_failed");
    let created = request(two, "POST", "/api/v1/apikeys", &[("cookie", &cookie), ("x-csrf-token", &csrf)], Some(&body));
    data(&created, 201)["secret"].as_str().unwrap().to_owned()
}

/// The domain `example.org` and its open list `news` (a member added is active), through `client`.
fn news_list(client: &Client, key: &str) {
    data(&api(client, key, "POST", "/api/v1/domains", Some(&json!({ "name": "example.org" }))), 201);
    let list = json!({
        "name": "news", "display_name": "News", "owner_email": "admin@example.org", "subscription_policy": "open"
    });
    data(&api(client, key, "POST", "/api/v1/domains/example.org/lists", Some(&list)), 201);
}

/// Two `courrier serve` processes on one database: what one writes, the other reads at its next
/// request, and the other way round; sessions, CSRF tokens and mailed login links are the
/// installation's, not a process's, so a load balancer may send each request anywhere.
#[test]
fn two_serve_processes_on_one_database_see_each_others_writes() {
    let Some(pg) = postgres() else { return };
    let sink = SmtpSink::start();
    let env = with(&installation(&pg), &[("COURRIER_SMTP_URL", &sink.url())]);
    let (one, two) = (serve(&env), serve(&env));
    let key = site_admin_key(&env, &one.client, &two.client);

    // A list and a member made on one, listed on the other.
    news_list(&one.client, &key);
    let member = json!({ "email": "sub@example.net", "name": "Sub" });
    let added = data(&api(&one.client, &key, "POST", &format!("{NEWS}/members"), Some(&member)), 201);
    assert_eq!(added["status"], "active");
    let lists = data(&api(&two.client, &key, "GET", "/api/v1/domains/example.org/lists", None), 200);
    assert_eq!(lists.as_array().unwrap().iter().filter(|l| l["name"] == "news").count(), 1, "{lists}");
    let members = data(&api(&two.client, &key, "GET", &format!("{NEWS}/members"), None), 200);
    let listed: Vec<&str> = members.as_array().unwrap().iter().map(|m| m["email"].as_str().unwrap()).collect();
    assert_eq!(listed, ["sub@example.net"]);
    // The same member added again on the other server is the one already there.
    api(&two.client, &key, "POST", &format!("{NEWS}/members"), Some(&member)).expect_error(409, "already_subscribed");

    // The list changed on two; one reads the change.
    let patch = json!({ "subject_tag": "[news]" });
    data(&api(&two.client, &key, "PATCH", NEWS, Some(&patch)), 200);
    let list = data(&api(&one.client, &key, "GET", NEWS, None), 200);
    assert_eq!(list["subject_tag"], "[news]", "{list}");
    let list_id = list["id"].as_i64().unwrap();

    // The member asks one for a login link; the mailed link opens a session on two; that
    // session, with its CSRF token, changes the member's delivery on one; two lists the change.
    let asked = one.client.post_json("/api/v1/me/login-link", &json!({ "email": "sub@example.net" }));
    assert_eq!(asked.status, 202, "{}", asked.body);
    let mail = sink.wait_for(1, Duration::from_secs(30)).remove(0);
    let token = crate::subscribers::link_path(&mail, "/p/me/login/").trim_start_matches("/p/me/login/").to_owned();
    let opened = two.client.post_json("/api/v1/me/session", &json!({ "token": token }));
    let csrf = data(&opened, 200)["csrf_token"].as_str().unwrap().to_owned();
    let cookie = opened.header("set-cookie").unwrap().split(';').next().unwrap().to_owned();
    one.client.post_json("/api/v1/me/session", &json!({ "token": token })).expect_error(401, "unauthenticated");
    let mine = request(&one.client, "GET", "/api/v1/me/subscriptions", &[("cookie", &cookie)], None);
    assert_eq!(data(&mine, 200)[0]["list_id"], list_id);
    let path = format!("/api/v1/me/subscriptions/{list_id}");
    let digest = json!({ "delivery_mode": "digest" });
    request(&one.client, "PATCH", &path, &[("cookie", &cookie), ("x-csrf-token", "forged")], Some(&digest))
        .expect_error(403, "csrf_failed");
    let changed = request(&one.client, "PATCH", &path, &[("cookie", &cookie), ("x-csrf-token", &csrf)], Some(&digest));
    assert_eq!(changed.status, 200, "{}", changed.body);
    let seen = data(&api(&two.client, &key, "GET", &format!("{NEWS}/members/sub%40example.net"), None), 200);
    assert_eq!(seen["delivery_mode"], "digest", "{seen}");
    // Signed out on two, the session is gone on one too.
    let out = request(&two.client, "POST", "/api/v1/me/logout", &[("cookie", &cookie)], None);
    assert_eq!(out.status, 204, "{}", out.body);
    request(&one.client, "GET", "/api/v1/me/subscriptions", &[("cookie", &cookie)], None)
        .expect_error(401, "unauthenticated");
}

/// `n` regular members of `news`, imported through `client`.
fn import_members(client: &Client, key: &str, n: usize) -> Vec<String> {
    let addresses: Vec<String> = (0..n).map(|i| format!("m{i:04}@example.net")).collect();
    let csv = std::iter::once("email,display_name,delivery_mode".to_owned())
        .chain(addresses.iter().map(|a| format!("{a},,regular")))
        .collect::<Vec<_>>()
        .join("\r\n");
    let resp = client.request(
        "POST",
        &format!("{NEWS}/members/import?consent_evidence=signed%20forms"),
        &[("authorization", &format!("Bearer {key}")), ("content-type", "text/csv")],
        Some(csv.as_bytes()),
    );
    assert_eq!(data(&resp, 200)["added"], n, "{}", resp.body);
    addresses
}

fn submit(client: &Client, key: &str, subject: &str, idempotency: Option<&str>) -> Resp {
    let auth = format!("Bearer {key}");
    let mut headers = vec![("authorization", auth.as_str())];
    if let Some(k) = idempotency {
        headers.push(("idempotency-key", k));
    }
    request(
        client,
        "POST",
        &format!("{NEWS}/sends"),
        &headers,
        Some(&json!({ "subject": subject, "text": "Hello all" })),
    )
}

/// Polls the send through `client` until `done` holds of it (at most `within`).
fn wait_send(client: &Client, key: &str, id: i64, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let s = data(&api(client, key, "GET", &format!("{NEWS}/sends/{id}"), None), 200);
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "the send did not get there within {within:?}: {s}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How many copies of the send with `subject` each address received at the sink.
fn copies_by_recipient(sink: &SmtpSink, subject: &str) -> HashMap<String, usize> {
    let mut by = HashMap::new();
    for m in sink.messages().iter().filter(|m| m.contains(&format!("Subject: {subject}"))) {
        let to = m.lines().find_map(|l| l.strip_prefix("X-RcptTo: ")).unwrap_or_default().to_owned();
        *by.entry(to).or_insert(0) += 1;
    }
    by
}

/// A send to a list of 300 with delivery workers in two servers and two `courrier worker`
/// processes on one database: every member gets exactly one copy at the SMTP server (the copies
/// are leased with `FOR UPDATE SKIP LOCKED`: no two processes claim one), and `send.completed`
/// reaches the webhook receiver once (the aggregate is recorded by whichever process settles
/// the send, guarded by the send's state change).
#[test]
fn a_send_with_workers_in_two_servers_and_two_worker_processes_delivers_each_copy_once() {
    let Some(pg) = postgres() else { return };
    let sink = SmtpSink::start();
    let receiver = Receiver::start();
    let dns = DnsServer::start(&["address=/hooks.test/127.0.0.1"]);
    let (ca, dns_addr, smtp) = (receiver.ca.ca_pem.display().to_string(), dns.addr(), sink.url());
    // Every process delivers mail and webhooks, so each is given the sink, the receiver's CA, the
    // DNS server naming it, and loopback egress.
    let env = with(
        &installation(&pg),
        &[
            ("COURRIER_SMTP_URL", &smtp),
            ("COURRIER_DELIVERY_WORKERS", "2"),
            ("COURRIER_EXTRA_CA", &ca),
            ("COURRIER_DNS_SERVER", &dns_addr),
            ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ],
    );
    let (one, two) = (serve(&env), serve(&env));
    let key = site_admin_key(&env, &one.client, &two.client);
    news_list(&one.client, &key);
    let url = format!("https://hooks.test:{}/ok", receiver.port);
    let hook = json!({ "url": url, "events": ["send.completed"] });
    data(&api(&two.client, &key, "POST", "/api/v1/webhooks", Some(&hook)), 201);
    let addresses = import_members(&two.client, &key, 300);
    let _workers = (worker(&env), worker(&env));

    let submitted = data(&submit(&one.client, &key, "To all three hundred", None), 202);
    let id = submitted["send_id"].as_i64().unwrap();
    assert_eq!(submitted["recipients"], 300);
    let s = wait_send(&two.client, &key, id, Duration::from_secs(300), |s| s["state"] == "completed");
    assert_eq!(s["counts"]["sent"], 300, "{s}");
    let completed = receiver.wait_for(1, |r| r["path"] == "/ok");
    // Every process has had time to settle the send and fan its events out (each webhook round
    // is a quarter of a second apart); a second delivery would be there by now.
    std::thread::sleep(Duration::from_secs(3));
    let delivered: Vec<Value> = receiver.requests().into_iter().filter(|r| r["path"] == "/ok").collect();
    assert_eq!(delivered.len(), 1, "send.completed once: {delivered:?}");
    let body: Value = serde_json::from_str(completed[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!((body["type"].as_str(), body["data"]["send_id"].as_i64()), (Some("send.completed"), Some(id)));
    assert_eq!(body["data"]["sent"], 300);

    let by = copies_by_recipient(&sink, "To all three hundred");
    let twice: Vec<_> = by.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "copies delivered more than once: {twice:?}");
    let mut got: Vec<&String> = by.keys().collect();
    got.sort();
    assert_eq!(got, addresses.iter().collect::<Vec<_>>(), "one copy for each member, none for anyone else");
}

/// `kill -9` of one server in the middle of a send loses nothing: the copies it had leased come
/// back to the queue when their lease runs out (`COURRIER_DELIVERY_LEASE_SECS`, shortened here to
/// 8 s), and another server delivers them; the send completes once.
///
/// Delivery is at least once, not exactly once, across a crash: a worker records its batch's
/// outcomes after delivering it, so copies the killed server had already handed to the SMTP
/// server but not yet recorded are delivered again by the server that takes them over. The test
/// says every member got a copy, and counts (and prints) the duplicates without forbidding them.
#[test]
fn kill_9_of_one_server_mid_send_loses_no_copy_and_the_other_completes_the_send() {
    let Some(pg) = postgres() else { return };
    let sink = SmtpSink::start();
    let smtp = sink.url();
    let env = with(
        &installation(&pg),
        &[("COURRIER_SMTP_URL", &smtp), ("COURRIER_DELIVERY_WORKERS", "2"), ("COURRIER_DELIVERY_LEASE_SECS", "8")],
    );
    // An API server without delivery workers sets the installation up and watches.
    let api_server = TestApp::spawn_with(&vars(&with(&env, &[("COURRIER_DELIVERY_WORKERS", "0")])));
    let doomed = serve(&env);
    let key = site_admin_key(&env, &api_server.client, &doomed.client);
    news_list(&api_server.client, &key);
    let addresses = import_members(&api_server.client, &key, 600);

    // The doomed server alone delivers: once the first copy reaches the SMTP server it is in the
    // middle of its leased batches, and is killed there. Nothing else delivers yet, so every copy
    // still `sending` is one the dead server held.
    let submitted = data(&submit(&doomed.client, &key, "Through a crash", None), 202);
    let id = submitted["send_id"].as_i64().unwrap();
    sink.wait_for(1, Duration::from_secs(60));
    drop(doomed.crash());
    let at_crash = data(&api(&api_server.client, &key, "GET", &format!("{NEWS}/sends/{id}"), None), 200);
    assert!(at_crash["counts"]["sending"].as_u64().unwrap() > 0, "the dead server held leased copies: {at_crash}");
    assert!(at_crash["counts"]["sent"].as_u64().unwrap() < 600, "{at_crash}");

    // The other server (here started now; one already running does the same) takes the dead
    // one's copies back once their lease has run out, and finishes the send.
    let other = serve(&env);
    let s = wait_send(&other.client, &key, id, Duration::from_secs(300), |s| s["state"] == "completed");
    assert_eq!((s["counts"]["sent"].as_u64(), s["counts"]["sending"].as_u64()), (Some(600), Some(0)), "{s}");
    let by = copies_by_recipient(&sink, "Through a crash");
    let missing: Vec<&String> = addresses.iter().filter(|a| !by.contains_key(*a)).collect();
    assert!(missing.is_empty(), "members without a copy: {missing:?}");
    assert_eq!(by.len(), 600, "no copy for anyone else");
    let duplicates: usize = by.values().map(|n| n - 1).sum();
    eprintln!("copies delivered twice across the crash: {duplicates}");
    std::thread::sleep(Duration::from_secs(1));
    let completed = crate::members::events(&api_server.core, courrier_core::kernel::EventName::SendCompleted);
    assert_eq!(completed.len(), 1, "send.completed once: {completed:?}");
    assert_eq!(completed[0]["send_id"], id);
}

/// One Idempotency-Key sent to two servers, at once from two threads and then one after the
/// other, runs its request once: one send, one member. The other requests get the first one's
/// answer replayed (`Idempotent-Replay: true`) or, while it runs, 409 `idempotency_in_progress`.
#[test]
fn one_idempotency_key_sent_to_two_servers_runs_once() {
    let Some(pg) = postgres() else { return };
    let env = installation(&pg);
    let (one, two) = (serve(&env), serve(&env));
    let key = site_admin_key(&env, &one.client, &two.client);
    news_list(&one.client, &key);
    data(&api(&one.client, &key, "POST", &format!("{NEWS}/members"), Some(&json!({ "email": "a@example.net" }))), 201);

    let both = |call: &(dyn Fn(&Client) -> Resp + Sync)| -> (Resp, Resp) {
        let barrier = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let a = s.spawn(|| {
                barrier.wait();
                call(&one.client)
            });
            let b = s.spawn(|| {
                barrier.wait();
                call(&two.client)
            });
            (a.join().unwrap(), b.join().unwrap())
        })
    };
    let is_replay = |r: &Resp| r.header("idempotent-replay") == Some("true");
    let check_pair = |(a, b): &(Resp, Resp), status: u16| -> Value {
        let (first, second) = if is_replay(a) || a.status == 409 { (b, a) } else { (a, b) };
        assert_eq!(first.status, status, "{}", first.body);
        assert!(!is_replay(first), "{}", first.body);
        if second.status == 409 {
            second.expect_error(409, "idempotency_in_progress");
        } else {
            assert!(is_replay(second), "the second answer is the first one's, replayed: {}", second.body);
            assert_eq!((second.status, second.json()["data"].clone()), (status, first.json()["data"].clone()));
        }
        first.json()["data"].clone()
    };

    // A send, at once on both servers, then again on each.
    let sent = check_pair(&both(&|c: &Client| submit(c, &key, "Once", Some("send-1"))), 202);
    for client in [&one.client, &two.client] {
        let again = submit(client, &key, "Once", Some("send-1"));
        assert!(is_replay(&again), "{}", again.body);
        assert_eq!((again.status, again.json()["data"].clone()), (202, sent.clone()));
    }
    submit(&two.client, &key, "Another body", Some("send-1")).expect_error(409, "idempotency_conflict");

    // A member, at once on both servers, then again on each.
    let add = |c: &Client| {
        let auth = format!("Bearer {key}");
        let h = [("authorization", auth.as_str()), ("idempotency-key", "member-1")];
        request(c, "POST", &format!("{NEWS}/members"), &h, Some(&json!({ "email": "b@example.net" })))
    };
    let added = check_pair(&both(&add), 201);
    for client in [&one.client, &two.client] {
        let again = add(client);
        assert!(is_replay(&again), "{}", again.body);
        assert_eq!(again.json()["data"], added);
    }

    // What ran, as the installation records it: one send, one member b.
    let store: std::sync::Arc<courrier_core::mailing::ports::Store> =
        std::sync::Arc::new(courrier_store_postgres::PostgresStore::open(&env[0].1, 0).unwrap());
    let events = courrier_core::storage::in_read(&*store, |tx| tx.events_after(None, 100_000)).unwrap();
    let named = |name: EventName| events.iter().filter(|e| e.name == name).map(|e| e.data.clone()).collect::<Vec<_>>();
    let submitted = named(EventName::SendSubmitted);
    assert_eq!(submitted.len(), 1, "{submitted:?}");
    assert_eq!(submitted[0]["send_id"], sent["send_id"]);
    let b_added: Vec<Value> =
        named(EventName::MemberAdded).into_iter().filter(|e| e.to_string().contains("b@example.net")).collect();
    assert_eq!(b_added.len(), 1, "{b_added:?}");
    let members = data(&api(&one.client, &key, "GET", &format!("{NEWS}/members"), None), 200);
    let emails: Vec<&str> = members.as_array().unwrap().iter().map(|m| m["email"].as_str().unwrap()).collect();
    assert_eq!(emails, ["a@example.net", "b@example.net"]);
}
