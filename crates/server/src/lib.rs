//! The redoguard server: opens the database in a locked data directory, serves clients on the
//! Redis protocol and people and monitoring on the admin HTTP API, and stops cleanly.
//!
//! One tokio task per client connection. A command becomes one database transaction; its
//! reply waits for the commit as the connection's COMMITMODE says, without holding a worker
//! thread (see `redo::Durable`). The number of connections is bounded; a connection that is
//! idle too long, or that sends malformed protocol, is closed; nothing a client does affects
//! another.

mod admin;
pub mod admin_access;
pub mod auth;
mod blocked;
mod clients;
pub mod config;
mod execute;
mod expiry;
mod info;
/// The data directory lock (`redo::dir_lock`, which the observer takes too).
pub use redo::dir_lock as lock;
pub mod retention;
pub mod role;
pub mod settings;
pub mod status;
pub mod web;
mod write_deadline;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use redo::OsStorage;
use resp::ServerFacts;
use stats::{Metrics, Statistic};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::ServerConfig;
pub use role::{Roles, Running};
pub use status::ServerStatus;

/// Everything a connection or the admin API needs.
pub struct ServerState {
    pub config: ServerConfig,
    /// The database in its role, and what the role runs (see `role`).
    pub roles: Arc<Roles>,
    pub metrics: Arc<Metrics>,
    pub facts: ServerFacts,
    /// The same, for HELLO on a standby (`role` `replica`).
    pub standby_facts: ServerFacts,
    pub started: Instant,
    pub resp_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub connected: AtomicU64,
    /// Clients waiting in a blocking pop (INFO's `blocked_clients`).
    pub blocked: AtomicU64,
    /// The blocked pops, in the order they blocked.
    pub(crate) blocked_queue: blocked::BlockedQueue,
    pub total_connections: Arc<Statistic>,
    pub rejected: Arc<Statistic>,
    pub commands_processed: Arc<Statistic>,
    /// What archive retention last did.
    pub retention: retention::RetentionSlot,
    /// The last minutes, sampled every second, for the web page (`web::history`).
    pub history: web::history::HistorySlot,
    /// Where the web page's configuration report comes from, if anywhere (`web`).
    pub report_source: Option<web::ReportSource>,
    pub report_cache: web::ReportCache,
    /// The Redis-protocol users (none: no password required).
    pub users: Arc<auth::Users>,
    /// Bytes of incomplete requests all clients may make the server buffer.
    pub request_budget: Arc<resp::Budget>,
    /// Client connections that have not authenticated yet.
    pub(crate) unauthenticated: resp::waiting::Waiting,
    /// Client connections served at once, on the plain and the TLS port together.
    pub client_slots: Arc<tokio::sync::Semaphore>,
    /// The TLS port of the Redis protocol, if there is one.
    pub resp_tls_addr: Option<SocketAddr>,
    /// What this server exposes without protection (a non-loopback bind without TLS or a
    /// password), said at start and in `/status`.
    pub exposure: Vec<String>,
    /// Who may use the admin API (Host, Origin, the token).
    pub admin_access: admin_access::AdminAccess,
    shutdown: watch::Sender<bool>,
    next_client_id: AtomicU64,
}

impl ServerState {
    /// What HELLO says now: the role is the database's (a switchover changes it).
    pub fn facts_now(&self) -> &ServerFacts {
        match self.roles.current() {
            Some(running) if running.role() == redo::Role::Standby => &self.standby_facts,
            _ => &self.facts,
        }
    }

