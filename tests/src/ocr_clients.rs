//! The OCR service as its real client, the Dolibarr module ScanInvoices (and a fork of it), uses
//! it (issue 16): each test sends the client's exact request (form fields, no `lang`, a `GET`
//! without a body, no `Authorization` header) against the real server.

use crate::access::{make_key as make_scoped_key, make_user as make_role_user};
use crate::ocr::{call, expect_refusal, fixture, make_user, spawn, upload, user_key};
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_tests::harness::{Resp, SmtpSink, TestApp, courrier_bin, run_cli};
use serde_json::{Value, json};
use std::time::Duration;

#[test]
fn scaninvoices_import_page_reads_srvlangs_as_objects() {
    let app = spawn();
    let key = user_key(&app, "langs@example.org");
    let resp = call(&app, "GET", "/api/ruok", Some(&key), None);
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(
        resp.json()["data"]["json"]["srvlangs"],
        json!([
            {"id": 1, "code": "fr", "lang": "fra", "name": "Français"},
            {"id": 2, "code": "de", "lang": "deu", "name": "Deutsch"},
            {"id": 3, "code": "it", "lang": "ita", "name": "Italiano"},
            {"id": 4, "code": "en", "lang": "eng", "name": "English"},
        ])
    );
}

#[test]
fn scaninvoices_fork_probes_get_ping_without_a_key() {
    let app = spawn();
    // No Authorization header, no body: the availability probe.
    let probe = app.client.request("GET", "/api/ping", &[], None);
    assert_eq!(probe.status, 200, "{}", probe.body);
    assert!(probe.header("content-type").unwrap().starts_with("application/json"));
    assert_eq!(probe.json(), json!({"status": "ok", "protocol": "1"}));
    // With a valid key: the answer of POST /api/ping.
    let key = user_key(&app, "probe@example.org");
    let with_key = call(&app, "GET", "/api/ping", Some(&key), None);
    assert_eq!(with_key.status, 200, "{}", with_key.body);
    let posted = call(&app, "POST", "/api/ping", Some(&key), None).json();
    assert_eq!(with_key.json(), posted);
    assert_eq!(posted["profile"]["email"], "probe@example.org");
    // With a key that is not one: 401, as POST answers.
    let bad = "svc_0123456789abcdef_0000000000000000000000000000000000000000000000000000000000000000";
    expect_refusal(&call(&app, "GET", "/api/ping", Some(bad), None), 401, "unauthenticated");
    expect_refusal(&call(&app, "POST", "/api/ping", Some(bad), None), 401, "unauthenticated");
    // The OCR OpenAPI document shows the probe, its key optional.
    let doc = app.client.get("/api/openapi.json").json();
    let op = &doc["paths"]["/api/ping"]["get"];
    assert_eq!(op["operationId"], "pingProbe", "{op}");
    assert!(op["security"].as_array().unwrap().contains(&json!({})), "{op}");
    assert!(op["responses"]["401"].is_object(), "{op}");
}

#[test]
fn scaninvoices_setup_page_keeps_its_key_during_maintenance() {
    let app = spawn();
    let key = user_key(&app, "setup@example.org");
    let dir = app.dir.path().display().to_string();
    let (status, out, err) = run_cli(&["--data-dir", &dir, "maintenance", "on"], &[]);
    assert!(status.success(), "{out}{err}");
    // The setup page: profile (a refusal makes it delete the stored key), ping, login, logout.
    let profile = call(&app, "POST", "/api/profile", Some(&key), None);
    assert_eq!(profile.status, 200, "{}", profile.body);
    assert_eq!(profile.json()["email"], "setup@example.org");
    assert_eq!(call(&app, "POST", "/api/ping", Some(&key), None).status, 200);
    assert_eq!(app.client.request("GET", "/api/ping", &[], None).status, 200);
    let login = app.client.request(
        "POST",
        "/api/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        Some(b"email=setup%40example.org&password=correct+horse+battery+staple"),
    );
    assert_eq!(login.status, 200, "{}", login.body);
    let fresh = login.json()["access_token"].as_str().unwrap().to_owned();
    assert_eq!(call(&app, "POST", "/api/logout", Some(&fresh), None).status, 200);
    expect_refusal(&call(&app, "POST", "/api/ping", Some(&fresh), None), 401, "unauthenticated");
    // The rest still answers maintenance.
    expect_refusal(
        &upload(&app, &key, "a.pdf", &fixture("invoice-text.pdf"), &[("lang", "fr")]),
        503,
        "ocr_maintenance",
    );
    assert_eq!(call(&app, "GET", "/api/ruok", Some(&key), None).status, 503);
}

