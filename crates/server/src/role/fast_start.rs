//! Fast-start failover, as this member answers the observer (`transport::fast_start` has the
//! lease and grant; `docs/fast-start-failover.md` the protocol):
//!
//! - every ping gets this member's role and state (a primary records the ping: its lease,
//!   and a grant);
//! - a failover request is taken only by a standby that is one of the targets, from the
//!   observer its primary last named active (in its heartbeats), once it has itself lost the
//!   primary for `threshold` (or finds the primary's redo port closed: the process is gone),
//!   and that the primary called caught up;
//! - news of a newer incarnation fences an old primary.
//!
//! It also keeps the write gate of a primary that is isolated (neither target nor observer)
//! closed while it is.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use proto::{ObserverPing, ObserverPong};
use redo::Role;
use transport::ObserverHooks;

use super::Roles;
use super::gate::GateState;

pub struct Hooks {
    pub roles: Weak<Roles>,
    pub runtime: tokio::runtime::Handle,
}

fn refused(reason: impl Into<String>) -> Result<(), String> {
    Err(reason.into())
}

impl Hooks {
    fn roles(&self) -> Option<Arc<Roles>> {
        self.roles.upgrade()
    }
}

impl ObserverHooks for Hooks {
    fn pong(&self, ping: &ObserverPing, lease_from: Option<Instant>) -> ObserverPong {
        let Some(roles) = self.roles() else {
            return ObserverPong {
                refusal: "the server is stopping".into(),
                ..ObserverPong::empty(super::placeholder_info(""))
            };
        };
        let member = roles.member_name();
        let Some(running) = roles.current() else {
            return ObserverPong::empty(super::placeholder_info(&member));
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
                ..ObserverPong::empty(info)
            };
        }
        match &running.receiver {
            Some(receiver) => {
                let status = receiver.status();
                ObserverPong {
                    active_observer: status.active_observer.unwrap_or_default(),
                    synchronized: status.caught_up,
                    primary_silence_ms: status
                        .last_heard_s
                        .map_or(u64::MAX, |seconds| (seconds * 1000.0) as u64),
                    transport_lag_ms: (status.transport_lag_s * 1000.0) as u64,
                    apply_lag_ms: (status.apply_lag_s * 1000.0) as u64,
                    ..ObserverPong::empty(info)
                }
            }
            None => ObserverPong::empty(info),
        }
    }

    fn failover(&self, ping: &ObserverPing) -> Result<(), String> {
        let Some(roles) = self.roles() else { return refused("the server is stopping") };
        let replication = roles.settings.replication();
        let fast_start = &replication.fast_start_failover;
        if !fast_start.enabled {
            return refused("fast-start failover is not enabled in this member's configuration");
        }
        let member = roles.member_name();
        if !replication.failover_targets().contains(&member) {
            return refused(format!("'{member}' is not a fast-start failover target"));
        }
        let Some(running) = roles.current() else { return refused("the database is not open") };
        if running.role() != Role::Standby || running.db.redo().control().fenced.is_some() {
            return refused(format!("'{member}' is not a standby that can take over"));
        }
        let Some(receiver) = &running.receiver else { return refused("no receiver") };
        let status = receiver.status();
        if status.active_observer.as_deref() != Some(ping.observer.as_str()) {
            return refused(format!(
                "the primary named {} as its observer, not '{}'",
                status
                    .active_observer
                    .as_deref()
                    .map_or("none".to_string(), |name| format!("'{name}'")),
                ping.observer
            ));
        }
        let silence = Duration::from_secs_f64(status.last_heard_s.unwrap_or(f64::MAX).min(1e9));
        // A closed redo port (the primary's process is gone) is reason enough not to wait out
        // the threshold only under Maximum Availability, where the primary acknowledges
        // nothing this standby lacks without the observer's grant. Under Maximum Performance
        // the primary's lease must have run out first.
        let maximum_availability =
            replication.protection_mode == transport::ProtectionMode::MaximumAvailability;
        let gone = maximum_availability
            && status
                .primary_member
                .as_deref()
                .and_then(|name| replication.member_named(name))
                .is_some_and(|primary| {
                    matches!(
                        std::net::TcpStream::connect_timeout(
                            &match primary.redo.parse() {
                                Ok(address) => address,
                                Err(_) => return false,
                            },
                            Duration::from_millis(300)
                        ),
                        Err(ref error) if error.kind() == std::io::ErrorKind::ConnectionRefused
                    )
                });
        if silence < fast_start.threshold && !gone {
            return refused(format!(
                "this standby heard from its primary {:.1} s ago (threshold {:?}) and its redo port answers",
                silence.as_secs_f64(),
                fast_start.threshold
            ));
        }
        if !status.caught_up && maximum_availability {
            return refused(
                "the primary did not call this standby synchronized at its last heartbeat",
            );
        }
        let roles = roles.clone();
        drop(running);
        tracing::warn!(observer = %ping.observer, "fast-start failover: the observer asks this standby to take over");
        self.runtime
            .block_on(async move { roles.failover(false, true).await })
            .map(|promoted| {
                tracing::warn!(incarnation = promoted.incarnation, first_scn = %promoted.first_scn, "fast-start failover: this member is the primary");
            })
            .map_err(|error| format!("{error:#}"))
    }

    fn fence(&self, incarnation: u32, primary: &str) {
        let Some(roles) = self.roles() else { return };
        let Some(running) = roles.current() else { return };
        if running.role() != Role::Primary
            || running.db.redo().control().incarnation.0 >= incarnation
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

/// Keeps the gate of an isolated primary closed while it is isolated.
pub(crate) async fn watch_isolation(roles: Arc<Roles>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(running) = roles.current() else { continue };
        let Some(fast_start) = &running.fast_start else { continue };
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
}
