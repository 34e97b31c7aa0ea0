//! The primary's side of redo transport: one sender per destination.
//!
//! Each destination has a *control connection*, run by its own thread: handshake, catch-up
//! (what the standby lacks, read from the online logs and the archive), ASYNC streaming of new
//! writes from an in-memory queue (the copy of the log buffer each write leaves behind; when
//! the queue overflows, the sender reads the online log files instead, without a gap),
//! archived logs for gap resolution, and heartbeats. A SYNC destination that has caught up is
//! *synchronized*: from then on the log writer itself sends each write on a second, *SYNC*
//! connection before its local write, and reads the acknowledgement after its local sync, so
//! that nothing but the network and the standby's own write sits between a commit and its
//! acknowledgement. A destination that fails is retried after `reopen` and given up after
//! `max_failure` consecutive failures.
//!
//! The protection mode decides what the log writer waits for (see `ProtectionWait`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex};
use proto::{AckWanted, Channel, Hello, Message, Write};
use redo::ship::{LogWrite, ShipCursor, ShipWait, Shipment, Shipper, WriteKind};
use redo::types::now_unix_us;
use redo::{LogSeq, RedoAddr, RedoError, RedoLog, Scn};
use serde::{Deserialize, Serialize};
use stats::{Metrics, WaitEvent};

use crate::config::{BufferSize, DestinationConfig, ProtectionMode, Transport};
use crate::conn::{Conn, ConnError};

/// Bytes of writes a destination may hold in memory; beyond it the sender reads the files.
const QUEUE_BYTES_MAX: usize = 64 << 20;
/// How often an idle control connection sends a heartbeat.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// Largest frame either side accepts.
pub(crate) const PAYLOAD_MAX: usize = (64 << 20) + 4096;
/// The largest log buffer of a primary with standbys: a log write (at most the buffer, plus
/// unit headers and padding) must fit in one frame.
pub const LOG_BUFFER_MAX_SHIPPED: u64 = 48 << 20;
/// Transport-lag samples kept per destination.
const UNACKED_MAX: usize = 1 << 20;

/// Where a destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    Connecting,
    /// Connected, shipping what the standby lacks.
    CatchingUp,
    /// ASYNC and caught up: new redo is streamed as it is written.
    Streaming,
    /// SYNC and caught up: every log write waits for this standby.
    Synchronized,
    /// Not connected; retried after `reopen`.
    Disconnected,
    /// Failed `max_failure` times in a row; not retried until the primary restarts.
    GaveUp,
}

/// A destination for a person or a monitoring system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationStatus {
    pub name: String,
    pub address: String,
    pub transport: String,
    pub affirm: bool,
    pub phase: Phase,
    pub last_error: Option<String>,
    pub failures: u32,
    /// The next byte to send.
    pub sent: RedoAddr,
    /// The standby holds everything before this durably.
    pub acknowledged: RedoAddr,
    pub applied_scn: Scn,
    /// Age of the oldest redo sent and not yet acknowledged, in seconds of primary time (0
    /// when the standby has everything).
    pub transport_lag_s: f64,
    /// The standby's apply lag, as it last reported it.
    pub apply_lag_s: f64,
    pub rtt_us: Option<u64>,
    pub send_buffer_bytes: Option<u64>,
    pub bytes_sent: u64,
    /// Seconds since the standby was last heard from.
    pub last_heard_s: Option<f64>,
    /// Logs being shipped whole (gap resolution), oldest first.
    pub gaps: Vec<LogSeq>,
}

/// Transport lag samples of a destination: how long each write took from the log writer to
/// the standby's acknowledgement (for benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LagSummary {
    pub samples: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Where the log a closed header closes ends.
