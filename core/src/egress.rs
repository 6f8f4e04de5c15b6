//! The egress guard: every outgoing connection to a host a user chose (webhooks, mail accounts)
//! goes through here. HTTPS only; the name is resolved by us and every address it
//! gives is checked against the exclusion list, at creation and again at each send; the
//! connection then goes to the validated address itself (TLS SNI and `Host` stay the original
//! name), so a DNS answer that changes between the check and the connect (rebinding) cannot
//! swap it. Redirects are never followed: the HTTPS port answers a 3xx as it is.
//!
//! Host literals are read the way resolvers and browsers read them (inet_aton's decimal,
//! octal and hex forms, one to four parts, trailing dots), so `https://2130706433/`,
//! `https://0x7f.1/` and `https://127.0.0.1./` are all seen as 127.0.0.1 and refused.

use crate::kernel::{Code, CoreError, Dns};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error("the URL must use https://")]
    NotHttps,
    #[error("the URL is not valid: {0}")]
    BadUrl(String),
    #[error("{host} resolves to {addr}, an internal address that outgoing calls may not reach")]
    Refused { host: String, addr: IpAddr },
    #[error("{host} cannot be resolved: {reason}")]
    Unresolvable { host: String, reason: String },
    #[error("the call to {host} failed: {reason}")]
    Transport { host: String, reason: String },
}

impl CoreError for EgressError {
    fn code(&self) -> Code {
        match self {
            EgressError::NotHttps
            | EgressError::BadUrl(_)
            | EgressError::Refused { .. }
            | EgressError::Unresolvable { .. } => Code::UrlRefused,
            EgressError::Transport { .. } => Code::EgressFailed,
        }
    }
}

/// A host as written in a URL, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A DNS name, lowercase, without trailing dot.
    Name(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// An https URL taken apart: what the guard checks and the HTTPS port connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpsUrl {
    pub host: Host,
    pub port: u16,
    /// Path and query, starting with `/` (the fragment is dropped: it is never sent).
    pub path: String,
}

impl HttpsUrl {
    /// The `Host` header's value: the name (or literal) and the port when it is not 443.
    pub fn authority(&self) -> String {
        if self.port == 443 { self.host.to_string() } else { format!("{}:{}", self.host, self.port) }
    }

    /// The URL written back in its normal form (what is stored and shown).
    pub fn normalized(&self) -> String {
        format!("https://{}{}", self.authority(), self.path)
    }
}

/// URLs longer than this are refused (a webhook URL is short; the limit bounds what is stored).
pub const MAX_URL_LEN: usize = 2048;

/// Reads an https URL. Refuses other schemes, credentials in the URL, control characters and
/// whitespace, ports out of range, and names that are neither a DNS name nor an IP literal.
pub fn parse_url(raw: &str) -> Result<HttpsUrl, EgressError> {
    let bad = |why: &str| EgressError::BadUrl(why.to_owned());
    if raw.len() > MAX_URL_LEN {
        return Err(bad("longer than 2048 characters"));
    }
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(bad("it holds whitespace or control characters"));
    }
    let (scheme, rest) = raw.split_once("://").ok_or(EgressError::NotHttps)?;
    if !scheme.eq_ignore_ascii_case("https") {
        return Err(EgressError::NotHttps);
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(bad("credentials in the URL are not accepted"));
    }
    if authority.contains('\\') || tail.starts_with('\\') {
        return Err(bad("backslashes are not accepted"));
    }
    let (host_raw, port) = split_port(authority)?;
    let host = parse_host(host_raw)?;
    let without_fragment = tail.split('#').next().unwrap_or("");
    let path =
        if without_fragment.starts_with('/') { without_fragment.to_owned() } else { format!("/{without_fragment}") };
    Ok(HttpsUrl { host, port, path })
}

fn split_port(authority: &str) -> Result<(&str, u16), EgressError> {
    let bad = |why: String| EgressError::BadUrl(why);
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or_else(|| bad("an unclosed [ in the host".into()))?;
        match after {
            "" => (&authority[..inside.len() + 2], None),
            p if p.starts_with(':') => (&authority[..inside.len() + 2], Some(&p[1..])),
            _ => return Err(bad("text after the ] of the host".into())),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => 443,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|n| *n > 0 && p.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| bad(format!("the port {p:?} is not a number from 1 to 65535")))?,
    };
    Ok((host, port))
}

