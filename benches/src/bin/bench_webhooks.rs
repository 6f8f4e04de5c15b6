//! `bench-webhooks`: webhook deliveries per second to a local HTTPS receiver, signed, against a
//! bare HTTPS client POSTing the same body to the same receiver, in the same run.
//!
//! - courrier: N events are recorded in the outbox, then core's webhook worker
//!   (`webhooks::run_once`, the loop `courrier serve` runs on its webhook thread) fans them out
//!   to one webhook and delivers them: the durable queue (SQLite, WAL, synchronous=FULL: one
//!   commit per delivery's outcome), both signatures (HMAC-SHA256 twice), the egress guard, and
//!   one TLS connection per POST to the checked address.
//! - baseline: the same HTTPS adapter (`adapters::https`, rustls) POSTing the same body N times
//!   in a row, unsigned, without queue or guard: what a POST costs at all.
//!
//! The receiver is a small rustls server in this process, with a CA made by the openssl CLI
//! (trusted the way `COURRIER_EXTRA_CA` makes courrier trust it). Rounds alternate the two
//! loads; the report is the medians and their ratio. `--smoke` runs it tiny (CI).

use courrier_benches::median;
use courrier_benches::tls::TestCa;
use courrier_core::access::Principal;
use courrier_core::access::principal::RequestCtx;
use courrier_core::adapters::https::RustlsHttps;
use courrier_core::egress::{AllowList, Egress, HttpsClient, Offline, PostRequest, parse_url};
use courrier_core::kernel::{Clock, EmailAddress, EventName, NewEvent, Timestamp};
use courrier_core::mailing;
use courrier_core::mailing::webhooks::{self, NewWebhookRequest, WebhookConfig};
use courrier_core::storage::in_write;
use courrier_store_sqlite::SqliteStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

const USAGE: &str = "usage: bench-webhooks [--deliveries N (default 2000)] [--rounds N (default 3)] [--smoke]";
/// courrier deliveries/s over bare POSTs/s, below which the report says so.
const TARGET: f64 = 0.5;

struct Options {
    deliveries: u64,
    rounds: usize,
}

