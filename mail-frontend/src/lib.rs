//! The LMTP server (RFC 2033): how the installation's MTA hands mail for list addresses to
//! Courrier. It only speaks the protocol and calls core's inbound pipeline
//! (`courrier_core::mailing::inbound`): `RCPT` resolves the address (550 5.1.1 when it names no
//! list), the end of `DATA` stores the message for every accepted recipient in one durable
//! transaction, and only then answers 250, one reply per recipient (552 over the list's size,
//! 451 when the store cannot take it). Processing happens after, in the processing loop, which
//! the server wakes.
//!
//! One blocking hop per message: a connection remembers the addresses its `RCPT`s resolved (the
//! store looks their lists up again in its own transaction, so a list deleted or renamed since is
//! answered 550 after the data), and the stores of all sessions go to core's store thread
//! (`courrier_core::mailing::accept`), which puts the stores of the sessions receiving at the
//! same time into one commit.
//!
//! Bounded: command lines, the message size (the largest limit of the recipients' lists, and a
//! hard cap), recipients per message, connections at once, and a time-out on every read, so a
//! slow or silent client holds only its own connection.

use courrier_core::mailing::Service;
use courrier_core::mailing::accept::{self, Acceptor, Receiving, RecipientMemory};
use courrier_core::mailing::inbound::{self, InboundError, Resolved};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// The server's limits.
#[derive(Debug, Clone)]
pub struct LmtpLimits {
    /// Connections served at once; one more is told 421 and closed.
    pub max_connections: usize,
    /// A command line's longest length (RFC 5321 says 512; extensions make it longer).
    pub max_command_line: usize,
    /// Recipients per message.
    pub max_recipients: usize,
    /// No message is read beyond this, whatever its lists allow (100 MiB, the largest
    /// `max_message_kb`, plus room for the headers an MTA adds).
    pub max_message_bytes: usize,
    /// The wait for a command (RFC 5321 4.5.3.2: at least 5 minutes).
    pub command_timeout: Duration,
    /// The wait for each block of message data.
    pub data_timeout: Duration,
    /// The name in the greeting and the `LHLO` reply.
    pub hostname: String,
    /// How long a store waits for the stores of other sessions still receiving their message, to
    /// share their commit (`courrier_core::mailing::accept::COMMIT_DELAY`).
    pub commit_delay: Duration,
    /// Addresses a connection remembers from its `RCPT`s (then forgets them all and starts again).
    pub resolved_per_connection: usize,
    /// How long it remembers one. The store checks the list again (gone or renamed: 550; its
    /// limit lowered: 552), so this only bounds how long a limit *raised* meanwhile can still
    /// refuse a message undeclared in size: as long as an RCPT answered just before the change.
    pub resolved_for: Duration,
}

impl Default for LmtpLimits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_command_line: 2048,
            max_recipients: 100,
            max_message_bytes: 100 * 1024 * 1024 + 64 * 1024,
            command_timeout: Duration::from_secs(300),
            data_timeout: Duration::from_secs(180),
            hostname: "localhost".into(),
            commit_delay: accept::COMMIT_DELAY,
            resolved_per_connection: 64,
            resolved_for: Duration::from_secs(5),
        }
    }
}

/// Binds the LMTP socket (a busy port is reported at start, before anything runs).
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serves LMTP until `shutdown` resolves. Connections in progress are left to finish on the
/// runtime; a message is acknowledged only once stored, so an interrupted one is retried by the
/// MTA and found a duplicate by its Message-ID if it had been stored.
pub async fn serve(
    listener: TcpListener,
    app: Arc<Service>,
    limits: LmtpLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let limits = Arc::new(limits);
    let acceptor = Arc::new(Acceptor::start(Arc::clone(&app), limits.commit_delay)?);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return Ok(()),
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "LMTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (app, limits, acceptor) = (Arc::clone(&app), Arc::clone(&limits), Arc::clone(&acceptor));
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(async move {
                    if let Err(e) = session(stream, &app, &acceptor, &limits).await {
                        tracing::debug!(%peer, error = %e, "LMTP session ended");
                    }
                    drop(slot);
                });
            }
            Err(_) => {
                tokio::spawn(async move {
                    let mut stream = stream;
                    let _ = stream.write_all(b"421 4.3.2 too many connections, try again later\r\n").await;
                });
            }
        }
    }
}

