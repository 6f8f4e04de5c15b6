//! Invoices (issue 7) against the real server: `yamlFilter` templates, zone cuts and the zones
//! learned per supplier, the supplier directory, usage and quotas, and client software records.

use crate::access::{make_key as make_scoped_key, make_user as make_role_user};
use crate::ocr::{call, expect_refusal, fixture, spawn, stored_blobs, upload, user_key};
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_tests::harness::{Resp, TestApp, run_cli, workspace_root};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn custom(name: &str) -> Vec<u8> {
    let path = workspace_root().join("fixtures/invoice2data/custom").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("UTF-8 fixture")
}

#[test]
fn a_matching_yaml_filter_fills_meta_with_the_templates_fields() {
    let app = spawn();
    let key = user_key(&app, "yaml@example.org");
    let template = text(custom("templates/basic.yml"));
    let resp = upload(
        &app,
        &key,
        "basic.txt",
        &custom("basic.txt"),
        &[("lang", "en"), ("profile", "invoice"), ("yamlFilter", &template)],
    );
    assert_eq!(resp.status, 200, "{}", resp.body);
    let body = resp.json();
    let meta = &body["meta"];
    assert_eq!(meta["supplier_name"], "Basic Test", "{body}");
    assert_eq!(meta["invoice_number"], "0999/09/2022");
    assert_eq!(meta["date"], "2022-09-27");
    assert_eq!(meta["amount"], "123.45");
    assert_eq!(meta["currency"], "EUR");
    assert_eq!(meta["confidence"]["amount"], 1.0);
    assert!(body["message"].as_str().unwrap().contains("applied"), "{body}");

    // The same template on a document it was not written for changes nothing, and says so.
    let other =
        upload(&app, &key, "lines-basic.txt", &custom("lines-basic.txt"), &[("lang", "en"), ("yamlFilter", &template)]);
    assert_eq!(other.status, 200, "{}", other.body);
    let other = other.json();
    assert!(other["message"].as_str().unwrap().contains("did not match"), "{other}");
    // The generic extraction still reads it; nothing comes from the template.
    assert!(other["meta"].get("template").is_none(), "{other}");
    assert_eq!(other["meta"]["invoice_number"], "007/10/2022", "{other}");
}

