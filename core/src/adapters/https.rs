//! The HTTPS port: one POST over rustls (ring) to the address the egress guard validated, with
//! SNI and `Host` of the URL's name, so the connection cannot go anywhere the guard did not see.
//! A small client of our own rather than ureq: it never resolves, never follows a redirect (a 3xx
//! is returned as it is), sends `Connection: close`, bounds the connect, each read and write, and
//! reads no more than the response's head (16 KiB): the status and `Retry-After` are all a
//! delivery needs, and a hostile receiver cannot make us buffer its body.
//!
//! Trust: the public roots of webpki-roots, plus the PEM certificates of `COURRIER_EXTRA_CA`.

use crate::egress::{Host, HttpsClient, PostReply, PostRequest};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Each read or write; a receiver has this long between bytes.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The response's status line and headers; past it the answer is refused.
pub const MAX_HEAD: usize = 16 * 1024;
/// The whole head must arrive within this (a receiver trickling a byte per read time-out would
/// otherwise hold a worker for hours).
pub const HEAD_DEADLINE: Duration = Duration::from_secs(30);

pub struct RustlsHttps {
    config: Arc<rustls::ClientConfig>,
}

impl RustlsHttps {
    /// Public roots plus the certificates of the PEM file `extra_ca`, if given.
    pub fn new(extra_ca: Option<&std::path::Path>) -> Result<Self, String> {
        Ok(Self { config: tls_config(extra_ca)? })
    }
}

/// The TLS client configuration of every outgoing connection to a host users choose (webhooks,
/// mail accounts): the public roots of webpki-roots plus the certificates of the PEM file
/// `extra_ca` (`COURRIER_EXTRA_CA`), ring as the provider.
pub fn tls_config(extra_ca: Option<&std::path::Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = extra_ca {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{} is not a PEM file of certificates: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{} holds no certificate", path.display()));
        }
        for c in certs {
            roots.add(c).map_err(|e| format!("{}: a certificate is not usable: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

impl HttpsClient for RustlsHttps {
    fn post(&self, req: &PostRequest<'_>) -> Result<PostReply, String> {
        let name = match &req.url.host {
            Host::Name(n) => ServerName::try_from(n.clone()).map_err(|e| format!("bad server name: {e}"))?,
            Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        };
        let tcp = TcpStream::connect_timeout(&req.addr, CONNECT_TIMEOUT)
            .map_err(|e| format!("cannot connect to {}: {e}", req.addr))?;
        tcp.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        tcp.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        let conn = rustls::ClientConnection::new(Arc::clone(&self.config), name).map_err(|e| e.to_string())?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: Courrier-Webhooks\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n",
            req.url.path,
            req.url.authority(),
            req.body.len()
        );
        for (k, v) in req.headers {
            // Values are ours (ids, signatures, timestamps); a line break would split the request.
            if v.contains(['\r', '\n']) {
                return Err(format!("header {k} holds a line break"));
            }
            head.push_str(k);
            head.push_str(": ");
            head.push_str(v);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(req.body);
        tls.write_all(&out).and_then(|()| tls.flush()).map_err(|e| describe(&e))?;
        let head = read_head(&mut tls)?;
        parse_head(&head)
    }
}

fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timed out".into(),
        _ => e.to_string(),
    }
}

/// Reads up to the blank line that ends the head (at most [`MAX_HEAD`] bytes).
fn read_head(r: &mut impl Read) -> Result<Vec<u8>, String> {
    let started = std::time::Instant::now();
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if started.elapsed() > HEAD_DEADLINE {
            return Err("the response's head did not arrive within 30 s".into());
        }
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end + 2);
            return Ok(buf);
        }
        if buf.len() > MAX_HEAD {
            return Err("the response's head exceeds 16 KiB".into());
        }
        match r.read(&mut chunk) {
            Ok(0) => return Err("the connection closed before a complete response".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(describe(&e)),
        }
    }
}

/// The status and `Retry-After` (seconds; an HTTP date is read as "retry later", 60 s).
fn parse_head(head: &[u8]) -> Result<PostReply, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the response's head is not text".to_owned())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
        return Err(format!("not an HTTP response: {:.80}", status_line));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1.x response: {:.80}", status_line));
    }
    let status =
        code.parse::<u16>().ok().filter(|s| (100..600).contains(s)).ok_or_else(|| format!("bad status {code:.10}"))?;
    let retry_after = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("retry-after"))
        .map(|(_, v)| v.trim().parse::<u64>().unwrap_or(60));
    Ok(PostReply { status, retry_after })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read_for_status_and_retry_after() {
        let r = parse_head(b"HTTP/1.1 503 Busy\r\nRetry-After: 120\r\nX: y\r\n").unwrap();
        assert_eq!(r, PostReply { status: 503, retry_after: Some(120) });
        let r = parse_head(b"HTTP/1.0 429 Slow\r\nretry-after: Wed, 21 Oct 2015 07:28:00 GMT\r\n").unwrap();
        assert_eq!(r.retry_after, Some(60));
        assert_eq!(parse_head(b"HTTP/1.1 302 Found\r\nLocation: https://x/\r\n").unwrap().status, 302);
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 99999 x\r\n").is_err());
        let mut endless = std::io::repeat(b'a');
        assert!(read_head(&mut endless).unwrap_err().contains("16 KiB"));
        let mut short: &[u8] = b"HTTP/1.1 200 OK\r\n";
        assert!(read_head(&mut short).is_err());
    }
}
