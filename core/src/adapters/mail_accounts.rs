//! The sessions with a list's mail accounts (`mailing::accounts`): IMAP through the `imap` crate
//! (without its TLS features, whose rustls 0.22 carries advisories) over our own rustls 0.23
//! stream, SMTP submission through our own client (`adapters::smtp`) with TLS and AUTH.
//!
//! Every session connects to the address the endpoint's resolver gives (the egress guard's
//! checked address), verifies the certificate for the host's name against the public roots and
//! `COURRIER_EXTRA_CA`, and never speaks in plain text past the greeting: STARTTLS must be
//! offered and accepted, else the session ends. Connect, read and write time-outs bound it.

use super::smtp::{AccountLink, SmtpConfig, SmtpTransport, check_account};
use crate::egress::Host;
use crate::kernel::MailTransport;
use crate::mailing::accounts::{AccountError, Closer, Endpoint, Listed, Login, MailAccounts, Mailbox, Security};
use rustls::pki_types::ServerName;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Each read and write of a session (an IDLE sets its own while it waits).
pub const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest line read by hand before TLS (the STARTTLS prelude).
const MAX_PRELUDE_LINE: usize = 4096;

pub struct RustlsAccounts {
    tls: Arc<rustls::ClientConfig>,
    smtp: SmtpConfig,
}

impl RustlsAccounts {
    /// `tls`: the verifying client configuration (`adapters::https::tls_config`).
    pub fn new(tls: Arc<rustls::ClientConfig>) -> Self {
        let smtp = SmtpConfig { connect_timeout: CONNECT_TIMEOUT, reply_timeout: IO_TIMEOUT, ..SmtpConfig::default() };
        Self { tls, smtp }
    }

    fn link(&self, at: Endpoint, login: Login) -> Result<AccountLink, AccountError> {
        Ok(AccountLink {
            host: at.host.to_string(),
            port: at.port,
            tls: Arc::clone(&self.tls),
            server_name: server_name(&at.host)?,
            starttls: at.security == Security::StartTls,
            username: login.username,
            password: login.password,
            connect_to: at.connect_to,
        })
    }

    fn imap_session(
        &self,
        at: &Endpoint,
        login: &Login,
    ) -> Result<(imap::Session<TlsStream>, bool, TcpStream), AccountError> {
        let addr = (at.connect_to)().map_err(AccountError::Failed)?;
        let tcp = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| AccountError::Failed(format!("cannot connect to {}:{} ({addr}): {e}", at.host, at.port)))?;
        let setup = |e: std::io::Error| AccountError::Failed(format!("cannot set up the connection: {e}"));
        tcp.set_read_timeout(Some(IO_TIMEOUT)).map_err(setup)?;
        tcp.set_write_timeout(Some(IO_TIMEOUT)).map_err(setup)?;
        let _ = tcp.set_nodelay(true);
        let handle = tcp.try_clone().map_err(setup)?;
        let client = match at.security {
            Security::Tls => {
                let mut client = imap::Client::new(self.handshake(at, tcp)?);
                client.read_greeting().map_err(imap_error)?;
                client
            }
            Security::StartTls => {
                let mut plain = imap::Client::new(tcp);
                plain.read_greeting().map_err(imap_error)?;
                let offered = plain.capabilities().map_err(imap_error)?.has_str("STARTTLS");
                if !offered {
                    return Err(AccountError::Refused(format!(
                        "{}:{} does not offer STARTTLS: the session is not opened in plain text",
                        at.host, at.port
                    )));
                }
                let mut tcp = plain.into_inner().map_err(imap_error)?;
                starttls_prelude(&mut tcp)?;
                let mut client = imap::Client::new(self.handshake(at, tcp)?);
                // No second greeting after STARTTLS (RFC 3501 6.2.1).
                client.greeting_read = true;
                client
            }
        };
        let mut session = client.login(&login.username, &login.password).map_err(|(e, _)| imap_error(e))?;
        let idle = session.capabilities().map_err(imap_error)?.has_str("IDLE");
        Ok((session, idle, handle))
    }

    fn handshake(&self, at: &Endpoint, mut tcp: TcpStream) -> Result<TlsStream, AccountError> {
        let mut conn = rustls::ClientConnection::new(Arc::clone(&self.tls), server_name(&at.host)?)
            .map_err(|e| AccountError::Failed(format!("TLS with {}: {e}", at.host)))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)
                .map_err(|e| AccountError::Failed(format!("TLS with {}:{} failed: {e}", at.host, at.port)))?;
        }
        Ok(TlsStream(rustls::StreamOwned::new(conn, tcp)))
    }
}

fn server_name(host: &Host) -> Result<ServerName<'static>, AccountError> {
    match host {
        Host::Name(n) => {
            ServerName::try_from(n.clone()).map_err(|e| AccountError::Failed(format!("bad server name: {e}")))
        }
        Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
    }
}

