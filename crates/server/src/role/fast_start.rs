//! Fast-start failover, as this member answers the observer (`transport::fast_start` drives
//! the primary's lease and grants; `roles::fast_start` decides; `docs/fast-start-failover.md`
//! has the protocol):
//!
//! - a ping whose settings (threshold, protection mode, lag limit) are not this member's is
//!   refused, naming what differs;
//! - every ping gets this member's role and state (a primary records the ping: its lease,
//!   and a grant);
//! - a failover request is decided by `roles::fast_start::accept_failover` while this member
//!   holds its role-change lock, so that a refusal is final (nothing of the request goes on);
//!   a request that arrives while another role change is under way is not decided (the
//!   observer asks again);
//! - news of a newer incarnation fences an old primary.
//!
//! It also keeps the write gate of a primary that is isolated (neither target nor observer)
//! closed while it is.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use proto::{FastStartMode, ObserverPing, ObserverPong};
use redo::Role;
use roles::fast_start::{Agreement, FailoverRequest, TargetView, Time};
use transport::{FailoverRefusal, ObserverHooks};

use super::Roles;
use super::gate::GateState;

pub struct Hooks {
    pub roles: Weak<Roles>,
    pub runtime: tokio::runtime::Handle,
    /// While this standby carries out a failover it accepted: the word it accepted it under
    /// (the observer it named, and whether it was synchronized), which its answers to every
    /// observer keep until the failover ends. Taking a relay's tail, it still receives from
    /// the relay, whose heartbeats may meanwhile name another observer (the primary restarted,
    /// its lease from the requesting observer gone): passed on, that observer became active
    /// and could grant the primary to go on without this target, which then opened without
    /// writes the primary acknowledged (found by the relay model with the primary's restart;
    /// docs/fast-start-failover.md, "A target keeps its word while it takes over").
    pub taking_over: parking_lot::Mutex<Option<(String, bool)>>,
}

/// An observer of the configuration whose pings this member refused because its settings are
/// not this member's. The observer connects again at once (some fifty times a second), so a
/// refusal is logged when it starts or changes and once a minute while it lasts, per observer,
/// and the status shows it while it is recent. A name the configuration does not list (anyone
/// can claim one on a redo port without TLS) is logged within `transport::log_limit`'s bounds
/// and never shown.
#[derive(Debug)]
pub(crate) struct RefusedObserver {
    observer: String,
    reason: String,
    last: Instant,
    logged: Instant,
}

/// How long after its last refused ping the status still shows an observer as refused.
const REFUSED_SHOWN: Duration = Duration::from_secs(10);

/// How often a refusal that goes on is logged again.
const REFUSED_LOGGED_EVERY: Duration = Duration::from_secs(60);

/// Refusals of observers the configuration does not name.
static UNKNOWN_REFUSED_LOGGED: transport::log_limit::LogLimit =
    transport::log_limit::LogLimit::new();

impl Roles {
    fn note_refused_observer(&self, observer: &str, reason: &str) {
        let known =
            self.config.replication.observers.iter().any(|configured| configured.name == observer);
        if !known {
            if let Some(left_out) = UNKNOWN_REFUSED_LOGGED.admit() {
                tracing::error!(
                    observer,
                    reason,
                    left_out,
                    "fast-start failover: pings from an observer the configuration does not name are refused (its settings disagree with this member's)"
                );
            }
            return;
        }
        let now = Instant::now();
        let log = {
            let mut refused = self.refused_observer.lock();
            match refused.iter_mut().find(|refused| refused.observer == observer) {
                Some(last) => {
                    let log = last.reason != reason
                        || now.duration_since(last.logged) >= REFUSED_LOGGED_EVERY;
                    last.reason = reason.to_string();
                    last.last = now;
                    if log {
                        last.logged = now;
                    }
                    log
                }
                None => {
                    refused.push(RefusedObserver {
                        observer: observer.to_string(),
                        reason: reason.to_string(),
                        last: now,
                        logged: now,
                    });
                    true
                }
            }
        };
        if log {
            tracing::error!(
                observer,
                reason,
                "fast-start failover: an observer's settings disagree with this member's; its pings are refused (logged once a minute while it lasts)"
            );
        }
    }

