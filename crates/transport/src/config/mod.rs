//! The `[replication]` section: the database's role, the protection mode, a primary's
//! destinations and a standby's listener.

use std::time::Duration;

use serde::{Deserialize, Serialize};

mod destination;
mod fast_start;
mod member;
mod routes;
mod standby;

pub use destination::{
    BufferSize, DestinationConfig, DestinationState, MAX_CONNECTIONS, Transport,
    check_congestion_name,
};
pub use fast_start::{FastStartFailoverConfig, OBSERVERS_MAX, ObserverEntry};
pub use member::{MEMBERS_MAX, MemberConfig};
pub use routes::{Alternate, Hop, MemberKind, RouteConfig, RouteTree, route_tree, transport_name};
pub use standby::{
    DELAY_MAX, SILENCE_TIMEOUT_DEFAULT, SILENCE_TIMEOUT_MAX, SILENCE_TIMEOUT_MIN, StandbyConfig,
};

/// A database's role in the configuration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoleConfig {
    #[default]
    Primary,
    Standby,
}

/// How much data a configuration may lose, against what commits pay (DESIGN.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtectionMode {
    /// No commit waits for a standby beyond its destinations' own SYNC attribute, and a SYNC
    /// destination that does not answer within `net_timeout` is dropped until it catches up.
    #[default]
    MaximumPerformance,
    /// Commits wait for the synchronized SYNC standbys; if none answers within `net_timeout`,
    /// the primary goes on unsynchronized, and returns to synchronized by itself once a SYNC
    /// standby has caught up. Zero data loss while synchronized.
    MaximumAvailability,
    /// A commit is never acknowledged unless a SYNC AFFIRM standby has its redo durably; with
    /// none reachable, commits wait.
    MaximumProtection,
}

/// The `[replication]` section.
///
/// Two forms. The *configuration* form names every member (`[[replication.members]]`) and
/// which one this file runs (`member`); the database's role is its own durable state, and a
/// primary ships to every other member: switchover, failover and reinstate move the role
/// between members without editing a file. The *single-role* form (`role`, `destinations`,
/// `[replication.standby]`) fixes a primary and its destinations, or a standby, and supports
/// no role change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicationConfig {
    /// The role a database takes when its data directory is created: `primary` or
    /// `standby`. Afterwards the role is the database's own state (role changes keep it).
    /// Default: `primary`.
    pub role: RoleConfig,
    /// Default: `maximum_performance`.
    pub protection_mode: ProtectionMode,
    /// Which synchronized SYNC destinations a commit waits for: `"all"` of them, or `"any k"`
    /// (1..=9; at most the SYNC destinations configured). Default: `"all"`.
    pub sync_quorum: crate::quorum::SyncQuorum,
    /// Once the other SYNC destinations a write waits for have acknowledged it, a slower one
    /// is dropped from the synchronized set after this much more (it catches up and
    /// synchronizes again by itself); `0s`: only `net_timeout` drops it. Bounds: 0..=1h.
    /// Default: 0s.
    #[serde(with = "units::serde_human::duration")]
    pub sync_latency: Duration,
    /// How long the target of a switchover waits to have received and applied everything the
    /// old primary wrote before it refuses (and the old primary takes its role back). Through
    /// a far sync or a cascading standby that is the relay's forwarding too. Bounds: 1s..=1h.
    /// Default: 60s.
    #[serde(with = "units::serde_human::duration")]
    pub switchover_wait: Duration,
    /// How long a failover (not `--immediate`) waits for the target's apply to reach what it
    /// received before it refuses; the target then receives again, a standby as before.
    /// `0s`: refuse unless apply has reached it when the branch is read. Bounds: 0..=60s
    /// (with a relay's tail, a failover then answers within the broker's 120 s per step).
    /// Default: 60s.
    #[serde(with = "units::serde_human::duration")]
    pub failover_apply_wait: Duration,
    /// Which of `members` this file runs. Required with `members`.
    pub member: Option<String>,
    /// Every database of the configuration, this one included. Bounds: 0, or 2..=10.
    pub members: Vec<MemberConfig>,
    /// Where this member listens for redo, if not its `members` entry's `redo` address (to
    /// bind `0.0.0.0:PORT`, say). Default: none.
    pub redo_listen: Option<String>,
    /// Single-role form: a primary's standbys. Bounds: 0..=9. Default: none.
    pub destinations: Vec<DestinationConfig>,
    /// Single-role form: a standby's listener; in the configuration form only
    /// `receive_buffer` and `silence_timeout` are used.
    pub standby: StandbyConfig,
    /// The configuration's name: the master name Redis Sentinel clients ask the observers
    /// for. Default: `redoguard`.
    pub name: String,
    /// Fast-start failover (configuration form only).
    pub fast_start_failover: FastStartFailoverConfig,
    /// The observers, in order of priority.
    pub observers: Vec<ObserverEntry>,
    /// What a peer that has not proved who it is may hold on this member's redo listener.
    pub listener: crate::admission::ListenerLimits,
}

