//! Mail in over real sockets: an LMTP client of our own against the server's LMTP port (every
//! refusal, each policy hold, loops, auto-replies, duplicates), posts reaching the SMTP sink
//! (aiosmtpd) with their MIME parts, the list's DKIM signature checked by dkimpy, DMARC
//! mitigation against dnsmasq, a server killed after its 250, and one path through a real Postfix.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::members::events;
use courrier_cli::server::Services;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::EventName;
use courrier_core::mailing::inbound::{InboundId, InboundState};
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_core::storage::in_read;
use courrier_tests::harness::{SmtpSink, TestApp, free_port};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

/// A minimal LMTP client (RFC 2033), blocking, reading multi-line replies whole.
struct Lmtp {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Lmtp {
    fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut c = Self { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream };
        assert!(c.reply().starts_with("220 "), "greeting");
        assert!(c.cmd("LHLO tests.example").starts_with("250"), "LHLO");
        c
    }

    /// One reply (all its lines, the last one's text returned whole with the others).
    fn reply(&mut self) -> String {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "connection closed; so far: {all}");
            all.push_str(&line);
            if line.as_bytes().get(3) != Some(&b'-') {
                return all.trim_end().to_owned();
            }
        }
    }

    fn cmd(&mut self, line: &str) -> String {
        self.writer.write_all(format!("{line}\r\n").as_bytes()).unwrap();
        self.reply()
    }

    /// MAIL, RCPTs, DATA: the RCPT replies, then one reply per accepted recipient after the data.
    fn send(&mut self, from: &str, to: &[&str], message: &str) -> (Vec<String>, Vec<String>) {
        assert!(self.cmd(&format!("MAIL FROM:<{from}>")).starts_with("250"));
        let rcpt: Vec<String> = to.iter().map(|t| self.cmd(&format!("RCPT TO:<{t}>"))).collect();
        let accepted = rcpt.iter().filter(|r| r.starts_with("250")).count();
        let data = self.cmd("DATA");
        if accepted == 0 {
            assert!(data.starts_with("503"), "{data}");
            return (rcpt, Vec::new());
        }
        assert!(data.starts_with("354"), "{data}");
        let mut body = String::new();
        for line in message.replace("\r\n", "\n").split('\n') {
            if line.starts_with('.') {
                body.push('.');
            }
            body.push_str(line);
            body.push_str("\r\n");
        }
        body.push_str(".\r\n");
        self.writer.write_all(body.as_bytes()).unwrap();
        let after = (0..accepted).map(|_| self.reply()).collect();
        (rcpt, after)
    }

    fn post(&mut self, from: &str, message: &str) -> String {
        let (rcpt, mut after) = self.send(from, &["news@example.org"], message);
        assert!(rcpt[0].starts_with("250"), "{rcpt:?}");
        after.remove(0)
    }
}

fn message(from: &str, id: &str, subject: &str, extra: &str) -> String {
    format!(
        "From: {from}\r\nTo: news@example.org\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\n\
         Date: Thu, 26 Nov 2026 09:00:00 +0000\r\n{extra}\r\nHello all\r\n"
    )
}

/// A server with an admin key, the list news@example.org (open subscriptions) and the sink.
fn setup(sink: &SmtpSink, extra: &[(&str, &str)]) -> (TestApp, String) {
    let url = sink.url();
    let mut env = vec![("COURRIER_SMTP_URL", url.as_str()), ("COURRIER_PUBLIC_URL", "https://lists.example.org")];
    env.extend_from_slice(extra);
    let app = TestApp::spawn_with(&env);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    (app, key)
}

