//! Fast-start failover, a member's side (`docs/fast-start-failover.md` has the protocol and
//! the argument for why it never makes two primaries).
//!
//! A primary with fast-start failover enabled acknowledges a commit only if every fast-start
//! target acknowledged its redo, or, for the targets that did not, while it holds the active
//! observer's **lease** and (under Maximum Availability) the observer's **grant** for those
//! targets. The observer records that it will not fail over to a target before it grants the
//! primary to go on without it; so a target the observer may fail over to holds every commit
//! the primary acknowledged. A primary that has neither its targets nor the lease stops
//! acknowledging commits (they wait) and closes its write gate: it is *isolated*.
//!
//! The lease runs from when this member *sent* the answer that preceded the ping (an
//! observer sends its next ping on a connection only after reading the previous answer), so
//! however late a ping arrives, the lease ends before the observer, counting from when it
//! *received* its last answer, may consider the primary lost.
//!
//! The **active observer** is the one whose lease and grants the primary takes. It changes
//! only when the active one has not pinged for `threshold`, and then only once the new one
//! reports (`following`) that every target this primary ever announced an observer to has
//! heard of it: the primary names the candidate in its heartbeats, and a standby takes a
//! failover only from the observer its primary named last. So an old observer that cannot
//! reach the primary can no longer fail over to a target once a new one may grant. (A target
//! never told of an observer by this primary takes a failover from none on its account: a
//! standby knows an observer only from its current primary's heartbeats, and a restarted
//! primary that a standby followed takes no write until a standby accepts it again.)
//!
//! `FastStart` is that state, shared by the primary's redo port (which records pings) and its
//! transport (whose log-writer wait asks `admit`). `serve_observer` answers an observer's
//! pings on a member's redo listener, whatever the member's role, through `ObserverHooks`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use proto::{ErrorCode, ErrorMessage, Message, ObserverPing, ObserverPong};

use crate::config::{FastStartFailoverConfig, ProtectionMode};
use crate::conn::{Conn, ConnError};

/// How long an observer's connection may stay silent before the member closes it.
const OBSERVER_IDLE: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    /// Per observer: when its lease began (the send time of the answer before its last
    /// ping with a lease).
    lease_from: BTreeMap<String, Instant>,
    /// The observer whose lease and grants count.
    active: Option<String>,
    /// The observer announced to the targets in heartbeats, waiting for them to follow it.
    proposed: Option<String>,
    /// The targets this primary has sent a heartbeat naming an observer to.
    announced_to: BTreeSet<String>,
    /// The fast-start targets that are synchronized SYNC destinations now.
    synchronized: BTreeSet<String>,
    /// The targets the active observer let this primary go on without (until synchronized).
    granted: BTreeSet<String>,
    /// Whether admission is waiting (for the log), and since when it warned.
    waiting: bool,
}

/// What a primary tells the observer about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FastStartView {
    /// The targets synchronized now.
    pub synchronized: Vec<String>,
    /// Targets neither synchronized nor granted.
    pub wants_unsync: Vec<String>,
    /// No lease, and some target is not synchronized: commits wait, the gate is closed.
    pub isolated: bool,
    pub all_synchronized: bool,
}

/// A primary's fast-start failover state: lease, grants, the active observer, isolation.
#[derive(Debug)]
pub struct FastStart {
    pub config: FastStartFailoverConfig,
    /// The observers, in order of priority.
    observers: Vec<String>,
    /// The members it may fail over to.
    pub targets: Vec<String>,
    state: Mutex<State>,
    changed: Condvar,
}