#[test]
fn template_lines_become_products_and_other_fields_stay_visible() {
    let app = spawn();
    let key = user_key(&app, "lines@example.org");
    let template = text(custom("templates/lines-basic.yml"));
    let resp =
        upload(&app, &key, "lines-basic.txt", &custom("lines-basic.txt"), &[("lang", "en"), ("yamlFilter", &template)]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    let meta = resp.json()["meta"].clone();
    assert_eq!(
        meta["template_fields"]["simple_lines"],
        json!([{"number": "One"}, {"number": "Two"}, {"number": "Three"}])
    );
    assert_eq!(
        meta["template_fields"]["column_lines"][2],
        json!({"pos": 3, "name": "Watermelon", "qty": 1.0, "unit": ""})
    );
}

#[test]
fn bad_yaml_filters_are_refused_fast_with_a_reason_and_nothing_is_stored() {
    let app = spawn();
    let key = user_key(&app, "bomb@example.org");
    let doc = custom("basic.txt");
    let before = stored_blobs(&app);

    let mut bomb = String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().zip(["b", "c", "d", "e", "f", "g", "h", "i"]) {
        bomb.push_str(&format!("{name}: &{name} [{}]\n", vec![format!("*{prev}"); 9].join(",")));
    }
    let started = Instant::now();
    let resp = upload(&app, &key, "basic.txt", &doc, &[("lang", "en"), ("yamlFilter", &bomb)]);
    let took = started.elapsed();
    expect_refusal(&resp, 422, "template_invalid");
    println!("alias bomb refused in {took:?}: {}", resp.body);
    assert!(took < Duration::from_secs(30), "the server answered at all ({took:?})");

    for (yaml, needle) in [
        ("issuer: [unclosed", "not valid YAML"),
        ("issuer: X\nkeywords: ['(a']\n", "regular expression"),
        ("issuer: X\nkeywords: [a]\nfields:\n  amount: {parser: magic}\n", "magic"),
    ] {
        let resp = upload(&app, &key, "basic.txt", &doc, &[("lang", "en"), ("yamlFilter", yaml)]);
        expect_refusal(&resp, 422, "template_invalid");
        assert!(resp.body.contains(needle), "{yaml:?}: {}", resp.body);
    }
    let big = format!("issuer: X\nkeywords: [a]\n# {}\n", "x".repeat(70 * 1024));
    expect_refusal(
        &upload(&app, &key, "basic.txt", &doc, &[("lang", "en"), ("yamlFilter", &big)]),
        413,
        "template_too_large",
    );
    assert_eq!(stored_blobs(&app), before, "a refused upload stores nothing");
    // The server still serves.
    assert_eq!(call(&app, "POST", "/api/ping", Some(&key), None).status, 200);
}

/// The invoice scan (200 dpi render of `fixtures/ocr/generate.py`'s INVOICE): zones in image pixels
/// around texts whose PDF positions the generator fixes (x 400 pt -> 1111 px at 200 dpi).
const TOTAL_TTC_VALUE: &str = "1090:790:300:76";
const TOTAL_TTC_LABEL: &str = "180:790:300:76";
const INVOICE_NUMBER: &str = "1040:150:520:80";

/// A displayed zone: the image-pixel zone as a client shows it at `ratio`.
fn shown(rect: &str, ratio: f64) -> String {
    rect.split(':').map(|n| format!("{}", n.parse::<f64>().unwrap() * ratio)).collect::<Vec<_>>().join(":")
}

fn scan(app: &TestApp, key: &str) -> String {
    let resp =
        upload(app, key, "invoice-scan.jpg", &fixture("invoice-scan.jpg"), &[("lang", "fr"), ("action", "storeOnly")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    resp.json()["ocrID"].as_str().unwrap().to_owned()
}

fn cuts(app: &TestApp, key: &str, body: Value) -> Resp {
    call(app, "POST", "/api/ocrcuts", Some(key), Some(&body))
}

fn result_of(resp: &Resp) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.body);
    let body = resp.json();
    assert_eq!(body["errors"], "", "{body}");
    serde_json::from_str(body["result"].as_str().expect("result is a string")).expect("result holds JSON")
}

#[test]
fn zones_drawn_at_a_zoom_are_read_alone_in_every_form() {
    let app = spawn();
    let key = user_key(&app, "cuts@example.org");
    let id = scan(&app, &key);
    let ratio = 0.5;
    let one = result_of(&cuts(
        &app,
        &key,
        json!({"ocrID": id, "ratio": "0.5", "lang": "fr", "rect": shown(TOTAL_TTC_VALUE, ratio)}),
    ));
    assert!(one["texte"].as_str().unwrap().contains("120,00"), "{one}");

    // multicut, zones joined by ';' -> an array in order.
    let rect = format!("{};{}", shown(TOTAL_TTC_LABEL, ratio), shown(TOTAL_TTC_VALUE, ratio));
    let many = result_of(&cuts(
        &app,
        &key,
        json!({"ocrID": id, "ratio": 0.5, "lang": "fr", "action": "multicut", "rect": rect}),
    ));
    assert!(many[0].as_str().unwrap().contains("Total TTC"), "{many}");
    assert!(many[1].as_str().unwrap().contains("120,00"), "{many}");

    // multicut, named zones in jsonRect (sent as a JSON text, as a form post does) -> an object.
    let json_rect =
        json!({"totalttcRect": shown(TOTAL_TTC_VALUE, 1.0), "factureRect": shown(INVOICE_NUMBER, 1.0)}).to_string();
    let named = result_of(&cuts(
        &app,
        &key,
        json!({"ocrID": id, "ratio": "1", "lang": "fr", "action": "multicut", "rect": "", "jsonRect": json_rect}),
    ));
    assert!(named["facture"].as_str().unwrap().contains("2026-042"), "{named}");
    assert!(named["totalttc"].as_str().unwrap().contains("120,00"), "{named}");

    // A zone larger than the page is clamped to it.
    let page =
        result_of(&cuts(&app, &key, json!({"ocrID": id, "ratio": "1", "lang": "fr", "rect": "-100:-100:99999:99999"})));
    assert!(page["texte"].as_str().unwrap().contains("ACME"), "{page}");

    // Usage counts the cuts.
    let stats = call(&app, "GET", "/api/subscriptions/stats/cuts@example.org", Some(&key), None).json();
    assert_eq!(stats["months"][0]["cuts"], 6, "{stats}");
    assert_eq!(stats["months"][0]["documents"], 1, "{stats}");
}

#[test]
fn bad_cuts_are_refused_with_the_reason() {
    let app = spawn();
    let key = user_key(&app, "badcuts@example.org");
    let other = user_key(&app, "other@example.org");
    let id = scan(&app, &key);
    let base = |extra: Value| {
        let mut b = json!({"ocrID": id, "ratio": "1", "lang": "fr"});
        b.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        b
    };
    for (extra, needle) in [
        (json!({"rect": "10:10:0:20"}), "empty"),
        (json!({"rect": "10:10:-5:20"}), "empty"),
        (json!({"rect": "5000:5000:10:10"}), "outside the page"),
        (json!({"rect": "1:2:3"}), "x:y:w:h"),
        (json!({"rect": "1:1:9:9", "ratio": "0"}), "ratio"),
        (json!({"rect": "1:1:9:9", "action": "rotate"}), "not one of"),
        (json!({"rect": "1:1:9:9", "lang": "es"}), "lang"),
        (json!({"action": "multicut", "jsonRect": "{not json"}), "JSON object"),
        (
            json!({"action": "confirmvalues", "jsonRect": {"totalttcRect": "1:1:9:9"}, "jsonConfirmValues": {"totalttc": "1"}}),
            "supplier",
        ),
    ] {
        let resp = cuts(&app, &key, base(extra.clone()));
        expect_refusal(&resp, 422, "validation_failed");
        assert!(resp.body.contains(needle), "{extra}: {}", resp.body);
    }
    expect_refusal(&cuts(&app, &key, base(json!({"rect": "1:1:9:9", "page": "2"}))), 404, "not_found");
    // Another user's document is unknown.
    expect_refusal(&cuts(&app, &other, base(json!({"rect": "1:1:9:9"}))), 404, "not_found");
    // A text document has no page image to cut.
    let text = upload(&app, &key, "invoice.txt", &fixture("invoice.txt"), &[("lang", "fr")]).json();
    let resp = cuts(&app, &key, json!({"ocrID": text["ocrID"], "ratio": "1", "lang": "fr", "rect": "1:1:9:9"}));
    expect_refusal(&resp, 422, "document_has_no_image");
    let many = (0..51).map(|i| format!("{i}:0:5:5")).collect::<Vec<_>>().join(";");
    expect_refusal(&cuts(&app, &key, base(json!({"action": "multicut", "rect": many}))), 422, "validation_failed");
}

#[test]
fn confirmed_zones_are_learned_per_supplier_and_shared_with_every_user() {
    let app = spawn();
    let alice = user_key(&app, "alice@example.org");
    let bob = user_key(&app, "bob@example.org");
    let id = scan(&app, &alice);
    let confirm = |ratio: &str, rect: String| {
        json!({
            "ocrID": id, "ratio": ratio, "lang": "fr", "action": "confirmvalues", "rect": "",
            "jsonRect": {"totalttcRect": rect, "factureRect": shown(INVOICE_NUMBER, 2.0)},
            "jsonConfirmValues": {"fournisseur": "ACME Fournitures SARL", "fournisseurTva": "FR 40 303265045", "totalttc": "120,00"},
        })
    };
    let done = result_of(&cuts(&app, &alice, confirm("2", shown(TOTAL_TTC_VALUE, 2.0))));
    assert_eq!(done["confirmed"], 2, "{done}");
    assert_eq!(done["supplier"]["numeroTvaIntra"], "FR40303265045");
    // Confirmed again: both zones have two confirmations.
    result_of(&cuts(&app, &alice, confirm("2", shown(TOTAL_TTC_VALUE, 2.0))));
    let values = json!({
        "ocrID": id, "ratio": "1", "lang": "fr", "action": "confirmvalues",
        "values": {"supplier_numtva": {"value": "FR40303265045"}, "amount": {"value": "120.00", "rect": TOTAL_TTC_VALUE, "ratio": "1"}},
    });
    result_of(&cuts(&app, &alice, values));

    // Bob, another user, asks by VAT number (ScanInvoices' form post), then by name.
    let auth = format!("Bearer {bob}");
    let form = app.client.request(
        "POST",
        "/api/ocrcutszones",
        &[("authorization", &auth), ("content-type", "application/x-www-form-urlencoded")],
        Some(b"vatNumber=FR40303265045&objectType=invoices"),
    );
    assert_eq!(form.status, 200, "{}", form.body);
    let zones = form.json()["result"].clone();
    assert_eq!(zones["ratio"], "1");
    assert_eq!(zones["totalttcRect"], TOTAL_TTC_VALUE, "stored at image scale: {zones}");
    assert_eq!(zones["factureRect"], INVOICE_NUMBER);
    assert_eq!(zones["amountRect"], TOTAL_TTC_VALUE);
    // Most confirmed first (ties by name): the two zones confirmed twice, then the one confirmed once.
    assert_eq!(zones["zones"][0], json!({"name": "facture", "rect": INVOICE_NUMBER, "page": 1, "confirmations": 2}));
    assert_eq!(zones["zones"][1]["name"], "totalttc");
    assert_eq!(zones["zones"][2], json!({"name": "amount", "rect": TOTAL_TTC_VALUE, "page": 1, "confirmations": 1}));
    let by_name =
        call(&app, "POST", "/api/ocrcutszones", Some(&bob), Some(&json!({"name": "acme  fournitures sarl"}))).json();
    assert_eq!(by_name["result"]["totalttcRect"], TOTAL_TTC_VALUE, "{by_name}");
    let unknown = call(&app, "POST", "/api/ocrcutszones", Some(&bob), Some(&json!({"vat": "DE123456789"}))).json();
    assert_eq!(unknown["result"], json!({}));
    expect_refusal(&call(&app, "POST", "/api/ocrcutszones", Some(&bob), Some(&json!({}))), 422, "validation_failed");
    expect_refusal(
        &call(&app, "POST", "/api/ocrcutszones", Some(&bob), Some(&json!({"name": "x", "objectType": "orders"}))),
        422,
        "validation_failed",
    );

    // The supplier directory, by VAT number or by id.
    let info = call(&app, "GET", "/api/companyinfo/FR40303265045", Some(&bob), None);
    assert_eq!(info.status, 200, "{}", info.body);
    let info = info.json();
    assert_eq!(info["name"], "ACME Fournitures SARL");
    assert_eq!(info["siren"], "303265045");
    assert_eq!(info["codePays"], "FR");
    assert_eq!(info["source"], "confirmation");
    let by_id = call(&app, "GET", &format!("/api/companyinfo/{}", info["id"]), Some(&bob), None).json();
    assert_eq!(by_id["numeroTvaIntra"], "FR40303265045");
    expect_refusal(&call(&app, "GET", "/api/companyinfo/999999", Some(&bob), None), 404, "not_found");
    expect_refusal(&call(&app, "GET", "/api/companyinfo/nonsense", Some(&bob), None), 404, "not_found");
}

#[test]
fn usage_is_counted_per_month_and_a_plans_quota_answers_429() {
    let app = spawn();
    let key = user_key(&app, "quota@example.org");
    let other = user_key(&app, "nosy@example.org");
    let sub = call(&app, "GET", "/api/subscriptions", Some(&key), None).json();
    assert_eq!(sub["plan"], "default");
    assert_eq!(sub["pages_per_month"], 0);
    assert!(sub["period_start"].as_str().unwrap().ends_with("-01"), "{sub}");

    let dir = app.dir.path().display().to_string();
    let (status, out, err) =
        run_cli(&["--data-dir", &dir, "ocr", "plan", "--email", "quota@example.org", "--pages-per-month", "2"], &[]);
    assert!(status.success(), "{out}{err}");
    let two_pages = fixture("two-scanned-pages.pdf");
    assert_eq!(upload(&app, &key, "two.pdf", &two_pages, &[("lang", "fr")]).status, 200);
    let sub = call(&app, "GET", "/api/subscriptions", Some(&key), None).json();
    assert_eq!((sub["plan"].as_str(), sub["pages_per_month"].as_u64()), (Some("custom"), Some(2)));
    assert_eq!(sub["usage"]["pages"], 2, "{sub}");

    let over = upload(&app, &key, "invoice.txt", &fixture("invoice.txt"), &[("lang", "fr")]);
    expect_refusal(&over, 429, "rate_limited");
    assert!(over.body.contains("quota of 2 pages"), "{}", over.body);
    assert!(over.header("retry-after").is_some_and(|s| s.parse::<u64>().unwrap() > 0));
    // Other users are not held back.
    assert_eq!(upload(&app, &other, "invoice.txt", &fixture("invoice.txt"), &[("lang", "fr")]).status, 200);

    let stats = call(&app, "GET", "/api/subscriptions/stats/quota@example.org", Some(&key), None).json();
    assert_eq!(stats["months"][0]["documents"], 1, "refused uploads are not counted: {stats}");
    let month = stats["months"][0]["month"].as_str().unwrap().to_owned();
    let one =
        call(&app, "POST", "/api/subscriptions/stats/quota@example.org", Some(&key), Some(&json!({"month": month})))
            .json();
    assert_eq!(one["months"].as_array().unwrap().len(), 1);
    let none = call(
        &app,
        "POST",
        "/api/subscriptions/stats/quota@example.org",
        Some(&key),
        Some(&json!({"month": "1999-01"})),
    )
    .json();
    assert_eq!(none["months"], json!([]));
    expect_refusal(
        &call(&app, "POST", "/api/subscriptions/stats/quota@example.org", Some(&key), Some(&json!({"month": "soon"}))),
        422,
        "validation_failed",
    );
    // Another user's usage is unknown to a plain user, visible to a site admin.
    expect_refusal(
        &call(&app, "GET", "/api/subscriptions/stats/quota@example.org", Some(&other), None),
        404,
        "not_found",
    );
    let admin = make_role_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let admin_key = make_scoped_key(&app.core, &admin, KeyScope::User, &[Perm::Read], None);
    let seen = call(&app, "GET", "/api/subscriptions/stats/quota@example.org", Some(&admin_key), None);
    assert_eq!(seen.status, 200, "{}", seen.body);

    // Back on the default plan (no limit): uploads pass again.
    let (status, out, err) =
        run_cli(&["--data-dir", &dir, "ocr", "plan", "--email", "quota@example.org", "--default"], &[]);
    assert!(status.success(), "{out}{err}");
    assert_eq!(upload(&app, &key, "invoice.txt", &fixture("invoice.txt"), &[("lang", "fr")]).status, 200);
    let (status, _, _) =
        run_cli(&["--data-dir", &dir, "ocr", "plan", "--email", "nobody@example.org", "--pages-per-month", "1"], &[]);
    assert_eq!(status.code(), Some(3), "unknown account: not found");
}

#[test]
fn software_records_are_read_by_all_and_written_by_a_site_admins_manage_key() {
    let app = spawn();
    let user = user_key(&app, "reader@example.org");
    let admin = make_role_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    let manage = make_scoped_key(&app.core, &admin, KeyScope::User, &[Perm::Read, Perm::Manage], None);
    let read_only = make_scoped_key(&app.core, &admin, KeyScope::User, &[Perm::Read], None);
    let record = json!({"id": "scaninvoices", "name": "ScanInvoices", "latest_version": "2.4.0", "min_version": "2.0.0",
                        "download_url": "https://www.dolistore.com/scaninvoices", "notes": "Dolibarr module"});
    expect_refusal(&call(&app, "POST", "/api/softwareInfos", Some(&user), Some(&record)), 403, "forbidden");
    expect_refusal(&call(&app, "POST", "/api/softwareInfos", Some(&read_only), Some(&record)), 403, "forbidden");
    let made = call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&record));
    assert_eq!(made.status, 200, "{}", made.body);
    assert_eq!(made.json()["latest_version"], "2.4.0");
    expect_refusal(&call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&record)), 409, "conflict");

    let list = call(&app, "GET", "/api/softwareInfos", Some(&user), None).json();
    assert_eq!(list["data"][0]["id"], "scaninvoices");
    let one = call(&app, "GET", "/api/softwareInfos/scaninvoices", Some(&user), None).json();
    assert_eq!(one["name"], "ScanInvoices");

    let put = json!({"name": "ScanInvoices", "latest_version": "2.5.0", "min_version": "2.1.0"});
    expect_refusal(&call(&app, "PUT", "/api/softwareInfos/scaninvoices", Some(&user), Some(&put)), 403, "forbidden");
    let replaced = call(&app, "PUT", "/api/softwareInfos/scaninvoices", Some(&manage), Some(&put)).json();
    assert_eq!((replaced["latest_version"].as_str(), replaced["download_url"].as_str()), (Some("2.5.0"), Some("")));
    expect_refusal(&call(&app, "PUT", "/api/softwareInfos/missing", Some(&manage), Some(&put)), 404, "not_found");

    for (bad, needle) in [
        (json!({"id": "a b", "name": "x"}), "id"),
        (json!({"id": "x", "name": " "}), "name is required"),
        (json!({"id": "x", "name": "x", "download_url": "javascript:alert(1)"}), "download_url"),
        (json!({"id": "x", "name": "x", "latest_version": "1\u{0}"}), "control"),
    ] {
        let resp = call(&app, "POST", "/api/softwareInfos", Some(&manage), Some(&bad));
        expect_refusal(&resp, 422, "validation_failed");
        assert!(resp.body.contains(needle), "{bad}: {}", resp.body);
    }
    expect_refusal(&call(&app, "DELETE", "/api/softwareInfos/scaninvoices", Some(&user), None), 403, "forbidden");
    assert_eq!(call(&app, "DELETE", "/api/softwareInfos/scaninvoices", Some(&manage), None).status, 200);
    expect_refusal(&call(&app, "GET", "/api/softwareInfos/scaninvoices", Some(&user), None), 404, "not_found");
    expect_refusal(&call(&app, "DELETE", "/api/softwareInfos/scaninvoices", Some(&manage), None), 404, "not_found");
}

