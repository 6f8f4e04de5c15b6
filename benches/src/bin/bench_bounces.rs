//! `bench-bounces`: bounce handling (issue 21), each against a baseline in the same run.
//!
//! - `corpus`: the recognition rate on `fixtures/bounces/` (the test messages of flufl.bounce,
//!   bounced and baunsu),
//!   beside GNU Mailman's own detector, `flufl.bounce` (from the Python venv), run on the same
//!   files in the same run. Courrier is scored as it runs: the message sent back to a copy's VERP
//!   address, so the member is the copy's and what counts is the right permanence (or "not a
//!   bounce" for the two that are none). flufl.bounce has no VERP token; it is right when it names
//!   the expected address in the right set (`all_failures`: temporary, permanent), or any address
//!   there for the messages that name none. Courrier's rate on the same terms (the address from
//!   its own reading, no token) is printed too, and every miss of each, per split.
//! - `lmtp`: a burst of N DSNs over LMTP (one per copy of an N-member send, on `--sessions`
//!   connections) into `courrier serve`, until every one is processed (scored); beside, on the
//!   same server, posts to a 10-member list over the same LMTP client until each is processed
//!   (accepted, fanned out): DSNs/s over posts/s.
//!
//! `--smoke`: the whole corpus, 50 DSNs and 10 posts. Nothing asserts on timings.

use courrier_benches::{
    Api, BENCH_EMAIL, Server, check_status, create_api_key, create_bench_user, free_port, harness_main, json, loadavg,
    serve_command, sibling,
};
use courrier_core::mailing::bounces::MimeReader;
use courrier_core::mailing::bounces::recognise::{Verdict, recognise};
use courrier_core::mailing::model::Permanence;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

const DOMAIN: &str = "example.org";

const USAGE: &str = "usage: bench-bounces [--smoke] [--courrier PATH] [--dsns N (10000)] [--posts N (2000)] \
[--sessions N (4)] [--python PATH ($COURRIER_TEST_VENV/bin/python)] [--corpus DIR (fixtures/bounces)] [--scratch DIR]";

fn main() -> ExitCode {
    harness_main("bench-bounces", USAGE, Options::parse, run)
}

struct Options {
    smoke: bool,
    courrier: PathBuf,
    dsns: u64,
    posts: u64,
    sessions: u64,
    python: PathBuf,
    corpus: PathBuf,
    scratch: Option<PathBuf>,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let venv = std::env::var_os("COURRIER_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/courrier-ci-venv")
        });
        let mut o = Options {
            smoke: false,
            courrier: sibling("courrier")?,
            dsns: 10_000,
            posts: 2_000,
            sessions: 4,
            python: venv.join("bin/python"),
            corpus: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bounces"),
            scratch: None,
        };
        let mut sized = false;
        while let Some(flag) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--help" | "-h" => return Ok(None),
                "--smoke" => o.smoke = true,
                "--courrier" => o.courrier = PathBuf::from(value()?),
                "--dsns" => (o.dsns, sized) = (courrier_benches::positive("--dsns", &value()?)?, true),
                "--posts" => o.posts = courrier_benches::positive("--posts", &value()?)?,
                "--sessions" => o.sessions = courrier_benches::positive("--sessions", &value()?)?,
                "--python" => o.python = PathBuf::from(value()?),
                "--corpus" => o.corpus = PathBuf::from(value()?),
                "--scratch" => o.scratch = Some(PathBuf::from(value()?)),
                other => return Err(format!("unknown option {other}")),
            }
        }
        if o.smoke && !sized {
            (o.dsns, o.posts, o.sessions) = (50, 10, 2);
        }
        Ok(Some(o))
    }
}

fn run(opts: &Options) -> Result<(), String> {
    println!("bench-bounces, load average {}", loadavg());
    println!("{}", corpus(opts)?);
    let scratch = match &opts.scratch {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            tempfile::tempdir_in(d)
        }
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("no scratch directory: {e}"))?;
    println!("{}", lmtp(opts, scratch.path())?);
    println!("load average after: {}", loadavg());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------------------------

struct Case {
    file: String,
    held: bool,
    expected: Option<Permanence>,
    addresses: Vec<String>,
}

