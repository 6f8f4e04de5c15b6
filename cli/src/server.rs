//! `courrier serve`: wire the adapters from the configuration and serve HTTP until a signal.

use crate::config::Config;
use crate::config::ConfigError;
use crate::error::CliError;
use courrier_core::adapters::{smtp::SmtpTransport, system_clock::SystemClock};
use courrier_core::kernel::{BuildInfo, Clock, Settings, VersionInfo};
use courrier_core::mailing::delivery::DeliveryConfig;
use courrier_core::storage::Database;
use courrier_core::{access, mailing, ocr};
use courrier_http::server::ServerLimits;
use courrier_store_sqlite::SqliteStore;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

/// The composition root's work: one service per context, each holding only the ports it uses,
/// all over one database. Commands take the service of the context they administer.
#[derive(Clone)]
pub struct Services {
    pub access: Arc<access::Service>,
    pub mailing: Arc<mailing::Service>,
    pub ocr: Arc<ocr::Service>,
    pub database: Arc<dyn Database>,
    /// The installation's job locks: which process runs each periodic job (`chores.rs`).
    pub jobs: Arc<dyn courrier_core::storage::jobs::JobLocks>,
    pub build: BuildInfo,
}

impl Services {
    pub fn version(&self) -> VersionInfo {
        courrier_core::system::version(&self.build, &*self.database)
    }
}

/// One database as each context sees it (the same object behind each handle).
struct Stores {
    access: Arc<access::ports::Store>,
    mailing: Arc<mailing::ports::Store>,
    ocr: Arc<ocr::ports::Store>,
    database: Arc<dyn Database>,
}

fn stores<S>(store: Arc<S>) -> Stores
where
    S: Database
        + courrier_core::storage::Store<dyn access::ports::Tx>
        + courrier_core::storage::Store<dyn mailing::ports::Tx>
        + courrier_core::storage::Store<dyn ocr::ports::Tx>
        + 'static,
{
    Stores { access: store.clone(), mailing: store.clone(), ocr: store.clone(), database: store }
}

/// What the backend gives beyond its stores: the data key, and on PostgreSQL the documents' store
/// and the quotas every server shares.
struct Backend {
    stores: Stores,
    data_key: courrier_core::kernel::sealed::DataKey,
    /// `None`: the documents' directory.
    blobs: Option<Arc<dyn ocr::blobs::BlobStore>>,
    /// `None`: counted in this process.
    limits: Option<(Arc<dyn access::limits::Limits>, Arc<dyn access::limits::Counters>)>,
    /// Who runs each periodic job of the installation.
    jobs: Arc<dyn courrier_core::storage::jobs::JobLocks>,
    /// Where LMTP commits what it accepts; `None`: the main database itself.
    spool: Option<Arc<dyn mailing::ports::Spool>>,
}

/// On PostgreSQL (`COURRIER_DATABASE_URL`) every server reads the data key from the database,
/// sealed by `COURRIER_MASTER_KEY`: without it, refused before anything is created or connected.
fn master_key(config: &Config) -> Result<Option<&courrier_core::adapters::data_key::MasterKey>, ConfigError> {
    match (&config.database_url, &config.master_key) {
        (None, _) => Ok(None),
        (Some(_), Some(key)) => Ok(Some(key)),
        (Some(_), None) => Err(ConfigError::Required {
            var: "COURRIER_MASTER_KEY",
            reason: "with COURRIER_DATABASE_URL every server reads the installation's data key (webhook secrets, \
                     DKIM keys) from the database, sealed by this key: give every server the same base64 32-byte \
                     key (make one with `openssl rand -base64 32`)"
                .into(),
        }),
    }
}