fn patch_list(app: &TestApp, key: &str, body: Value) {
    let r = call(app, "PATCH", NEWS, &[bearer(key)], Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
}

fn add(app: &TestApp, key: &str, email: &str) {
    let r = call(app, "POST", &format!("{NEWS}/members"), &[bearer(key)], Some(&json!({ "email": email })));
    assert_eq!(r.status, 201, "{}", r.body);
}

/// Waits until the inbound message `id` is processed; its outcome.
fn outcome(core: &Services, id: i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = in_read(&*core.mailing.store, |tx| tx.inbound_by_id(InboundId::from_stored(id))).unwrap();
        if let Some(m) = m.filter(|m| m.state == InboundState::Done) {
            return m.outcome.unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "inbound message {id} was not processed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn header<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    let head = message.split("\n\n").next().unwrap_or(message);
    head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

#[test]
fn lmtp_answers_each_recipient_unknown_addresses_550_and_oversized_posts_552() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    make_list(&app.core, "example.org", "small", "admin@example.org", SubscriptionPolicy::Open);
    let r = call(
        &app,
        "PATCH",
        "/api/v1/domains/example.org/lists/small",
        &[bearer(&key)],
        Some(&json!({ "max_message_kb": 1 })),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    assert!(c.cmd("EHLO x").starts_with("500"), "LMTP wants LHLO");
    assert!(c.cmd("RCPT TO:<news@example.org>").starts_with("503"), "MAIL first");
    let big = message("ann@example.net", "big@x", "Big", &format!("X-Pad: {}\r\n", "p".repeat(2000)));
    let to =
        ["news@example.org", "nobody@example.org", "news@other.example", "small@example.org", "news-owner@example.org"];
    let (rcpt, after) = c.send("ann@example.net", &to, &big);
    assert!(rcpt[0].starts_with("250"), "{rcpt:?}");
    assert!(rcpt[1].starts_with("550 5.1.1"), "{rcpt:?}");
    assert!(rcpt[2].starts_with("550 5.1.1"), "{rcpt:?}");
    assert!(rcpt[3].starts_with("250") && rcpt[4].starts_with("250"), "{rcpt:?}");
    assert_eq!(after.len(), 3, "one reply per accepted recipient: {after:?}");
    assert!(after[0].starts_with("250 2.0.0 <news@example.org>"), "{after:?}");
    assert!(after[1].starts_with("552 5.3.4 <small@example.org>"), "{after:?}");
    assert!(after[2].starts_with("250 2.0.0 <news-owner@example.org>"), "{after:?}");
    // A declared SIZE over the list's limit is refused at RCPT.
    assert!(c.cmd("MAIL FROM:<ann@example.net> SIZE=5000").starts_with("250"));
    assert!(c.cmd("RCPT TO:<small@example.org>").starts_with("552 5.3.4"));
    assert!(c.cmd("RSET").starts_with("250"));
    // No accepted recipient: DATA is refused.
    let (rcpt, after) = c.send("ann@example.net", &["nobody@example.org"], "Subject: x\r\n\r\nx\r\n");
    assert!(rcpt[0].starts_with("550") && after.is_empty());
    assert!(c.cmd("QUIT").starts_with("221"));
    // The post was stored and posted; the owner mail was stored and forwarded to the owners.
    assert_eq!(outcome(&app.core, 1), "posted");
    let owner_mail =
        in_read(&*app.core.mailing.store, |tx| tx.inbound_by_id(InboundId::from_stored(2))).unwrap().unwrap();
    assert_eq!(owner_mail.role.as_str(), "owner");
    assert_eq!(outcome(&app.core, 2), "forwarded");
}

/// RFC 2920 (the server advertises PIPELINING): a client that sends its commands in groups
/// without waiting gets every reply, in order, and the replies are sent before the server waits
/// (after the group, after the 354, after the data, after QUIT).
#[test]
fn a_pipelining_lmtp_client_gets_every_reply_in_order_and_its_post_is_stored() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    c.writer
        .write_all(
            b"MAIL FROM:<ann@example.net>\r\nRCPT TO:<news@example.org>\r\nRCPT TO:<nobody@example.org>\r\n\
              RCPT TO:<news-owner@example.org>\r\nDATA\r\n",
        )
        .unwrap();
    let group: Vec<String> = (0..5).map(|_| c.reply()).collect();
    for (reply, code) in group.iter().zip(["250", "250", "550 5.1.1", "250", "354"]) {
        assert!(reply.starts_with(code), "{group:?}");
    }
    // The data, its end and the next transaction's first commands in one write.
    let body = message("ann@example.net", "piped@x", "Piped", "");
    let mut data = body.replace("\r\n", "\n").replace('\n', "\r\n");
    data.push_str(".\r\nNOOP\r\nQUIT\r\n");
    c.writer.write_all(data.as_bytes()).unwrap();
    let after: Vec<String> = (0..4).map(|_| c.reply()).collect();
    assert!(after[0].starts_with("250 2.0.0 <news@example.org>"), "{after:?}");
    assert!(after[1].starts_with("250 2.0.0 <news-owner@example.org>"), "{after:?}");
    assert!(after[2].starts_with("250"), "NOOP: {after:?}");
    assert!(after[3].starts_with("221"), "QUIT: {after:?}");
    let mut rest = String::new();
    assert_eq!(c.reader.read_line(&mut rest).unwrap(), 0, "closed after 221: {rest:?}");
    assert_eq!(outcome(&app.core, 1), "posted");
    assert_eq!(outcome(&app.core, 2), "forwarded");
}

#[test]
fn silent_and_slow_lmtp_clients_do_not_hold_the_others_and_an_overlong_command_is_refused() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    let addr = app.lmtp.unwrap();
    // 100 clients connect and say nothing; 20 more stop in the middle of a command or of DATA.
    let mut idle: Vec<TcpStream> = (0..100).map(|_| TcpStream::connect(addr).unwrap()).collect();
    for i in 0..20 {
        let mut s = TcpStream::connect(addr).unwrap();
        let partial: &[u8] = if i % 2 == 0 {
            b"LHLO slow\r\nMAIL FROM:<a@exa"
        } else {
            b"LHLO slow\r\nMAIL FROM:<a@example.net>\r\nRCPT TO:<news@example.org>\r\nDATA\r\nSubject: half"
        };
        s.write_all(partial).unwrap();
        idle.push(s);
    }
    let mut c = Lmtp::connect(addr);
    let long = format!("NOOP {}", "x".repeat(10_000));
    assert!(c.cmd(&long).starts_with("500 5.5.2"), "a command line has a limit");
    assert!(c.cmd("NOOP").starts_with("250"), "and the session goes on");
    let reply = c.post("ann@example.net", &message("ann@example.net", "slow@x", "Not held up", ""));
    assert!(reply.starts_with("250"), "{reply}");
    assert_eq!(outcome(&app.core, 1), "posted");
    drop(idle);
}

#[test]
fn lmtp_answers_451_while_the_database_cannot_take_the_message_and_250_once_it_can() {
    if courrier_tests::harness::skip_on_postgres("locks the SQLite file with sqlite3") {
        return;
    }
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    // Another process holds the write lock of the database LMTP commits in, the spool of accepted
    // mail (as a stuck writer would).
    let mut holder = std::process::Command::new("sqlite3")
        .arg(app.dir.path().join("spool.db"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sqlite3 (scripts/setup-system --test)");
    let mut stdin = holder.stdin.take().unwrap();
    stdin.write_all(b"BEGIN IMMEDIATE;\nSELECT 'locked';\n").unwrap();
    stdin.flush().unwrap();
    let mut locked = String::new();
    BufReader::new(holder.stdout.as_mut().unwrap()).read_line(&mut locked).unwrap();
    assert_eq!(locked.trim(), "locked");
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    let post = message("ann@example.net", "busy@x", "Busy", "");
    let reply = c.post("ann@example.net", &post);
    assert!(reply.starts_with("451 4.3.0 <news@example.org>"), "the MTA is told to retry: {reply}");
    stdin.write_all(b"COMMIT;\n.quit\n").unwrap();
    drop(stdin);
    holder.wait().unwrap();
    // The MTA's retry is taken, and the message was not half-stored the first time.
    assert!(c.post("ann@example.net", &post).starts_with("250"));
    assert_eq!(outcome(&app.core, 1), "posted");
    let second = in_read(&*app.core.mailing.store, |tx| tx.inbound_by_id(InboundId::from_stored(2))).unwrap();
    assert!(second.is_none(), "one stored message");
}

#[test]
fn posts_the_policy_does_not_let_through_are_held_with_their_reason_and_message_held() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    add(&app, &key, "member@example.net");
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    let mut n = 0;
    let mut post = |c: &mut Lmtp, from: &str| {
        n += 1;
        let reply = c.post(from, &message(from, &format!("h{n}@x"), "Hold?", ""));
        assert!(reply.starts_with("250"), "{reply}");
        outcome(&app.core, n)
    };
    // members (the default of a discussion list): a member posts, a stranger is held.
    assert_eq!(post(&mut c, "member@example.net"), "posted");
    assert_eq!(post(&mut c, "stranger@example.net"), "held");
    patch_list(&app, &key, json!({ "posting_policy": "moderated" }));
    assert_eq!(post(&mut c, "member@example.net"), "held");
    patch_list(&app, &key, json!({ "posting_policy": "owners" }));
    assert_eq!(post(&mut c, "member@example.net"), "held");
    assert_eq!(post(&mut c, "admin@example.org"), "posted", "the list's owner posts");
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    assert_eq!(post(&mut c, "stranger@example.net"), "posted");
    let r = call(&app, "POST", &format!("{NEWS}/suspend"), &[bearer(&key)], None);
    assert!(r.status == 200 || r.status == 204, "{}", r.body);
    assert_eq!(post(&mut c, "member@example.net"), "held");
    let r = call(&app, "POST", &format!("{NEWS}/resume"), &[bearer(&key)], None);
    assert!(r.status == 200 || r.status == 204, "{}", r.body);
    patch_list(&app, &key, json!({ "status": "archived" }));
    assert_eq!(post(&mut c, "member@example.net"), "held");
    let reasons: Vec<String> =
        events(&app.core, EventName::MessageHeld).iter().map(|e| e["reason"].as_str().unwrap().to_owned()).collect();
    assert_eq!(reasons, ["not_member", "moderated", "owners_only", "suspended", "archived"]);
    let held = events(&app.core, EventName::MessageHeld);
    assert_eq!(held[0]["from"], "stranger@example.net", "{}", held[0]);
    assert_eq!(held[0]["list_address"], "news@example.org");
    let list = in_read(&*app.core.mailing.store, |tx| {
        tx.list_by_name(
            &courrier_core::kernel::DomainName::parse("example.org").unwrap(),
            &courrier_core::kernel::ListName::parse("news").unwrap(),
        )
    })
    .unwrap()
    .unwrap();
    let page = courrier_core::kernel::Page::first(50);
    let stored = in_read(&*app.core.mailing.store, |tx| tx.held_posts(list.id, page)).unwrap();
    assert_eq!(stored.total, 5);
    assert_eq!(stored.items[0].subject.as_deref(), Some("Hold?"));
    assert_eq!(events(&app.core, EventName::SendSubmitted).len(), 3, "three posts went through");
}

#[test]
fn loops_auto_replies_and_repeated_message_ids_are_taken_but_not_posted() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    let from = "ann@example.net";
    let cases = [
        ("l1@x", "List-Id: NEWS <news.example.org>\r\n", "loop"),
        ("l2@x", "X-BeenThere: news@example.org\r\n", "loop"),
        ("l3@x", "Auto-Submitted: auto-replied\r\n", "auto_reply"),
        ("l4@x", "List-Id: Other <other.example.net>\r\nAuto-Submitted: no\r\n", "posted"),
        ("l4@x", "", "duplicate"),
    ];
    for (i, (id, extra, expect)) in cases.iter().enumerate() {
        let reply = c.post(from, &message(from, id, "Loop?", extra));
        assert!(reply.starts_with("250"), "taken (250) whatever becomes of it: {reply}");
        assert_eq!(outcome(&app.core, i as i64 + 1), *expect, "{extra}");
    }
    assert_eq!(events(&app.core, EventName::SendSubmitted).len(), 1);
    assert!(events(&app.core, EventName::MessageHeld).is_empty());
}

/// dkimpy's verdict on a delivered message, the selector's record given as published.
fn dkimpy_verifies(message: &str, record: &str) -> bool {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), message).unwrap();
    let script = courrier_tests::harness::workspace_root().join("tests/peers/dkim_verify.py");
    let out = std::process::Command::new(courrier_tests::harness::venv_python("dkim"))
        .arg(&script)
        .arg(file.path())
        .arg(record)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "ok"
}

