//! Hostile and careless clients of the HTTP server (issue 16): slowloris connections held open
//! while the operator's health probe keeps asking.

use courrier_tests::harness::ProcessApp;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const SLOW: usize = 1_000;
/// A probe is a failure only if it gets no answer in this long: generous, no timing is asserted.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longer than the server's header time-out (10 s, stretched by up to half by jitter), so that the
/// server closes slow connections and they come back while the probes run.
const HOLD: Duration = Duration::from_secs(17);

/// A slowloris connection: a request line and one header, then a header line now and then, never
/// the blank line that ends the headers.
fn open_slow(addr: SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
    s.write_all(b"GET /api/v1/system/health HTTP/1.1\r\nHost: slow\r\n").ok()?;
    Some(s)
}

/// One health probe on a fresh connection: true when it was answered 200.
fn probe(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else { return false };
    let _ = s.set_read_timeout(Some(PROBE_TIMEOUT));
    let _ = s.set_write_timeout(Some(PROBE_TIMEOUT));
    if s.write_all(b"GET /api/v1/system/health HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out.starts_with(b"HTTP/1.1 200")
}

/// 1,000 slowloris connections held open (and re-opened when the server closes them, as the
/// attack does) against a server started with the soft open-file limit many systems hand down
/// (1,024): every health probe is answered.
#[test]
fn health_answers_while_a_thousand_slowloris_connections_are_held() {
    // The test itself holds a descriptor per slow connection too.
    courrier_core::adapters::open_files::raise_to_hard_limit().expect("open-file limit");
    let app = ProcessApp::spawn_with_soft_open_files(1024, &[]);
    let addr = app.addr;
    let mut slow: Vec<Option<TcpStream>> = (0..SLOW).map(|_| open_slow(addr)).collect();
    let opened = slow.iter().filter(|s| s.is_some()).count();
    assert!(opened >= SLOW * 9 / 10, "only {opened} of {SLOW} slow connections opened");

    let prober = std::thread::spawn(move || {
        let (mut answered, mut failed) = (0u32, 0u32);
        let started = Instant::now();
        while started.elapsed() < HOLD {
            if probe(addr) {
                answered += 1;
            } else {
                failed += 1;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        (answered, failed)
    });
    let started = Instant::now();
    let mut reopened = 0u32;
    while started.elapsed() < HOLD {
        for s in &mut slow {
            let alive = s.as_mut().is_some_and(|c| c.write_all(b"X-Slow: 1\r\n").is_ok());
            if !alive {
                *s = open_slow(addr);
                reopened += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (answered, failed) = prober.join().unwrap();
    drop(slow);
    assert_eq!(failed, 0, "{failed} health probes failed ({answered} answered; {reopened} slow connections re-opened)");
    assert!(answered > 0);
    assert!(probe(addr), "the server still serves once the slow clients are gone");
}
