//! The environment of `decisions.md`, read once at start and validated, so that a typo is a
//! clear error at launch rather than a surprise at the first request.

use courrier_core::egress::AllowList;
use courrier_core::kernel::{Code, CoreError, EmailAddress};
use courrier_core::ocr::retention::Retention;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The LMTP server's address (`COURRIER_LMTP_LISTEN`, default `127.0.0.1:8024`); `None`
    /// when set to `off`.
    pub lmtp_listen: Option<SocketAddr>,
    pub data_dir: PathBuf,
    /// Base of the links put in mails; `http://` + the listen address by default.
    pub public_url: String,
    pub log_filter: String,
    pub log_json: bool,
    /// The relay for mail out (`smtp://host[:port]`), used when a list has no own account.
    pub smtp_url: String,
    /// Sender of the installation's own notices.
    pub mail_from: EmailAddress,
    /// The first retry of a deferred copy waits this long (`COURRIER_RETRY_BASE_SECS`, default 30).
    pub retry_base_secs: i64,
    /// How long a claimed copy stays a worker's before it returns to the queue
    /// (`COURRIER_DELIVERY_LEASE_SECS`, default 300): what a crashed worker's copies wait.
    pub delivery_lease_secs: i64,
    /// Batches delivered at once to one destination domain (`COURRIER_DOMAIN_CONCURRENCY`, 20).
    pub domain_concurrency: u32,
    /// Delivery worker threads (`COURRIER_DELIVERY_WORKERS`, default 2; 0 leaves delivery to
    /// `courrier worker` processes).
    pub delivery_workers: usize,
    /// The executable run as `<exe> sandbox` to read PDFs; this binary by default. Tests that run
    /// the server inside their own process point it at the built `courrier`.
    pub ocr_sandbox_bin: Option<PathBuf>,
    /// Tesseract worker threads (each with its own engines); the number of CPUs by default.
    pub ocr_workers: usize,
    /// PDF sandbox processes running at once, shared by all requests (`COURRIER_OCR_HELPERS`,
    /// default `ocr_workers`).
    pub ocr_helpers: usize,
    /// A PDF's deadline, its wait for a sandbox process included (`COURRIER_OCR_DOCUMENT_SECS`).
    pub ocr_document_secs: u64,
    /// `POST /api/register` exists only when this is set (`COURRIER_OCR_REGISTRATION=1`).
    pub ocr_registration: bool,
    /// The `default` OCR plan's pages per user and month (`COURRIER_OCR_PAGES_PER_MONTH`, 0 = no
    /// limit, the default).
    pub ocr_pages_per_month: u32,
    /// How long OCR documents are kept (`COURRIER_OCR_RETENTION_DAYS`: days, a fraction allowed,
    /// default 90; 0 keeps them for ever).
    pub ocr_retention: courrier_core::ocr::retention::Retention,
    /// CIDRs exempted from the egress guard's exclusion list (`COURRIER_EGRESS_ALLOW`).
    pub egress_allow: AllowList,
    /// The load balancers and reverse proxies whose `X-Forwarded-For` is believed
    /// (`COURRIER_TRUSTED_PROXIES`, CIDRs): behind them, the client's address is the one they
    /// forwarded, for per-source limits and consent records.
    pub trusted_proxies: AllowList,
    /// A PEM file of extra trust roots for outgoing TLS (`COURRIER_EXTRA_CA`).
    pub extra_ca: Option<PathBuf>,
    /// The operator's keyring of mail-account passwords (`COURRIER_KEYRING`): read and checked at
    /// start (`server::wire`); absent, credential writes answer 503.
    pub keyring: Option<PathBuf>,
    /// The DNS server to ask instead of the system's (`COURRIER_DNS_SERVER`, `ip[:port]`).
    pub dns_server: Option<SocketAddr>,
    /// Memory for the in-memory search snapshots of big lists (`COURRIER_SEARCH_CACHE_MIB`, 256;
    /// 0 leaves every search to SQL).
    pub search_cache_mib: u64,
    /// Lists with at least this many members get a search snapshot (`COURRIER_SEARCH_MIN_MEMBERS`,
    /// 20,000); smaller ones are searched by SQL.
    pub search_min_members: u64,
    /// A PostgreSQL database instead of SQLite in the data directory (`COURRIER_DATABASE_URL`,
    /// `postgres://user:password@host:port/database`; issue 25). Checked here for its form;
    /// With it, every context's records are on PostgreSQL (`server::wire`).
    pub database_url: Option<String>,
    /// The key sealing the data key in the database (`COURRIER_MASTER_KEY`, base64 of 32 bytes):
    /// required with `database_url`, checked for its form here whatever the backend.
    pub master_key: Option<courrier_core::adapters::data_key::MasterKey>,
    /// Where OCR documents are kept (`COURRIER_DOCUMENTS_DIR`): a directory every server mounts.
    /// Unset: `<data dir>/documents` on SQLite, the database itself on PostgreSQL.
    pub documents_dir_set: Option<PathBuf>,
    /// How much lower than the request handlers' the CPU priority of a CSV import is
    /// (`COURRIER_IMPORT_NICENESS`, a nice value from 0 to 19, default 10; 0 runs imports at the
    /// handlers' priority).
    pub import_niceness: i32,
    /// How much lower than the LMTP sessions' and the request handlers' the CPU priority of the
    /// threads that process mail in and deliver copies is (`COURRIER_WORKER_NICENESS`, a nice
    /// value from 0 to 19, default 10): accepting a message, which a sender waits for, comes
    /// before processing and delivering it, which nobody waits on; idle cores still go to them.
    pub worker_niceness: i32,
    /// How long an LMTP store waits for the stores of other sessions still receiving a message,
    /// to share their commit (`COURRIER_LMTP_COMMIT_DELAY_US`, microseconds from 0 to 100,000,
    /// default 1,000; 0 commits at once).
    pub lmtp_commit_delay: std::time::Duration,
    /// How long at most processing of received mail waits, once it has caught up, for the LMTP
    /// sessions to fall quiet before it processes what they stored (`COURRIER_MAIL_IN_DEFER_MS`,
    /// milliseconds from 0 to 60,000, default 1,000; 0 processes at once): accepting, which a
    /// sender waits for, gets the cores and the disk during a burst of posts.
    pub mail_in_defer: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{var} is not valid: {reason}")]
    Invalid { var: &'static str, reason: String },
    /// A setting another one makes necessary.
    #[error("{var} is required: {reason}")]
    Required { var: &'static str, reason: String },
}

impl CoreError for ConfigError {
    fn code(&self) -> Code {
        Code::ValidationFailed
    }
}

impl Config {
    /// Reads the configuration through `get` (the process environment in production, a map in
    /// tests). `data_dir` is the `--data-dir` flag, which wins over `COURRIER_DATA_DIR`.
    pub fn from_env(get: impl Fn(&str) -> Option<String>, data_dir: Option<PathBuf>) -> Result<Self, ConfigError> {
        let invalid = |var, reason: String| ConfigError::Invalid { var, reason };
        let listen_raw = get("COURRIER_LISTEN").unwrap_or_else(|| "127.0.0.1:8080".into());
        let listen: SocketAddr = listen_raw.parse().map_err(|e| {
            invalid("COURRIER_LISTEN", format!("{listen_raw:?} is not an address such as 127.0.0.1:8080 ({e})"))
        })?;
        let data_dir = data_dir
            .or_else(|| get("COURRIER_DATA_DIR").map(PathBuf::from))
            .unwrap_or_else(|| "./courrier-data".into());
        let public_url = match get("COURRIER_PUBLIC_URL") {
            None => format!("http://{listen}"),
            Some(url) => {
                let url = url.trim_end_matches('/').to_owned();
                if !(url.starts_with("http://") || url.starts_with("https://")) || url.contains(char::is_whitespace) {
                    return Err(invalid("COURRIER_PUBLIC_URL", format!("{url:?} must be an http:// or https:// URL")));
                }
                url
            }
        };
        let log_json = match get("COURRIER_LOG_FORMAT").as_deref() {
            None | Some("" | "text" | "human") => false,
            Some("json") => true,
            Some(other) => {
                return Err(invalid("COURRIER_LOG_FORMAT", format!("{other:?} is neither text nor json")));
            }
        };
        let smtp_url = get("COURRIER_SMTP_URL").unwrap_or_else(|| "smtp://127.0.0.1:25".into());
        let mail_from = match get("COURRIER_MAIL_FROM") {
            Some(raw) => EmailAddress::parse(raw.trim()).map_err(|e| invalid("COURRIER_MAIL_FROM", e.to_string()))?,
            None => default_mail_from(&public_url),
        };
        let number = |var: &'static str, default: i64, range: std::ops::RangeInclusive<i64>| match get(var) {
            None => Ok(default),
            Some(raw) => raw.trim().parse::<i64>().ok().filter(|n| range.contains(n)).ok_or_else(|| {
                invalid(var, format!("{raw:?} is not an integer from {} to {}", range.start(), range.end()))
            }),
        };
        let retry_base_secs = number("COURRIER_RETRY_BASE_SECS", 30, 1..=86_400)?;
        let delivery_lease_secs = number("COURRIER_DELIVERY_LEASE_SECS", 300, 2..=86_400)?;
        let domain_concurrency = number("COURRIER_DOMAIN_CONCURRENCY", 20, 1..=1_000)? as u32;
        let delivery_workers = number("COURRIER_DELIVERY_WORKERS", 2, 0..=64)? as usize;
        let lmtp_listen = match get("COURRIER_LMTP_LISTEN").as_deref().map(str::trim) {
            None | Some("") => Some(SocketAddr::from(([127, 0, 0, 1], 8024))),
            Some("off") => None,
            Some(raw) => Some(raw.parse::<SocketAddr>().map_err(|e| {
                invalid(
                    "COURRIER_LMTP_LISTEN",
                    format!("{raw:?} is neither `off` nor an address such as 127.0.0.1:8024 ({e})"),
                )
            })?),
        };
        let ocr_workers = match get("COURRIER_OCR_WORKERS") {
            None => std::thread::available_parallelism().map_or(1, usize::from),
            Some(raw) => match raw.trim().parse::<usize>() {
                Ok(n @ 1..=64) => n,
                _ => return Err(invalid("COURRIER_OCR_WORKERS", format!("{raw:?} is not a number from 1 to 64"))),
            },
        };
        let ocr_helpers = number("COURRIER_OCR_HELPERS", ocr_workers as i64, 1..=64)? as usize;
        let ocr_document_secs = number("COURRIER_OCR_DOCUMENT_SECS", 60, 1..=3_600)? as u64;
        let ocr_registration = match get("COURRIER_OCR_REGISTRATION").as_deref().map(str::trim) {
            None | Some("" | "0" | "false") => false,
            Some("1" | "true") => true,
            Some(other) => return Err(invalid("COURRIER_OCR_REGISTRATION", format!("{other:?} is neither 0 nor 1"))),
        };
        let ocr_pages_per_month = number("COURRIER_OCR_PAGES_PER_MONTH", 0, 0..=1_000_000_000)? as u32;
        let ocr_retention = match get("COURRIER_OCR_RETENTION_DAYS") {
            None => Retention::DEFAULT,
            Some(raw) => raw.trim().parse::<f64>().ok().and_then(Retention::from_days).ok_or_else(|| {
                invalid(
                    "COURRIER_OCR_RETENTION_DAYS",
                    format!(
                        "{raw:?} is not a number of days from 0 (keep for ever) to {} (fractions allowed, e.g. 0.5)",
                        Retention::MAX_DAYS
                    ),
                )
            })?,
        };
        let search_cache_mib = number("COURRIER_SEARCH_CACHE_MIB", 256, 0..=1 << 20)? as u64;
        let search_min_members = number("COURRIER_SEARCH_MIN_MEMBERS", 20_000, 1..=1_000_000_000)? as u64;
        let import_niceness = number("COURRIER_IMPORT_NICENESS", 10, 0..=19)? as i32;
        let worker_niceness = number("COURRIER_WORKER_NICENESS", 10, 0..=19)? as i32;
        let lmtp_commit_delay =
            std::time::Duration::from_micros(number("COURRIER_LMTP_COMMIT_DELAY_US", 1_000, 0..=100_000)? as u64);
        let mail_in_defer =
            std::time::Duration::from_millis(number("COURRIER_MAIL_IN_DEFER_MS", 1_000, 0..=60_000)? as u64);
        let egress_allow = AllowList::parse(&get("COURRIER_EGRESS_ALLOW").unwrap_or_default())
            .map_err(|e| invalid("COURRIER_EGRESS_ALLOW", e))?;
        let trusted_proxies = AllowList::parse(&get("COURRIER_TRUSTED_PROXIES").unwrap_or_default())
            .map_err(|e| invalid("COURRIER_TRUSTED_PROXIES", e))?;
        let extra_ca = get("COURRIER_EXTRA_CA").filter(|s| !s.trim().is_empty()).map(PathBuf::from);
        let keyring = get("COURRIER_KEYRING").filter(|s| !s.trim().is_empty()).map(PathBuf::from);
        let dns_server = get("COURRIER_DNS_SERVER")
            .filter(|s| !s.trim().is_empty())
            .map(|s| courrier_core::adapters::dns::parse_server(&s).map_err(|e| invalid("COURRIER_DNS_SERVER", e)))
            .transpose()?;
        let database_url = get("COURRIER_DATABASE_URL")
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .map(|url| {
                courrier_store_postgres::check_url(&url).map(|()| url).map_err(|e| invalid("COURRIER_DATABASE_URL", e))
            })
            .transpose()?;
        let master_key = get("COURRIER_MASTER_KEY")
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                courrier_core::adapters::data_key::MasterKey::parse(&s).map_err(|e| invalid("COURRIER_MASTER_KEY", e))
            })
            .transpose()?;
        let documents_dir_set = get("COURRIER_DOCUMENTS_DIR").filter(|s| !s.trim().is_empty()).map(PathBuf::from);
        Ok(Self {
            database_url,
            master_key,
            documents_dir_set,
            ocr_pages_per_month,
            ocr_retention,
            egress_allow,
            trusted_proxies,
            extra_ca,
            keyring,
            dns_server,
            search_cache_mib,
            search_min_members,
            import_niceness,
            worker_niceness,
            lmtp_commit_delay,
            mail_in_defer,
            retry_base_secs,
            delivery_lease_secs,
            domain_concurrency,
            delivery_workers,
            ocr_sandbox_bin: get("COURRIER_OCR_SANDBOX_BIN").map(PathBuf::from),
            ocr_workers,
            ocr_helpers,
            ocr_document_secs,
            ocr_registration,
            smtp_url,
            mail_from,
            listen,
            lmtp_listen,
            data_dir,
            public_url,
            log_filter: get("COURRIER_LOG").unwrap_or_else(|| "info".into()),
            log_json,
        })
    }

    pub fn public_host(&self) -> &str {
        host_of(&self.public_url)
    }

    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("courrier.db")
    }

    pub fn documents_dir(&self) -> PathBuf {
        self.documents_dir_set.clone().unwrap_or_else(|| self.data_dir.join("documents"))
    }

    /// Whether OCR documents are kept in files (SQLite, or `COURRIER_DOCUMENTS_DIR` set) rather
    /// than in the PostgreSQL database.
    pub fn documents_in_files(&self) -> bool {
        self.database_url.is_none() || self.documents_dir_set.is_some()
    }
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

