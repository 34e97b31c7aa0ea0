//! The standby's side of redo transport: the receiver (RFS), the port a standby's redo
//! listener serves.
//!
//! Each connection of the primary is served on its own thread. A primary of another database,
//! of an incompatible protocol version or with another log layout is refused with a message
//! saying which (and the primary logs it). So is a primary of an older incarnation than this
//! standby knows (it has been failed over: the refusal tells it so, and it fences itself), and
//! one of a newer incarnation that branched before this standby's redo ends (this standby
//! diverged and must be reinstated); one of a newer incarnation it can follow is followed,
//! its history recorded first (`roles::follow`). Redo writes are checked unit by unit and
//! written into the standby logs at the primary's offsets; a write that asks for it is
//! acknowledged once received, or once durable. Heartbeats carry the primary's clock and SCNs,
//! from which the standby knows its lags even while the primary is idle; when the primary
//! falls silent, the lags grow with the silence.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use proto::{CopyRequest, ErrorCode, ErrorMessage, Hello, LocalIdentity, Message, RoleInfo};
use redo::ship::WriteKind;
use redo::types::now_unix_us;
use redo::{DatabaseId, Fence, Incarnation, LogSeq, RedoAddr, RedoLog, Scn, Storage};
use roles::{Branch, IncarnationHistory, StandbyView, Verdict};
use serde::{Deserialize, Serialize};

use crate::compression::{CompressionCounters, CompressionCounts};
use crate::config::StandbyConfig;
use crate::conn::{Conn, ConnError};
use crate::delay;
use crate::listener::{RedoPort, Refusals};

/// (SCN, primary time) points kept to compute the apply lag.
const HISTORY_MAX: usize = 100_000;
/// Silence from the primary beyond this counts as lag (heartbeats come every 500 ms).
const SILENCE_GRACE: Duration = Duration::from_secs(1);

/// The standby's replication state for a person or a monitoring system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandbyReplicationStatus {
    pub listen: String,
    /// The primary as configured (its client address).
    pub primary: Option<String>,
    /// The member it follows, as the primary named itself in its hello.
    pub primary_member: Option<String>,
    /// The address the primary's redo comes from, while connected.
    pub primary_peer: Option<String>,
    pub connected: bool,
    /// Seconds since the primary was last heard from (since this receiver started, if never).
    pub last_heard_s: Option<f64>,
    /// The standby holds every log up to this sequence, with no gap.
    pub complete_through_seq: LogSeq,
    /// The standby holds redo durably up to here.
    pub received: RedoAddr,
    /// The last SCN in the redo received from the primary since this standby started.
    pub received_scn: Scn,
    pub applied_scn: Scn,
    /// What the primary last said: its newest and its durable SCN.
    pub primary_current_scn: Scn,
    pub primary_durable_scn: Scn,
    /// How far, in seconds of primary time, the redo received here trails what the primary
    /// generated: as the primary measured it in its last heartbeat, plus the time since the
    /// primary was last heard from beyond a second (a silent primary is not "no lag").
    pub transport_lag_s: f64,
    /// How far, in seconds of primary time, the data applied here trails the primary: the
    /// transport lag plus how far apply trails the redo received.
    pub apply_lag_s: f64,
    /// Primaries refused, and the last reason.
    pub refused: u64,
    pub last_error: Option<String>,
    /// The primary's last heartbeat (even if the primary is gone since) said this standby is
    /// caught up (SYNCHRONIZED or STREAMING), and named the fast-start failover observer it
    /// takes decisions from.
    #[serde(default)]
    pub caught_up: bool,
    #[serde(default)]
    pub active_observer: Option<String>,
    /// The configured apply delay (`delay`): redo is applied once it is this old.
    #[serde(default)]
    pub apply_delay_s: f64,
    /// Compressed redo received: bytes on the wire and after decompression, CPU time spent
    /// decompressing.
    #[serde(default)]
    pub decompression: CompressionCounts,
}