/// A form post as ScanInvoices' PHP `http_build_query` sends it: url-encoded, no `lang`.
fn form_post(app: &TestApp, key: &str, path: &str, fields: &[(&str, &str)]) -> Resp {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
                b' ' => "+".to_owned(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let body = fields.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&");
    let auth = format!("Bearer {key}");
    app.client.request(
        "POST",
        path,
        &[("authorization", &auth), ("content-type", "application/x-www-form-urlencoded")],
        Some(body.as_bytes()),
    )
}

/// The invoice scan read with profile=invoice, as ScanInvoices sends it first: its id and `meta`.
fn recognized_scan(app: &TestApp, key: &str) -> (String, Value) {
    let resp =
        upload(app, key, "invoice-scan.jpg", &fixture("invoice-scan.jpg"), &[("lang", "fr"), ("profile", "invoice")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    let body = resp.json();
    (body["ocrID"].as_str().unwrap().to_owned(), body["meta"].clone())
}

#[test]
fn scaninvoices_rect_cut_without_lang_uses_upload_language() {
    let app = spawn();
    let key = user_key(&app, "nolang@example.org");
    let id = scan(&app, &key);
    let rect = shown(TOTAL_TTC_VALUE, 0.5);
    let resp =
        form_post(&app, &key, "/api/ocrcuts", &[("ocrID", &id), ("ratio", "0.5"), ("rect", &rect), ("action", "rect")]);
    let one = result_of(&resp);
    assert!(one["texte"].as_str().unwrap().contains("120,00"), "{one}");
    // A named zone read without lang too (multicut), and a lang that is given is still checked.
    let json_rect = json!({"factureRect": INVOICE_NUMBER}).to_string();
    let named = result_of(&form_post(
        &app,
        &key,
        "/api/ocrcuts",
        &[("ocrID", &id), ("ratio", "1"), ("action", "multicut"), ("jsonRect", &json_rect)],
    ));
    assert!(named["facture"].as_str().unwrap().contains("2026-042"), "{named}");
    let bad =
        form_post(&app, &key, "/api/ocrcuts", &[("ocrID", &id), ("ratio", "1"), ("rect", "1:1:9:9"), ("lang", "es")]);
    expect_refusal(&bad, 422, "validation_failed");
}

#[test]
fn scaninvoices_confirmvalues_without_supplier_learns_for_the_documents_supplier() {
    let app = spawn();
    let key = user_key(&app, "confirm@example.org");
    let (id, meta) = recognized_scan(&app, &key);
    let vat = meta["supplier_numtva"].as_str().unwrap_or("").to_owned();
    let name = meta["supplier_name"].as_str().unwrap_or("").to_owned();
    assert!(!vat.is_empty() || !name.is_empty(), "the scan's supplier is extracted: {meta}");
    // Before any confirmation the supplier has no zone.
    let asked = if vat.is_empty() { ("name", name.as_str()) } else { ("vatNumber", vat.as_str()) };
    let before = form_post(&app, &key, "/api/ocrcutszones", &[asked, ("objectType", "invoices")]).json();
    assert!(before["result"].get("totalttcRect").is_none(), "{before}");

    // ScanInvoices' manual import: no lang, values naming no supplier.
    let json_rect = json!({"totalttcRect": TOTAL_TTC_VALUE, "factureRect": INVOICE_NUMBER}).to_string();
    let values = json!({"totalttc": "120,00", "facture": "2026-042"}).to_string();
    let done = result_of(&form_post(
        &app,
        &key,
        "/api/ocrcuts",
        &[
            ("ocrID", &id),
            ("ratio", "1"),
            ("action", "confirmvalues"),
            ("jsonRect", &json_rect),
            ("jsonConfirmValues", &values),
        ],
    ));
    assert_eq!(done["confirmed"], 2, "{done}");

    let zones = form_post(&app, &key, "/api/ocrcutszones", &[asked, ("objectType", "invoices")]);
    assert_eq!(zones.status, 200, "{}", zones.body);
    let zones = zones.json()["result"].clone();
    assert_eq!(zones["ratio"], "1", "{zones}");
    assert_eq!(zones["totalttcRect"], TOTAL_TTC_VALUE, "{zones}");
    assert_eq!(zones["factureRect"], INVOICE_NUMBER, "{zones}");

    // A document from which no supplier was extracted (stored only), confirmed without naming
    // one: nothing to remember the zones for.
    let stored = scan(&app, &key);
    let resp = form_post(
        &app,
        &key,
        "/api/ocrcuts",
        &[
            ("ocrID", &stored),
            ("ratio", "1"),
            ("action", "confirmvalues"),
            ("jsonRect", &json_rect),
            ("jsonConfirmValues", &values),
        ],
    );
    expect_refusal(&resp, 422, "validation_failed");
    assert!(resp.body.contains("supplier"), "{}", resp.body);
}
