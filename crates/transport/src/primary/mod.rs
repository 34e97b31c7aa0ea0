//! The primary's side of redo transport: one sender per destination.
//!
//! Each destination has a *control connection*, run by its own thread: handshake, catch-up
//! (what the standby lacks, read from the online logs and the archive), ASYNC streaming of new
//! writes from an in-memory queue (the copy of the log buffer each write leaves behind; when
//! the queue overflows, the sender reads the online log files instead, without a gap),
//! archived logs for gap resolution, and heartbeats. A SYNC destination that has caught up is
//! *synchronized*: from then on the log writer itself sends each write on a second, *SYNC*
//! connection before its local write, and the acknowledgement is read after its local sync
//! (`sync`), so that nothing but the network and the standby's own write sits between a
//! commit and its acknowledgement; several writes may be in flight on it at once (the redo
//! engine's pipeline). A destination that fails is retried after `reopen` and given up after
//! `max_failure` consecutive failures.
//!
//! The protection mode decides what the log writer waits for (see `ProtectionWait`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex, RwLock};
use proto::AckWanted;
use redo::ship::{LogWrite, ShipWait, Shipper, WriteKind};
use redo::types::now_unix_us;
use redo::{LogSeq, RedoAddr, RedoLog, Scn};
use stats::{Metrics, WaitEvent};

use crate::auto_compression::AutoCompression;
use crate::compression::CompressionCounters;
use crate::config::{DestinationConfig, DestinationState, ProtectionMode, Transport};
use crate::conn::Conn;
use crate::quorum::{Protection, SyncQuorum};
use crate::settings::Change;

mod alternate;
mod archive;
mod frame;
mod sender;
mod status;
mod sync;

use frame::{frame_of, trimmed, wire_kind};
pub use status::{DestinationStatus, LagSummary, Phase};

/// Bytes of writes a destination may hold in memory; beyond it the sender reads the files.
const QUEUE_BYTES_MAX: usize = 64 << 20;
/// A streaming ASYNC destination sends redo at most this often (`sender::stream::linger`): the
/// longest a write waits in the queue for others to share its send. Kept well under the
/// ASYNC transport lag target (p99 <= 2 RTT + 10 ms).
const ASYNC_SEND_INTERVAL: Duration = Duration::from_millis(4);
/// Bytes queued that an ASYNC destination sends at once, without waiting out
/// `ASYNC_SEND_INTERVAL`.
const ASYNC_SEND_BYTES: usize = 1 << 20;
/// How often an idle control connection sends a heartbeat.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// Largest frame either side accepts.
pub(crate) const PAYLOAD_MAX: usize = (64 << 20) + 4096;
/// The largest log buffer of a primary with standbys: a log write (at most the buffer, plus
/// unit headers and padding) must fit in one frame.
pub const LOG_BUFFER_MAX_SHIPPED: u64 = 48 << 20;
/// The oldest protocol version of a standby that takes compressed frames.
const COMPRESSION_VERSION_MIN: u16 = 3;
/// The oldest protocol version of a standby that takes a write without its zero tail
/// (`TrimmedWrite`).
const TRIM_VERSION_MIN: u16 = 5;
/// Transport-lag samples kept per destination.
const UNACKED_MAX: usize = 1 << 20;

/// Where the log a closed header closes ends.
fn closed_end(write: &LogWrite) -> Option<u64> {
    match redo::format::decode_header(&write.bytes, write.offset) {
        Ok(redo::format::HeaderBlock::Closed(_, end)) => Some(end.end_offset),
        _ => None,
    }
}

/// Whether `write` is what a standby that holds everything before `next` takes next: the
/// write covering `next`, or the closed header once it holds every unit of the log.
fn continues(write: &LogWrite, next: RedoAddr) -> bool {
    match write.kind {
        WriteKind::OpenHeader => next == RedoAddr { seq: write.seq, offset: 0 },
        WriteKind::Units => {
            write.seq == next.seq && write.offset <= next.offset && next.offset < write.end().offset
        }
        // Only once the standby holds every unit of the log.
        WriteKind::ClosedHeader => {
            write.seq == next.seq && closed_end(write).is_some_and(|end| next.offset >= end)
        }
    }
}