    /// The observers refused lately, and why, for the status.
    pub(crate) fn refused_observer(&self) -> Option<String> {
        let refused = self.refused_observer.lock();
        let recent: Vec<String> = refused
            .iter()
            .filter(|refused| refused.last.elapsed() < REFUSED_SHOWN)
            .map(|refused| format!("{}: {}", refused.observer, refused.reason))
            .collect();
        (!recent.is_empty()).then(|| recent.join("; "))
    }
}

fn not_now(reason: impl Into<String>) -> Result<(), FailoverRefusal> {
    Err(FailoverRefusal::NotNow(reason.into()))
}

impl Hooks {
    fn roles(&self) -> Option<Arc<Roles>> {
        self.roles.upgrade()
    }
}

/// Whether fast-start failover runs on this member now.
pub(crate) fn mode(roles: &Roles) -> FastStartMode {
    let replication = roles.settings.replication();
    if !replication.fast_start_failover.enabled {
        FastStartMode::Disabled
    } else if roles.settings.fast_start_observe_only() {
        FastStartMode::ObserveOnly
    } else {
        FastStartMode::Enabled
    }
}

impl ObserverHooks for Hooks {
    fn check_settings(&self, ping: &ObserverPing) -> Result<(), String> {
        let Some(roles) = self.roles() else { return Ok(()) };
        let replication = roles.settings.replication();
        let agreed = replication.fast_start_settings().check_agreement(&Agreement {
            threshold_ms: ping.threshold_ms,
            lag_limit_ms: ping.lag_limit_ms,
            protection: ping.protection,
        });
        if let Err(reason) = &agreed {
            roles.note_refused_observer(&ping.observer, reason);
        }
        agreed
    }

    fn pong(&self, ping: &ObserverPing, lease_from: Option<Time>) -> ObserverPong {
        let Some(roles) = self.roles() else {
            return ObserverPong {
                refusal: "the server is stopping".into(),
                ..ObserverPong::empty(super::placeholder_info(""))
            };
        };
        let member = roles.member_name();
        let mode = mode(&roles);
        let Some(running) = roles.current() else {
            return ObserverPong { mode, ..ObserverPong::empty(super::placeholder_info(&member)) };
        };
        let info = (roles.role_info_source(&running.db))();
        if let Some(fast_start) = &running.fast_start {
            fast_start.note_ping(ping, lease_from);
            let view = fast_start.view();
            return ObserverPong {
                active_observer: fast_start.active().unwrap_or_default(),
                synchronized: view.all_synchronized,
                wants_unsync: view.wants_unsync,
                isolated: view.isolated,
                targets_synchronized: view.synchronized,
                mode,
                ..ObserverPong::empty(info)
            };
        }
        match &running.receiver {
            Some(receiver) => {
                let status = receiver.status();
                let (transport_lag_ms, apply_lag_ms) = receiver.failover_lags_ms();
                let (active_observer, synchronized) = self
                    .taking_over
                    .lock()
                    .clone()
                    .unwrap_or((status.active_observer.unwrap_or_default(), status.caught_up));
                ObserverPong {
                    active_observer,
                    synchronized,
                    primary_silence_ms: status
                        .last_heard_s
                        .map_or(u64::MAX, |seconds| (seconds * 1000.0) as u64),
                    transport_lag_ms,
                    apply_lag_ms,
                    mode,
                    ..ObserverPong::empty(info)
                }
            }
            None => ObserverPong { mode, ..ObserverPong::empty(info) },
        }
    }