#[derive(Debug, Default)]
struct Heard {
    /// The peers of the connections that passed the handshake and are still served, oldest
    /// first: a peer that leaves is forgotten, so the status never names a connection that
    /// is gone (one that was refused after its hello, say) while the primary's remain.
    peers: Vec<SocketAddr>,
    primary_member: Option<String>,
    at: Option<Instant>,
    primary_time_us: u64,
    current_scn: Scn,
    durable_scn: Scn,
    transport_lag_us: u64,
    received_scn: Scn,
    caught_up: bool,
    observer: Option<String>,
    /// (last SCN, primary time) of redo received: when the primary generated which SCN.
    history: VecDeque<(Scn, u64)>,
    last_error: Option<String>,
}

impl Heard {
    fn primary_now_us(&self) -> u64 {
        match self.at {
            Some(at) => self.primary_time_us + at.elapsed().as_micros() as u64,
            None => now_unix_us(),
        }
    }

    fn note(&mut self, scn: Scn, primary_time_us: u64) {
        if scn.0 > 0 && self.history.back().is_none_or(|&(last, _)| scn > last) {
            if self.history.len() >= HISTORY_MAX {
                self.history.pop_front();
            }
            self.history.push_back((scn, primary_time_us));
        }
    }
}

/// What the receiver needs from the database: how far apply has come.
pub type AppliedScn = Arc<dyn Fn() -> Scn + Send + Sync>;
/// Who this member is, for a probe (the server knows).
pub type RoleInfoSource = Arc<dyn Fn() -> RoleInfo + Send + Sync>;

/// What the receiver needs to know of the member it runs for.
pub struct ReceiverContext {
    pub redo: RedoLog,
    /// For writing the incarnation history beside the redo.
    pub storage: Arc<dyn Storage>,
    /// The incarnation history, shared with whoever else keeps it (the server): an
    /// incarnation adopted here is in it at once.
    pub history: Arc<Mutex<IncarnationHistory>>,
    pub config: StandbyConfig,
    pub applied: AppliedScn,
    pub role_info: RoleInfoSource,
    pub refusals: Arc<Refusals>,
    /// The address the listener is bound to, for status.
    pub listen: String,
}

/// The standby's receiver: the port of a standby's redo listener.
pub struct StandbyReceiver {
    inner: Arc<Inner>,
    gap_watch: Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    redo: RedoLog,
    storage: Arc<dyn Storage>,
    history: Arc<Mutex<IncarnationHistory>>,
    config: StandbyConfig,
    applied: AppliedScn,
    role_info: RoleInfoSource,
    refusals: Arc<Refusals>,
    listen: String,
    started: Instant,
    heard: Mutex<Heard>,
    shutdown: AtomicBool,
    /// Connections being served, and a signal when one ends (for `stop`).
    serving: Mutex<usize>,
    served: Condvar,
    /// Signalled after every write received, for a write that must wait for the bytes before
    /// it (a SYNC write overtaking the control connection's last ones).
    received: Mutex<()>,
    arrived: Condvar,
    /// The newest incarnation this standby knows (its own, or one it is fenced by): a
    /// connection of an older one is ended at its next write.
    newest_known: AtomicU32,
    /// Held (shared) by every write received, and (exclusively) while a newer incarnation is
    /// decided and adopted, so that no write of the old incarnation lands in between.
    following: RwLock<()>,
    /// Compressed frames received on every connection.
    decompression: Arc<CompressionCounters>,
}

