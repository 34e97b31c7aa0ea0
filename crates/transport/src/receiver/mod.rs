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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use proto::{CopyRequest, ErrorCode, ErrorMessage, Hello, RoleInfo};
use redo::types::now_unix_us;
use redo::{LogSeq, RedoAddr, RedoLog, Scn, Storage};
use roles::IncarnationHistory;
use serde::{Deserialize, Serialize};

use crate::cascade::{Cascade, CascadeContext, Upstream};
use crate::compression::{CompressionCounters, CompressionCounts};
use crate::config::StandbyConfig;
use crate::conn::Conn;
use crate::delay;
use crate::listener::{RedoPort, Refusals};

mod handshake;
mod receive;
mod seal;
mod silence;

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
    /// The member it follows, as the primary named itself in its hello (or as the member
    /// forwarding its redo named it: `source_member`).
    pub primary_member: Option<String>,
    /// The member its redo comes from when that is not the primary: a standby or far sync
    /// that forwards it (cascading, redo routes).
    #[serde(default)]
    pub source_member: Option<String>,
    /// The address the primary's redo comes from, while connected.
    pub primary_peer: Option<String>,
    /// Whether its redo source is connected: the primary, or the member forwarding its redo.
    pub connected: bool,
    /// Whether the primary itself is connected (not only a member forwarding its redo): what a
    /// failover asks before it takes over.
    #[serde(default)]
    pub primary_connected: bool,
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
    /// A far sync: standby logs and archive only, nothing applied (its `applied_scn` is what
    /// it received, its apply lag its transport lag).
    #[serde(default)]
    pub far_sync: bool,
}

#[derive(Debug, Default)]
struct Heard {
    /// The peers of the connections that passed the handshake and are still served, oldest
    /// first: a peer that leaves is forgotten, so the status never names a connection that
    /// is gone (one that was refused after its hello, say) while the primary's remain.
    peers: Vec<SocketAddr>,
    /// Of those, the ones from a member forwarding the primary's redo (cascading).
    relayed: Vec<SocketAddr>,
    primary_member: Option<String>,
    source_member: Option<String>,
    at: Option<Instant>,
    primary_time_us: u64,
    current_scn: Scn,
    durable_scn: Scn,
    transport_lag_us: u64,
    received_scn: Scn,
    caught_up: bool,
    observer: Option<String>,
    /// The primary's word, in its last heartbeat of its current session, for the fast-start
    /// targets behind this member (a relay): what the forwarder passes on, to each alone.
    relay_targets: Vec<proto::TargetWord>,
    /// When a message last came on one of the primary's own connections (not a relay's).
    primary_at: Option<Instant>,
    /// From a relay's last heartbeat of its current session (version 9): when it arrived, and
    /// how long its relay had then not heard the primary.
    relay_silence: Option<(Instant, Duration)>,
    /// (last SCN, primary time) of redo received: when the primary generated which SCN.
    history: VecDeque<(Scn, u64)>,
    /// (SCN, when it arrived, on this standby's `CLOCK_BOOTTIME`): the primary's current SCN
    /// as its heartbeats announced it, ascending. The lags a failover is judged by come from
    /// these: positions and this host's own clock, never the primary's wall clock (a clock
    /// stepped back would show no lag).
    announced: VecDeque<(Scn, roles::fast_start::Time)>,
    last_error: Option<String>,
    /// How long each source of the connections served has been silent (`silence_timeout`).
    sources: silence::Sources,
}

impl Heard {
    /// How long since this standby last heard its primary (`started`: when the receiver
    /// started), never more than it is: through a relay, the relay's silence as its last
    /// heartbeat said it plus the time since (taken only when the relay says it: a version 8
    /// relay's own messages count as the primary's), and the primary's own connections.
    fn primary_silence(&self, started: Instant) -> Duration {
        let source = self.at.unwrap_or(started).elapsed();
        match self.relay_silence {
            Some((at, relay_silence)) => {
                let through_relay = at.elapsed() + relay_silence;
                let direct = self.primary_at.map_or(Duration::MAX, |at| at.elapsed());
                through_relay.min(direct)
            }
            None => source,
        }
    }