    /// What runs now, waiting (briefly, on a blocking thread) while the role is changing.
    fn running_blocking(&self) -> anyhow::Result<Arc<Running>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(running) = self.roles.current() {
                return Ok(running);
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "the database is not open: {}",
                    match self.roles.gate.state() {
                        role::gate::GateState::Unavailable { reason } => reason,
                        _ => "its role is changing".to_string(),
                    }
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The status the admin API serves (call it on a blocking thread).
    pub fn status(&self) -> anyhow::Result<ServerStatus> {
        let running = self.running_blocking()?;
        let db = &running.db;
        let catalog = db.redo().archived_logs();
        Ok(ServerStatus {
            server: status::ServerInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                role: role_name(db.role()).to_string(),
                uptime_s: self.started.elapsed().as_secs(),
                data_dir: self.config.server.data_dir.display().to_string(),
                resp_addr: self.resp_addr.to_string(),
                resp_tls_addr: self.resp_tls_addr.map(|addr| addr.to_string()),
                admin_addr: self.admin_addr.to_string(),
                connected_clients: self.connected.load(Ordering::Relaxed),
                total_connections: self.total_connections.get(),
                rejected_connections: self.rejected.get(),
                commands_processed: self.commands_processed.get(),
                writes_refused: db.writes_refused(),
                security_warnings: self.exposure.clone(),
                auth_required: self.users.required(),
                admin_token_required: true,
                admin_token_file: self
                    .admin_access
                    .token_file
                    .as_ref()
                    .map(|path| path.display().to_string()),
                insecure: self.config.server.insecure,
            },
            database: db.status(),
            replication: self.replication_of(&running),
            roles: self.roles.status(),
            archive: status::ArchiveSummary::of(&catalog, 10),
            retention: self.retention.lock().clone(),
            metrics: self.metrics.snapshot(),
        })
    }

    /// The database's role and its standbys (or, on a standby, its primary).
    pub fn replication_of(&self, running: &Running) -> status::ReplicationStatus {
        status::ReplicationStatus {
            role: role_name(running.role()).to_string(),
            // A primary's transport says what its commits wait for now.
            protection_mode: running.transport.as_ref().map_or_else(
                || self.roles.settings.replication().protection_mode,
                transport::PrimaryTransport::mode,
            ),
            synchronized: running.transport.as_ref().map(transport::PrimaryTransport::synchronized),
            // (On a standby: the members it forwards to, cascading.)
            destinations: match (&running.transport, &running.receiver) {
                (Some(transport), _) => transport.status(),
                (None, Some(receiver)) => receiver.forwarding(),
                (None, None) => Vec::new(),
            },
            standby: running.receiver.as_ref().map(|receiver| receiver.status()),
        }
    }

    /// Asks the server to stop (as SHUTDOWN, SIGINT or SIGTERM do).
    pub fn request_shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}

/// How a server starts, beyond its configuration.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// A new standby: first copy the data of the primary whose redo listener is here (a
    /// member name of the configuration, or `host:port`).
    pub from: Option<String>,
    /// How the web page's `/report` gathers the configuration from every member (the
    /// binary passes the broker's); without one, the page shows this member's own view.
    pub report: Option<web::ReportSource>,
    /// Take SIGTERM and SIGINT over before the RESP and admin ports bind (the binary, whose
    /// process they stop): see `StopSignals`.
    pub stop_signals: bool,
}

/// A started server.
/// SIGTERM and SIGINT, taken over just before the RESP and admin ports bind: one that comes
/// once they answer stops the server cleanly when it has started (`Server::run_until_shutdown`)
/// instead of killing the process by the signal's default action, as it did in the moment
/// between the ports answering and the wait for a signal.
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Takes both signals over (within a tokio runtime).
    fn register() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }
}

pub struct Server {
    state: Arc<ServerState>,
    resp: tokio::task::JoinHandle<()>,
    resp_tls: Option<tokio::task::JoinHandle<()>>,
    admin: tokio::task::JoinHandle<()>,
    events: tokio::task::JoinHandle<()>,
    retention: tokio::task::JoinHandle<()>,
    history: tokio::task::JoinHandle<()>,
    observers: Option<tokio::task::JoinHandle<()>>,
    signals: Option<StopSignals>,
    _lock: lock::DataDirLock,
}

impl Server {
    /// Locks the data directory, opens the database (running crash recovery), and binds both
    /// listeners. Returns once clients can connect.
    pub async fn start(config: ServerConfig) -> anyhow::Result<Server> {
        Server::start_with(config, StartOptions::default()).await
    }