impl FastStart {
    pub fn new(
        config: FastStartFailoverConfig,
        observers: Vec<String>,
        targets: Vec<String>,
    ) -> Arc<FastStart> {
        Arc::new(FastStart {
            config,
            observers,
            targets,
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    fn lease_of(&self, state: &State, observer: &str) -> bool {
        state.lease_from.get(observer).is_some_and(|from| from.elapsed() < self.config.threshold)
    }

    fn lease_valid(&self, state: &State) -> bool {
        state.active.as_deref().is_some_and(|active| self.lease_of(state, active))
    }

    /// An observer's ping to this primary. `lease_from` is when this member sent the answer
    /// before it on the same connection (none for a connection's first ping: no lease).
    pub fn note_ping(&self, ping: &ObserverPing, lease_from: Option<Instant>) {
        if !self.observers.contains(&ping.observer) {
            return;
        }
        let mut state = self.state.lock();
        match (ping.lease, lease_from) {
            (true, Some(from)) => {
                state.lease_from.insert(ping.observer.clone(), from);
            }
            (false, _) => {
                // The observer no longer sees this member as its primary: whatever lease it
                // gave is withdrawn at once.
                state.lease_from.remove(&ping.observer);
            }
            (true, None) => {}
        }
        self.choose_observer(&mut state, ping);
        if state.active.as_deref() == Some(ping.observer.as_str()) && !ping.grant_unsync.is_empty()
        {
            for target in &ping.grant_unsync {
                if self.targets.contains(target)
                    && !state.synchronized.contains(target)
                    && state.granted.insert(target.clone())
                {
                    tracing::warn!(observer = %ping.observer, target, "fast-start failover: the observer lets this primary go on without this target (it will not fail over to it until it is synchronized again)");
                }
            }
        }
        self.changed.notify_all();
    }

    /// The hand-over rule: the active observer stays while its lease holds; once it has
    /// lapsed, the first observer (in priority order) with a lease is proposed to the targets,
    /// and becomes active when it says every target follows it.
    fn choose_observer(&self, state: &mut State, ping: &ObserverPing) {
        if self.lease_valid(state) {
            if state.proposed.take().is_some() {
                tracing::info!(observer = ?state.active, "fast-start failover: the active observer is back; hand-over withdrawn");
            }
            return;
        }
        let candidate = self
            .observers
            .iter()
            .find(|name| {
                Some(name.as_str()) != state.active.as_deref() && self.lease_of(state, name)
            })
            .cloned();
        if candidate != state.proposed {
            if let Some(candidate) = &candidate {
                tracing::info!(observer = %candidate, "fast-start failover: proposing a new active observer to the targets");
            }
            state.proposed = candidate;
        }
        if state.proposed.as_deref() == Some(ping.observer.as_str())
            && state.announced_to.iter().all(|target| ping.following.contains(target))
            && self.lease_of(state, &ping.observer)
        {
            tracing::info!(observer = %ping.observer, previous = ?state.active, "fast-start failover: the active observer");
            state.active = state.proposed.take();
            // A new observer knows nothing of the old one's grants: they stay, and it learns
            // them from this primary's answers (those targets are not synchronized).
        }
    }

    /// The observer this primary takes decisions from.
    pub fn active(&self) -> Option<String> {
        self.state.lock().active.clone()
    }

    /// The observer to name in a heartbeat to `destination`: the proposed one during a
    /// hand-over, else the active one. A target told of one must follow the next.
    pub fn announce_to(&self, destination: &str) -> Option<String> {
        let mut state = self.state.lock();
        let announced = state.proposed.clone().or_else(|| state.active.clone());
        if announced.is_some() && self.targets.iter().any(|target| target == destination) {
            state.announced_to.insert(destination.to_string());
        }
        announced
    }

    /// The targets that are synchronized SYNC destinations now (the transport says so
    /// whenever it changes). A target synchronized again needs no grant.
    pub fn set_synchronized(&self, synchronized: BTreeSet<String>) {
        let mut state = self.state.lock();
        state.granted.retain(|target| !synchronized.contains(target));
        state.synchronized = synchronized;
        self.changed.notify_all();
    }

    fn view_of(&self, state: &State) -> FastStartView {
        let all_synchronized =
            self.targets.iter().all(|target| state.synchronized.contains(target));
        FastStartView {
            synchronized: state.synchronized.iter().cloned().collect(),
            wants_unsync: self
                .targets
                .iter()
                .filter(|target| {
                    !state.synchronized.contains(*target) && !state.granted.contains(*target)
                })
                .cloned()
                .collect(),
            isolated: !all_synchronized && !self.lease_valid(state),
            all_synchronized,
        }
    }

    /// What a pong tells the observer.
    pub fn view(&self) -> FastStartView {
        self.view_of(&self.state.lock())
    }

    /// For status: the active observer and how long ago its lease began (seconds).
    pub fn observer_contact(&self) -> (Option<String>, Option<f64>) {
        let state = self.state.lock();
        let last = state
            .active
            .as_ref()
            .and_then(|active| state.lease_from.get(active))
            .map(|at| at.elapsed().as_secs_f64());
        (state.active.clone(), last)
    }

    /// Whether this primary takes no write now.
    pub fn isolated(&self) -> bool {
        self.view().isolated
    }

    /// The log writer's question for a write: may it be declared durable (its commits
    /// acknowledged)? `acknowledged` says which targets hold it durably now (asked again
    /// while waiting: a target catching up may come to hold it). Yes if every target does;
    /// else it waits until the lease is valid and, under Maximum Availability, every target
    /// that does not hold it is granted — or `stop` says to give up.
    pub fn admit(
        &self,
        mode: ProtectionMode,
        acknowledged: &dyn Fn() -> BTreeSet<String>,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        let needs_grant = mode == ProtectionMode::MaximumAvailability;
        let mut state = self.state.lock();
        loop {
            let holding = acknowledged();
            let missing: Vec<&String> =
                self.targets.iter().filter(|target| !holding.contains(*target)).collect();
            if missing.is_empty() {
                if state.waiting {
                    state.waiting = false;
                    tracing::info!("fast-start failover: commits are acknowledged again");
                }
                return Ok(());
            }
            let granted =
                !needs_grant || missing.iter().all(|target| state.granted.contains(*target));
            if self.lease_valid(&state) && granted {
                if state.waiting {
                    state.waiting = false;
                    tracing::info!("fast-start failover: commits are acknowledged again");
                }
                return Ok(());
            }
            if stop() {
                return Err(
                    "fast-start failover: the primary is stopping or has been fenced, and the commit was not protected by its targets"
                        .into(),
                );
            }
            if !state.waiting {
                state.waiting = true;
                tracing::warn!(
                    missing = ?missing,
                    lease = self.lease_valid(&state),
                    "fast-start failover: a target did not acknowledge this write; commits wait for the observer's lease{}",
                    if needs_grant { " and its consent to go on without it" } else { "" }
                );
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

/// What a member's server does for an observer.
pub trait ObserverHooks: Send + Sync {
    /// The answer to a ping (a primary also records it: its lease, a grant). `lease_from`:
    /// when this member sent its previous answer on the same connection.
    fn pong(&self, ping: &ObserverPing, lease_from: Option<Instant>) -> ObserverPong;
    /// The observer asks this standby to become the primary: `Err` says why not.
    fn failover(&self, ping: &ObserverPing) -> Result<(), String>;
    /// The observer says this (old) primary has been failed over.
    fn fence(&self, incarnation: u32, primary: &str);
}

/// Serves an observer's connection: a pong for every ping, until it goes quiet or away.
pub fn serve_observer(mut conn: Conn, first: ObserverPing, hooks: &dyn ObserverHooks) {
    let mut ping = first;
    let mut previous_answer: Option<Instant> = None;
    loop {
        if ping.newer_incarnation > 0 {
            hooks.fence(ping.newer_incarnation, &ping.new_primary);
        }
        let refusal = if ping.failover { hooks.failover(&ping).err() } else { None };
        let mut pong = hooks.pong(&ping, previous_answer);
        if let Some(reason) = refusal {
            pong.refusal = reason;
        }
        // Taken before sending: the next ping was sent after this answer arrived.
        previous_answer = Some(Instant::now());
        if conn.send(&Message::ObserverPong(pong), Duration::from_secs(5)).is_err() {
            return;
        }
        ping = match conn.recv(Some(OBSERVER_IDLE)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fast_start(targets: &[&str]) -> Arc<FastStart> {
        FastStart::new(
            FastStartFailoverConfig {
                enabled: true,
                threshold: Duration::from_millis(500),
                ..FastStartFailoverConfig::default()
            },
            vec!["o1".into(), "o2".into()],
            targets.iter().map(|name| name.to_string()).collect(),
        )
    }

    fn ping(observer: &str, lease: bool) -> ObserverPing {
        ObserverPing { observer: observer.into(), lease, ..ObserverPing::default() }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    fn following(observer: &str, targets: &[&str]) -> ObserverPing {
        ObserverPing {
            following: targets.iter().map(|name| name.to_string()).collect(),
            ..ping(observer, true)
        }
    }

    /// Makes `observer` the active one (proposed, announced to the targets, followed).
    fn activate(fast_start: &FastStart, observer: &str) {
        fast_start.note_ping(&ping(observer, true), Some(Instant::now()));
        let targets = fast_start.targets.clone();
        for target in &targets {
            assert_eq!(fast_start.announce_to(target).as_deref(), Some(observer));
        }
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        fast_start.note_ping(&following(observer, &targets), Some(Instant::now()));
        assert_eq!(fast_start.active().as_deref(), Some(observer));
    }

    #[test]
    fn a_write_every_target_acknowledged_needs_nothing_more() {
        let fast_start = fast_start(&["west", "far"]);
        assert!(
            fast_start
                .admit(ProtectionMode::MaximumAvailability, &|| set(&["west", "far"]), &|| true)
                .is_ok()
        );
    }

    #[test]
    fn without_a_target_a_write_needs_the_lease_and_a_grant_for_exactly_that_target() {
        let fast_start = fast_start(&["west", "far"]);
        fast_start.set_synchronized(set(&["west", "far"]));
        activate(&fast_start, "o1");
        // far drops out: a grant for west alone does not cover it.
        fast_start.set_synchronized(set(&["west"]));
        assert_eq!(fast_start.view().wants_unsync, vec!["far".to_string()]);
        fast_start.note_ping(
            &ObserverPing { grant_unsync: vec!["west".into()], ..ping("o1", true) },
            Some(Instant::now()),
        );
        assert!(
            fast_start
                .admit(ProtectionMode::MaximumAvailability, &|| set(&["west"]), &|| true)
                .is_err()
        );
        fast_start.note_ping(
            &ObserverPing { grant_unsync: vec!["far".into()], ..ping("o1", true) },
            Some(Instant::now()),
        );
        assert!(
            fast_start
                .admit(ProtectionMode::MaximumAvailability, &|| set(&["west"]), &|| true)
                .is_ok()
        );
        // Synchronized again, the grant is gone: the next time far drops out needs a new one.
        fast_start.set_synchronized(set(&["west", "far"]));
        fast_start.set_synchronized(set(&["west"]));
        assert!(
            fast_start
                .admit(ProtectionMode::MaximumAvailability, &|| set(&["west"]), &|| true)
                .is_err()
        );
    }

    #[test]
    fn a_grant_from_an_observer_that_is_not_active_counts_for_nothing() {
        let fast_start = fast_start(&["west"]);
        activate(&fast_start, "o1");
        fast_start.note_ping(
            &ObserverPing { grant_unsync: vec!["west".into()], ..ping("o2", true) },
            Some(Instant::now()),
        );
        assert_eq!(fast_start.view().wants_unsync, vec!["west".to_string()]);
    }

    #[test]
    fn the_lease_runs_from_the_previous_answer_and_a_first_ping_gives_none() {
        let fast_start = fast_start(&["west"]);
        activate(&fast_start, "o1");
        assert!(!fast_start.isolated());
        // A ping that arrives late (its previous answer went long ago) renews nothing.
        let long_ago = Instant::now() - Duration::from_secs(10);
        fast_start.note_ping(&ping("o1", true), Some(long_ago));
        assert!(fast_start.isolated());
        fast_start.note_ping(&ping("o1", true), None);
        assert!(fast_start.isolated());
        // Under Maximum Performance the lease alone admits a write no target acknowledged.
        assert!(
            fast_start.admit(ProtectionMode::MaximumPerformance, &|| set(&[]), &|| true).is_err()
        );
        fast_start.note_ping(&ping("o1", true), Some(Instant::now()));
        assert!(
            fast_start.admit(ProtectionMode::MaximumPerformance, &|| set(&[]), &|| true).is_ok()
        );
        // A ping without a lease withdraws it at once.
        fast_start.note_ping(&ping("o1", false), Some(Instant::now()));
        assert!(
            fast_start.admit(ProtectionMode::MaximumPerformance, &|| set(&[]), &|| true).is_err()
        );
    }

    #[test]
    fn a_new_observer_takes_over_only_after_the_lease_lapsed_and_the_targets_follow_it() {
        let fast_start = fast_start(&["west", "far"]);
        activate(&fast_start, "o1");
        // o2 pings while o1's lease holds: nothing changes.
        fast_start.note_ping(&following("o2", &["west", "far"]), Some(Instant::now()));
        assert_eq!(fast_start.active().as_deref(), Some("o1"));
        assert_eq!(fast_start.announce_to("west").as_deref(), Some("o1"));
        std::thread::sleep(Duration::from_millis(600));
        // o1's lease lapsed: o2 is proposed to the targets, but not active until every target
        // that was told of o1 follows it.
        fast_start.note_ping(&ping("o2", true), Some(Instant::now()));
        assert_eq!(fast_start.announce_to("west").as_deref(), Some("o2"));
        assert_eq!(fast_start.active().as_deref(), Some("o1"));
        assert!(fast_start.isolated());
        fast_start.note_ping(&following("o2", &["west"]), Some(Instant::now()));
        assert_eq!(fast_start.active().as_deref(), Some("o1"), "far still names o1");
        fast_start.note_ping(&following("o2", &["west", "far"]), Some(Instant::now()));
        assert_eq!(fast_start.active().as_deref(), Some("o2"));
        assert!(!fast_start.isolated());
    }

    #[test]
    fn a_primary_that_announced_no_observer_yet_takes_the_first_at_once() {
        // A new primary (after a failover, say): its targets were never told of an observer
        // by it, so none of them takes a failover on its account.
        let fast_start = fast_start(&["east"]);
        fast_start.note_ping(&ping("o2", true), Some(Instant::now()));
        assert_eq!(fast_start.active().as_deref(), Some("o2"));
    }
}
