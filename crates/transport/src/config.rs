//! The `[replication]` section: the database's role, the protection mode, a primary's
//! destinations and a standby's listener.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::compression::{
    COMPRESSION_LEVEL_DEFAULT, COMPRESSION_LEVELS, Compression, CompressionScope,
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

/// How a destination's socket send buffer is sized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BufferSize {
    /// The kernel's default (and autotuning).
    #[default]
    Default,
    /// 3 × bandwidth × RTT, the RTT measured at connection (needs `bandwidth`).
    Auto,
    Bytes(u64),
}

impl Serialize for BufferSize {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            BufferSize::Default => serializer.serialize_str("default"),
            BufferSize::Auto => serializer.serialize_str("auto"),
            BufferSize::Bytes(bytes) => serializer.serialize_u64(*bytes),
        }
    }
}

impl<'de> Deserialize<'de> for BufferSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<BufferSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(bytes) => Ok(BufferSize::Bytes(bytes)),
            Raw::Text(text) => match text.as_str() {
                "default" => Ok(BufferSize::Default),
                "auto" => Ok(BufferSize::Auto),
                size => {
                    units::parse_size(size).map(BufferSize::Bytes).map_err(serde::de::Error::custom)
                }
            },
        }
    }
}

fn default_net_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_reopen() -> Duration {
    Duration::from_secs(5)
}

fn default_max_send() -> u64 {
    1 << 20
}

fn default_true() -> bool {
    true
}

fn default_compression_level() -> i32 {
    COMPRESSION_LEVEL_DEFAULT
}

fn default_max_connections() -> u32 {
    1
}

/// Bounds of `max_connections` (the reference's MAX_CONNECTIONS).
pub const MAX_CONNECTIONS: std::ops::RangeInclusive<u32> = 1..=20;

/// One standby a primary ships redo to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationConfig {
    /// A name for logs and status. Required, unique.
    pub name: String,
    /// The standby's redo listener, `host:port`. Required.
    pub address: String,
    /// `sync`: each log write is sent in parallel with the local write and its acknowledgement
    /// awaited; `async`: streamed, commits never wait. Default: `async`.
    #[serde(default)]
    pub transport: Transport,
    /// With SYNC: the standby acknowledges once the redo is durable (`true`, AFFIRM) or once
    /// received (`false`, NOAFFIRM). Default: `true`.
    #[serde(default = "default_true")]
    pub affirm: bool,
    /// A standby that does not answer within this is dropped from the synchronized set (and
    /// the connection is retried). Bounds: 100ms..=1h. Default: 30s.
    #[serde(default = "default_net_timeout", with = "units::serde_human::duration")]
    pub net_timeout: Duration,
    /// Wait before reconnecting after a failure. Bounds: 10ms..=1h. Default: 5s.
    #[serde(default = "default_reopen", with = "units::serde_human::duration")]
    pub reopen: Duration,
    /// Consecutive failures after which the destination is given up (until the primary
    /// restarts); 0 = never. Bounds: 0..=1000. Default: 0.
    #[serde(default)]
    pub max_failure: u32,
    /// Socket send buffer: `default`, `auto` (3 × bandwidth × RTT) or a size. Default:
    /// `default`.
    #[serde(default)]
    pub send_buffer: BufferSize,
    /// The link's bandwidth, for `send_buffer = "auto"` (e.g. `"1gbit"`).
    #[serde(default)]
    pub bandwidth: Option<String>,
    /// Largest piece of redo sent in one message. Bounds: 64 KiB..=64 MiB. Default: 1 MiB.
    #[serde(default = "default_max_send", with = "units::serde_human::size")]
    pub max_send: u64,
    /// Redo compression on the wire: `none`, `lz4` or `zstd`. The standby decompresses
    /// before writing, so its logs stay byte-identical. Used only with a standby of protocol
    /// version 3 or later. Default: `none`.
    #[serde(default)]
    pub compression: Compression,
    /// zstd's level (`lz4` has none). Bounds: 1..=19. Default: 1.
    #[serde(default = "default_compression_level")]
    pub compression_level: i32,
    /// What is compressed: `gap` (catch-up read from the log files and archived logs shipped
    /// whole) or `all` (also the live ASYNC stream). SYNC writes are never compressed.
    /// Default: `gap`.
    #[serde(default)]
    pub compression_for: CompressionScope,
    /// Connections that ship whole archived logs (gap resolution, and catch-up of logs the
    /// primary has closed) in pieces, in parallel, while live redo keeps its own connection.
    /// 1: those logs go on the control connection, between live writes. Above 1, with a
    /// standby of protocol version 4 or later, that many *archive* connections are opened,
    /// each with `send_buffer`; a standby admits at most 8 connections of one peer, so at
    /// most 6 of them are opened (control and SYNC hold the other two). Bounds: 1..=20.
    /// Default: 1.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// `enable` or `defer` (nothing is shipped until it is enabled again; the gap is then
    /// resolved by itself). Default: `enable`.
    #[serde(default)]
    pub state: DestinationState,
}

