//! Both OpenAPI documents are served, generated from the route table, and cover it exactly.
//! (CI also runs openapi-spec-validator and schemathesis against them.)

use courrier_http::routes::{self, Api};
use courrier_tests::harness::TestApp;
use serde_json::Value;

fn documents(app: &TestApp) -> [(Api, Value); 2] {
    let fetch = |path: &str| {
        let resp = app.get(path);
        assert_eq!(resp.status, 200);
        assert_eq!(resp.header("content-type"), Some("application/json"));
        resp.json()
    };
    [(Api::Mailing, fetch("/api/v1/openapi.json")), (Api::Ocr, fetch("/api/openapi.json"))]
}

#[test]
fn every_route_of_the_table_is_documented_and_nothing_else() {
    let app = TestApp::spawn();
    for (api, doc) in documents(&app) {
        assert_eq!(doc["openapi"], "3.1.0");
        let mut documented = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                documented.push((method.to_uppercase(), path.clone()));
                let responses = op["responses"].as_object().unwrap();
                assert!(!responses.is_empty(), "{method} {path} has no responses");
                for (status, r) in responses {
                    assert!(r["description"].is_string(), "{method} {path} {status} lacks a description");
                }
                assert!(op["operationId"].is_string());
            }
        }
        let mut table: Vec<(String, String)> =
            routes::all().filter(|r| r.api == api).map(|r| (r.method.to_string(), r.path.to_owned())).collect();
        documented.sort();
        table.sort();
        assert_eq!(documented, table, "{api:?}");
    }
}

#[test]
fn operation_ids_are_unique_and_every_ref_resolves() {
    let app = TestApp::spawn();
    for (_, doc) in documents(&app) {
        let text = doc.to_string();
        for piece in text.split("\"$ref\":\"").skip(1) {
            let target = piece.split('"').next().unwrap();
            let pointer = target.strip_prefix('#').expect("local refs only");
            assert!(doc.pointer(pointer).is_some(), "unresolved {target}");
        }
        let mut ids: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .map(|op| op["operationId"].as_str().unwrap())
            .collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "duplicate operationId");
    }
}

#[test]
fn the_ocr_document_has_the_contracts_version_and_tags() {
    let app = TestApp::spawn();
    let [(_, mailing), (_, ocr)] = documents(&app);
    assert_eq!(ocr["info"]["version"], "1.0.0");
    let tags: Vec<&str> = ocr["tags"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(tags, ["Endpoints", "Login/Logout management", "OCR \"Cuts\"", "OCR Documents"]);
    assert_eq!(mailing["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(mailing["components"]["securitySchemes"]["bearerAuth"].is_object());
}

/// What JSON Schema (the `jsonschema` package of the CI venv, draft 2020-12) says of each
/// instance against `schema`: valid or not.
fn schema_verdicts(schema: &Value, instances: &[Value]) -> Vec<bool> {
    use std::io::Write;
    let script = "import json, sys, jsonschema\n\
                  d = json.load(sys.stdin)\n\
                  v = jsonschema.Draft202012Validator(d['schema'])\n\
                  print(json.dumps([v.is_valid(i) for i in d['instances']]))\n";
    let mut child = std::process::Command::new(courrier_tests::harness::venv_python("jsonschema"))
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::json!({ "schema": schema, "instances": instances });
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn request_schema(doc: &Value, method: &str, path: &str) -> Value {
    let schema = doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"].clone();
    assert!(schema.is_object(), "{method} {path}");
    assert!(!schema.to_string().contains("$ref"), "inline schema expected: {schema}");
    schema
}

#[test]
fn a_schema_driven_client_refuses_a_send_without_text_or_html_and_control_characters_in_a_name_as_the_server_does() {
    use crate::access::{bearer, call, make_key, make_list, make_user};
    use courrier_core::access::Perm;
    use courrier_core::access::model::{KeyScope, Role};
    use courrier_core::mailing::model::SubscriptionPolicy;
    use serde_json::json;
    let app = TestApp::spawn();
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    let doc = app.get("/api/v1/openapi.json").json();

    // Sends: the server refuses (422) exactly what the document says is invalid.
    let sends = "/api/v1/domains/{domain}/lists/{list}/sends";
    let cases = [
        json!({ "subject": "Hi", "text": "Hello" }),
        json!({ "subject": "Hi", "html": "<p>Hello</p>" }),
        json!({ "subject": "Hi", "text": " ", "html": "<p>Hello</p>" }),
        json!({ "subject": "Hi", "text": null, "html": "x" }),
        json!({ "subject": "Hi" }),
        json!({ "subject": "Hi", "text": null, "html": null }),
        json!({ "subject": "Hi", "text": " \n\t", "html": "\u{3000}" }),
        json!({ "subject": "Hi", "text": "" }),
    ];
    let verdicts = schema_verdicts(&request_schema(&doc, "post", sends), &cases);
    assert_eq!(verdicts, [true, true, true, true, false, false, false, false]);
    for (body, valid) in cases.iter().zip(verdicts) {
        let r = call(&app, "POST", "/api/v1/domains/example.org/lists/news/sends", &[bearer(&key)], Some(body));
        assert_eq!(r.status == 202, valid, "{body}: {} {}", r.status, r.body);
        if !valid {
            r.expect_error(422, "validation_failed");
        }
    }

    // Users: name and mobile refuse control characters (once trimmed) and more than 200 characters.
    let long = "a".repeat(201);
    let cases = [
        ("name", json!("Ada Lovelace")),
        ("name", json!("  Ada\t")),
        ("mobile", json!("+33 6 12 34 56 78\n")),
        ("name", json!("a".repeat(200))),
        ("name", json!("Ada\u{7}Lovelace")),
        ("mobile", json!("+33 6\n12 34 56 78")),
        ("name", json!("Ada\u{85}Lovelace")),
        ("mobile", json!("+33\u{1b}[2J")),
        ("name", json!(long)),
    ];
    let bodies: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, (field, value))| {
            let mut body = json!({ "email": format!("u{i}@example.org") });
            body[*field] = value.clone();
            body
        })
        .collect();
    let verdicts = schema_verdicts(&request_schema(&doc, "post", "/api/v1/users"), &bodies);
    assert_eq!(verdicts, [true, true, true, true, false, false, false, false, false]);
    let patches: Vec<Value> = cases
        .iter()
        .map(|(field, value)| {
            let mut patch = json!({});
            patch[*field] = value.clone();
            patch
        })
        .collect();
    assert_eq!(schema_verdicts(&request_schema(&doc, "patch", "/api/v1/users/{id}"), &patches), verdicts);
    for ((body, patch), valid) in bodies.iter().zip(&patches).zip(verdicts) {
        let r = call(&app, "POST", "/api/v1/users", &[bearer(&key)], Some(body));
        assert_eq!(r.status == 201, valid, "{body}: {} {}", r.status, r.body);
        if !valid {
            r.expect_error(422, "validation_failed");
        }
        let r = call(&app, "PATCH", &format!("/api/v1/users/{}", admin.id), &[bearer(&key)], Some(patch));
        assert_eq!(r.status == 200, valid, "{patch}: {} {}", r.status, r.body);
    }
}