/// What comes after `write` in stream order.
fn after(write: &LogWrite) -> RedoAddr {
    match write.kind {
        WriteKind::Units => write.end(),
        WriteKind::OpenHeader => RedoAddr { seq: write.seq, offset: 2 * write.bytes.len() as u64 },
        WriteKind::ClosedHeader => RedoAddr { seq: write.seq.next(), offset: 0 },
    }
}

#[derive(Debug, Default)]
struct Queue {
    writes: VecDeque<Arc<LogWrite>>,
    bytes: usize,
    overflowed: bool,
    /// The sender waits for more writes to batch (`sender::stream::linger`): the log writer
    /// wakes it only once `ASYNC_SEND_BYTES` are queued.
    lingering: bool,
    /// Bumped, under this lock, by every wake-up of the sender for something outside the
    /// queue (`Destination::notify`): shutdown, a broken connection, a settings change, gap
    /// requests, a failed archive connection. The sender reads it before it looks at those
    /// and does not wait if it moved meanwhile: a wake-up between its look and its wait is
    /// not lost. (A write queued, or the queue overflowing, it sees under the lock itself.)
    wakes: u64,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    last_error: Option<String>,
    failures: u32,
    sent: RedoAddr,
    acknowledged: RedoAddr,
    applied_scn: Scn,
    apply_lag_us: u64,
    /// Where the log writer's last write ends (in stream order).
    last_write_end: RedoAddr,
    /// The log writer has offered a write since the transport started: until then
    /// `last_write_end` is the durable end when it started, and a write already under way
    /// then may end past it without being offered.
    offered: bool,
    /// Sent and not yet acknowledged: where each piece ends, and when it was written.
    unacked: VecDeque<(RedoAddr, u64)>,
    rtt_us: Option<u64>,
    send_buffer_bytes: Option<u64>,
    tcp_congestion: Option<String>,
    bytes_sent: u64,
    last_heard: Option<Instant>,
    gaps: Vec<LogSeq>,
    /// The control connection must be dropped and made again (set by a failed SYNC write).
    reconnect: bool,
    /// The destination's settings changed at run time: its connections are made again with
    /// them at once (no failure counted, no `reopen` wait).
    restart: bool,
    /// Counts the SYNC connections installed and dropped: a write sent in one epoch is never
    /// acknowledged in another.
    sync_epoch: u64,
    /// Writes sent on the SYNC connection and not yet acknowledged, oldest first.
    sync_in_flight: VecDeque<sync::SyncSent>,
}

impl State {
    /// Redo the standby lacks that will not be sent from the queue (a deferred or disconnected
    /// destination, an overflowed or cleared queue), written at `time_us` and retired once the
    /// standby holds `end`: it counts in the transport lag unless older redo it lacks already
    /// does.
    fn note_unsent(&mut self, end: RedoAddr, time_us: u64) {
        if self.unacked.is_empty() {
            self.unacked.push_back((end, time_us));
        }
    }
}