/// A destination's transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    Sync,
    #[default]
    Async,
}

/// Whether a primary ships to a destination (Data Guard's `LOG_ARCHIVE_DEST_STATE_n`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DestinationState {
    /// Shipped to.
    #[default]
    Enable,
    /// Not shipped to: the redo it misses meanwhile is shipped as a gap once it is enabled
    /// again. It counts for no SYNC quorum and no protection mode while deferred.
    Defer,
}

impl DestinationState {
    pub fn name(self) -> &'static str {
        match self {
            DestinationState::Enable => "enable",
            DestinationState::Defer => "defer",
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:6392".to_string()
}

/// A standby's side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandbyConfig {
    /// Where the standby listens for its primary's redo. Default: `127.0.0.1:6392`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The primary, as clients reach it (`host:port` of its Redis protocol): shown in status
    /// and in INFO replication (`master_host`, `master_port`). Default: none.
    #[serde(default)]
    pub primary: Option<String>,
    /// Socket receive buffer of the listener: `default` or a size (large windows need it set
    /// before connections are accepted). Default: `default`.
    #[serde(default)]
    pub receive_buffer: BufferSize,
    /// Delayed apply (Data Guard's DELAY): redo is received and written at once but applied
    /// only once it is this old in the primary's time. A number is minutes, as in Data Guard;
    /// a string a duration (`"5min"`, `"30s"`). Bounds: 0..=7 days. Default: 0 (real-time
    /// apply).
    #[serde(default, with = "delay_minutes")]
    pub delay: Duration,
}

impl Default for StandbyConfig {
    fn default() -> StandbyConfig {
        StandbyConfig {
            listen: default_listen(),
            primary: None,
            receive_buffer: BufferSize::Default,
            delay: Duration::ZERO,
        }
    }
}

/// The longest apply delay.
pub const DELAY_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// `delay`: a number of minutes (Data Guard's unit) or a duration string.
mod delay_minutes {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(delay: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        units::serde_human::duration::serialize(delay, serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Minutes(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Minutes(minutes) => Ok(Duration::from_secs(minutes.saturating_mul(60))),
            Raw::Text(text) => units::parse_duration(&text).map_err(serde::de::Error::custom),
        }
    }
}

/// One member of a configuration: a database that may be primary or standby, with the
/// addresses others reach it at and the transport attributes a primary ships to it with
/// when it is a standby (Data Guard's VALID_FOR: the same file serves every role).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberConfig {
    /// The member's name: in status, in logs, in `redoguard switchover --to NAME`. Required,
    /// unique, 1..=64 of `A-Z a-z 0-9 . _ -`.
    pub name: String,
    /// Where clients reach it (`host:port` of its Redis protocol). Required.
    pub resp: String,
    /// Where its admin API is (`host:port`). Required.
    pub admin: String,
    /// Where it listens for redo (`host:port`): a primary ships here, members ask each other
    /// who is primary here. Required.
    pub redo: String,
    /// As a destination: `sync` or `async`. Default: `async`.
    #[serde(default)]
    pub transport: Transport,
    /// As a SYNC destination: AFFIRM (`true`) or NOAFFIRM. Default: `true`.
    #[serde(default = "default_true")]
    pub affirm: bool,
    /// As a destination: see `DestinationConfig::net_timeout`. Default: 30s.
    #[serde(default = "default_net_timeout", with = "units::serde_human::duration")]
    pub net_timeout: Duration,
    /// Default: 5s.
    #[serde(default = "default_reopen", with = "units::serde_human::duration")]
    pub reopen: Duration,
    /// Default: 0 (never give up).
    #[serde(default)]
    pub max_failure: u32,
    /// Default: `default`.
    #[serde(default)]
    pub send_buffer: BufferSize,
    #[serde(default)]
    pub bandwidth: Option<String>,
    /// Default: 1 MiB.
    #[serde(default = "default_max_send", with = "units::serde_human::size")]
    pub max_send: u64,
    /// As a standby: its apply delay (see `StandbyConfig::delay`). Default: 0.
    #[serde(default, with = "delay_minutes")]
    pub delay: Duration,
    /// As a destination: see `DestinationConfig::compression`. Default: `none`.
    #[serde(default)]
    pub compression: Compression,
    /// Default: 1.
    #[serde(default = "default_compression_level")]
    pub compression_level: i32,
    /// Default: `gap`.
    #[serde(default)]
    pub compression_for: CompressionScope,
    /// As a destination: see `DestinationConfig::max_connections`. Default: 1.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// As a destination: see `DestinationConfig::state`. Default: `enable`.
    #[serde(default)]
    pub state: DestinationState,
}

