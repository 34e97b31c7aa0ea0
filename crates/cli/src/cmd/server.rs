//! `redoguard server`: runs the database server.

use std::path::PathBuf;

use anyhow::Context as _;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file (TOML; see docs/config.md). Without one, the defaults.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Data directory (overrides `server.data_dir`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// RESP (Redis protocol) port (overrides `server.port`); 0 picks a free one.
    #[arg(long)]
    pub port: Option<u16>,
    /// Admin HTTP port (overrides `server.admin_port`); 0 picks a free one.
    #[arg(long)]
    pub admin_port: Option<u16>,
    /// Address to listen on for clients (overrides `server.bind`).
    #[arg(long)]
    pub bind: Option<std::net::IpAddr>,
    /// Make a new standby from a running member first: copy a consistent image of its data
    /// (while it goes on taking writes or applying), then receive redo from there on. MEMBER
    /// is the primary or a database standby (a cascading one, say; not a far sync), by its
    /// member name in the configuration or the `host:port` of its redo listener. The data
    /// directory must be empty.
    #[arg(long, value_name = "MEMBER")]
    pub from: Option<String>,
    /// Start even though a port listens beyond loopback without TLS on the redo listener or a
    /// password on the Redis protocol (protected mode off; `server.insecure = true`). Said at
    /// start and in /status.
    #[arg(long)]
    pub insecure: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => server::ServerConfig::load(path)?,
        None => server::ServerConfig::default(),
    };
    if let Some(dir) = args.data_dir {
        config.server.data_dir = dir;
    }
    if let Some(port) = args.port {
        config.server.port = port;
    }
    if let Some(port) = args.admin_port {
        config.server.admin_port = port;
    }
    if let Some(bind) = args.bind {
        config.server.bind = bind;
    }
    config.server.insecure |= args.insecure;
    config.validate()?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.worker_threads(match config.server.worker_threads {
        // One CPU is left to the log writer, the archivers and the checkpoints: measured
        // on 2 vCPUs, one worker serves durable SETs faster than two at 1 and at 50
        // clients (fewer hand-offs between workers; see the closing note of issue 3). A
        // worker never waits for a standby (SYNC acknowledgements are awaited by the redo
        // engine's acknowledgement waiter; a session whose write could block on a SYNC
        // socket leaves it to the log writer thread), nor for log buffer or cache space
        // (awaited asynchronously), so one is enough with standbys too.
        0 => std::thread::available_parallelism()
            .map_or(1, |cpus| cpus.get().saturating_sub(1).max(1)),
        threads => threads as usize,
    });
    let runtime = runtime
        .enable_all()
        .thread_name("redoguard-worker")
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let server = server::Server::start_with(
            config,
            server::StartOptions {
                from: args.from,
                report: Some(gather_report),
                stop_signals: true,
            },
        )
        .await?;
        // One line a person (or a script) can read: where to connect.
        let redo = match server.redo_addr() {
            Some(address) => format!(", redo on {address}"),
            None => String::new(),
        };
        let resp_tls = match server.state().resp_tls_addr {
            Some(address) => format!(" (TLS on {address})"),
            None => String::new(),
        };
        let scheme = if server.state().config.tls.as_ref().is_some_and(|tls| tls.admin) {
            "https"
        } else {
            "http"
        };
        println!(
            "redoguard server ready: RESP on {}{resp_tls}, admin on {scheme}://{}/status{redo}, data in {}",
            server.resp_addr(),
            server.admin_addr(),
            server.state().config.server.data_dir.display()
        );
        server.run_until_shutdown().await
    })
}

/// The web page's configuration report: the broker's, gathered from every member.
fn gather_report(admin: &str) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::to_value(broker::gather(admin)?)?)
}
