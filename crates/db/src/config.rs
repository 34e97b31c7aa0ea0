//! Configuration of the database: the `[db]` section of the config file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::DbError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DbConfig {
    /// Directory of the data files. Relative paths are resolved against the data directory.
    /// Default: `data`.
    pub dir: PathBuf,

    /// A checkpoint runs at least this often (when anything changed). Bounds: 100ms..=1h.
    /// Default: 30s.
    #[serde(with = "units::serde_human::duration")]
    pub checkpoint_interval: Duration,

    /// Changed-but-not-checkpointed data that starts a checkpoint early. Bounds: 1 MiB..=16 GiB.
    /// Default: 64 MiB.
    #[serde(with = "units::serde_human::size")]
    pub checkpoint_dirty_bytes: u64,

    /// The share of the time between two checkpoints that the checkpointer spreads one
    /// checkpoint's writes over, so that it never takes a burst of CPU and disk from the
    /// sessions (PostgreSQL's `checkpoint_completion_target`). A checkpoint somebody waits for
    /// (a log switch, writers at `dirty_bytes_max`, shutdown, a role change) is never paced,
    /// and a paced one hurries as soon as one is. 0: write at once. Bounds: 0..=0.9.
    /// Default: 0, measured: under a durable SET at 50 clients, 0.5 cost a tenth of the rate
    /// (61k against 67k SET/s, the median second 61k against 78k) and left the slowest second
    /// as slow: while a paced checkpoint runs, its rows stay a second large layer that every
    /// lookup searches, and redb writes its pages at the commit all the same.
    pub checkpoint_completion_target: f64,

    /// How much lower than the sessions' the checkpointer's CPU priority is while nobody waits
    /// for its checkpoint and the next one is not due: added to its nice value (Linux, per
    /// thread). Somebody waiting (a log switch, writers at `dirty_bytes_max`, a role change),
    /// or a log switch or `checkpoint_dirty_bytes` of changes since it began, gives it its own
    /// back, if the server may raise a priority (root, `CAP_SYS_NICE`, or `RLIMIT_NICE`). It
    /// only matters when every CPU is busy. 0: the sessions' own. Bounds: 0..=19. Default: 10,
    /// measured under a durable SET at 50 clients with the server on one CPU: the slowest half
    /// second 0.44–0.50 of the median at 0, 0.59–0.68 at 10 (`crate::priority`).
    pub checkpoint_nice: i32,

    /// Changed-but-not-checkpointed data beyond which writers wait for a checkpoint ("free
    /// buffer waits"). Bounds: at least 2 × `checkpoint_dirty_bytes`, at most 64 GiB.
    /// Default: 256 MiB.
    #[serde(with = "units::serde_human::size")]
    pub dirty_bytes_max: u64,

    /// Page cache of the data files. Bounds: 1 MiB..=64 GiB. Default: 64 MiB.
    #[serde(with = "units::serde_human::size")]
    pub cache_size: u64,

    /// Memory at most for the data files' key rows kept in memory as they are there: a GET,
    /// or a write that looks up the row it replaces, that no change since the last checkpoint
    /// answers finds its row there without a search of the data files (`store::row_cache`).
    /// Filled by reads (a checkpoint replaces what it holds, adds nothing); what is read once
    /// goes first. 0: none.
    /// Bounds: 0..=64 GiB. Default: 256 MiB (about a million keys of 16 bytes with values of
    /// 100).
    #[serde(with = "units::serde_human::size")]
    pub row_cache_size: u64,

    /// Memory at most for the filter of the data files' key and element rows: a Bloom filter
    /// (about 1.5 bytes a row, room for twice the rows of the data files when it is built)
    /// that lets a lookup of a row they do not hold skip the search of their B-tree, which is
    /// what every new hash field, set member or sorted-set member looks up. Built by the thread
    /// `db-filter` at open (about a second per million rows, at a low CPU priority; until
    /// then lookups search as before) and again when it is full. Beyond this size it holds
    /// more rows than it was sized for, with more false positives (each one a search); while a
    /// new one is built the old one answers, so twice this at most. 0: no filter. Bounds:
    /// 0..=16 GiB. Default: 256 MiB (about 170 million rows).
    #[serde(with = "units::serde_human::size")]
    pub row_filter_max: u64,

    /// A checkpoint that nobody waits for hands the pages it writes to the device every this
    /// many bytes (`sync_file_range`), instead of leaving them all to its commit's sync, where
    /// the log writer's next sync, that commits wait for, would queue behind them (PostgreSQL's
    /// setting of the same name). A checkpoint somebody waits for writes at once. 0: never.
    /// Bounds: 0 or 64 KiB..=1 GiB. Default: 4 MiB.
    #[serde(with = "units::serde_human::size")]
    pub checkpoint_flush_after: u64,

    /// Wait before retrying a failed checkpoint (a full disk, say). Bounds: 10ms..=1min.
    /// Default: 1s.
    #[serde(with = "units::serde_human::duration")]
    pub checkpoint_retry_interval: Duration,

    /// The limits on collections and commands. Not part of `[db]`: the server sets them from
    /// `[limits]` (`collection_elements_max`, `command_elements_max`).
    #[serde(skip)]
    pub limits: DataLimits,
}