/// The corpus's sets (folders of `fixtures/bounces/`, each with its `expected.tsv`).
const SETS: &[&str] = &["flufl", "bounced", "baunsu"];

fn cases(dir: &Path) -> Result<Vec<Case>, String> {
    let mut all = Vec::new();
    for set in SETS {
        let path = dir.join(set).join("expected.tsv");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        for l in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let cols: Vec<&str> = l.split('\t').collect();
            let expected = match cols.get(2).copied() {
                Some("none") => None,
                Some(p) => Some(Permanence::parse(p).ok_or_else(|| format!("{l:?}: permanent, temporary or none"))?),
                None => return Err(format!("{l:?}: too few columns")),
            };
            all.push(Case {
                file: format!("{set}/{}", cols[0]),
                held: cols.get(1) == Some(&"held"),
                expected,
                addresses: cols
                    .get(3)
                    .map(|a| a.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect())
                    .unwrap_or_default(),
            });
        }
    }
    Ok(all)
}

/// A contender's verdicts: right or not per file, and the misses' descriptions.
#[derive(Default)]
struct Score {
    tune: (u32, u32),
    held: (u32, u32),
    misses: Vec<String>,
}

impl Score {
    fn add(&mut self, c: &Case, right: bool, got: String) {
        let slot = if c.held { &mut self.held } else { &mut self.tune };
        slot.1 += 1;
        if right {
            slot.0 += 1;
        } else {
            self.misses.push(format!("{} ({}): expected {}, got {got}", c.file, split(c), expected(c)));
        }
    }

    fn line(&self, name: &str) -> String {
        let all = (self.tune.0 + self.held.0, self.tune.1 + self.held.1);
        format!(
            "{name:<44} {:>3}/{:<3} {:>5.1} %   tuning {:>3}/{:<3} {:>5.1} %   held-out {:>3}/{:<3} {:>5.1} %",
            all.0,
            all.1,
            pct(all),
            self.tune.0,
            self.tune.1,
            pct(self.tune),
            self.held.0,
            self.held.1,
            pct(self.held)
        )
    }
}

fn pct((ok, n): (u32, u32)) -> f64 {
    if n == 0 { 0.0 } else { 100.0 * f64::from(ok) / f64::from(n) }
}

fn split(c: &Case) -> &'static str {
    if c.held { "held-out" } else { "tuning" }
}

fn expected(c: &Case) -> String {
    match c.expected {
        None => "not a bounce".into(),
        Some(p) if c.addresses.is_empty() => p.as_str().to_owned(),
        Some(p) => format!("{} {}", p.as_str(), c.addresses.join(",")),
    }
}

const FLUFL: &str = r#"
import email, json, sys
from flufl.bounce import all_failures
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        msg = email.message_from_binary_file(f)
    try:
        temporary, permanent = all_failures(msg)
        out = {"temporary": sorted(a.decode("utf-8", "replace") for a in temporary),
               "permanent": sorted(a.decode("utf-8", "replace") for a in permanent)}
    except Exception as e:
        out = {"error": repr(e), "temporary": [], "permanent": []}
    print(json.dumps(out))
"#;