/// The leaf MIME parts of a message as Python's `email` package reads them (`tests/peers/mime_parts.py`).
fn mime_parts(message: &str) -> Vec<Value> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), message).unwrap();
    let script = courrier_tests::harness::workspace_root().join("tests/peers/mime_parts.py");
    let out = std::process::Command::new(courrier_tests::harness::venv_python("email"))
        .arg(&script)
        .arg(file.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const WITH_ATTACHMENT: &str = "From: =?utf-8?q?Ann=C3=A9e?= <ann@example.net>\r\nTo: news@example.org\r\n\
Subject: Re: [news] Minutes\r\nMessage-ID: <att1@example.net>\r\nDate: Thu, 26 Nov 2026 09:00:00 +0000\r\n\
MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"BB\"\r\n\r\n\
--BB\r\nContent-Type: text/plain; charset=iso-8859-1\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
Minutes attached, caf=E9 at noon.\r\n\
--BB\r\nContent-Type: application/pdf; name=\"minutes.pdf\"\r\nContent-Disposition: attachment; filename=\"minutes.pdf\"\r\n\
Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCg==\r\n\
--BB\r\nContent-Type: image/png\r\nContent-Disposition: inline; filename=\"dot.png\"\r\nContent-ID: <dot@x>\r\n\
Content-Transfer-Encoding: base64\r\n\r\niVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==\r\n\
--BB--\r\n";

#[test]
fn a_post_with_attachments_reaches_members_with_its_parts_tag_footer_and_a_signature_dkimpy_verifies() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    add(&app, &key, "ann@example.net");
    add(&app, &key, "bob@example.com");
    patch_list(&app, &key, json!({ "subject_tag": "[news]", "footer_text": "Leave: see List-Unsubscribe." }));
    let r =
        call(&app, "PATCH", "/api/v1/domains/example.org", &[bearer(&key)], Some(&json!({ "dkim_selector": "s2026" })));
    assert_eq!(r.status, 200, "{}", r.body);
    let txt = r.json()["data"]["dkim_record"]["value"].as_str().unwrap().to_owned();
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    assert!(c.post("ann@example.net", WITH_ATTACHMENT).starts_with("250"));
    let copies = sink.wait_for(2, Duration::from_secs(30));
    assert_eq!(copies.len(), 2);
    let copy = &copies[0];
    assert_eq!(header(copy, "Subject"), Some("Re: [news] Minutes"), "the tag once: {copy}");
    assert_eq!(header(copy, "Message-ID"), Some("<att1@example.net>"));
    assert!(header(copy, "List-Id").is_some_and(|v| v.contains("<news.example.org>")), "{copy}");
    assert_eq!(header(copy, "X-BeenThere"), Some("news@example.org"));
    assert!(header(copy, "List-Unsubscribe").is_some_and(|v| v.contains("https://lists.example.org/p/unsubscribe/")));
    assert!(copy.contains("minutes.pdf") && copy.contains("dot.png"), "{copy}");
    // The parts survive: decoded, each attachment has its bytes.
    let parts = mime_parts(copy);
    let pdf = parts.iter().find(|p| p["filename"] == "minutes.pdf" && p["disposition"] == "attachment");
    assert!(pdf.unwrap()["hex"].as_str().unwrap().starts_with(&hex(b"%PDF-1.4")), "the PDF's bytes");
    let png = parts.iter().find(|p| p["content_id"] == "dot@x").unwrap();
    assert!(png["hex"].as_str().unwrap().starts_with(&hex(b"\x89PNG")), "the inline image with its Content-ID");
    let text: String = parts
        .iter()
        .filter(|p| p["content_type"] == "text/plain" && p["disposition"] != "attachment")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert!(text.contains("café at noon") && text.contains("Leave: see List-Unsubscribe."), "{text}");
    let sig = header(copy, "DKIM-Signature").expect("signed");
    assert!(sig.contains("d=example.org") && sig.contains("s=s2026"), "{sig}");
    assert!(dkimpy_verifies(copy, &txt), "dkimpy verifies the reposted copy:\n{copy}");
    assert!(!dkimpy_verifies(&copy.replace("noon", "dawn"), &txt), "and refuses it changed");
}

