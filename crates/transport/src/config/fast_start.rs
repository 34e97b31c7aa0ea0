//! `[replication.fast_start_failover]` and `[[replication.observers]]`: when and to whom an
//! observer fails over, the observers in order of priority, and their checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::destination::Transport;
use super::{ProtectionMode, ReplicationConfig, is_host_port, valid_name};

/// Most observers of a configuration.
pub const OBSERVERS_MAX: usize = 4;

fn default_threshold() -> Duration {
    Duration::from_secs(2)
}

fn default_lag_limit() -> Duration {
    Duration::from_secs(30)
}

/// `[replication.fast_start_failover]`: an observer fails over by itself when the primary is
/// lost (docs/fast-start-failover.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FastStartFailoverConfig {
    /// Default: `false`.
    pub enabled: bool,
    /// How long the primary may be unreachable before the observer fails over; also how long
    /// a primary that hears from neither its SYNC target nor the observer goes on
    /// acknowledging commits. Bounds: 500ms..=1h. Default: 2s.
    #[serde(with = "units::serde_human::duration")]
    pub threshold: Duration,
    /// Under Maximum Performance, the most a target may lag (transport and apply) and still
    /// be failed over to. Bounds: 0..=1h. Default: 30s.
    #[serde(with = "units::serde_human::duration")]
    pub lag_limit: Duration,
    /// The members that may be failed over to, in order of preference. Default: every other
    /// member, in the order `members` lists them.
    pub target: Vec<String>,
    /// Whether the observer reinstates an old primary by itself when it comes back. Default:
    /// `true`.
    pub auto_reinstate: bool,
}

impl Default for FastStartFailoverConfig {
    fn default() -> FastStartFailoverConfig {
        FastStartFailoverConfig {
            enabled: false,
            threshold: default_threshold(),
            lag_limit: default_lag_limit(),
            target: Vec::new(),
            auto_reinstate: true,
        }
    }
}

/// `[[replication.observers]]`: an observer process (`redoguard observer`), in order of
/// priority. A primary takes decisions from one at a time (the active one) and hands over to
/// the next, in this order, only once the active one's lease has lapsed and the targets have
/// heard of the new one (docs/fast-start-failover.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserverEntry {
    /// Its name (`redoguard observer --name`). Required, unique.
    pub name: String,
    /// Where it answers the Redis Sentinel protocol (`host:port`), for clients. Required.
    pub sentinel: String,
}

impl ReplicationConfig {
    /// What fast-start failover's decisions run with (`roles::fast_start`).
    pub fn fast_start_settings(&self) -> roles::fast_start::Settings {
        let fast_start = &self.fast_start_failover;
        roles::fast_start::Settings {
            threshold: fast_start.threshold,
            lag_limit: fast_start.lag_limit,
            protection: match self.protection_mode {
                ProtectionMode::MaximumAvailability => {
                    roles::fast_start::Protection::MaximumAvailability
                }
                _ => roles::fast_start::Protection::MaximumPerformance,
            },
            targets: self.failover_targets(),
            observers: self.observers.iter().map(|observer| observer.name.clone()).collect(),
            relays: self.fast_start_relays(),
        }
    }

    /// Per member that may be primary: the fast-start targets its routes reach through a
    /// relay, and that relay (`validate_fast_start` refuses a target behind two).
    fn fast_start_relays(
        &self,
    ) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> {
        let targets = self.failover_targets();
        self.primary_candidates()
            .filter_map(|primary| {
                let tree = self.route_tree(&primary.name)?;
                let behind: std::collections::BTreeMap<String, String> = tree
                    .hops
                    .iter()
                    .filter(|hop| targets.contains(&hop.member) && hop.from != primary.name)
                    .map(|hop| (hop.member.clone(), hop.from.clone()))
                    .collect();
                (!behind.is_empty()).then(|| (primary.name.clone(), behind))
            })
            .collect()
    }