/// How large a collection may grow, and how many elements one command may read, return or
/// change. A command that would pass one gets an error naming it, and changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataLimits {
    /// Elements of one hash, list, set or sorted set. Bounds: 1..=2^32−1. Default: 2^32−1
    /// (Redis's own ceiling for a list or set).
    pub collection_elements_max: u64,
    /// Elements one command may read, return or change (an LRANGE's reply, a SUNION's
    /// inputs, the walk of a ZRANK). Bounds: 1..=2^32−1. Default: 16 777 216.
    pub command_elements_max: u64,
}

impl Default for DataLimits {
    fn default() -> DataLimits {
        DataLimits { collection_elements_max: u32::MAX as u64, command_elements_max: 1 << 24 }
    }
}

impl Default for DbConfig {
    fn default() -> DbConfig {
        DbConfig {
            dir: PathBuf::from("data"),
            checkpoint_interval: Duration::from_secs(30),
            checkpoint_dirty_bytes: 64 << 20,
            checkpoint_completion_target: 0.0,
            checkpoint_nice: 10,
            dirty_bytes_max: 256 << 20,
            cache_size: 64 << 20,
            row_cache_size: 256 << 20,
            row_filter_max: 256 << 20,
            checkpoint_flush_after: redo::storage::WRITEBACK_AFTER,
            checkpoint_retry_interval: Duration::from_secs(1),
            limits: DataLimits::default(),
        }
    }
}

impl DbConfig {
    pub fn resolve(mut self, base: &Path) -> DbConfig {
        if self.dir.is_relative() {
            self.dir = base.join(&self.dir);
        }
        self
    }

    pub fn validate(&self) -> Result<(), DbError> {
        let invalid = |field: &'static str, reason: String| Err(DbError::Config { field, reason });
        if !(Duration::from_millis(100)..=Duration::from_secs(3600))
            .contains(&self.checkpoint_interval)
        {
            return invalid(
                "checkpoint_interval",
                format!("{:?} is outside 100ms..=1h", self.checkpoint_interval),
            );
        }
        if !(0.0..=0.9).contains(&self.checkpoint_completion_target) {
            return invalid(
                "checkpoint_completion_target",
                format!("{} is outside 0..=0.9", self.checkpoint_completion_target),
            );
        }
        if !(0..=19).contains(&self.checkpoint_nice) {
            return invalid(
                "checkpoint_nice",
                format!("{} is outside 0..=19", self.checkpoint_nice),
            );
        }
        if !(1 << 20..=16 << 30).contains(&self.checkpoint_dirty_bytes) {
            return invalid(
                "checkpoint_dirty_bytes",
                format!("{} is outside 1 MiB..=16 GiB", self.checkpoint_dirty_bytes),
            );
        }
        if self.dirty_bytes_max < 2 * self.checkpoint_dirty_bytes || self.dirty_bytes_max > 64 << 30
        {
            return invalid(
                "dirty_bytes_max",
                format!(
                    "{} must be at least 2 × checkpoint_dirty_bytes ({}) and at most 64 GiB",
                    self.dirty_bytes_max,
                    2 * self.checkpoint_dirty_bytes
                ),
            );
        }
        if !(1 << 20..=64 << 30).contains(&self.cache_size) {
            return invalid("cache_size", format!("{} is outside 1 MiB..=64 GiB", self.cache_size));
        }
        if self.row_cache_size > 64 << 30 {
            return invalid(
                "row_cache_size",
                format!("{} is more than 64 GiB", self.row_cache_size),
            );
        }
        if self.row_filter_max > 16 << 30 {
            return invalid(
                "row_filter_max",
                format!("{} is more than 16 GiB", self.row_filter_max),
            );
        }
        if self.checkpoint_flush_after != 0
            && !(64 << 10..=1 << 30).contains(&self.checkpoint_flush_after)
        {
            return invalid(
                "checkpoint_flush_after",
                format!("{} is neither 0 nor within 64 KiB..=1 GiB", self.checkpoint_flush_after),
            );
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(60))
            .contains(&self.checkpoint_retry_interval)
        {
            return invalid(
                "checkpoint_retry_interval",
                format!("{:?} is outside 10ms..=1min", self.checkpoint_retry_interval),
            );
        }
        for (field, value) in [
            ("limits.collection_elements_max", self.limits.collection_elements_max),
            ("limits.command_elements_max", self.limits.command_elements_max),
        ] {
            if !(1..=u32::MAX as u64).contains(&value) {
                return invalid(field, format!("{value} is outside 1..=4294967295"));
            }
        }
        Ok(())
    }

    /// The data file.
    pub fn data_file(&self) -> PathBuf {
        self.dir.join("kv.redb")
    }
}