#[test]
fn a_poster_whose_domain_publishes_dmarc_reject_gets_the_list_in_from_and_stays_in_reply_to() {
    let dns = courrier_tests::peers::DnsServer::start(&[
        "txt-record=_dmarc.strict.test,v=DMARC1; p=reject",
        "txt-record=_dmarc.relaxed.test,v=DMARC1; p=none",
    ]);
    let sink = SmtpSink::start();
    let addr = dns.addr();
    let (app, key) = setup(&sink, &[("COURRIER_DNS_SERVER", addr.as_str())]);
    patch_list(&app, &key, json!({ "posting_policy": "open", "reply_to": "poster" }));
    add(&app, &key, "m@example.net");
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    assert!(c.post("ann@strict.test", &message("Ann <ann@strict.test>", "d1@x", "Strict", "")).starts_with("250"));
    let copy = sink.wait_for(1, Duration::from_secs(30)).remove(0);
    assert_eq!(header(&copy, "From"), Some("\"Ann via NEWS\" <news@example.org>"), "{copy}");
    assert_eq!(header(&copy, "Reply-To"), Some("\"Ann\" <ann@strict.test>"), "{copy}");
    assert!(c.post("bob@relaxed.test", &message("Bob <bob@relaxed.test>", "d2@x", "Relaxed", "")).starts_with("250"));
    let copies = sink.wait_for(2, Duration::from_secs(30));
    let relaxed = copies.iter().find(|m| header(m, "Subject") == Some("Relaxed")).unwrap();
    assert_eq!(header(relaxed, "From"), Some("\"Bob\" <bob@relaxed.test>"), "{relaxed}");
    // The list turns mitigation off: From stays the poster's even under p=reject.
    patch_list(&app, &key, json!({ "dmarc_mitigation": "none" }));
    assert!(c.post("ann@strict.test", &message("Ann <ann@strict.test>", "d3@x", "Kept", "")).starts_with("250"));
    let copies = sink.wait_for(3, Duration::from_secs(30));
    let kept = copies.iter().find(|m| header(m, "Subject") == Some("Kept")).unwrap();
    assert_eq!(header(kept, "From"), Some("\"Ann\" <ann@strict.test>"), "{kept}");
}

/// A 2048-bit key made by openssl for `domain`'s selector `s1`: the PEM file, and the dnsmasq
/// line publishing its record (split in strings of at most 255 bytes, as TXT records are).
fn poster_key(dir: &std::path::Path, domain: &str) -> (std::path::PathBuf, String) {
    let pem = dir.join(format!("{domain}.pem"));
    let ok = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    ok(&["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", pem.to_str().unwrap()]);
    let der = dir.join(format!("{domain}.pub.der"));
    ok(&["pkey", "-in", pem.to_str().unwrap(), "-pubout", "-outform", "DER", "-out", der.to_str().unwrap()]);
    let b64 = String::from_utf8(ok(&["base64", "-A", "-in", der.to_str().unwrap()])).unwrap();
    let record = format!("v=DKIM1; k=rsa; p={}", b64.trim());
    let strings: Vec<String> = record.as_bytes().chunks(200).map(|c| String::from_utf8(c.to_vec()).unwrap()).collect();
    (pem, format!("txt-record=s1._domainkey.{domain},{}", strings.join(",")))
}

