//! `[replication.standby]`: a standby's listener, its receive buffer and its apply delay (a
//! number of minutes or a duration).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::destination::BufferSize;

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
