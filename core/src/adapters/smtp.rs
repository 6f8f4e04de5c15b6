//! The SMTP adapter of the mail-transport port: a small synchronous client over one
//! `std::net::TcpStream`.
//!
//! Why our own and not lettre: lettre 0.11 never sets `TCP_NODELAY` and writes the body and the
//! final `.` separately, so Nagle and delayed ACKs cap it near 22 messages a second per connection
//! (`shared/design/stack.md`). Here the socket has `TCP_NODELAY`, the envelope goes in one write
//! when the relay offers PIPELINING (RFC 2920), and the body in one buffered write.
//!
//! `COURRIER_SMTP_URL` is plain `smtp://`, for a relay on the same host or network. A list's
//! submission account (`mailing::credentials`) gets the same client over TLS or STARTTLS (never
//! falling back to plain text; the certificate verified against the public roots and
//! `COURRIER_EXTRA_CA`) with AUTH PLAIN or LOGIN, connected to the address the egress guard checked
//! ([`SmtpTransport::for_account`], [`check_account`]).

use crate::kernel::{MailTransport, OutgoingMessage, SendError};
use crate::mailing::accounts::{AccountError, Resolver};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::{Ipv6Addr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A reply line longer than this is not SMTP (RFC 5321 allows 512 octets; some relays send more).
const MAX_REPLY_LINE: usize = 4096;
/// Nor is a reply of more lines than this (an EHLO answer has about fifteen).
const MAX_REPLY_LINES: usize = 100;
/// The body goes out through a buffer this size: one write for most messages.
const DATA_BUFFER: usize = 64 * 1024;

/// Time-outs and the name the client greets with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpConfig {
    pub connect_timeout: Duration,
    /// The wait for each reply, the greeting included.
    pub reply_timeout: Duration,
    /// The wait for the reply to the final `.`. RFC 5321 suggests 10 minutes, which would hold a
    /// delivery worker far too long; a relay that takes two minutes to queue a message is broken.
    pub data_end_timeout: Duration,
    pub ehlo_name: String,
}

impl Default for SmtpConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            reply_timeout: Duration::from_secs(60),
            data_end_timeout: Duration::from_secs(120),
            ehlo_name: local_hostname(),
        }
    }
}

/// The host's name as the kernel knows it, or `localhost` when it is unreadable or not a plain
/// host name (it goes into `EHLO` verbatim, so nothing but letters, digits, `-` and `.`).
fn local_hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name = name.trim();
    if is_plain_host_name(name) { name.to_owned() } else { "localhost".to_owned() }
}

fn is_plain_host_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// Why a relay URL was refused. The URL itself is never echoed: a later one may carry a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmtpUrlError {
    #[error(
        "unsupported mail relay scheme {0:?}: only smtp:// is supported for now (smtps, STARTTLS and \
         authentication come with mail-account credentials)"
    )]
    UnsupportedScheme(String),
    #[error("malformed mail relay url: {0} (expected smtp://host[:port])")]
    Malformed(&'static str),
}

/// Where the relay is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Relay {
    /// A host name or an IP address, IPv6 without its brackets.
    host: String,
    port: u16,
}

fn parse_url(url: &str) -> Result<Relay, SmtpUrlError> {
    use SmtpUrlError::Malformed;
    let (scheme, rest) = url.split_once("://").ok_or(Malformed("it has no scheme"))?;
    if !scheme.eq_ignore_ascii_case("smtp") {
        return Err(SmtpUrlError::UnsupportedScheme(scheme.to_ascii_lowercase()));
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err(Malformed("credentials in the url are not supported yet"));
    }
    if authority.contains(['/', '?', '#']) {
        return Err(Malformed("it has a path, a query or a fragment"));
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed.split_once(']').ok_or(Malformed("an IPv6 address lacks its ']'"))?;
            host.parse::<Ipv6Addr>().map_err(|_| Malformed("the bracketed host is not an IPv6 address"))?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or(Malformed("something follows the IPv6 address"))?),
            };
            (host, port)
        }
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let host_ok = |h: &str| {
        !h.is_empty() && h.len() <= 253 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
    };
    if !host_ok(host) {
        return Err(Malformed("the host is not a host name or an IP address"));
    }
    let port = match port {
        None => 25,
        Some(p) if p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u16>().ok().filter(|&p| p != 0).ok_or(Malformed("the port is not a number from 1 to 65535"))?
        }
        Some(_) => return Err(Malformed("the port is not a number from 1 to 65535")),
    };
    Ok(Relay { host: host.to_owned(), port })
}