impl MemberConfig {
    /// How a primary ships to this member.
    pub fn destination(&self) -> DestinationConfig {
        DestinationConfig {
            name: self.name.clone(),
            address: self.redo.clone(),
            transport: self.transport,
            affirm: self.affirm,
            net_timeout: self.net_timeout,
            reopen: self.reopen,
            max_failure: self.max_failure,
            send_buffer: self.send_buffer,
            bandwidth: self.bandwidth.clone(),
            max_send: self.max_send,
            compression: self.compression,
            compression_level: self.compression_level,
            compression_for: self.compression_for,
            max_connections: self.max_connections,
            state: self.state,
        }
    }
}

/// Most members of a configuration: a primary and nine standbys (LOG_ARCHIVE_DEST_2..10).
pub const MEMBERS_MAX: usize = 10;
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
    /// `receive_buffer` is used.
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

    /// Where a primary ships: every other member, or the single-role form's destinations.
    pub fn destinations(&self) -> Vec<DestinationConfig> {
        if self.has_members() {
            self.members
                .iter()
                .filter(|member| Some(member.name.as_str()) != self.member.as_deref())
                .map(MemberConfig::destination)
                .collect()
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

    /// The members fast-start failover may fail over to, in order of preference.
    pub fn failover_targets(&self) -> Vec<String> {
        let targets = &self.fast_start_failover.target;
        if targets.is_empty() {
            self.members.iter().map(|member| member.name.clone()).collect()
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
        // In the configuration form a member's destinations are the other members: the
        // quorum must be reachable from every member that may become primary.
        let count = |destinations: &[DestinationConfig], affirm: bool| {
            destinations.iter().filter(|d| d.is_enabled_sync() && (d.affirm || !affirm)).count()
        };
        let worst = |affirm: bool| {
            if self.has_members() {
                self.members
                    .iter()
                    .map(|member| {
                        let others: Vec<DestinationConfig> = self
                            .members
                            .iter()
                            .filter(|other| other.name != member.name)
                            .map(MemberConfig::destination)
                            .collect();
                        count(&others, affirm)
                    })
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
        if self.protection_mode != ProtectionMode::MaximumPerformance
            && (self.role == RoleConfig::Primary || self.has_members())
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
        if self.role == RoleConfig::Standby && !self.destinations.is_empty() {
            return invalid(
                "replication.destinations".into(),
                "a standby has no destinations (cascading is not supported)".into(),
            );
        }
        Ok(())
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
            // Under Maximum Availability the observer fails over only to a target the primary
            // ships to synchronously: one that holds every commit the primary acknowledged.
            if self.protection_mode == ProtectionMode::MaximumAvailability
                && let Some(target) = self.failover_targets().into_iter().find(|target| {
                    self.member_named(target)
                        .is_some_and(|member| member.transport != Transport::Sync)
                })
            {
                return invalid(
                    field("target"),
                    format!(
                        "'{target}' is an ASYNC member: under maximum_availability every fast-start target is shipped to SYNC (name the SYNC members in target)"
                    ),
                );
            }
        }
        Ok(())
    }

    fn validate_members(&self) -> Result<(), (String, String)> {
        let invalid = |field: String, reason: String| Err((field, reason));
        if !self.destinations.is_empty() {
            return invalid(
                "replication.destinations".into(),
                "give either members (a configuration whose roles can change) or destinations, not both".into(),
            );
        }
        if !(2..=MEMBERS_MAX).contains(&self.members.len()) {
            return invalid(
                "replication.members".into(),
                format!("{} members; a configuration has 2..={MEMBERS_MAX}", self.members.len()),
            );
        }
        let mut names = std::collections::BTreeSet::new();
        let mut addresses = std::collections::BTreeSet::new();
        for (index, member) in self.members.iter().enumerate() {
            let field = |name: &str| format!("replication.members[{index}].{name}");
            if !valid_name(&member.name) {
                return invalid(
                    field("name"),
                    format!("'{}' is not 1..=64 of A-Z a-z 0-9 . _ -", member.name),
                );
            }
            if !names.insert(member.name.as_str()) {
                return invalid(field("name"), format!("'{}' is used twice", member.name));
            }
            for (key, address) in
                [("resp", &member.resp), ("admin", &member.admin), ("redo", &member.redo)]
            {
                if !is_host_port(address) {
                    return invalid(field(key), format!("'{address}' is not host:port"));
                }
                if !addresses.insert(address.as_str()) {
                    return invalid(
                        field(key),
                        format!("'{address}' is used twice in the configuration"),
                    );
                }
            }
            member.destination().validate(&field)?;
        }
        match &self.member {
            None => invalid(
                "replication.member".into(),
                "name which of the members this file runs (member = \"NAME\")".into(),
            ),
            Some(name) if self.this_member().is_none() => invalid(
                "replication.member".into(),
                format!(
                    "'{name}' is not one of the members ({})",
                    names.into_iter().collect::<Vec<_>>().join(", ")
                ),
            ),
            Some(_) => {
                if let Some(listen) = &self.redo_listen
                    && listen.parse::<std::net::SocketAddr>().is_err()
                {
                    return invalid(
                        "replication.redo_listen".into(),
                        format!("'{listen}' is not ip:port"),
                    );
                }
                Ok(())
            }
        }
    }
}

impl DestinationConfig {
    /// Whether it is a SYNC destination that is shipped to (not deferred).
    pub fn is_enabled_sync(&self) -> bool {
        self.transport == Transport::Sync && self.state == DestinationState::Enable
    }

    /// Checks the bounds of a destination's attributes; `field` names one of them.
    pub fn validate(&self, field: &dyn Fn(&str) -> String) -> Result<(), (String, String)> {
        let invalid = |field: String, reason: String| Err((field, reason));
        if !is_host_port(&self.address) {
            return invalid(field("address"), format!("'{}' is not host:port", self.address));
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(3600)).contains(&self.net_timeout) {
            return invalid(
                field("net_timeout"),
                format!("{:?} is outside 100ms..=1h", self.net_timeout),
            );
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&self.reopen) {
            return invalid(field("reopen"), format!("{:?} is outside 10ms..=1h", self.reopen));
        }
        if self.max_failure > 1000 {
            return invalid(field("max_failure"), format!("{} is over 1000", self.max_failure));
        }
        if !(64 << 10..=64 << 20).contains(&self.max_send) {
            return invalid(
                field("max_send"),
                format!("{} is outside 64 KiB..=64 MiB", self.max_send),
            );
        }
        if !MAX_CONNECTIONS.contains(&self.max_connections) {
            return invalid(
                field("max_connections"),
                format!(
                    "{} is outside {}..={}",
                    self.max_connections,
                    MAX_CONNECTIONS.start(),
                    MAX_CONNECTIONS.end()
                ),
            );
        }
        if !COMPRESSION_LEVELS.contains(&self.compression_level) {
            return invalid(
                field("compression_level"),
                format!(
                    "{} is outside {}..={}",
                    self.compression_level,
                    COMPRESSION_LEVELS.start(),
                    COMPRESSION_LEVELS.end()
                ),
            );
        }
        if let Some(bandwidth) = &self.bandwidth
            && let Err(error) = units::parse_rate(bandwidth)
        {
            return invalid(field("bandwidth"), error);
        }
        if self.send_buffer == BufferSize::Auto && self.bandwidth.is_none() {
            return invalid(
                field("send_buffer"),
                "\"auto\" needs the link's bandwidth (bandwidth = \"1gbit\", say)".into(),
            );
        }
        Ok(())
    }
}