    /// `start`, for a new standby copied from its primary first (`StartOptions::from`).
    pub async fn start_with(
        mut config: ServerConfig,
        options: StartOptions,
    ) -> anyhow::Result<Server> {
        config.validate()?;
        protected_mode(&exposure(&config).missing, config.server.insecure, "server")?;
        raise_open_files_limit();
        let lock = lock::DataDirLock::acquire(&config.server.data_dir)?;
        let admin_access = admin_access::AdminAccess::new(&config)?;
        let (redo_config, _) = config.resolved();
        let metrics = Metrics::new();
        let storage: Arc<dyn redo::Storage> = Arc::new(OsStorage::new(redo_config.io_mode));
        let settings = Arc::new(settings::Settings::load(
            &config.replication,
            &config.server.data_dir,
            storage.clone(),
        )?);
        // What starts below starts with the settings changed at run time (`Roles` follows
        // later changes from `settings`).
        config.replication = settings.replication().as_ref().clone();
        if let Some(from) = &options.from {
            if let Some(member) = &config.replication.member
                && config.replication.is_far_sync(member)
            {
                anyhow::bail!(
                    "--from {from}: '{member}' is a far sync, which holds no data to copy (standby logs and archives only): start it without --from; its primary ships it the redo it lacks"
                );
            }
            if config.replication.is_far_sync(from) {
                anyhow::bail!(
                    "--from {from}: '{from}' is a far sync, which holds no data to copy: name the primary or a database standby"
                );
            }
            let (address, primary) = match config.replication.member_named(from) {
                Some(member) => (member.redo.clone(), member.name.clone()),
                None if from.contains(':') => (
                    from.clone(),
                    config
                        .replication
                        .member_at_redo(from)
                        .map(|member| member.name.clone())
                        .unwrap_or_default(),
                ),
                None => anyhow::bail!(
                    "--from {from}: not a member of this configuration, nor host:port"
                ),
            };
            if primary.is_empty() && config.tls.as_ref().is_some_and(|tls| tls.redo) {
                anyhow::bail!(
                    "--from {from}: with TLS, name the primary as a member of this configuration (its certificate must be for that name)"
                );
            }
            let member = config.replication.member.clone().unwrap_or_else(|| "standby".to_string());
            let (config, storage) = (config.clone(), storage.clone());
            tokio::task::spawn_blocking(move || {
                role::copy_from_primary(&config, &storage, &address, &primary, &member)
            })
            .await?
            .with_context(|| format!("cannot make this standby from a copy of {from}"))?;
        }
        let (roles, events) = Roles::bind(&config, &metrics, storage, settings)?;
        let roles = Arc::new(roles);
        roles.open().await?;
        let signals = options.stop_signals.then(StopSignals::register).transpose()?;
        let server = &config.server;
        let resp_listener =
            TcpListener::bind((server.bind, server.port)).await.with_context(|| {
                format!("cannot listen for clients on {}:{}", server.bind, server.port)
            })?;
        let admin_listener =
            TcpListener::bind((server.admin_bind, server.admin_port)).await.with_context(|| {
                format!(
                    "cannot listen for the admin API on {}:{}",
                    server.admin_bind, server.admin_port
                )
            })?;
        let resp_tls = clients::tls_acceptor(&config)?;
        let resp_tls_listener = match config.tls.as_ref().and_then(|tls| tls.resp_port) {
            Some(port) if resp_tls.is_some() => {
                Some(TcpListener::bind((server.bind, port)).await.with_context(|| {
                    format!("cannot listen for TLS clients on {}:{port}", server.bind)
                })?)
            }
            _ => None,
        };
        let admin_tls = admin::tls_acceptor(&config)?;
        let users = Arc::new(
            auth::Users::new(&config.auth).map_err(|reason| anyhow::anyhow!("auth: {reason}"))?,
        );
        let Exposure { missing, warnings } = exposure(&config);
        if config.server.insecure && !missing.is_empty() {
            tracing::warn!(
                "INSECURE: started with --insecure (server.insecure): protected mode is off"
            );
        }
        let exposure: Vec<String> = missing.into_iter().chain(warnings).collect();
        for warning in &exposure {
            tracing::warn!("SECURITY: {warning}");
        }
        let (shutdown, _) = watch::channel(false);
        let state = Arc::new(ServerState {
            users,
            request_budget: Arc::new(resp::Budget::new(
                config.server.request_buffer_total as usize,
            )),
            unauthenticated: resp::waiting::Waiting::default(),
            client_slots: Arc::new(tokio::sync::Semaphore::new(
                config.server.max_connections as usize,
            )),
            resp_tls_addr: match &resp_tls_listener {
                Some(listener) => Some(listener.local_addr()?),
                None => None,
            },
            exposure,
            admin_access,
            facts: ServerFacts::new(&config.limits),
            standby_facts: ServerFacts {
                role: "replica".into(),
                ..ServerFacts::new(&config.limits)
            },
            resp_addr: resp_listener.local_addr()?,
            admin_addr: admin_listener.local_addr()?,
            total_connections: metrics.stat("total connections received"),
            rejected: metrics.stat("rejected connections"),
            commands_processed: metrics.stat("total commands processed"),
            connected: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
            blocked_queue: blocked::BlockedQueue::default(),
            started: Instant::now(),
            next_client_id: AtomicU64::new(1),
            shutdown,
            metrics,
            retention: Arc::default(),
            history: Arc::new(parking_lot::Mutex::new(web::history::History::new(
                web::history::CAPACITY,
            ))),
            report_source: options.report,
            report_cache: web::ReportCache::default(),
            roles: roles.clone(),
            config,
        });
        let events = tokio::spawn(async move {
            let mut events = events;
            while let Some(event) = events.recv().await {
                roles.on_event(event).await;
            }
        });
        let resp = tokio::spawn(clients::accept_clients(state.clone(), resp_listener, None));
        let resp_tls = match (resp_tls_listener, resp_tls) {
            (Some(listener), Some(acceptor)) => {
                tracing::info!(resp_tls = %listener.local_addr()?, "Redis protocol over TLS");
                Some(tokio::spawn(clients::accept_clients(state.clone(), listener, Some(acceptor))))
            }
            _ => None,
        };
        let admin = tokio::spawn(admin::serve_admin(state.clone(), admin_listener, admin_tls));
        let retention = tokio::spawn(retention::run(state.clone()));
        let history = tokio::spawn(web::history::run(state.clone()));
        // Ends by itself at shutdown.
        tokio::spawn(expiry::run(state.clone()));
        let observers = state.roles.serve_observers();
        tracing::info!(resp = %state.resp_addr, admin = %state.admin_addr, data_dir = %state.config.server.data_dir.display(), "redoguard server ready");
        Ok(Server {
            state,
            resp,
            resp_tls,
            admin,
            events,
            retention,
            history,
            observers,
            signals,
            _lock: lock,
        })
    }