#[test]
fn scaninvoices_import_reads_every_meta_and_product_line_key() {
    let app = spawn();
    let key = user_key(&app, "meta@example.org");
    let resp = upload(
        &app,
        &key,
        "invoice-text.pdf",
        &fixture("invoice-text.pdf"),
        &[("lang", "fra"), ("profile", "invoice")],
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
    let meta = resp.json()["meta"].clone();
    for key in [
        "supplier_name",
        "supplier_numtva",
        "supplier_siret",
        "invoice_number",
        "invoice_label",
        "date",
        "due_date",
        "currency",
        "amount",
        "amount_untaxed",
        "amount_tax",
        "value_tax1",
        "value_tax2",
        "value_tax3",
        "value_tax4",
        "amount_tax1",
        "amount_tax2",
        "amount_tax3",
        "amount_tax4",
        "exo_tax_base",
        "eco_part",
        "delivery_untaxed",
        "iban",
    ] {
        assert!(meta[key].is_string(), "{key}: {meta}");
    }
    assert_eq!(meta["amount"], "120.00", "{meta}");
    // Not on this invoice: there, and empty.
    assert_eq!((meta["exo_tax_base"].as_str(), meta["eco_part"].as_str()), (Some(""), Some("")), "{meta}");
    assert_eq!(meta["value_tax4"], "", "{meta}");
    for key in ["name", "adresse", "cp", "ville", "pays", "codePays", "numeroTvaIntra"] {
        assert!(meta["company_details"][key].is_string(), "company_details.{key}: {meta}");
    }
    let lines = meta["products"].as_array().expect("products is a list");
    assert!(!lines.is_empty(), "the invoice's lines are read: {meta}");
    for line in lines {
        for key in [
            "ref",
            "label",
            "qty",
            "unit_price",
            "total_ht",
            "tax_value",
            "desc",
            "remise_percent",
            "ecounit",
            "ecopart",
            "rpcp",
        ] {
            assert!(line[key].is_string(), "line key {key}: {line}");
        }
    }
    // GET /api/ocrs returns the same meta.
    let id = resp.json()["ocrID"].as_str().unwrap().to_owned();
    let again = call(&app, "GET", &format!("/api/ocrs?ocrID={id}"), Some(&key), None).json();
    assert_eq!(again["meta"], meta);
}

fn site_admin_manage_key(app: &TestApp) -> String {
    let admin = make_role_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_scoped_key(&app.core, &admin, KeyScope::User, &[Perm::Read, Perm::Manage], None)
}

#[test]
fn softwareinfos_post_without_id_gets_one_made_from_the_name() {
    let app = spawn();
    let manage = site_admin_manage_key(&app);
    let record = json!({"name": "Scan Invoices (Dolibarr)", "latest_version": "2.4.0"});
    let made = call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&record));
    assert_eq!(made.status, 200, "{}", made.body);
    assert_eq!(made.json()["id"], "scan-invoices-dolibarr");
    let got = call(&app, "GET", "/api/softwareInfos/scan-invoices-dolibarr", Some(&manage), None);
    assert_eq!(got.json()["latest_version"], "2.4.0", "{}", got.body);
    // The same name again: the id is taken, so it gets a random suffix.
    let second = call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&record)).json();
    let id = second["id"].as_str().unwrap();
    assert!(id.starts_with("scan-invoices-dolibarr-") && id.len() > "scan-invoices-dolibarr-".len(), "{second}");
    assert_eq!(call(&app, "GET", &format!("/api/softwareInfos/{id}"), Some(&manage), None).status, 200);
    // A given id that is taken is still a conflict, and a bad one still refused.
    let taken = json!({"id": "scan-invoices-dolibarr", "name": "X"});
    expect_refusal(&call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&taken)), 409, "conflict");
    let bad = json!({"id": "", "name": "X"});
    expect_refusal(&call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&bad)), 422, "validation_failed");
    expect_refusal(
        &call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&json!({"latest_version": "1"}))),
        422,
        "validation_failed",
    );
}

