//! What the primary says of each destination: its phase and its status (`/status`, `show
//! configuration`, the web page).

use std::sync::atomic::Ordering;

use redo::{LogSeq, RedoAddr, Scn};
use serde::{Deserialize, Serialize};

use super::{Destination, Inner};
use crate::compression::{Compression, DestinationCompression};
use crate::config::Transport;

/// Where a destination is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    Connecting,
    /// Connected, shipping what the standby lacks.
    CatchingUp,
    /// ASYNC and caught up: new redo is streamed as it is written.
    Streaming,
    /// SYNC and caught up: every log write waits for this standby.
    Synchronized,
    /// Not connected; retried after `reopen`.
    Disconnected,
    /// Failed `max_failure` times in a row; not retried until the primary restarts or the
    /// destination is changed (enabled, edited) at run time.
    GaveUp,
    /// `state = "defer"`: nothing is shipped until it is enabled again.
    Deferred,
}

/// A destination for a person or a monitoring system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationStatus {
    pub name: String,
    pub address: String,
    pub transport: String,
    pub affirm: bool,
    /// `enable` or `defer`.
    #[serde(default)]
    pub state: String,
    pub phase: Phase,
    pub last_error: Option<String>,
    pub failures: u32,
    /// The next byte to send.
    pub sent: RedoAddr,
    /// The standby holds everything before this durably.
    pub acknowledged: RedoAddr,
    pub applied_scn: Scn,
    /// Age of the oldest redo the standby lacks that is queued for it or sent and not yet
    /// acknowledged, in seconds of primary time (0 when the standby has everything).
    pub transport_lag_s: f64,
    /// The standby's apply lag, as it last reported it.
    pub apply_lag_s: f64,
    pub rtt_us: Option<u64>,
    pub send_buffer_bytes: Option<u64>,
    /// The TCP congestion control of the control connection, as the kernel says (the
    /// destination's `tcp_congestion`, or the host's default).
    #[serde(default)]
    pub tcp_congestion: Option<String>,
    /// Redo bytes sent (whole writes and pieces, as in the log files).
    pub bytes_sent: u64,
    /// Bytes of frames handed to this destination's connections (control, SYNC, archive):
    /// headers included, payloads as sent (without writes' zero tails, compressed); before
    /// TLS. Against `bytes_sent`, what the link carries for the redo.
    #[serde(default)]
    pub wire_bytes_sent: u64,
    /// Seconds since the standby was last heard from.
    pub last_heard_s: Option<f64>,
    /// Logs being shipped whole (gap resolution), oldest first.
    pub gaps: Vec<LogSeq>,
    /// Redo compression: as configured, whether in use, and its counters.
    #[serde(default)]
    pub compression: Option<DestinationCompression>,
    /// Archive connections open (`max_connections` above 1): whole logs ship over these.
    #[serde(default)]
    pub archive_connections: u32,
}

/// Transport lag samples of a destination: how long each write took from the log writer to
/// the standby's acknowledgement (for benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LagSummary {
    pub samples: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Inner {
    pub(super) fn status_of(&self, destination: &Destination) -> DestinationStatus {
        let config = destination.config();
        let transport_lag_us = destination.transport_lag_us();
        let state = destination.state.lock();
        DestinationStatus {
            name: destination.name.clone(),
            address: config.address.clone(),
            transport: if config.transport == Transport::Sync {
                "SYNC".into()
            } else {
                "ASYNC".into()
            },
            affirm: config.affirm,
            state: config.state.name().to_string(),
            phase: state.phase,
            last_error: state.last_error.clone(),
            failures: state.failures,
            sent: state.sent,
            acknowledged: state.acknowledged,
            applied_scn: state.applied_scn,
            transport_lag_s: transport_lag_us as f64 / 1e6,
            apply_lag_s: state.apply_lag_us as f64 / 1e6,
            rtt_us: state.rtt_us,
            send_buffer_bytes: state.send_buffer_bytes,
            tcp_congestion: state.tcp_congestion.clone(),
            bytes_sent: state.bytes_sent,
            wire_bytes_sent: destination.wire_bytes.load(Ordering::Relaxed),
            last_heard_s: state.last_heard.map(|at| at.elapsed().as_secs_f64()),
            gaps: state.gaps.clone(),
            compression: (config.compression != Compression::None).then(|| {
                DestinationCompression {
                    codec: config.compression.name().to_string(),
                    level: config.compression_level,
                    scope: config.compression_for,
                    active: destination.compression_active.load(Ordering::Relaxed),
                    auto: destination.auto_state.lock().clone(),
                    archive_auto: destination.archive_auto.lock().values().cloned().collect(),
                    counts: destination.compression.snapshot(),
                }
            }),
            archive_connections: destination.archive_connections.load(Ordering::Relaxed),
        }
    }
}