fn closed_end(write: &LogWrite) -> Option<u64> {
    match redo::format::decode_header(&write.bytes, write.offset) {
        Ok(redo::format::HeaderBlock::Closed(_, end)) => Some(end.end_offset),
        _ => None,
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
    /// Sent and not yet acknowledged: where each piece ends, and when it was written.
    unacked: VecDeque<(RedoAddr, u64)>,
    rtt_us: Option<u64>,
    send_buffer_bytes: Option<u64>,
    bytes_sent: u64,
    last_heard: Option<Instant>,
    gaps: Vec<LogSeq>,
    /// The control connection must be dropped and made again (set by a failed SYNC write).
    reconnect: bool,
}

/// One destination.
struct Destination {
    config: DestinationConfig,
    bandwidth_bytes_per_s: Option<f64>,
    state: Mutex<State>,
    queue: Mutex<Queue>,
    /// Signalled (with `queue`) when there is something for the control thread to do.
    wake: Condvar,
    /// The SYNC connection, once synchronized.
    sync: Mutex<Option<Conn>>,
    lag: Mutex<Histogram<u64>>,
}

impl Destination {
    fn is_sync(&self) -> bool {
        self.config.transport == Transport::Sync
    }

    fn ack_wanted(&self) -> AckWanted {
        if self.config.affirm { AckWanted::Durable } else { AckWanted::Received }
    }

    fn notify(&self) {
        let _queue = self.queue.lock();
        self.wake.notify_all();
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

    fn transport_lag_us(&self, state: &State) -> u64 {
        state.unacked.front().map_or(0, |&(_, time_us)| now_unix_us().saturating_sub(time_us))
    }
}

/// The primary's redo transport. Plug `shipper()` into the redo log.
pub struct PrimaryTransport {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Inner {
    redo: RedoLog,
    mode: ProtectionMode,
    destinations: Vec<Arc<Destination>>,
    shutdown: AtomicBool,
    /// Signalled when any destination's acknowledged position moves (Maximum Protection).
    progress: Mutex<()>,
    progressed: Condvar,
    next_write_id: AtomicU64,
    /// Maximum Availability: whether the primary is synchronized, for logging transitions.
    synchronized: AtomicBool,
    sync_remote_write: Arc<WaitEvent>,
    protection_wait: Arc<WaitEvent>,
}

impl PrimaryTransport {
    /// Starts a sender for every destination. `redo` is a handle on the primary's redo log.
    pub fn start(
        redo: RedoLog,
        mode: ProtectionMode,
        destinations: Vec<DestinationConfig>,
        metrics: &Metrics,
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
                    bandwidth_bytes_per_s: config
                        .bandwidth
                        .as_deref()
                        .and_then(|text| units::parse_rate(text).ok())
                        .map(|rate| rate.bytes_per_s()),
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
                        bytes_sent: 0,
                        last_heard: None,
                        gaps: Vec::new(),
                        reconnect: false,
                    }),
                    queue: Mutex::new(Queue::default()),
                    wake: Condvar::new(),
                    sync: Mutex::new(None),
                    lag: Mutex::new(
                        Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
                    ),
                    config,
                })
            })
            .collect();
        let inner = Arc::new(Inner {
            redo,
            mode,
            destinations,
            shutdown: AtomicBool::new(false),
            progress: Mutex::new(()),
            progressed: Condvar::new(),
            next_write_id: AtomicU64::new(1),
            synchronized: AtomicBool::new(false),
            sync_remote_write: metrics.wait("SYNC remote write"),
            protection_wait: metrics.wait("Maximum Protection standby wait"),
        });
        let mut threads = Vec::new();
        for destination in &inner.destinations {
            let inner = inner.clone();
            let destination = destination.clone();
            let name = format!("redo-send-{}", destination.config.name);
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
        self.inner.mode
    }

    /// Whether every commit is currently protected as the mode promises: some SYNC standby is
    /// synchronized (always true in Maximum Performance).
    pub fn synchronized(&self) -> bool {
        self.inner.mode == ProtectionMode::MaximumPerformance || self.inner.any_synchronized()
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
                (destination.config.name.clone(), summary)
            })
            .collect()
    }

    /// Stops every sender (the redo log must no longer use the shipper).
    pub fn stop(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        for destination in &self.inner.destinations {
            if let Some(conn) = destination.sync.lock().take() {
                conn.shutdown();
            }
            destination.notify();
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
}

/// What the log writer waits for after its local write.
struct ProtectionWait {
    inner: Arc<Inner>,
    write: Arc<LogWrite>,
    /// SYNC destinations the write was sent to, and the id of the write.
    sent: Vec<(Arc<Destination>, u64, Instant)>,
}

impl ShipWait for ProtectionWait {
    fn wait(self: Box<Self>) -> Result<(), RedoError> {
        let started = Instant::now();
        let end = after(&self.write);
        for (destination, write_id, sent_at) in &self.sent {
            let deadline = *sent_at + destination.config.net_timeout;
            let outcome = (|| -> Result<(), String> {
                let mut sync = destination.sync.lock();
                let conn = sync.as_mut().ok_or("the SYNC connection is closed")?;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(format!(
                            "no acknowledgement within net_timeout ({:?})",
                            destination.config.net_timeout
                        ));
                    }
                    match conn.recv(Some(left)) {
                        Ok(Message::Ack(ack)) if ack.write_id == *write_id => return Ok(()),
                        Ok(Message::Ack(_)) => continue,
                        Ok(Message::Error(error)) => {
                            return Err(format!(
                                "the standby refused the write: {}",
                                error.message
                            ));
                        }
                        Ok(other) => {
                            return Err(format!(
                                "unexpected {:?} on the SYNC connection",
                                other.kind()
                            ));
                        }
                        Err(ConnError::TimedOut(_)) => {
                            return Err(format!(
                                "no acknowledgement within net_timeout ({:?})",
                                destination.config.net_timeout
                            ));
                        }
                        Err(error) => return Err(error.to_string()),
                    }
                }
            })();
            match outcome {
                Ok(()) => {
                    let mut state = destination.state.lock();
                    destination.acknowledge(&mut state, end);
                    state.last_heard = Some(Instant::now());
                }
                Err(reason) => self.inner.desynchronize(destination, &reason),
            }
        }
        self.inner.sync_remote_write.record_since(started);
        if self.inner.mode == ProtectionMode::MaximumProtection {
            self.inner.wait_for_protection(end)?;
        }
        {
            let _progress = self.inner.progress.lock();
            self.inner.progressed.notify_all();
        }
        Ok(())
    }
}

