//! What the replication tests share: a primary and its standby as two real `redoguard server`
//! processes (configuration text, start, kill -9, restart on the same data directory), client
//! threads that commit under load and remember every acknowledged write, and the checks that
//! a database holds all of them.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use transport::{DestinationStatus, Phase};

use crate::common::{self, Server};

/// How a pair is configured. The standby gets one more log group than the primary, as
/// docs recommend.
#[derive(Debug, Clone)]
pub struct PairConfig {
    /// `maximum_performance`, `maximum_availability` or `maximum_protection`.
    pub protection_mode: &'static str,
    /// `sync` or `async`.
    pub transport: &'static str,
    pub affirm: bool,
    pub net_timeout: Duration,
    pub reopen: Duration,
    pub log_file_size: &'static str,
    pub groups: u32,
    pub checkpoint_interval: &'static str,
    /// Mutual TLS on redo transport, with the certificates in this directory (`make_certs`):
    /// the primary's is for `primary`, the standby's for `standby1` (its destination name).
    pub tls: Option<PathBuf>,
    /// More keys of the primary's destination (`compression = "lz4"\n`, say).
    pub destination_extra: &'static str,
    /// More keys of the standby's `[replication.standby]` (`receive_buffer = "256KiB"\n`).
    pub standby_extra: &'static str,
}

impl Default for PairConfig {
    fn default() -> PairConfig {
        PairConfig {
            protection_mode: "maximum_availability",
            transport: "sync",
            affirm: true,
            // Generous: a 2-core machine shared with builds can stall a process for a while,
            // and a standby dropped from the synchronized set would void a zero-loss check.
            net_timeout: Duration::from_secs(10),
            reopen: Duration::from_millis(200),
            log_file_size: "2MiB",
            groups: 3,
            checkpoint_interval: "1s",
            tls: None,
            destination_extra: "",
            standby_extra: "",
        }
    }
}

/// Writes a test CA and the pair's certificates (`primary`, `standby1`) into `dir`.
pub fn make_certs(dir: &Path) {
    tls::certs::write_set(dir, &[("primary".into(), Vec::new()), ("standby1".into(), Vec::new())])
        .unwrap();
}

impl PairConfig {
    fn common(&self, groups: u32) -> String {
        format!(
            "[redo]\nlog_file_size = \"{}\"\ngroups = {groups}\n[db]\ncheckpoint_interval = \"{}\"\n",
            self.log_file_size, self.checkpoint_interval
        )
    }

    /// The `[tls]` section for `name`, if the pair runs TLS.
    pub fn tls_text(&self, name: &str) -> String {
        match &self.tls {
            Some(dir) => format!(
                "[tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\nname = \"{name}\"\n",
                dir.join("ca.pem").display(),
                dir.join(format!("{name}.pem")).display(),
                dir.join(format!("{name}-key.pem")).display()
            ),
            None => String::new(),
        }
    }

    /// The standby's file: it listens for redo on `listen`.
    pub fn standby_text(&self, listen: &str) -> String {
        self.common(self.groups + 1)
            + &format!(
                "[replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"{listen}\"\n"
            )
            + self.standby_extra
            + &self.tls_text("standby1")
    }

    /// The primary's file: one destination, the standby's redo listener at `address`.
    pub fn primary_text(&self, address: &str) -> String {
        self.common(self.groups)
            + &format!(
                "[replication]\nrole = \"primary\"\nprotection_mode = \"{}\"\n\
                 [[replication.destinations]]\nname = \"standby1\"\naddress = \"{address}\"\n\
                 transport = \"{}\"\naffirm = {}\nnet_timeout = \"{}ms\"\nreopen = \"{}ms\"\n",
                self.protection_mode,
                self.transport,
                self.affirm,
                self.net_timeout.as_millis(),
                self.reopen.as_millis()
            )
            + self.destination_extra
            + &self.tls_text("primary")
    }
}

/// A primary and its standby on this machine's loopback, each in its own directory of one
/// temporary directory (deleted at the end; the servers are killed first, by PID).
pub struct Pair {
    pub config: PairConfig,
    pub primary_dir: PathBuf,
    pub standby_dir: PathBuf,
    pub primary_config: PathBuf,
    pub standby_config: PathBuf,
    /// The standby's redo listener (kept across its restarts).
    pub redo_addr: SocketAddr,
    primary: Option<Server>,
    standby: Option<Server>,
    // Last: removed after the servers are gone.
    pub root: tempfile::TempDir,
}

