//! The real binary stops cleanly on SIGTERM and SIGINT, and logs every refusal with its request
//! id, route, status and code.

use courrier_tests::harness::ProcessApp;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn sigterm_closes_idle_connections_and_exits_zero_promptly() {
    for signal in ["TERM", "INT"] {
        let app = ProcessApp::spawn(&[]);
        // An idle keep-alive connection must not hold the shutdown for its grace period.
        let mut idle = TcpStream::connect(app.addr).unwrap();
        idle.write_all(b"GET /api/v1/system/health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut first = [0u8; 12];
        idle.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        let started = Instant::now();
        app.signal(signal);
        let addr = app.addr;
        let (status, stderr) = app.wait(Duration::from_secs(10));
        assert!(status.success(), "SIG{signal}: {status:?}\n{stderr}");
        assert!(started.elapsed() < Duration::from_secs(5), "shutdown waited for an idle connection");
        assert!(stderr.contains(&format!("SIG{signal} received")), "{stderr}");
        assert!(TcpStream::connect(addr).is_err(), "still accepting after exit");
    }
}

#[test]
fn refusals_are_logged_with_request_id_route_status_and_code() {
    let app = ProcessApp::spawn(&[("COURRIER_LOG_FORMAT", "json"), ("COURRIER_LOG", "info")]);
    let resp = app.client.get("/api/v1/no-such-route");
    let id = resp.header("x-request-id").unwrap().to_owned();
    let resp = app.client.request("DELETE", "/api/v1/system/health", &[], None);
    let id405 = resp.header("x-request-id").unwrap().to_owned();
    app.signal("TERM");
    let (status, stderr) = app.wait(Duration::from_secs(10));
    assert!(status.success());
    let lines: Vec<serde_json::Value> =
        stderr.lines().map(|l| serde_json::from_str(l).expect("JSON log line")).collect();
    let find = |id: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["request_id"] == id)
            .unwrap_or_else(|| panic!("no log line for {id} in\n{stderr}"))
            .clone()
    };
    let line = find(&id);
    assert_eq!(line["fields"]["status"], 404);
    assert_eq!(line["fields"]["code"], "not_found");
    assert_eq!(line["fields"]["route"], "/api/v1/no-such-route");
    let line = find(&id405);
    assert_eq!(
        (line["fields"]["status"].as_u64(), line["fields"]["code"].as_str()),
        (Some(405), Some("method_not_allowed"))
    );
    assert_eq!(line["fields"]["route"], "/api/v1/system/health", "the matched route, not the raw path");
}
