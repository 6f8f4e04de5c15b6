//! Bounces (issue 21) against the real server, a real SMTP sink (aiosmtpd, refusing some
//! addresses where a test says so), the HTTPS webhook receiver and a headless Chromium: a DSN for
//! one copy scores its member, at most once a day; the list's threshold disables the member, who
//! then gets nothing of the next send; `member.bounced` reaches a webhook; the administrator
//! re-enables (API and CLI), and so does the subscriber through the mailed link in a browser; a
//! 5xx of the receiving server scores like a DSN. DSNs arrive over LMTP at `news-bounces+<token>@`
//! (the token read from the copy's return path) as an MTA hands them over, and the mail-in
//! pipeline processes them with the bounce rules.

use crate::access::{bearer, call, make_key, make_list, make_user};
use crate::members::events;
use courrier_core::access::Perm;
use courrier_core::access::model::{KeyScope, Role};
use courrier_core::kernel::EventName;
use courrier_core::mailing::model::SubscriptionPolicy;
use courrier_tests::browser::{Browser, BrowserOptions};
use courrier_tests::harness::{Resp, SmtpSink, TestApp, run_cli_in};
use courrier_tests::peers::{DnsServer, Receiver};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const NEWS: &str = "/api/v1/domains/example.org/lists/news";

struct World {
    app: TestApp,
    key: String,
    sink: SmtpSink,
    receiver: Receiver,
    _dns: DnsServer,
}

fn world(sink: SmtpSink) -> World {
    let receiver = Receiver::start();
    let dns = DnsServer::start(&["address=/hooks.test/127.0.0.1"]);
    let (ca, dns_addr, url) = (receiver.ca.ca_pem.display().to_string(), dns.addr(), sink.url());
    let app = TestApp::spawn_with(&[
        ("COURRIER_SMTP_URL", url.as_str()),
        ("COURRIER_EXTRA_CA", ca.as_str()),
        ("COURRIER_DNS_SERVER", dns_addr.as_str()),
        ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8"),
        ("COURRIER_RETRY_BASE_SECS", "1"),
    ]);
    let admin = make_user(&app.core, "admin@example.org", &[Role::SiteAdmin]);
    make_list(&app.core, "example.org", "news", "admin@example.org", SubscriptionPolicy::Open);
    let key = make_key(&app.core, &admin, KeyScope::User, &Perm::ALL, Some(100_000));
    World { app, key, sink, receiver, _dns: dns }
}

