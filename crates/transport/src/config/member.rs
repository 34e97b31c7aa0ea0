//! The configuration form's members: a member's addresses, the destination attributes a
//! primary ships to it with, and the checks of `[[replication.members]]`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::destination::{
    BufferSize, DestinationConfig, DestinationState, Transport, default_compression_level,
    default_max_connections, default_max_send, default_net_timeout, default_reopen, default_true,
};
use super::routes::{MemberKind, RouteConfig};
use super::standby::delay_minutes;
use super::{ReplicationConfig, is_host_port, valid_name};
use crate::compression::{Compression, CompressionScope};

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
    /// As a destination: see `DestinationConfig::tcp_congestion`. Default: the host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_congestion: Option<String>,
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
    /// `database` (primary or standby by its role) or `far_sync` (standby logs and archive
    /// only; never a primary, never a failover target). Default: `database`.
    #[serde(default, skip_serializing_if = "MemberKind::is_default")]
    pub kind: MemberKind,
    /// Its redo routes: under which primary it ships or forwards to which member
    /// (`routes.rs`). Default: none (a primary ships to every other member).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
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
            tcp_congestion: self.tcp_congestion.clone(),
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

impl ReplicationConfig {
    pub(super) fn validate_members(&self) -> Result<(), (String, String)> {
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
        self.validate_routes()?;
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
