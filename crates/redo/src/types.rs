//! Positions and identities in the redo stream, as newtypes so they are never confused.

use std::fmt;

use serde::{Deserialize, Serialize};

/// System change number: the global, monotonically increasing commit order. Every redo
/// record carries one; consecutive records carry consecutive SCNs.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Scn(pub u64);

impl Scn {
    /// Before the first record: the SCN that "nothing" is durable up to.
    pub const ZERO: Scn = Scn(0);

    pub fn next(self) -> Scn {
        Scn(self.0 + 1)
    }

    pub fn prev(self) -> Scn {
        Scn(self.0.saturating_sub(1))
    }
}

impl fmt::Display for Scn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Log sequence number: which log (of one redo thread) a piece of redo is in. The first log of
/// a database is sequence 1; each log switch adds one.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct LogSeq(pub u64);

impl LogSeq {
    pub fn next(self) -> LogSeq {
        LogSeq(self.0 + 1)
    }

    pub fn prev_seq(self) -> LogSeq {
        LogSeq(self.0.saturating_sub(1))
    }
}

impl fmt::Display for LogSeq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Redo byte address: a log sequence and a byte offset inside that log's file.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct RedoAddr {
    pub seq: LogSeq,
    pub offset: u64,
}

impl fmt::Display for RedoAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq.0, self.offset)
    }
}

/// Identity of a database, chosen at random when it is created; every log carries it so that
/// redo of another database is never applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DatabaseId(pub u64);

impl fmt::Display for DatabaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Incarnation of a database: a new one begins when a history is branched (a failover).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Incarnation(pub u32);

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Redo thread: one per instance writing redo. redoguard has one instance, thread 1; the field
/// exists so that archived-log names and headers read as a DBA expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RedoThread(pub u16);

impl Default for RedoThread {
    fn default() -> RedoThread {
        RedoThread(1)
    }
}

/// One redo record: the redo of one transaction, with its commit SCN. The payload is opaque to
/// the redo engine (the database encodes its change vectors in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedoRecord {
    pub scn: Scn,
    pub payload: Vec<u8>,
}

/// Microseconds since the Unix epoch, as stored in log headers and the archive catalog.
pub fn now_unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