/// What reading one line found.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A line (its LF included) was appended.
    Complete,
    /// The line ran past the limit: it was read to its end and dropped.
    TooLong,
    /// The peer closed the connection.
    Eof,
}

/// How long a read may wait for the peer.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// Until this instant (a command: the whole line within the command time-out).
    Until(tokio::time::Instant),
    /// This long for each block (message data: the time-out restarts with every block received).
    Each(Duration),
}

/// A session's one timer for its reads. Arming a timer per command (`tokio::time::timeout`)
/// registers it anew each time, and tokio wakes its own runtime for every registration that
/// comes before its next wake-up (an eventfd write and a spurious turn of the event loop: most of
/// the LMTP thread's wake-ups per post). This timer stays registered: each wait only moves it
/// earlier when its deadline is earlier (rare: the deadlines only move forward, by the data's
/// shorter time-out at most once per such deadline), and when it fires before the current
/// deadline it is moved there, about once per time-out period of a busy session.
struct Watch {
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl Watch {
    fn new(first: tokio::time::Instant) -> Self {
        Self { sleep: Box::pin(tokio::time::sleep_until(first)) }
    }

    /// Waits for `r` to have bytes (or the peer's end), until `deadline`; `false` when it passed.
    async fn fill<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut BufReader<R>,
        deadline: tokio::time::Instant,
    ) -> std::io::Result<bool> {
        if self.sleep.deadline() > deadline {
            self.sleep.as_mut().reset(deadline);
        }
        loop {
            tokio::select! {
                biased;
                got = r.fill_buf() => return got.map(|_| true),
                () = &mut self.sleep => {
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(false);
                    }
                    self.sleep.as_mut().reset(deadline);
                }
            }
        }
    }
}

/// Reads one line into `out`, at most `max` bytes; a longer one is consumed and dropped. `wait`
/// bounds the waits for the peer (`None` when it ran out), through the session's `watch`; no
/// wait when the buffer has the bytes, so a 10 KiB message already read costs no timer per line.
async fn read_line<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    out: &mut Vec<u8>,
    max: usize,
    watch: &mut Watch,
    wait: Wait,
) -> std::io::Result<Option<Line>> {
    let mut too_long = false;
    loop {
        if r.buffer().is_empty() {
            let deadline = match wait {
                Wait::Until(at) => at,
                Wait::Each(d) => tokio::time::Instant::now() + d,
            };
            if !watch.fill(r, deadline).await? {
                return Ok(None);
            }
        }
        let buf = r.buffer();
        if buf.is_empty() {
            return Ok(Some(Line::Eof));
        }
        let (n, done) = match memchr::memchr(b'\n', buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if !too_long {
            if out.len() + n > max {
                too_long = true;
            } else {
                out.extend_from_slice(&buf[..n]);
            }
        }
        r.consume(n);
        if done {
            return Ok(Some(if too_long { Line::TooLong } else { Line::Complete }));
        }
    }
}

/// A session's transaction state.
#[derive(Default)]
struct Envelope {
    /// `Some(None)` after `MAIL FROM:<>`.
    from: Option<Option<String>>,
    recipients: Vec<Resolved>,
    /// The `SIZE=` the client declared.
    declared_size: Option<usize>,
    /// Held from `MAIL` to the end of the data: the store thread waits a little for this message.
    receiving: Option<Receiving>,
}

async fn reply<W: AsyncWrite + Unpin>(w: &mut W, text: &str) -> std::io::Result<()> {
    w.write_all(text.as_bytes()).await?;
    w.write_all(b"\r\n").await
}

/// The address between `<` and `>` after `FROM:` or `TO:`, and the parameters after it.
fn path_of<'a>(args: &'a str, keyword: &str) -> Option<(&'a str, &'a str)> {
    let rest = args.get(..keyword.len()).filter(|k| k.eq_ignore_ascii_case(keyword)).map(|_| &args[keyword.len()..])?;
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('<')?;
    let end = rest.find('>')?;
    Some((rest[..end].trim(), rest[end + 1..].trim()))
}