    fn primary_now_us(&self) -> u64 {
        match self.at {
            Some(at) => self.primary_time_us + at.elapsed().as_micros() as u64,
            None => now_unix_us(),
        }
    }

    /// The primary announced (in a heartbeat) that it has generated up to `scn`.
    fn announce(&mut self, scn: Scn, now: roles::fast_start::Time) {
        if scn.0 > 0 && self.announced.back().is_none_or(|&(last, _)| scn > last) {
            if self.announced.len() >= HISTORY_MAX {
                self.announced.pop_front();
            }
            self.announced.push_back((scn, now));
        }
    }

    /// How long, on this standby's clock, it has been missing redo beyond `held` that its
    /// primary announced: zero if it holds everything announced.
    fn missing_since(&self, held: Scn, now: roles::fast_start::Time) -> std::time::Duration {
        self.announced
            .iter()
            .find(|&&(scn, _)| scn > held)
            .map_or(std::time::Duration::ZERO, |&(_, at)| now.since(at))
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
    /// A far sync (`kind = "far_sync"`): it applies nothing, so what it has received and made
    /// durable is all it will ever have done with the redo. It reports that as its applied SCN
    /// (to its primary's retention and lags, and its own), and its status says it is a far
    /// sync.
    pub far_sync: bool,
    pub role_info: RoleInfoSource,
    pub refusals: Arc<Refusals>,
    /// The address the listener is bound to, for status.
    pub listen: String,
    /// Without TLS, what a new standby asks before it adopts the identity a hello gives (the
    /// claimed primary, reached at its configured address, must say the same); none with
    /// TLS, whose certificate proved the peer already.
    pub vouch: Option<IdentityVoucher>,
    /// Redo routes (configuration form): which forwarded redo this standby takes, and where it
    /// forwards what it receives (`cascade`). None: it takes redo from primaries only.
    pub cascade: Option<CascadeContext>,
    /// A copy of this standby's data for a new standby (`redoguard server --from`): a new
    /// member behind a cascading standby is built from it, not from the primary across the
    /// WAN. None: copies are refused (a far sync holds no data).
    pub copy: Option<crate::copy::CopyServer>,
}

/// Whether a new standby may adopt the identity of this hello's primary, connected from this
/// address: `Err` says why not.
pub type IdentityVoucher =
    Arc<dyn Fn(&proto::Hello, std::net::SocketAddr) -> Result<(), String> + Send + Sync>;

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
    /// A far sync's: `applied_scn` is what it received and made durable
    /// (`received_through`).
    far_sync: bool,
    /// The newest SCN the standby logs hold durably, as far as this receiver's connections
    /// synced it since it started (a far sync's "applied": `receive::sync_then`).
    received_through: AtomicU64,
    role_info: RoleInfoSource,
    refusals: Arc<Refusals>,
    listen: String,
    vouch: Option<IdentityVoucher>,
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
    /// decided and adopted, or a seal is set, so that no write of the old incarnation lands in
    /// between.
    following: RwLock<()>,
    /// A failover target sealed this relay (`seal`): redo of an incarnation below this is
    /// taken from no one (0: not sealed). Loaded from the control file, where `seal` records
    /// it before answering: a restart keeps it.
    sealed_below: AtomicU32,
    /// Compressed frames received on every connection.
    decompression: Arc<CompressionCounters>,
    /// Forwarding to the members the routes name under the primary (none without routes).
    cascade: Option<Cascade>,
    /// What a forwarder's heartbeats pass on of the primary (it reads `heard`).
    upstream: Upstream,
    copy: Option<crate::copy::CopyServer>,
}

