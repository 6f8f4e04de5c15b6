//! The SMTP adapter against a real server (aiosmtpd): messages arrive intact with their envelope,
//! one connection carries many messages, refusals map onto the port, a restarted relay is
//! reconnected to transparently.

use courrier_core::adapters::smtp::SmtpTransport;
use courrier_core::kernel::{EmailAddress, MailTransport, Notice, OutgoingMessage, SendError, Timestamp};
use courrier_tests::harness::{SinkOptions, SmtpSink, free_port};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

fn addr(s: &str) -> EmailAddress {
    EmailAddress::parse(s).unwrap()
}

fn message(from: Option<&str>, to: &[&str], subject: &str) -> OutgoingMessage {
    let data = format!("From: sender@example.org\r\nTo: {}\r\nSubject: {subject}\r\n\r\nbody of {subject}\r\n", to[0]);
    OutgoingMessage {
        envelope_from: from.map(addr),
        recipients: to.iter().map(|t| addr(t)).collect(),
        data: data.into_bytes(),
    }
}

fn transport(sink: &SmtpSink) -> SmtpTransport {
    SmtpTransport::from_url(&sink.url()).unwrap()
}

/// The value of the first header `name` (case-insensitive) of a raw message.
fn header<'a>(raw: &'a str, name: &str) -> Option<&'a str> {
    let head = raw.split("\n\n").next().unwrap_or_default();
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn a_message_arrives_intact_with_its_envelope() {
    let sink = SmtpSink::start();
    let from = addr("noreply@lists.example.org");
    let to = addr("anna@example.com");
    // The body has a line that is a lone dot (unstuffed wrongly, it would end the message there),
    // lines starting with dots, and non-ASCII text, which the composer sends quoted-printable.
    let body = "Bonjour Anna,\n.\n.hidden line\n..two dots\nCafé, crème brûlée.\nfin";
    let notice = Notice {
        from: &from,
        to: &to,
        subject: "Invitation à Courrier",
        body,
        date: Timestamp::from_unix_secs(1_795_425_649),
    };
    let mut outgoing = notice.compose();
    outgoing.envelope_from = Some(addr("bounces+anna=example.com@lists.example.org"));
    transport(&sink).send(&outgoing).unwrap();

    let received = sink.wait_for(1, WAIT);
    assert_eq!(received.len(), 1);
    let got = &received[0];
    let sent = String::from_utf8(outgoing.data.clone()).unwrap().replace("\r\n", "\n");
    let (sent_head, sent_body) = sent.split_once("\n\n").unwrap();
    let (got_head, got_body) = got.split_once("\n\n").unwrap();
    assert_eq!(got_body, sent_body, "the body changed on the way");
    assert!(got_body.contains("\n.\n.hidden line\n..two dots\nCaf=C3=A9, cr=C3=A8me br=C3=BBl=C3=A9e.\n"), "{got}");
    for line in sent_head.lines() {
        assert!(got_head.lines().any(|l| l == line), "header {line:?} is missing:\n{got}");
    }
    assert_eq!(header(got, "X-MailFrom"), Some("bounces+anna=example.com@lists.example.org"));
    assert_eq!(header(got, "X-RcptTo"), Some("anna@example.com"));
}

#[test]
fn twenty_messages_share_one_connection_with_and_without_pipelining() {
    for pipelining in [false, true] {
        let sink = SmtpSink::start_with(SinkOptions { pipelining, ..SinkOptions::default() });
        let smtp = transport(&sink);
        for i in 0..20 {
            let to = format!("member{i}@example.com");
            smtp.send(&message(Some("list-bounces@example.org"), &[&to], &format!("n{i}"))).unwrap();
        }
        let received = sink.wait_for(20, WAIT);
        assert_eq!(received.len(), 20, "pipelining: {pipelining}");
        let mut subjects: Vec<&str> = received.iter().map(|m| header(m, "Subject").unwrap()).collect();
        subjects.sort_by_key(|s| s[1..].parse::<u32>().unwrap());
        assert_eq!(subjects, (0..20).map(|i| format!("n{i}")).collect::<Vec<_>>());
        // aiosmtpd's X-Peer names the client's port: one port, one connection.
        let peers: std::collections::BTreeSet<_> = received.iter().map(|m| header(m, "X-Peer").unwrap()).collect();
        assert_eq!(peers.len(), 1, "pipelining {pipelining}: {peers:?}");
        for (i, m) in received.iter().enumerate() {
            assert_eq!(header(m, "X-MailFrom"), Some("list-bounces@example.org"), "message {i}");
        }
    }
}

#[test]
fn a_null_reverse_path_is_sent_as_empty_brackets() {
    let sink = SmtpSink::start();
    transport(&sink).send(&message(None, &["anna@example.com"], "bounce")).unwrap();
    let received = sink.wait_for(1, WAIT);
    // aiosmtpd records the null path as written, brackets and all.
    assert_eq!(header(&received[0], "X-MailFrom"), Some("<>"), "{}", received[0]);
    assert_eq!(header(&received[0], "X-RcptTo"), Some("anna@example.com"));
}

#[test]
fn a_refused_connection_is_temporary() {
    let smtp = SmtpTransport::from_url(&format!("smtp://127.0.0.1:{}", free_port())).unwrap();
    match smtp.send(&message(None, &["anna@example.com"], "x")) {
        Err(SendError::Temporary(why)) => assert!(why.contains("connect"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_restarted_relay_is_reconnected_to_transparently() {
    let mut sink = SmtpSink::start_with(SinkOptions { pipelining: true, ..SinkOptions::default() });
    let smtp = transport(&sink);
    smtp.send(&message(None, &["anna@example.com"], "before")).unwrap();
    sink.restart();
    smtp.send(&message(None, &["anna@example.com"], "after")).unwrap();
    let received = sink.wait_for(2, WAIT);
    let subjects: Vec<_> = received.iter().map(|m| header(m, "Subject").unwrap()).collect();
    assert_eq!(subjects, ["before", "after"]);
    assert_ne!(header(&received[0], "X-Peer"), header(&received[1], "X-Peer"), "a new connection after the restart");
}

#[test]
fn refused_recipients_are_permanent_on_5xx_and_temporary_on_4xx() {
    for (code, pipelining) in [(550, false), (450, false), (550, true), (451, true)] {
        let sink = SmtpSink::start_with(SinkOptions { pipelining, refuse_rcpt: Some(code) });
        let smtp = transport(&sink);
        let case = format!("{code}, pipelining {pipelining}");
        let refused = smtp.send(&message(None, &["refused@example.com"], "one"));
        // Strict: one refused recipient fails the message for all, and none of them gets it.
        let partly = smtp.send(&message(None, &["anna@example.com", "refused@example.com"], "partly"));
        for result in [refused, partly] {
            let why = match (code >= 500, result) {
                (true, Err(SendError::Permanent(why))) | (false, Err(SendError::Temporary(why))) => why,
                (_, other) => panic!("{case}: {other:?}"),
            };
            assert!(why.starts_with(&format!("{code} ")) && why.contains("refused@example.com"), "{case}: {why}");
        }
        // The transport recovers (RSET, or a new connection after an abandoned pipelined DATA).
        smtp.send(&message(None, &["anna@example.com"], "fine")).unwrap();
        // aiosmtpd stores a message before it answers the final dot: what was delivered is there.
        let received = sink.wait_for(1, WAIT);
        let subjects: Vec<_> = received.iter().map(|m| header(m, "Subject").unwrap_or("(none)")).collect();
        assert_eq!(subjects, ["fine"], "{case}: {received:?}");
    }
}