impl Default for ReplicationConfig {
    fn default() -> ReplicationConfig {
        ReplicationConfig {
            role: RoleConfig::default(),
            protection_mode: ProtectionMode::default(),
            sync_quorum: crate::quorum::SyncQuorum::All,
            sync_latency: Duration::ZERO,
            switchover_wait: Duration::from_secs(60),
            failover_apply_wait: Duration::from_secs(60),
            member: None,
            members: Vec::new(),
            redo_listen: None,
            destinations: Vec::new(),
            standby: StandbyConfig::default(),
            name: "redoguard".to_string(),
            fast_start_failover: FastStartFailoverConfig::default(),
            observers: Vec::new(),
            listener: crate::admission::ListenerLimits::default(),
        }
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte))
}

fn is_host_port(address: &str) -> bool {
    address.parse::<std::net::SocketAddr>().is_ok()
        || address
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
}

impl ReplicationConfig {
    /// Whether this is the configuration form (members named, roles can change).
    pub fn has_members(&self) -> bool {
        !self.members.is_empty()
    }

    /// This file's member, in the configuration form.
    pub fn this_member(&self) -> Option<&MemberConfig> {
        let name = self.member.as_deref()?;
        self.members.iter().find(|member| member.name == name)
    }

    /// The member called `name`.
    pub fn member_named(&self, name: &str) -> Option<&MemberConfig> {
        self.members.iter().find(|member| member.name == name)
    }

    /// The member whose redo listener is at `address`, if any.
    pub fn member_at_redo(&self, address: &str) -> Option<&MemberConfig> {
        self.members.iter().find(|member| member.redo == address)
    }

    /// Where this member ships as a primary: in the configuration form the members its
    /// routes name (every other member, without routes: `routes.rs`); otherwise the
    /// single-role form's destinations.
    pub fn destinations(&self) -> Vec<DestinationConfig> {
        if self.has_members() {
            let Some(this) = self.member.as_deref() else { return Vec::new() };
            self.routed_destinations(this)
        } else {
            self.destinations.clone()
        }
    }

    /// The standby side of this file: `[replication.standby]`, with this member's `delay` in
    /// the configuration form.
    pub fn standby_config(&self) -> StandbyConfig {
        let mut standby = self.standby.clone();
        if let Some(member) = self.this_member() {
            standby.delay = member.delay;
        }
        standby
    }

    /// Where this database listens for redo: always in the configuration form (a primary
    /// answers its peers there too), only as a standby in the single-role form.
    pub fn redo_listen(&self) -> Option<String> {
        if self.has_members() {
            self.redo_listen
                .clone()
                .or_else(|| self.this_member().map(|member| member.redo.clone()))
        } else {
            (self.role == RoleConfig::Standby).then(|| self.standby.listen.clone())
        }
    }

    /// The configuration field `redo_listen` comes from, for an error that names it.
    pub fn redo_listen_field(&self) -> String {
        if !self.has_members() {
            "replication.standby.listen".into()
        } else if self.redo_listen.is_some() {
            "replication.redo_listen".into()
        } else {
            let name = self.this_member().map_or("?", |member| member.name.as_str());
            format!("replication.members['{name}'].redo")
        }
    }

    /// The members fast-start failover may fail over to, in order of preference (never a far
    /// sync).
    pub fn failover_targets(&self) -> Vec<String> {
        let targets = &self.fast_start_failover.target;
        if targets.is_empty() {
            self.primary_candidates().map(|member| member.name.clone()).collect()
        } else {
            targets.clone()
        }
    }

