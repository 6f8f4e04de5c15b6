//! The request pipeline, exercised over a real socket with probe routes that the product does not
//! have (a handler that panics, a JSON echo, an id route): what every real route inherits.

use super::*;
use crate::body::Json;
use crate::envelope::Reply;
use crate::routes::{Access, Api, JSON_BODY_LIMIT, Param, Success};
use crate::server::{ServerLimits, serve};
use axum::extract::Path;
use axum::routing::on;
use courrier_core::adapters::system_clock::SystemClock;
use courrier_core::egress::Egress;
use courrier_core::kernel::BuildInfo;
use courrier_store_sqlite::SqliteStore;
use http::Method;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const fn probe(
    method: Method,
    path: &'static str,
    handler: fn(axum::routing::MethodFilter) -> axum::routing::MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        api: Api::Mailing,
        operation_id: "probe",
        summary: "probe",
        tag: "probe",
        access: Access::Public,
        params: &[Param { name: "id", kind: ParamKind::Id, description: "an id" }],
        query: &[],
        request: None,
        success: Success::Data(200, schema::ANY_OBJECT),
        body_limit: JSON_BODY_LIMIT,
        errors: &[],
        handler,
    }
}

static PROBES: &[Route] = &[
    probe(Method::GET, "/probe/panic", |m| on(m, panics)),
    probe(Method::GET, "/probe/blocking-panic", |m| {
        on(m, || async {
            blocking::run_blocking(|| -> Result<Reply, ApiError> { panic!("probe panic in core") }).await
        })
    }),
    probe(Method::GET, "/probe/slow", |m| {
        on(m, || async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            Reply::ok(serde_json::json!({ "slow": true }))
        })
    }),
    probe(Method::POST, "/probe/echo", |m| on(m, |Json(v): Json<serde_json::Value>| async move { Reply::ok(v) })),
    probe(Method::GET, "/probe/items/{id}", |m| {
        on(m, |Path(id): Path<String>| async move { Reply::ok(serde_json::json!({ "id": id })) })
    }),
];

async fn panics() -> Reply {
    panic!("probe panic")
}

struct Probe {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        let _ = self.thread.take().map(std::thread::JoinHandle::join);
    }
}

fn start(limits: ServerLimits, body_read_timeout: Duration) -> Probe {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("c.db"), 0).unwrap();
    let store = Arc::new(store);
    let clock: Arc<dyn courrier_core::kernel::Clock> = Arc::new(SystemClock);
    let mail = Arc::new(courrier_core::testing::RecordingTransport::default());
    let mailing = courrier_core::testing::mailing(store.clone(), clock.clone(), mail, Egress::offline());
    let ocr = Arc::new(courrier_core::testing::ocr(store.clone(), clock, Vec::new(), ""));
    let version = courrier_core::system::version(&BuildInfo::unknown(), &*store);
    let mut state = AppState::new(Arc::clone(&mailing.access), Arc::new(mailing), ocr, &version);
    state.body_read_timeout = body_read_timeout;
    let router = router_of(state, PROBES.iter().chain(routes::all()));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            serve(listener, router, limits, async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
    });
    Probe { addr, stop: Some(stop), thread: Some(thread), _dir: dir }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

fn json_of(resp: &mut ureq::http::Response<ureq::Body>) -> serde_json::Value {
    serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap()
}

fn expect_error(resp: &mut ureq::http::Response<ureq::Body>, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(resp.status().as_u16(), status);
    let header_id = resp.headers().get("x-request-id").unwrap().to_str().unwrap().to_owned();
    let body = json_of(resp);
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["meta"]["request_id"], header_id.as_str());
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    body
}