/// The mail transport over SMTP to one relay.
///
/// Connections are kept open between messages (a successful transaction leaves the session
/// ready for the next `MAIL FROM`), each held by one caller for the whole of a transaction. When
/// the relay closed an idle connection, the first command of the next message
/// fails before anything was accepted: the client then reconnects once, transparently. Any
/// other broken session is dropped and the next message opens a new one. Sessions form a small
/// pool: each concurrent caller (a delivery worker) uses its own.
///
/// Recipients are all-or-nothing: the port returns one result per message and is used with one
/// recipient per message (one copy per member), so any refused `RCPT TO` fails the whole call,
/// as `Permanent` when one refusal was a 5xx, `Temporary` otherwise, and the transaction is reset
/// with `RSET` (or, when a pipelined `DATA` was already accepted, abandoned by closing the
/// connection: a lone `.` would deliver an empty message to the others).
///
/// Refusals of the session itself (the greeting, `EHLO` and `HELO`) are `Temporary` whatever their
/// code: they say nothing about the message, and the next attempt may find the relay fixed.
pub struct SmtpTransport {
    relay: Relay,
    /// A submission account: TLS and authentication, at the address its resolver gives.
    account: Option<Arc<AccountLink>>,
    config: SmtpConfig,
    /// Open sessions not in use. A caller takes one out for its transaction (so several threads,
    /// the delivery workers, each hold their own connection at once) and puts it back after.
    idle: Mutex<Vec<Conn>>,
}

/// Idle sessions kept open at most (one per delivery worker is the expected use).
const MAX_IDLE: usize = 16;

impl std::fmt::Debug for SmtpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SmtpTransport(smtp://{}:{})", self.relay.host, self.relay.port)
    }
}

impl SmtpTransport {
    /// `smtp://host[:port]` (port 25 by default) with the default time-outs.
    pub fn from_url(url: &str) -> Result<Self, SmtpUrlError> {
        Self::with_config(url, SmtpConfig::default())
    }

    /// As [`Self::from_url`], with other time-outs or EHLO name (one that is not a plain host
    /// name, which could smuggle a command into the session, becomes `localhost`).
    pub fn with_config(url: &str, mut config: SmtpConfig) -> Result<Self, SmtpUrlError> {
        if !is_plain_host_name(&config.ehlo_name) {
            config.ehlo_name = "localhost".into();
        }
        Ok(Self { relay: parse_url(url)?, account: None, config, idle: Mutex::new(Vec::new()) })
    }

    /// The transport of a submission account: every session over TLS (or STARTTLS), authenticated.
    pub fn for_account(link: AccountLink, mut config: SmtpConfig) -> Self {
        if !is_plain_host_name(&config.ehlo_name) {
            config.ehlo_name = "localhost".into();
        }
        let relay = Relay { host: link.host.clone(), port: link.port };
        Self { relay, account: Some(Arc::new(link)), config, idle: Mutex::new(Vec::new()) }
    }