impl StandbyReceiver {
    pub fn start(context: ReceiverContext) -> std::io::Result<Arc<StandbyReceiver>> {
        let control = context.redo.control();
        let newest_known = control
            .fenced
            .as_ref()
            .map_or(control.incarnation, |fence| fence.incarnation.max(control.incarnation));
        let cascade = context
            .cascade
            .map(|cascade| Cascade::new(cascade, context.redo.handle(), context.history.clone()));
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| Inner {
            cascade,
            upstream: {
                let weak = weak.clone();
                Arc::new(move || match weak.upgrade() {
                    Some(inner) => {
                        let heard = inner.heard.lock();
                        crate::primary::UpstreamWord {
                            primary_time_us: heard.primary_now_us(),
                            current_scn: heard.current_scn.max(heard.received_scn),
                            primary_silence_ms: heard.primary_silence(inner.started).as_millis()
                                as u64,
                            transport_lag_us: inner.transport_lag_us(&heard),
                            targets: heard.relay_targets.clone(),
                        }
                    }
                    None => crate::primary::UpstreamWord {
                        primary_time_us: now_unix_us(),
                        ..Default::default()
                    },
                })
            },
            newest_known: AtomicU32::new(newest_known.0),
            following: RwLock::new(()),
            // A seal survives restarts (docs/roles.md, "Failover through a far sync").
            sealed_below: AtomicU32::new(control.sealed_below.0),
            decompression: Arc::new(CompressionCounters::default()),
            copy: context.copy,
            redo: context.redo,
            storage: context.storage,
            history: context.history,
            config: context.config,
            applied: context.applied,
            far_sync: context.far_sync,
            received_through: AtomicU64::new(0),
            role_info: context.role_info,
            refusals: context.refusals,
            listen: context.listen,
            vouch: context.vouch,
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
        let applied = inner.applied_scn();
        let (refused, refusal) = inner.refusals.get();
        let heard = inner.heard.lock();
        let transport_lag_us = inner.transport_lag_us(&heard);
        StandbyReplicationStatus {
            listen: inner.listen.clone(),
            primary: inner.config.primary.clone(),
            primary_member: heard.primary_member.clone(),
            source_member: heard.source_member.clone(),
            primary_peer: heard.peers.last().map(SocketAddr::to_string),
            connected: !heard.peers.is_empty(),
            primary_connected: heard.peers.iter().any(|peer| !heard.relayed.contains(peer)),
            last_heard_s: Some(heard.primary_silence(inner.started).as_secs_f64()),
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
            far_sync: inner.far_sync,
        }
    }

    /// The lags a fast-start failover is judged by (Maximum Performance's `lag_limit`), in
    /// milliseconds: how long, on this standby's own clock, it has been missing redo that its
    /// primary announced as generated (transport) or has not applied it (apply), and at least
    /// the primary's silence beyond a second (a silent primary may be generating).
    pub fn failover_lags_ms(&self) -> (u64, u64) {
        let inner = &self.inner;
        let applied = inner.applied_scn();
        let now = roles::fast_start::Time::now();
        let heard = inner.heard.lock();
        let silence = heard.primary_silence(inner.started).saturating_sub(SILENCE_GRACE);
        // What it holds: what it received since it started, or applied (after a restart, what
        // it recovered).
        let held = heard.received_scn.max(applied);
        let transport = heard.missing_since(held, now).max(silence);
        let apply = heard.missing_since(applied, now).max(transport);
        (transport.as_millis() as u64, apply.as_millis() as u64)
    }

    /// Whether a primary is connected, and which member it is.
    pub fn primary(&self) -> (bool, Option<String>) {
        let heard = self.inner.heard.lock();
        (!heard.peers.is_empty(), heard.primary_member.clone())
    }

    /// The members this standby forwards to (cascading), as a primary's destinations show.
    pub fn forwarding(&self) -> Vec<crate::primary::DestinationStatus> {
        self.inner.cascade.as_ref().map(Cascade::status).unwrap_or_default()
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
        if let Some(cascade) = &self.inner.cascade {
            cascade.stop();
        }
        if let Some(thread) = self.gap_watch.lock().take() {
            let _ = thread.join();
        }
    }

    /// Runs `work` (a hello's connection, a seal) counted among those `stop` waits for, and
    /// uncounted however it ends (a panic too: `stop` would otherwise wait out its timeout).
    fn serving(&self, work: impl FnOnce()) {
        struct Served<'a>(&'a Inner);
        impl Drop for Served<'_> {
            fn drop(&mut self) {
                *self.0.serving.lock() -= 1;
                self.0.served.notify_all();
            }
        }
        *self.inner.serving.lock() += 1;
        let _served = Served(&self.inner);
        work();
    }
}