fn open_backend(config: &Config, now_micros: i64) -> Result<Backend, CliError> {
    let Some(url) = &config.database_url else {
        let store = SqliteStore::open(&config.database_path(), now_micros)?;
        store.set_search_limits(courrier_store_sqlite::SearchLimits {
            min_members: config.search_min_members,
            budget_bytes: usize::try_from(config.search_cache_mib << 20).unwrap_or(usize::MAX),
            ..Default::default()
        });
        let data_key = courrier_core::adapters::data_key::load_or_create(&config.data_dir)
            .map_err(|reason| ConfigError::Invalid { var: "COURRIER_DATA_DIR", reason })?;
        // One host holds a SQLite installation: a lock file per job in its data directory.
        let jobs = Arc::new(courrier_core::adapters::job_files::FileJobLocks::new(
            config.data_dir.join("jobs"),
            courrier_core::adapters::job_files::this_process(),
        ));
        // Accepted mail is committed in a file of its own, so an LMTP 250 never waits for the main
        // database's writer (processing and delivery commit there). Missing: created; unreadable:
        // the start is refused (it may hold acknowledged mail).
        let spool = courrier_store_sqlite::SqliteSpool::open(&config.data_dir.join("spool.db"))?;
        let spool: Option<Arc<dyn mailing::ports::Spool>> = Some(Arc::new(spool));
        return Ok(Backend { stores: stores(Arc::new(store)), data_key, blobs: None, limits: None, jobs, spool });
    };
    let master = master_key(config)?.expect("checked before");
    let store = courrier_store_postgres::PostgresStore::open(url, now_micros)?;
    let data_key = store.data_key(master, now_micros).map_err(|e| match e {
        courrier_store_postgres::DataKeyError::Store(e) => CliError::from(e),
        other => ConfigError::Invalid { var: "COURRIER_MASTER_KEY", reason: other.to_string() }.into(),
    })?;
    let blobs: Option<Arc<dyn ocr::blobs::BlobStore>> =
        if config.documents_in_files() { None } else { Some(Arc::new(store.blobs())) };
    let limits = Arc::new(store.limits());
    // Every host of the installation: a session advisory lock per job on the shared database.
    let jobs = Arc::new(store.job_locks(courrier_core::adapters::job_files::this_process()));
    // On PostgreSQL, LMTP stores in the shared database directly (no spool): a local spool per
    // server would strand acknowledged mail on a server that never comes back.
    Ok(Backend {
        stores: stores(Arc::new(store)),
        data_key,
        blobs,
        limits: Some((limits.clone(), limits)),
        jobs,
        spool: None,
    })
}