/// A host: an IPv6 literal in brackets, an IPv4 literal in any inet_aton form, or a DNS name.
pub fn parse_host(raw: &str) -> Result<Host, EgressError> {
    let bad = |why: String| EgressError::BadUrl(why);
    if let Some(inside) = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        // A zone id (`%eth0`) names a local interface: never a destination of ours.
        return inside
            .parse::<Ipv6Addr>()
            .map(|a| Host::Ip(IpAddr::V6(a)))
            .map_err(|_| bad(format!("{inside:?} is not an IPv6 address")));
    }
    let host = raw.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return Err(bad("the host is empty".into()));
    }
    if !host.is_ascii() {
        return Err(bad("international names must be written in their xn-- form".into()));
    }
    // As the URL standard: a host whose last label is a number is an IPv4 address, whatever
    // form its parts take; one that does not read as one is refused, never resolved.
    let last = host.rsplit('.').next().unwrap_or("");
    if looks_numeric(last) {
        return parse_ipv4_literal(&host)
            .map(|a| Host::Ip(IpAddr::V4(a)))
            .ok_or_else(|| bad(format!("{host:?} is not a valid IPv4 address")));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(bad(format!("{host:?} is not a host name")));
    }
    Ok(Host::Name(host))
}

fn looks_numeric(label: &str) -> bool {
    !label.is_empty()
        && (label.bytes().all(|b| b.is_ascii_digit())
            || label
                .strip_prefix("0x")
                .or_else(|| label.strip_prefix("0X"))
                .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())))
}

/// inet_aton: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x); the last part fills the
/// remaining bytes (`127.1` is 127.0.0.1, `2130706433` too).
fn parse_ipv4_literal(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(4);
    for p in &parts {
        let n = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
            if h.is_empty() { 0 } else { u64::from_str_radix(h, 16).ok()? }
        } else if p.len() > 1 && p.starts_with('0') {
            u64::from_str_radix(&p[1..], 8).ok()?
        } else {
            p.parse::<u64>().ok()?
        };
        nums.push(n);
    }
    let (last, head) = nums.split_last()?;
    if head.iter().any(|n| *n > 255) {
        return None;
    }
    let room = 8 * (4 - head.len() as u32);
    if room < 64 && *last >= (1u64 << room) {
        return None;
    }
    let mut v: u64 = 0;
    for (i, n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i as u32);
    }
    v |= last;
    u32::try_from(v).ok().map(Ipv4Addr::from)
}

/// Addresses exempted from the exclusion list (`COURRIER_EGRESS_ALLOW`, comma-separated CIDRs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList(Vec<ipnet::IpNet>);

