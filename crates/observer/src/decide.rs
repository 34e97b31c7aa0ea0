//! The observer's decisions, driven: the pure state machine of `roles::fast_start::Observer`
//! fed with what the watchers hear and the time (`CLOCK_BOOTTIME`), its record kept in
//! `<data_dir>/observer.record` (written durably before any act it allows: a grant, a
//! failover request, the lease again after a refusal), and its effects carried out: Sentinel's
//! `+switch-master`, a reinstate through the new primary's admin API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use parking_lot::Mutex;
use proto::ObserverPing;
use roles::fast_start::{Effect, Observer, ObserverRecord, ObserverSettings, Outcome, Time};

use crate::config::ObserverConfig;

/// The record's file name in the observer's data directory.
pub const RECORD_FILE: &str = "observer.record";

/// What the watchers, the decider, the web page and the Sentinel front share.
pub struct Shared {
    pub me: String,
    /// The state machine (with its record), locked for every input and every ping built.
    pub state: Mutex<Observer>,
    record_path: PathBuf,
    stop: AtomicBool,
    /// `+switch-master` messages for Sentinel subscribers.
    pub switches: tokio::sync::broadcast::Sender<String>,
}

/// The settings the state machine runs with, from the observer's file.
pub fn settings_of(config: &ObserverConfig) -> ObserverSettings {
    let replication = &config.replication;
    ObserverSettings {
        me: config.observer.name.clone(),
        members: replication.members.iter().map(|member| member.name.clone()).collect(),
        fast_start: replication.fast_start_settings(),
        enabled: replication.fast_start_failover.enabled,
        auto_reinstate: replication.fast_start_failover.auto_reinstate,
    }
}

/// Reads the record in `dir`, if there is one; a damaged one is an error that names it.
pub fn load_record(dir: &Path) -> anyhow::Result<ObserverRecord> {
    let path = dir.join(RECORD_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => ObserverRecord::decode(&bytes).with_context(|| {
            format!(
                "the observer's record {} cannot be read; it holds the failovers and grants this observer decided, so it is not ignored: restore it, or (only if no failover is under way) remove it",
                path.display()
            )
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(ObserverRecord::default()),
        Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write_record(path: &Path, record: &ObserverRecord) -> Result<(), String> {
    redo::storage::replace_durably(&redo::storage::OsStorage::default(), path, &record.encode())
        .map_err(|error| format!("writing {}: {error}", path.display()))
}

impl Shared {
    /// The shared state of an observer whose record is in `data_dir`.
    pub fn new(config: &ObserverConfig, data_dir: &Path) -> anyhow::Result<Shared> {
        std::fs::create_dir_all(data_dir).with_context(|| {
            format!("cannot create the observer's data directory {}", data_dir.display())
        })?;
        let record = load_record(data_dir)?;
        if let Some(failover) = &record.failover {
            tracing::warn!(from = %failover.from, incarnation = failover.incarnation, to = %failover.to, "observer: a failover this observer decided has not been seen to end; it asks the target again");
        }
        Ok(Shared {
            me: config.observer.name.clone(),
            state: Mutex::new(Observer::new(settings_of(config), record)),
            record_path: data_dir.join(RECORD_FILE),
            stop: AtomicBool::new(false),
            switches: tokio::sync::broadcast::channel(64).0,
        })
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn persist(&self) -> impl FnMut(&ObserverRecord) -> Result<(), String> + '_ {
        |record| write_record(&self.record_path, record)
    }

    /// The ping member `name` gets now (a grant or a failover request in it is on disk first).
    pub fn ping_for(&self, name: &str) -> ObserverPing {
        let mut state = self.state.lock();
        let mut ping = state.ping_for(name, Time::now(), &mut self.persist());
        ping.time_us = redo::types::now_unix_us();
        ping
    }

    /// Records what a watcher saw.
    pub fn note(&self, name: &str, outcome: Outcome) {
        let events = self.state.lock().note(name, outcome, Time::now(), &mut self.persist());
        log(events);
    }

    /// The current primary's name, for Sentinel clients.
    pub fn primary(&self) -> Option<String> {
        self.state.lock().primary().map(str::to_string)
    }
}

fn log(events: Vec<String>) {
    for event in events {
        tracing::warn!(event, "observer");
    }
}

/// The decision loop, until the observer stops.
pub fn run(config: &ObserverConfig, shared: &Arc<Shared>) {
    // Deciding is cheap (a lock and a look at each member's last answer): decide often, so
    // that an answer is acted on soon after it arrives rather than a ping interval later.
    let interval = config.interval().min(Duration::from_millis(20));
    while !shared.stopped() {
        let (effects, events) = {
            let mut state = shared.state.lock();
            state.step(Time::now(), &mut shared.persist())
        };
        log(events);
        for effect in effects {
            match effect {
                Effect::SwitchMaster { old, new } => {
                    let replication = &config.replication;
                    let _ = shared.switches.send(format!(
                        "{} {} {}",
                        replication.name,
                        address_of(replication, &old),
                        address_of(replication, &new)
                    ));
                }
                Effect::Reinstate { old, primary } => spawn_reinstate(config, shared, old, primary),
            }
        }
        std::thread::sleep(interval);
    }
}

/// A member's client address as Sentinel gives it (`host port`).
pub fn address_of(replication: &transport::ReplicationConfig, member: &str) -> String {
    let resp =
        replication.member_named(member).map(|member| member.resp.clone()).unwrap_or_default();
    match resp.rsplit_once(':') {
        Some((host, port)) => format!("{host} {port}"),
        None => resp,
    }
}

fn spawn_reinstate(config: &ObserverConfig, shared: &Arc<Shared>, old: String, primary: String) {
    let admin = config
        .replication
        .member_named(&primary)
        .map(|member| member.admin.clone())
        .unwrap_or_default();
    tracing::warn!(event = format!("reinstating '{old}' as a standby of '{primary}'"), "observer");
    // The reinstate runs on its own thread; the decider goes on.
    let shared = shared.clone();
    std::thread::spawn(move || {
        let outcome = broker::transitions::reinstate(&admin, &old);
        let event = match outcome {
            Ok(done) => format!(
                "'{old}' reinstated as a standby of '{primary}' ({} divergent records set aside)",
                done.set_aside.records
            ),
            Err(error) => format!("reinstating '{old}' failed: {error:#}"),
        };
        tracing::warn!(event, "observer");
        shared.state.lock().reinstate_done(event);
    });
}