fn corpus(opts: &Options) -> Result<String, String> {
    let cases = cases(&opts.corpus)?;
    let files: Vec<PathBuf> = cases.iter().map(|c| opts.corpus.join(&c.file)).collect();
    let raws: Vec<Vec<u8>> = files
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display())))
        .collect::<Result<_, _>>()?;

    // Courrier, in this process: mail-parser (the server's adapter), then the recogniser.
    let t = Instant::now();
    let verdicts: Vec<Verdict> = raws
        .iter()
        .map(|raw| recognise(&courrier_core::adapters::mime::MailParserReader.read(raw).unwrap_or_default()))
        .collect();
    let ours_secs = t.elapsed().as_secs_f64();

    // flufl.bounce, in one Python process over the same files.
    let t = Instant::now();
    let out = Command::new(&opts.python)
        .arg("-c")
        .arg(FLUFL)
        .args(&files)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", opts.python.display()))?;
    let flufl_secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "flufl.bounce failed (pip install flufl.bounce into the venv): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let flufl: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(json).collect::<Result<_, _>>()?;
    if flufl.len() != cases.len() {
        return Err(format!("flufl.bounce answered for {} of {} files", flufl.len(), cases.len()));
    }

    let (mut verp, mut ours_address, mut theirs) = (Score::default(), Score::default(), Score::default());
    for ((c, v), f) in cases.iter().zip(&verdicts).zip(&flufl) {
        // Courrier as it runs: the copy's member known from the token.
        let member = c.addresses.first().map_or("member@example.invalid", String::as_str);
        let got = match v {
            Verdict::Bounce { .. } => v.for_member(member).map(|f| f.permanence),
            Verdict::NoFailure | Verdict::Unrecognised => None,
        };
        verp.add(c, got == c.expected, got.map_or("not a bounce".into(), |p| p.as_str().to_owned()));
        // Courrier without the token: the addresses it reads itself.
        let found: Vec<(String, Permanence)> = match v {
            Verdict::Bounce { failures, .. } => {
                failures.iter().map(|f| (f.final_recipient.clone().unwrap_or_default(), f.permanence)).collect()
            }
            _ => Vec::new(),
        };
        ours_address.add(c, right(c, &found), describe(&found));
        // flufl.bounce.
        let list = |k: &str| -> Vec<String> {
            f[k].as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        let mut found: Vec<(String, Permanence)> =
            list("temporary").into_iter().map(|a| (a, Permanence::Temporary)).collect();
        found.extend(list("permanent").into_iter().map(|a| (a, Permanence::Permanent)));
        theirs.add(c, right(c, &found), describe(&found));
    }
    let mut r = String::new();
    let _ = writeln!(
        r,
        "\n== corpus: {} messages of the test suites of flufl.bounce, bounced and baunsu ({})",
        cases.len(),
        opts.corpus.display()
    );
    let _ = writeln!(r, "{}", verp.line("courrier (VERP: member from the token)"));
    let _ = writeln!(r, "{}", ours_address.line("courrier (addresses it reads, no token)"));
    let _ = writeln!(r, "{}", theirs.line("flufl.bounce 6 all_failures (no token)"));
    let n = cases.len() as f64;
    let _ = writeln!(
        r,
        "time: courrier {:.1} ms ({:.0} msg/s, mail-parser + recogniser, in process); flufl.bounce {:.0} ms (one python process, start included)",
        ours_secs * 1e3,
        n / ours_secs.max(1e-9),
        flufl_secs * 1e3
    );
    let ratio = pct((verp.tune.0 + verp.held.0, verp.tune.1 + verp.held.1))
        / pct((theirs.tune.0 + theirs.held.0, theirs.tune.1 + theirs.held.1)).max(1e-9);
    let _ = writeln!(r, "rate ratio courrier (VERP) / flufl.bounce: {ratio:.3} (target >= 1.0)");
    for (name, s) in [("courrier (VERP)", &verp), ("courrier (no token)", &ours_address), ("flufl.bounce", &theirs)] {
        let _ = writeln!(r, "misses of {name} ({}):", s.misses.len());
        for m in &s.misses {
            let _ = writeln!(r, "  {m}");
        }
    }
    Ok(r)
}

/// Right without a token: the expected address with the right permanence (any address for a
/// message that names none); nothing at all for a message that is not a bounce.
fn right(c: &Case, found: &[(String, Permanence)]) -> bool {
    match c.expected {
        None => found.is_empty(),
        Some(p) if c.addresses.is_empty() => found.iter().any(|(_, q)| *q == p),
        Some(p) => c.addresses.iter().any(|a| found.iter().any(|(f, q)| f.eq_ignore_ascii_case(a) && *q == p)),
    }
}

fn describe(found: &[(String, Permanence)]) -> String {
    if found.is_empty() {
        return "nothing".into();
    }
    found
        .iter()
        .map(|(a, p)| format!("{} {}", p.as_str(), if a.is_empty() { "(no address)" } else { a }))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------------
// DSNs over LMTP
// ---------------------------------------------------------------------------------------------

/// The return path and recipient of every message a sink took.
type Envelopes = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// A sink that takes every message (the copies of the send, the digest-less posts' copies),
/// keeping each one's envelope: a copy's return path carries its VERP token, which only the
/// server can make (a keyed tag), so the DSNs are addressed to what the copies carried.
fn sink() -> Result<(u16, Envelopes), String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no sink port: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let envelopes = Envelopes::default();
    let kept = envelopes.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let kept = kept.clone();
            std::thread::spawn(move || {
                let _ = sink_session(stream, &kept);
            });
        }
    });
    Ok((port, envelopes))
}