impl Pair {
    /// Starts the standby (its redo listener on a free port, which its configuration then
    /// names so that a restart listens there again), then the primary, shipping to it.
    pub fn start(config: PairConfig) -> Pair {
        let root = tempfile::tempdir().unwrap();
        let primary_dir = root.path().join("primary");
        let standby_dir = root.path().join("standby");
        let primary_config = root.path().join("primary.toml");
        let standby_config = root.path().join("standby.toml");
        std::fs::write(&standby_config, config.standby_text("127.0.0.1:0")).unwrap();
        let standby =
            Server::start(&standby_dir, Some(&standby_config), &root.path().join("standby.log"));
        let redo_addr = redo_listener(&standby);
        std::fs::write(&standby_config, config.standby_text(&redo_addr.to_string())).unwrap();
        std::fs::write(&primary_config, config.primary_text(&redo_addr.to_string())).unwrap();
        let mut pair = Pair {
            config,
            primary_dir,
            standby_dir,
            primary_config,
            standby_config,
            redo_addr,
            primary: None,
            standby: Some(standby),
            root,
        };
        pair.start_primary();
        pair
    }

    pub fn primary(&self) -> &Server {
        self.primary.as_ref().expect("the primary is running")
    }

    pub fn standby(&self) -> &Server {
        self.standby.as_ref().expect("the standby is running")
    }

    pub fn primary_log(&self) -> PathBuf {
        self.root.path().join("primary.log")
    }

    pub fn standby_log(&self) -> PathBuf {
        self.root.path().join("standby.log")
    }

    /// Starts (or restarts, after a kill) the primary on its data directory.
    pub fn start_primary(&mut self) {
        assert!(self.primary.is_none(), "the primary is already running");
        self.primary =
            Some(Server::start(&self.primary_dir, Some(&self.primary_config), &self.primary_log()));
    }

    /// Starts (or restarts) the standby on its data directory and its redo listener's port.
    pub fn start_standby(&mut self) {
        assert!(self.standby.is_none(), "the standby is already running");
        let standby =
            Server::start(&self.standby_dir, Some(&self.standby_config), &self.standby_log());
        assert_eq!(redo_listener(&standby), self.redo_addr, "the standby moved its listener");
        self.standby = Some(standby);
    }

    /// SIGKILL to the primary: it stops between two instructions.
    pub fn kill_primary(&mut self) {
        self.primary.take().expect("the primary is running").kill();
    }

    /// SIGKILL to the standby.
    pub fn kill_standby(&mut self) {
        self.standby.take().expect("the standby is running").kill();
    }

    /// Stops both cleanly (SIGTERM; each must exit with status 0).
    pub fn stop(mut self) {
        if let Some(primary) = self.primary.take() {
            primary.stop();
        }
        if let Some(standby) = self.standby.take() {
            standby.stop();
        }
    }

    /// The ends of both servers' logs, for a failure message.
    pub fn logs(&self) -> String {
        format!(
            "--- primary log:\n{}\n--- standby log:\n{}",
            common::tail(&self.primary_log(), 25),
            common::tail(&self.standby_log(), 25)
        )
    }

    /// Waits until the primary's only destination is in `phase`.
    pub fn wait_for_phase(&self, phase: Phase, limit: Duration) {
        let reached =
            common::poll_until(limit, || destination(&self.primary().status()).phase == phase);
        if !reached {
            panic!(
                "the destination did not reach {phase:?} within {limit:?}: {:?}\n{}",
                destination(&self.primary().status()),
                self.logs()
            );
        }
    }
}

/// A standby's redo listener, as its status reports it.
pub fn redo_listener(standby: &Server) -> SocketAddr {
    let status = standby.status();
    let listen = &status.replication.standby.as_ref().expect("a standby's status").listen;
    listen.parse().unwrap_or_else(|_| panic!("the standby listens on '{listen}'"))
}

/// The primary's only destination.
pub fn destination(status: &server::ServerStatus) -> &DestinationStatus {
    status.replication.destinations.first().expect("the primary has a destination")
}

/// Runs `future` to its end on a runtime of its own (for the workload crate's async helpers).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

/// The value written to a key: derived from the key (so it can be checked without being
/// remembered), 16 to 400 bytes long.
pub fn value_of(key: &str) -> Vec<u8> {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let len = 16 + (hash % 384) as usize;
    key.bytes().chain(std::iter::once(b'|')).cycle().take(len).collect()
}

/// One write a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// SET of a key no other write touches.
    Set(String),
    /// INCR of the client's own counter.
    Incr,
}

/// What one client saw.
#[derive(Debug, Default)]
pub struct ClientLog {
    pub counter: String,
    /// Keys whose SET was acknowledged.
    pub keys: Vec<String>,
    /// INCRs of `counter` acknowledged.
    pub increments: i64,
    /// The write sent when the client stopped on an error: its outcome is unknown.
    pub in_flight: Option<Op>,
    /// The error the client stopped on.
    pub error: Option<String>,
    /// The slowest acknowledged write.
    pub latency_max: Duration,
    pub latency_max_at: Option<Instant>,
}

/// Client threads committing SETs (distinct keys) and INCRs (each its own counter) as fast as
/// they are acknowledged, until stopped or until a write fails.
pub struct Load {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    clients: Vec<JoinHandle<ClientLog>>,
}

