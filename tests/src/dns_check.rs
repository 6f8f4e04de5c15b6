//! The domain DNS check against a real DNS server (dnsmasq on 127.0.0.1, `COURRIER_DNS_SERVER`):
//! each verdict, an unreachable server told from an absent record, the stored verdict, the
//! refusals (404, 403, 429), and the CLI command.

use crate::access::{bearer, call, make_key, make_user};
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::{DomainName, ListName};
use courrier_tests::harness::{TestApp, free_port, run_cli};
use courrier_tests::peers::DnsServer;
use serde_json::{Value, json};

const RECORDS: &[&str] = &[
    "txt-record=good.test,v=spf1 mx -all",
    "txt-record=_dmarc.good.test,v=DMARC1; p=reject; rua=mailto:dmarc@good.test",
    // A key record, but not the key the service made for stale.test.
    "txt-record=stale.test,v=spf1 mx -all",
    "txt-record=s1._domainkey.stale.test,v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAtest",
    "txt-record=_dmarc.stale.test,v=DMARC1; p=reject",
    "txt-record=nokey.test,v=spf1 -all",
    "txt-record=_dmarc.nokey.test,v=DMARC1; p=none",
    "txt-record=half.test,google-site-verification=abc",
    "txt-record=half.test,v=spf1 a -all",
];

/// Creates the domain; its DKIM record when it has a selector (the service makes the key).
fn domain(app: &TestApp, key: &str, name: &str, selector: Option<&str>) -> Option<String> {
    let r =
        call(app, "POST", "/api/v1/domains", &[bearer(key)], Some(&json!({ "name": name, "dkim_selector": selector })));
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()["data"]["dkim_record"]["value"].as_str().map(str::to_owned)
}

/// The dnsmasq option publishing `value` at `name`, in character-strings of at most 255 bytes
/// (a 2048-bit key's record is longer; receivers join the strings).
fn txt(name: &str, value: &str) -> String {
    let chunks: Vec<&str> =
        value.as_bytes().chunks(255).map(|c| std::str::from_utf8(c).expect("an ASCII record")).collect();
    format!("txt-record={name},{}", chunks.join(","))
}

/// `RECORDS` and the ones given.
fn with(extra: &[String]) -> Vec<String> {
    RECORDS.iter().map(|r| (*r).to_owned()).chain(extra.iter().cloned()).collect()
}

fn check(app: &TestApp, key: &str, name: &str) -> Value {
    let r = call(app, "POST", &format!("/api/v1/domains/{name}/dns-check"), &[bearer(key)], None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["data"].clone()
}

fn record<'a>(c: &'a Value, kind: &str) -> &'a Value {
    c["records"].as_array().unwrap().iter().find(|r| r["type"] == kind).unwrap()
}

fn setup(dns: &str) -> (TestApp, String) {
    let app = TestApp::spawn_with(&[("COURRIER_DNS_SERVER", dns)]);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    (app, key)
}

#[test]
fn each_record_gets_its_verdict_and_the_domain_keeps_the_result() {
    let port = free_port();
    let (app, key) = setup(&format!("127.0.0.1:{port}"));
    let published = domain(&app, &key, "good.test", Some("s1")).expect("a key record to publish");
    domain(&app, &key, "nokey.test", None);
    domain(&app, &key, "half.test", Some("s1"));
    domain(&app, &key, "bare.test", Some("s1"));
    domain(&app, &key, "stale.test", Some("s1"));
    let records = with(&[txt("s1._domainkey.good.test", &published)]);
    let _dns = DnsServer::start_on(port, &records.iter().map(String::as_str).collect::<Vec<_>>());

    let good = check(&app, &key, "good.test");
    assert_eq!(good["dns_ok"], true, "{good}");
    for (kind, name) in [("spf", "good.test"), ("dkim", "s1._domainkey.good.test"), ("dmarc", "_dmarc.good.test")] {
        let r = record(&good, kind);
        assert_eq!(
            (r["name"].as_str(), &r["checked"], &r["found"], &r["error"]),
            (Some(name), &json!(true), &json!(true), &Value::Null),
            "{r}"
        );
        assert!(r["expected"].as_str().is_some_and(|e| !e.is_empty()));
    }
    assert_eq!(record(&good, "spf")["values"], json!(["v=spf1 mx -all"]));
    let stored = call(&app, "GET", "/api/v1/domains/good.test", &[bearer(&key)], None).json()["data"].clone();
    assert_eq!(
        (stored["dns_ok"].clone(), stored["dns_checked_at"].clone()),
        (json!(true), good["dns_checked_at"].clone())
    );

    // No selector: DKIM is not checked, which is no failure.
    let nokey = check(&app, &key, "nokey.test");
    assert_eq!(
        (record(&nokey, "dkim")["checked"].clone(), nokey["dns_ok"].clone()),
        (json!(false), json!(true)),
        "{nokey}"
    );

    // SPF found among other TXT records; no DKIM key and no DMARC record: absent, not errors.
    let half = check(&app, &key, "half.test");
    assert_eq!(record(&half, "spf")["found"], true, "{half}");
    for kind in ["dkim", "dmarc"] {
        assert_eq!(
            (record(&half, kind)["found"].clone(), record(&half, kind)["error"].clone()),
            (json!(false), Value::Null)
        );
    }
    assert_eq!(half["dns_ok"], false);

    // A key record that is not the service's key: found false, and the record expected says which.
    let stale = check(&app, &key, "stale.test");
    let dkim = record(&stale, "dkim");
    assert_eq!((dkim["found"].clone(), dkim["error"].clone()), (json!(false), Value::Null), "{stale}");
    assert!(dkim["expected"].as_str().unwrap().contains("v=DKIM1; k=rsa; p=MII"), "{dkim}");
    assert_eq!(stale["dns_ok"], false);

    let bare = check(&app, &key, "bare.test");
    assert!(bare["records"].as_array().unwrap().iter().all(|r| r["found"] == false && r["error"].is_null()), "{bare}");
    assert_eq!(bare["dns_ok"], false);
}

