//! The redoguard server: opens the database in a locked data directory, serves clients on the
//! Redis protocol and people and monitoring on the admin HTTP API, and stops cleanly.
//!
//! One tokio task per client connection. A command becomes one database transaction; its
//! reply waits for the commit as the connection's COMMITMODE says, without holding a worker
//! thread (see `redo::Durable`). The number of connections is bounded; a connection that is
//! idle too long, or that sends malformed protocol, is closed; nothing a client does affects
//! another.

mod admin;
mod clients;
pub mod config;
mod execute;
mod info;
pub mod lock;
pub mod status;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use db::Database;
use redo::OsStorage;
use resp::ServerFacts;
use stats::{Metrics, Statistic};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::ServerConfig;
pub use status::ServerStatus;

/// Everything a connection or the admin API needs.
pub struct ServerState {
    pub config: ServerConfig,
    pub db: Arc<Database>,
    /// A primary's redo transport (if it has destinations).
    pub transport: Option<transport::PrimaryTransport>,
    /// A standby's receiver.
    pub receiver: Option<transport::StandbyService>,
    pub metrics: Arc<Metrics>,
    pub facts: ServerFacts,
    pub started: Instant,
    pub resp_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub connected: AtomicU64,
    pub total_connections: Arc<Statistic>,
    pub rejected: Arc<Statistic>,
    pub commands_processed: Arc<Statistic>,
    shutdown: watch::Sender<bool>,
    next_client_id: AtomicU64,
}

impl ServerState {
    /// The status the admin API serves.
    pub fn status(&self) -> ServerStatus {
        let catalog = self.db.redo().archived_logs();
        ServerStatus {
            server: status::ServerInfo {
                version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                role: role_name(self.config.replication.role).to_string(),
                uptime_s: self.started.elapsed().as_secs(),
                data_dir: self.config.server.data_dir.display().to_string(),
                resp_addr: self.resp_addr.to_string(),
                admin_addr: self.admin_addr.to_string(),
                connected_clients: self.connected.load(Ordering::Relaxed),
                total_connections: self.total_connections.get(),
                rejected_connections: self.rejected.get(),
                commands_processed: self.commands_processed.get(),
                writes_refused: self.db.writes_refused(),
            },
            database: self.db.status(),
            replication: self.replication(),
            archive: status::ArchiveSummary::of(&catalog, 10),
            metrics: self.metrics.snapshot(),
        }
    }

    /// The database's role and its standbys (or, on a standby, its primary).
    pub fn replication(&self) -> status::ReplicationStatus {
        let replication = &self.config.replication;
        status::ReplicationStatus {
            role: role_name(replication.role).to_string(),
            protection_mode: replication.protection_mode,
            synchronized: self.transport.as_ref().map(transport::PrimaryTransport::synchronized),
            destinations: self
                .transport
                .as_ref()
                .map(transport::PrimaryTransport::status)
                .unwrap_or_default(),
            standby: self.receiver.as_ref().map(transport::StandbyService::status),
        }
    }

    /// Asks the server to stop (as SHUTDOWN, SIGINT or SIGTERM do).
    pub fn request_shutdown(&self) {
        let _ = self.shutdown.send(true);
    }
}

/// A started server.
pub struct Server {
    state: Arc<ServerState>,
    resp: tokio::task::JoinHandle<()>,
    admin: tokio::task::JoinHandle<()>,
    _lock: lock::DataDirLock,
}