#[test]
fn schema_invalid_software_fields_and_month_13_are_refused() {
    let app = spawn();
    let manage = site_admin_manage_key(&app);
    let cases: [(Value, &str); 4] = [
        (json!({"id": "a", "name": "A", "latest_version": true}), "latest_version must be a string, not a boolean"),
        (json!({"id": "b", "name": "B", "notes": {"x": 1}}), "notes must be a string, not an object"),
        (json!({"id": "c", "name": "C", "min_version": 2}), "min_version must be a string, not a number"),
        (json!({"id": "d", "name": ["D"]}), "name must be a string, not an array"),
    ];
    for (body, needle) in &cases {
        let resp = call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(body));
        expect_refusal(&resp, 422, "validation_failed");
        assert!(resp.body.contains(needle), "{body}: {}", resp.body);
    }
    // Nothing of them was stored.
    let list = call(&app, "GET", "/api/softwareInfos", Some(&manage), None).json();
    assert_eq!(list["data"], json!([]), "{list}");
    // PUT is held to the same schema.
    assert_eq!(
        call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&json!({"id": "e", "name": "E"}))).status,
        200
    );
    let put =
        call(&app, "PUT", "/api/softwareInfos/e", Some(&manage), Some(&json!({"name": "E", "latest_version": false})));
    expect_refusal(&put, 422, "validation_failed");

    let path = "/api/subscriptions/stats/admin@example.org";
    for month in ["2026-13", "2026-00"] {
        let resp = call(&app, "POST", path, Some(&manage), Some(&json!({"month": month})));
        expect_refusal(&resp, 422, "validation_failed");
        assert!(resp.body.contains(month), "{}", resp.body);
    }
    assert_eq!(call(&app, "POST", path, Some(&manage), Some(&json!({"month": "2026-12"}))).status, 200);
    // A blank or padded month is not YYYY-MM either (the schema's pattern), nor a month sent as a number.
    for month in [json!(""), json!(" 2026-12"), json!(202612)] {
        let resp = call(&app, "POST", path, Some(&manage), Some(&json!({ "month": month })));
        expect_refusal(&resp, 422, "validation_failed");
    }
    // The OpenAPI document says the same.
    let doc = app.client.get("/api/openapi.json").json();
    let pattern = doc["paths"]["/api/subscriptions/stats/{email}"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"]["properties"]["month"]["pattern"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(pattern, "^[0-9]{4}-(0[1-9]|1[0-2])$");
    let create = &doc["paths"]["/api/softwareInfos"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(create["properties"]["latest_version"]["type"], "string");
    assert_eq!(create["required"], json!(["name"]), "id is optional: {create}");
}

/// What the fuzzer found once the OCR routes were fuzzed with a valid key: the handlers and the
/// OpenAPI document disagreed on a blank or control-character supplier name or VAT number, and on a
/// control character in a download URL.
#[test]
fn supplier_zones_and_software_urls_agree_with_their_schema() {
    let app = spawn();
    let key = user_key(&app, "zones@example.org");
    // A blank VAT number beside a name is an absent one (the client sends `vatNumber=`).
    let blank = call(&app, "POST", "/api/ocrcutszones", Some(&key), Some(&json!({"name": "ACME", "vatNumber": ""})));
    assert_eq!(blank.status, 200, "{}", blank.body);
    // Nothing but blanks says nothing: 422, as the schema's anyOf says.
    let nothing = call(&app, "POST", "/api/ocrcutszones", Some(&key), Some(&json!({"name": " ", "vatNumber": ""})));
    expect_refusal(&nothing, 422, "validation_failed");
    // A control character (C1 included) or more than 200 characters is refused, as the schema says.
    for field in ["name", "vatNumber", "vat"] {
        for value in ["FR\u{84}40303265045".to_owned(), "0".repeat(201)] {
            let body = json!({ "name": "ACME", field: value });
            let resp = call(&app, "POST", "/api/ocrcutszones", Some(&key), Some(&body));
            expect_refusal(&resp, 422, "validation_failed");
            assert!(resp.body.contains(field), "{field}: {}", resp.body);
        }
    }
    // A VAT number sent as an object is not a string.
    let object = call(&app, "POST", "/api/ocrcutszones", Some(&key), Some(&json!({"name": "ACME", "vatNumber": {}})));
    expect_refusal(&object, 422, "validation_failed");
    let manage = site_admin_manage_key(&app);
    let created = call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&json!({"id": "u", "name": "U"})));
    assert_eq!(created.status, 200, "{}", created.body);
    let url = json!({"name": "U", "download_url": "http://example.org/\u{93}a"});
    expect_refusal(&call(&app, "PUT", "/api/softwareInfos/u", Some(&manage), Some(&url)), 422, "validation_failed");
    let doc = app.client.get("/api/openapi.json").json();
    let put = &doc["paths"]["/api/softwareInfos/{id}"]["put"]["requestBody"]["content"]["application/json"]["schema"];
    let pattern = put["properties"]["download_url"]["pattern"].as_str().unwrap();
    assert!(pattern.contains("\\u007f-\\u009f"), "the schema refuses C1 controls too: {pattern}");
}

