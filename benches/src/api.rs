//! An HTTP client of one server with one credential (courrier's API with a key, Mailman's REST
//! API with Basic auth), and the encodings its requests need.

use crate::check_status;
use std::fmt::Write as _;
use std::time::Duration;

/// Keep-alive connections (ureq's pool); answers of any status come back as they are.
pub struct Api {
    agent: ureq::Agent,
    pub base: String,
    auth: String,
}

impl Api {
    /// `Authorization: Bearer key`.
    pub fn bearer(base: &str, key: &str) -> Self {
        Self::with_auth(base, format!("Bearer {key}"))
    }

    /// `Authorization: Basic base64(user:pass)`.
    pub fn basic(base: &str, user_pass: &str) -> Self {
        Self::with_auth(base, format!("Basic {}", base64(user_pass.as_bytes())))
    }

    fn with_auth(base: &str, auth: String) -> Self {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(900)))
            // Under courrier's idle limit (10-15 s): a connection idle longer is being closed by
            // the server, and ureq, which does not probe a pooled connection, would send on it.
            .max_idle_age(Duration::from_secs(5))
            .build()
            .into();
        Self { agent, base: base.to_owned(), auth }
    }

    /// Status and body text.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> Result<(u16, String), String> {
        self.exchange(method, path, content_type, body, headers).map(|(status, text, _)| (status, text))
    }

    /// A GET's status, body text and the server's own time in seconds (courrier's
    /// `Server-Timing: app;dur=<ms>`; `None` from a server that does not say it).
    pub fn get_timed(&self, path: &str) -> Result<(u16, String, Option<f64>), String> {
        self.exchange("GET", path, "", &[], &[])
    }

    fn exchange(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> Result<(u16, String, Option<f64>), String> {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", &self.auth);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = if method == "GET" {
            self.agent.run(req.body(()).map_err(|e| e.to_string())?)
        } else {
            self.agent.run(req.header("content-type", content_type).body(body).map_err(|e| e.to_string())?)
        };
        let mut resp = resp.map_err(|e| format!("{method} {}{path}: {e}", self.base))?;
        let status = resp.status().as_u16();
        let server = resp.headers().get_all("server-timing").iter().find_map(|v| app_duration(v.to_str().ok()?));
        let text = resp
            .body_mut()
            .with_config()
            .limit(256 * 1024 * 1024)
            .read_to_string()
            .map_err(|e| format!("{method} {path}: cannot read the answer: {e}"))?;
        Ok((status, text, server))
    }

    /// A request to a URI parsed once (a client sending the same request many times): status
    /// and body text.
    pub fn post_to(&self, uri: &ureq::http::Uri, content_type: &str, body: &[u8]) -> Result<(u16, String), String> {
        let req = ureq::http::Request::post(uri.clone())
            .header("authorization", &self.auth)
            .header("content-type", content_type)
            .body(body)
            .map_err(|e| e.to_string())?;
        let mut resp = self.agent.run(req).map_err(|e| format!("POST {uri}: {e}"))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().map_err(|e| format!("POST {uri}: cannot read the answer: {e}"))?;
        Ok((status, text))
    }

    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        self.send("GET", path, "", &[], &[])
    }

    pub fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
        headers: &[(&str, &str)],
    ) -> Result<(u16, String), String> {
        self.send("POST", path, "application/json", body.to_string().as_bytes(), headers)
    }

    /// A JSON request whose answer must have one of the `ok` statuses; the answer's text.
    pub fn expect(&self, method: &str, path: &str, body: &serde_json::Value, ok: &[u16]) -> Result<String, String> {
        let (status, text) = self.send(method, path, "application/json", body.to_string().as_bytes(), &[])?;
        check_status(&format!("{method} {path}"), status, &text, ok)?;
        Ok(text)
    }

    /// An `application/x-www-form-urlencoded` request (Mailman's REST API).
    pub fn form(&self, method: &str, path: &str, fields: &[(&str, &str)]) -> Result<(u16, String), String> {
        self.send(method, path, "application/x-www-form-urlencoded", form_encode(fields).as_bytes(), &[])
    }
}