impl Inner {
    fn any_synchronized(&self) -> bool {
        self.destinations.iter().any(|destination| {
            destination.is_sync() && destination.state.lock().phase == Phase::Synchronized
        })
    }

    fn ship(self: &Arc<Inner>, write: &Arc<LogWrite>) -> Option<Box<dyn ShipWait>> {
        let mut sent = Vec::new();
        let end = after(write);
        for destination in &self.destinations {
            let mut state = destination.state.lock();
            state.last_write_end = end;
            if destination.is_sync() && state.phase == Phase::Synchronized {
                // The log writer sends it itself, before its own write.
                let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
                let message = Message::Write(frame_of(
                    write,
                    write_id,
                    destination.ack_wanted(),
                    self.redo.durable_scn(),
                ));
                let sent_at = Instant::now();
                let result = match destination.sync.lock().as_mut() {
                    Some(conn) => conn
                        .send(&message, destination.config.net_timeout)
                        .map_err(|error| error.to_string()),
                    None => Err("the SYNC connection is closed".to_string()),
                };
                match result {
                    Ok(()) => {
                        state.sent = end;
                        state.bytes_sent += write.bytes.len() as u64;
                        if state.unacked.len() < UNACKED_MAX {
                            state.unacked.push_back((end, write.time_us));
                        }
                        drop(state);
                        sent.push((destination.clone(), write_id, sent_at));
                    }
                    Err(reason) => {
                        drop(state);
                        self.desynchronize(destination, &format!("sending a SYNC write: {reason}"));
                    }
                }
                continue;
            }
            drop(state);
            let mut queue = destination.queue.lock();
            if !queue.overflowed {
                if queue.bytes + write.bytes.len() > QUEUE_BYTES_MAX {
                    // The sender is behind by more than the queue holds: it reads the online
                    // log files from where it is instead (durable by then), then comes back.
                    queue.overflowed = true;
                    queue.writes.clear();
                    queue.bytes = 0;
                } else {
                    queue.bytes += write.bytes.len();
                    queue.writes.push_back(write.clone());
                }
            }
            destination.wake.notify_all();
        }
        if sent.is_empty() && self.mode != ProtectionMode::MaximumProtection {
            return None;
        }
        Some(Box::new(ProtectionWait { inner: self.clone(), write: write.clone(), sent }))
    }