/// `message` signed by `domain`'s key with dkimpy, as the poster's mail server signs it.
fn dkimpy_signed(message: &str, domain: &str, pem: &std::path::Path) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), message).unwrap();
    let script = courrier_tests::harness::workspace_root().join("tests/peers/dkim_sign.py");
    let out = std::process::Command::new(courrier_tests::harness::venv_python("dkim"))
        .arg(&script)
        .args([file.path(), std::path::Path::new(domain), std::path::Path::new("s1"), pem])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_post_claiming_a_member_at_a_dmarc_reject_domain_is_the_members_only_when_that_domain_signed_it() {
    let keys = tempfile::tempdir().unwrap();
    let (pem, published) = poster_key(keys.path(), "strict.test");
    let dns = courrier_tests::peers::DnsServer::start(&[
        "txt-record=_dmarc.strict.test,v=DMARC1; p=reject",
        published.as_str(),
        "txt-record=_dmarc.relaxed.test,v=DMARC1; p=none",
    ]);
    let sink = SmtpSink::start();
    let addr = dns.addr();
    let (app, key) = setup(&sink, &[("COURRIER_DNS_SERVER", addr.as_str())]);
    patch_list(&app, &key, json!({ "posting_policy": "members" }));
    add(&app, &key, "ann@strict.test");
    add(&app, &key, "bob@relaxed.test");
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    let ann = "Ann <ann@strict.test>";
    // Anyone can write Ann's address; her domain says only its signed mail is hers.
    assert!(c.post("ann@strict.test", &message(ann, "v1@x", "Forged", "")).starts_with("250"));
    assert_eq!(outcome(&app.core, 1), "held", "unsigned, under p=reject: not the member's");
    let signed = dkimpy_signed(&message(ann, "v2@x", "Signed", ""), "strict.test", &pem);
    assert!(c.post("ann@strict.test", &signed).starts_with("250"));
    assert_eq!(outcome(&app.core, 2), "posted", "signed by strict.test: Ann's");
    let tampered =
        dkimpy_signed(&message(ann, "v3@x", "Tampered", ""), "strict.test", &pem).replace("Hello all", "Buy now");
    assert!(c.post("ann@strict.test", &tampered).starts_with("250"));
    assert_eq!(outcome(&app.core, 3), "held", "a signature that no longer verifies vouches for nothing");
    assert!(c.post("bob@relaxed.test", &message("Bob <bob@relaxed.test>", "v4@x", "Plain", "")).starts_with("250"));
    assert_eq!(outcome(&app.core, 4), "posted", "p=none: the From is taken as written, as before");
    let held = call(&app, "GET", &format!("{NEWS}/moderation/messages"), &[bearer(&key)], None);
    assert_eq!(held.status, 200, "{}", held.body);
    let held = held.json()["data"].as_array().unwrap().clone();
    let subjects: Vec<(&str, &str)> =
        held.iter().map(|m| (m["subject"].as_str().unwrap(), m["reason"].as_str().unwrap())).collect();
    assert_eq!(subjects.len(), 2, "{subjects:?}");
    assert!(
        subjects.contains(&("Forged", "not_member")) && subjects.contains(&("Tampered", "not_member")),
        "{subjects:?}"
    );
    let copies = sink.wait_for(4, Duration::from_secs(30));
    assert!(copies.iter().all(|m| header(m, "Subject") != Some("Forged")), "the forgery reached nobody");
}

fn cli_in(dir: &std::path::Path, args: &[&str]) -> String {
    let (status, out, err) = courrier_tests::harness::run_cli_in(dir, args, &[], None);
    assert!(status.success(), "courrier {args:?}: {out}{err}");
    out
}

/// A data directory with news@example.org (posting open) and `members` active members.
fn prepared_dir(members: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    cli_in(d, &["user", "create", "--email", "admin@example.org", "--site-admin"]);
    cli_in(d, &["domain", "create", "example.org"]);
    let list = ["--domain", "example.org", "--list", "news"];
    let create: Vec<&str> = ["list", "create"]
        .into_iter()
        .chain(list)
        .chain(["--display-name", "News", "--owner", "admin@example.org", "--subscription-policy", "open"])
        .collect();
    cli_in(d, &create);
    let update: Vec<&str> = ["list", "update"].into_iter().chain(list).chain(["--posting-policy", "open"]).collect();
    cli_in(d, &update);
    for i in 0..members {
        let email = format!("m{i}@example.net");
        let add: Vec<&str> = ["member", "add"].into_iter().chain(list).chain(["--email", email.as_str()]).collect();
        cli_in(d, &add);
    }
    dir
}

#[test]
fn a_server_killed_after_its_250_posts_the_message_once_after_the_restart() {
    let sink = SmtpSink::start();
    let url = sink.url();
    let dir = prepared_dir(3);
    // No workers: the server stores what LMTP takes and processes nothing, so the kill falls
    // between the 250 and the fan-out for certain.
    let storing = [("COURRIER_SMTP_URL", url.as_str()), ("COURRIER_DELIVERY_WORKERS", "0"), ("COURRIER_LOG", "warn")];
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &storing);
    let mut c = Lmtp::connect(app.lmtp);
    let reply = c.post("ann@example.net", &message("ann@example.net", "crash@x", "Crash", ""));
    assert!(reply.starts_with("250"), "{reply}");
    let dir = app.crash();
    assert!(sink.messages().is_empty(), "nothing was sent before the crash");
    if !dir.path().join(".test-database-url").exists() {
        let (waiting, _, _) = inbound_record(dir.path(), 0);
        assert_eq!((waiting, spooled(dir.path()).len()), (1, 1), "acknowledged: in the spool, not moved yet");
    }
    let working = [("COURRIER_SMTP_URL", url.as_str()), ("COURRIER_LOG", "warn")];
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &working);
    let copies = sink.wait_for(3, Duration::from_secs(60));
    assert_eq!(copies.len(), 3);
    // A second restart finds nothing left to do: the post went out once.
    let dir = app.crash();
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &working);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(sink.messages().len(), 3, "sent once");
    drop(app);
}

/// The keys of the messages in the spool of a stopped or running SQLite server (none on
/// PostgreSQL: LMTP stores there directly).
fn spooled(dir: &std::path::Path) -> Vec<String> {
    use courrier_core::mailing::ports::Spool;
    if dir.join(".test-database-url").exists() {
        return Vec::new();
    }
    let spool = courrier_store_sqlite::SqliteSpool::open(&dir.join("spool.db")).unwrap();
    spool.oldest(100_000).unwrap().into_iter().map(|m| m.key).collect()
}

