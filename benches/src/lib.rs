//! What the benchmark harnesses share: the `main` of a harness and its option helpers, running
//! the `courrier` CLI on a data directory (the bench user and its API keys), a child server
//! ([`Server`]), an HTTP client of the API ([`Api`]) and Mailman 3's REST calls ([`mailman`]),
//! free ports, the load average (printed beside every result: this machine is shared), medians,
//! percentiles and times. Measuring instruments, not product code.

pub mod api;
pub mod backend;
pub mod mailman;
pub mod mailpeers;
pub mod pdf;
pub mod server;
pub mod tls;

pub use api::{Api, RawPost, base64, form_encode, percent_encode};
pub use backend::{Backend, Headline, Postgres, Store};
pub use server::{HEALTH_PATH, Server};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, SystemTime};

/// The bench user every harness creates with the CLI before its server starts.
pub const BENCH_EMAIL: &str = "bench@example.org";
pub const BENCH_PASSWORD: &str = "correct horse battery staple";

/// A harness's `main`: `parse` gives the options (`Ok(None)` for `--help`, which prints `usage`;
/// an error prints it too and exits 2), `run` measures (an error exits 1).
pub fn harness_main<O>(
    name: &str,
    usage: &str,
    parse: impl FnOnce(std::env::Args) -> Result<Option<O>, String>,
    run: impl FnOnce(&O) -> Result<(), String>,
) -> ExitCode {
    let mut args = std::env::args();
    args.next();
    let opts = match parse(args) {
        Ok(Some(opts)) => opts,
        Ok(None) => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{name}: {e}\n{usage}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A numeric option's value: a positive integer.
pub fn positive(flag: &str, raw: &str) -> Result<u64, String> {
    match raw.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{flag} must be a positive integer, got {raw:?}")),
    }
}

/// `name` next to this executable (`target/<profile>/courrier` beside `target/<profile>/bench-x`).
pub fn sibling(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate the current executable: {e}"))?;
    Ok(exe.with_file_name(name))
}

/// Runs the `courrier` CLI on `data_dir`; its standard output.
pub fn cli(courrier: &Path, data_dir: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let shown = || format!("`courrier --data-dir {} {}`", data_dir.display(), args.join(" "));
    let mut child = Command::new(courrier)
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env("COURRIER_LOG", "warn")
        .envs(backend::database_env(data_dir))
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

/// Creates the bench user ([`BENCH_EMAIL`], [`BENCH_PASSWORD`]) with the CLI on `data_dir`, a
/// site administrator when `site_admin`.
pub fn create_bench_user(courrier: &Path, data_dir: &Path, site_admin: bool) -> Result<(), String> {
    let mut args = vec!["user", "create", "--email", BENCH_EMAIL, "--password-stdin"];
    if site_admin {
        args.push("--site-admin");
    }
    cli(courrier, data_dir, &args, Some(&format!("{BENCH_PASSWORD}\n")))?;
    Ok(())
}

/// An API key of the bench user (user scope) with `perms` and the given quota, made with
/// `courrier create-api-key` on `data_dir`; its secret, checked to be one.
pub fn create_api_key(
    courrier: &Path,
    data_dir: &Path,
    name: &str,
    perms: &str,
    rate_limit_per_min: u32,
) -> Result<String, String> {
    let quota = rate_limit_per_min.to_string();
    let args = [
        "create-api-key",
        "--email",
        BENCH_EMAIL,
        "--scope",
        "user",
        "--perms",
        perms,
        "--name",
        name,
        "--rate-limit-per-min",
        &quota,
    ];
    let out = cli(courrier, data_dir, &args, None)?;
    let secret = out.trim();
    if !is_api_key(secret) {
        return Err(format!("`courrier create-api-key` printed {secret:?}, not an API key (svc_<16 hex>_<64 hex>)"));
    }
    Ok(secret.to_owned())
}

/// `svc_<16 hex>_<64 hex>`, as `courrier create-api-key` prints it (and safe to quote in Lua).
pub fn is_api_key(s: &str) -> bool {
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    s.strip_prefix("svc_")
        .and_then(|rest| rest.split_once('_'))
        .is_some_and(|(prefix, secret)| hex(prefix, 16) && hex(secret, 64))
}

/// `courrier serve` on `data_dir`, listening on 127.0.0.1:`port`, logging warnings (callers add
/// or override settings with `.env`).
pub fn serve_command(courrier: &Path, data_dir: &Path, port: u16) -> Command {
    let mut cmd = Command::new(courrier);
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        .env("COURRIER_LISTEN", format!("127.0.0.1:{port}"))
        .env("COURRIER_LMTP_LISTEN", "off")
        .env("COURRIER_LOG", "warn")
        .envs(backend::database_env(data_dir));
    cmd
}

/// `courrier worker` on `data_dir` (delivery workers and the periodic chores, no HTTP), logging
/// warnings; on PostgreSQL, on the installation's database.
pub fn worker_command(courrier: &Path, data_dir: &Path) -> Command {
    let mut cmd = Command::new(courrier);
    cmd.arg("worker")
        .arg("--data-dir")
        .arg(data_dir)
        .env("COURRIER_LMTP_LISTEN", "off")
        .env("COURRIER_LOG", "warn")
        .envs(backend::database_env(data_dir));
    cmd
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

/// The median (the mean of the two middle values of an even count); NaN when empty.
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

/// Nearest-rank percentile of unsorted values; NaN when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (p * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Seconds, in a readable unit (the one wrk would use); `-` for NaN.
pub fn fmt_latency(secs: f64) -> String {
    if secs.is_nan() {
        "-".into()
    } else if secs < 1e-3 {
        format!("{:.0} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
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

/// A one-shot `GET` to 127.0.0.1 over a fresh connection (readiness probes, checks before a
/// load); the whole answer as text. `headers`: extra header lines, each ending in CRLF.
pub fn http_get(port: u16, path: &str, headers: &str) -> std::io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Connection: close\r\n\r\n")?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn latencies_in_readable_units() {
        assert_eq!(fmt_latency(250e-6), "250 µs");
        assert_eq!(fmt_latency(2e-3), "2.00 ms");
        assert_eq!(fmt_latency(2.5), "2.50 s");
        assert_eq!(fmt_latency(f64::NAN), "-");
    }

    #[test]
    fn recognises_api_keys() {
        let key = format!("svc_{}_{}", "0123456789abcdef", "ab".repeat(32));
        assert!(is_api_key(&key));
        assert!(!is_api_key(&key[1..]));
        assert!(!is_api_key(&key.replace("svc_0", "svc_g")));
        assert!(!is_api_key(&format!("{key}0")));
        assert!(!is_api_key(&format!("{key}\"")));
        assert!(!is_api_key(""));
    }

    #[test]
    fn formats_utc_dates() {
        assert_eq!(utc(SystemTime::UNIX_EPOCH), "1970-01-01 00:00");
        assert_eq!(utc(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_660)), "2000-02-29 01:01");
    }

    #[test]
    fn positive_numbers_only() {
        assert_eq!(positive("--rounds", "3"), Ok(3));
        assert!(positive("--rounds", "0").unwrap_err().contains("--rounds must be a positive integer"));
        assert!(positive("--rounds", "x").is_err());
    }
}