    /// A SYNC destination failed: out of the synchronized set, and reconnect it.
    fn desynchronize(&self, destination: &Destination, reason: &str) {
        {
            let mut state = destination.state.lock();
            if state.phase == Phase::Synchronized {
                state.phase = Phase::Disconnected;
            }
            state.last_error = Some(reason.to_string());
            state.reconnect = true;
        }
        if let Some(conn) = destination.sync.lock().take() {
            conn.shutdown();
        }
        tracing::warn!(destination = %destination.config.name, reason, "SYNC destination dropped from the synchronized set; it reconnects and catches up");
        self.note_synchronization();
        destination.notify();
    }

    /// Logs Maximum Availability's transitions between synchronized and not.
    fn note_synchronization(&self) {
        if self.mode == ProtectionMode::MaximumPerformance {
            return;
        }
        let now = self.any_synchronized();
        if self.synchronized.swap(now, Ordering::AcqRel) != now {
            if now {
                tracing::info!(mode = ?self.mode, "primary is SYNCHRONIZED: commits are protected by a SYNC standby again");
            } else if self.mode == ProtectionMode::MaximumAvailability {
                tracing::warn!(
                    "primary is UNSYNCHRONIZED (Maximum Availability): commits go on without a SYNC standby until one catches up"
                );
            } else {
                tracing::warn!(
                    "no SYNC AFFIRM standby is synchronized (Maximum Protection): commits wait until one has their redo"
                );
            }
        }
    }

    /// Maximum Protection: returns only once a SYNC AFFIRM destination holds `end` durably.
    fn wait_for_protection(&self, end: RedoAddr) -> Result<(), RedoError> {
        let key = (end.seq.0, end.offset);
        let started = Instant::now();
        let mut waited = false;
        let mut progress = self.progress.lock();
        loop {
            let protected = self.destinations.iter().any(|destination| {
                destination.is_sync() && destination.config.affirm && {
                    let acknowledged = destination.state.lock().acknowledged;
                    (acknowledged.seq.0, acknowledged.offset) >= key
                }
            });
            if protected {
                if waited {
                    self.protection_wait.record_since(started);
                }
                return Ok(());
            }
            if self.shutdown.load(Ordering::Acquire) || self.redo.is_shut_down() {
                return Err(RedoError::Shutdown);
            }
            waited = true;
            self.progressed.wait_for(&mut progress, Duration::from_millis(200));
        }
    }

    fn status_of(&self, destination: &Destination) -> DestinationStatus {
        let state = destination.state.lock();
        DestinationStatus {
            name: destination.config.name.clone(),
            address: destination.config.address.clone(),
            transport: if destination.is_sync() { "SYNC".into() } else { "ASYNC".into() },
            affirm: destination.config.affirm,
            phase: state.phase,
            last_error: state.last_error.clone(),
            failures: state.failures,
            sent: state.sent,
            acknowledged: state.acknowledged,
            applied_scn: state.applied_scn,
            transport_lag_s: destination.transport_lag_us(&state) as f64 / 1e6,
            apply_lag_s: state.apply_lag_us as f64 / 1e6,
            rtt_us: state.rtt_us,
            send_buffer_bytes: state.send_buffer_bytes,
            bytes_sent: state.bytes_sent,
            last_heard_s: state.last_heard.map(|at| at.elapsed().as_secs_f64()),
            gaps: state.gaps.clone(),
        }
    }

    /// The control thread of one destination: connect, catch up, stream, retry.
    fn control(self: &Arc<Inner>, destination: &Arc<Destination>) {
        let name = &destination.config.name;
        while !self.shutdown.load(Ordering::Acquire) {
            let result = self.session(destination);
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            if let Some(conn) = destination.sync.lock().take() {
                conn.shutdown();
            }
            let give_up = {
                let mut state = destination.state.lock();
                state.phase = Phase::Disconnected;
                state.reconnect = false;
                let reason = match &result {
                    Ok(()) => "connection closed".to_string(),
                    Err(reason) => reason.clone(),
                };
                tracing::warn!(destination = %name, reason, failures = state.failures + 1, "redo transport to the standby failed; retrying after reopen");
                state.last_error = Some(reason);
                state.failures += 1;
                let max = destination.config.max_failure;
                if max > 0 && state.failures >= max {
                    state.phase = Phase::GaveUp;
                    true
                } else {
                    false
                }
            };
            self.note_synchronization();
            if give_up {
                tracing::error!(destination = %name, failures = destination.config.max_failure, "destination given up after max_failure consecutive failures; restart the primary to retry it");
                return;
            }
            let mut queue = destination.queue.lock();
            let deadline = Instant::now() + destination.config.reopen;
            while !self.shutdown.load(Ordering::Acquire) && Instant::now() < deadline {
                destination.wake.wait_until(&mut queue, deadline);
            }
            // What queued meanwhile is read from the files after the reconnection.
            queue.writes.clear();
            queue.bytes = 0;
            queue.overflowed = true;
        }
    }