/// One connection. Replies are buffered and sent when the session is about to wait for the peer
/// (RFC 2920: a pipelining client gets the replies to its group of commands together; one that
/// waits for each reply gets it in one segment, its CRLF included, not split over two).
async fn session(
    stream: TcpStream,
    app: &Arc<Service>,
    acceptor: &Acceptor,
    limits: &LmtpLimits,
) -> std::io::Result<()> {
    let (read, write) = stream.into_split();
    let mut read = BufReader::with_capacity(16 * 1024, read);
    let mut write = BufWriter::with_capacity(4 * 1024, write);
    let mut watch = Watch::new(tokio::time::Instant::now() + limits.command_timeout);
    let ended = commands(&mut read, &mut write, &mut watch, app, acceptor, limits).await;
    // The last replies (a 221, a 421) are sent whatever ended the session.
    let flushed = write.flush().await;
    ended.and(flushed)
}

async fn commands(
    read: &mut BufReader<OwnedReadHalf>,
    write: &mut BufWriter<OwnedWriteHalf>,
    watch: &mut Watch,
    app: &Arc<Service>,
    acceptor: &Acceptor,
    limits: &LmtpLimits,
) -> std::io::Result<()> {
    reply(write, &format!("220 {} LMTP Courrier ready", limits.hostname)).await?;
    let mut greeted = false;
    let mut env = Envelope::default();
    // Whether this connection's last message was stored and it has not started another since.
    let mut answered = false;
    let mut resolved = RecipientMemory::new(limits.resolved_per_connection, limits.resolved_for);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        if !read.buffer().contains(&b'\n') {
            // Nothing more pipelined: the replies so far go out before the wait.
            write.flush().await?;
        }
        let until = Wait::Until(tokio::time::Instant::now() + limits.command_timeout);
        let Some(got) = read_line(read, &mut line, limits.max_command_line, watch, until).await? else {
            reply(write, "421 4.4.2 timeout waiting for a command").await?;
            return Ok(());
        };
        match got {
            Line::Eof => return Ok(()),
            Line::TooLong => {
                reply(write, "500 5.5.2 line too long").await?;
                continue;
            }
            Line::Complete => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        let (verb, args) = text.split_once(' ').unwrap_or((text, ""));
        let verb = verb.to_ascii_uppercase();
        match verb.as_str() {
            "LHLO" => {
                env = Envelope::default();
                greeted = true;
                let h = &limits.hostname;
                let size = limits.max_message_bytes;
                let text =
                    format!("250-{h}\r\n250-PIPELINING\r\n250-ENHANCEDSTATUSCODES\r\n250-8BITMIME\r\n250 SIZE {size}");
                reply(write, &text).await?;
            }
            "HELO" | "EHLO" => reply(write, "500 5.5.1 this is LMTP: say LHLO").await?,
            "MAIL" => {
                if !greeted {
                    reply(write, "503 5.5.1 LHLO first").await?;
                } else if env.from.is_some() {
                    reply(write, "503 5.5.1 nested MAIL command").await?;
                } else {
                    match path_of(args, "FROM:") {
                        Some((addr, params)) if addr.len() <= 256 => {
                            let size = params.split_ascii_whitespace().find_map(|p| {
                                let (k, v) = p.split_once('=')?;
                                k.eq_ignore_ascii_case("SIZE").then(|| v.parse::<usize>().ok()).flatten()
                            });
                            if size.is_some_and(|s| s > limits.max_message_bytes) {
                                reply(write, "552 5.3.4 message size exceeds the server's limit").await?;
                            } else {
                                env.from = Some((!addr.is_empty()).then(|| addr.to_owned()));
                                env.declared_size = size;
                                env.receiving = Some(acceptor.receiving(std::mem::take(&mut answered)));
                                reply(write, "250 2.1.0 Ok").await?;
                            }
                        }
                        _ => reply(write, "501 5.5.4 syntax: MAIL FROM:<address>").await?,
                    }
                }
            }
            "RCPT" => {
                let Some((addr, _)) = path_of(args, "TO:").filter(|(a, _)| !a.is_empty() && a.len() <= 256) else {
                    reply(write, "501 5.5.4 syntax: RCPT TO:<address>").await?;
                    continue;
                };
                if env.from.is_none() {
                    reply(write, "503 5.5.1 MAIL first").await?;
                    continue;
                }
                if env.recipients.len() >= limits.max_recipients {
                    reply(write, "452 4.5.3 too many recipients").await?;
                    continue;
                }
                let found = match resolved.recall(addr, env.declared_size) {
                    Some(r) => Ok(r),
                    None => {
                        let (app2, address) = (Arc::clone(app), addr.to_owned());
                        let found = blocking(move || inbound::resolve(&app2, &address)).await;
                        resolved.learn(addr, &found);
                        found
                    }
                };
                match found {
                    Ok(r) => {
                        if env.declared_size.is_some_and(|s| inbound::check_size(&r, s).is_err()) {
                            let kb = r.list.policies.max_message_kb;
                            reply(write, &format!("552 5.3.4 <{addr}> the list takes messages up to {kb} KiB")).await?;
                        } else {
                            env.recipients.push(r);
                            reply(write, "250 2.1.5 Ok").await?;
                        }
                    }
                    Err(e) => reply(write, &refusal(addr, &e)).await?,
                }
            }
            "DATA" => {
                if env.from.is_none() || env.recipients.is_empty() {
                    // No message follows: the store thread need not wait for this session.
                    env.receiving = None;
                    reply(write, "503 5.5.1 no valid recipients").await?;
                    continue;
                }
                reply(write, "354 end data with <CR><LF>.<CR><LF>").await?;
                write.flush().await?;
                // No list takes more than its limit: read no more than the largest of them.
                let cap =
                    env.recipients.iter().map(Resolved::max_bytes).max().unwrap_or(0).min(limits.max_message_bytes);
                let data = match read_data(read, watch, cap, limits.max_message_bytes, limits.data_timeout).await? {
                    Some(Data::Flood) => {
                        reply(write, "552 5.3.4 message far over the size limit, closing").await?;
                        return Ok(());
                    }
                    Some(data) => data,
                    None => {
                        reply(write, "421 4.4.2 timeout or connection lost in DATA").await?;
                        return Ok(());
                    }
                };
                let env = std::mem::take(&mut env);
                answered = deliver(write, app, acceptor, &mut resolved, env, data).await?;
            }
            "RSET" => {
                env = Envelope::default();
                reply(write, "250 2.0.0 Ok").await?;
            }
            "NOOP" => reply(write, "250 2.0.0 Ok").await?,
            "VRFY" => reply(write, "252 2.5.0 cannot verify, but will accept").await?,
            "QUIT" => {
                reply(write, &format!("221 2.0.0 {} closing", limits.hostname)).await?;
                return Ok(());
            }
            _ => reply(write, "500 5.5.2 command not recognised").await?,
        }
    }
}

