//! Several servers on one PostgreSQL database (issue 25): each test starts a throw-away PostgreSQL
//! (Debian's binaries, `initdb` in a temporary directory) and two real servers on it, in process,
//! each with its own key cache and counters, through the same wiring `courrier serve` uses.

use crate::ocr::{expect_refusal, fixture, make_user, upload};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use courrier_core::access::principal::RequestCtx;
use courrier_core::access::{Principal, keys};
use courrier_core::adapters::PostgresTestServer;
use courrier_tests::harness::{TestApp, run_cli};

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