/// One keep-alive HTTP/1.1 connection sending the same `POST` with different bodies, one request
/// at a time, answers framed by `Content-Length` (as `wrk` does): for loads where the client's
/// own CPU counts, on a machine it shares with the server.
pub struct RawPost {
    stream: std::net::TcpStream,
    /// The request head up to `Content-Length: `.
    head: Vec<u8>,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl RawPost {
    /// To `base` (`http://host:port`) and `path`, with `Authorization: Bearer key`.
    pub fn connect(base: &str, path: &str, key: &str, content_type: &str) -> Result<Self, String> {
        let host = base.strip_prefix("http://").ok_or_else(|| format!("{base}: only http:// is spoken here"))?;
        let stream = std::net::TcpStream::connect(host).map_err(|e| format!("connect {host}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\nContent-Type: {content_type}\r\n\
             Content-Length: "
        )
        .into_bytes();
        Ok(Self { stream, head, out: Vec::new(), buf: Vec::with_capacity(4096) })
    }

    /// Sends `body`; the answer's status and body.
    pub fn post(&mut self, body: &[u8]) -> Result<(u16, &[u8]), String> {
        use std::io::{Read, Write};
        self.out.clear();
        self.out.extend_from_slice(&self.head);
        let _ = write!(self.out, "{}\r\n\r\n", body.len());
        self.out.extend_from_slice(body);
        self.stream.write_all(&self.out).map_err(|e| format!("send: {e}"))?;
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        let (head_end, len) = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&self.buf[..end]).map_err(|_| "an answer head not UTF-8".to_owned())?;
                let len = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
                    })
                    .ok_or_else(|| format!("an answer without Content-Length: {head}"))?;
                break (end + 4, len);
            }
            let n = self.stream.read(&mut chunk).map_err(|e| format!("receive: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        };
        while self.buf.len() < head_end + len {
            let n = self.stream.read(&mut chunk).map_err(|e| format!("receive: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection mid-answer".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let status = self
            .buf
            .get(9..12)
            .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
            .ok_or_else(|| "an answer without a status line".to_owned())?;
        Ok((status, &self.buf[head_end..head_end + len]))
    }
}

/// The `app;dur=<ms>` entry of a `Server-Timing` field, in seconds.
fn app_duration(field: &str) -> Option<f64> {
    field.split(',').find_map(|entry| entry.trim().strip_prefix("app;dur=")?.parse::<f64>().ok()).map(|ms| ms / 1000.0)
}

/// `k=v&k=v`, every byte but the unreserved ones percent-encoded.
pub fn form_encode(fields: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        percent_encode(k, &mut out);
        out.push('=');
        percent_encode(v, &mut out);
    }
    out
}

/// Appends `s` to `out`, every byte but the unreserved ones percent-encoded (a query value).
pub fn percent_encode(s: &str, out: &mut String) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
}

/// Standard base64 with padding (Basic auth).
pub fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (j, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if j <= chunk.len() {
                out.push(char::from(T[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_forms_and_basic_auth() {
        assert_eq!(
            form_encode(&[("subscriber", "a.b+c@x.org"), ("display_name", "Zoë O'Brien")]),
            "subscriber=a.b%2Bc%40x.org&display_name=Zo%C3%AB%20O%27Brien"
        );
        assert_eq!(form_encode(&[("subscriber", "a+b@x.org"), ("n", "Zoë")]), "subscriber=a%2Bb%40x.org&n=Zo%C3%AB");
        assert_eq!(base64(b"restadmin:restpass"), "cmVzdGFkbWluOnJlc3RwYXNz");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
    }

    #[test]
    fn reads_the_servers_own_time() {
        assert_eq!(app_duration("app;dur=1.500"), Some(0.0015));
        assert_eq!(app_duration("render;dur=2, app;dur=4"), Some(0.004));
        assert_eq!(app_duration("render;dur=2"), None);
        assert_eq!(app_duration("app;dur=x"), None);
    }
}