    pub fn state(&self) -> &Arc<ServerState> {
        &self.state
    }

    pub fn resp_addr(&self) -> SocketAddr {
        self.state.resp_addr
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.state.admin_addr
    }

    /// Where peers reach this member's redo listener, if it has one.
    pub fn redo_addr(&self) -> Option<SocketAddr> {
        self.state.roles.redo_addr()
    }

    /// Serves until SHUTDOWN, SIGINT or SIGTERM, then stops: no new connections, open ones
    /// closed, the redo flushed, a final checkpoint, the data directory unlocked. The signals
    /// are those taken over before the ports bound (`StartOptions::stop_signals`), or now.
    pub async fn run_until_shutdown(mut self) -> anyhow::Result<()> {
        let mut signals = match self.signals.take() {
            Some(signals) => signals,
            None => StopSignals::register()?,
        };
        let mut shutdown = self.state.shutdown.subscribe();
        tokio::select! {
            _ = stopped(&mut shutdown) => tracing::info!("SHUTDOWN requested"),
            _ = signals.interrupt.recv() => tracing::info!("interrupted"),
            _ = signals.terminate.recv() => tracing::info!("terminated"),
        }
        self.stop().await
    }

    /// Stops now (see `run_until_shutdown`).
    pub async fn stop(self) -> anyhow::Result<()> {
        self.state.request_shutdown();
        self.resp.abort();
        if let Some(resp_tls) = &self.resp_tls {
            resp_tls.abort();
        }
        self.admin.abort();
        self.events.abort();
        self.retention.abort();
        self.history.abort();
        let _ = self.retention.await;
        let _ = self.history.await;
        if let Some(observers) = self.observers {
            observers.abort();
            let _ = observers.await;
        }
        let _ = self.resp.await;
        let _ = self.admin.await;
        let _ = self.events.await;
        self.state.roles.stop().await?;
        tracing::info!("redoguard server stopped");
        Ok(())
    }
}