/// The message as read: its bytes (dot-unstuffed), or that it went over `cap`.
enum Data {
    Message(Vec<u8>),
    TooLarge,
    /// Over the cap by more than the server's hard limit again: the client is not stopping; the
    /// connection is closed rather than read for ever.
    Flood,
}

/// Reads message data to the lone dot. `None` when the peer went silent or away.
async fn read_data<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
    watch: &mut Watch,
    cap: usize,
    flood: usize,
    timeout: Duration,
) -> std::io::Result<Option<Data>> {
    let mut message = Vec::with_capacity(cap.min(64 * 1024));
    let mut over = false;
    let mut discarded: usize = 0;
    loop {
        if discarded > flood {
            return Ok(Some(Data::Flood));
        }
        // Each line is read straight onto the end of the message (one copy of the data, not two)
        // and taken back when it is the end, over the allowance or dropped.
        let start = message.len();
        // One line may not be longer than what is left of the allowance (plus its dot and CRLF).
        let room = cap.saturating_sub(start) + 3;
        let Some(got) = read_line(r, &mut message, start + room, watch, Wait::Each(timeout)).await? else {
            return Ok(None);
        };
        match got {
            Line::Eof => return Ok(None),
            Line::TooLong => {
                message.truncate(start);
                over = true;
                discarded = discarded.saturating_add(room);
            }
            Line::Complete => {
                let line = &message[start..];
                if line == b".\r\n" || line == b".\n" {
                    message.truncate(start);
                    return Ok(Some(if over { Data::TooLarge } else { Data::Message(message) }));
                }
                if line.first() == Some(&b'.') {
                    message.remove(start);
                }
                if !over && message.len() > cap {
                    over = true;
                }
                if over {
                    discarded = discarded.saturating_add(message.len() - start);
                    message.truncate(start);
                }
            }
        }
    }
}