fn sink_session(stream: TcpStream, envelopes: &Envelopes) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut out = stream.try_clone()?;
    let mut input = BufReader::new(stream);
    out.write_all(b"220 sink ESMTP\r\n")?;
    let mut line = Vec::new();
    let (mut from, mut to) = (String::new(), Vec::new());
    let path = |line: &[u8]| {
        let l = String::from_utf8_lossy(line);
        l.split_once('<').and_then(|(_, r)| r.split_once('>')).map(|(p, _)| p.to_owned()).unwrap_or_default()
    };
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let verb = line.get(..4).map(|v| v.to_ascii_uppercase()).unwrap_or_default();
        match verb.as_slice() {
            b"EHLO" => out.write_all(b"250-sink\r\n250-PIPELINING\r\n250 8BITMIME\r\n")?,
            b"MAIL" => {
                from = path(&line);
                to.clear();
                out.write_all(b"250 ok\r\n")?;
            }
            b"RCPT" => {
                to.push(path(&line));
                out.write_all(b"250 ok\r\n")?;
            }
            b"DATA" => {
                out.write_all(b"354 go ahead\r\n")?;
                loop {
                    line.clear();
                    if input.read_until(b'\n', &mut line)? == 0 {
                        return Ok(());
                    }
                    if line == b".\r\n" || line == b".\n" {
                        break;
                    }
                }
                if let Ok(mut kept) = envelopes.lock() {
                    kept.extend(to.drain(..).map(|t| (from.clone(), t)));
                }
                out.write_all(b"250 queued\r\n")?;
            }
            b"QUIT" => return out.write_all(b"221 bye\r\n"),
            _ => out.write_all(b"250 ok\r\n")?,
        }
    }
}

/// One LMTP client session delivering `messages` (recipient, body) one transaction each.
fn lmtp_session(port: u16, from: &str, messages: &[(String, String)]) -> Result<(), String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("LMTP connect: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let mut out = stream.try_clone().map_err(|e| e.to_string())?;
    let mut input = BufReader::new(stream);
    let mut reply = |want: &str| -> Result<(), String> {
        loop {
            let mut line = String::new();
            input.read_line(&mut line).map_err(|e| format!("LMTP read: {e}"))?;
            if !line.starts_with(want) {
                return Err(format!("LMTP answered {line:?}, expected {want}"));
            }
            if line.len() < 4 || line.as_bytes()[3] != b'-' {
                return Ok(());
            }
        }
    };
    let w = |out: &mut TcpStream, s: &str| out.write_all(s.as_bytes()).map_err(|e| format!("LMTP write: {e}"));
    reply("220")?;
    w(&mut out, "LHLO bench.example.net\r\n")?;
    reply("250")?;
    for (rcpt, body) in messages {
        w(&mut out, &format!("MAIL FROM:<{from}>\r\n"))?;
        reply("250")?;
        w(&mut out, &format!("RCPT TO:<{rcpt}>\r\n"))?;
        reply("250")?;
        w(&mut out, "DATA\r\n")?;
        reply("354")?;
        w(&mut out, &format!("{}\r\n.\r\n", body.replace("\r\n.", "\r\n..")))?;
        reply("250")?;
    }
    w(&mut out, "QUIT\r\n")
}

/// Delivers every message over `sessions` parallel sessions; the time until all were accepted.
fn burst(port: u16, sessions: u64, from: &str, messages: Vec<(String, String)>) -> Result<Duration, String> {
    let t = Instant::now();
    let per = messages.len().div_ceil(sessions as usize).max(1);
    let handles: Vec<_> = messages
        .chunks(per)
        .map(|chunk| {
            let (chunk, from) = (chunk.to_vec(), from.to_owned());
            std::thread::spawn(move || lmtp_session(port, &from, &chunk))
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "an LMTP session panicked".to_owned())??;
    }
    Ok(t.elapsed())
}

