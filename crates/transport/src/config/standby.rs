//! `[replication.standby]`: a standby's listener, its receive buffer, how long a redo source may
//! be silent, and its apply delay (a number of minutes or a duration).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::destination::BufferSize;

fn default_listen() -> String {
    "127.0.0.1:6392".to_string()
}

fn default_silence_timeout() -> Duration {
    SILENCE_TIMEOUT_DEFAULT
}

/// Ten of the primary's heartbeats (one at least every 500 ms on the control connection, also
/// from a forwarder): a few lost in a row, or a TCP retransmission or two on a lossy link, stay
/// well within it, while a cut link shows as not connected within seconds.
pub const SILENCE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// Bounds of `silence_timeout`: at least four heartbeats; at most a few minutes (beyond that,
/// TCP keepalive of the listener ends a dead connection first).
pub const SILENCE_TIMEOUT_MIN: Duration = Duration::from_secs(2);
pub const SILENCE_TIMEOUT_MAX: Duration = Duration::from_secs(600);

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
    /// A connection whose redo source (the primary, or the member forwarding its redo) has
    /// sent nothing on any of its connections for this long is ended, and the source no longer
    /// counts as connected: a cut link (no FIN, no RST) is noticed within it, not after TCP's
    /// retries. Bounds: 2s..=10min. Default: 5s.
    #[serde(default = "default_silence_timeout", with = "units::serde_human::duration")]
    pub silence_timeout: Duration,
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
            silence_timeout: SILENCE_TIMEOUT_DEFAULT,
            delay: Duration::ZERO,
        }
    }
}

/// The longest apply delay.
pub const DELAY_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// `delay`: a number of minutes (Data Guard's unit) or a duration string.
pub(super) mod delay_minutes {
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