/// A form post to `/forgot-password`, as the page's form sends it.
fn ask_for_link(app: &TestApp, address: &str) -> Resp {
    let body = format!("email={}", address.replace('@', "%40"));
    app.client.request(
        "POST",
        "/forgot-password",
        &[("content-type", "application/x-www-form-urlencoded")],
        Some(body.as_bytes()),
    )
}

fn login_status(app: &TestApp, address: &str, password: &str) -> u16 {
    app.client.post_json("/api/login", &json!({ "email": address, "password": password })).status
}

#[test]
fn scaninvoices_forgot_password_link_mails_a_one_time_sign_in_link() {
    let sink = SmtpSink::start();
    courrier_bin();
    let app = TestApp::spawn_with(&[("COURRIER_SMTP_URL", &sink.url()), ("COURRIER_MAIL_FROM", "ocr@example.org")]);
    make_user(&app.core, "ada@example.org");

    // The setup page's link: an HTML form with the address filled in.
    let page = app.client.request("GET", "/forgot-password?email=ada%40example.org", &[], None);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.header("content-type").unwrap().starts_with("text/html"));
    assert!(page.body.contains("<form") && page.body.contains("value=\"ada@example.org\""), "{}", page.body);
    let blank = app.client.request("GET", "/forgot-password", &[], None);
    assert!(blank.status == 200 && blank.body.contains("value=\"\""), "{}", blank.body);

    // An unknown address and a known one get the same page.
    let unknown = ask_for_link(&app, "nobody@example.org");
    let known = ask_for_link(&app, "ada@example.org");
    assert_eq!((unknown.status, known.status), (200, 200), "{}", known.body);
    assert_eq!(unknown.body.replace("nobody@example.org", "X"), known.body.replace("ada@example.org", "X"));

    // One mail, to the account; none for the unknown address.
    let mail = sink.wait_for(1, Duration::from_secs(10)).remove(0);
    assert!(mail.contains("To: ada@example.org"), "{mail}");
    assert!(sink.messages().iter().all(|m| !m.contains("nobody@example.org")), "no mail for an unknown address");
    let unfolded = mail.replace("=\r\n", "").replace("=\n", "");
    let start = unfolded.find("/p/password/").expect("a link in the mail");
    let token: String =
        unfolded[start + 12..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect();

    // The link leads to setting a new password, once.
    let form = app.client.request("GET", &format!("/p/password/{token}"), &[], None);
    assert!(form.status == 200 && form.body.contains("ada@example.org"), "{}", form.body);
    let new_password = "a brand new password for ada";
    let set = |pw: &str| {
        let body = format!("password={0}&password_confirmation={0}", pw.replace(' ', "+"));
        app.client.request(
            "POST",
            &format!("/p/password/{token}"),
            &[("content-type", "application/x-www-form-urlencoded")],
            Some(body.as_bytes()),
        )
    };
    assert_eq!(set(new_password).status, 200);
    assert_eq!(set("yet another password here").status, 404, "the link works once");
    assert_eq!(login_status(&app, "ada@example.org", new_password), 200);
    assert_eq!(login_status(&app, "ada@example.org", "correct horse battery staple"), 401);

    // Three requests per address an hour; the fourth says to try later, for any address alike.
    for address in ["ada@example.org", "nobody@example.org"] {
        for _ in 0..2 {
            assert_eq!(ask_for_link(&app, address).status, 200);
        }
        let refused = ask_for_link(&app, address);
        assert_eq!(refused.status, 429, "{address}: {}", refused.body);
        assert!(refused.body.contains("try again later"), "{}", refused.body);
        assert!(refused.header("retry-after").is_some_and(|s| s.parse::<u64>().unwrap() > 0));
    }
    // An empty address is asked again.
    assert_eq!(ask_for_link(&app, "").status, 422);
}