fn dsn(to: &str) -> String {
    format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.net>\r\nTo: bench-bounces@{DOMAIN}\r\n\
         Subject: Undelivered Mail Returned to Sender\r\nAuto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
         --B\r\nContent-Type: text/plain\r\n\r\nThis is the mail system at host mx.example.net.\r\n\
         I'm sorry to have to inform you that your message could not be delivered.\r\n\r\n\
         <{to}>: host mx.example.net said: 550 5.1.1 <{to}>: Recipient address rejected: User unknown\r\n\
         --B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.net\r\n\r\n\
         Final-Recipient: rfc822; {to}\r\nOriginal-Recipient: rfc822;{to}\r\nAction: failed\r\nStatus: 5.1.1\r\n\
         Remote-MTA: dns; mx.example.net\r\n\
         Diagnostic-Code: smtp; 550 5.1.1 <{to}>: Recipient address rejected: User unknown\r\n\r\n\
         --B\r\nContent-Type: text/rfc822-headers\r\n\r\nFrom: Bench <bench@{DOMAIN}>\r\nTo: {to}\r\n\
         Subject: Bench\r\n\r\n--B--"
    )
}

fn post(i: u64) -> String {
    format!(
        "From: Poster <m0@example.net>\r\nTo: posts@{DOMAIN}\r\nSubject: Post {i}\r\nMessage-ID: <post.{i}@example.net>\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHello, post number {i}.\r\n"
    )
}