#[test]
fn an_unreachable_server_is_an_error_not_an_absent_record() {
    // A port nothing listens on: every lookup fails, which is not the same as "no record".
    let (app, key) = setup(&format!("127.0.0.1:{}", free_port()));
    domain(&app, &key, "good.test", Some("s1"));
    let c = check(&app, &key, "good.test");
    for r in c["records"].as_array().unwrap() {
        assert_eq!(r["found"], false, "{r}");
        assert!(r["error"].as_str().is_some_and(|e| !e.is_empty()), "{r}");
    }
    assert_eq!(c["dns_ok"], false);
}

#[test]
fn the_check_refuses_out_of_scope_unauthorised_and_too_frequent_calls() {
    let dns = DnsServer::start(RECORDS);
    let (app, key) = setup(&dns.addr());
    domain(&app, &key, "good.test", Some("s1"));
    domain(&app, &key, "nokey.test", None);
    let post = |key: &str, d: &str| call(&app, "POST", &format!("/api/v1/domains/{d}/dns-check"), &[bearer(key)], None);
    post(&key, "unknown.test").expect_error(404, "not_found");
    post(&key, "bad..name").expect_error(404, "not_found");
    // A list owner reads its domain but does not administer it; another domain is out of its reach.
    let owner_role = Role::Owner(DomainName::parse("good.test").unwrap(), ListName::parse("news").unwrap());
    let owner = make_user(&app.core, "owner@good.test", &[owner_role]);
    let owner_key = make_key(&app.core, &owner, KeyScope::User, &Perm::ALL, None);
    post(&owner_key, "good.test").expect_error(403, "forbidden");
    post(&owner_key, "nokey.test").expect_error(404, "not_found");
    let read_key = make_key(
        &app.core,
        &make_user(&app.core, "r@example.org", &[Role::SiteAdmin]),
        KeyScope::User,
        &[Perm::Read],
        None,
    );
    post(&read_key, "good.test").expect_error(403, "forbidden");
    call(&app, "POST", "/api/v1/domains/good.test/dns-check", &[], None).expect_error(401, "unauthenticated");
    // Both refusals are audited.
    let audit = call(&app, "GET", "/api/v1/audit?action=domain.dns_check", &[bearer(&key)], None).json();
    let outcomes: Vec<&str> =
        audit["data"].as_array().unwrap().iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert!(outcomes.contains(&"forbidden") && outcomes.contains(&"not_found"), "{audit}");
    // Per domain: six checks a minute, then 429 with Retry-After.
    for _ in 0..6 {
        assert_eq!(post(&key, "good.test").status, 200);
    }
    let r = post(&key, "good.test");
    r.expect_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
    // Another domain still answers: the limit is per domain (and, higher, per caller).
    assert_eq!(post(&key, "nokey.test").status, 200);
}

#[test]
fn the_cli_runs_the_same_check() {
    let port = free_port();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().display().to_string();
    let addr = format!("127.0.0.1:{port}");
    let env = [("COURRIER_DNS_SERVER", addr.as_str())];
    let (status, out, err) =
        run_cli(&["--data-dir", &dir, "--json", "domain", "create", "good.test", "--dkim-selector", "s1"], &env);
    assert!(status.success(), "{err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    let published = created["dkim_record"]["value"].as_str().expect("the record to publish").to_owned();
    let records = with(&[txt("s1._domainkey.good.test", &published)]);
    let _dns = DnsServer::start_on(port, &records.iter().map(String::as_str).collect::<Vec<_>>());
    let (status, out, err) = run_cli(&["--data-dir", &dir, "--json", "domain", "dns-check", "good.test"], &env);
    assert!(status.success(), "{err}");
    let c: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(c["dns_ok"], true, "{c}");
    let (status, out, _) = run_cli(&["--data-dir", &dir, "domain", "dns-check", "good.test"], &env);
    assert!(status.success());
    assert!(
        out.contains("dkim") && out.contains("s1._domainkey.good.test") && out.ends_with("dns_ok: true\n"),
        "{out}"
    );
    let (status, _, err) = run_cli(&["--data-dir", &dir, "domain", "dns-check", "unknown.test"], &env);
    assert!(!status.success() && err.contains("not found"), "{err}");
}