/// What the server would expose beyond loopback: `missing`, the protection protected mode
/// requires (a password on the Redis protocol, TLS on the redo listener; the admin API always
/// has its token), one line each; `warnings`, what is weaker than it could be (no TLS for
/// clients or the admin API).
pub struct Exposure {
    pub missing: Vec<String>,
    pub warnings: Vec<String>,
}

/// What `config` exposes (see `Exposure`).
pub fn exposure(config: &ServerConfig) -> Exposure {
    let server = &config.server;
    let tls = config.tls.as_ref();
    let mut exposure = Exposure { missing: Vec::new(), warnings: Vec::new() };
    if !server.bind.is_loopback() {
        if config.auth.requirepass.is_none() && config.auth.users.is_empty() {
            exposure.missing.push(format!(
                "the Redis protocol listens on {} (not loopback) without a password: anyone who reaches it can read and write (set auth.requirepass, or [[auth.users]])",
                server.bind
            ));
        }
        if tls.is_none_or(|tls| tls.resp_port.is_none()) {
            exposure.warnings.push(format!(
                "the Redis protocol listens on {} (not loopback) without TLS: passwords and data cross the network in clear (tls.resp_port opens a TLS port)",
                server.bind
            ));
        }
    }
    if !server.admin_bind.is_loopback() && tls.is_none_or(|tls| !tls.admin) {
        exposure.warnings.push(format!(
            "the admin API listens on {} (not loopback) without TLS: its token crosses the network in clear (tls.admin)",
            server.admin_bind
        ));
    }
    if let Some(listen) = config.replication.redo_listen()
        && listen.parse::<SocketAddr>().is_ok_and(|addr| !addr.ip().is_loopback())
        && tls.is_none_or(|tls| !tls.redo)
    {
        exposure.missing.push(format!(
            "the redo listener binds {listen} (not loopback) without TLS: anyone who reaches it can ship redo to this member or copy its data (add a [tls] section; `redoguard certs` makes test certificates)"
        ));
    }
    exposure
}

/// Protected mode: the refusal to start, one line per missing piece, unless `insecure`.
pub fn protected_mode(missing: &[String], insecure: bool, what: &str) -> anyhow::Result<()> {
    if missing.is_empty() || insecure {
        return Ok(());
    }
    anyhow::bail!(
        "protected mode: this {what} refuses to start, it would listen beyond loopback without protection:\n{}\nGive what is missing, bind loopback, or start it with --insecure ({} insecure = true) to run it so anyway.",
        missing.iter().map(|line| format!("  - {line}")).collect::<Vec<_>>().join("\n"),
        if what == "observer" { "[observer]" } else { "[server]" }
    )
}

pub(crate) fn role_name(role: redo::Role) -> &'static str {
    match role {
        redo::Role::Primary => "primary",
        redo::Role::Standby => "standby",
    }
}

/// Resolves once a shutdown has been requested.
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    // (The guard `wait_for` returns is not Send: drop it here, not across an await.)
    let _ = shutdown.wait_for(|stop| *stop).await.map(|_| ());
}

/// Clients may be many: allow as many descriptors as the hard limit does.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