/// Waits until the server processed every stored message (none left in its spool of accepted
/// mail, when the build has one, and none left `received`), reading its databases; the time from
/// `since`.
fn drained(db: &Path, since: Instant, server: &mut Server) -> Result<Duration, String> {
    let open = |path: &Path| {
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))
    };
    let conn = open(db)?;
    let spool_path = db.with_file_name("spool.db");
    let spool = if spool_path.exists() { Some(open(&spool_path)?) } else { None };
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        // The spool first: a message moved meanwhile is then seen `received` in the inbound store.
        let spooled: i64 = match &spool {
            Some(spool) => spool
                .query_row("SELECT COUNT(*) FROM spool", [], |r| r.get(0))
                .map_err(|e| format!("cannot read the spool: {e}"))?,
            None => 0,
        };
        let received: i64 = conn
            .query_row("SELECT COUNT(*) FROM inbound WHERE state = 'received'", [], |r| r.get(0))
            .map_err(|e| format!("cannot read the inbound store: {e}"))?;
        let waiting = spooled + received;
        if waiting == 0 {
            return Ok(since.elapsed());
        }
        if Instant::now() > deadline {
            return Err(format!("{waiting} messages still waiting after 30 minutes"));
        }
        server.check_alive()?;
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn lmtp(opts: &Options, scratch: &Path) -> Result<String, String> {
    let data = scratch.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("cannot create {}: {e}", data.display()))?;
    create_bench_user(&opts.courrier, &data, true)?;
    let key =
        create_api_key(&opts.courrier, &data, "bench-bounces", "read,members:write,send,moderate,manage", 100_000)?;
    let (port, lmtp_port, (smtp, envelopes)) = (free_port()?, free_port()?, sink()?);
    let mut cmd = serve_command(&opts.courrier, &data, port);
    cmd.env("COURRIER_LMTP_LISTEN", format!("127.0.0.1:{lmtp_port}"))
        .env("COURRIER_PUBLIC_URL", "https://lists.example.org")
        .env("COURRIER_SMTP_URL", format!("smtp://127.0.0.1:{smtp}"))
        .env("COURRIER_OCR_WORKERS", "1");
    let mut server = Server::start("courrier", cmd, port, scratch.join("server.log"))?.terminate_on_drop();
    server.wait_healthy()?;
    let api = Api::bearer(&format!("http://127.0.0.1:{port}"), &key);
    api.expect("POST", "/api/v1/domains", &serde_json::json!({ "name": DOMAIN }), &[201, 409])?;
    for (list, policy) in [("bench", "open"), ("posts", "open")] {
        let body = serde_json::json!({ "name": list, "display_name": list, "owner_email": BENCH_EMAIL, "subscription_policy": policy });
        api.expect("POST", &format!("/api/v1/domains/{DOMAIN}/lists"), &body, &[201])?;
    }
    let import = |list: &str, n: u64| -> Result<(), String> {
        let mut csv = String::from("email,display_name,delivery_mode\n");
        for i in 0..n {
            let _ = writeln!(csv, "m{i}@example.net,,regular");
        }
        let path = format!("/api/v1/domains/{DOMAIN}/lists/{list}/members/import?consent_evidence=bench");
        let (status, body) = api.send("POST", &path, "text/csv", csv.as_bytes(), &[])?;
        check_status("import", status, &body, &[200])
    };
    import("bench", opts.dsns)?;
    import("posts", 10)?;

    // The send whose copies bounce, one per member; the sink keeps their return paths.
    let body = serde_json::json!({ "subject": "Bench", "text": "Hello" });
    let (status, answer) = api.post_json(&format!("/api/v1/domains/{DOMAIN}/lists/bench/sends"), &body, &[])?;
    check_status("POST sends", status, &answer, &[202])?;
    let id = json(&answer)?["data"]["send_id"].as_i64().ok_or("no send id")?;
    let t = Instant::now();
    loop {
        let (_, body) = api.get(&format!("/api/v1/domains/{DOMAIN}/lists/bench/sends/{id}"))?;
        let s = json(&body)?["data"].clone();
        if s["state"] == "completed" && s["counts"]["sent"].as_u64() == Some(opts.dsns) {
            break;
        }
        if t.elapsed() > Duration::from_secs(1800) {
            return Err(format!("the send did not complete: {s}"));
        }
        server.check_alive()?;
        std::thread::sleep(Duration::from_millis(20));
    }

    let db = data.join("courrier.db");
    // One DSN per copy, to the return path it carried, naming its recipient.
    let dsns: Vec<(String, String)> = envelopes
        .lock()
        .map_err(|_| "the sink's envelopes are poisoned".to_owned())?
        .iter()
        .filter(|(from, _)| from.starts_with("bench-bounces+"))
        .map(|(from, to)| (from.clone(), dsn(to)))
        .collect();
    if dsns.len() as u64 != opts.dsns {
        return Err(format!("the sink saw {} copies of the send, not {}", dsns.len(), opts.dsns));
    }
    let t = Instant::now();
    let dsn_accepted = burst(lmtp_port, opts.sessions, "", dsns)?;
    let dsn_done = drained(&db, t, &mut server)?;
    let (_, body) = api.get(&format!("/api/v1/domains/{DOMAIN}/lists/bench/members?min_bounce_score=1&limit=1"))?;
    let scored = json(&body)?["meta"]["total"].as_u64();
    if scored != Some(opts.dsns) {
        return Err(format!("{scored:?} of {} members were scored", opts.dsns));
    }

    let posts: Vec<(String, String)> = (0..opts.posts).map(|i| (format!("posts@{DOMAIN}"), post(i))).collect();
    let t = Instant::now();
    let post_accepted = burst(lmtp_port, opts.sessions, "m0@example.net", posts)?;
    let post_done = drained(&db, t, &mut server)?;

    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let mut r = String::new();
    let _ = writeln!(
        r,
        "== LMTP: {} DSNs (one per copy of a {}-member send) and {} posts (10-member list), {} sessions each",
        opts.dsns, opts.dsns, opts.posts, opts.sessions
    );
    let _ = writeln!(
        r,
        "DSNs : accepted in {:.2} s ({:.0}/s), processed (every member scored) in {:.2} s ({:.0}/s)",
        dsn_accepted.as_secs_f64(),
        rate(opts.dsns, dsn_accepted),
        dsn_done.as_secs_f64(),
        rate(opts.dsns, dsn_done)
    );
    let _ = writeln!(
        r,
        "posts: accepted in {:.2} s ({:.0}/s), processed (each a send of 10 copies) in {:.2} s ({:.0}/s)",
        post_accepted.as_secs_f64(),
        rate(opts.posts, post_accepted),
        post_done.as_secs_f64(),
        rate(opts.posts, post_done)
    );
    let _ = writeln!(
        r,
        "DSNs/s over posts/s, processed: {:.2} (target >= 1.0); accepted: {:.2}",
        rate(opts.dsns, dsn_done) / rate(opts.posts, post_done),
        rate(opts.dsns, dsn_accepted) / rate(opts.posts, post_accepted)
    );
    server.stop();
    Ok(r)
}