/// One destination.
struct Destination {
    /// Its name (never changes).
    name: String,
    /// Its settings: changed at run time by `PrimaryTransport::reconfigure`. A session reads
    /// them once when it connects; what is read where it is used (timeouts, affirm) changes
    /// in place.
    config: RwLock<Arc<DestinationConfig>>,
    state: Mutex<State>,
    queue: Mutex<Queue>,
    /// When the oldest of the writes the sender has taken from `queue` and not yet recorded
    /// as sent (`State::unacked`) was written; 0 when it holds none. Set under the queue's
    /// lock as it takes them, cleared once they are recorded: `transport_lag_us` sees every
    /// write in one of the three places.
    in_hand_us: AtomicU64,
    /// Signalled (with `queue`) when there is something for the control thread to do.
    wake: Condvar,
    /// The SYNC connection, once synchronized, with the `sync_epoch` it was installed in: the
    /// handle the log writer sends on, and the one acknowledgements are read from (by one
    /// waiter at a time).
    sync_send: Mutex<Option<(u64, Conn)>>,
    sync_recv: Mutex<Option<(u64, Conn)>>,
    lag: Mutex<Histogram<u64>>,
    /// The control connection's compressor, while connected to a standby that takes
    /// compressed frames (only the control thread uses it).
    compressor: Mutex<Option<proto::FrameCompressor>>,
    /// Whether `compressor` is set (read by status without waiting for a send to end).
    compression_active: AtomicBool,
    /// `compression = "auto"`: the decision (sender thread only), and its last description
    /// for status.
    auto: Mutex<Option<AutoCompression>>,
    auto_state: Mutex<Option<String>>,
    /// Under `auto`, each open archive connection's state, by its index in the session.
    archive_auto: Mutex<std::collections::BTreeMap<usize, String>>,
    compression: CompressionCounters,
    /// Bytes of frames sent on its connections (`Conn::count_sent`).
    wire_bytes: Arc<AtomicU64>,
    /// Archive connections open in this session (`archive`).
    archive_connections: AtomicU32,
}

impl Destination {
    fn config(&self) -> Arc<DestinationConfig> {
        self.config.read().clone()
    }

    fn is_sync(&self) -> bool {
        self.config.read().transport == Transport::Sync
    }

    fn is_deferred(&self) -> bool {
        self.config.read().state == DestinationState::Defer
    }

    /// The link's bandwidth, for `send_buffer = "auto"`.
    fn bandwidth_bytes_per_s(&self) -> Option<f64> {
        self.config
            .read()
            .bandwidth
            .as_deref()
            .and_then(|text| units::parse_rate(text).ok())
            .map(|rate| rate.bytes_per_s())
    }

    fn ack_wanted(&self) -> AckWanted {
        if self.config.read().affirm { AckWanted::Durable } else { AckWanted::Received }
    }

    fn notify(&self) {
        let mut queue = self.queue.lock();
        queue.wakes = queue.wakes.wrapping_add(1);
        self.wake.notify_all();
    }

    /// Closes the SYNC connection, if any (a reader holding its receiving handle sees the end
    /// of the stream and drops it).
    fn drop_sync(&self) {
        if let Some((_, conn)) = self.sync_send.lock().take() {
            conn.shutdown();
        }
        if let Some(mut recv) = self.sync_recv.try_lock() {
            recv.take();
        }
    }

    /// The standby holds everything before `acknowledged`: retire what that covers.
    fn acknowledge(&self, state: &mut State, acknowledged: RedoAddr) {
        let key = (acknowledged.seq.0, acknowledged.offset);
        if key > (state.acknowledged.seq.0, state.acknowledged.offset) {
            state.acknowledged = acknowledged;
        }
        let now = now_unix_us();
        let mut lag = self.lag.lock();
        while let Some(&(end, time_us)) = state.unacked.front() {
            if (end.seq.0, end.offset) > key {
                break;
            }
            state.unacked.pop_front();
            let _ = lag.record(now.saturating_sub(time_us).max(1));
        }
    }