    fn failover(&self, ping: &ObserverPing) -> Result<(), FailoverRefusal> {
        let Some(roles) = self.roles() else { return not_now("the server is stopping") };
        // Decided under the role-change lock: a refusal is final, an acceptance runs to its
        // end before any other change.
        let Ok(transition) = roles.transition.try_lock() else {
            return not_now("a role change is under way on this member");
        };
        let Some(running) = roles.current() else { return not_now("the database is not open") };
        let replication = roles.settings.replication();
        let control = running.db.redo().control();
        let status = running.receiver.as_ref().map(|receiver| receiver.status());
        let maximum_availability =
            replication.protection_mode == transport::ProtectionMode::MaximumAvailability;
        // Whether nothing listens on the primary's redo port (the process is gone): asked only
        // where it can shorten the wait.
        let primary_port_refuses = maximum_availability
            && status
                .as_ref()
                .and_then(|status| status.primary_member.as_deref())
                .and_then(|name| replication.member_named(name))
                .and_then(|primary| primary.redo.parse().ok())
                .is_some_and(|address| {
                    matches!(
                        std::net::TcpStream::connect_timeout(&address, Duration::from_millis(300)),
                        Err(ref error) if error.kind() == std::io::ErrorKind::ConnectionRefused
                    )
                });
        let view = TargetView {
            member: roles.member_name(),
            enabled: mode(&roles) == FastStartMode::Enabled,
            open_standby: running.role() == Role::Standby
                && control.fenced.is_none()
                && running.receiver.is_some(),
            incarnation: control.incarnation.0,
            primary: status.as_ref().and_then(|status| status.primary_member.clone()),
            observer: status.as_ref().and_then(|status| status.active_observer.clone()),
            synchronized: status.as_ref().is_some_and(|status| status.caught_up),
            silence: Duration::from_secs_f64(
                status.as_ref().and_then(|status| status.last_heard_s).unwrap_or(f64::MAX).min(1e9),
            ),
            primary_port_refuses,
        };
        let request = FailoverRequest {
            observer: ping.observer.clone(),
            from: ping.failover_from.clone(),
            incarnation: ping.failover_incarnation,
        };
        roles::fast_start::accept_failover(&replication.fast_start_settings(), &view, &request)
            .map_err(FailoverRefusal::Final)?;
        drop(running);
        tracing::warn!(observer = %ping.observer, "fast-start failover: the observer asks this standby to take over");
        // Kept from here until the failover ends, before the transition lock is let go.
        *self.taking_over.lock() =
            Some((view.observer.clone().unwrap_or_default(), view.synchronized));
        let roles = roles.clone();
        self.runtime
            .block_on(async move {
                let promoted = roles.failover_holding(false, true, false).await;
                *self.taking_over.lock() = None;
                drop(transition);
                promoted
            })
            .map(|promoted| {
                tracing::warn!(incarnation = promoted.incarnation, first_scn = %promoted.first_scn, "fast-start failover: this member is the primary");
            })
            // Not final, whatever the reason: the observer would lease the old primary again.
            // A member sealed against its incarnation refuses here: another failover from it
            // has begun, and its primary may open at any time (docs/fast-start-failover.md).
            // One whose apply wait ran out receives again (`receive_again`), and is asked again.
            .map_err(|error| FailoverRefusal::NotNow(format!("the failover did not complete: {error:#}")))
    }

    fn fence(&self, incarnation: u32, primary: &str) {
        let Some(roles) = self.roles() else { return };
        let Some(running) = roles.current() else { return };
        if running.role() != Role::Primary
            || running.db.redo().control().incarnation.0 >= incarnation
            || running
                .db
                .redo()
                .control()
                .fenced
                .as_ref()
                .is_some_and(|fence| fence.incarnation.0 >= incarnation)
        {
            return;
        }
        let primary = primary.to_string();
        drop(running);
        if let Err(error) = self.runtime.block_on(async move {
            roles.fence(incarnation, &primary, "told by the fast-start failover observer").await
        }) {
            tracing::warn!(%error, "fast-start failover: the observer's news of a newer incarnation did not fence this member");
        }
    }
}

/// Keeps the gate of an isolated primary closed while it is isolated (called every 100 ms).
pub(crate) fn watch_isolation(roles: &Roles) {
    let Some(running) = roles.current() else { return };
    let Some(fast_start) = &running.fast_start else { return };
    fast_start.set_observe_only(roles.settings.fast_start_observe_only());
    if fast_start.isolated() {
        if roles.gate.replace(|state| *state == GateState::Open, GateState::Isolated) {
            tracing::error!(
                "fast-start failover: ISOLATED: neither the SYNC target nor the observer answers; no commit is acknowledged until one does"
            );
        }
    } else if roles.gate.replace(|state| *state == GateState::Isolated, GateState::Open) {
        tracing::info!("fast-start failover: no longer isolated; writes are taken");
    }
}