/// Creates the data directory (owner-only: it will hold the data key and the documents) and
/// opens the database: SQLite in it, or PostgreSQL at `COURRIER_DATABASE_URL`.
pub fn wire(config: &Config, build: BuildInfo) -> Result<Services, CliError> {
    master_key(config)?;
    let mut dirs = vec![&config.data_dir];
    let documents_dir = config.documents_dir();
    if config.documents_in_files() {
        dirs.push(&documents_dir);
    }
    for dir in dirs {
        create_private_dir(dir).map_err(|source| CliError::DataDir { path: dir.display().to_string(), source })?;
    }
    let clock = Arc::new(SystemClock);
    let mail = SmtpTransport::from_url(&config.smtp_url)
        .map_err(|e| ConfigError::Invalid { var: "COURRIER_SMTP_URL", reason: e.to_string() })?;
    let backend = open_backend(config, clock.now().unix_micros())?;
    let sandbox =
        config.ocr_sandbox_bin.clone().or_else(courrier_core::adapters::pdf_sandbox::default_exe).ok_or_else(|| {
            ConfigError::Invalid { var: "COURRIER_OCR_SANDBOX_BIN", reason: "cannot find this executable".into() }
        })?;
    // Scratch folders a killed server left behind hold documents users sent: not kept.
    let swept = courrier_core::adapters::pdf_sandbox::sweep_stale_scratch();
    if swept > 0 {
        tracing::info!(folders = swept, "stale PDF sandbox scratch folders removed");
    }
    let sandbox_limits = courrier_core::adapters::pdf_sandbox::SandboxLimits {
        max_helpers: config.ocr_helpers,
        wall_time: std::time::Duration::from_secs(config.ocr_document_secs),
        ..Default::default()
    };
    let mut ocr_adapters = courrier_core::adapters::ocr_adapters_with(
        &config.documents_dir(),
        sandbox,
        config.ocr_workers,
        sandbox_limits,
    );
    ocr_adapters.limits.pages_per_month = config.ocr_pages_per_month;
    ocr_adapters.limits.retention = config.ocr_retention;
    if let Some(blobs) = backend.blobs {
        ocr_adapters.blobs = blobs;
    }
    let Backend { stores, data_key, limits, jobs, spool, .. } = backend;
    let https = courrier_core::adapters::https::RustlsHttps::new(config.extra_ca.as_deref())
        .map_err(|reason| ConfigError::Invalid { var: "COURRIER_EXTRA_CA", reason })?;
    let tls = courrier_core::adapters::https::tls_config(config.extra_ca.as_deref())
        .map_err(|reason| ConfigError::Invalid { var: "COURRIER_EXTRA_CA", reason })?;
    let keyring = config.keyring.as_deref().map(load_keyring).transpose()?;
    match &keyring {
        Some(k) => tracing::info!(sealing_key = k.sealing_id(), "mail-account keyring loaded"),
        None => tracing::info!("COURRIER_KEYRING is not set: mail-account credentials cannot be written"),
    }
    let dns = courrier_core::adapters::dns::HickoryDns::new(config.dns_server)
        .map_err(|reason| ConfigError::Invalid { var: "COURRIER_DNS_SERVER", reason })?;
    let egress = courrier_core::egress::Egress {
        dns: Arc::new(dns),
        https: Arc::new(https),
        allow: config.egress_allow.clone(),
    };
    let clock: Arc<dyn Clock> = clock;
    let mail: Arc<dyn courrier_core::kernel::MailTransport> = Arc::new(mail);
    let settings = Settings { public_url: config.public_url.clone(), mail_from: config.mail_from.clone() };
    let mut access = access::Service::new(stores.access, clock.clone(), mail.clone(), settings.clone());
    if let Some((limiter, counters)) = limits {
        access = access.share_limits(limiter, counters);
    }
    let access = Arc::new(access);
    // A user's OCR documents are deleted with the account: access calls this port, naming no context.
    access.hold_user_data(Arc::new(ocr::retention::UserDocuments {
        store: stores.ocr.clone(),
        blobs: Arc::clone(&ocr_adapters.blobs),
    }));
    let mailing = Arc::new(mailing::Service {
        access: Arc::clone(&access),
        store: stores.mailing,
        clock: clock.clone(),
        mail,
        settings,
        egress,
        data_key,
        dkim: Arc::new(courrier_core::adapters::openssl_dkim::OpensslKeyMaker::default()),
        dkim_signing: Arc::new(courrier_core::adapters::mail_auth_dkim::MailAuthDkim),
        dkim_verifying: Arc::new(courrier_core::adapters::mail_auth_dkim::MailAuthDkim),
        credentials: mailing::credentials::Credentials::new(
            keyring,
            Arc::new(courrier_core::adapters::mail_accounts::RustlsAccounts::new(tls)),
        ),
        mime: Arc::new(courrier_core::adapters::mime::MailParserReader),
        mail_in: mailing::inbound::MailIn { spool, ..Default::default() },
    });
    let ocr = Arc::new(ocr::Service::new(Arc::clone(&access), stores.ocr, clock, ocr_adapters));
    Ok(Services { access, mailing, ocr, database: stores.database, jobs, build })
}

/// The keyring file: missing, unreadable or malformed stops the start, naming the variable.
fn load_keyring(path: &std::path::Path) -> Result<courrier_core::kernel::keyring::Keyring, ConfigError> {
    let invalid = |reason| ConfigError::Invalid { var: "COURRIER_KEYRING", reason };
    let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
    courrier_core::kernel::keyring::Keyring::parse(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))
}

fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// A server bound to its address, not yet serving.
pub struct Bound {
    listener: std::net::TcpListener,
    router: courrier_http::Router,
    services: Services,
    delivery: DeliveryConfig,
    webhooks: courrier_core::mailing::webhooks::WebhookConfig,
    delivery_workers: usize,
    /// The processing and delivery threads' nice value above the server's.
    worker_niceness: i32,
    /// How long processing waits at most for the LMTP sessions to fall quiet.
    mail_in_defer: std::time::Duration,
    limits: ServerLimits,
    /// The mail-in pipeline the ingest pollers hand messages to; `None`: no poller runs.
    intake: Option<Arc<dyn courrier_core::mailing::ingest::MailIntake>>,
    /// The LMTP socket (`COURRIER_LMTP_LISTEN`), unless `off`.
    lmtp: Option<std::net::TcpListener>,
    lmtp_limits: courrier_mail::LmtpLimits,
}

impl Bound {
    /// The services the server will use (tests reach core through them).
    pub fn services(&self) -> &Services {
        &self.services
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// The LMTP server's address, unless it is off.
    pub fn lmtp_addr(&self) -> Option<SocketAddr> {
        self.lmtp.as_ref().and_then(|l| l.local_addr().ok())
    }
}

/// Wires the application and binds the listening socket, so that a bad address or a busy port
/// is reported before anything runs.
pub fn bind(config: &Config, build: BuildInfo) -> Result<Bound, CliError> {
    // One descriptor per connection: the inherited soft limit (often 1,024) would refuse accepts
    // below the connection cap.
    match courrier_core::adapters::open_files::raise_to_hard_limit() {
        Ok(limit) => tracing::debug!(open_files = limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let services = wire(config, build)?;
    let limits = ServerLimits { trusted_proxies: config.trusted_proxies.clone(), ..ServerLimits::default() };
    let bind_err = |source| CliError::Bind { addr: config.listen.to_string(), source };
    let listener = courrier_http::server::listen(config.listen, limits.backlog()).map_err(bind_err)?;
    let lmtp = config
        .lmtp_listen
        .map(|addr| courrier_mail::listen(addr).map_err(|source| CliError::Bind { addr: addr.to_string(), source }))
        .transpose()?;
    let lmtp_limits = courrier_mail::LmtpLimits {
        hostname: config.public_host().to_owned(),
        commit_delay: config.lmtp_commit_delay,
        ..Default::default()
    };
    let mut state = courrier_http::AppState::new(
        Arc::clone(&services.access),
        Arc::clone(&services.mailing),
        Arc::clone(&services.ocr),
        &services.version(),
    );
    state.ocr_registration = config.ocr_registration;
    state.import_niceness = config.import_niceness;
    let router = courrier_http::router(state);
    // The ingest pollers hand what they fetch to mail in, as if delivered to the list's address.
    let intake: Arc<dyn courrier_core::mailing::ingest::MailIntake> =
        Arc::new(courrier_core::mailing::ingest::MailIn(Arc::clone(&services.mailing)));
    Ok(Bound {
        listener,
        router,
        services,
        delivery: delivery_config(config),
        webhooks: webhook_config(config),
        delivery_workers: config.delivery_workers,
        worker_niceness: config.worker_niceness,
        mail_in_defer: config.mail_in_defer,
        limits,
        intake: Some(intake),
        lmtp,
        lmtp_limits,
    })
}

/// Serves on a multi-threaded tokio runtime of its own until `shutdown` resolves; returns after
/// in-flight requests finished.
pub fn run(bound: Bound, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("courrier-http")
        .build()
        .map_err(CliError::Serve)?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(bound.listener).map_err(CliError::Serve)?;
        tracing::info!(addr = %listener.local_addr().map_err(CliError::Serve)?, "listening");
        // The installation's periodic chores, each run by one process of it (this one or a worker).
        let chores = crate::chores::start(&bound.services);
        let lmtp = match bound.lmtp {
            Some(l) => Some(start_lmtp(l, Arc::clone(&bound.services.mailing), bound.lmtp_limits)?),
            None => None,
        };
        let workers = crate::workers::start(
            Arc::clone(&bound.services.mailing),
            bound.delivery,
            bound.webhooks,
            bound.delivery_workers,
            bound.worker_niceness,
            bound.mail_in_defer,
        );
        // Ingest pollers are workers: a server without delivery workers (`courrier worker`
        // processes deliver) polls no mailbox either.
        let ingest = bound.intake.filter(|_| bound.delivery_workers > 0).map(|intake| {
            crate::workers::start_ingest(
                Arc::clone(&bound.services.mailing),
                intake,
                Default::default(),
                Arc::clone(&bound.services.jobs),
            )
        });
        let served = courrier_http::server::serve(listener, bound.router, bound.limits, shutdown).await;
        tokio::task::spawn_blocking(move || chores.stop()).await.ok();
        if let Some(ingest) = ingest {
            tokio::task::spawn_blocking(move || ingest.stop()).await.ok();
        }
        if let Some(lmtp) = lmtp {
            // Dropping it stops the server and joins its thread.
            tokio::task::spawn_blocking(move || drop(lmtp)).await.ok();
        }
        // Copies in flight finish their SMTP exchange; the rest stay queued for the next start.
        tokio::task::spawn_blocking(move || workers.stop()).await.ok();
        served.map_err(CliError::Serve)
    })
}

/// The LMTP server on a thread of its own, with a single-threaded runtime: its sessions wait on
/// each other's commits and on their clients, turn by turn; on the HTTP server's multi-threaded
/// runtime every such wake-up also woke a second worker to look for work to steal (measured:
/// more CPU and context switches per accepted post, `BENCHMARKS.md`, issue 20).
struct Lmtp {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn start_lmtp(
    listener: std::net::TcpListener,
    app: Arc<courrier_core::mailing::Service>,
    limits: courrier_mail::LmtpLimits,
) -> Result<Lmtp, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(CliError::Serve)?;
    let listener = {
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener).map_err(CliError::Serve)?
    };
    tracing::info!(addr = %listener.local_addr().map_err(CliError::Serve)?, "LMTP listening");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("courrier-lmtp".into())
        .spawn(move || {
            let stopped = async move {
                let _ = stopped.await;
            };
            if let Err(e) = runtime.block_on(courrier_mail::serve(listener, app, limits, stopped)) {
                tracing::error!(error = %e, "the LMTP server stopped");
            }
            // Sessions still open end with the runtime: a message not yet acknowledged is retried
            // by the MTA.
        })
        .map_err(CliError::Serve)?;
    Ok(Lmtp { stop: Some(stop), thread: Some(thread) })
}