impl Server {
    /// Locks the data directory, opens the database (running crash recovery), and binds both
    /// listeners. Returns once clients can connect.
    pub async fn start(config: ServerConfig) -> anyhow::Result<Server> {
        config.validate()?;
        raise_open_files_limit();
        let lock = lock::DataDirLock::acquire(&config.server.data_dir)?;
        let (redo_config, db_config) = config.resolved();
        let metrics = Metrics::new();
        let storage: Arc<dyn redo::Storage> = Arc::new(OsStorage::new(redo_config.io_mode));
        let role = config.replication.role;
        let db = {
            let metrics = metrics.clone();
            tokio::task::spawn_blocking(move || match role {
                transport::RoleConfig::Primary => {
                    Database::open(db_config, redo_config, storage, metrics)
                }
                transport::RoleConfig::Standby => {
                    Database::open_standby(db_config, redo_config, storage, metrics)
                }
            })
            .await?
            .context("cannot open the database")?
        };
        let db = Arc::new(db);
        let replication = &config.replication;
        let transport =
            if role == transport::RoleConfig::Primary && !replication.destinations.is_empty() {
                let transport = transport::PrimaryTransport::start(
                    db.redo().handle(),
                    replication.protection_mode,
                    replication.destinations.clone(),
                    &metrics,
                )
                .context("starting redo transport")?;
                db.redo().set_shipper(Some(transport.shipper()));
                Some(transport)
            } else {
                None
            };
        let receiver = if role == transport::RoleConfig::Standby {
            let applied = {
                let db = Arc::downgrade(&db);
                Arc::new(move || db.upgrade().map_or(redo::Scn(0), |db| db.applied_scn()))
                    as transport::AppliedScn
            };
            Some(
                transport::StandbyService::start(
                    db.redo().handle(),
                    replication.standby.clone(),
                    applied,
                )
                .with_context(|| {
                    format!(
                        "cannot listen for the primary's redo on {}",
                        replication.standby.listen
                    )
                })?,
            )
        } else {
            None
        };
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
        let (shutdown, _) = watch::channel(false);
        let state = Arc::new(ServerState {
            facts: ServerFacts::new(&config.limits),
            resp_addr: resp_listener.local_addr()?,
            admin_addr: admin_listener.local_addr()?,
            total_connections: metrics.stat("total connections received"),
            rejected: metrics.stat("rejected connections"),
            commands_processed: metrics.stat("total commands processed"),
            connected: AtomicU64::new(0),
            started: Instant::now(),
            next_client_id: AtomicU64::new(1),
            shutdown,
            metrics,
            db,
            transport,
            receiver,
            config,
        });
        let resp = tokio::spawn(clients::accept_clients(state.clone(), resp_listener));
        let admin = tokio::spawn(admin::serve_admin(state.clone(), admin_listener));
        tracing::info!(resp = %state.resp_addr, admin = %state.admin_addr, data_dir = %state.config.server.data_dir.display(), "redoguard server ready");
        Ok(Server { state, resp, admin, _lock: lock })
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

    /// Serves until SHUTDOWN, SIGINT or SIGTERM, then stops: no new connections, open ones
    /// closed, the redo flushed, a final checkpoint, the data directory unlocked.
    pub async fn run_until_shutdown(self) -> anyhow::Result<()> {
        let mut shutdown = self.state.shutdown.subscribe();
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = stopped(&mut shutdown) => tracing::info!("SHUTDOWN requested"),
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
            _ = terminate.recv() => tracing::info!("terminated"),
        }
        self.stop().await
    }

    /// Stops now (see `run_until_shutdown`).
    pub async fn stop(self) -> anyhow::Result<()> {
        self.state.request_shutdown();
        self.resp.abort();
        self.admin.abort();
        let _ = self.resp.await;
        let _ = self.admin.await;
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || {
            // A standby stops receiving first; a primary flushes its redo (still shipping it)
            // before its senders stop.
            if let Some(receiver) = &state.receiver {
                receiver.stop();
            }
            let stopped = state.db.shutdown();
            if let Some(transport) = &state.transport {
                transport.stop();
            }
            stopped
        })
        .await?
        .context("stopping the database")?;
        tracing::info!("redoguard server stopped");
        Ok(())
    }
}

pub(crate) fn role_name(role: transport::RoleConfig) -> &'static str {
    match role {
        transport::RoleConfig::Primary => "primary",
        transport::RoleConfig::Standby => "standby",
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
