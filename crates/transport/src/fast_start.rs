//! Fast-start failover, a member's side (`docs/fast-start-failover.md` has the protocol and
//! the argument for why it never makes two primaries).
//!
//! The decisions are `roles::fast_start::Primary`'s (lease, grants, the active observer and
//! the hand-over, which targets are synchronized, whether a write may be acknowledged); this
//! module drives it for a running primary: the time (`CLOCK_BOOTTIME`), how far each target
//! has acknowledged (from the transport), the wait of a write that may not be acknowledged
//! yet, and its record (`<redo dir>/fast-start.record`: the active observer and the targets
//! named an observer to), written durably before the act it allows.
//!
//! `FastStart` is shared by the primary's redo port (which records pings) and its transport
//! (whose log-writer wait asks `admit`). `serve_observer` answers an observer's pings on a
//! member's redo listener, whatever the member's role, through `ObserverHooks`.
//!
//! Lock order: `FastStart`'s state, then a destination's state (read by `acknowledged`); the
//! transport calls in here holding no destination lock.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use proto::{ErrorCode, ErrorMessage, Message, ObserverPing, ObserverPong};
use redo::RedoAddr;
use roles::fast_start::{Admission, Position, Primary, PrimaryRecord, PrimaryView, Time};

use crate::config::FastStartFailoverConfig;
use crate::conn::{Conn, ConnError};

/// How long an observer's connection may stay silent before the member closes it.
const OBSERVER_IDLE: Duration = Duration::from_secs(10);
/// How long one wait for the observer's next ping lasts before a stop is looked for.
const OBSERVER_RECV_SLICE: Duration = Duration::from_millis(500);
/// The record's file name, in the redo directory.
pub const RECORD_FILE: &str = "fast-start.record";

/// How far each target has acknowledged durably (the transport's answer).
pub type Acknowledged = Arc<dyn Fn(&str) -> Position + Send + Sync>;

/// Where the primary's record is kept, and how it is written.
pub struct RecordFile {
    pub storage: Arc<dyn redo::Storage>,
    pub path: PathBuf,
}

impl RecordFile {
    /// The record in `dir`, or an empty one if there is none; a damaged one is an error that
    /// names the file.
    pub fn load(
        storage: Arc<dyn redo::Storage>,
        dir: &std::path::Path,
    ) -> Result<(RecordFile, PrimaryRecord), String> {
        let path = dir.join(RECORD_FILE);
        let record = if storage.exists(&path) {
            let bytes = redo::storage::read_all(storage.as_ref(), &path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
            PrimaryRecord::decode(&bytes).map_err(|error| format!("{}: {error}", path.display()))?
        } else {
            PrimaryRecord::default()
        };
        Ok((RecordFile { storage, path }, record))
    }

    /// Replaces the record durably.
    pub fn write(&self, record: &PrimaryRecord) -> Result<(), String> {
        redo::storage::replace_durably(self.storage.as_ref(), &self.path, &record.encode())
            .map_err(|error| format!("writing {}: {error}", self.path.display()))
    }
}

struct State {
    primary: Primary,
    /// Whether a write is waiting (to log the change once).
    waiting: bool,
}

/// A primary's fast-start failover state, driven.
pub struct FastStart {
    pub config: FastStartFailoverConfig,
    /// The members it may fail over to (other than this one), and the relays whose
    /// acknowledgements count for those behind one: the core's (`roles::fast_start::Reach`),
    /// kept here too so that the write's wait and the heartbeats ask it without the lock.
    pub reach: roles::fast_start::Reach,
    state: Mutex<State>,
    changed: Condvar,
    record: RecordFile,
    acknowledged: RwLock<Option<Acknowledged>>,
}

impl std::fmt::Debug for FastStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastStart").field("targets", &self.reach.targets()).finish_non_exhaustive()
    }
}

impl FastStart {
    /// The state of a primary whose redo is durable up to `start`, with its record.
    pub fn new(
        config: FastStartFailoverConfig,
        settings: roles::fast_start::Settings,
        me: &str,
        record_file: RecordFile,
        record: PrimaryRecord,
        start: RedoAddr,
    ) -> Arc<FastStart> {
        let primary = Primary::new(settings, me, record, start.into());
        let reach = primary.reach().clone();
        Arc::new(FastStart {
            config,
            reach,
            state: Mutex::new(State { primary, waiting: false }),
            changed: Condvar::new(),
            record: record_file,
            acknowledged: RwLock::new(None),
        })
    }