impl Drop for StandbyReceiver {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

impl RedoPort for StandbyReceiver {
    fn hello(&self, conn: Conn, hello: Hello) {
        self.serving(|| self.inner.serve(conn, hello));
    }

    fn role_info(&self) -> RoleInfo {
        (self.inner.role_info)()
    }

    fn copy(&self, mut conn: Conn, request: CopyRequest) {
        let Some(server) = &self.inner.copy else {
            let reason = if self.inner.far_sync {
                "this member is a far sync and holds no data: ask the primary or a standby for a copy"
            } else {
                "this standby serves no copy of its data: ask the primary for one"
            };
            self.inner
                .refusals
                .refuse(&mut conn, ErrorMessage::new(ErrorCode::NotAStandby, reason));
            return;
        };
        // A standby that could not follow its primary's newer incarnation holds a branch the
        // primary left: its data is no state to build on (fenced at run time, no reopen).
        if let Some(fence) = self.inner.redo.control().fenced {
            let reason = format!(
                "this standby cannot follow incarnation {} of '{}' (it holds redo of a branch the primary left): it serves no copy; ask the primary",
                fence.incarnation, fence.by
            );
            self.inner.refusals.refuse(&mut conn, ErrorMessage::new(ErrorCode::Diverged, reason));
            return;
        }
        if let Err(reason) = server.serve(&mut conn, &request) {
            tracing::warn!(standby = %request.member, reason, "copy to a new standby failed");
            conn.refuse(ErrorMessage::new(ErrorCode::Internal, reason));
        }
    }

    fn relay_seal(&self, conn: Conn, seal: proto::RelaySeal) {
        // Counted as a hello is: `stop` waits for a seal in progress too (and the engine,
        // shut down, refuses its control-file write if it comes later still).
        self.serving(|| self.inner.serve_seal(conn, seal));
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

    /// How far this member is done with the redo: its apply, or on a far sync (which applies
    /// nothing) what it received.
    fn applied_scn(&self) -> Scn {
        if self.far_sync {
            Scn(self.received_through.load(Ordering::Acquire))
        } else {
            (self.applied)()
        }
    }

    fn apply_lag_us(&self, heard: &Heard, applied: Scn) -> u64 {
        // The oldest redo received and not applied: when did the primary generate it?
        match heard.history.iter().find(|&&(scn, _)| scn > applied) {
            Some(&(_, time_us)) => heard.primary_now_us().saturating_sub(time_us),
            None => 0,
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
            let applied = self.applied_scn();
            {
                let mut heard = self.heard.lock();
                // (The last one stays: it says what the primary had last.)
                while heard.announced.len() > 1
                    && heard.announced.front().is_some_and(|&(scn, _)| scn <= applied)
                {
                    heard.announced.pop_front();
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ago(seconds: u64) -> Instant {
        Instant::now().checked_sub(Duration::from_secs(seconds)).expect("the clock reaches back")
    }

    /// Behind a relay, a standby's silence is its primary's (the relay's silence as its last
    /// heartbeat said, plus the time since), not the relay's: a relay alive while the primary
    /// is gone does not keep a fast-start target from taking over. Never more than it is: the
    /// primary's own connection, heard more recently, counts; without the relay's word (a
    /// version 8 relay), every message counts as the primary's.
    #[test]
    fn behind_a_relay_the_silence_is_the_primarys_never_more() {
        let started = ago(100);
        let mut heard = Heard { at: Some(Instant::now()), ..Heard::default() };
        assert!(heard.primary_silence(started) < Duration::from_secs(1), "no relay word");
        heard.relay_silence = Some((ago(2), Duration::from_secs(5)));
        let silence = heard.primary_silence(started);
        assert!((Duration::from_secs(7)..Duration::from_secs(8)).contains(&silence), "{silence:?}");
        heard.primary_at = Some(ago(3));
        let silence = heard.primary_silence(started);
        assert!((Duration::from_secs(3)..Duration::from_secs(4)).contains(&silence), "{silence:?}");
        heard.primary_at = Some(ago(30));
        let silence = heard.primary_silence(started);
        assert!((Duration::from_secs(7)..Duration::from_secs(8)).contains(&silence), "{silence:?}");
    }
}
