//! `redoguard observer`: the fast-start failover observer (and Redis Sentinel front).

use std::path::PathBuf;

use anyhow::Context as _;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The observer's file: the configuration's [replication] section (members, fast-start
    /// failover, observers; no `member`) and [observer] name = "..." (docs/fast-start-failover.md).
    #[arg(long)]
    pub config: PathBuf,
    /// Which of the configuration's observers this is (overrides `observer.name`).
    #[arg(long)]
    pub name: Option<String>,
    /// Where the observer keeps its record of failovers and grants (overrides
    /// `observer.data_dir`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Start even though its Sentinel front listens beyond loopback without a password, or the
    /// members' redo listeners are beyond loopback without TLS (protected mode off;
    /// `[observer] insecure = true`). Said at start and on its page.
    #[arg(long)]
    pub insecure: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut config = observer::ObserverConfig::load(&args.config)?;
    if let Some(name) = args.name {
        config.observer.name = name;
    }
    if let Some(dir) = args.data_dir {
        config.observer.data_dir = dir;
    }
    config.observer.insecure |= args.insecure;
    config.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("redoguard-observer")
        .build()
        .context("starting the runtime")?;
    runtime.block_on(observer::run(config))
}