    /// Age of the oldest redo the standby lacks that is still queued for the sender (an
    /// ASYNC destination's writes wait there up to `ASYNC_SEND_INTERVAL` for others to share
    /// their send), in the sender's hands, or sent and not yet acknowledged: redo a failover
    /// to it would lose. 0 when it has everything.
    ///
    /// Reads the queue, then the sender's hands, then the state, one lock after the other
    /// (the sender waits on the queue's lock with the state's taken inside it, so the state's
    /// must not be held here). A queued write the sender takes meanwhile is seen in the next
    /// place read: it is in its hands from the moment it leaves the queue until it is
    /// recorded as sent. One acknowledged meanwhile still counts from the first (the lag is
    /// overstated for that instant).
    ///
    /// Redo that leaves the queue unsent (the connection ended, or the queue overflowed), or
    /// is never queued (the destination is down), is recorded with the sent ones when none
    /// is, dated by the oldest of it and retired once the standby holds everything written
    /// by then; a new connection retires only what the standby says it holds. A destination
    /// that is down shows the age of the oldest redo it lacks, growing.
    fn transport_lag_us(&self) -> u64 {
        let queued = self.queue.lock().writes.front().map(|write| write.time_us);
        let in_hand = Some(self.in_hand_us.load(Ordering::Acquire)).filter(|&time_us| time_us > 0);
        let in_flight = self.state.lock().unacked.front().map(|&(_, time_us)| time_us);
        queued
            .into_iter()
            .chain(in_hand)
            .chain(in_flight)
            .min()
            .map_or(0, |time_us| now_unix_us().saturating_sub(time_us))
    }
}

/// Who the primary is, as its hellos say.
#[derive(Debug, Clone, Default)]
pub struct PrimaryIdentity {
    /// Set when the sender is a standby or far sync forwarding its primary's redo
    /// (cascading, `crate::cascade`).
    pub relay: Option<Relay>,
    /// Its member name (empty in the single-role form).
    pub member: String,
    /// Its incarnation history (the newest records go in every hello).
    pub history: Vec<proto::IncarnationRecord>,
    /// Mutual TLS to the standbys (each destination's `name` is the name its certificate must
    /// prove); none: plain TCP.
    pub tls: Option<Arc<tls::RedoTls>>,
}

/// A forwarding member's view of the primary whose redo it forwards.
#[derive(Clone)]
pub struct Relay {
    /// The primary's member name (`Hello::relay_of`).
    pub primary: String,
    /// What this member last heard of its primary: what its heartbeats pass on.
    pub upstream: Arc<dyn Fn() -> UpstreamWord + Send + Sync>,
}

/// What a forwarder's heartbeats pass on of its primary, as this member last heard it.
#[derive(Debug, Clone, Default)]
pub struct UpstreamWord {
    /// The primary's clock now (microseconds since the Unix epoch) and the newest SCN it
    /// announced.
    pub primary_time_us: u64,
    pub current_scn: Scn,
    /// How long since this member last heard its primary (for a version 9 downstream).
    pub primary_silence_ms: u64,
    /// This member's own transport lag behind its primary (what the primary last said, and
    /// the silence since): a member downstream lacks at least what this one lacks, so its
    /// end-to-end lag is at least this.
    pub transport_lag_us: u64,
    /// The primary's word, in its last heartbeat of its current session, for the fast-start
    /// targets behind this member (passed on to each alone; never more than it said).
    pub targets: Vec<proto::TargetWord>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay").field("primary", &self.primary).finish_non_exhaustive()
    }
}

/// What a primary learns from its standbys that concerns its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportEvent {
    /// A standby accepted this primary (a `Welcome`) in `incarnation` (the one its hello
    /// named): some member follows it.
    Followed { destination: String, incarnation: u32 },
    /// A standby refused this primary because it knows a newer incarnation: the primary has
    /// been failed over and must stop taking writes.
    Fenced { incarnation: u32, primary: String, reason: String },
}

/// Where a primary's transport reports `TransportEvent`s.
pub type TransportEvents = Arc<dyn Fn(TransportEvent) + Send + Sync>;