/// `courrier@` the public URL's host when it is a domain name; a placeholder domain otherwise
/// (an IP address cannot follow the @ of a plain address).
fn default_mail_from(public_url: &str) -> EmailAddress {
    EmailAddress::parse(&format!("courrier@{}", host_of(public_url)))
        .or_else(|_| EmailAddress::parse("courrier@localhost.localdomain"))
        .expect("the placeholder address is valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)], flag: Option<&str>) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        Config::from_env(|k| map.get(k).cloned(), flag.map(PathBuf::from))
    }

    #[test]
    fn the_master_key_is_checked_and_the_documents_dir_set_apart_from_the_data_dir() {
        let c = config(&[], Some("/d")).unwrap();
        assert!(c.master_key.is_none() && c.documents_in_files());
        assert_eq!(c.documents_dir(), PathBuf::from("/d/documents"));
        let url = ("COURRIER_DATABASE_URL", "postgres://u:p@h:5432/db");
        let key = "WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo=";
        let c = config(&[url, ("COURRIER_MASTER_KEY", key)], Some("/d")).unwrap();
        assert!(c.master_key.is_some() && !c.documents_in_files(), "documents in the database");
        let c = config(&[url, ("COURRIER_DOCUMENTS_DIR", "/shared/docs")], Some("/d")).unwrap();
        assert!(c.documents_in_files());
        assert_eq!(c.documents_dir(), PathBuf::from("/shared/docs"));
        let err = config(&[("COURRIER_MASTER_KEY", "WlpaWg==")], None).unwrap_err().to_string();
        assert!(err.starts_with("COURRIER_MASTER_KEY is not valid: it holds 4 bytes"), "{err}");
        assert!(!err.contains("WlpaWg"), "{err}");
    }

    #[test]
    fn a_database_url_is_a_postgres_url_and_absent_by_default() {
        assert_eq!(config(&[], None).unwrap().database_url, None);
        assert_eq!(config(&[("COURRIER_DATABASE_URL", " ")], None).unwrap().database_url, None, "empty is unset");
        let url = "postgres://courrier:secret@db.example.org:5432/courrier";
        assert_eq!(config(&[("COURRIER_DATABASE_URL", url)], None).unwrap().database_url.as_deref(), Some(url));
        for bad in [
            "mysql://u@h/db",
            "sqlite:///tmp/x.db",
            "host=db user=courrier password=secret",
            "postgres://u:secret@h:notaport/db",
            "postgres://u@h:notaport/db?password=secret&application_name=x",
        ] {
            let err = config(&[("COURRIER_DATABASE_URL", bad)], None).unwrap_err().to_string();
            assert!(err.starts_with("COURRIER_DATABASE_URL is not valid"), "{bad}: {err}");
            assert!(!err.contains("secret"), "the password is not printed: {err}");
        }
    }

    #[test]
    fn defaults_are_those_of_the_contract() {
        let c = config(&[], None).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("./courrier-data"));
        assert_eq!(c.public_url, "http://127.0.0.1:8080");
        assert_eq!(c.database_path(), PathBuf::from("./courrier-data/courrier.db"));
        assert!(!c.log_json);
        assert_eq!(c.smtp_url, "smtp://127.0.0.1:25");
        assert_eq!(c.mail_from.to_string(), "courrier@localhost.localdomain");
        let c = config(&[("COURRIER_PUBLIC_URL", "https://lists.example.org:8443/x")], None).unwrap();
        assert_eq!(c.mail_from.to_string(), "courrier@lists.example.org");
        assert!(config(&[("COURRIER_MAIL_FROM", "not an address")], None).is_err());
        assert_eq!(c.ocr_retention, Retention::from_days(90.0).unwrap());
        let kept = config(&[("COURRIER_OCR_RETENTION_DAYS", "0")], None).unwrap();
        assert_eq!(kept.ocr_retention, Retention::Forever);
        let half = config(&[("COURRIER_OCR_RETENTION_DAYS", " 0.5 ")], None).unwrap();
        assert_eq!(half.ocr_retention, Retention::After { micros: 43_200_000_000 });
    }

    #[test]
    fn trusted_proxies_are_cidrs_or_addresses_and_none_by_default() {
        assert!(config(&[], None).unwrap().trusted_proxies.is_empty(), "no header believed unless told");
        let c = config(&[("COURRIER_TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.7")], None).unwrap();
        assert!(c.trusted_proxies.contains("10.1.2.3".parse().unwrap()));
        assert!(c.trusted_proxies.contains("192.0.2.7".parse().unwrap()));
        assert!(!c.trusted_proxies.contains("192.0.2.8".parse().unwrap()));
        let err = config(&[("COURRIER_TRUSTED_PROXIES", "the balancer")], None).unwrap_err().to_string();
        assert!(err.starts_with("COURRIER_TRUSTED_PROXIES is not valid"), "{err}");
    }

    #[test]
    fn the_flag_wins_over_the_variable() {
        let c = config(&[("COURRIER_DATA_DIR", "/env")], Some("/flag")).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/flag"));
        let c = config(&[("COURRIER_DATA_DIR", "/env")], None).unwrap();
        assert_eq!(c.data_dir, PathBuf::from("/env"));
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (var, value) in [
            ("COURRIER_LISTEN", "localhost"),
            ("COURRIER_PUBLIC_URL", "ftp://x"),
            ("COURRIER_LOG_FORMAT", "xml"),
            ("COURRIER_EGRESS_ALLOW", "127.0.0.0/8,nope"),
            ("COURRIER_DNS_SERVER", "dns.example:53"),
            ("COURRIER_OCR_RETENTION_DAYS", "-1"),
            ("COURRIER_OCR_RETENTION_DAYS", "ninety"),
            ("COURRIER_OCR_RETENTION_DAYS", "36501"),
            ("COURRIER_OCR_RETENTION_DAYS", "NaN"),
            ("COURRIER_OCR_RETENTION_DAYS", ""),
            ("COURRIER_IMPORT_NICENESS", "20"),
            ("COURRIER_IMPORT_NICENESS", "-5"),
            ("COURRIER_WORKER_NICENESS", "20"),
            ("COURRIER_LMTP_COMMIT_DELAY_US", "100001"),
            ("COURRIER_LMTP_COMMIT_DELAY_US", "-1"),
            ("COURRIER_MAIL_IN_DEFER_MS", "60001"),
        ] {
            let err = config(&[(var, value)], None).unwrap_err().to_string();
            assert!(err.starts_with(var), "{err}");
        }
        let c = config(&[("COURRIER_PUBLIC_URL", "https://lists.example.org/")], None).unwrap();
        assert_eq!(c.public_url, "https://lists.example.org");
        assert_eq!(c.import_niceness, 10, "imports run below requests by default");
        assert_eq!(config(&[("COURRIER_IMPORT_NICENESS", "0")], None).unwrap().import_niceness, 0);
    }

    #[test]
    fn accepting_mail_comes_before_processing_it_by_default() {
        let c = config(&[], None).unwrap();
        assert_eq!(c.worker_niceness, 10, "processing and delivery run below the LMTP sessions");
        assert_eq!(c.lmtp_commit_delay, std::time::Duration::from_millis(1));
        let c = config(&[("COURRIER_WORKER_NICENESS", "0"), ("COURRIER_LMTP_COMMIT_DELAY_US", "0")], None).unwrap();
        assert_eq!((c.worker_niceness, c.lmtp_commit_delay), (0, std::time::Duration::ZERO));
    }
}