    /// The fast-start failover section and the observers; also what an observer checks of the
    /// file it runs with.
    pub fn validate_fast_start(&self) -> Result<(), (String, String)> {
        let invalid = |field: String, reason: String| Err((field, reason));
        if !valid_name(&self.name) {
            return invalid(
                "replication.name".into(),
                format!("'{}' is not 1..=64 of A-Z a-z 0-9 . _ -", self.name),
            );
        }
        if self.observers.len() > OBSERVERS_MAX {
            return invalid(
                "replication.observers".into(),
                format!("{} observers; at most {OBSERVERS_MAX}", self.observers.len()),
            );
        }
        let mut names = std::collections::BTreeSet::new();
        for (index, observer) in self.observers.iter().enumerate() {
            let field = |name: &str| format!("replication.observers[{index}].{name}");
            if !valid_name(&observer.name)
                || !names.insert(observer.name.as_str())
                || self.member_named(&observer.name).is_some()
            {
                return invalid(
                    field("name"),
                    format!("'{}' is not a valid name, or is used twice", observer.name),
                );
            }
            if !is_host_port(&observer.sentinel) {
                return invalid(
                    field("sentinel"),
                    format!("'{}' is not host:port", observer.sentinel),
                );
            }
        }
        let fast_start = &self.fast_start_failover;
        let field = |name: &str| format!("replication.fast_start_failover.{name}");
        if !(Duration::from_millis(500)..=Duration::from_secs(3600)).contains(&fast_start.threshold)
        {
            return invalid(
                field("threshold"),
                format!("{:?} is outside 500ms..=1h", fast_start.threshold),
            );
        }
        if fast_start.lag_limit > Duration::from_secs(3600) {
            return invalid(field("lag_limit"), format!("{:?} is over 1h", fast_start.lag_limit));
        }
        for target in &fast_start.target {
            if self.member_named(target).is_none() {
                return invalid(field("target"), format!("'{target}' is not a member"));
            }
            if self.is_far_sync(target) {
                return invalid(
                    field("target"),
                    format!(
                        "'{target}' is a far sync: it holds no data files and is never a primary, so never a failover target"
                    ),
                );
            }
        }
        if fast_start.enabled {
            if !self.has_members() {
                return invalid(
                    field("enabled"),
                    "fast-start failover needs the configuration form ([[replication.members]])"
                        .into(),
                );
            }
            if self.observers.is_empty() {
                return invalid(
                    field("enabled"),
                    "fast-start failover needs an observer ([[replication.observers]])".into(),
                );
            }
            if self.protection_mode == ProtectionMode::MaximumProtection {
                return invalid(
                    field("enabled"),
                    "fast-start failover runs under maximum_availability or maximum_performance"
                        .into(),
                );
            }
            // The observer fails over to a target the primary ships to itself, or to one
            // behind exactly one relay that the primary ships to itself: the primary's word
            // for it travels in its heartbeats to the relay, which passes it on, and every
            // failover to it seals the relay and takes its tail first (docs/fast-start-
            // failover.md, "Targets behind a far sync"). Under Maximum Availability the
            // primary's own hop (to the target, or to its relay) is SYNC: what holds every
            // commit the primary acknowledged.
            let maximum_availability = self.protection_mode == ProtectionMode::MaximumAvailability;
            for target in self.failover_targets() {
                let Some(member) = self.member_named(&target) else { continue };
                let mut routed = false;
                for primary in self.primary_candidates() {
                    let Some(tree) = self.route_tree(&primary.name) else { continue };
                    let Some(hop) = tree.hops.iter().find(|hop| hop.member == target) else {
                        continue;
                    };
                    routed = true;
                    // The hop that leaves the primary: the target's own, or its relay's.
                    let first = if hop.from == primary.name {
                        hop
                    } else {
                        let Some(relay) = tree.hops.iter().find(|relay| relay.member == hop.from)
                        else {
                            continue;
                        };
                        if relay.from != primary.name {
                            return invalid(
                                field("target"),
                                format!(
                                    "'{target}' receives redo from '{}', which receives it from '{}', when '{}' is the primary: a fast-start target is shipped to by the primary itself or behind one relay only (the tail is taken from the first relay only)",
                                    hop.from, relay.from, primary.name
                                ),
                            );
                        }
                        relay
                    };
                    if maximum_availability && first.transport != Transport::Sync {
                        return invalid(
                            field("target"),
                            format!(
                                "'{target}' is reached through '{}' ({}) when '{}' is the primary: under maximum_availability the primary ships SYNC to every fast-start target, or to its relay",
                                first.member,
                                super::transport_name(first.transport, first.affirm),
                                primary.name
                            ),
                        );
                    }
                }
                if !routed && maximum_availability && member.transport != Transport::Sync {
                    return invalid(
                        field("target"),
                        format!(
                            "'{target}' is an ASYNC member: under maximum_availability every fast-start target is shipped to SYNC (name the SYNC members in target)"
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}