/// The replies after DATA, one per accepted recipient, in their order: 552 for the lists the
/// message is too large for; the others stored in one transaction by core's store thread, then
/// 250 (550 for a list gone since its RCPT, 451 for all if the store failed). The processing
/// loop is rung after the replies. Whether anything was stored.
async fn deliver<W: AsyncWrite + Unpin>(
    w: &mut W,
    app: &Arc<Service>,
    acceptor: &Acceptor,
    resolved: &mut RecipientMemory,
    mut env: Envelope,
    data: Data,
) -> std::io::Result<bool> {
    let size = match &data {
        Data::Message(m) => m.len(),
        Data::TooLarge | Data::Flood => usize::MAX,
    };
    let fits: Vec<bool> = env.recipients.iter().map(|r| inbound::check_size(r, size).is_ok()).collect();
    let to_store: Vec<Resolved> =
        env.recipients.iter().zip(&fits).filter(|(_, f)| **f).map(|(r, _)| r.clone()).collect();
    let mut stored: std::vec::IntoIter<Result<accept::Taken, InboundError>> = match data {
        Data::Message(raw) if !to_store.is_empty() => {
            let n = to_store.len();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let job = accept::Job {
                envelope_from: env.from.clone().flatten(),
                recipients: to_store,
                raw,
                done: Box::new(move |out| {
                    let _ = tx.send(out);
                }),
            };
            acceptor.submit(env.receiving.take(), job);
            // The store thread answers every job it takes; a closed channel is a store failure.
            rx.await.unwrap_or_else(|_| {
                tracing::error!("LMTP: the store thread ended without an answer");
                vec![Err(InboundError::unavailable()); n]
            })
        }
        _ => Vec::new(),
    }
    .into_iter();
    drop(env.receiving.take());
    let mut any = false;
    let mut out = String::new();
    for (r, fits) in env.recipients.iter().zip(&fits) {
        let line = if !fits {
            format!("552 5.3.4 <{}> the list takes messages up to {} KiB", r.address, r.list.policies.max_message_kb)
        } else {
            match stored.next() {
                Some(Ok(_)) => {
                    any = true;
                    format!("250 2.0.0 <{}> Ok, stored", r.address)
                }
                Some(Err(e)) => {
                    let refused = refusal(&r.address, &e);
                    resolved.stored(&r.address, &Err(e));
                    refused
                }
                None => refusal(&r.address, &InboundError::unavailable()),
            }
        };
        out.push_str(&line);
        out.push_str("\r\n");
    }
    w.write_all(out.as_bytes()).await?;
    w.flush().await?;
    if any {
        app.mail_in.wakeup.ring();
    }
    Ok(any)
}

/// The one mapping of core's refusals to LMTP replies.
fn refusal(address: &str, e: &InboundError) -> String {
    match e {
        InboundError::UnknownAddress(_) => format!("550 5.1.1 <{address}> no such list here"),
        InboundError::TooLarge { limit_kb } => {
            format!("552 5.3.4 <{address}> the list takes messages up to {limit_kb} KiB")
        }
        InboundError::Store(err) => {
            tracing::warn!(error = %err, "LMTP: the store is unavailable");
            format!("451 4.3.0 <{address}> cannot store the message now, try again later")
        }
    }
}

