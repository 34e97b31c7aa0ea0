//! The fast-start failover observer (`redoguard observer`): a process on a third host that
//! watches every member of a configuration, fails over to the target standby by itself when the
//! primary is lost (as `redoguard failover` would, but with the guarantees of
//! `docs/fast-start-failover.md`), reinstates the old primary when it comes back, and answers
//! the part of the Redis Sentinel protocol that client libraries use to find the primary.
//!
//! - `config`: the observer's file (the configuration's members, fast-start settings, the
//!   observers, and which one this is);
//! - `watch`: a connection to every member's redo listener, a ping every tick, the answers;
//! - `decide`: drives `roles::fast_start::Observer`, the state machine that decides (lease,
//!   grant, failover, fence, reinstate) from the members' answers and the time, and keeps its
//!   record on disk;
//! - `sentinel`: the Redis Sentinel front for clients;
//! - `web`: the observer's web page about the configuration (`[observer] http`).

pub mod config;
pub mod decide;
pub mod sentinel;
pub mod watch;
pub mod web;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

pub use config::ObserverConfig;

/// Runs the observer until SIGINT or SIGTERM.
pub async fn run(config: ObserverConfig) -> anyhow::Result<()> {
    config.validate()?;
    let missing = config.exposure();
    if !missing.is_empty() {
        if !config.observer.insecure {
            anyhow::bail!(
                "protected mode: this observer refuses to start, it would work beyond loopback without protection:\n{}\nGive what is missing, or start it with --insecure ([observer] insecure = true) to run it so anyway.",
                missing.iter().map(|line| format!("  - {line}")).collect::<Vec<_>>().join("\n")
            );
        }
        tracing::warn!(
            "INSECURE: started with --insecure ([observer] insecure): protected mode is off"
        );
        for line in &missing {
            tracing::warn!("SECURITY: {line}");
        }
    }
    let tls = config.redo_tls()?;
    // The members' admin APIs (reinstate): the token, and HTTPS if the members speak it.
    let admin_tls = match config.tls.as_ref().filter(|tls| tls.admin) {
        Some(tls) => {
            let name = tls.name.clone().unwrap_or_else(|| config.observer.name.clone());
            Some(::tls::redo::client_only(::tls::Material::load(tls, &name)?.roots))
        }
        None => None,
    };
    admin::set_admin_client(admin::AdminClient {
        token: config.observer.token.clone(),
        tls: admin_tls,
    });
    // One observer per data directory: two processes writing one record would each forget
    // what the other decided.
    let _lock =
        redo::dir_lock::DataDirLock::acquire(&config.observer.data_dir).with_context(|| {
            format!("the observer's data directory {}", config.observer.data_dir.display())
        })?;
    let shared = Arc::new(decide::Shared::new(&config, &config.observer.data_dir)?);
    let watchers = watch::start(&config, shared.clone(), tls);
    let decider = {
        let (config, shared) = (config.clone(), shared.clone());
        std::thread::Builder::new()
            .name("observer-decide".into())
            .spawn(move || decide::run(&config, &shared))?
    };
    // (Before the Sentinel front's "ready" line: the page is up once the observer says so.)
    let page = match config.observer.http.clone() {
        Some(address) => {
            let (bound, task) = web::serve(&address, config.clone(), shared.clone()).await?;
            println!("redoguard observer '{}' web page on http://{bound}/", config.observer.name);
            Some(task)
        }
        None => None,
    };
    let sentinel = match config.sentinel_address() {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(&address)
                .await
                .with_context(|| format!("cannot listen for Sentinel clients on {address}"))?;
            println!(
                "redoguard observer '{}' ready: Sentinel on {}, watching {} members of '{}'",
                config.observer.name,
                listener.local_addr()?,
                config.replication.members.len(),
                config.replication.name
            );
            Some(tokio::spawn(sentinel::serve(listener, config.clone(), shared.clone())))
        }
        None => None,
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = terminate.recv() => {},
    }
    shared.stop();
    if let Some(sentinel) = sentinel {
        sentinel.abort();
    }
    if let Some(page) = page {
        page.abort();
    }
    for watcher in watchers {
        let _ = watcher.join();
    }
    let _ = decider.join();
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