    fn hello(&self, channel: Channel, destination: &Destination) -> Message {
        let identity = self.redo.identity();
        let config = self.redo.config();
        Message::Hello(Hello {
            version: proto::PROTOCOL_VERSION,
            version_min: proto::PROTOCOL_VERSION_MIN,
            database_id: identity.database_id.0,
            incarnation: identity.incarnation.0,
            thread: identity.thread.0,
            channel,
            destination: destination.config.name.clone(),
            block_size: config.block_size,
            log_file_size: config.log_file_size,
            groups: config.groups,
            primary_time_us: now_unix_us(),
        })
    }

    /// Connects a channel and returns the standby's welcome and the round-trip time: that of
    /// the TCP handshake (one round trip, without the standby's own work before it welcomes).
    fn connect(
        &self,
        channel: Channel,
        destination: &Destination,
        send_buffer: Option<u64>,
    ) -> Result<(Conn, proto::Welcome, Duration), String> {
        let config = &destination.config;
        let started = Instant::now();
        let mut conn = Conn::connect(&config.address, config.net_timeout, send_buffer, PAYLOAD_MAX)
            .map_err(|error| format!("connecting to {}: {error}", config.address))?;
        let rtt = started.elapsed();
        conn.send(&self.hello(channel, destination), config.net_timeout)
            .map_err(|error| format!("handshake with {}: {error}", config.address))?;
        match conn.recv(Some(config.net_timeout)) {
            Ok(Message::Welcome(welcome)) => Ok((conn, welcome, rtt)),
            Ok(Message::Error(error)) => Err(format!(
                "the standby at {} refused this primary: {}",
                config.address, error.message
            )),
            Ok(other) => Err(format!(
                "the standby at {} answered the handshake with {:?}",
                config.address,
                other.kind()
            )),
            Err(error) => Err(format!("handshake with {}: {error}", config.address)),
        }
    }

    /// One connection's life.
    fn session(self: &Arc<Inner>, destination: &Arc<Destination>) -> Result<(), String> {
        let config = &destination.config;
        destination.state.lock().phase = Phase::Connecting;
        let send_buffer = match config.send_buffer {
            BufferSize::Default => None,
            BufferSize::Bytes(bytes) => Some(bytes),
            BufferSize::Auto => {
                let rtt = crate::conn::probe_rtt(&config.address, config.net_timeout)
                    .unwrap_or(Duration::from_millis(1));
                destination
                    .bandwidth_bytes_per_s
                    .map(|bandwidth| ((3.0 * bandwidth * rtt.as_secs_f64()) as u64).max(64 << 10))
            }
        };
        let (mut conn, welcome, rtt) = self.connect(Channel::Control, destination, send_buffer)?;
        let newest = self.redo.durable_addr().seq;
        let position = welcome.position;
        if position.current_seq > newest.0 + 1 {
            return Err(format!(
                "the standby holds log {} but this primary's newest log is {newest}: it belongs to another history; recreate the standby",
                position.current_seq
            ));
        }
        let mut next =
            RedoAddr { seq: LogSeq(position.current_seq.max(1)), offset: position.current_offset };
        let mut gaps: VecDeque<LogSeq> =
            (position.complete_through_seq.saturating_add(1)..next.seq.0).map(LogSeq).collect();
        {
            let mut state = destination.state.lock();
            state.phase = Phase::CatchingUp;
            state.rtt_us = Some(rtt.as_micros() as u64);
            state.send_buffer_bytes = send_buffer;
            state.sent = next;
            state.acknowledged = next;
            state.applied_scn = Scn(position.applied_scn);
            state.unacked.clear();
            state.last_heard = Some(Instant::now());
            state.gaps = gaps.iter().copied().collect();
        }
        tracing::info!(destination = %config.name, next = %next, gaps = gaps.len(), rtt_us = rtt.as_micros() as u64, "connected to the standby; catching up");
        // Incoming: the standby's status and gap requests.
        let broken = Arc::new(Mutex::new(None::<String>));
        let reader = {
            let mut incoming = conn.try_clone().map_err(|error| error.to_string())?;
            let inner = self.clone();
            let destination = destination.clone();
            let broken = broken.clone();
            std::thread::Builder::new()
                .name(format!("redo-recv-{}", config.name))
                .spawn(move || inner.incoming(&destination, &mut incoming, &broken))
                .map_err(|error| error.to_string())?
        };
        let result = self.stream(destination, &mut conn, &mut next, &mut gaps, &broken);
        conn.shutdown();
        let _ = reader.join();
        result
    }