fn main() -> ExitCode {
    let mut opts = Options { deliveries: 2000, rounds: 3 };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = |name: &str| {
            args.next().and_then(|v| v.parse::<u64>().ok()).filter(|n| *n > 0).ok_or(format!("{name} needs a number"))
        };
        let parsed = match a.as_str() {
            "--deliveries" => number("--deliveries").map(|n| opts.deliveries = n),
            "--rounds" => number("--rounds").map(|n| opts.rounds = n as usize),
            "--smoke" => {
                opts = Options { deliveries: 20, rounds: 1 };
                Ok(())
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = parsed {
            eprintln!("bench-webhooks: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-webhooks: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &Options) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ca = TestCa::make(dir.path(), "bench CA", "127.0.0.1", "IP:127.0.0.1")?;
    let received = Arc::new(AtomicU64::new(0));
    let addr = start_receiver(&ca, Arc::clone(&received))?;
    let https = Arc::new(RustlsHttps::new(Some(&ca.ca_pem))?);
    let app = wire(dir.path(), https.clone())?;
    let url = format!("https://127.0.0.1:{}/hook", addr.port());
    let req =
        NewWebhookRequest { url: url.clone(), events: vec![EventName::MemberAdded], domain_id: None, list_id: None };
    webhooks::create(&app, &Principal::operator(), &RequestCtx::cli(), req).map_err(|e| e.to_string())?;
    let body = serde_json::json!({
        "id": "evt_0123456789abcdef0123456789abcdef",
        "type": "member.added",
        "created_at": "2026-11-23T16:00:00.000000Z",
        "data": { "member_id": 1, "email": "someone@example.net", "list_id": 1,
                  "list_address": "news@example.org", "domain": "example.org" }
    })
    .to_string();
    let parsed = parse_url(&url).map_err(|e| e.to_string())?;
    let n = opts.deliveries;
    let (mut bare, mut hooks) = (Vec::new(), Vec::new());
    for round in 0..opts.rounds {
        let started = Instant::now();
        for _ in 0..n {
            let reply = https.post(&PostRequest { addr, url: &parsed, headers: &[], body: body.as_bytes() })?;
            if reply.status != 200 {
                return Err(format!("the receiver answered {}", reply.status));
            }
        }
        bare.push(n as f64 / started.elapsed().as_secs_f64());

        record_events(&app, n)?;
        let before = received.load(Ordering::SeqCst);
        let started = Instant::now();
        let cfg = WebhookConfig::default();
        let mut delivered = 0;
        while delivered < n {
            let r = webhooks::run_once(&app, &cfg).map_err(|e| e.to_string())?;
            if r.claimed == 0 && r.fanned_out == 0 {
                return Err(format!("the worker stopped after {delivered} of {n} deliveries"));
            }
            if r.retrying + r.failed > 0 {
                return Err(format!("deliveries failed: {r:?}"));
            }
            delivered += r.delivered;
        }
        hooks.push(n as f64 / started.elapsed().as_secs_f64());
        let got = received.load(Ordering::SeqCst) - before;
        if got != n {
            return Err(format!("the receiver counted {got} deliveries, not {n}"));
        }
        eprintln!("round {}: bare {:.0}/s, courrier {:.0}/s", round + 1, bare[round], hooks[round]);
    }
    let (b, h) = (median(bare), median(hooks));
    println!("bench-webhooks: {n} deliveries x {} rounds, one TLS connection per POST, sequential", opts.rounds);
    println!("bare HTTPS POST (baseline):        {b:>8.0} req/s (median)");
    println!("courrier webhook worker (signed):  {h:>8.0} deliveries/s (median)");
    let ratio = h / b;
    let verdict = if ratio >= TARGET { "met" } else { "NOT met" };
    println!("ratio courrier/bare: {ratio:.2} (target >= {TARGET}: {verdict})");
    Ok(())
}

/// The mailing context wired as `courrier serve` wires it, but for the resolver (the URL is an
/// address); nothing of the OCR context is built.
fn wire(dir: &Path, https: Arc<RustlsHttps>) -> Result<mailing::Service, String> {
    let clock: Arc<dyn Clock> = Arc::new(courrier_core::adapters::system_clock::SystemClock);
    let store =
        Arc::new(SqliteStore::open(&dir.join("courrier.db"), clock.now().unix_micros()).map_err(|e| e.to_string())?);
    let mail: Arc<dyn courrier_core::kernel::MailTransport> = Arc::new(
        courrier_core::adapters::smtp::SmtpTransport::from_url("smtp://127.0.0.1:25").map_err(|e| e.to_string())?,
    );
    let settings = courrier_core::kernel::Settings {
        public_url: "https://lists.example.org".into(),
        mail_from: EmailAddress::parse("courrier@example.org").map_err(|e| e.to_string())?,
    };
    let access =
        Arc::new(courrier_core::access::Service::new(store.clone(), clock.clone(), mail.clone(), settings.clone()));
    Ok(mailing::Service {
        access,
        store,
        clock,
        mail,
        settings,
        egress: Egress { dns: Arc::new(Offline), https, allow: AllowList::parse("127.0.0.0/8")? },
        data_key: courrier_core::kernel::sealed::DataKey::generate().1,
        dkim: Arc::new(courrier_core::adapters::openssl_dkim::OpensslKeyMaker::default()),
        dkim_signing: Arc::new(courrier_core::adapters::mail_auth_dkim::MailAuthDkim),
        dkim_verifying: Arc::new(courrier_core::adapters::mail_auth_dkim::MailAuthDkim),
        credentials: mailing::credentials::Credentials::new(
            None,
            Arc::new(courrier_core::mailing::accounts::NoAccounts),
        ),
        mime: Arc::new(courrier_core::adapters::mime::MailParserReader),
        mail_in: Default::default(),
    })
}

/// N `member.added` events in one transaction, as an import would record them.
fn record_events(app: &mailing::Service, n: u64) -> Result<(), String> {
    let now: Timestamp = app.clock.now();
    in_write(&*app.store, |tx| {
        for i in 0..n {
            let data = serde_json::json!({ "member_id": i, "email": format!("m{i}@example.net") });
            tx.append_event(&NewEvent { name: EventName::MemberAdded, at: now, domain_id: None, list_id: None, data })?;
        }
        Ok::<_, courrier_core::storage::StoreError>(())
    })
    .map_err(|e| e.to_string())
}

/// A minimal HTTPS receiver: a thread per connection, reads one request, answers 200, counts.
fn start_receiver(ca: &TestCa, received: Arc<AtomicU64>) -> Result<SocketAddr, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&ca.cert)
        .map_err(|e| e.to_string())?
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_file(&ca.key).map_err(|e| e.to_string())?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (config, received) = (Arc::clone(&config), Arc::clone(&received));
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let Ok(conn) = rustls::ServerConnection::new(config) else { return };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                if read_request(&mut tls).is_some() {
                    received.fetch_add(1, Ordering::SeqCst);
                    let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                }
            });
        }
    });
    Ok(addr)
}

/// Reads a request's head and its Content-Length of body.
fn read_request(r: &mut impl Read) -> Option<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = r.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let length: usize =
        head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    while buf.len() < end + length {
        let n = r.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(())
}