/// The primary's redo transport. Plug `shipper()` into the redo log.
pub struct PrimaryTransport {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Inner {
    redo: RedoLog,
    identity: PrimaryIdentity,
    events: TransportEvents,
    /// Fast-start failover's lease and grant, when it is enabled.
    fast_start: Option<Arc<crate::fast_start::FastStart>>,
    /// Changed at run time by `PrimaryTransport::reconfigure`.
    mode: Mutex<ProtectionMode>,
    quorum: SyncQuorum,
    sync_latency: Duration,
    destinations: Vec<Arc<Destination>>,
    shutdown: AtomicBool,
    /// Set when the server stops: past it, a write still waiting for its standbys (or the
    /// fast-start observer) is not acknowledged, so that a stop takes bounded time.
    give_up_at: Mutex<Option<Instant>>,
    /// Signalled when any destination's acknowledged position moves (Maximum Protection).
    progress: Mutex<()>,
    progressed: Condvar,
    next_write_id: AtomicU64,
    /// Maximum Availability: whether the primary is synchronized, for logging transitions.
    synchronized: AtomicBool,
    sync_remote_write: Arc<WaitEvent>,
    protection_wait: Arc<WaitEvent>,
    /// Commits waiting for the fast-start failover observer's lease or grant.
    lease_wait: Arc<WaitEvent>,
}

impl PrimaryTransport {
    /// Starts a sender for every destination. `redo` is a handle on the primary's redo log.
    pub fn start(
        redo: RedoLog,
        protection: impl Into<Protection>,
        destinations: Vec<DestinationConfig>,
        metrics: &Metrics,
    ) -> std::io::Result<PrimaryTransport> {
        PrimaryTransport::start_as(
            redo,
            PrimaryIdentity::default(),
            protection,
            destinations,
            metrics,
            Arc::new(|_| {}),
            None,
        )
    }

    /// Starts a sender for every destination, for the primary `identity`, reporting what it
    /// learns about its role to `events`.
    pub fn start_as(
        redo: RedoLog,
        identity: PrimaryIdentity,
        protection: impl Into<Protection>,
        destinations: Vec<DestinationConfig>,
        metrics: &Metrics,
        events: TransportEvents,
        fast_start: Option<Arc<crate::fast_start::FastStart>>,
    ) -> std::io::Result<PrimaryTransport> {
        // Where the log writer's next write starts, in stream order: after a closed log, the
        // next log's open header.
        let durable = redo.durable_addr();
        // Where the log writer's next write will start, as a ship cursor counts it: the next
        // log's beginning after a closed log, and log 1's in a database that has written none.
        let current = match redo.log_extent(durable.seq) {
            Some(extent) if extent.end.is_some() => RedoAddr { seq: durable.seq.next(), offset: 0 },
            None if durable == RedoAddr::default() => RedoAddr { seq: LogSeq(1), offset: 0 },
            _ => durable,
        };
        let destinations: Vec<Arc<Destination>> = destinations
            .into_iter()
            .map(|config| {
                Arc::new(Destination {
                    name: config.name.clone(),
                    state: Mutex::new(State {
                        phase: Phase::Connecting,
                        last_error: None,
                        failures: 0,
                        sent: RedoAddr::default(),
                        acknowledged: RedoAddr::default(),
                        applied_scn: Scn(0),
                        apply_lag_us: 0,
                        last_write_end: current,
                        unacked: VecDeque::new(),
                        rtt_us: None,
                        send_buffer_bytes: None,
                        tcp_congestion: None,
                        bytes_sent: 0,
                        last_heard: None,
                        gaps: Vec::new(),
                        reconnect: false,
                        offered: false,
                        restart: false,
                        sync_epoch: 0,
                        sync_in_flight: VecDeque::new(),
                    }),
                    queue: Mutex::new(Queue::default()),
                    in_hand_us: AtomicU64::new(0),
                    wake: Condvar::new(),
                    sync_send: Mutex::new(None),
                    sync_recv: Mutex::new(None),
                    lag: Mutex::new(
                        Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
                    ),
                    compressor: Mutex::new(None),
                    compression_active: AtomicBool::new(false),
                    auto: Mutex::new(None),
                    auto_state: Mutex::new(None),
                    archive_auto: Mutex::new(Default::default()),
                    compression: CompressionCounters::default(),
                    wire_bytes: Arc::new(AtomicU64::new(0)),
                    archive_connections: AtomicU32::new(0),
                    config: RwLock::new(Arc::new(config)),
                })
            })
            .collect();
        let protection = protection.into();
        if let Some(fast_start) = &fast_start {
            // How far each target has acknowledged: a target is synchronized only once it
            // holds what the primary acknowledged without it.
            let destinations = destinations.clone();
            fast_start.attach(Arc::new(move |name: &str| {
                destinations
                    .iter()
                    .find(|destination| destination.name == name)
                    .map_or(roles::fast_start::Position::default(), |destination| {
                        destination.state.lock().acknowledged.into()
                    })
            }));
        }
        let inner = Arc::new(Inner {
            redo,
            identity,
            events,
            fast_start,
            mode: Mutex::new(protection.mode),
            quorum: protection.quorum,
            sync_latency: protection.sync_latency,
            destinations,
            shutdown: AtomicBool::new(false),
            give_up_at: Mutex::new(None),
            progress: Mutex::new(()),
            progressed: Condvar::new(),
            next_write_id: AtomicU64::new(1),
            synchronized: AtomicBool::new(false),
            sync_remote_write: metrics.wait("SYNC remote write"),
            protection_wait: metrics.wait("Maximum Protection standby wait"),
            lease_wait: metrics.wait("fast-start failover observer wait"),
        });
        let mut threads = Vec::new();
        for destination in &inner.destinations {
            let inner = inner.clone();
            let destination = destination.clone();
            let name = format!("redo-send-{}", destination.name);
            threads.push(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || inner.control(&destination))?,
            );
        }
        Ok(PrimaryTransport { inner, threads: Mutex::new(threads) })
    }