    /// What a standby said about itself: how far its logs are durable and applied.
    fn note_standby_status(&self, destination: &Destination, status: &proto::StandbyStatus) {
        let mut state = destination.state.lock();
        let durable = RedoAddr {
            seq: LogSeq(status.position.current_seq),
            offset: status.position.current_offset,
        };
        destination.acknowledge(&mut state, durable);
        state.applied_scn = Scn(status.position.applied_scn);
        state.apply_lag_us = status.apply_lag_us;
        state.last_heard = Some(Instant::now());
        drop(state);
        let _progress = self.progress.lock();
        self.progressed.notify_all();
    }

    /// Reads what the standby sends on the control connection.
    fn incoming(&self, destination: &Destination, conn: &mut Conn, broken: &Mutex<Option<String>>) {
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            match conn.recv(Some(Duration::from_millis(500))) {
                Ok(Message::StandbyStatus(status)) => {
                    self.note_standby_status(destination, &status)
                }
                Ok(Message::ArchiveAck(ack)) => {
                    let mut state = destination.state.lock();
                    state.last_heard = Some(Instant::now());
                    if ack.complete {
                        state.gaps.retain(|seq| seq.0 != ack.seq);
                    }
                }
                Ok(Message::GapRequest(gap)) => {
                    let mut state = destination.state.lock();
                    for seq in gap.from_seq..=gap.to_seq.min(gap.from_seq.saturating_add(1000)) {
                        if !state.gaps.contains(&LogSeq(seq)) {
                            state.gaps.push(LogSeq(seq));
                        }
                    }
                    drop(state);
                    destination.notify();
                }
                Ok(Message::Error(error)) => {
                    *broken.lock() = Some(format!("the standby reported: {}", error.message));
                    destination.notify();
                    return;
                }
                Ok(other) => {
                    *broken.lock() =
                        Some(format!("unexpected {:?} from the standby", other.kind()));
                    destination.notify();
                    return;
                }
                Err(ConnError::TimedOut(_)) => {}
                Err(error) => {
                    *broken.lock() = Some(format!("control connection: {error}"));
                    destination.notify();
                    return;
                }
            }
        }
    }

    /// Ships what the standby lacks, then new redo as it is written, with heartbeats and
    /// gap logs in between, until the connection breaks or the primary stops.
    fn stream(
        self: &Arc<Inner>,
        destination: &Arc<Destination>,
        conn: &mut Conn,
        next: &mut RedoAddr,
        gaps: &mut VecDeque<LogSeq>,
        broken: &Mutex<Option<String>>,
    ) -> Result<(), String> {
        let config = &destination.config;
        let max_send = config.max_send as usize;
        let mut last_sent = Instant::now();
        let mut gap_offset = 0u64;
        // The SYNC connection, opened while catching up and handed to the log writer once
        // synchronized.
        let mut pending_sync: Option<Conn> = None;
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                return Ok(());
            }
            if let Some(reason) = broken.lock().take() {
                return Err(reason);
            }
            if destination.state.lock().reconnect {
                return Err(destination
                    .state
                    .lock()
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "SYNC connection failed".into()));
            }
            // Gap requests that arrived on the other thread.
            {
                let state = destination.state.lock();
                for seq in &state.gaps {
                    if !gaps.contains(seq) && *seq < next.seq {
                        gaps.push_back(*seq);
                    }
                }
            }
            let synchronized = destination.state.lock().phase == Phase::Synchronized;
            let mut progressed = false;
            if !synchronized {
                progressed = self.ship_next(destination, conn, next, max_send)?;
            }
            if let Some(&seq) = gaps.front() {
                if self.ship_gap_chunk(destination, conn, seq, &mut gap_offset, max_send)? {
                    gaps.pop_front();
                    gap_offset = 0;
                }
                progressed = true;
            }
            if progressed {
                last_sent = Instant::now();
            } else {
                if destination.is_sync()
                    && !synchronized
                    && self.try_synchronize(destination, *next, &mut pending_sync)?
                {
                    continue;
                }
                if !synchronized {
                    let mut state = destination.state.lock();
                    if state.phase == Phase::CatchingUp
                        && destination.queue.lock().writes.is_empty()
                        && !destination.is_sync()
                    {
                        state.phase = Phase::Streaming;
                        state.failures = 0;
                        state.last_error = None;
                        tracing::info!(destination = %config.name, "standby caught up; streaming (ASYNC)");
                    }
                }
                if last_sent.elapsed() >= HEARTBEAT_INTERVAL {
                    self.heartbeat(destination, conn)?;
                    last_sent = Instant::now();
                }
                let mut queue = destination.queue.lock();
                if queue.writes.is_empty() && !queue.overflowed && broken.lock().is_none() {
                    let wait =
                        if synchronized { HEARTBEAT_INTERVAL } else { Duration::from_millis(20) };
                    destination.wake.wait_for(&mut queue, wait);
                }
            }
        }
    }

    /// Sends the next piece the standby lacks: from the queue if it starts where the standby
    /// is, else from the files. Returns whether anything was sent.
    fn ship_next(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        next: &mut RedoAddr,
        max_send: usize,
    ) -> Result<bool, String> {
        let next_key = (next.seq.0, next.offset);
        let from_queue = {
            let mut queue = destination.queue.lock();
            if queue.overflowed {
                queue.writes.clear();
                queue.bytes = 0;
                queue.overflowed = false;
            }
            let mut found = None;
            while let Some(front) = queue.writes.front() {
                let end = after(front);
                if (end.seq.0, end.offset) <= next_key {
                    // Already shipped (from the files).
                    let dropped = queue.writes.pop_front().expect("front");
                    queue.bytes -= dropped.bytes.len();
                    continue;
                }
                let matches = match front.kind {
                    WriteKind::OpenHeader => *next == RedoAddr { seq: front.seq, offset: 0 },
                    WriteKind::Units => {
                        front.seq == next.seq
                            && front.offset <= next.offset
                            && next.offset < front.end().offset
                    }
                    // Only once the standby holds every unit of the log.
                    WriteKind::ClosedHeader => {
                        front.seq == next.seq
                            && closed_end(front).is_some_and(|end| next.offset >= end)
                    }
                };
                if matches {
                    let write = queue.writes.pop_front().expect("front");
                    queue.bytes -= write.bytes.len();
                    found = Some(write);
                }
                break;
            }
            found
        };
        if let Some(write) = from_queue {
            let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
            self.send_write(
                destination,
                conn,
                frame_of(&write, write_id, AckWanted::None, self.redo.durable_scn()),
                after(&write),
                write.time_us,
            )?;
            *next = after(&write);
            return Ok(true);
        }
        let mut cursor = ShipCursor::new(*next);
        match cursor
            .next_shipment(&self.redo, max_send)
            .map_err(|error| format!("reading redo to ship: {error}"))?
        {
            Shipment::CaughtUp => Ok(false),
            Shipment::Write { seq, offset, kind, bytes } => {
                let time_us = self
                    .redo
                    .log_extent(seq)
                    .map_or_else(now_unix_us, |extent| extent.header.first_time_us);
                let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
                let frame = Write {
                    write_id,
                    seq: seq.0,
                    offset,
                    kind: wire_kind(kind),
                    ack: AckWanted::None,
                    primary_time_us: now_unix_us(),
                    last_scn: 0,
                    primary_durable_scn: self.redo.durable_scn().0,
                    bytes,
                };
                self.send_write(destination, conn, frame, cursor.next, time_us)?;
                *next = cursor.next;
                Ok(true)
            }
        }
    }

    fn send_write(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        frame: Write,
        end: RedoAddr,
        time_us: u64,
    ) -> Result<(), String> {
        let bytes = frame.bytes.len() as u64;
        conn.send(&Message::Write(frame), destination.config.net_timeout)
            .map_err(|error| format!("sending redo: {error}"))?;
        let mut state = destination.state.lock();
        state.sent = end;
        state.bytes_sent += bytes;
        if state.unacked.len() < UNACKED_MAX {
            state.unacked.push_back((end, time_us));
        }
        Ok(())
    }

    /// Sends the next piece of a whole archived log; returns whether the log is done.
    fn ship_gap_chunk(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        seq: LogSeq,
        offset: &mut u64,
        max_send: usize,
    ) -> Result<bool, String> {
        let extent = self.redo.log_extent(seq).ok_or_else(|| {
            format!("the standby lacks log {seq}, which this primary no longer has")
        })?;
        let Some(end) = extent.end else {
            return Err(format!("the standby lacks log {seq}, which is still open here"));
        };
        let total = end.end_offset;
        let len = (total - *offset).min(max_send as u64);
        let bytes = self
            .redo
            .read_log_bytes(seq, *offset, len as usize)
            .map_err(|error| format!("reading log {seq} to ship: {error}"))?;
        conn.send(
            &Message::ArchiveChunk(proto::ArchiveChunk {
                seq: seq.0,
                offset: *offset,
                total_len: total,
                bytes,
            }),
            destination.config.net_timeout,
        )
        .map_err(|error| format!("sending log {seq}: {error}"))?;
        destination.state.lock().bytes_sent += len;
        *offset += len;
        if *offset == total {
            tracing::info!(destination = %destination.config.name, %seq, bytes = total, "shipped a missing log to the standby (gap resolution)");
        }
        Ok(*offset == total)
    }

    fn heartbeat(&self, destination: &Destination, conn: &mut Conn) -> Result<(), String> {
        let durable = self.redo.durable_addr();
        let lag = destination.transport_lag_us(&destination.state.lock());
        let beat = proto::Heartbeat {
            primary_time_us: now_unix_us(),
            current_scn: self.redo.next_scn().prev().0,
            durable_scn: self.redo.durable_scn().0,
            current_seq: durable.seq.0,
            current_offset: durable.offset,
            transport_lag_us: lag,
        };
        conn.send(&Message::Heartbeat(beat), destination.config.net_timeout)
            .map_err(|error| format!("sending a heartbeat: {error}"))
    }

    /// A SYNC destination to which everything the log writer wrote has been sent becomes
    /// synchronized: from the next write on, the log writer sends on the SYNC connection
    /// (opened beforehand, so that the switch itself is instantaneous). The standby orders a
    /// SYNC write after the control connection's bytes before it.
    fn try_synchronize(
        &self,
        destination: &Arc<Destination>,
        next: RedoAddr,
        pending: &mut Option<Conn>,
    ) -> Result<bool, String> {
        if destination.state.lock().last_write_end != next {
            return Ok(false);
        }
        if pending.is_none() {
            let (conn, _, _) = self.connect(Channel::Sync, destination, None)?;
            *pending = Some(conn);
        }
        let mut state = destination.state.lock();
        let queue = destination.queue.lock();
        if state.last_write_end != next || !queue.writes.is_empty() || state.reconnect {
            return Ok(false);
        }
        *destination.sync.lock() = pending.take();
        state.phase = Phase::Synchronized;
        state.failures = 0;
        state.last_error = None;
        drop(queue);
        drop(state);
        tracing::info!(destination = %destination.config.name, "standby caught up; SYNCHRONIZED");
        self.note_synchronization();
        Ok(true)
    }
}

fn wire_kind(kind: WriteKind) -> proto::WriteKind {
    match kind {
        WriteKind::Units => proto::WriteKind::Units,
        WriteKind::OpenHeader => proto::WriteKind::OpenHeader,
        WriteKind::ClosedHeader => proto::WriteKind::ClosedHeader,
    }
}

fn frame_of(write: &LogWrite, write_id: u64, ack: AckWanted, durable: Scn) -> Write {
    Write {
        write_id,
        seq: write.seq.0,
        offset: write.offset,
        kind: wire_kind(write.kind),
        ack,
        primary_time_us: write.time_us,
        last_scn: write.last_scn.0,
        primary_durable_scn: durable.0.max(write.durable_scn.0),
        bytes: write.bytes.to_vec(),
    }
}