/// Stops the LMTP server and waits for its thread, also when the HTTP server's start failed.
impl Drop for Lmtp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot install signal handlers; stop the server with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

/// A server running on a thread of its own (the integration tests' `TestApp`, embedders).
pub struct Running {
    pub addr: SocketAddr,
    /// The LMTP server's address, unless it is off.
    pub lmtp_addr: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), CliError>>>,
}

impl Running {
    /// Shuts down gracefully and waits for the server's thread.
    pub fn stop(mut self) -> Result<(), CliError> {
        self.stop_inner().unwrap_or(Ok(()))
    }

    fn stop_inner(&mut self) -> Option<Result<(), CliError>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let thread = self.thread.take()?;
        Some(thread.join().unwrap_or_else(|_| Err(CliError::Serve(std::io::Error::other("server thread panicked")))))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

pub fn spawn(bound: Bound) -> Running {
    let addr = bound.local_addr();
    let lmtp_addr = bound.lmtp_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("courrier-server".into())
        .spawn(move || {
            run(bound, async move {
                let _ = stopped.await;
            })
        })
        .expect("cannot start the server thread");
    Running { addr, lmtp_addr, stop: Some(stop), thread: Some(thread) }
}

/// The delivery settings of the configuration.
pub fn delivery_config(config: &Config) -> DeliveryConfig {
    DeliveryConfig {
        retry_base_secs: config.retry_base_secs,
        lease_secs: config.delivery_lease_secs,
        domain_concurrency: config.domain_concurrency,
        ..DeliveryConfig::default()
    }
}

/// The webhook worker's settings of the configuration (the same first backoff as copies).
pub fn webhook_config(config: &Config) -> courrier_core::mailing::webhooks::WebhookConfig {
    courrier_core::mailing::webhooks::WebhookConfig { retry_base_secs: config.retry_base_secs, ..Default::default() }
}
