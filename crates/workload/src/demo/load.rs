//! The demo's workload: OLTP sessions (orders, counters, transfers) and a batch load, over the
//! Redis protocol, connected to the primary directly or through the observer's Sentinel front
//! (asking it again for the primary after an error, as a Sentinel client library does); and the
//! check of what they were acknowledged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use resp::Frame;

use super::Verification;
use crate::client::{Client, integer};

pub const COUNTERS: usize = 8;
pub const ACCOUNTS: usize = 16;

/// How long a session following the primary through Sentinel keeps trying to reach one.
const FOLLOW_LIMIT: Duration = Duration::from_secs(120);

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// Where sessions send their commands.
#[derive(Debug, Clone)]
pub enum Target {
    /// This server; an error ends the session (the demo without an observer).
    Direct(SocketAddr),
    /// Whichever server the observer's Sentinel front names as the master `name`; after an
    /// error the session asks again and reconnects.
    Sentinel { sentinel: SocketAddr, name: String },
}

/// What all sessions share: commit counts and latencies, and what was acknowledged.
pub struct Shared {
    pub commits: AtomicU64,
    pub interval: Mutex<Histogram<u64>>,
    pub phase: Mutex<Histogram<u64>>,
    pub total: Mutex<Histogram<u64>>,
    /// INCRs acknowledged, per counter.
    pub counters: [AtomicU64; COUNTERS],
    /// INCRs whose outcome is unknown (the reply was an error or never came: a failover or a
    /// switchover happened meanwhile), per counter.
    pub counters_uncertain: [AtomicU64; COUNTERS],
    pub stop_oltp: AtomicBool,
    pub stop_batch: AtomicBool,
    /// Keys of the orders acknowledged.
    pub orders: Mutex<Vec<String>>,
    /// (client, sequence) of the acknowledged transactions of the other types: a hash, a list
    /// element and a sorted-set member each (`oltp_client`).
    pub typed: Mutex<Vec<(usize, u64)>>,
    /// Times (µs since `epoch`): the last acknowledgement; during an outage, the first
    /// acknowledgement by the server being watched for and the last one before it.
    epoch: Instant,
    last_ack_us: AtomicU64,
    watched: Mutex<Option<SocketAddr>>,
    first_by_watched_us: AtomicU64,
    last_before_watched_us: AtomicU64,
    /// Sessions that found the primary again after an error.
    pub reconnects: AtomicU64,
}

/// What was acknowledged at some moment: for a check that nothing of it was lost.
pub struct Snapshot {
    counters: [u64; COUNTERS],
    uncertain: [u64; COUNTERS],
    orders: Vec<String>,
    typed: Vec<(usize, u64)>,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            commits: AtomicU64::new(0),
            interval: Mutex::new(histogram()),
            phase: Mutex::new(histogram()),
            total: Mutex::new(histogram()),
            counters: Default::default(),
            counters_uncertain: Default::default(),
            stop_oltp: AtomicBool::new(false),
            stop_batch: AtomicBool::new(false),
            orders: Mutex::new(Vec::new()),
            typed: Mutex::new(Vec::new()),
            epoch: Instant::now(),
            last_ack_us: AtomicU64::new(0),
            watched: Mutex::new(None),
            first_by_watched_us: AtomicU64::new(0),
            last_before_watched_us: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
        }
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn record(&self, started: Instant, by: SocketAddr) {
        let us = (started.elapsed().as_micros() as u64).max(1);
        self.commits.fetch_add(1, Ordering::Relaxed);
        let _ = self.interval.lock().record(us);
        let _ = self.phase.lock().record(us);
        let _ = self.total.lock().record(us);
        let now = self.now_us().max(1);
        if *self.watched.lock() == Some(by) && self.first_by_watched_us.load(Ordering::Acquire) == 0
        {
            // Every acknowledgement before this one came from elsewhere (the old primary).
            let before = self.last_ack_us.load(Ordering::Acquire);
            if self
                .first_by_watched_us
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.last_before_watched_us.store(before, Ordering::Release);
            }
        }
        self.last_ack_us.fetch_max(now, Ordering::AcqRel);
    }

    /// From now on, watches for the first commit acknowledged by `server` (the new primary
    /// of a failover or a switchover).
    pub fn watch_for(&self, server: SocketAddr) {
        self.first_by_watched_us.store(0, Ordering::Release);
        *self.watched.lock() = Some(server);
    }

    /// Whether the server watched for has acknowledged a commit.
    pub fn watched_acknowledged(&self) -> bool {
        self.first_by_watched_us.load(Ordering::Acquire) != 0
    }

    /// The time the application could not write: from the last commit acknowledged by any
    /// other server to the first acknowledged by the one watched for.
    pub fn outage(&self) -> Option<Duration> {
        let first = self.first_by_watched_us.load(Ordering::Acquire);
        (first != 0).then(|| {
            Duration::from_micros(
                first.saturating_sub(self.last_before_watched_us.load(Ordering::Acquire)),
            )
        })
    }

    /// What is acknowledged now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            counters: std::array::from_fn(|index| self.counters[index].load(Ordering::Acquire)),
            uncertain: std::array::from_fn(|index| {
                self.counters_uncertain[index].load(Ordering::Acquire)
            }),
            orders: self.orders.lock().clone(),
            typed: self.typed.lock().clone(),
        }
    }
}