    /// The word for the fast-start targets behind `relay`, for a heartbeat to it: for each,
    /// the observer it may take a failover from (recorded first, as for a target shipped to
    /// directly) and whether it is synchronized (`relay_caught_up`: the relay is streaming or
    /// synchronized; a SYNC relay must also hold what is owed the target).
    pub fn relay_word(
        &self,
        relay: &str,
        relay_is_sync: bool,
        relay_caught_up: bool,
    ) -> Vec<proto::TargetWord> {
        let behind = self.reach.behind(relay);
        if behind.is_empty() {
            return Vec::new();
        }
        let synchronized = self.view().synchronized;
        behind
            .into_iter()
            .map(|target| proto::TargetWord {
                observer: self.announce_to(&target).unwrap_or_default(),
                caught_up: relay_caught_up && (!relay_is_sync || synchronized.contains(&target)),
                member: target,
            })
            .collect()
    }

    /// Observe-only (planned maintenance) on or off.
    pub fn set_observe_only(&self, observe_only: bool) {
        self.state.lock().primary.set_observe_only(observe_only);
        self.changed.notify_all();
    }

    /// Where the transport says how far each target has acknowledged.
    pub fn attach(&self, acknowledged: Acknowledged) {
        *self.acknowledged.write() = Some(acknowledged);
        self.refresh();
    }

    fn acknowledged_of(&self) -> impl Fn(&str) -> Position + '_ {
        let source = self.acknowledged.read().clone();
        move |target| source.as_ref().map_or(Position::default(), |source| source(target))
    }

    fn persist(&self) -> impl FnMut(&PrimaryRecord) -> Result<(), String> + '_ {
        |record| {
            self.record.write(record).inspect_err(|error| {
                tracing::error!(error, "fast-start failover: cannot record the observers' state; what depends on it is not done");
            })
        }
    }

    /// An observer's ping to this primary. `lease_from` is when this member sent the answer
    /// before it on the same connection (none for a connection's first ping: no lease).
    pub fn note_ping(&self, ping: &ObserverPing, lease_from: Option<Time>) {
        let now = Time::now();
        let mut state = self.state.lock();
        let before = state.primary.active().map(str::to_string);
        let _ = state.primary.note_ping(ping, lease_from, now, &mut self.persist());
        let after = state.primary.active().map(str::to_string);
        if before != after {
            tracing::info!(observer = ?after, previous = ?before, "fast-start failover: the active observer");
        }
        self.changed.notify_all();
    }

    /// What is on disk of it (the active observer, the targets named one to).
    pub fn record(&self) -> PrimaryRecord {
        self.state.lock().primary.record().clone()
    }

    /// The observer this primary takes decisions from.
    pub fn active(&self) -> Option<String> {
        self.state.lock().primary.active().map(str::to_string)
    }

    /// The observer to name in a heartbeat to `destination` (recorded first).
    pub fn announce_to(&self, destination: &str) -> Option<String> {
        self.state.lock().primary.announce_to(destination, &mut self.persist())
    }

    /// The targets the transport ships to synchronously now (it says so whenever that
    /// changes). A target is synchronized once it also holds what is owed it.
    pub fn set_synchronized(&self, shipping_sync: BTreeSet<String>) {
        let acknowledged = self.acknowledged_of();
        let mut state = self.state.lock();
        state.primary.set_shipping_sync(shipping_sync, &acknowledged);
        self.changed.notify_all();
    }

    /// Looks again at which targets hold what is owed them.
    pub fn refresh(&self) {
        let acknowledged = self.acknowledged_of();
        self.state.lock().primary.refresh(&acknowledged);
    }

    /// What a pong tells the observer.
    pub fn view(&self) -> PrimaryView {
        let acknowledged = self.acknowledged_of();
        let mut state = self.state.lock();
        state.primary.refresh(&acknowledged);
        state.primary.view(Time::now())
    }

    /// Whether `target` is synchronized (for the heartbeat that tells it so).
    pub fn synchronized(&self, target: &str) -> bool {
        self.view().synchronized.iter().any(|name| name == target)
    }

    /// For status: the active observer and how long ago its lease began (seconds).
    pub fn observer_contact(&self) -> (Option<String>, Option<f64>) {
        let state = self.state.lock();
        (
            state.primary.active().map(str::to_string),
            state.primary.active_lease_age(Time::now()).map(|age| age.as_secs_f64()),
        )
    }

    /// Whether this primary takes no write now.
    pub fn isolated(&self) -> bool {
        self.view().isolated
    }

    /// Whether a write may be answered before it is durable (`COMMITMODE NOWAIT`): only under
    /// the active observer's lease.
    pub fn may_reply_before_durable(&self) -> bool {
        self.state.lock().primary.may_reply_before_durable(Time::now())
    }

    /// The log writer's question for a write that ends at `end`: may it be declared durable
    /// (its commits acknowledged)? `holding` says which targets hold it durably now (asked
    /// again while waiting: a target catching up may come to hold it). Waits until it may, or
    /// `stop` says to give up.
    pub fn admit(
        &self,
        end: RedoAddr,
        holding: &dyn Fn() -> BTreeSet<String>,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        let mut state = self.state.lock();
        loop {
            let admission = state.primary.admit(end.into(), &holding(), Time::now());
            match admission {
                Admission::Admit => {
                    if state.waiting {
                        state.waiting = false;
                        tracing::info!("fast-start failover: commits are acknowledged again");
                    }
                    return Ok(());
                }
                Admission::Wait { missing, lease } => {
                    if stop() {
                        return Err(
                            "fast-start failover: the primary is stopping or has been fenced, and the commit was not protected by its targets"
                                .into(),
                        );
                    }
                    if !state.waiting {
                        state.waiting = true;
                        tracing::warn!(
                            ?missing,
                            lease,
                            "fast-start failover: a target did not acknowledge this write; commits wait for the observer's lease{}",
                            if state.primary.settings().protection
                                == roles::fast_start::Protection::MaximumAvailability
                            {
                                " and its consent to go on without it"
                            } else {
                                ""
                            }
                        );
                    }
                }
            }
            self.changed.wait_for(&mut state, Duration::from_millis(50));
        }
    }

    /// Wakes a waiting `admit` (to look at `stop` again).
    pub fn wake(&self) {
        let _state = self.state.lock();
        self.changed.notify_all();
    }
}