    fn take_idle(&self) -> Option<Conn> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop()
    }

    /// Keeps a session that stayed usable, unless enough are kept already.
    fn put_back(&self, conn: Conn) {
        if conn.broken {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// A transaction on a fresh session, which is kept when it stays usable.
    fn on_new_session(&self, message: &OutgoingMessage) -> Result<(), Fault> {
        let mut conn = match &self.account {
            None => Conn::open(&self.relay, &self.config)?,
            Some(link) => Conn::open_account(link, &self.config)?,
        };
        let result = conn.transaction(message, &self.config);
        self.put_back(conn);
        result
    }
}

impl MailTransport for SmtpTransport {
    fn send(&self, message: &OutgoingMessage) -> Result<(), SendError> {
        if message.recipients.is_empty() {
            return Err(SendError::Permanent("the message has no recipient".into()));
        }
        // A session is taken out of the idle set while in use (no lock is held during the
        // exchange), so a panic elsewhere cannot leave a half-used session there.
        let result = match self.take_idle() {
            None => self.on_new_session(message),
            Some(mut conn) => {
                let replies_before = conn.replies;
                match conn.transaction(message, &self.config) {
                    Err(Fault::Lost(why)) if conn.replies == replies_before => {
                        tracing::debug!(relay = ?self, %why, "the relay closed the idle connection; reconnecting");
                        drop(conn);
                        self.on_new_session(message)
                    }
                    result => {
                        self.put_back(conn);
                        result
                    }
                }
            }
        };
        result.map_err(Fault::into_send_error)
    }
}

impl Drop for SmtpTransport {
    fn drop(&mut self) {
        // A polite goodbye without waiting for the answer: the write time-out bounds it.
        for mut conn in self.idle.get_mut().unwrap_or_else(PoisonError::into_inner).drain(..) {
            let _ = conn.io.get_mut().stream.write_all(b"QUIT\r\n");
        }
    }
}

/// What went wrong in a session, before it becomes a [`SendError`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    /// A 4xx or 5xx reply to the message's commands.
    Refused(Reply),
    /// The connection failed, was closed, or the relay said 421 (closing): the session is over.
    Lost(String),
    /// No reply in time: the session is over.
    TimedOut(String),
    /// The relay said something that is not an SMTP reply, or not one that fits: the session is over.
    Garbled(String),
    /// An account's server would not open the session: authentication failed, no STARTTLS, no
    /// mechanism we speak. Its words, or ours when it said nothing.
    Denied(String),
}

impl Fault {
    fn into_send_error(self) -> SendError {
        match self {
            Fault::Refused(r) if r.code >= 500 => SendError::Permanent(r.text()),
            Fault::Refused(r) => SendError::Temporary(r.text()),
            Fault::Lost(why) | Fault::TimedOut(why) => SendError::Temporary(why),
            Fault::Garbled(why) => SendError::Temporary(format!("malformed reply from the relay: {why}")),
            Fault::Denied(why) => SendError::Temporary(why),
        }
    }

    fn into_account_error(self) -> AccountError {
        match self {
            Fault::Refused(r) => AccountError::Refused(r.text()),
            Fault::Denied(why) => AccountError::Refused(why),
            Fault::Lost(why) | Fault::TimedOut(why) => AccountError::Failed(why),
            Fault::Garbled(why) => AccountError::Failed(format!("malformed reply from the server: {why}")),
        }
    }
}

/// One reply: its code and its lines' text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reply {
    code: u16,
    lines: Vec<String>,
}

impl Reply {
    fn is_positive(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// `<code> <text>`, the lines of a multi-line reply joined by spaces.
    fn text(&self) -> String {
        let text = self.lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
        if text.is_empty() { self.code.to_string() } else { format!("{} {text}", self.code) }
    }

    /// The keywords of an `EHLO` reply (every line but the first), uppercased.
    fn extensions(&self) -> impl Iterator<Item = String> + '_ {
        self.lines.iter().skip(1).filter_map(|l| l.split_whitespace().next()).map(str::to_ascii_uppercase)
    }
}

/// Why a reply could not be read.
#[derive(Debug)]
enum ReadError {
    Io(io::Error),
    /// The connection closed before a complete reply.
    Closed,
    Malformed(String),
}

/// Reads one reply: `250-first`, `250-second`, `250 last` (or a bare `250`), the same code on
/// every line. Lines end in CRLF; a bare LF is tolerated.
fn read_reply(input: &mut impl BufRead) -> Result<Reply, ReadError> {
    let mut code = None;
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let limit = u64::try_from(MAX_REPLY_LINE).unwrap_or(u64::MAX) + 1;
        input.by_ref().take(limit).read_until(b'\n', &mut buf).map_err(ReadError::Io)?;
        if buf.last() != Some(&b'\n') {
            return Err(if buf.len() > MAX_REPLY_LINE {
                ReadError::Malformed(format!("a reply line longer than {MAX_REPLY_LINE} bytes"))
            } else {
                ReadError::Closed
            });
        }
        let (line_code, last, text) = parse_reply_line(&buf).map_err(ReadError::Malformed)?;
        if *code.get_or_insert(line_code) != line_code {
            return Err(ReadError::Malformed(format!("a multi-line reply changes its code to {line_code}")));
        }
        lines.push(text);
        if last {
            return Ok(Reply { code: line_code, lines });
        }
        if lines.len() >= MAX_REPLY_LINES {
            return Err(ReadError::Malformed(format!("a reply of more than {MAX_REPLY_LINES} lines")));
        }
    }
}