    /// The hook for `RedoLog::set_shipper`.
    pub fn shipper(&self) -> Arc<dyn Shipper> {
        Arc::new(ShipperHandle(self.inner.clone()))
    }

    pub fn mode(&self) -> ProtectionMode {
        self.inner.mode()
    }

    /// Whether every commit is currently protected as the mode promises: as many SYNC
    /// standbys are synchronized as the quorum needs, at least one (always true in Maximum
    /// Performance).
    pub fn synchronized(&self) -> bool {
        self.inner.mode() == ProtectionMode::MaximumPerformance || self.inner.quorum_synchronized()
    }

    pub fn status(&self) -> Vec<DestinationStatus> {
        self.inner
            .destinations
            .iter()
            .map(|destination| self.inner.status_of(destination))
            .collect()
    }

    /// Transport lag samples per destination since the last call (and resets them).
    pub fn take_lag(&self) -> Vec<(String, LagSummary)> {
        self.inner
            .destinations
            .iter()
            .map(|destination| {
                let mut histogram = destination.lag.lock();
                let summary = LagSummary {
                    samples: histogram.len(),
                    p50_ms: histogram.value_at_quantile(0.5) as f64 / 1000.0,
                    p99_ms: histogram.value_at_quantile(0.99) as f64 / 1000.0,
                    max_ms: histogram.max() as f64 / 1000.0,
                };
                histogram.reset();
                (destination.name.clone(), summary)
            })
            .collect()
    }

    /// Applies settings changed at run time: the protection mode, and each destination's
    /// attributes (matched by name: the destinations are the ones it started with). A change
    /// of timeouts or affirm is read where it is used; any other change makes the
    /// destination's connections again with the new settings, at once (a synchronized SYNC
    /// destination leaves the synchronized set first, as after a network failure, and
    /// synchronizes again once caught up). Returns the destinations changed, and how.
    pub fn reconfigure(
        &self,
        mode: ProtectionMode,
        destinations: &[DestinationConfig],
    ) -> Result<Vec<(String, Change)>, String> {
        PrimaryTransport::reconfigure_inner(&self.inner, mode, destinations)
    }