/// `STARTTLS` by hand on the plain socket, read a byte at a time so that nothing the server sends
/// after its OK is taken for TLS or, worse, for a reply inside it.
fn starttls_prelude(tcp: &mut TcpStream) -> Result<(), AccountError> {
    tcp.write_all(b"S1 STARTTLS\r\n").map_err(|e| AccountError::Failed(format!("STARTTLS: {e}")))?;
    loop {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while line.last() != Some(&b'\n') {
            if line.len() > MAX_PRELUDE_LINE {
                return Err(AccountError::Failed("STARTTLS: a reply line too long".into()));
            }
            match tcp.read(&mut byte) {
                Ok(0) => return Err(AccountError::Failed("STARTTLS: the server closed the connection".into())),
                Ok(_) => line.push(byte[0]),
                Err(e) => return Err(AccountError::Failed(format!("STARTTLS: {e}"))),
            }
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(rest) = text.strip_prefix("S1 ") {
            let rest = rest.trim();
            return if rest.len() >= 2 && rest[..2].eq_ignore_ascii_case("OK") {
                Ok(())
            } else {
                Err(AccountError::Refused(format!("STARTTLS refused: {rest}")))
            };
        }
    }
}

fn imap_error(e: imap::Error) -> AccountError {
    match e {
        imap::Error::No(no) => AccountError::Refused(no.information),
        imap::Error::Bad(bad) => AccountError::Refused(bad.information),
        imap::Error::Bye(bye) => AccountError::Refused(bye.information),
        imap::Error::Io(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            AccountError::Failed("the server did not answer in time".into())
        }
        other => AccountError::Failed(other.to_string()),
    }
}

/// The TLS stream the `imap` crate reads and writes.
pub struct TlsStream(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl imap::extensions::idle::SetReadTimeout for TlsStream {
    /// IDLE sets its wait, then "none" after it: never unbounded here, the session's own instead.
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> imap::Result<()> {
        self.0.get_ref().set_read_timeout(Some(timeout.unwrap_or(IO_TIMEOUT))).map_err(imap::Error::Io)
    }
}

impl MailAccounts for RustlsAccounts {
    fn check_imap(&self, at: &Endpoint, login: &Login, folder: &str) -> Result<(), AccountError> {
        let (mut session, _, _) = self.imap_session(at, login)?;
        session.select(folder).map_err(imap_error)?;
        let _ = session.logout();
        Ok(())
    }

    fn check_smtp(&self, at: &Endpoint, login: &Login) -> Result<(), AccountError> {
        check_account(&self.link(at.clone(), login.clone())?, &self.smtp)
    }

    fn submission(&self, at: Endpoint, login: Login) -> Arc<dyn MailTransport> {
        match self.link(at.clone(), login) {
            Ok(link) => Arc::new(SmtpTransport::for_account(link, self.smtp.clone())),
            Err(e) => Arc::new(Broken(e.to_string())),
        }
    }

    fn open_mailbox(&self, at: &Endpoint, login: &Login, folder: &str) -> Result<Box<dyn Mailbox>, AccountError> {
        let (mut session, idle, handle) = self.imap_session(at, login)?;
        session.select(folder).map_err(imap_error)?;
        let uidplus = session.capabilities().map_err(imap_error)?.has_str("UIDPLUS");
        Ok(Box::new(ImapMailbox { session, idle, uidplus, handle }))
    }
}

/// `1,5,9`: a UID set.
fn uid_set(uids: &[u32]) -> String {
    uids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// A transport for an account whose endpoint cannot be used (a host that is no TLS name).
struct Broken(String);

impl MailTransport for Broken {
    fn send(&self, _: &crate::kernel::OutgoingMessage) -> Result<(), crate::kernel::SendError> {
        Err(crate::kernel::SendError::Temporary(self.0.clone()))
    }
}

struct ImapMailbox {
    session: imap::Session<TlsStream>,
    idle: bool,
    uidplus: bool,
    /// The same socket, to close it from another thread.
    handle: TcpStream,
}

impl Mailbox for ImapMailbox {
    fn list(&mut self) -> Result<Vec<Listed>, AccountError> {
        // One command for all: `UID FETCH 1:* RFC822.SIZE` (an empty folder answers nothing).
        let fetched = self.session.uid_fetch("1:*", "RFC822.SIZE").map_err(imap_error)?;
        let mut listed: Vec<Listed> =
            fetched.iter().filter_map(|f| Some(Listed { uid: f.uid?, size: u64::from(f.size.unwrap_or(0)) })).collect();
        listed.sort_unstable_by_key(|l| l.uid);
        listed.dedup_by_key(|l| l.uid);
        Ok(listed)
    }

    fn fetch(&mut self, uids: &[u32]) -> Result<Vec<(u32, Vec<u8>)>, AccountError> {
        if uids.is_empty() {
            return Ok(Vec::new());
        }
        let fetched = self.session.uid_fetch(uid_set(uids), "BODY.PEEK[]").map_err(imap_error)?;
        let mut found: Vec<(u32, Vec<u8>)> = fetched
            .iter()
            .filter_map(|f| Some((f.uid?, f.body()?.to_vec())))
            .filter(|(uid, _)| uids.contains(uid))
            .collect();
        found.sort_by_key(|(uid, _)| *uid);
        found.dedup_by_key(|(uid, _)| *uid);
        Ok(found)
    }

    fn delete(&mut self, uids: &[u32]) -> Result<(), AccountError> {
        if uids.is_empty() {
            return Ok(());
        }
        let set = uid_set(uids);
        self.session.uid_store(&set, "+FLAGS.SILENT (\\Deleted)").map_err(imap_error)?;
        if self.uidplus {
            self.session.uid_expunge(&set).map_err(imap_error)?;
        } else {
            self.session.expunge().map_err(imap_error)?;
        }
        Ok(())
    }

    fn can_idle(&self) -> bool {
        self.idle
    }

    fn idle(&mut self, max: Duration) -> Result<(), AccountError> {
        let outcome = self.session.idle().timeout(max).keepalive(false).wait_while(imap::extensions::idle::stop_on_any);
        outcome.map(|_| ()).map_err(imap_error)
    }

    fn closer(&self) -> Closer {
        match self.handle.try_clone() {
            Ok(tcp) => Box::new(move || {
                let _ = tcp.shutdown(std::net::Shutdown::Both);
            }),
            Err(_) => Box::new(|| {}),
        }
    }
}