/// Runs a core call on the blocking pool; a panic there is a store failure for the client (4xx:
/// the MTA retries), never a crash of the server.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, InboundError> + Send + 'static,
) -> Result<T, InboundError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(out) => out,
        Err(join) => {
            tracing::error!(error = %join, "LMTP: core call failed");
            Err(InboundError::unavailable())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        Watch::new(tokio::time::Instant::now() + Duration::from_secs(3600))
    }

    fn forever() -> Wait {
        Wait::Each(Duration::from_secs(3600))
    }

    async fn lines(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut r = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            let mut buf = Vec::new();
            let got = read_line(&mut r, &mut buf, max, &mut watch(), forever()).await.unwrap().unwrap();
            if got == Line::Eof {
                return out;
            }
            out.push((got, buf));
        }
    }

    #[tokio::test]
    async fn lines_are_bounded_and_a_long_one_is_dropped_whole() {
        let got = lines(b"LHLO x\r\n0123456789abcdef\r\nok\n", 10).await;
        assert_eq!(got[0], (Line::Complete, b"LHLO x\r\n".to_vec()));
        assert_eq!(got[1].0, Line::TooLong);
        assert_eq!(got[2], (Line::Complete, b"ok\n".to_vec()));
    }

    #[tokio::test]
    async fn data_is_unstuffed_and_stops_at_the_cap() {
        let mut r = BufReader::new(&b"a\r\n..b\r\n.\r\nNEXT\r\n"[..]);
        let Some(Data::Message(m)) = read_data(&mut r, &mut watch(), 100, 1000, Duration::from_secs(1)).await.unwrap()
        else {
            panic!()
        };
        assert_eq!(m, b"a\r\n.b\r\n");
        let mut rest = Vec::new();
        read_line(&mut r, &mut rest, 100, &mut watch(), forever()).await.unwrap();
        assert_eq!(rest, b"NEXT\r\n", "the next command is left unread");
        let mut r = BufReader::new(&b"0123456789\r\n0123456789\r\n.\r\n"[..]);
        assert!(matches!(
            read_data(&mut r, &mut watch(), 15, 1000, Duration::from_secs(1)).await.unwrap(),
            Some(Data::TooLarge)
        ));
        let endless = "0123456789\r\n".repeat(100);
        let mut r = BufReader::new(endless.as_bytes());
        assert!(matches!(
            read_data(&mut r, &mut watch(), 15, 100, Duration::from_secs(1)).await.unwrap(),
            Some(Data::Flood)
        ));
    }

    /// A bound against a hang, not a measurement.
    const HANG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_silent_peer_times_out_at_the_wait_deadline_even_when_the_sessions_timer_was_set_later() {
        let (_peer, ours) = tokio::io::duplex(64);
        let mut r = BufReader::new(ours);
        // The session's timer set an hour ahead; this wait's deadline is much sooner.
        let mut watch = watch();
        let soon = Wait::Until(tokio::time::Instant::now() + Duration::from_millis(20));
        let got = tokio::time::timeout(HANG, read_line(&mut r, &mut Vec::new(), 100, &mut watch, soon)).await;
        assert!(matches!(got, Ok(Ok(None))), "timed out, not hung: {got:?}");
        // The same for a block of data (the time-out counted from the wait's start).
        let got = tokio::time::timeout(HANG, read_data(&mut r, &mut watch, 100, 1000, Duration::from_millis(20))).await;
        assert!(matches!(got, Ok(Ok(None))), "timed out in DATA");
    }

    #[tokio::test]
    async fn a_session_timer_that_fires_before_the_current_deadline_does_not_end_a_peer_still_in_time() {
        let (mut peer, ours) = tokio::io::duplex(64);
        let mut r = BufReader::new(ours);
        // The session's timer fires almost at once, long before this command's deadline.
        let mut watch = Watch::new(tokio::time::Instant::now() + Duration::from_millis(1));
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            peer.write_all(b"NOOP\r\n").await.unwrap();
            peer
        });
        let until = Wait::Until(tokio::time::Instant::now() + HANG);
        let mut line = Vec::new();
        let got = read_line(&mut r, &mut line, 100, &mut watch, until).await.unwrap();
        assert_eq!((got, line.as_slice()), (Some(Line::Complete), &b"NOOP\r\n"[..]));
        let mut peer = writer.await.unwrap();
        // Data whose blocks keep coming is read to its end, each block restarting the time-out.
        let feeder = tokio::spawn(async move {
            for block in [&b"a\r\n"[..], b"b\r\n", b".\r\n"] {
                tokio::time::sleep(Duration::from_millis(20)).await;
                peer.write_all(block).await.unwrap();
            }
            peer
        });
        let got = read_data(&mut r, &mut watch, 100, 1000, HANG).await.unwrap();
        assert!(matches!(got, Some(Data::Message(m)) if m == b"a\r\nb\r\n"));
        drop(feeder.await.unwrap());
    }

    #[test]
    fn paths_are_read_with_their_parameters() {
        assert_eq!(path_of("FROM:<a@b.org> SIZE=10", "FROM:"), Some(("a@b.org", "SIZE=10")));
        assert_eq!(path_of("from: <>", "FROM:"), Some(("", "")));
        assert_eq!(path_of("TO:a@b.org", "TO:"), None);
        assert_eq!(path_of("", "TO:"), None);
    }
}
