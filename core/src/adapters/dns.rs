//! The DNS port over hickory-resolver 0.26 (the maintained successor of trust-dns-resolver). It
//! is async only: a private tokio runtime with ONE worker thread drives it, and callers block on
//! it, so they stay synchronous. Not a current-thread runtime per caller, as first planned: the
//! resolver spawns its name-server connections' background tasks on the runtime that opened
//! them, and a cached connection opened under one caller's current-thread runtime would stall
//! while another caller used it (hickory's docs warn of that deadlock). The worker thread keeps
//! every background task running whoever waits.
//!
//! Both the time-out AND the number of attempts are set: hickory's total wait is time-out x
//! attempts, and its defaults (5 s x 2) would hold a DNS check 10 s per record.

use crate::kernel::{Dns, DnsError};
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One query's wait; with [`ATTEMPTS`], the most one lookup takes.
pub const QUERY_TIMEOUT: Duration = Duration::from_millis(1500);
pub const ATTEMPTS: usize = 2;

pub struct HickoryDns {
    resolver: TokioResolver,
    /// Always `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for HickoryDns {
    fn drop(&mut self) {
        // The last owner may be a task of the HTTP runtime, where a blocking shutdown would panic.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl HickoryDns {
    /// `server`: `COURRIER_DNS_SERVER` (`ip` or `ip:port`), else the system's resolv.conf.
    pub fn new(server: Option<SocketAddr>) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("courrier-dns")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the resolver's runtime: {e}"))?;
        // The resolver's handles spawn on the runtime they are built in.
        let _entered = runtime.enter();
        let provider = TokioRuntimeProvider::default();
        let mut builder = match server {
            Some(addr) => {
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                TokioResolver::builder_with_config(ResolverConfig::from_name_servers(vec![ns]), provider)
            }
            None => TokioResolver::builder(provider).map_err(|e| format!("cannot read the system resolver: {e}"))?,
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.timeout = QUERY_TIMEOUT;
        opts.attempts = ATTEMPTS;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // A configured server is the whole truth (tests); otherwise /etc/hosts answers first, as
        // for every other program of the machine.
        opts.use_hosts_file = if server.is_some() { ResolveHosts::Never } else { ResolveHosts::Auto };
        // Names are looked up as given: no search domains appended to a user's host.
        opts.ndots = 0;
        let resolver = builder.build().map_err(|e| format!("cannot build the resolver: {e}"))?;
        drop(_entered);
        Ok(Self { resolver, runtime: Some(runtime) })
    }

    /// Callers are synchronous threads (the blocking pool, workers, the CLI), never tasks of a
    /// runtime, where blocking would panic.
    fn block_on<T>(&self, f: impl std::future::Future<Output = T>) -> Result<T, DnsError> {
        match &self.runtime {
            Some(rt) => Ok(rt.block_on(f)),
            None => Err(DnsError("the resolver is shut down".into())),
        }
    }
}

/// Fully qualified, so no search domain is tried.
fn fqdn(name: &str) -> String {
    if name.ends_with('.') { name.to_owned() } else { format!("{name}.") }
}

fn failure(e: &hickory_resolver::net::NetError) -> Option<DnsError> {
    // NXDOMAIN and NODATA are answers ("nothing there"), not failures.
    (!e.is_no_records_found()).then(|| DnsError(e.to_string()))
}

impl Dns for HickoryDns {
    fn lookup_ip(&self, name: &str) -> Result<Vec<IpAddr>, DnsError> {
        match self.block_on(self.resolver.lookup_ip(fqdn(name)))? {
            Ok(found) => Ok(found.iter().collect()),
            Err(e) => failure(&e).map_or(Ok(Vec::new()), Err),
        }
    }

    fn lookup_txt(&self, name: &str) -> Result<Vec<String>, DnsError> {
        match self.block_on(self.resolver.txt_lookup(fqdn(name)))? {
            Ok(found) => Ok(found
                .answers()
                .iter()
                .filter_map(|r| match &r.data {
                    RData::TXT(txt) => {
                        Some(txt.txt_data.iter().map(|part| String::from_utf8_lossy(part)).collect::<String>())
                    }
                    _ => None,
                })
                .collect()),
            Err(e) => failure(&e).map_or(Ok(Vec::new()), Err),
        }
    }
}

/// Reads `COURRIER_DNS_SERVER`: `ip` (port 53) or `ip:port`.
pub fn parse_server(raw: &str) -> Result<SocketAddr, String> {
    let raw = raw.trim();
    raw.parse::<SocketAddr>()
        .or_else(|_| raw.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| format!("{raw:?} is not an address such as 127.0.0.1:5353"))
}