/// One reply line, with its line end: the code, whether it is the last line, the text.
fn parse_reply_line(raw: &[u8]) -> Result<(u16, bool, String), String> {
    let line = raw.strip_suffix(b"\n").unwrap_or(raw);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let shown = || String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
    let code = match line.get(..3) {
        Some(&[a @ b'2'..=b'5', b @ b'0'..=b'9', c @ b'0'..=b'9']) => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => return Err(format!("{:?} does not start with a reply code", shown())),
    };
    let last = match line.get(3) {
        None | Some(b' ') => true,
        Some(b'-') => false,
        Some(_) => return Err(format!("{:?} has no space or '-' after its code", shown())),
    };
    let text = String::from_utf8_lossy(line.get(4..).unwrap_or_default()).into_owned();
    Ok((code, last, text))
}

/// Writes the message text for `DATA`: every line ends in CRLF (a bare LF becomes CRLF, the last
/// line gets one if it lacks it), a line starting with `.` gets another (RFC 5321 4.5.2), and the
/// terminating `.` line follows.
fn write_data(data: &[u8], out: &mut impl Write) -> io::Result<()> {
    for line in data.split_inclusive(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.first() == Some(&b'.') {
            out.write_all(b".")?;
        }
        out.write_all(line)?;
        out.write_all(b"\r\n")?;
    }
    out.write_all(b".\r\n")
}

/// Which refusal decides a transaction: the `MAIL FROM` one; else, among the recipients', the
/// first 5xx (retrying would meet it again), else the first 4xx.
fn verdict(mail: &Reply, recipients: &[Reply]) -> Option<Reply> {
    if !mail.is_positive() {
        return Some(mail.clone());
    }
    let refused = || recipients.iter().filter(|r| !r.is_positive());
    refused().find(|r| r.code >= 500).or_else(|| refused().next()).cloned()
}

/// A read half that gives up at a deadline: the time-out covers a whole reply, so a relay that
/// trickles a byte at a time cannot hold a worker forever.
struct Deadlined {
    stream: Stream,
    deadline: Instant,
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.tcp().set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// The connection: plain TCP (the local relay, or an account before STARTTLS), or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// How to reach and open a submission account.
pub struct AccountLink {
    /// The host as the user wrote it (shown in messages).
    pub host: String,
    pub port: u16,
    /// Verifies the server's certificate for `server_name`.
    pub tls: Arc<rustls::ClientConfig>,
    pub server_name: rustls::pki_types::ServerName<'static>,
    /// STARTTLS after the greeting rather than TLS from the first byte.
    pub starttls: bool,
    pub username: String,
    pub password: String,
    /// The egress guard's checked address, asked at each new connection.
    pub connect_to: Resolver,
}

/// Completes a TLS handshake over `tcp` (within its time-outs); the stream is then ready.
fn handshake(link: &AccountLink, mut tcp: TcpStream) -> Result<Stream, Fault> {
    let mut conn = rustls::ClientConnection::new(Arc::clone(&link.tls), link.server_name.clone())
        .map_err(|e| Fault::Lost(format!("TLS with {}: {e}", link.host)))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .map_err(|e| Fault::Lost(format!("TLS with {}:{} failed: {e}", link.host, link.port)))?;
    }
    Ok(Stream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))))
}

/// Opens an authenticated session with a submission account (nothing sent) and says goodbye:
/// the mail-account test.
pub fn check_account(link: &AccountLink, config: &SmtpConfig) -> Result<(), AccountError> {
    let mut conn = Conn::open_account(link, config).map_err(Fault::into_account_error)?;
    let _ = conn.command("QUIT\r\n", config.reply_timeout);
    Ok(())
}

/// One SMTP session, greeted and ready for `MAIL FROM`.
struct Conn {
    io: BufReader<Deadlined>,
    pipelining: bool,
    /// The EHLO keywords with their parameters (`AUTH PLAIN LOGIN`), uppercased.
    extensions: Vec<String>,
    /// Complete replies read so far: tells "closed before answering" from a failure later on.
    replies: u64,
    /// Set when the session can no longer be used: it is dropped instead of kept.
    broken: bool,
}