    fn reconfigure_inner(
        inner: &Arc<Inner>,
        mode: ProtectionMode,
        destinations: &[DestinationConfig],
    ) -> Result<Vec<(String, Change)>, String> {
        let same_names = destinations.len() == inner.destinations.len()
            && inner.destinations.iter().all(|destination| {
                destinations.iter().any(|config| config.name == destination.name)
            });
        if !same_names {
            return Err(format!(
                "the destinations are {:?}: they cannot be added or removed at run time",
                inner.destinations.iter().map(|destination| &destination.name).collect::<Vec<_>>()
            ));
        }
        let mut changes = Vec::new();
        for destination in &inner.destinations {
            let new = destinations
                .iter()
                .find(|config| config.name == destination.name)
                .expect("checked above");
            let change = Change::between(&destination.config(), new);
            if change == Change::None {
                continue;
            }
            let (epoch, synchronized) = {
                // The new settings and the request to reconnect are set together, so that
                // the control thread connects again with these.
                let mut state = destination.state.lock();
                *destination.config.write() = Arc::new(new.clone());
                if change == Change::Reconnect {
                    state.restart = true;
                }
                (state.sync_epoch, state.phase == Phase::Synchronized)
            };
            tracing::info!(destination = %destination.name, ?change, state = new.state.name(), transport = ?new.transport, affirm = new.affirm, compression = new.compression.name(), max_connections = new.max_connections, net_timeout = ?new.net_timeout, "destination changed at run time");
            if change == Change::Reconnect && synchronized {
                inner.desynchronize(destination, epoch, "its settings changed at run time");
            }
            destination.notify();
            changes.push((destination.name.clone(), change));
        }
        let old = std::mem::replace(&mut *inner.mode.lock(), mode);
        if old != mode {
            tracing::warn!(from = ?old, to = ?mode, "protection mode changed at run time");
            inner.synchronized.store(!inner.quorum_synchronized(), Ordering::Release);
            inner.note_synchronization();
            if let Some(fast_start) = &inner.fast_start {
                fast_start.wake();
            }
            let _progress = inner.progress.lock();
            inner.progressed.notify_all();
        }
        Ok(changes)
    }

    /// Connects to destination `name` now if it waits to reconnect (its `reopen` interval):
    /// a failover target that sealed this member, a forwarder, wants its tail at once.
    pub fn connect_now(&self, name: &str) {
        for destination in &self.inner.destinations {
            if destination.name == name {
                let mut state = destination.state.lock();
                if state.phase == Phase::Disconnected {
                    state.restart = true;
                }
                drop(state);
                destination.notify();
            }
        }
    }

    /// Retries destination `name` if it was given up after `max_failure` failures (any change
    /// to it does, `state=enable` included, even one that changes nothing).
    pub fn retry(&self, name: &str) {
        for destination in &self.inner.destinations {
            if destination.name == name {
                let mut state = destination.state.lock();
                if state.phase == Phase::GaveUp {
                    state.restart = true;
                }
                drop(state);
                destination.notify();
            }
        }
    }

    /// How many SYNC AFFIRM destinations are synchronized now (raising the protection mode to
    /// Maximum Protection at run time needs the quorum of them).
    pub fn synchronized_affirm(&self) -> usize {
        self.inner
            .destinations
            .iter()
            .filter(|destination| {
                let config = destination.config();
                config.transport == Transport::Sync
                    && config.affirm
                    && destination.state.lock().phase == Phase::Synchronized
            })
            .count()
    }