/// What the databases of a stopped or running server say: the messages still waiting (in the
/// spool and not moved yet, or moved and not processed), the state and outcome of each message
/// moved into the inbound store (ids 1..=n), and the `send.submitted` events.
fn inbound_record(dir: &std::path::Path, n: i64) -> (usize, Vec<(InboundState, Option<String>)>, usize) {
    use courrier_core::mailing::ports::Tx;
    let spooled = spooled(dir);
    let store = courrier_tests::harness::open_mailing_store(dir);
    let store: &dyn courrier_core::storage::Store<dyn Tx> = &*store;
    in_read(store, |tx| {
        let mut waiting = tx.inbound_waiting(None, 10_000)?.len();
        for key in &spooled {
            if tx.inbound_by_spool_key(key)?.is_none() {
                waiting += 1;
            }
        }
        let mut states = Vec::new();
        for id in 1..=n {
            if let Some(m) = tx.inbound_by_id(InboundId::from_stored(id))? {
                states.push((m.state, m.outcome));
            }
        }
        let events = tx.events_after(None, 100_000)?;
        Ok::<_, courrier_core::storage::StoreError>((
            waiting,
            states,
            events.iter().filter(|e| e.name == EventName::SendSubmitted).count(),
        ))
    })
    .unwrap()
}

#[test]
fn a_server_killed_in_the_middle_of_a_batch_posts_each_stored_post_once_after_the_restart() {
    const N: i64 = 150;
    let sink = SmtpSink::start();
    let url = sink.url();
    let dir = prepared_dir(1);
    let storing = [("COURRIER_SMTP_URL", url.as_str()), ("COURRIER_DELIVERY_WORKERS", "0"), ("COURRIER_LOG", "warn")];
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &storing);
    let mut c = Lmtp::connect(app.lmtp);
    for i in 0..N {
        let reply =
            c.post("ann@example.net", &message("ann@example.net", &format!("b{i}@x"), &format!("Post {i}"), ""));
        assert!(reply.starts_with("250"), "{reply}");
    }
    let dir = app.crash();
    assert_eq!(inbound_record(dir.path(), N).0, N as usize, "all stored, none processed");
    // Processing runs in batches (one transaction each); the server is killed as soon as it has
    // visibly begun (the first copy at the sink), wherever that falls.
    let working = [("COURRIER_SMTP_URL", url.as_str()), ("COURRIER_LOG", "warn")];
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &working);
    sink.wait_for(1, Duration::from_secs(60));
    let dir = app.crash();
    let (waiting, states, submitted) = inbound_record(dir.path(), N);
    let done = states.iter().filter(|(s, _)| *s == InboundState::Done).count();
    assert_eq!(done + waiting, N as usize);
    assert_eq!(submitted, done, "what committed is exactly the processed posts' sends");
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &working);
    let deadline = Instant::now() + Duration::from_secs(120);
    while inbound_record(app.dir.path(), N).0 > 0 {
        assert!(Instant::now() < deadline, "the posts left waiting were not processed after the restart");
        std::thread::sleep(Duration::from_millis(100));
    }
    let dir = app.crash();
    let (waiting, states, submitted) = inbound_record(dir.path(), N);
    assert_eq!((waiting, states.len()), (0, N as usize));
    assert!(states.iter().all(|(s, o)| *s == InboundState::Done && o.as_deref() == Some("posted")), "{states:?}");
    assert_eq!(submitted, N as usize, "each post became one send, none twice");
}

/// A scratch Postfix of its own (config, queue and data directories in a temporary directory,
/// never the system's), listening for SMTP on 127.0.0.1:`port`, routing `example.org` to
/// Courrier's LMTP port by a transport map. Stopped on drop.
struct Postfix {
    dir: tempfile::TempDir,
    port: u16,
}

impl Postfix {
    fn start(lmtp: SocketAddr) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Postfix's daemons run as `postfix`: they must reach the queue.
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["conf", "queue", "data"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let chown = std::process::Command::new("chown").arg("postfix").arg(d.join("data")).status().unwrap();
        assert!(chown.success(), "chown postfix (the tests run as root, as CI does)");
        let port = free_port();
        let p = d.display();
        let main = format!(
            "compatibility_level = 3.6\nqueue_directory = {p}/queue\ndata_directory = {p}/data\n\
             mail_owner = postfix\nsetgid_group = postdrop\ninet_interfaces = 127.0.0.1\ninet_protocols = ipv4\n\
             myhostname = mx.courrier.test\nmydestination =\nrelay_domains = example.org\n\
             transport_maps = texthash:{p}/conf/transport\nmynetworks = 127.0.0.0/8\n\
             smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination\nalias_maps =\n\
             alias_database =\nlocal_recipient_maps =\nsmtputf8_enable = no\nsyslog_name = postfix-courrier-test\n\
             maillog_file = {p}/maillog\nmaillog_file_prefixes = {p}\n"
        );
        std::fs::write(d.join("conf/main.cf"), main).unwrap();
        let services = [
            "pickup unix n - n 60 1 pickup",
            "cleanup unix n - n - 0 cleanup",
            "qmgr unix n - n 300 1 qmgr",
            "rewrite unix - - n - - trivial-rewrite",
            "bounce unix - - n - 0 bounce",
            "defer unix - - n - 0 bounce",
            "trace unix - - n - 0 bounce",
            "verify unix - - n - 1 verify",
            "flush unix n - n 1000? 0 flush",
            "proxymap unix - - n - - proxymap",
            "smtp unix - - n - - smtp",
            "relay unix - - n - - smtp",
            "showq unix n - n - - showq",
            "error unix - - n - - error",
            "retry unix - - n - - error",
            "discard unix - - n - - discard",
            "lmtp unix - - n - - lmtp",
            "anvil unix - - n - 1 anvil",
            "scache unix - - n - 1 scache",
            "postlog unix-dgram n - n - 1 postlogd",
        ];
        let master = format!("127.0.0.1:{port} inet n - n - - smtpd\n{}\n", services.join("\n"));
        std::fs::write(d.join("conf/master.cf"), master).unwrap();
        // The README's transport map line, with this run's port.
        std::fs::write(d.join("conf/transport"), format!("example.org lmtp:inet:{lmtp}\n")).unwrap();
        let out = std::process::Command::new("postfix").arg("-c").arg(d.join("conf")).arg("start").output().unwrap();
        assert!(out.status.success(), "postfix start: {}", String::from_utf8_lossy(&out.stderr));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "postfix did not listen:\n{}", Self::log_of(d));
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { dir, port }
    }

    fn log_of(d: &std::path::Path) -> String {
        std::fs::read_to_string(d.join("maillog")).unwrap_or_default()
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let _ = std::process::Command::new("postfix").arg("-c").arg(self.dir.path().join("conf")).arg("stop").output();
    }
}

