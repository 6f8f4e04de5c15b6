//! What the benchmark harnesses share: running the `courrier` CLI on a data directory, free
//! ports, the load average (printed beside every result: this machine is shared), medians and
//! times. Measuring instruments, not product code.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

/// Runs the `courrier` CLI on `data_dir`; its standard output.
pub fn cli(courrier: &Path, data_dir: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let shown = || format!("`courrier --data-dir {} {}`", data_dir.display(), args.join(" "));
    let mut child = Command::new(courrier)
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("COURRIER_LOG", "warn")
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", shown()))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).map_err(|e| format!("cannot write to {}: {e}", shown()))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("cannot run {}: {e}", shown()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({}): {}", shown(), out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("cannot find a free port: {e}"))
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

pub fn median(values: Vec<f64>) -> f64 {
    let mut values = values;
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// `YYYY-MM-DD HH:MM` in UTC, through core's `Timestamp`.
pub fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let iso = courrier_core::kernel::Timestamp::from_unix_secs(i64::try_from(secs).unwrap_or(0)).to_rfc3339();
    iso[..16].replacen('T', " ", 1)
}

pub fn check_status(what: &str, status: u16, body: &str, ok: &[u16]) -> Result<(), String> {
    if ok.contains(&status) {
        Ok(())
    } else {
        let shown: String = body.chars().take(500).collect();
        Err(format!("{what} answered {status}, expected {ok:?}: {shown}"))
    }
}

pub fn json(body: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(body).map_err(|e| format!("not JSON ({e}): {}", body.chars().take(300).collect::<String>()))
}

/// A plain GET to the server on 127.0.0.1 (readiness probes), the raw response back.
pub fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