    /// Stops every sender (the redo log must no longer use the shipper).
    /// The server is stopping: writes still waiting for their standbys (or the observer's
    /// lease) after `grace` are not acknowledged (their commits get an error saying they may or
    /// may not be durable), so that the final flush, and the stop, take bounded time even with
    /// every standby unreachable. Until then they are shipped as usual.
    pub fn give_up_waiting_after(&self, grace: Duration) {
        *self.inner.give_up_at.lock() = Some(Instant::now() + grace);
        {
            let _progress = self.inner.progress.lock();
            self.inner.progressed.notify_all();
        }
        if let Some(fast_start) = &self.inner.fast_start {
            fast_start.wake();
        }
    }

    /// Whether it gave up waiting (`give_up_waiting_after`).
    pub fn gave_up(&self) -> bool {
        self.inner.given_up()
    }

    pub fn stop(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        for destination in &self.inner.destinations {
            destination.drop_sync();
            destination.notify();
        }
        if let Some(fast_start) = &self.inner.fast_start {
            fast_start.wake();
        }
        {
            let _progress = self.inner.progress.lock();
            self.inner.progressed.notify_all();
        }
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for PrimaryTransport {
    fn drop(&mut self) {
        self.stop();
    }
}

struct ShipperHandle(Arc<Inner>);

impl Shipper for ShipperHandle {
    fn ship(&self, write: &Arc<LogWrite>) -> Option<Box<dyn ShipWait>> {
        self.0.ship(write)
    }

    fn may_block(&self, bytes: usize) -> bool {
        self.0.destinations.iter().any(|destination| {
            destination.is_sync()
                && destination.state.lock().phase == Phase::Synchronized
                && destination.sync_send.try_lock().is_none_or(|send| {
                    send.as_ref().is_some_and(|(_, conn)| !conn.has_send_room(bytes))
                })
        })
    }
}

impl Inner {
    /// Past the stop's grace: waits give up.
    pub(crate) fn given_up(&self) -> bool {
        self.give_up_at.lock().is_some_and(|at| Instant::now() >= at)
    }

    /// When waits give up, if the server is stopping.
    pub(crate) fn give_up_at(&self) -> Option<Instant> {
        *self.give_up_at.lock()
    }
}

impl Inner {
    fn mode(&self) -> ProtectionMode {
        *self.mode.lock()
    }

    fn synchronized_count(&self) -> usize {
        self.destinations
            .iter()
            .filter(|destination| {
                destination.is_sync() && destination.state.lock().phase == Phase::Synchronized
            })
            .count()
    }

    /// Whether the quorum can be met by synchronized SYNC standbys (at least one).
    fn quorum_synchronized(&self) -> bool {
        let synchronized = self.synchronized_count();
        synchronized >= 1
            && match self.quorum {
                SyncQuorum::All => true,
                SyncQuorum::Any(k) => synchronized >= k,
            }
    }

    /// Logs Maximum Availability's transitions between synchronized and not.
    fn note_synchronization(&self) {
        if let Some(fast_start) = &self.fast_start {
            let synchronized = self
                .destinations
                .iter()
                .filter(|destination| {
                    destination.is_sync()
                        && fast_start.reach.counts(&destination.name)
                        && destination.state.lock().phase == Phase::Synchronized
                })
                .map(|destination| destination.name.clone())
                .collect();
            fast_start.set_synchronized(synchronized);
        }
        let mode = self.mode();
        if mode == ProtectionMode::MaximumPerformance {
            return;
        }
        let now = self.quorum_synchronized();
        if self.synchronized.swap(now, Ordering::AcqRel) != now {
            if now {
                tracing::info!(mode = ?mode, quorum = %self.quorum, "primary is SYNCHRONIZED: commits are protected by the SYNC quorum again");
            } else if mode == ProtectionMode::MaximumAvailability {
                tracing::warn!(
                    "primary is UNSYNCHRONIZED (Maximum Availability): fewer SYNC standbys are synchronized than the quorum; commits wait only for those that are until the others catch up"
                );
            } else {
                tracing::warn!(
                    "fewer SYNC AFFIRM standbys are synchronized than Maximum Protection needs: commits wait until enough have their redo"
                );
            }
        }
    }
}