impl AllowList {
    pub fn parse(raw: &str) -> Result<Self, String> {
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<ipnet::IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| format!("{s:?} is not a CIDR such as 127.0.0.0/8"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(&ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether an address lies in the exclusion list: private, loopback, link-local (the cloud
/// metadata address 169.254.169.254 with it), CGNAT, unique-local, NAT64, IPv4 embedded in IPv6,
/// multicast, broadcast, unspecified, and the documentation and benchmark ranges.
pub fn is_excluded(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => v4_excluded(a),
        IpAddr::V6(a) => v6_excluded(a),
    }
}

fn v4_excluded(a: Ipv4Addr) -> bool {
    let [b0, b1, b2, _] = a.octets();
    b0 == 0 // 0.0.0.0/8, "this network"
        || b0 == 10
        || b0 == 127
        || (b0 == 100 && (64..128).contains(&b1)) // CGNAT 100.64.0.0/10
        || (b0 == 169 && b1 == 254) // link-local, metadata
        || (b0 == 172 && (16..32).contains(&b1))
        || (b0 == 192 && b1 == 168)
        || (b0 == 192 && b1 == 0 && (b2 == 0 || b2 == 2)) // IETF protocol assignments, TEST-NET-1
        || (b0 == 198 && (b1 == 18 || b1 == 19)) // benchmarking
        || (b0 == 198 && b1 == 51 && b2 == 100) // TEST-NET-2
        || (b0 == 203 && b1 == 0 && b2 == 113) // TEST-NET-3
        || b0 >= 224 // multicast 224/4, reserved 240/4, broadcast
}

fn v6_excluded(a: Ipv6Addr) -> bool {
    let s = a.segments();
    a.is_unspecified()
        || a.is_loopback()
        // IPv4-compatible (::a.b.c.d) and IPv4-mapped (::ffff:a.b.c.d): an IPv4 address in
        // disguise; refused whole rather than trusting every stack to map them alike.
        || (s[0..5] == [0, 0, 0, 0, 0] && (s[5] == 0 || s[5] == 0xffff))
        || (s[0] == 0x64 && s[1] == 0xff9b) // NAT64 64:ff9b::/96 and 64:ff9b:1::/48
        || (s[0] & 0xfe00) == 0xfc00 // unique-local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated, still routed inside some sites)
        || (s[0] & 0xff00) == 0xff00 // multicast
        || s[0] == 0x2002 // 6to4: embeds an IPv4 address
        || (s[0] == 0x2001 && s[1] == 0) // Teredo: embeds one too
        || (s[0] == 0x2001 && s[1] == 0xdb8) // documentation
        || (s[0] == 0x100 && s[1..4] == [0, 0, 0]) // discard-only 100::/64
}

/// A header of an outgoing request.
pub type Header = (&'static str, String);

/// What the HTTPS port is asked to send: to `addr` (already validated), with SNI and `Host` of
/// the URL's host.
#[derive(Debug)]
pub struct PostRequest<'a> {
    pub addr: SocketAddr,
    pub url: &'a HttpsUrl,
    pub headers: &'a [Header],
    pub body: &'a [u8],
}

/// A response, as far as an outgoing call needs it: the status and a `Retry-After` in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostReply {
    pub status: u16,
    pub retry_after: Option<u64>,
}

/// The HTTPS port. The adapter connects to `addr` and to nothing else, never resolves, never
/// follows a redirect, and bounds its connect and read times and the response it reads.
pub trait HttpsClient: Send + Sync {
    fn post(&self, req: &PostRequest<'_>) -> Result<PostReply, String>;
}

/// The guard wired to its ports.
pub struct Egress {
    pub dns: Arc<dyn Dns>,
    pub https: Arc<dyn HttpsClient>,
    pub allow: AllowList,
}

impl Egress {
    /// Parses and checks a URL a user gives: the host must resolve, and only to allowed addresses.
    pub fn check(&self, raw: &str) -> Result<HttpsUrl, EgressError> {
        let url = parse_url(raw)?;
        self.resolve(&url)?;
        Ok(url)
    }

    /// Resolves the URL's host now and checks every address it gives; the first is the one to
    /// connect to. Refusing when any address is internal keeps a name from mixing a public address
    /// (to pass) with an internal one (to be reached by a client that tries them in turn).
    pub fn resolve(&self, url: &HttpsUrl) -> Result<SocketAddr, EgressError> {
        self.resolve_host(&url.host, url.port)
    }

    /// As [`Self::resolve`], for a host and port given apart (a mail account's server).
    pub fn resolve_host(&self, host_of: &Host, port: u16) -> Result<SocketAddr, EgressError> {
        let host = host_of.to_string();
        let addrs = match host_of {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => {
                let found = self
                    .dns
                    .lookup_ip(name)
                    .map_err(|e| EgressError::Unresolvable { host: host.clone(), reason: e.0 })?;
                if found.is_empty() {
                    return Err(EgressError::Unresolvable { host, reason: "no address".into() });
                }
                found
            }
        };
        if let Some(bad) = addrs.iter().find(|a| is_excluded(**a) && !self.allow.contains(**a)) {
            return Err(EgressError::Refused { host, addr: *bad });
        }
        Ok(SocketAddr::new(addrs[0], port))
    }

    /// POSTs `body` to the URL: resolved and checked again now, sent to the checked address.
    pub fn post(&self, url: &HttpsUrl, headers: &[Header], body: &[u8]) -> Result<PostReply, EgressError> {
        let addr = self.resolve(url)?;
        self.https
            .post(&PostRequest { addr, url, headers, body })
            .map_err(|reason| EgressError::Transport { host: url.host.to_string(), reason })
    }
}

/// Ports that reach nothing: for wirings that make no outgoing call (unit tests of other rules).
pub struct Offline;

impl Dns for Offline {
    fn lookup_ip(&self, _: &str) -> Result<Vec<IpAddr>, crate::kernel::DnsError> {
        Err(crate::kernel::DnsError("no resolver in this wiring".into()))
    }

    fn lookup_txt(&self, _: &str) -> Result<Vec<String>, crate::kernel::DnsError> {
        Err(crate::kernel::DnsError("no resolver in this wiring".into()))
    }
}

impl HttpsClient for Offline {
    fn post(&self, _: &PostRequest<'_>) -> Result<PostReply, String> {
        Err("no network in this wiring".into())
    }
}

impl Egress {
    pub fn offline() -> Self {
        Self { dns: Arc::new(Offline), https: Arc::new(Offline), allow: AllowList::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::TableDns;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder(Mutex<Vec<(SocketAddr, String)>>);

    impl HttpsClient for Recorder {
        fn post(&self, req: &PostRequest<'_>) -> Result<PostReply, String> {
            self.0.lock().unwrap().push((req.addr, req.url.authority()));
            Ok(PostReply { status: 200, retry_after: None })
        }
    }

    fn guard(dns: TableDns) -> (Egress, Arc<Recorder>) {
        let rec = Arc::new(Recorder::default());
        (Egress { dns: Arc::new(dns), https: rec.clone(), allow: AllowList::default() }, rec)
    }

    fn refused(g: &Egress, url: &str) -> bool {
        matches!(g.check(url), Err(EgressError::Refused { .. }))
    }

    #[test]
    fn ipv4_literals_in_every_form_are_read_as_resolvers_read_them() {
        for (lit, want) in [
            ("127.0.0.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("017700000001", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("0177.0.0.01", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("0x7F.0.0.0x1", "127.0.0.1"),
            ("127.0.0.1.", "127.0.0.1"),
            ("169.254.43518", "169.254.169.254"),
            ("0xa9fea9fe", "169.254.169.254"),
            ("10.0.0.1..", "10.0.0.1"),
            ("0", "0.0.0.0"),
        ] {
            assert_eq!(parse_host(lit), Ok(Host::Ip(want.parse().unwrap())), "{lit}");
        }
        for bad in ["256.0.0.1", "1.2.3.4.5", "0x1g.1", "09.1.1.1", "4294967296", "1.2.65536"] {
            assert!(parse_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_bypass_form_of_an_internal_address_is_refused() {
        let (g, rec) = guard(TableDns::default());
        for url in [
            "https://127.0.0.1/",
            "https://2130706433/",
            "https://017700000001/",
            "https://0x7f000001/",
            "https://0x7f.1:8443/x",
            "https://127.1/",
            "https://127.0.0.1./",
            "https://LOCALHOST.127.0.0.1.",
            "https://[::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:7f00:1]/",
            "https://[::127.0.0.1]/",
            "https://[::ffff:8.8.8.8]/",
            "https://[64:ff9b::a00:1]/",
            "https://[fc00::1]/",
            "https://[fd12:3456::1]/",
            "https://[fe80::1]/",
            "https://[ff02::1]/",
            "https://[::]/",
            "https://[2002:7f00:1::]/",
            "https://10.1.2.3/",
            "https://172.16.0.1/",
            "https://172.31.255.255/",
            "https://192.168.1.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/",
            "https://100.127.255.255/",
            "https://0.0.0.0/",
            "https://0/",
            "https://224.0.0.1/",
            "https://255.255.255.255/",
        ] {
            assert!(refused(&g, url) || g.check(url).is_err(), "{url} passed");
        }
        assert!(rec.0.lock().unwrap().is_empty());
        // Neighbours of the ranges are public.
        for ok in ["https://172.32.0.1/", "https://100.128.0.1/", "https://8.8.8.8/", "https://[2606:4700::1111]/"] {
            assert!(g.check(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn only_https_urls_without_credentials_are_read() {
        let (g, _) = guard(TableDns::default().with_ip("hooks.example.com", &[&["93.184.215.14"]]));
        assert_eq!(g.check("http://hooks.example.com/"), Err(EgressError::NotHttps));
        assert_eq!(g.check("ftp://hooks.example.com/"), Err(EgressError::NotHttps));
        assert_eq!(g.check("hooks.example.com"), Err(EgressError::NotHttps));
        for bad in [
            "https://user:pw@hooks.example.com/",
            "https://hooks.example.com:0/",
            "https://hooks.example.com:65536/",
            "https://hooks.example.com:-1/",
            "https://hooks.example.com/a b",
            "https://hooks.example.com/\n",
            "https://exämple.com/",
            "https://[::1/",
            "https:///x",
            "https://hooks.example.com\\@evil.com/",
        ] {
            assert!(matches!(g.check(bad), Err(EgressError::BadUrl(_))), "{bad}: {:?}", g.check(bad));
        }
        let url = g.check("HTTPS://Hooks.Example.COM.:8443/in?x=1#frag").unwrap();
        assert_eq!(url.normalized(), "https://hooks.example.com:8443/in?x=1");
        assert_eq!(g.check("https://hooks.example.com").unwrap().path, "/");
    }

    #[test]
    fn a_name_resolving_to_a_private_address_is_refused_and_so_is_a_mixed_answer() {
        let dns = TableDns::default()
            .with_ip("internal.example.com", &[&["10.0.0.5"]])
            .with_ip("mixed.example.com", &[&["93.184.215.14", "127.0.0.1"]])
            .with_ip("v6.example.com", &[&["fd00::1"]]);
        let (g, _) = guard(dns);
        assert!(refused(&g, "https://internal.example.com/hook"));
        assert!(refused(&g, "https://mixed.example.com/hook"));
        assert!(refused(&g, "https://v6.example.com/hook"));
        assert!(matches!(g.check("https://nowhere.example.com/"), Err(EgressError::Unresolvable { .. })));
    }

    #[test]
    fn a_name_whose_address_changes_after_the_check_is_refused_at_send_time() {
        // First answer public (the check at creation passes), then loopback (a rebinding).
        let dns = TableDns::default().with_ip("rebind.example.com", &[&["93.184.215.14"], &["127.0.0.1"]]);
        let (g, rec) = guard(dns);
        let url = g.check("https://rebind.example.com/hook").unwrap();
        let sent = g.post(&url, &[], b"{}");
        assert!(matches!(sent, Err(EgressError::Refused { .. })), "{sent:?}");
        assert!(rec.0.lock().unwrap().is_empty(), "nothing was sent");
    }

    #[test]
    fn the_connection_goes_to_the_checked_address_with_the_original_name() {
        let dns = TableDns::default().with_ip("hooks.example.com", &[&["93.184.215.14"]]);
        let (g, rec) = guard(dns);
        let url = g.check("https://hooks.example.com:8443/x").unwrap();
        g.post(&url, &[], b"{}").unwrap();
        let sent = rec.0.lock().unwrap();
        assert_eq!(sent[0], ("93.184.215.14:8443".parse().unwrap(), "hooks.example.com:8443".into()));
    }

    #[test]
    fn the_allow_list_exempts_its_ranges_only() {
        let dns = TableDns::default().with_ip("hooks.test", &[&["127.0.0.1"]]);
        let (mut g, _) = guard(dns);
        g.allow = AllowList::parse("127.0.0.0/8, 192.0.2.7").unwrap();
        assert!(g.check("https://hooks.test:8443/").is_ok());
        assert!(g.check("https://2130706433/").is_ok());
        assert!(g.check("https://192.0.2.7/").is_ok());
        assert!(refused(&g, "https://192.0.2.8/"));
        assert!(refused(&g, "https://10.0.0.1/"));
        assert!(refused(&g, "https://[::ffff:127.0.0.1]/"), "the mapped form is not in an IPv4 range");
        assert!(AllowList::parse("127.0.0.0/33").is_err());
        assert!(AllowList::parse("localhost").is_err());
        assert_eq!(AllowList::parse(" ").unwrap(), AllowList::default());
    }
}
