//! Invoices (issue 7) against the real server: `yamlFilter` templates, zone cuts and the zones
//! learned per supplier, the supplier directory, usage and quotas, and client software records.

use crate::ocr::{call, expect_refusal, spawn, stored_blobs, upload, user_key};
use courrier_tests::harness::workspace_root;
use serde_json::json;
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
    assert!(other["meta"].get("invoice_number").is_none(), "{other}");
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
