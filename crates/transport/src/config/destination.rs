//! A destination's attributes (Data Guard's LOG_ARCHIVE_DEST_n): transport, AFFIRM, timeouts,
//! send buffer, compression, archive connections and state, with their defaults and bounds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::is_host_port;
use crate::compression::{
    COMPRESSION_LEVEL_DEFAULT, COMPRESSION_LEVELS, Compression, CompressionScope,
};

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

pub(super) fn default_net_timeout() -> Duration {
    Duration::from_secs(30)
}

pub(super) fn default_reopen() -> Duration {
    Duration::from_secs(5)
}

pub(super) fn default_max_send() -> u64 {
    1 << 20
}

pub(super) fn default_true() -> bool {
    true
}

pub(super) fn default_compression_level() -> i32 {
    COMPRESSION_LEVEL_DEFAULT
}

pub(super) fn default_max_connections() -> u32 {
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
    /// The TCP congestion control of the connections that carry redo to it (`TCP_CONGESTION`:
    /// `"cubic"`, `"bbr"`, `"reno"`, any the kernel has). Default: none, the host's
    /// (`net.ipv4.tcp_congestion_control`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_congestion: Option<String>,
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
        if let Some(name) = &self.tcp_congestion
            && let Err(error) = check_congestion_name(name)
        {
            return invalid(field("tcp_congestion"), error);
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

/// A name the kernel could know as a congestion control: 1 to 15 of `a-z`, `0-9`, `_`, `-`
/// (`TCP_CA_NAME_MAX` is 16 with the NUL). Whether this kernel has it is known only when a
/// connection asks for it: the error then lists what it has.
pub fn check_congestion_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if name.is_empty() || name.len() > 15 || !name.chars().all(allowed) {
        return Err(format!(
            "{name:?} is not a congestion control's name (1 to 15 of a-z, 0-9, _ and -, as \
             net.ipv4.tcp_available_congestion_control lists them)"
        ));
    }
    Ok(())
}