#[test]
fn a_panicking_handler_is_a_plain_500_and_the_server_keeps_serving() {
    let p = start(ServerLimits::default(), Duration::from_secs(30));
    let a = agent();
    for path in ["/probe/panic", "/probe/blocking-panic"] {
        let body = expect_error(&mut a.get(format!("http://{}{path}", p.addr)).call().unwrap(), 500, "internal_error");
        assert_eq!(body["error"]["message"], "internal error", "no detail leaks");
    }
    let resp = a.get(format!("http://{}/api/v1/system/health", p.addr)).call().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[test]
fn json_bodies_are_refused_with_their_reason() {
    let p = start(ServerLimits::default(), Duration::from_secs(30));
    let a = agent();
    let url = format!("http://{}/probe/echo", p.addr);
    let post = |ct: &str, body: Vec<u8>| a.post(&url).header("content-type", ct).send(body).unwrap();
    let mut ok = post("application/json", r#"{"a": [1, "é"]}"#.as_bytes().to_vec());
    assert_eq!(ok.status().as_u16(), 200);
    assert_eq!(json_of(&mut ok)["data"]["a"][1], "é");
    expect_error(&mut post("application/json", b"{\"a\":".to_vec()), 400, "malformed_body");
    expect_error(&mut post("application/json", b"\xff\xfe".to_vec()), 400, "malformed_body");
    expect_error(&mut post("text/plain", b"{}".to_vec()), 400, "malformed_body");
    expect_error(&mut post("application/json", b"[1, 2]".to_vec()), 422, "validation_failed");
}

/// A body with no declared length (chunked) that grows past the limit is cut off while it is read.
/// (A declared length over the limit is refused before reading: its own raw-socket test below.)
#[test]
fn a_chunked_body_over_the_limit_is_cut_off_while_read() {
    let p = start(ServerLimits::default(), Duration::from_secs(30));
    let mut body = format!("{{\"a\":\"{}\"}}", "x".repeat(JSON_BODY_LIMIT + 100)).into_bytes();
    let head =
        b"POST /probe/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let mut wire = head.to_vec();
    for chunk in body.chunks(64 * 1024) {
        wire.extend(format!("{:x}\r\n", chunk.len()).as_bytes());
        wire.extend(chunk);
        wire.extend(b"\r\n");
    }
    wire.extend(b"0\r\n\r\n");
    body.clear();
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server answers as soon as the limit is passed and may close before the rest is sent:
    // a failed write is expected then, and the answer is read all the same.
    let _ = s.write_all(&wire);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let answer = String::from_utf8_lossy(&out);
    if !answer.is_empty() {
        assert!(answer.starts_with("HTTP/1.1 400") && answer.contains("body_too_large"), "{answer}");
    }
    // Either way, the server goes on serving.
    let resp = agent().get(format!("http://{}/api/v1/system/health", p.addr)).call().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}

#[test]
fn path_ids_that_are_not_positive_integers_are_422() {
    let p = start(ServerLimits::default(), Duration::from_secs(30));
    let a = agent();
    let mut ok = a.get(format!("http://{}/probe/items/42", p.addr)).call().unwrap();
    assert_eq!(json_of(&mut ok)["data"]["id"], "42");
    for bad in ["0", "-1", "abc", "1.5", "01", "%2B1", "99999999999999999999"] {
        let mut resp = a.get(format!("http://{}/probe/items/{bad}", p.addr)).call().unwrap();
        let body = expect_error(&mut resp, 422, "invalid_path_id");
        assert!(body["error"]["message"].as_str().unwrap().contains("id"), "{body}");
    }
}

/// Sends raw bytes and reads the answer until the server closes or `wait` passes.
fn raw(addr: SocketAddr, bytes: &[u8], wait: Duration) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(wait)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn an_oversize_declared_length_is_refused_before_the_body_is_read() {
    let p = start(ServerLimits::default(), Duration::from_secs(30));
    // Only the headers are sent: the answer comes anyway, so nothing waited for the body.
    let head = format!(
        "POST /probe/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        JSON_BODY_LIMIT + 1
    );
    let answer = raw(p.addr, head.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("body_too_large"), "{answer}");
}

#[test]
fn a_slow_body_is_cut_off_by_the_read_time_out() {
    let p = start(ServerLimits::default(), Duration::from_secs(1));
    let head =
        "POST /probe/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":";
    let answer = raw(p.addr, head.as_bytes(), Duration::from_secs(5));
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");
}

#[test]
fn slowloris_connections_are_closed_and_the_cap_holds_the_rest_back() {
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(1),
        max_connections: 4,
        reserved_connections: 0,
        ..Default::default()
    };
    let p = start(limits, Duration::from_secs(30));
    // Four connections that never finish their headers take every slot.
    let slow: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(p.addr).unwrap();
            s.write_all(b"GET /api/v1/system/health HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // A fifth is accepted by the kernel but not served while the slots are taken...
    let started = std::time::Instant::now();
    let answer = raw(
        p.addr,
        b"GET /api/v1/system/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // ...until the header time-out closed the slow ones and freed their slots.
    assert!(started.elapsed() >= Duration::from_millis(500), "served at once: the cap did not hold");
    for mut s in slow {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf); // returns once the server closed it
        let text = String::from_utf8_lossy(&buf);
        assert!(text.is_empty() || text.starts_with("HTTP/1.1 408"), "{text}");
    }
}

/// Every regular slot held by slow clients: the operator's health probe is still answered, from the
/// reserve, and a connection from the reserve that asks for anything else is closed unanswered.
#[test]
fn with_every_slot_taken_the_health_probe_is_served_from_the_reserve_and_nothing_else_is() {
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(60),
        max_connections: 3,
        reserved_connections: 2,
        ..Default::default()
    };
    let p = start(limits, Duration::from_secs(30));
    let _slow: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(p.addr).unwrap();
            s.write_all(b"GET /api/v1/system/health HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let answer = raw(p.addr, b"GET /api/v1/system/health HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    // One request per reserved connection: the server closed it after the answer (read_to_end
    // returned), and said so.
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    let refused = raw(p.addr, b"GET /probe/items/1 HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(10));
    assert_eq!(refused, "", "a route outside /api/v1/system/ is not served from the reserve");
}

#[test]
fn idle_keep_alive_connections_are_closed_too() {
    let limits = ServerLimits { header_read_timeout: Duration::from_secs(1), ..Default::default() };
    let p = start(limits, Duration::from_secs(30));
    let mut s = TcpStream::connect(p.addr).unwrap();
    s.write_all(b"GET /api/v1/system/health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let started = std::time::Instant::now();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 200"));
    assert!(started.elapsed() < Duration::from_secs(4), "the idle connection was left open");
}

#[test]
fn shutdown_lets_an_in_flight_request_finish_and_refuses_new_connections() {
    let mut p = start(ServerLimits::default(), Duration::from_secs(30));
    let addr = p.addr;
    let in_flight =
        std::thread::spawn(move || raw(addr, b"GET /probe/slow HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(200));
    let started = std::time::Instant::now();
    let _ = p.stop.take().map(|s| s.send(()));
    std::thread::sleep(Duration::from_millis(200));
    assert!(TcpStream::connect(addr).is_err(), "accepting after shutdown began");
    let answer = in_flight.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"slow\":true"), "{answer}");
    p.thread.take().unwrap().join().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "serve() did not return once the request finished");
}