impl Conn {
    fn open(relay: &Relay, config: &SmtpConfig) -> Result<Self, Fault> {
        let target = format!("{}:{}", relay.host, relay.port);
        let addrs = (relay.host.as_str(), relay.port)
            .to_socket_addrs()
            .map_err(|e| Fault::Lost(format!("cannot resolve the mail relay {target}: {e}")))?;
        let mut failure = format!("the mail relay {target} resolves to no address");
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, config.connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => failure = format!("cannot connect to the mail relay {addr}: {e}"),
            }
        }
        let stream = stream.ok_or(Fault::Lost(failure))?;
        let setup = |e: io::Error| Fault::Lost(format!("cannot set up the connection to {target}: {e}"));
        stream.set_nodelay(true).map_err(setup)?;
        stream.set_write_timeout(Some(config.reply_timeout)).map_err(setup)?;
        let mut conn = Self::over(Stream::Plain(stream));
        conn.greet(config)?;
        Ok(conn)
    }

    fn over(stream: Stream) -> Self {
        let io = BufReader::new(Deadlined { stream, deadline: Instant::now() });
        Self { io, pipelining: false, extensions: Vec::new(), replies: 0, broken: false }
    }

    /// A submission account's session: TCP to the checked address, TLS (at once, or after
    /// STARTTLS, which must be offered and accepted: never a plain-text session), EHLO, AUTH.
    fn open_account(link: &AccountLink, config: &SmtpConfig) -> Result<Self, Fault> {
        let addr = (link.connect_to)().map_err(Fault::Lost)?;
        let tcp = TcpStream::connect_timeout(&addr, config.connect_timeout)
            .map_err(|e| Fault::Lost(format!("cannot connect to {}:{} ({addr}): {e}", link.host, link.port)))?;
        let setup = |e: io::Error| Fault::Lost(format!("cannot set up the connection to {addr}: {e}"));
        tcp.set_nodelay(true).map_err(setup)?;
        tcp.set_write_timeout(Some(config.reply_timeout)).map_err(setup)?;
        tcp.set_read_timeout(Some(config.reply_timeout)).map_err(setup)?;
        let mut conn = if link.starttls {
            let mut plain = Self::over(Stream::Plain(tcp));
            plain.greet(config)?;
            if !plain.extensions.iter().any(|e| e == "STARTTLS") {
                return Err(Fault::Denied(format!(
                    "{}:{} does not offer STARTTLS: the session is not opened in plain text",
                    link.host, link.port
                )));
            }
            let answer = plain.command("STARTTLS\r\n", config.reply_timeout)?;
            if answer.code != 220 {
                return Err(Fault::Denied(format!("STARTTLS refused: {}", answer.text())));
            }
            // Anything the server sent after its 220 came before TLS: an injection, refused.
            if !plain.io.buffer().is_empty() {
                return Err(Fault::Garbled("data after the STARTTLS reply, before TLS".into()));
            }
            let Deadlined { stream: Stream::Plain(tcp), .. } = plain.io.into_inner() else {
                return Err(Fault::Garbled("STARTTLS over TLS".into()));
            };
            let mut tls = Self::over(handshake(link, tcp)?);
            tls.ehlo(config)?;
            tls
        } else {
            let mut tls = Self::over(handshake(link, tcp)?);
            tls.greet(config)?;
            tls
        };
        conn.authenticate(link, config)?;
        Ok(conn)
    }

    /// AUTH PLAIN when offered, else AUTH LOGIN (RFC 4954, 4616).
    fn authenticate(&mut self, link: &AccountLink, config: &SmtpConfig) -> Result<(), Fault> {
        let t = config.reply_timeout;
        let mechanisms: Vec<String> = self
            .extensions
            .iter()
            .filter_map(|e| e.strip_prefix("AUTH").filter(|r| r.is_empty() || r.starts_with([' ', '='])))
            .flat_map(|r| r.trim_start_matches('=').split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .collect();
        let denied = |r: &Reply| Fault::Denied(format!("authentication refused: {}", r.text()));
        if mechanisms.iter().any(|m| m == "PLAIN") {
            let token = B64.encode(format!("\0{}\0{}", link.username, link.password));
            let answer = self.command(&format!("AUTH PLAIN {token}\r\n"), t)?;
            return if answer.code == 235 { Ok(()) } else { Err(denied(&answer)) };
        }
        if mechanisms.iter().any(|m| m == "LOGIN") {
            let mut answer = self.command("AUTH LOGIN\r\n", t)?;
            for part in [&link.username, &link.password] {
                if answer.code != 334 {
                    return Err(denied(&answer));
                }
                answer = self.command(&format!("{}\r\n", B64.encode(part)), t)?;
            }
            return if answer.code == 235 { Ok(()) } else { Err(denied(&answer)) };
        }
        Err(Fault::Denied(format!("{}:{} offers neither AUTH PLAIN nor AUTH LOGIN", link.host, link.port)))
    }

    /// The greeting, then `EHLO`, or `HELO` when the relay refuses `EHLO` with a 5xx.
    fn greet(&mut self, config: &SmtpConfig) -> Result<(), Fault> {
        let greeting = self.reply(config.reply_timeout)?;
        if greeting.code != 220 {
            return Err(Fault::Lost(format!("the mail relay refused the session: {}", greeting.text())));
        }
        self.ehlo(config)
    }

    fn ehlo(&mut self, config: &SmtpConfig) -> Result<(), Fault> {
        let t = config.reply_timeout;
        let refused = |what: &str, r: &Reply| Fault::Lost(format!("the mail relay refused {what}: {}", r.text()));
        let ehlo = self.command(&format!("EHLO {}\r\n", config.ehlo_name), t)?;
        if ehlo.is_positive() {
            self.pipelining = ehlo.extensions().any(|e| e == "PIPELINING");
            self.extensions = ehlo.lines.iter().skip(1).map(|l| l.trim().to_ascii_uppercase()).collect();
            return Ok(());
        }
        if ehlo.code < 500 {
            return Err(refused("EHLO", &ehlo));
        }
        let helo = self.command(&format!("HELO {}\r\n", config.ehlo_name), t)?;
        if helo.is_positive() { Ok(()) } else { Err(refused("HELO", &helo)) }
    }

    /// One message: the envelope (pipelined when offered), then the text.
    fn transaction(&mut self, message: &OutgoingMessage, config: &SmtpConfig) -> Result<(), Fault> {
        let t = config.reply_timeout;
        let from = message.envelope_from.as_ref().map(ToString::to_string).unwrap_or_default();
        let mail = format!("MAIL FROM:<{from}>\r\n");
        let rcpts: Vec<String> = message.recipients.iter().map(|r| format!("RCPT TO:<{r}>\r\n")).collect();
        let (mail_reply, rcpt_replies, data_reply) = if self.pipelining {
            let batch = format!("{mail}{}DATA\r\n", rcpts.concat());
            self.write(batch.as_bytes())?;
            let mail_reply = self.reply(t)?;
            let rcpt_replies = rcpts.iter().map(|_| self.reply(t)).collect::<Result<Vec<_>, _>>()?;
            (mail_reply, rcpt_replies, Some(self.reply(t)?))
        } else {
            let mail_reply = self.command(&mail, t)?;
            let rcpt_replies = if mail_reply.is_positive() {
                rcpts.iter().map(|c| self.command(c, t)).collect::<Result<Vec<_>, _>>()?
            } else {
                Vec::new()
            };
            (mail_reply, rcpt_replies, None)
        };
        if let Some(refusal) = verdict(&mail_reply, &rcpt_replies) {
            if data_reply.as_ref().is_some_and(|d| d.code == 354) {
                // The relay waits for the text for the recipients it accepted, and none may get
                // it: only closing the connection abandons the transaction.
                self.broken = true;
            } else {
                self.reset(t);
            }
            return Err(Fault::Refused(refusal));
        }
        let data_reply = match data_reply {
            Some(reply) => reply,
            None => self.command("DATA\r\n", t)?,
        };
        if data_reply.code != 354 {
            if data_reply.is_positive() {
                self.broken = true;
                return Err(Fault::Garbled(format!("DATA answered with {}", data_reply.text())));
            }
            self.reset(t);
            return Err(Fault::Refused(data_reply));
        }
        self.send_data(&message.data)?;
        // After the final reply the session is ready for the next message, accepted or not.
        let end = self.reply(config.data_end_timeout)?;
        if end.is_positive() { Ok(()) } else { Err(Fault::Refused(end)) }
    }

    /// `RSET` after a refusal; a session that does not take it is dropped.
    fn reset(&mut self, timeout: Duration) {
        if !self.command("RSET\r\n", timeout).is_ok_and(|r| r.is_positive()) {
            self.broken = true;
        }
    }

    fn command(&mut self, line: &str, timeout: Duration) -> Result<Reply, Fault> {
        self.write(line.as_bytes())?;
        self.reply(timeout)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Fault> {
        let stream = &mut self.io.get_mut().stream;
        let result = stream.write_all(bytes).and_then(|()| stream.flush());
        result.map_err(|e| self.lost("cannot write to the mail relay", &e))
    }

    fn send_data(&mut self, data: &[u8]) -> Result<(), Fault> {
        let mut out = BufWriter::with_capacity(DATA_BUFFER, &mut self.io.get_mut().stream);
        let result = write_data(data, &mut out).and_then(|()| out.flush());
        drop(out);
        result.map_err(|e| self.lost("cannot write the message to the mail relay", &e))
    }

    /// The next reply, within `timeout`. A 421 (the relay is closing the session) counts as lost.
    fn reply(&mut self, timeout: Duration) -> Result<Reply, Fault> {
        self.io.get_mut().deadline = Instant::now() + timeout;
        let reply = match read_reply(&mut self.io) {
            Ok(reply) => reply,
            Err(ReadError::Io(e)) => return Err(self.lost("no reply from the mail relay", &e)),
            Err(ReadError::Closed) => {
                self.broken = true;
                return Err(Fault::Lost("the mail relay closed the connection".into()));
            }
            Err(ReadError::Malformed(why)) => {
                self.broken = true;
                return Err(Fault::Garbled(why));
            }
        };
        if reply.code == 421 {
            self.broken = true;
            return Err(Fault::Lost(reply.text()));
        }
        self.replies += 1;
        Ok(reply)
    }

    fn lost(&mut self, what: &str, e: &io::Error) -> Fault {
        self.broken = true;
        match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Fault::TimedOut(format!("{what}: timed out")),
            _ => Fault::Lost(format!("{what}: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_of(input: &str) -> Result<Reply, ReadError> {
        read_reply(&mut io::Cursor::new(input.as_bytes()))
    }

    fn data_of(input: &str) -> String {
        let mut out = Vec::new();
        write_data(input.as_bytes(), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn r(code: u16) -> Reply {
        Reply { code, lines: vec!["x".into()] }
    }

    #[test]
    fn reads_single_and_multi_line_replies() {
        let one = reply_of("250 2.0.0 Ok: queued\r\n").unwrap();
        assert_eq!((one.code, one.text()), (250, "250 2.0.0 Ok: queued".into()));
        let bare = reply_of("354\r\n").unwrap();
        assert_eq!((bare.code, bare.text()), (354, "354".into()));
        let ehlo = reply_of("250-relay.test\r\n250-SIZE 1000\r\n250-pipelining\r\n250 HELP\r\n").unwrap();
        assert_eq!(ehlo.lines, ["relay.test", "SIZE 1000", "pipelining", "HELP"]);
        assert!(ehlo.extensions().any(|e| e == "PIPELINING"));
        assert_eq!(ehlo.text(), "250 relay.test SIZE 1000 pipelining HELP");
        // Lenient about a bare LF; the next reply stays in the buffer.
        let mut two = io::Cursor::new(b"250 a\n550 b\r\n".to_vec());
        assert_eq!(read_reply(&mut two).unwrap().code, 250);
        assert_eq!(read_reply(&mut two).unwrap().code, 550);
    }

    #[test]
    fn refuses_malformed_replies() {
        for bad in ["hello\r\n", "25\r\n", "250x\r\n", "099 no\r\n", "650 no\r\n", "2a0 no\r\n", "250-a\r\n251 b\r\n"] {
            assert!(matches!(reply_of(bad), Err(ReadError::Malformed(_))), "{bad:?}");
        }
        let long = format!("250 {}\r\n", "a".repeat(MAX_REPLY_LINE));
        assert!(matches!(reply_of(&long), Err(ReadError::Malformed(_))));
        let endless = "250-a\r\n".repeat(MAX_REPLY_LINES + 1);
        assert!(matches!(reply_of(&endless), Err(ReadError::Malformed(_))));
        for cut in ["", "250 no line end", "250-a\r\n"] {
            assert!(matches!(reply_of(cut), Err(ReadError::Closed)), "{cut:?}");
        }
    }

    #[test]
    fn data_is_dot_stuffed_with_crlf_and_terminated() {
        assert_eq!(data_of("a\r\n.b\r\n..c\r\n.\r\n"), "a\r\n..b\r\n...c\r\n..\r\n.\r\n");
        assert_eq!(data_of("bare\nlf\n.dot"), "bare\r\nlf\r\n..dot\r\n.\r\n");
        assert_eq!(data_of("no end"), "no end\r\n.\r\n");
        assert_eq!(data_of("ends in cr\r"), "ends in cr\r\n.\r\n");
        assert_eq!(data_of(""), ".\r\n");
        assert_eq!(data_of("x\r\n\r\n"), "x\r\n\r\n.\r\n");
        // A dot inside a line is not at a line start.
        assert_eq!(data_of("a.b\r\n"), "a.b\r\n.\r\n");
    }

    #[test]
    fn parses_smtp_urls() {
        let ok =
            |url: &str, host: &str, port| assert_eq!(parse_url(url), Ok(Relay { host: host.into(), port }), "{url}");
        ok("smtp://relay.example.org", "relay.example.org", 25);
        ok("smtp://127.0.0.1:2525", "127.0.0.1", 2525);
        ok("SMTP://localhost:587/", "localhost", 587);
        ok("smtp://[::1]:26", "::1", 26);
        ok("smtp://[::1]", "::1", 25);
        for scheme in ["smtps", "submission", "http"] {
            let url = format!("{scheme}://relay.example.org");
            assert_eq!(parse_url(&url), Err(SmtpUrlError::UnsupportedScheme(scheme.into())));
        }
        for bad in [
            "relay.example.org",
            "smtp://",
            "smtp://user:secret@relay.example.org",
            "smtp://relay.example.org/path",
            "smtp://relay.example.org?x=1",
            "smtp://relay.example.org:0",
            "smtp://relay.example.org:65536",
            "smtp://relay.example.org:+25",
            "smtp://relay.example.org:",
            "smtp://[::1",
            "smtp://[nope]:25",
            "smtp://[::1]x",
            "smtp://bad host",
        ] {
            assert!(matches!(parse_url(bad), Err(SmtpUrlError::Malformed(_))), "{bad}");
        }
        let err = parse_url("smtp://user:secret@relay.example.org").unwrap_err().to_string();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn the_strictest_refusal_decides() {
        assert_eq!(verdict(&r(250), &[r(250), r(251)]), None);
        assert_eq!(verdict(&r(451), &[]).map(|r| r.code), Some(451));
        assert_eq!(verdict(&r(250), &[r(250), r(450), r(550), r(452)]).map(|r| r.code), Some(550));
        assert_eq!(verdict(&r(250), &[r(452), r(450)]).map(|r| r.code), Some(452));
        // A refused MAIL FROM decides, whatever the pipelined RCPTs got after it.
        assert_eq!(verdict(&r(452), &[r(503)]).map(|r| r.code), Some(452));
    }

    #[test]
    fn refusals_map_onto_the_port() {
        let refused = |code, text: &str| Fault::Refused(Reply { code, lines: vec![text.into()] }).into_send_error();
        assert_eq!(refused(550, "5.1.1 no such user"), SendError::Permanent("550 5.1.1 no such user".into()));
        assert_eq!(refused(451, "4.3.0 try later"), SendError::Temporary("451 4.3.0 try later".into()));
        assert!(matches!(Fault::Lost("x".into()).into_send_error(), SendError::Temporary(_)));
        assert!(matches!(Fault::Garbled("x".into()).into_send_error(), SendError::Temporary(_)));
    }

    #[test]
    fn the_ehlo_name_is_a_plain_host_name() {
        assert!(is_plain_host_name(&local_hostname()), "{}", local_hostname());
        let config = SmtpConfig { ehlo_name: "x\r\nRCPT TO:<evil@example.org>".into(), ..SmtpConfig::default() };
        let smtp = SmtpTransport::with_config("smtp://127.0.0.1", config).unwrap();
        assert_eq!(smtp.config.ehlo_name, "localhost");
    }
}