impl Load {
    /// One client per connection; `prefix` makes its keys distinct from other rounds'.
    pub fn start(connections: Vec<redis::Connection>, prefix: &str, seed: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let mut rng = StdRng::seed_from_u64(seed);
        let clients = connections
            .into_iter()
            .enumerate()
            .map(|(number, connection)| {
                let (stop, acknowledged) = (stop.clone(), acknowledged.clone());
                let (prefix, seed) = (format!("{prefix}:{number}"), rng.random());
                std::thread::spawn(move || client(connection, &prefix, seed, &stop, &acknowledged))
            })
            .collect();
        Load { stop, acknowledged, clients }
    }

    /// Writes acknowledged so far, by all clients.
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged.load(Ordering::Acquire)
    }

    /// Whether some client has stopped (on an error, since none was asked to).
    pub fn any_stopped(&self) -> bool {
        self.clients.iter().any(JoinHandle::is_finished)
    }

    /// Whether every client has stopped (on an error, since none was asked to).
    pub fn all_stopped(&self) -> bool {
        self.clients.iter().all(JoinHandle::is_finished)
    }

    /// Waits until `more` further writes are acknowledged; false if that takes over `limit`.
    pub fn wait_for_more(&self, more: u64, limit: Duration) -> bool {
        let target = self.acknowledged() + more;
        common::poll_until(limit, || self.acknowledged() >= target || self.all_stopped())
            && self.acknowledged() >= target
    }

    /// Asks every client to stop after its current write, and collects what each saw.
    pub fn stop(self) -> Vec<ClientLog> {
        self.stop.store(true, Ordering::Release);
        self.clients.into_iter().map(|client| client.join().expect("a client panicked")).collect()
    }
}

fn client(
    mut connection: redis::Connection,
    prefix: &str,
    seed: u64,
    stop: &AtomicBool,
    acknowledged: &AtomicU64,
) -> ClientLog {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut log = ClientLog { counter: format!("{prefix}:counter"), ..ClientLog::default() };
    for sequence in 0u64.. {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let op =
            if rng.random_ratio(1, 4) { Op::Incr } else { Op::Set(format!("{prefix}:{sequence}")) };
        let started = Instant::now();
        let result = match &op {
            Op::Set(key) => {
                redis::cmd("SET").arg(key).arg(value_of(key)).query::<()>(&mut connection)
            }
            Op::Incr => {
                redis::cmd("INCR").arg(&log.counter).query::<i64>(&mut connection).map(|_| ())
            }
        };
        match result {
            Ok(()) => {
                let latency = started.elapsed();
                if latency > log.latency_max {
                    log.latency_max = latency;
                    log.latency_max_at = Some(started);
                }
                match op {
                    Op::Set(key) => log.keys.push(key),
                    Op::Incr => log.increments += 1,
                }
                acknowledged.fetch_add(1, Ordering::Release);
            }
            Err(error) => {
                log.error = Some(format!("{op:?} failed: {error}"));
                log.in_flight = Some(op);
                break;
            }
        }
    }
    log
}

/// Checks that `connection`'s database holds every write the clients saw acknowledged: each
/// SET's key with its value, each counter at least at its acknowledged INCRs (one more if an
/// INCR was in flight). Returns how many writes were checked.
pub fn verify_acknowledged(
    connection: &mut redis::Connection,
    logs: &[ClientLog],
    whose: &str,
) -> u64 {
    let mut checked = 0;
    for log in logs {
        for chunk in log.keys.chunks(500) {
            let values: Vec<Option<Vec<u8>>> =
                redis::cmd("MGET").arg(chunk).query(connection).unwrap();
            for (key, value) in chunk.iter().zip(values) {
                let value = value
                    .unwrap_or_else(|| panic!("{whose}: the acknowledged SET of {key} is missing"));
                assert!(value == value_of(key), "{whose}: {key} holds a wrong value");
            }
            checked += chunk.len() as u64;
        }
        let value: Option<i64> = redis::cmd("GET").arg(&log.counter).query(connection).unwrap();
        let value = value.unwrap_or(0);
        let (low, high) =
            (log.increments, log.increments + i64::from(log.in_flight == Some(Op::Incr)));
        assert!(
            (low..=high).contains(&value),
            "{whose}: {} is {value}; its acknowledged INCRs make it at least {low} and at most {high}",
            log.counter
        );
        checked += log.increments as u64;
    }
    checked
}

/// Writes acknowledged in `logs`.
pub fn acknowledged(logs: &[ClientLog]) -> u64 {
    logs.iter().map(|log| log.keys.len() as u64 + log.increments as u64).sum()
}

/// `count` Redis connections to `addr`.
pub fn connections(addr: SocketAddr, count: usize) -> Vec<redis::Connection> {
    (0..count).map(|_| common::redis_connection(addr)).collect()
}

/// The text a server's log gained since it was `from` bytes long.
pub fn log_since(path: &Path, from: u64) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&text[(from as usize).min(text.len())..]).into_owned()
}

/// A file's length now (0 if it does not exist).
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |metadata| metadata.len())
}
