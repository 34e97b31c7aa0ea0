//! The `[replication]` section: the database's role, the protection mode, a primary's
//! destinations and a standby's listener.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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
}

/// A destination's transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    Sync,
    #[default]
    Async,
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
}

impl Default for StandbyConfig {
    fn default() -> StandbyConfig {
        StandbyConfig {
            listen: default_listen(),
            primary: None,
            receive_buffer: BufferSize::Default,
        }
    }
}

/// The `[replication]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplicationConfig {
    /// `primary` or `standby`. Default: `primary`.
    pub role: RoleConfig,
    /// Default: `maximum_performance`.
    pub protection_mode: ProtectionMode,
    /// A primary's standbys. Bounds: 0..=9 (as LOG_ARCHIVE_DEST_2..10). Default: none.
    pub destinations: Vec<DestinationConfig>,
    /// A standby's listener.
    pub standby: StandbyConfig,
}

impl ReplicationConfig {
    /// Checks every bound; the error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let invalid = |field: String, reason: String| Err((field, reason));
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
            if destination.address.parse::<std::net::SocketAddr>().is_err()
                && !destination.address.contains(':')
            {
                return invalid(
                    field("address"),
                    format!("'{}' is not host:port", destination.address),
                );
            }
            if !(Duration::from_millis(100)..=Duration::from_secs(3600))
                .contains(&destination.net_timeout)
            {
                return invalid(
                    field("net_timeout"),
                    format!("{:?} is outside 100ms..=1h", destination.net_timeout),
                );
            }
            if !(Duration::from_millis(10)..=Duration::from_secs(3600))
                .contains(&destination.reopen)
            {
                return invalid(
                    field("reopen"),
                    format!("{:?} is outside 10ms..=1h", destination.reopen),
                );
            }
            if destination.max_failure > 1000 {
                return invalid(
                    field("max_failure"),
                    format!("{} is over 1000", destination.max_failure),
                );
            }
            if !(64 << 10..=64 << 20).contains(&destination.max_send) {
                return invalid(
                    field("max_send"),
                    format!("{} is outside 64 KiB..=64 MiB", destination.max_send),
                );
            }
            if let Some(bandwidth) = &destination.bandwidth
                && let Err(error) = units::parse_rate(bandwidth)
            {
                return invalid(field("bandwidth"), error);
            }
            if destination.send_buffer == BufferSize::Auto && destination.bandwidth.is_none() {
                return invalid(
                    field("send_buffer"),
                    "\"auto\" needs the link's bandwidth (bandwidth = \"1gbit\", say)".into(),
                );
            }
        }
        if self.protection_mode != ProtectionMode::MaximumPerformance
            && self.role == RoleConfig::Primary
        {
            let sync_affirm = self
                .destinations
                .iter()
                .any(|destination| destination.transport == Transport::Sync && destination.affirm);
            let sync = self
                .destinations
                .iter()
                .any(|destination| destination.transport == Transport::Sync);
            if self.protection_mode == ProtectionMode::MaximumProtection && !sync_affirm {
                return invalid("replication.protection_mode".into(), "maximum_protection needs at least one destination with transport = \"sync\" and affirm = true".into());
            }
            if self.protection_mode == ProtectionMode::MaximumAvailability && !sync {
                return invalid(
                    "replication.protection_mode".into(),
                    "maximum_availability needs at least one destination with transport = \"sync\""
                        .into(),
                );
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
}
