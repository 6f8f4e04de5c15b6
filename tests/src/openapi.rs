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