impl World {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        call(&self.app, method, path, &[bearer(&self.key)], body.as_ref())
    }

    fn get(&self, path: &str) -> Value {
        let r = self.call("GET", path, None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.json()["data"].clone()
    }

    fn add(&self, email: &str) {
        let r = self.call("POST", &format!("{NEWS}/members"), Some(json!({ "email": email })));
        assert_eq!(r.status, 201, "{}", r.body);
    }

    fn member(&self, email: &str) -> Value {
        self.get(&format!("{NEWS}/members/{}", email.replace('@', "%40")))
    }

    fn threshold(&self, score: u32) {
        let r = self.call("PATCH", NEWS, Some(json!({ "bounce_disable_score": score })));
        assert_eq!(r.status, 200, "{}", r.body);
    }

    /// Submits a post and waits until every copy is terminal; the send's status and its
    /// recipients.
    fn send(&self, subject: &str) -> (Value, u64) {
        let r = self.call("POST", &format!("{NEWS}/sends"), Some(json!({ "subject": subject, "text": "Hello" })));
        assert_eq!(r.status, 202, "{}", r.body);
        let d = r.json()["data"].clone();
        let (id, recipients) = (d["send_id"].as_i64().unwrap(), d["recipients"].as_u64().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.get(&format!("{NEWS}/sends/{id}"));
            if matches!(s["state"].as_str(), Some("completed" | "failed")) {
                return (s, recipients);
            }
            assert!(Instant::now() < deadline, "the send did not finish: {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The copy (its VERP token) the sink received for `to` with `subject`.
    fn copy_token(&self, to: &str, subject: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for m in self.sink.messages() {
                if m.contains(&format!("X-RcptTo: {to}")) && m.contains(&format!("Subject: {subject}")) {
                    let from = m.lines().find_map(|l| l.strip_prefix("X-MailFrom: ")).expect("the envelope sender");
                    assert!(from.starts_with("news-bounces+"), "the VERP return path: {from}");
                    return from["news-bounces+".len()..].split('@').next().unwrap().to_owned();
                }
            }
            assert!(Instant::now() < deadline, "no copy for {to}: {}", self.sink.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A DSN delivered over LMTP to `news-bounces+{token}@example.org`, processed.
    fn dsn(&self, token: &str, recipient: &str, action: &str, status: &str) {
        self.lmtp(&format!("news-bounces+{token}@example.org"), &dsn(recipient, action, status));
    }

    /// Delivers `message` over LMTP to `rcpt` (the null reverse-path, as bounces come) and waits
    /// until the pipeline has processed it.
    fn lmtp(&self, rcpt: &str, message: &str) {
        let replies = lmtp_deliver(self.app.lmtp.expect("the LMTP server"), rcpt, message);
        assert!(replies.starts_with("250"), "LMTP: {replies}");
        let deadline = Instant::now() + Duration::from_secs(20);
        // Waiting: still in the spool of accepted mail, or moved and not processed.
        while courrier_core::mailing::inbound::waiting(&self.app.core.mailing, 1).unwrap() > 0 {
            assert!(Instant::now() < deadline, "the message was not processed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One LMTP transaction (RFC 2033); the reply to the end of DATA.
fn lmtp_deliver(addr: std::net::SocketAddr, rcpt: &str, message: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = stream.try_clone().unwrap();
    let mut input = BufReader::new(stream);
    let mut reply = || {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            input.read_line(&mut line).unwrap();
            all.push_str(&line);
            if line.len() < 4 || line.as_bytes()[3] != b'-' {
                return all;
            }
        }
    };
    assert!(reply().starts_with("220"));
    for cmd in ["LHLO mx.example.net".to_owned(), "MAIL FROM:<>".to_owned(), format!("RCPT TO:<{rcpt}>")] {
        write!(out, "{cmd}\r\n").unwrap();
        let r = reply();
        assert!(r.starts_with("250"), "{cmd}: {r}");
    }
    write!(out, "DATA\r\n").unwrap();
    assert!(reply().starts_with("354"));
    let body = message.replace("\r\n.", "\r\n..");
    write!(out, "{body}\r\n.\r\n").unwrap();
    let done = reply();
    write!(out, "QUIT\r\n").unwrap();
    done
}

fn dsn(recipient: &str, action: &str, status: &str) -> String {
    format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.net>\r\nTo: news-bounces@example.org\r\n\
         Subject: Undelivered Mail Returned to Sender\r\nAuto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
         --B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n\
         --B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.net\r\n\r\n\
         Final-Recipient: rfc822; {recipient}\r\nAction: {action}\r\nStatus: {status}\r\n\
         Diagnostic-Code: smtp; 550 {status} <{recipient}>: Recipient address rejected\r\n\r\n\
         --B\r\nContent-Type: text/rfc822-headers\r\n\r\nSubject: Hi\r\n\r\n--B--\r\n"
    )
}

/// The path of the first `marker` link in a mail (quoted-printable soft breaks undone).
fn link_path(mail: &str, marker: &str) -> String {
    let text = mail.replace("=\r\n", "").replace("=\n", "");
    let at = text.find(marker).unwrap_or_else(|| panic!("no {marker} link in {text}"));
    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_')).collect()
}

#[test]
fn a_dsn_for_one_copy_scores_its_member_once_a_day_and_member_bounced_reaches_a_webhook() {
    let w = world(SmtpSink::start());
    let url = format!("https://hooks.test:{}/bounced", w.receiver.port);
    let r = w.call("POST", "/api/v1/webhooks", Some(json!({ "url": url, "events": ["member.bounced"] })));
    assert_eq!(r.status, 201, "{}", r.body);
    w.add("ann@example.net");
    w.add("bob@example.net");
    assert_eq!(w.member("ann@example.net")["last_bounce_at"], Value::Null, "never bounced");
    let (_, recipients) = w.send("First");
    assert_eq!(recipients, 2);
    let token = w.copy_token("ann@example.net", "First");
    w.dsn(&token, "ann@example.net", "failed", "5.1.1");
    let ann = w.member("ann@example.net");
    assert_eq!((ann["bounce_score"].as_u64(), ann["status"].as_str()), (Some(1), Some("active")), "{ann}");
    assert!(ann["last_bounce_at"].is_string(), "{ann}");
    assert_eq!(w.member("bob@example.net")["bounce_score"], 0, "only the copy's member");
    // The same day again: recorded and announced, not scored.
    w.dsn(&token, "ann@example.net", "failed", "5.1.1");
    assert_eq!(w.member("ann@example.net")["bounce_score"], 1, "at most once a day");
    // A delay is recorded without a score nor an event.
    w.dsn(&w.copy_token("bob@example.net", "First"), "bob@example.net", "delayed", "4.4.7");
    assert_eq!(w.member("bob@example.net")["bounce_score"], 0);
    let hooks = w.receiver.wait_for(2, |r| r["path"] == "/bounced");
    for h in &hooks {
        let body: Value = serde_json::from_str(h["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["type"], "member.bounced");
        assert_eq!(body["data"]["member"]["email"], "ann@example.net", "{body}");
        assert_eq!((body["data"]["score"].as_u64(), body["data"]["status_code"].as_str()), (Some(1), Some("5.1.1")));
        assert!(body["data"]["diagnostic"].as_str().unwrap().contains("Recipient address rejected"), "{body}");
    }
    assert_eq!(events(&w.app.core, EventName::MemberBounced).len(), 2);
    // The bounce statistics: the listing's floor, the dashboard.
    let floor = w.call("GET", &format!("{NEWS}/members?min_bounce_score=1"), None).json();
    assert_eq!(floor["meta"]["total"], 1, "{floor}");
    assert_eq!(floor["data"][0]["email"], "ann@example.net");
    w.call("GET", &format!("{NEWS}/members?min_bounce_score=one"), None).expect_error(422, "validation_failed");
    let dash = w.get("/api/v1/dashboard");
    assert_eq!(dash["bounces_last_7_days"], json!({ "permanent": 2, "temporary": 1 }), "{dash}");
}

#[test]
fn the_threshold_disables_the_member_who_gets_nothing_of_the_next_send_until_re_enabled() {
    let w = world(SmtpSink::start());
    w.threshold(2);
    w.add("ann@example.net");
    w.add("bob@example.net");
    w.send("First");
    let token = w.copy_token("ann@example.net", "First");
    w.dsn(&token, "ann@example.net", "failed", "5.1.1");
    assert_eq!(w.member("ann@example.net")["status"], "active", "one bounce is under the threshold of 2");
    w.threshold(1);
    w.dsn(&token, "ann@example.net", "failed", "5.2.1");
    let ann = w.member("ann@example.net");
    assert_eq!((ann["status"].as_str(), ann["disabled_reason"].as_str()), (Some("disabled"), Some("bounces")), "{ann}");
    assert!(ann["disabled_at"].is_string(), "{ann}");
    let counts = w.get(&format!("{NEWS}/sends/1"))["counts"].clone();
    assert_eq!((counts["bounced"].as_u64(), counts["sent"].as_u64()), (Some(1), Some(1)), "{counts}");
    let before = w.sink.messages().len();
    let (second, recipients) = w.send("Second");
    assert_eq!((recipients, second["counts"]["sent"].as_u64()), (1, Some(1)));
    let new: Vec<String> = w.sink.messages().into_iter().skip(before).collect();
    assert!(new.iter().any(|m| m.contains("X-RcptTo: bob@example.net") && m.contains("Subject: Second")));
    assert!(
        !new.iter().any(|m| m.contains("X-RcptTo: ann@example.net") && m.contains("Subject: Second")),
        "a disabled member gets no copy"
    );
    assert_eq!(w.get(&format!("{NEWS}/members?status=disabled"))[0]["email"], "ann@example.net");

    // What the administrator's re-enabling refuses.
    let patch = |who: &str, body: Value| w.call("PATCH", &format!("{NEWS}/members/{who}"), Some(body));
    patch("bob%40example.net", json!({ "status": "disabled" })).expect_error(422, "validation_failed");
    patch("bob%40example.net", json!({})).expect_error(422, "validation_failed");
    patch("nobody%40example.net", json!({ "status": "active" })).expect_error(404, "not_found");
    let (p, ctx) = (courrier_core::access::Principal::operator(), courrier_core::access::principal::RequestCtx::cli());
    w.add("gone@example.net");
    let (d, l) = (
        courrier_core::kernel::DomainName::parse("example.org").unwrap(),
        courrier_core::kernel::ListName::parse("news").unwrap(),
    );
    let gone = courrier_core::mailing::members::MemberRef::parse("gone@example.net").unwrap();
    courrier_core::mailing::members::remove(&w.app.core.mailing, &p, &ctx, &d, &l, &gone).unwrap();
    patch("gone%40example.net", json!({ "status": "active" })).expect_error(409, "conflict");
    let reader = make_user(&w.app.core, "reader@example.org", &[Role::Owner(d.clone(), l.clone())]);
    let read_only = make_key(&w.app.core, &reader, KeyScope::User, &[Perm::Read], None);
    let r = call(
        &w.app,
        "PATCH",
        &format!("{NEWS}/members/ann%40example.net"),
        &[bearer(&read_only)],
        Some(&json!({ "status": "active" })),
    );
    r.expect_error(403, "forbidden");
    assert_eq!(patch("bob%40example.net", json!({ "status": "active" })).status, 200, "already active: as it is");

    // The administrator re-enables: active, score 0, audited; the next send reaches ann again.
    let r = patch("ann%40example.net", json!({ "status": "active" }));
    assert_eq!(r.status, 200, "{}", r.body);
    let ann = r.json()["data"].clone();
    assert_eq!(
        (ann["status"].as_str(), ann["bounce_score"].as_u64(), &ann["disabled_reason"], &ann["disabled_at"]),
        (Some("active"), Some(0), &Value::Null, &Value::Null),
        "{ann}"
    );
    assert!(ann["last_bounce_at"].is_string(), "the last bounce stays known");
    let audit = w.get("/api/v1/audit?limit=500");
    assert!(audit.as_array().unwrap().iter().any(|e| e["action"] == "member.reenable"), "{audit}");
    assert_eq!(w.send("Third").1, 2);

    // The command line does the same.
    w.dsn(&w.copy_token("ann@example.net", "Third"), "ann@example.net", "failed", "5.1.1");
    assert_eq!(w.member("ann@example.net")["status"], "disabled");
    let (st, out, err) = run_cli_in(
        w.app.dir.path(),
        &["--json", "member", "enable", "--domain", "example.org", "--list", "news", "ann@example.net"],
        &[],
        None,
    );
    assert!(st.success(), "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((shown["status"].as_str(), shown["bounce_score"].as_u64()), (Some("active"), Some(0)), "{shown}");
    assert_eq!(w.member("ann@example.net")["status"], "active");
}

#[test]
fn a_5xx_from_a_rejecting_smtp_server_bounces_the_copy_and_scores_its_member() {
    // The sink refuses RCPT TO of local parts starting with "refuse" with 550.
    let w = world(SmtpSink::start_refusing(550));
    w.add("refuse-1@example.net");
    w.add("ok@example.net");
    let (s, _) = w.send("Hello");
    assert_eq!((s["counts"]["bounced"].as_u64(), s["counts"]["sent"].as_u64()), (Some(1), Some(1)), "{s}");
    assert_eq!(s["state"], "completed");
    let m = w.member("refuse-1@example.net");
    assert_eq!(m["bounce_score"], 1, "{m}");
    assert_eq!(w.member("ok@example.net")["bounce_score"], 0);
    let events = events(&w.app.core, EventName::MemberBounced);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["member"]["email"], "refuse-1@example.net");
    assert!(events[0]["diagnostic"].as_str().unwrap().starts_with("550"), "{}", events[0]);
}

#[test]
fn an_unrecognised_message_at_the_bounce_address_is_forwarded_to_the_owners() {
    let w = world(SmtpSink::start());
    w.add("ann@example.net");
    w.send("Hello");
    let token = w.copy_token("ann@example.net", "Hello");
    let reply =
        "From: ann@example.net\r\nTo: news-bounces@example.org\r\nSubject: Re: Hello\r\n\r\nThanks, lovely post.";
    w.lmtp(&format!("news-bounces+{token}@example.org"), reply);
    // A token naming no copy of this list is forwarded too, never dropped.
    w.lmtp("news-bounces+999999@example.org", &dsn("ann@example.net", "failed", "5.1.1"));
    let all = w.sink.wait_for(3, Duration::from_secs(20));
    let fwd: Vec<&String> = all.iter().filter(|m| m.contains("X-RcptTo: admin@example.org")).collect();
    assert_eq!(fwd.len(), 2, "the owner is told of each");
    assert!(fwd.iter().any(|m| m.contains("Thanks, lovely post.")), "{fwd:?}");
    assert_eq!(w.member("ann@example.net")["bounce_score"], 0);
}

/// Threshold reached, the member disabled, the mailed link followed in a real browser.
fn reenable_in_the_browser(options: BrowserOptions) {
    let w = world(SmtpSink::start());
    w.threshold(1);
    w.add("ann@example.net");
    w.send("Hello");
    w.dsn(&w.copy_token("ann@example.net", "Hello"), "ann@example.net", "failed", "5.1.1");
    assert_eq!(w.member("ann@example.net")["status"], "disabled");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mail = loop {
        if let Some(m) = w.sink.messages().into_iter().find(|m| m.contains("/p/reenable/")) {
            break m;
        }
        assert!(Instant::now() < deadline, "no re-enable mail: {}", w.sink.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(mail.contains("X-RcptTo: ann@example.net"), "{mail}");
    let path = link_path(&mail, "/p/reenable/");
    let browser = Browser::start(options);
    let url = |p: &str| format!("http://{}{p}", w.app.addr);
    let fr = options.languages.starts_with("fr");
    browser.goto(&url(&path));
    let check = |b: &Browser| {
        let facts = b.execute(
            "const d = document.documentElement; return { lang: d.lang, title: document.title, \
             scroll: d.scrollWidth, client: d.clientWidth };",
            &[],
        );
        assert_eq!(facts["lang"], if fr { "fr" } else { "en" }, "{facts}");
        assert!(facts["title"].as_str().unwrap().ends_with(" · Courrier"), "{facts}");
        assert!(facts["scroll"].as_i64() <= facts["client"].as_i64(), "no horizontal scrolling: {facts}");
        if options.javascript {
            let grave: Vec<Value> = b
                .axe_violations()
                .into_iter()
                .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
                .collect();
            assert!(grave.is_empty(), "axe-core: {grave:#?}");
        }
    };
    check(&browser);
    assert!(browser.source().contains("ann@example.net"));
    assert_eq!(w.member("ann@example.net")["status"], "disabled", "a GET changes nothing");
    let button = browser.find("form button[type=submit]");
    browser.click_and_wait(&button);
    check(&browser);
    let ann = w.member("ann@example.net");
    assert_eq!((ann["status"].as_str(), ann["bounce_score"].as_u64()), (Some("active"), Some(0)), "{ann}");
    // The link works once; an unknown one is the HTML 404 page.
    let again = w.app.client.request("POST", &path, &[], Some(b""));
    assert_eq!(again.status, 404);
    assert!(again.body.contains("<html"), "{}", again.body);
    assert_eq!(w.app.get("/p/reenable/not-a-token").status, 404);
}

#[test]
fn a_member_disabled_by_bounces_re_enables_through_the_mailed_link_in_chromium_on_a_phone() {
    reenable_in_the_browser(BrowserOptions { javascript: true, phone: true, languages: "en-GB,en" });
}

#[test]
fn the_re_enable_page_works_in_french_with_javascript_off() {
    reenable_in_the_browser(BrowserOptions { javascript: false, phone: false, languages: "fr-FR,fr" });
}
