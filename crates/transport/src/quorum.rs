//! Which SYNC standbys a commit waits for: all of them (Data Guard's rule) or any k of them
//! (PostgreSQL's `ANY k`), and how long a slow one may lag the others (`sync_latency`, Data
//! Guard's `DATA_GUARD_SYNC_LATENCY`). docs/sync-transport.md says how the protection modes read
//! with a quorum.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::ProtectionMode;

/// How many synchronized SYNC destinations must acknowledge a log write before its commits
/// may be acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SyncQuorum {
    /// Every synchronized SYNC destination (`"all"`).
    #[default]
    All,
    /// Any `k` of them (`"any k"`, 1..=9).
    Any(usize),
}

impl SyncQuorum {
    /// How many acknowledgements a write sent to `sent` destinations waits for.
    pub fn needed(self, sent: usize) -> usize {
        match self {
            SyncQuorum::All => sent,
            SyncQuorum::Any(k) => k.min(sent),
        }
    }

    /// How many SYNC AFFIRM standbys must hold a write under Maximum Protection.
    pub fn protected_by(self) -> usize {
        match self {
            SyncQuorum::All => 1,
            SyncQuorum::Any(k) => k,
        }
    }
}

impl fmt::Display for SyncQuorum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncQuorum::All => f.write_str("all"),
            SyncQuorum::Any(k) => write!(f, "any {k}"),
        }
    }
}

impl std::str::FromStr for SyncQuorum {
    type Err = String;

    fn from_str(text: &str) -> Result<SyncQuorum, String> {
        let words: Vec<String> = text.split_whitespace().map(str::to_ascii_lowercase).collect();
        match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            ["all"] => Ok(SyncQuorum::All),
            ["any", k] => match k.parse::<usize>() {
                Ok(k) if (1..=9).contains(&k) => Ok(SyncQuorum::Any(k)),
                _ => Err(format!("'{text}': k in \"any k\" must be 1..=9")),
            },
            _ => Err(format!("'{text}' is neither \"all\" nor \"any k\"")),
        }
    }
}

impl Serialize for SyncQuorum {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for SyncQuorum {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SyncQuorum, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

/// What a primary's commits wait for: the protection mode and the SYNC quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protection {
    pub mode: ProtectionMode,
    pub quorum: SyncQuorum,
    /// Once the quorum's other members have acknowledged a write, a SYNC destination that has
    /// not is dropped from the synchronized set after this much longer (zero: only
    /// `net_timeout` drops it).
    pub sync_latency: Duration,
}

impl From<ProtectionMode> for Protection {
    fn from(mode: ProtectionMode) -> Protection {
        Protection { mode, quorum: SyncQuorum::All, sync_latency: Duration::ZERO }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_texts_parse_and_print_back() {
        assert_eq!("all".parse::<SyncQuorum>(), Ok(SyncQuorum::All));
        assert_eq!(" ANY  2 ".parse::<SyncQuorum>(), Ok(SyncQuorum::Any(2)));
        assert_eq!(SyncQuorum::Any(3).to_string(), "any 3");
        for bad in ["", "any", "any 0", "any 10", "first 1", "any -1", "all 2"] {
            assert!(bad.parse::<SyncQuorum>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_write_waits_for_at_most_the_destinations_it_was_sent_to() {
        assert_eq!(SyncQuorum::All.needed(3), 3);
        assert_eq!(SyncQuorum::Any(2).needed(3), 2);
        assert_eq!(SyncQuorum::Any(2).needed(1), 1);
        assert_eq!(SyncQuorum::Any(2).protected_by(), 2);
        assert_eq!(SyncQuorum::All.protected_by(), 1);
    }
}