/// Why a standby does not take a failover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailoverRefusal {
    /// It evaluated the request and will not act on it.
    Final(String),
    /// Not decided (a role change under way, the database not open): the observer asks again.
    NotNow(String),
}

/// What a member's server does for an observer.
pub trait ObserverHooks: Send + Sync {
    /// Whether the observer's settings (threshold, protection mode, lag limit) are this
    /// member's: `Err` names what differs, and the ping is refused (the hooks say so in the
    /// log and the status).
    fn check_settings(&self, ping: &ObserverPing) -> Result<(), String>;
    /// The answer to a ping (a primary also records it: its lease, a grant). `lease_from`:
    /// when this member sent its previous answer on the same connection.
    fn pong(&self, ping: &ObserverPing, lease_from: Option<Time>) -> ObserverPong;
    /// The observer asks this standby to become the primary.
    fn failover(&self, ping: &ObserverPing) -> Result<(), FailoverRefusal>;
    /// The observer says this (old) primary has been failed over.
    fn fence(&self, incarnation: u32, primary: &str);
}

/// Serves an observer's connection: a pong for every ping, until it goes quiet or away, or
/// `stopping` says the member stops.
pub fn serve_observer(
    mut conn: Conn,
    first: ObserverPing,
    hooks: &dyn ObserverHooks,
    stopping: &dyn Fn() -> bool,
) {
    let mut ping = first;
    let mut previous_answer: Option<Time> = None;
    loop {
        if stopping() {
            conn.refuse(ErrorMessage::new(ErrorCode::ShuttingDown, "this member is stopping"));
            return;
        }
        // (The hooks log it: a refused observer connects again at once.)
        if let Err(reason) = hooks.check_settings(&ping) {
            conn.refuse(ErrorMessage::new(ErrorCode::Malformed, reason));
            return;
        }
        if ping.newer_incarnation > 0 {
            hooks.fence(ping.newer_incarnation, &ping.new_primary);
        }
        let refusal = if ping.failover { hooks.failover(&ping).err() } else { None };
        let mut pong = hooks.pong(&ping, previous_answer);
        match refusal {
            Some(FailoverRefusal::Final(reason)) => {
                pong.refusal = reason;
                pong.refusal_final = true;
            }
            Some(FailoverRefusal::NotNow(reason)) => pong.refusal = reason,
            None => {}
        }
        // Taken before sending: the next ping was sent after this answer arrived.
        previous_answer = Some(Time::now());
        if conn.send(&Message::ObserverPong(pong), Duration::from_secs(5)).is_err() {
            return;
        }
        // (In slices: a stop is noticed within one.)
        let idle_since = std::time::Instant::now();
        let next = loop {
            match conn.recv(Some(OBSERVER_RECV_SLICE)) {
                Err(ConnError::TimedOut(_))
                    if idle_since.elapsed() < OBSERVER_IDLE && !stopping() =>
                {
                    continue;
                }
                other => break other,
            }
        };
        ping = match next {
            Ok(Message::ObserverPing(next)) => next,
            Ok(other) => {
                conn.refuse(ErrorMessage::new(
                    ErrorCode::Malformed,
                    format!("expected an observer ping, got {:?}", other.kind()),
                ));
                return;
            }
            Err(ConnError::Protocol(error)) => {
                conn.refuse(ErrorMessage::new(ErrorCode::Malformed, error.to_string()));
                return;
            }
            Err(_) => return,
        };
    }
}