/// A plain SMTP client's one message.
fn smtp_send(port: u16, from: &str, to: &str, message: &str) {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut c = Lmtp { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream };
    assert!(c.reply().starts_with("220"));
    assert!(c.cmd("EHLO tests.example").starts_with("250"));
    let (rcpt, _) = (vec![c.cmd(&format!("MAIL FROM:<{from}>")), c.cmd(&format!("RCPT TO:<{to}>"))], ());
    assert!(rcpt.iter().all(|r| r.starts_with("250")), "{rcpt:?}");
    assert!(c.cmd("DATA").starts_with("354"));
    c.writer.write_all(format!("{}\r\n.\r\n", message.trim_end()).as_bytes()).unwrap();
    let done = c.reply();
    assert!(done.starts_with("250"), "{done}");
    c.cmd("QUIT");
}

#[test]
fn a_post_relayed_by_a_real_postfix_over_lmtp_reaches_the_members() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    add(&app, &key, "m1@example.net");
    add(&app, &key, "m2@example.net");
    let postfix = Postfix::start(app.lmtp.unwrap());
    smtp_send(
        postfix.port,
        "ann@example.net",
        "news@example.org",
        &message("ann@example.net", "pf@x", "Via Postfix", ""),
    );
    let copies = sink.wait_for(2, Duration::from_secs(60));
    assert_eq!(copies.len(), 2, "postfix log:\n{}", Postfix::log_of(postfix.dir.path()));
    assert!(copies.iter().all(|m| header(m, "Subject") == Some("Via Postfix")));
    let log = Postfix::log_of(postfix.dir.path());
    assert!(log.contains("status=sent (250 2.0.0 <news@example.org>"), "{log}");
    // An address naming no list: Postfix hears 550 5.1.1 and bounces it (nothing stored).
    smtp_send(postfix.port, "ann@example.net", "nolist@example.org", &message("ann@example.net", "pf2@x", "No", ""));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Postfix::log_of(postfix.dir.path()).contains("550 5.1.1 <nolist@example.org>") {
        assert!(Instant::now() < deadline, "{}", Postfix::log_of(postfix.dir.path()));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs one statement on the server's database with the `sqlite3` shell (another process, as an
/// operator's hand edit would be).
fn sqlite3(app: &TestApp, sql: &str) {
    let out = std::process::Command::new("sqlite3")
        .arg("-cmd")
        .arg(".timeout 10000")
        .arg(app.dir.path().join("courrier.db"))
        .arg(sql)
        .output()
        .expect("sqlite3 (scripts/setup-system --test)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_lmtp_connection_answers_rcpt_from_memory_and_its_store_sees_the_list_renamed_or_its_limit_lowered() {
    if courrier_tests::harness::skip_on_postgres("renames the list with sqlite3: no route renames one") {
        return;
    }
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    assert!(c.post("ann@example.net", &message("ann@example.net", "m1@x", "One", "")).starts_with("250"));
    // The list is renamed behind the server's back after this connection looked it up.
    sqlite3(&app, "UPDATE lists SET name = 'renamed' WHERE name = 'news'");
    let (rcpt, after) =
        c.send("ann@example.net", &["news@example.org"], &message("ann@example.net", "m2@x", "Two", ""));
    assert!(rcpt[0].starts_with("250"), "the RCPT is answered from what the connection remembered: {rcpt:?}");
    assert!(after[0].starts_with("550 5.1.1 <news@example.org>"), "the store finds no list by that name: {after:?}");
    // And the connection forgets it: the next RCPT looks again.
    let (rcpt, after) =
        c.send("ann@example.net", &["news@example.org"], &message("ann@example.net", "m3@x", "Three", ""));
    assert!(rcpt[0].starts_with("550 5.1.1") && after.is_empty(), "{rcpt:?}");
    assert!(c.cmd("RSET").starts_with("250"));
    sqlite3(&app, "UPDATE lists SET name = 'news' WHERE name = 'renamed'");
    assert!(c.post("ann@example.net", &message("ann@example.net", "m4@x", "Four", "")).starts_with("250"));
    // Its size limit lowered through the API after the RCPT was remembered: the store refuses.
    patch_list(&app, &key, json!({ "max_message_kb": 1 }));
    let big = message("ann@example.net", "m5@x", "Big", &format!("X-Pad: {}\r\n", "p".repeat(2000)));
    let (rcpt, after) = c.send("ann@example.net", &["news@example.org"], &big);
    assert!(rcpt[0].starts_with("250"), "{rcpt:?}");
    assert!(after[0].starts_with("552 5.3.4 <news@example.org>"), "{after:?}");
    // Raised again: a declared SIZE the remembered limit refuses is looked up afresh, not refused.
    patch_list(&app, &key, json!({ "max_message_kb": 1024 }));
    assert!(c.cmd("MAIL FROM:<ann@example.net> SIZE=5000").starts_with("250"));
    assert!(c.cmd("RCPT TO:<news@example.org>").starts_with("250"));
    assert!(c.cmd("RSET").starts_with("250"));
    // Two messages stored (the first and the fourth); the others were refused, none half-stored.
    assert_eq!(outcome(&app.core, 1), "posted");
    assert_eq!(outcome(&app.core, 2), "posted");
    let third = in_read(&*app.core.mailing.store, |tx| tx.inbound_by_id(InboundId::from_stored(3))).unwrap();
    assert!(third.is_none(), "nothing else stored");
}

#[test]
fn four_lmtp_sessions_posting_at_once_each_hear_250_for_every_message_and_each_is_posted() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    let addr = app.lmtp.unwrap();
    let sessions: Vec<_> = (0..4)
        .map(|s| {
            std::thread::spawn(move || {
                let mut c = Lmtp::connect(addr);
                (0..10)
                    .map(|i| c.post("ann@example.net", &message("ann@example.net", &format!("s{s}-{i}@x"), "Busy", "")))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for s in sessions {
        let replies = s.join().unwrap();
        assert!(replies.iter().all(|r| r.starts_with("250 2.0.0 <news@example.org>")), "{replies:?}");
    }
    for id in 1..=40 {
        assert_eq!(outcome(&app.core, id), "posted", "message {id}");
    }
    let extra = in_read(&*app.core.mailing.store, |tx| tx.inbound_by_id(InboundId::from_stored(41))).unwrap();
    assert!(extra.is_none(), "40 messages, each stored once");
}

/// The nice values of this process's threads named `name` (as the kernel keeps it: its first 15
/// bytes), once there are `n` of them (polled: the server's threads start beside the test).
fn threads_niceness(name: &str, n: usize) -> Vec<i64> {
    let name = &name[..name.len().min(15)];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == name {
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                // After the name in parentheses: state is field 3, nice field 19.
                let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
                found.push(rest.split_whitespace().nth(16).and_then(|n| n.parse().ok()).expect("nice in stat"));
            }
        }
        if found.len() >= n {
            return found;
        }
        assert!(Instant::now() < deadline, "{} threads named {name}, not {n}", found.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn processing_and_delivery_threads_run_below_the_lmtp_sessions_priority() {
    let sink = SmtpSink::start();
    let (app, _key) = setup(&sink, &[]);
    let mut c = Lmtp::connect(app.lmtp.unwrap());
    assert!(c.cmd("NOOP").starts_with("250"));
    let base = threads_niceness("courrier-accept", 1)[0];
    let want = (base + 10).min(19);
    // Two delivery threads (the default) and the one processing mail in.
    for (name, n) in [("courrier-delivery-", 2), ("courrier-inbound", 1)] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = threads_niceness(name, n);
            if got.iter().all(|nice| *nice == want) {
                break;
            }
            assert!(Instant::now() < deadline, "{name}: nice {got:?}, not {want}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    drop(app);
}

/// The spool of accepted mail is never replaced: a damaged one (it may hold acknowledged mail)
/// stops the start with a message naming it and what to do; a missing one is made anew.
#[test]
fn a_server_whose_spool_of_accepted_mail_is_damaged_refuses_to_start_naming_the_file() {
    if courrier_tests::harness::skip_on_postgres("LMTP stores in PostgreSQL directly: no spool file") {
        return;
    }
    let dir = prepared_dir(0);
    let spool = dir.path().join("spool.db");
    for made_by_the_cli in ["spool.db", "spool.db-wal", "spool.db-shm"] {
        std::fs::remove_file(dir.path().join(made_by_the_cli)).ok();
    }
    std::fs::write(&spool, vec![b'#'; 8192]).unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let port = courrier_tests::harness::free_port();
    let mut child = std::process::Command::new(courrier_tests::harness::courrier_bin())
        .args(["--data-dir", data_dir, "serve"])
        .env("COURRIER_LISTEN", format!("127.0.0.1:{port}"))
        .env("COURRIER_LMTP_LISTEN", format!("127.0.0.1:{}", courrier_tests::harness::free_port()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started on a damaged spool");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(69), "unavailable: {err}");
    assert!(err.contains(spool.to_str().unwrap()) && err.contains("spool of accepted mail"), "{err}");
    assert!(err.contains("move it aside"), "{err}");
    assert_eq!(std::fs::read(&spool).unwrap(), vec![b'#'; 8192], "left as it was");
    // Moved aside: the server starts with a new, empty spool.
    std::fs::rename(&spool, dir.path().join("spool.db.damaged")).unwrap();
    let app = courrier_tests::harness::ProcessApp::spawn_in(dir, &[("COURRIER_LOG", "warn")]);
    assert!(app.dir.path().join("spool.db").exists());
    drop(app);
}

/// Whether the inbound message `id` was processed yet (stored in the spool or `received`: not).
fn processed(core: &Services, id: i64) -> bool {
    let m = in_read(&*core.mailing.store, |tx| tx.inbound_by_id(InboundId::from_stored(id))).unwrap();
    m.is_some_and(|m| m.state == InboundState::Done)
}

/// Processing gives way to the LMTP sessions: while one of them is in the middle of a message,
/// a post another session got its 250 for waits (here up to the minute the server is told to
/// wait at most), and is posted once the sessions fall quiet. The bound itself (the default
/// second) is what `silent_and_slow_lmtp_clients_do_not_hold_the_others_...` relies on: its
/// half-sent messages never end, and its post is still processed.
#[test]
fn a_post_is_processed_once_the_other_lmtp_sessions_are_no_longer_in_the_middle_of_a_message() {
    let sink = SmtpSink::start();
    let (app, key) = setup(&sink, &[("COURRIER_MAIL_IN_DEFER_MS", "60000")]);
    patch_list(&app, &key, json!({ "posting_policy": "open" }));
    add(&app, &key, "bob@example.com");
    let addr = app.lmtp.unwrap();
    let mut busy = Lmtp::connect(addr);
    assert!(busy.cmd("MAIL FROM:<carl@example.net>").starts_with("250"));
    assert!(busy.cmd("RCPT TO:<news@example.org>").starts_with("250"));
    let mut c = Lmtp::connect(addr);
    let reply = c.post("ann@example.net", &message("ann@example.net", "waits@x", "Waits its turn", ""));
    assert!(reply.starts_with("250 2.0.0"), "{reply}");
    // Longer than the processing loop's own look (every second) and its wake-up by the reply.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!processed(&app.core, 1), "processed while another session was receiving");
    assert!(!sink.messages().iter().any(|m| m.contains("Waits its turn")), "not sent yet");
    // The busy session gives its message up: the sessions are quiet, the post goes out.
    assert!(busy.cmd("RSET").starts_with("250"));
    assert_eq!(outcome(&app.core, 1), "posted");
    drop(busy);
}
