//! The contract's envelopes, request ids, and the refusals every route shares.

use courrier_http::routes::{self, ParamKind};
use courrier_tests::harness::{TestApp, raw_exchange};
use std::time::Duration;

#[test]
fn health_answers_the_success_envelope_with_its_request_id() {
    let app = TestApp::spawn();
    let resp = app.get("/api/v1/system/health");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some("application/json"));
    let body = resp.json();
    assert_eq!(body["data"], serde_json::json!({ "status": "ok" }));
    assert_eq!(body["meta"]["api_version"], "v1");
    let id = body["meta"]["request_id"].as_str().unwrap();
    assert_eq!(resp.header("x-request-id"), Some(id));
    assert!(id.starts_with("req_") && id.len() > 10, "{id}");
}

/// A client (or a benchmark) tells the server's time from its own wait: every answer, refusals
/// included, says how long the server took in `Server-Timing: app;dur=<ms>`.
#[test]
fn every_answer_carries_its_server_time() {
    let app = TestApp::spawn();
    let server_ms = |resp: &courrier_tests::harness::Resp| -> f64 {
        let value = resp.header("server-timing").unwrap_or_else(|| panic!("no server-timing: {:?}", resp.headers));
        let ms = value.strip_prefix("app;dur=").unwrap_or_else(|| panic!("{value}"));
        ms.parse().unwrap_or_else(|e| panic!("{value}: {e}"))
    };
    let ok = app.get("/api/v1/system/health");
    assert_eq!(ok.status, 200);
    assert!(server_ms(&ok) >= 0.0);
    let refused = app.get("/api/v1/domains");
    assert_eq!(refused.status, 401);
    assert!(server_ms(&refused) >= 0.0);
    let unknown = app.get("/api/v1/nope");
    assert_eq!(unknown.status, 404);
    assert!(server_ms(&unknown) >= 0.0);
}

#[test]
fn request_ids_differ_between_requests() {
    let app = TestApp::spawn();
    let ids: std::collections::HashSet<String> =
        (0..20).map(|_| app.get("/api/v1/system/health").header("x-request-id").unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 20);
}

#[test]
fn unknown_routes_are_404_envelopes() {
    let app = TestApp::spawn();
    // (Under /p/, the pages' HTML 404 page instead: decisions.md; subscribers.rs tests it.)
    for path in [
        "/",
        "/api",
        "/api/v1",
        "/api/v1/",
        "/api/v1/system/health/extra",
        "/api/v1/System/Health",
        "/api/v2/system/health",
        "/api/ocrs-nope",
        "/%ff%fe",
    ] {
        app.get(path).expect_error(404, "not_found");
    }
}

#[test]
fn a_wrong_method_is_a_405_envelope_naming_the_allowed_ones() {
    let app = TestApp::spawn();
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        let resp = app.client.request(method, "/api/v1/system/health", &[], None);
        resp.expect_error(405, "method_not_allowed");
        assert_eq!(resp.header("allow"), Some("GET,HEAD"));
    }
}

#[test]
fn head_answers_like_get_without_a_body() {
    let app = TestApp::spawn();
    let resp = app.client.request("HEAD", "/api/v1/system/health", &[], None);
    assert_eq!((resp.status, resp.body.as_str()), (200, ""));
}

#[test]
fn an_oversize_declared_body_is_refused_before_it_is_read() {
    let app = TestApp::spawn();
    // Only the headers go out; the answer comes without the server waiting for the body.
    let answer = raw_exchange(
        app.addr,
        b"GET /api/v1/system/health HTTP/1.1\r\nHost: x\r\nContent-Length: 500000000\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("\"body_too_large\""), "{answer}");
}

#[test]
fn garbage_instead_of_http_is_refused_and_the_server_goes_on() {
    let app = TestApp::spawn();
    let answer = raw_exchange(app.addr, b"\x16\x03\x01\x02\x00 not http at all\r\n\r\n", Duration::from_secs(5));
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(app.get("/api/v1/system/health").status, 200);
}

/// Every route with an integer id segment refuses what is not a positive integer with 422, the
/// same way, before its handler or its authentication runs.
#[test]
fn every_id_segment_refuses_what_is_not_a_positive_integer() {
    let app = TestApp::spawn();
    for route in routes::all() {
        for param in route.params.iter().filter(|p| p.kind == ParamKind::Id) {
            for bad in ["0", "-3", "abc", "1.5", "007", "99999999999999999999"] {
                let path = route.params.iter().fold(route.path.to_owned(), |path, p| {
                    let value = if p.name == param.name {
                        bad
                    } else if p.kind == ParamKind::Id {
                        "1"
                    } else {
                        "example.org"
                    };
                    path.replace(&format!("{{{}}}", p.name), value)
                });
                let resp = app.client.request(route.method.as_str(), &path, &[], None);
                if route.api == courrier_http::routes::Api::Ocr {
                    // The OCR service's own error shape: {"errors", "code"}.
                    assert_eq!((resp.status, resp.json()["code"].as_str()), (422, Some("invalid_path_id")), "{path}");
                } else {
                    resp.expect_error(422, "invalid_path_id");
                }
            }
        }
    }
}

#[test]
fn a_client_without_credentials_is_told_the_bearer_scheme_on_every_route_of_both_apis() {
    // RFC 9110: a 401 carries WWW-Authenticate. A client that sends no Authorization header
    // learns from it how to authenticate, on the mailing API and on the OCR API alike.
    let app = TestApp::spawn();
    let mut seen = Vec::new();
    for route in routes::all().filter(|r| !matches!(r.access, routes::Access::Public)) {
        let path = route.params.iter().fold(route.path.to_owned(), |path, p| {
            let value = if p.kind == ParamKind::Id { "1" } else { "example.org" };
            path.replace(&format!("{{{}}}", p.name), value)
        });
        let body = (route.method.as_str() != "GET").then_some(b"{}".as_slice());
        let headers: &[(&str, &str)] = if body.is_some() { &[("content-type", "application/json")] } else { &[] };
        let resp = app.client.request(route.method.as_str(), &path, headers, body);
        assert_eq!(resp.status, 401, "{} {path}: {}", route.method, resp.body);
        assert_eq!(resp.header("www-authenticate"), Some("Bearer realm=\"courrier\""), "{} {path}", route.method);
        seen.push(route.api);
    }
    assert!(seen.contains(&routes::Api::Ocr) && seen.contains(&routes::Api::Mailing), "{seen:?}");
}