    /// What this primary's commits wait for.
    pub fn protection(&self) -> crate::quorum::Protection {
        crate::quorum::Protection {
            mode: self.protection_mode,
            quorum: self.sync_quorum,
            sync_latency: self.sync_latency,
        }
    }

    /// The SYNC quorum and latency against the destinations.
    fn validate_quorum(&self, destinations: &[DestinationConfig]) -> Result<(), (String, String)> {
        if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&self.switchover_wait) {
            return Err((
                "replication.switchover_wait".into(),
                format!("{:?} is outside 1s..=1h", self.switchover_wait),
            ));
        }
        if self.failover_apply_wait > Duration::from_secs(60) {
            return Err((
                "replication.failover_apply_wait".into(),
                format!(
                    "{:?} is outside 0s..=60s (use failover --immediate to open without waiting for apply)",
                    self.failover_apply_wait
                ),
            ));
        }
        if self.sync_latency > Duration::from_secs(3600) {
            return Err((
                "replication.sync_latency".into(),
                format!("{:?} is over 1h", self.sync_latency),
            ));
        }
        let crate::quorum::SyncQuorum::Any(k) = self.sync_quorum else { return Ok(()) };
        if !(self.role == RoleConfig::Primary || self.has_members()) {
            return Ok(());
        }
        // In the configuration form a member's destinations are the members its routes name
        // (without routes, every other one): the quorum must be reachable from every member
        // that may become primary.
        let count = |destinations: &[DestinationConfig], affirm: bool| {
            destinations.iter().filter(|d| d.is_enabled_sync() && (d.affirm || !affirm)).count()
        };
        let worst = |affirm: bool| {
            if self.has_members() {
                self.primary_candidates()
                    .map(|member| count(&self.routed_destinations(&member.name), affirm))
                    .min()
                    .unwrap_or(0)
            } else {
                count(destinations, affirm)
            }
        };
        let sync = worst(false);
        if k > sync {
            return Err((
                "replication.sync_quorum".into(),
                format!(
                    "\"any {k}\" needs {k} SYNC destinations; a primary here would have {sync}"
                ),
            ));
        }
        if self.protection_mode == ProtectionMode::MaximumProtection && k > worst(true) {
            return Err((
                "replication.sync_quorum".into(),
                format!(
                    "maximum_protection with \"any {k}\" needs {k} SYNC AFFIRM destinations; a primary here would have {}",
                    worst(true)
                ),
            ));
        }
        Ok(())
    }

    /// Checks every bound; the error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let invalid = |field: String, reason: String| Err((field, reason));
        if self.has_members() {
            self.validate_members()?;
        }
        self.validate_fast_start()?;
        self.listener.validate()?;
        if self.destinations.len() > 9 {
            return invalid(
                "replication.destinations".into(),
                format!("{} destinations; at most 9", self.destinations.len()),
            );
        }
        let mut names = std::collections::BTreeSet::new();
        for (index, destination) in self.destinations.iter().enumerate() {
            let field = |name: &str| format!("replication.destinations[{index}].{name}");
            if destination.name.is_empty() || !names.insert(&destination.name) {
                return invalid(
                    field("name"),
                    format!("'{}' is empty or used twice", destination.name),
                );
            }
            destination.validate(&field)?;
        }
        let destinations = self.destinations();
        self.validate_quorum(&destinations)?;
        // (A far sync is never a primary: what it would ship as one is nothing to check.)
        let may_be_primary = !self.member.as_deref().is_some_and(|name| self.is_far_sync(name));
        if self.protection_mode != ProtectionMode::MaximumPerformance
            && (self.role == RoleConfig::Primary || self.has_members())
            && may_be_primary
        {
            let sync_affirm = destinations
                .iter()
                .any(|destination| destination.is_enabled_sync() && destination.affirm);
            let sync = destinations.iter().any(DestinationConfig::is_enabled_sync);
            let whose =
                if self.has_members() { "another member" } else { "at least one destination" };
            if self.protection_mode == ProtectionMode::MaximumProtection && !sync_affirm {
                return invalid(
                    "replication.protection_mode".into(),
                    format!(
                        "maximum_protection needs {whose} with transport = \"sync\", affirm = true and state = \"enable\""
                    ),
                );
            }
            if self.protection_mode == ProtectionMode::MaximumAvailability && !sync {
                return invalid(
                    "replication.protection_mode".into(),
                    format!(
                        "maximum_availability needs {whose} with transport = \"sync\" and state = \"enable\""
                    ),
                );
            }
        }
        for (field, delay) in
            std::iter::once(("replication.standby.delay".to_string(), self.standby.delay)).chain(
                self.members.iter().enumerate().map(|(index, member)| {
                    (format!("replication.members[{index}].delay"), member.delay)
                }),
            )
        {
            if delay > DELAY_MAX {
                return invalid(field, format!("{delay:?} is over 7 days"));
            }
        }
        let silence_timeout = self.standby.silence_timeout;
        if !(SILENCE_TIMEOUT_MIN..=SILENCE_TIMEOUT_MAX).contains(&silence_timeout) {
            return invalid(
                "replication.standby.silence_timeout".into(),
                format!(
                    "{silence_timeout:?} is outside 2s..=10min (the primary sends a heartbeat every 500 ms: a few seconds notices a cut link in time and forgives a few lost ones)"
                ),
            );
        }
        if self.role == RoleConfig::Standby && !self.destinations.is_empty() {
            return invalid(
                "replication.destinations".into(),
                "a standby has no destinations (to forward redo, a cascading standby has redo routes: give the configuration form, [[replication.members]] with routes)".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod silence_timeout_tests {
    use super::*;

    #[test]
    fn the_silence_timeout_defaults_to_five_seconds_and_is_refused_outside_its_bounds() {
        let config: ReplicationConfig = toml::from_str("").unwrap();
        assert_eq!(config.standby.silence_timeout, Duration::from_secs(5));
        assert_eq!(config.standby_config().silence_timeout, Duration::from_secs(5));
        config.validate().unwrap();
        let config: ReplicationConfig =
            toml::from_str("[standby]\nsilence_timeout = \"3s\"").unwrap();
        assert_eq!(config.standby_config().silence_timeout, Duration::from_secs(3));
        config.validate().unwrap();
        for bad in ["\"0s\"", "\"1500ms\"", "\"11min\"", "\"100d\""] {
            let config: ReplicationConfig =
                toml::from_str(&format!("[standby]\nsilence_timeout = {bad}")).unwrap();
            let (field, reason) = config.validate().unwrap_err();
            assert_eq!(field, "replication.standby.silence_timeout", "{reason}");
            assert!(reason.contains("outside 2s..=10min"), "{reason}");
        }
    }
}

#[cfg(test)]
mod switchover_wait_tests {
    use super::*;

    #[test]
    fn the_switchover_wait_defaults_to_a_minute_and_is_refused_outside_its_bounds() {
        let config: ReplicationConfig = toml::from_str("").unwrap();
        assert_eq!(config.switchover_wait, Duration::from_secs(60));
        config.validate().unwrap();
        let config: ReplicationConfig = toml::from_str("switchover_wait = \"5s\"").unwrap();
        assert_eq!(config.switchover_wait, Duration::from_secs(5));
        config.validate().unwrap();
        for bad in ["\"500ms\"", "\"2h\""] {
            let config: ReplicationConfig =
                toml::from_str(&format!("switchover_wait = {bad}")).unwrap();
            let (field, reason) = config.validate().unwrap_err();
            assert_eq!(field, "replication.switchover_wait", "{reason}");
            assert!(reason.contains("outside 1s..=1h"), "{reason}");
        }
    }

    #[test]
    fn the_failover_apply_wait_defaults_to_a_minute_and_is_refused_past_it() {
        let config: ReplicationConfig = toml::from_str("").unwrap();
        assert_eq!(config.failover_apply_wait, Duration::from_secs(60));
        let config: ReplicationConfig = toml::from_str("failover_apply_wait = \"0s\"").unwrap();
        assert_eq!(config.failover_apply_wait, Duration::ZERO);
        config.validate().unwrap();
        let config: ReplicationConfig = toml::from_str("failover_apply_wait = \"61s\"").unwrap();
        let (field, reason) = config.validate().unwrap_err();
        assert_eq!(field, "replication.failover_apply_wait", "{reason}");
        assert!(reason.contains("outside 0s..=60s"), "{reason}");
    }
}
