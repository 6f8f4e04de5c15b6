//! Real peers of the webhook and DNS tests, on 127.0.0.1: dnsmasq (Debian's) as the DNS server,
//! and an HTTPS receiver with a CA of its own made by the openssl CLI, written in Python so the
//! reference verifier of Standard Webhooks (the `standardwebhooks` package of the CI venv) checks
//! what it receives. Each is killed on drop.

use crate::harness::{free_port, venv_python};
use courrier_benches::tls::TestCa;
use serde_json::Value;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PEER: &str = include_str!("../peers/webhook_peer.py");

fn wait_listening(child: &mut Child, port: u16, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited ({status}) before listening:\n{}", std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "{what} did not listen within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// dnsmasq answering for `.test` only (`--local=/test/`: anything else there is NXDOMAIN, never
/// forwarded), with the given `--address` and `--txt-record` options.
pub struct DnsServer {
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl DnsServer {
    /// `records`: dnsmasq options without their `--`, e.g. `address=/hooks.test/127.0.0.1` or
    /// `txt-record=example.test,v=spf1 -all`.
    pub fn start(records: &[&str]) -> Self {
        Self::start_on(free_port(), records)
    }

    /// On a port chosen beforehand: a server configured with the address can start first, and
    /// publish records it made (a domain's DKIM key) once they exist.
    pub fn start_on(port: u16, records: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dnsmasq.log");
        let bin = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("dnsmasq is not installed: run scripts/setup-system --test");
        let mut child = Command::new(bin)
            .args(["--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--local=/test/"])
            .args(["--listen-address=127.0.0.1", "--bind-interfaces", "--pid-file", "--log-facility=-"])
            .arg(format!("--port={port}"))
            .args(records.iter().map(|r| format!("--{r}")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("dnsmasq starts");
        wait_listening(&mut child, port, "dnsmasq", &log);
        Self { port, child, _dir: dir }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HTTPS receiver (see `tests/peers/webhook_peer.py` for how a path decides the answer).
pub struct Receiver {
    pub port: u16,
    pub ca: TestCa,
    child: Child,
    dir: tempfile::TempDir,
}

impl Receiver {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::make(dir.path(), "Courrier test CA", "hooks.test", "DNS:hooks.test,IP:127.0.0.1")
            .expect("openssl makes the test CA");
        std::fs::write(dir.path().join("webhook_peer.py"), PEER).unwrap();
        let port = free_port();
        let log = dir.path().join("peer.log");
        let mut child = Command::new(venv_python("standardwebhooks"))
            .arg(dir.path().join("webhook_peer.py"))
            .args(["serve", &port.to_string()])
            .arg(&ca.cert)
            .arg(&ca.key)
            .arg(dir.path().join("requests.jsonl"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the venv's python starts");
        wait_listening(&mut child, port, "the HTTPS receiver", &log);
        Self { port, ca, child, dir }
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until `n` requests matching `keep` arrived (at most 30 s); returns them.
    pub fn wait_for(&self, n: usize, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got: Vec<Value> = self.requests().into_iter().filter(&keep).collect();
            if got.len() >= n {
                return got;
            }
            assert!(Instant::now() < deadline, "{} of {n} requests arrived: {:?}", got.len(), self.requests());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the Standard Webhooks reference verifier (and a plain HMAC for X-Svc-Signature) make
    /// of a received request: `as_received`, `tampered_body`, `wrong_secret`, `six_minutes_later`,
    /// `svc_signature`, each "ok" or the verifier's error.
    pub fn verify(&self, secret: &str, request: &Value) -> Value {
        use std::io::Write;
        let mut child = Command::new(venv_python("standardwebhooks"))
            .arg(self.dir.path().join("webhook_peer.py"))
            .args(["verify", secret])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "the verifier failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