impl Default for Shared {
    fn default() -> Shared {
        Shared::new()
    }
}

/// A session's connection to the primary, found again after an error when it follows the
/// primary through Sentinel.
struct Session {
    target: Target,
    client: Option<Client>,
    /// The server `client` is connected to.
    addr: Option<SocketAddr>,
    shared: Arc<Shared>,
}

/// What became of a command.
enum Outcome {
    Done(Frame),
    /// Refused before it ran (`READONLY`, `TRYAGAIN`: not the primary, or not yet): it did
    /// nothing. The session finds the primary again before the next command.
    Refused,
    /// No reply, or an error of a primary being fenced: its effect is unknown. The session
    /// finds the primary again before the next command.
    Failed,
}

impl Session {
    fn new(target: Target, shared: Arc<Shared>) -> Session {
        Session { target, client: None, addr: None, shared }
    }

    fn following(&self) -> bool {
        matches!(self.target, Target::Sentinel { .. })
    }

    async fn connect(&mut self) -> anyhow::Result<&mut Client> {
        if self.client.is_none() {
            let (client, addr) = match &self.target {
                Target::Direct(addr) => (Client::connect(*addr).await?, *addr),
                Target::Sentinel { sentinel, name } => {
                    let deadline = Instant::now() + FOLLOW_LIMIT;
                    loop {
                        match primary_from_sentinel(*sentinel, name).await {
                            Ok(addr) => match Client::connect(addr).await {
                                Ok(client) => break (client, addr),
                                Err(error) if Instant::now() >= deadline => return Err(error),
                                Err(_) => {}
                            },
                            Err(error) if Instant::now() >= deadline => {
                                return Err(error.context("no primary found through Sentinel"));
                            }
                            Err(_) => {}
                        }
                        if self.shared.stop_oltp.load(Ordering::Acquire)
                            && self.shared.stop_batch.load(Ordering::Acquire)
                        {
                            anyhow::bail!("stopped while looking for the primary");
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            };
            self.client = Some(client);
            self.addr = Some(addr);
        }
        Ok(self.client.as_mut().expect("connected"))
    }

    /// Runs `steps` (a MULTI … EXEC) one after the other: EXEC's reply, or none if a step was
    /// refused or failed (the connection then goes, and its MULTI with it).
    async fn transaction(&mut self, steps: &[&[&[u8]]]) -> anyhow::Result<Option<Frame>> {
        for (at, step) in steps.iter().enumerate() {
            match self.call(step).await? {
                Outcome::Done(frame) if at + 1 == steps.len() => return Ok(Some(frame)),
                Outcome::Done(_) => {}
                Outcome::Refused | Outcome::Failed => return Ok(None),
            }
        }
        Ok(None)
    }

    async fn call(&mut self, args: &[&[u8]]) -> anyhow::Result<Outcome> {
        let following = self.following();
        let client = match self.connect().await {
            Ok(client) => client,
            Err(error) => return Err(error),
        };
        let reply = client.command(args).await;
        match reply {
            Ok(Frame::Error(message)) => {
                let text = String::from_utf8_lossy(&message).into_owned();
                // A database that is not (or no longer) the primary refuses, and one being
                // fenced fails what it had not acknowledged: a client of Sentinel asks again.
                if following && (text.starts_with("READONLY") || text.starts_with("TRYAGAIN")) {
                    self.lost();
                    // Not the primary (yet): ask again shortly, as a client library would.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    return Ok(Outcome::Refused);
                }
                if following && (text.contains("refuses further redo") || text.contains("fenced")) {
                    self.lost();
                    return Ok(Outcome::Failed);
                }
                anyhow::bail!("{} failed: {text}", String::from_utf8_lossy(args[0]))
            }
            Ok(frame) => Ok(Outcome::Done(frame)),
            Err(_) if following => {
                self.lost();
                Ok(Outcome::Failed)
            }
            Err(error) => Err(error),
        }
    }

    /// The command acknowledged: a commit by the server this session is connected to.
    fn acknowledged(&self, started: Instant) {
        if let Some(addr) = self.addr {
            self.shared.record(started, addr);
        }
    }

    fn lost(&mut self) {
        self.client = None;
        self.addr = None;
        self.shared.reconnects.fetch_add(1, Ordering::Relaxed);
    }
}

/// The primary's client address as the Sentinel front names it.
pub async fn primary_from_sentinel(sentinel: SocketAddr, name: &str) -> anyhow::Result<SocketAddr> {
    let mut client = Client::connect(sentinel).await?;
    let reply = client
        .command(&[b"SENTINEL", b"get-master-addr-by-name", name.as_bytes()])
        .await
        .context("asking Sentinel for the primary")?;
    let Frame::Array(parts) = reply else { anyhow::bail!("Sentinel names no primary: {reply:?}") };
    let text = |frame: Option<&Frame>| match frame {
        Some(Frame::Bulk(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    };
    let (Some(host), Some(port)) = (text(parts.first()), text(parts.get(1))) else {
        anyhow::bail!("Sentinel answered {parts:?}")
    };
    format!("{host}:{port}").parse().with_context(|| format!("'{host}:{port}' is not an address"))
}

/// Small transactions: an order (SET), a counter (INCR), a transfer between two accounts
/// (MULTI/EXEC of two INCRBYs that sum to zero), or an order's items, event and rank (MULTI/EXEC
/// of an HSET, an RPUSH and a ZADD).
pub async fn oltp_client(target: Target, client: usize, shared: Arc<Shared>) -> anyhow::Result<()> {
    let mut session = Session::new(target, shared.clone());
    let mut rng = rand::rngs::StdRng::seed_from_u64(client as u64);
    let mut sequence = 0u64;
    let order_value = vec![b'o'; 200];
    while !shared.stop_oltp.load(Ordering::Acquire) {
        // Connected first: a commit's latency is timed from its command, not from the lookup,
        // TCP, TLS and `AUTH` of a new connection (a password check is tens of milliseconds of
        // the server's CPU by design: counted in, each session's first commit was the slowest
        // of its phase, 280–310 ms in the OLTP phase).
        session.connect().await?;
        let started = Instant::now();
        match rng.random_range(0..5) {
            0 | 1 => {
                sequence += 1;
                let key = format!("order:{client}:{sequence}");
                if let Outcome::Done(_) =
                    session.call(&[b"SET", key.as_bytes(), &order_value]).await?
                {
                    session.acknowledged(started);
                    shared.orders.lock().push(key);
                }
            }
            2 => {
                let counter = rng.random_range(0..COUNTERS);
                let key = format!("counter:{counter}");
                match session.call(&[b"INCR", key.as_bytes()]).await? {
                    Outcome::Done(_) => {
                        session.acknowledged(started);
                        shared.counters[counter].fetch_add(1, Ordering::Relaxed);
                    }
                    Outcome::Refused => {}
                    Outcome::Failed => {
                        shared.counters_uncertain[counter].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            4 => {
                sequence += 1;
                let items = format!("order:{client}:{sequence}:items");
                let events = format!("events:{client}");
                let player = format!("player:{client}:{sequence}");
                let number = sequence.to_string();
                let steps: [&[&[u8]]; 5] = [
                    &[b"MULTI"],
                    &[b"HSET", items.as_bytes(), b"sku", number.as_bytes(), b"qty", b"3"],
                    &[b"RPUSH", events.as_bytes(), number.as_bytes()],
                    &[b"ZADD", b"leaderboard", number.as_bytes(), player.as_bytes()],
                    &[b"EXEC"],
                ];
                let reply = session.transaction(&steps).await?;
                if let Some(reply) = reply {
                    anyhow::ensure!(
                        matches!(&reply, Frame::Array(items) if items.len() == 3),
                        "EXEC answered {reply:?}"
                    );
                    session.acknowledged(started);
                    shared.typed.lock().push((client, sequence));
                }
            }
            _ => {
                let from = format!("balance:{}", rng.random_range(0..ACCOUNTS));
                let to = format!("balance:{}", rng.random_range(0..ACCOUNTS));
                // One transaction: if any step fails the connection goes (and its MULTI with
                // it); EXEC applies both INCRBYs or neither, so balances always sum to zero.
                let steps: [&[&[u8]]; 4] = [
                    &[b"MULTI"],
                    &[b"INCRBY", from.as_bytes(), b"-5"],
                    &[b"INCRBY", to.as_bytes(), b"5"],
                    &[b"EXEC"],
                ];
                let reply = session.transaction(&steps).await?;
                if let Some(reply) = reply {
                    anyhow::ensure!(
                        matches!(&reply, Frame::Array(items) if items.len() == 2),
                        "EXEC answered {reply:?}"
                    );
                    session.acknowledged(started);
                }
            }
        }
    }
    Ok(())
}

/// Large transactions: MSET of 200 keys of 512 bytes (about 100 KiB of redo each).
pub async fn batch_client(
    target: Target,
    client: usize,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let mut session = Session::new(target, shared.clone());
    let value = vec![b'b'; 512];
    let mut batch = 0u64;
    while !shared.stop_batch.load(Ordering::Acquire) {
        batch += 1;
        let keys: Vec<String> =
            (0..200).map(|row| format!("load:{client}:{}", (batch * 200 + row) % 20_000)).collect();
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for key in &keys {
            args.push(key.as_bytes());
            args.push(&value);
        }
        // Connected first, as `oltp_client`'s sessions.
        session.connect().await?;
        let started = Instant::now();
        if let Outcome::Done(_) = session.call(&args).await? {
            session.acknowledged(started);
        }
    }
    Ok(())
}

/// Checks the database at `addr` against what was acknowledged (`snapshot`): every
/// acknowledged order present and each counter at least its acknowledged INCRs — and, with
/// `exact` (every session stopped), balances summing to zero and each counter at most its
/// acknowledged INCRs plus the ones whose outcome is unknown.
pub async fn verify(
    addr: SocketAddr,
    snapshot: &Snapshot,
    exact: bool,
    recovered_records: u64,
) -> anyhow::Result<Verification> {
    let mut connection = Client::connect(addr).await?;
    let mut counters_exact = true;
    let mut counters_lost = 0u64;
    for index in 0..COUNTERS {
        let value = connection.ok(&[b"GET", format!("counter:{index}").as_bytes()]).await?;
        let value = if value == Frame::Null {
            0
        } else {
            integer(&value).context("a counter is not an integer")?
        };
        let acknowledged = snapshot.counters[index] as i64;
        let most = acknowledged + snapshot.uncertain[index] as i64;
        counters_exact &= value >= acknowledged && (!exact || value <= most);
        counters_lost += acknowledged.saturating_sub(value).max(0) as u64;
    }
    let mut balances_sum = 0i64;
    for account in 0..ACCOUNTS {
        let value = connection.ok(&[b"GET", format!("balance:{account}").as_bytes()]).await?;
        if value != Frame::Null {
            balances_sum += integer(&value).context("a balance is not an integer")?;
        }
    }
    let mut missing = 0u64;
    for chunk in snapshot.orders.chunks(500) {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(chunk.iter().map(|key| key.as_bytes()));
        match connection.ok(&args).await? {
            Frame::Array(values) => {
                missing += values.iter().filter(|value| **value == Frame::Null).count() as u64
            }
            other => anyhow::bail!("MGET answered {other:?}"),
        }
    }
    // Every acknowledged order's hash, event and rank: the other types, through the failover.
    let mut typed_missing = 0u64;
    let mut events: std::collections::BTreeMap<usize, std::collections::BTreeSet<Vec<u8>>> =
        std::collections::BTreeMap::new();
    for (client, sequence) in &snapshot.typed {
        let number = sequence.to_string();
        let items = format!("order:{client}:{sequence}:items");
        let player = format!("player:{client}:{sequence}");
        let sku = connection.ok(&[b"HGET", items.as_bytes(), b"sku"]).await?;
        let score = connection.ok(&[b"ZSCORE", b"leaderboard", player.as_bytes()]).await?;
        if !events.contains_key(client) {
            let list = connection
                .ok(&[b"LRANGE", format!("events:{client}").as_bytes(), b"0", b"-1"])
                .await?;
            let Frame::Array(elements) = list else { anyhow::bail!("LRANGE answered {list:?}") };
            let elements = elements
                .into_iter()
                .filter_map(|element| match element {
                    Frame::Bulk(bytes) => Some(bytes.to_vec()),
                    _ => None,
                })
                .collect();
            events.insert(*client, elements);
        }
        let pushed = events[client].contains(number.as_bytes());
        let present = sku == Frame::Bulk(number.clone().into())
            && score == Frame::Bulk(number.clone().into())
            && pushed;
        typed_missing += u64::from(!present);
    }
    let uncertain = snapshot.uncertain.iter().sum();
    Ok(Verification {
        crashed_and_restarted: true,
        recovered_records,
        counters: COUNTERS as u64,
        counters_exact,
        counters_uncertain: uncertain,
        counters_lost,
        balances_sum,
        while_writing: !exact,
        orders_checked: snapshot.orders.len() as u64,
        orders_missing: missing,
        typed_checked: snapshot.typed.len() as u64,
        typed_missing,
        // While sessions still write (not `exact`), the balances are read between transfers
        // that go on committing: their sum is checked once every session stopped.
        passed: counters_exact
            && (balances_sum == 0 || !exact)
            && missing == 0
            && typed_missing == 0,
    })
}