impl StandbyReceiver {
    pub fn start(context: ReceiverContext) -> std::io::Result<Arc<StandbyReceiver>> {
        let control = context.redo.control();
        let newest_known = control
            .fenced
            .as_ref()
            .map_or(control.incarnation, |fence| fence.incarnation.max(control.incarnation));
        let inner = Arc::new(Inner {
            newest_known: AtomicU32::new(newest_known.0),
            following: RwLock::new(()),
            decompression: Arc::new(CompressionCounters::default()),
            redo: context.redo,
            storage: context.storage,
            history: context.history,
            config: context.config,
            applied: context.applied,
            role_info: context.role_info,
            refusals: context.refusals,
            listen: context.listen,
            started: Instant::now(),
            heard: Mutex::new(Heard::default()),
            shutdown: AtomicBool::new(false),
            serving: Mutex::new(0),
            served: Condvar::new(),
            received: Mutex::new(()),
            arrived: Condvar::new(),
        });
        let gap_watch = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("redo-gap-watch".into())
                .spawn(move || inner.watch_gaps())?
        };
        Ok(Arc::new(StandbyReceiver { inner, gap_watch: Mutex::new(Some(gap_watch)) }))
    }

    pub fn status(&self) -> StandbyReplicationStatus {
        let inner = &self.inner;
        let position = inner.redo.standby_position();
        let applied = (inner.applied)();
        let (refused, refusal) = inner.refusals.get();
        let heard = inner.heard.lock();
        let transport_lag_us = inner.transport_lag_us(&heard);
        StandbyReplicationStatus {
            listen: inner.listen.clone(),
            primary: inner.config.primary.clone(),
            primary_member: heard.primary_member.clone(),
            primary_peer: heard.peers.last().map(SocketAddr::to_string),
            connected: !heard.peers.is_empty(),
            last_heard_s: Some(heard.at.unwrap_or(inner.started).elapsed().as_secs_f64()),
            complete_through_seq: position.complete_through_seq,
            received: position.next,
            received_scn: heard.received_scn,
            applied_scn: applied,
            primary_current_scn: heard.current_scn,
            primary_durable_scn: heard.durable_scn,
            transport_lag_s: transport_lag_us as f64 / 1e6,
            apply_lag_s: (transport_lag_us + inner.apply_lag_us(&heard, applied)) as f64 / 1e6,
            refused,
            last_error: heard.last_error.clone().or(refusal),
            caught_up: heard.caught_up,
            active_observer: heard.observer.clone(),
            apply_delay_s: inner.config.delay.as_secs_f64(),
            decompression: inner.decompression.snapshot(),
        }
    }

    /// Whether a primary is connected, and which member it is.
    pub fn primary(&self) -> (bool, Option<String>) {
        let heard = self.inner.heard.lock();
        (!heard.peers.is_empty(), heard.primary_member.clone())
    }

    /// The incarnation history as this standby knows it.
    pub fn history(&self) -> IncarnationHistory {
        self.inner.history.lock().clone()
    }

    /// Ends every connection (the primary's sends are refused as "shutting down") and waits
    /// for them, within `timeout`.
    pub fn stop(&self, timeout: Duration) {
        self.inner.shutdown.store(true, Ordering::Release);
        {
            let _received = self.inner.received.lock();
            self.inner.arrived.notify_all();
        }
        let deadline = Instant::now() + timeout;
        let mut serving = self.inner.serving.lock();
        while *serving > 0 && Instant::now() < deadline {
            self.inner.served.wait_until(&mut serving, deadline);
        }
        drop(serving);
        if let Some(thread) = self.gap_watch.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for StandbyReceiver {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

impl RedoPort for StandbyReceiver {
    fn hello(&self, conn: Conn, hello: Hello) {
        {
            *self.inner.serving.lock() += 1;
        }
        self.inner.serve(conn, hello);
        *self.inner.serving.lock() -= 1;
        self.inner.served.notify_all();
    }

    fn role_info(&self) -> RoleInfo {
        (self.inner.role_info)()
    }

    fn copy(&self, mut conn: Conn, _request: CopyRequest) {
        self.inner.refusals.refuse(
            &mut conn,
            ErrorMessage::new(
                ErrorCode::NotAStandby,
                "this member is a standby: ask the primary for a copy of the data",
            ),
        );
    }
}

/// A standby's `RoleInfo` from its redo log alone (the server adds what it knows).
pub fn standby_role_info(redo: &RedoLog, member: &str) -> RoleInfo {
    let control = redo.control();
    let position = redo.standby_position();
    RoleInfo {
        member: member.to_string(),
        role: proto::WireRole::Standby,
        database_id: control.database_id.0,
        incarnation: control.incarnation.0,
        fenced_incarnation: control.fenced.as_ref().map_or(0, |fence| fence.incarnation.0),
        primary: control.fenced.map(|fence| fence.by).unwrap_or_default(),
        position: proto::Position {
            complete_through_seq: position.complete_through_seq.0,
            current_seq: position.next.seq.0,
            current_offset: position.next.offset,
            applied_scn: 0,
        },
        durable_scn: redo.confirmed_scn().0,
        time_us: now_unix_us(),
        history: Vec::new(),
    }
}

impl Inner {
    fn transport_lag_us(&self, heard: &Heard) -> u64 {
        let silence = heard.at.unwrap_or(self.started).elapsed().saturating_sub(SILENCE_GRACE);
        heard.transport_lag_us + silence.as_micros() as u64
    }

    fn apply_lag_us(&self, heard: &Heard, applied: Scn) -> u64 {
        // The oldest redo received and not applied: when did the primary generate it?
        match heard.history.iter().find(|&&(scn, _)| scn > applied) {
            Some(&(_, time_us)) => heard.primary_now_us().saturating_sub(time_us),
            None => 0,
        }
    }

    fn refuse(&self, conn: &mut Conn, error: ErrorMessage) {
        self.refusals.refuse(conn, error);
    }

    /// Whether this standby may follow the hello's primary (see `roles::follow`); records a
    /// newer incarnation it follows, or the fence of one it cannot, before answering.
    fn check_incarnation(&self, hello: &Hello) -> Result<(), ErrorMessage> {
        let _following = self.following.write();
        let control = self.redo.control();
        let mut history = self.history.lock();
        let theirs: Vec<Branch> = hello.history.iter().map(Branch::from_wire).collect();
        let view = StandbyView {
            incarnation: control.incarnation,
            history: &history,
            next: self.redo.standby_position().next,
            fenced_by: control.fenced.as_ref().map(|fence| fence.incarnation),
        };
        match roles::decide(&view, Incarnation(hello.incarnation), &theirs) {
            Verdict::Follow => Ok(()),
            Verdict::Adopt(branches) => {
                let mut adopted = history.clone();
                for branch in branches {
                    adopted
                        .push(branch)
                        .map_err(|reason| ErrorMessage::new(ErrorCode::Internal, reason))?;
                }
                let newest = adopted.newest();
                adopted
                    .save(self.storage.as_ref(), &self.redo.config().dir)
                    .map_err(|error| ErrorMessage::new(ErrorCode::Internal, error.to_string()))?;
                *history = adopted;
                self.redo
                    .adopt_incarnation(newest)
                    .map_err(|error| ErrorMessage::new(ErrorCode::Internal, error.to_string()))?;
                self.newest_known.fetch_max(newest.0, Ordering::AcqRel);
                tracing::info!(primary = %hello.member, %newest, "standby: follows its primary into a new incarnation");
                Ok(())
            }
            Verdict::StalePrimary { newest } => {
                let primary = self
                    .heard
                    .lock()
                    .primary_member
                    .clone()
                    .or_else(|| control.fenced.as_ref().map(|fence| fence.by.clone()))
                    .or_else(|| history.branch(newest).map(|branch| branch.member.clone()))
                    .unwrap_or_default();
                Err(ErrorMessage {
                    code: ErrorCode::NewerIncarnation,
                    message: format!(
                        "this standby follows incarnation {newest}{}; the primary '{}' of incarnation {} has been failed over and must not take writes (reinstate it as a standby)",
                        if primary.is_empty() {
                            String::new()
                        } else {
                            format!(" of primary '{primary}'")
                        },
                        hello.member,
                        hello.incarnation
                    ),
                    incarnation: newest.0,
                    primary,
                })
            }
            Verdict::Diverged(reason) => {
                // It can follow no primary of this incarnation or older: refuse the old
                // branch's primary from now on too, even across restarts.
                if let Err(error) = self.redo.fence(Fence {
                    incarnation: Incarnation(hello.incarnation),
                    by: hello.member.clone(),
                }) {
                    tracing::error!(%error, "standby: cannot record the fence");
                }
                self.newest_known.fetch_max(hello.incarnation, Ordering::AcqRel);
                Err(ErrorMessage {
                    code: ErrorCode::Diverged,
                    message: format!("this standby cannot follow '{}': {reason}", hello.member),
                    incarnation: hello.incarnation,
                    primary: hello.member.clone(),
                })
            }
        }
    }

    /// One connection from the primary, after its hello.
    fn serve(&self, mut conn: Conn, hello: Hello) {
        if self.shutdown.load(Ordering::Acquire) {
            conn.refuse(ErrorMessage::new(
                ErrorCode::ShuttingDown,
                "the standby is stopping or changing its role",
            ));
            return;
        }
        let config = self.redo.config();
        let local = LocalIdentity {
            database_id: self.redo.identity().database_id.0,
            block_size: config.block_size,
            log_file_size: config.log_file_size,
        };
        if let Err(error) = proto::check_hello(&hello, &local) {
            self.refuse(&mut conn, error);
            return;
        }
        if let Err(error) = self.check_incarnation(&hello) {
            self.refuse(&mut conn, error);
            return;
        }
        if let Err(error) = self.redo.adopt_identity(DatabaseId(hello.database_id)) {
            self.refuse(&mut conn, ErrorMessage::new(ErrorCode::WrongDatabase, error.to_string()));
            return;
        }
        if hello.channel == proto::Channel::Control && self.redo.config().groups < hello.groups {
            tracing::warn!(
                standby_groups = self.redo.config().groups,
                primary_groups = hello.groups,
                "standby: fewer standby log groups than the primary's groups; receiving may wait for the archiver"
            );
        }
        let welcome = Message::Welcome(proto::Welcome {
            version: proto::PROTOCOL_VERSION,
            database_id: hello.database_id,
            position: self.position(),
            standby_time_us: now_unix_us(),
        });
        if conn.send(&welcome, crate::listener::HELLO_TIMEOUT).is_err() {
            return;
        }
        conn.count_decompression(self.decompression.clone());
        tracing::info!(peer = %conn.peer, primary = %hello.member, destination = %hello.destination, channel = ?hello.channel, "standby: primary connected");
        // An archive connection carries whole logs only: it says nothing of the primary's
        // clock or progress, and is not the primary's address in status.
        let archive = hello.channel == proto::Channel::Archive;
        if !archive {
            let mut heard = self.heard.lock();
            heard.peers.push(conn.peer);
            heard.at = Some(Instant::now());
            heard.primary_time_us = hello.primary_time_us;
            if !hello.member.is_empty() {
                heard.primary_member = Some(hello.member.clone());
            }
        }
        let result = self.receive(&mut conn, &hello);
        {
            let mut heard = self.heard.lock();
            if let Some(at) = heard.peers.iter().position(|peer| *peer == conn.peer) {
                heard.peers.remove(at);
            }
            if let Err(reason) = &result {
                heard.last_error = Some(reason.clone());
            }
        }
        match result {
            Ok(()) => tracing::info!(peer = %conn.peer, "standby: primary disconnected"),
            Err(reason) => {
                tracing::warn!(peer = %conn.peer, reason, "standby: connection from the primary ended")
            }
        }
    }

    /// A primary has two connections to a standby; when it becomes synchronized it sends on
    /// the SYNC one right after the last bytes it sent on the control one. A write that
    /// arrives before those waits for them here (briefly: they are already in flight).
    fn wait_for_preceding(&self, write: &proto::Write, kind: WriteKind) {
        let start = match kind {
            WriteKind::OpenHeader => (write.seq, 0),
            WriteKind::Units => (write.seq, write.offset),
            WriteKind::ClosedHeader => {
                match redo::format::decode_header(&write.bytes, write.offset) {
                    Ok(redo::format::HeaderBlock::Closed(_, end)) => (write.seq, end.end_offset),
                    _ => return,
                }
            }
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut received = self.received.lock();
        loop {
            let position = self.redo.received_position();
            // Nothing received yet, a resend of what is here, or the next piece: go.
            if position.seq.0 == 0
                || (position.seq.0, position.offset) >= start
                || position.seq.0 > write.seq
            {
                return;
            }
            if Instant::now() >= deadline || self.shutdown.load(Ordering::Acquire) {
                return;
            }
            self.arrived.wait_for(&mut received, Duration::from_millis(50));
        }
    }

    fn position(&self) -> proto::Position {
        let position = self.redo.standby_position();
        proto::Position {
            complete_through_seq: position.complete_through_seq.0,
            current_seq: position.next.seq.0,
            current_offset: position.next.offset,
            applied_scn: (self.applied)().0,
        }
    }

    fn status_message(&self) -> Message {
        let applied = (self.applied)();
        let heard = self.heard.lock();
        Message::StandbyStatus(proto::StandbyStatus {
            position: self.position(),
            apply_lag_us: self.apply_lag_us(&heard, applied),
            standby_time_us: now_unix_us(),
        })
    }

    /// Receives until the primary goes away. On the SYNC channel the primary reads nothing
    /// but the acknowledgements of its writes, so the standby's status goes on the control
    /// channel only.
    fn receive(&self, conn: &mut Conn, hello: &Hello) -> Result<(), String> {
        let channel = hello.channel;
        let mut unsynced = false;
        // A SYNC write wanting a durable acknowledgement, with more writes already buffered
        // behind it (the primary pipelines them): one sync and one acknowledgement for them
        // all, which covers every write before it on this connection.
        let mut pending_ack: Option<PendingAck> = None;
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                conn.refuse(ErrorMessage::new(
                    ErrorCode::ShuttingDown,
                    "the standby is shutting down or changing its role",
                ));
                return Ok(());
            }
            // Sync what was streamed (or acknowledged on receipt) once the primary pauses
            // (nothing more is buffered), and tell it how far this standby is.
            if unsynced && !conn.has_buffered_message() {
                let durable = self
                    .redo
                    .sync_received()
                    .map_err(|error| format!("syncing the standby logs: {error}"))?;
                unsynced = false;
                if let Some(ack) = pending_ack.take() {
                    ack.send(conn, durable.offset)?;
                }
                if channel == proto::Channel::Control {
                    conn.send(&self.status_message(), Duration::from_secs(10))
                        .map_err(|error| error.to_string())?;
                }
            }
            let message =
                match conn.recv(Some(Duration::from_millis(if unsynced { 1 } else { 1000 }))) {
                    Ok(message) => message,
                    Err(ConnError::TimedOut(_)) => continue,
                    Err(ConnError::Closed) => return Ok(()),
                    Err(ConnError::Protocol(error)) => {
                        let message = format!("malformed redo transport frame: {error}");
                        conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                        return Err(message);
                    }
                    Err(error) => return Err(error.to_string()),
                };
            self.heard.lock().at = Some(Instant::now());
            // A newer incarnation has been adopted (or learned of) since this connection's
            // hello: its primary has been failed over; nothing more of it is taken.
            let _following = self.following.read();
            let newest = self.newest_known.load(Ordering::Acquire);
            if newest > hello.incarnation {
                let message = format!(
                    "this standby now follows incarnation {newest}; the primary '{}' of incarnation {} has been failed over",
                    hello.member, hello.incarnation
                );
                conn.refuse(ErrorMessage {
                    code: ErrorCode::NewerIncarnation,
                    message: message.clone(),
                    incarnation: newest,
                    primary: self.heard.lock().primary_member.clone().unwrap_or_default(),
                });
                return Err(message);
            }
            if channel == proto::Channel::Archive
                && !matches!(message, Message::ArchiveChunk(_) | Message::Error(_))
            {
                let message = format!(
                    "unexpected {:?} on an archive connection (it carries whole logs only)",
                    message.kind()
                );
                conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                return Err(message);
            }
            if let Some(ack) = &pending_ack
                && !matches!(&message, Message::Write(write) if write.ack == proto::AckWanted::Durable)
            {
                // Anything else is answered after the writes before it are acknowledged.
                let durable = self
                    .redo
                    .sync_received()
                    .map_err(|error| format!("syncing the standby logs: {error}"))?;
                ack.send(conn, durable.offset)?;
                pending_ack = None;
            }
            match message {
                Message::Write(write) => {
                    let kind = match write.kind {
                        proto::WriteKind::Units => WriteKind::Units,
                        proto::WriteKind::OpenHeader => WriteKind::OpenHeader,
                        proto::WriteKind::ClosedHeader => WriteKind::ClosedHeader,
                    };
                    self.wait_for_preceding(&write, kind);
                    let received =
                        self.redo.receive(LogSeq(write.seq), write.offset, kind, &write.bytes);
                    {
                        let _received = self.received.lock();
                        self.arrived.notify_all();
                    }
                    let received = match received {
                        Ok(received) => received,
                        Err(error) => {
                            let message = error.to_string();
                            conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                            return Err(message);
                        }
                    };
                    self.redo.note_primary_durable(Scn(write.primary_durable_scn));
                    {
                        let mut heard = self.heard.lock();
                        heard.received_scn = heard.received_scn.max(Scn(write.last_scn));
                        heard.note(Scn(write.last_scn), write.primary_time_us);
                        heard.durable_scn = heard.durable_scn.max(Scn(write.primary_durable_scn));
                    }
                    match write.ack {
                        proto::AckWanted::Durable
                            if conn.has_buffered_message()
                                && pending_ack
                                    .as_ref()
                                    .is_none_or(|ack| ack.writes < ACK_GROUP_MAX) =>
                        {
                            let writes = pending_ack.as_ref().map_or(0, |ack| ack.writes) + 1;
                            pending_ack = Some(PendingAck {
                                write_id: write.write_id,
                                seq: write.seq,
                                closed_end: received
                                    .closed
                                    .is_some()
                                    .then_some(received.end_offset),
                                writes,
                            });
                            unsynced = true;
                        }
                        proto::AckWanted::Durable => {
                            pending_ack = None;
                            let durable = self
                                .redo
                                .sync_received()
                                .map_err(|error| format!("syncing the standby logs: {error}"))?;
                            unsynced = false;
                            PendingAck {
                                write_id: write.write_id,
                                seq: write.seq,
                                closed_end: received
                                    .closed
                                    .is_some()
                                    .then_some(received.end_offset),
                                writes: 1,
                            }
                            .send(conn, durable.offset)?;
                        }
                        proto::AckWanted::Received => {
                            unsynced = true;
                            conn.send(
                                &Message::Ack(proto::Ack {
                                    write_id: write.write_id,
                                    seq: write.seq,
                                    end_offset: received.end_offset,
                                    durable: false,
                                }),
                                Duration::from_secs(10),
                            )
                            .map_err(|error| error.to_string())?;
                        }
                        proto::AckWanted::None => unsynced = true,
                    }
                }
                Message::Heartbeat(beat) => {
                    self.redo.note_primary_durable(Scn(beat.durable_scn));
                    {
                        let mut heard = self.heard.lock();
                        heard.primary_time_us = beat.primary_time_us;
                        heard.current_scn = Scn(beat.current_scn);
                        heard.durable_scn = Scn(beat.durable_scn);
                        heard.transport_lag_us = beat.transport_lag_us;
                        heard.caught_up = beat.caught_up;
                        heard.observer = (!beat.observer.is_empty()).then(|| beat.observer.clone());
                        heard.note(Scn(beat.current_scn), beat.primary_time_us);
                    }
                    self.redo
                        .sync_received()
                        .map_err(|error| format!("syncing the standby logs: {error}"))?;
                    unsynced = false;
                    conn.send(&self.status_message(), Duration::from_secs(10))
                        .map_err(|error| error.to_string())?;
                }
                Message::ArchiveChunk(chunk) => {
                    match self.redo.receive_archive_chunk(
                        LogSeq(chunk.seq),
                        chunk.offset,
                        chunk.total_len,
                        &chunk.bytes,
                    ) {
                        Ok(complete) => {
                            if complete {
                                conn.send(
                                    &Message::ArchiveAck(proto::ArchiveAck {
                                        seq: chunk.seq,
                                        complete: true,
                                    }),
                                    Duration::from_secs(10),
                                )
                                .map_err(|error| error.to_string())?;
                            }
                        }
                        Err(error) => {
                            let message = error.to_string();
                            conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                            return Err(message);
                        }
                    }
                }
                Message::Error(error) => {
                    return Err(format!("the primary reported: {}", error.message));
                }
                other => {
                    let message = format!("unexpected {:?} from the primary", other.kind());
                    conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                    return Err(message);
                }
            }
        }
    }

    /// Keeps the lags' history short, raises the apply horizon of a delayed standby
    /// (`delay`), and notices a gap apply waits on (logs between what is
    /// complete and what is being received); the primary ships those when it reconnects, and
    /// this logs them meanwhile.
    fn watch_gaps(self: Arc<Inner>) {
        let mut reported: Option<(LogSeq, LogSeq)> = None;
        while !self.shutdown.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(200));
            let applied = (self.applied)();
            {
                let mut heard = self.heard.lock();
                while heard.history.len() > 1
                    && heard.history.get(1).is_some_and(|&(scn, _)| scn <= applied)
                {
                    heard.history.pop_front();
                }
                if !self.config.delay.is_zero() && heard.at.is_some() {
                    let delay_us = self.config.delay.as_micros() as u64;
                    let cutoff = heard.primary_now_us().saturating_sub(delay_us);
                    if let Some(scn) = delay::horizon_at(heard.history.iter().copied(), cutoff) {
                        self.redo.raise_apply_horizon(scn);
                    }
                }
            }
            let position = self.redo.standby_position();
            let gap = (position.complete_through_seq.next(), position.next.seq.prev_seq());
            if gap.0 <= gap.1 && reported != Some(gap) {
                tracing::warn!(from = %gap.0, to = %gap.1, "standby: logs missing (a gap); they are fetched from the primary's archive");
                reported = Some(gap);
            }
        }
    }
}

/// Most SYNC writes one acknowledgement is held back for (their sync is shared).
const ACK_GROUP_MAX: u32 = 64;

/// A durable acknowledgement: sent once the standby logs are synced, at once or held back
/// while the writes behind it are received.
struct PendingAck {
    write_id: u64,
    seq: u64,
    /// Where the log ends, if the write closed it.
    closed_end: Option<u64>,
    writes: u32,
}

impl PendingAck {
    /// Sends it once the standby logs are synced through `durable_offset` of the current log.
    fn send(&self, conn: &mut Conn, durable_offset: u64) -> Result<(), String> {
        conn.send(
            &Message::Ack(proto::Ack {
                write_id: self.write_id,
                seq: self.seq,
                end_offset: self.closed_end.unwrap_or(durable_offset),
                durable: true,
            }),
            Duration::from_secs(10),
        )
        .map_err(|error| error.to_string())
    }
}
