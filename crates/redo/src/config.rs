//! Configuration of the redo engine: the `[redo]` section of a database's config file.
//!
//! Every field documents its default and bounds; `validate` refuses a bad value by name once,
//! at start-up.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::RedoError;
use crate::format::{self, BLOCK_SIZE_MAX, BLOCK_SIZE_MIN};
use crate::scheduling::Scheduling;
use crate::storage::IoMode;

/// When archived logs may be deleted (Data Guard's archivelog deletion policy). Logs still
/// needed by this database (crash recovery, apply) are never deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletionPolicy {
    /// Never: the archive grows until someone removes logs.
    #[default]
    None,
    /// Once every standby has applied the log.
    AppliedOnAllStandby,
    /// Once every standby has received the log.
    ShippedToAllStandby,
}

/// Who performs group commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriterMode {
    /// The first committer that finds no write in progress writes and syncs for everyone
    /// waiting (raft-engine's leader/follower). A lone committer pays no hand-off.
    #[default]
    Leader,
    /// A dedicated log writer thread does every write, as LGWR does; committers wake it and
    /// wait. Costs two cross-CPU wake-ups per commit.
    Dedicated,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedoConfig {
    /// Directory of the online log files and the control file. Relative paths are resolved
    /// against the data directory. Default: `redo`.
    pub dir: PathBuf,

    /// One directory per member index, to put the mirror copies of each group on different
    /// disks (`member_dirs[0]` holds every group's member `a`, and so on). Empty: all members
    /// in `dir`. Default: empty.
    pub member_dirs: Vec<PathBuf>,

    /// Size of each online log file. Bounds: at least 16 blocks, at most 64 GiB, a multiple of
    /// `block_size`. Default: 64 MiB.
    #[serde(with = "units::serde_human::size")]
    pub log_file_size: u64,

    /// Number of online log groups, reused round-robin. Bounds: 2..=64. Default: 3.
    pub groups: u32,

    /// Members (mirror copies) per group, written in parallel. Bounds: 1..=4. Default: 1.
    pub members: u32,

    /// Size of a redo unit: each unit carries its own header and checksum, and every log write
    /// starts at a fresh unit. Unless `io_mode = "direct"` it must be at least the page size
    /// (4096), or a sync would rewrite durable bytes of a shared page (`auto` may fall back
    /// to `fdatasync`). Bounds: a power of two in 512..=65536. Default: 4096.
    pub block_size: u32,

    /// How log writes are made durable: `auto` (`direct` where the file system takes
    /// O_DIRECT, else `fdatasync`), `fdatasync`, `dsync` (O_DSYNC) or `direct`
    /// (O_DIRECT|O_DSYNC). Default: `auto`.
    pub io_mode: IoMode,

    /// Size of the in-memory log buffer that sessions copy redo into. Bounds: 64 KiB..=1 GiB.
    /// Default: 16 MiB.
    #[serde(with = "units::serde_human::size")]
    pub log_buffer_size: u64,

    /// Independent allocation points in the log buffer, each with its own lock; the buffer is
    /// split evenly between them. Bounds: 1..=64. Default: 2.
    pub log_buffer_strands: u32,

    /// Who performs group commit: `leader` or `dedicated`. Default: `leader`.
    pub writer: WriterMode,

    /// The longest that redo committed with BATCH or NOWAIT stays unwritten: the background
    /// log writer wakes this often. Bounds: 1 ms..=10 s. Default: 10 ms.
    #[serde(with = "units::serde_human::duration")]
    pub batch_write_interval: Duration,

    /// Force a log switch once the current log holds redo older than this, so that the
    /// archive (and a standby fed from it) is never further behind. 0 = off. Bounds: 0 or
    /// 1 s..=2 h. Default: 0.
    #[serde(with = "units::serde_human::duration")]
    pub archive_lag_target: Duration,

    /// Directories that every filled log is archived to. Relative paths are resolved against
    /// the data directory. Bounds: 1..=8 entries. Default: `["archive"]`.
    pub archive_dests: Vec<PathBuf>,

    /// Archiver worker threads. Bounds: 1..=30. Default: 2.
    pub archiver_workers: u32,

    /// The scheduling policy of the log writers, the acknowledgement waiter and the
    /// archivers: `normal` (the kernel's default) or `batch` (`SCHED_BATCH`: a woken one waits
    /// for the running thread to sleep or use up its time slice instead of preempting it, so
    /// each sync carries every commit the sessions' worker had ready, but waits behind a
    /// CPU-bound checkpoint). Only matters when every CPU is busy. Default: `normal`.
    pub thread_scheduling: Scheduling,

    /// The longest an archiver spreads the copy of a log over: half the time the log took to
    /// fill, at most this, so that its megabytes reach the disk a piece at a time instead of
    /// in a burst every commit's sync waits behind. A log switch that waits for the copy
    /// hurries it, as does a standby whose standby log groups all wait for the archiver. Bounds: 0 (copy at once)..=1 min. Default: 2 s.
    #[serde(with = "units::serde_human::duration")]
    pub archive_spread_max: Duration,

    /// How long an archiver waits before retrying a failed copy (a full disk, say). Bounds:
    /// 10 ms..=10 min. Default: 1 s.
    #[serde(with = "units::serde_human::duration")]
    pub archive_retry_interval: Duration,

    /// When an archived log may be deleted: `none`, `applied_on_all_standby` or
    /// `shipped_to_all_standby`. A log is deleted once the policy no longer needs it, nor
    /// does this database (its checkpoint and, on a standby, its apply are past it), nor a new
    /// standby being copied, and it is older than `archive_keep_min` (or the archive is over
    /// `archive_max_bytes`). Default: `none`.
    pub archive_deletion_policy: DeletionPolicy,

    /// Archived logs no longer needed are kept at least this long after they were archived
    /// (for backups, or a standby to be built). Bounds: 0..=365 d. Default: 1 h.
    #[serde(with = "units::serde_human::duration")]
    pub archive_keep_min: Duration,

    /// When the archive holds more than this, logs no longer needed are deleted without
    /// waiting for `archive_keep_min`, oldest first (logs still needed are never deleted;
    /// status says so when they alone pass it). 0 = no budget. Default: 0.
    #[serde(with = "units::serde_human::size")]
    pub archive_max_bytes: u64,
}

impl Default for RedoConfig {
    fn default() -> RedoConfig {
        RedoConfig {
            dir: PathBuf::from("redo"),
            member_dirs: Vec::new(),
            log_file_size: 64 << 20,
            groups: 3,
            members: 1,
            block_size: 4096,
            io_mode: IoMode::Auto,
            log_buffer_size: 16 << 20,
            log_buffer_strands: 2,
            writer: WriterMode::Leader,
            batch_write_interval: Duration::from_millis(10),
            archive_lag_target: Duration::ZERO,
            archive_dests: vec![PathBuf::from("archive")],
            archiver_workers: 2,
            thread_scheduling: Scheduling::Normal,
            archive_retry_interval: Duration::from_secs(1),
            archive_spread_max: Duration::from_secs(2),
            archive_deletion_policy: DeletionPolicy::None,
            archive_keep_min: Duration::from_secs(3600),
            archive_max_bytes: 0,
        }
    }
}

const PAGE_SIZE: u32 = 4096;

fn invalid(field: &'static str, reason: impl Into<String>) -> RedoError {
    RedoError::Config { field, reason: reason.into() }
}

impl RedoConfig {
    /// Resolves relative paths against `base` (the data directory).
    pub fn resolve(mut self, base: &Path) -> RedoConfig {
        let absolute =
            |path: &Path| if path.is_absolute() { path.to_path_buf() } else { base.join(path) };
        self.dir = absolute(&self.dir);
        self.member_dirs = self.member_dirs.iter().map(|dir| absolute(dir)).collect();
        self.archive_dests = self.archive_dests.iter().map(|dir| absolute(dir)).collect();
        self
    }

    /// Checks every field against its bounds; the error names the first bad field.
    pub fn validate(&self) -> Result<(), RedoError> {
        if !format::block_size_is_valid(self.block_size) {
            return Err(invalid(
                "block_size",
                format!(
                    "{} is not a power of two in {BLOCK_SIZE_MIN}..={BLOCK_SIZE_MAX}",
                    self.block_size
                ),
            ));
        }
        if self.io_mode != IoMode::Direct && self.block_size < PAGE_SIZE {
            return Err(invalid(
                "block_size",
                format!(
                    "{} is smaller than a page ({PAGE_SIZE}): with io_mode = \"{}\" a sync would rewrite durable bytes that share a page with new ones; use 4096 or io_mode = \"direct\"",
                    self.block_size, self.io_mode
                ),
            ));
        }
        let block = u64::from(self.block_size);
        if !self.log_file_size.is_multiple_of(block) {
            return Err(invalid(
                "log_file_size",
                format!(
                    "{} is not a multiple of block_size {}",
                    self.log_file_size, self.block_size
                ),
            ));
        }
        if self.log_file_size < 16 * block || self.log_file_size > 64 << 30 {
            return Err(invalid(
                "log_file_size",
                format!("{} is outside 16 blocks ({})..=64 GiB", self.log_file_size, 16 * block),
            ));
        }
        if !(2..=64).contains(&self.groups) {
            return Err(invalid("groups", format!("{} is outside 2..=64", self.groups)));
        }
        if !(1..=4).contains(&self.members) {
            return Err(invalid("members", format!("{} is outside 1..=4", self.members)));
        }
        if !self.member_dirs.is_empty() && self.member_dirs.len() != self.members as usize {
            return Err(invalid(
                "member_dirs",
                format!(
                    "{} directories for {} members: give one per member, or none",
                    self.member_dirs.len(),
                    self.members
                ),
            ));
        }
        if !(64 << 10..=1 << 30).contains(&self.log_buffer_size) {
            return Err(invalid(
                "log_buffer_size",
                format!("{} is outside 64 KiB..=1 GiB", self.log_buffer_size),
            ));
        }
        if !(1..=64).contains(&self.log_buffer_strands) {
            return Err(invalid(
                "log_buffer_strands",
                format!("{} is outside 1..=64", self.log_buffer_strands),
            ));
        }
        if self.log_buffer_size / u64::from(self.log_buffer_strands) < 16 << 10 {
            return Err(invalid(
                "log_buffer_strands",
                format!(
                    "{} strands leave less than 16 KiB each of a {}-byte log buffer",
                    self.log_buffer_strands, self.log_buffer_size
                ),
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(10))
            .contains(&self.batch_write_interval)
        {
            return Err(invalid(
                "batch_write_interval",
                format!("{:?} is outside 1ms..=10s", self.batch_write_interval),
            ));
        }
        if !self.archive_lag_target.is_zero()
            && !(Duration::from_secs(1)..=Duration::from_secs(7200))
                .contains(&self.archive_lag_target)
        {
            return Err(invalid(
                "archive_lag_target",
                format!("{:?} is neither 0 (off) nor within 1s..=2h", self.archive_lag_target),
            ));
        }
        if self.archive_dests.is_empty() || self.archive_dests.len() > 8 {
            return Err(invalid(
                "archive_dests",
                format!("{} destinations; give 1..=8", self.archive_dests.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for dest in &self.archive_dests {
            if !seen.insert(dest) {
                return Err(invalid(
                    "archive_dests",
                    format!("{} is listed twice", dest.display()),
                ));
            }
            if *dest == self.dir || self.member_dirs.contains(dest) {
                return Err(invalid(
                    "archive_dests",
                    format!("{} is also a log directory", dest.display()),
                ));
            }
        }
        if !(1..=30).contains(&self.archiver_workers) {
            return Err(invalid(
                "archiver_workers",
                format!("{} is outside 1..=30", self.archiver_workers),
            ));
        }
        if self.archive_keep_min > Duration::from_secs(365 * 86_400) {
            return Err(invalid(
                "archive_keep_min",
                format!("{:?} is over 365 days", self.archive_keep_min),
            ));
        }
        if self.archive_spread_max > Duration::from_secs(60) {
            return Err(invalid(
                "archive_spread_max",
                format!("{:?} is over 1 min", self.archive_spread_max),
            ));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(600))
            .contains(&self.archive_retry_interval)
        {
            return Err(invalid(
                "archive_retry_interval",
                format!("{:?} is outside 10ms..=10min", self.archive_retry_interval),
            ));
        }
        Ok(())
    }

    /// Bytes of one log buffer strand: the largest record the buffer can hold.
    pub fn strand_size(&self) -> usize {
        (self.log_buffer_size / u64::from(self.log_buffer_strands)) as usize
    }

    /// The largest record this configuration accepts: the smaller of one strand (less the
    /// record header it is charged) and one log file.
    pub fn max_record_len(&self) -> usize {
        (self.strand_size() - format::RECORD_HEADER_LEN)
            .min(format::max_record_len(self.log_file_size, self.block_size))
    }

    /// The directory of member `member` (0-based) of every group.
    pub fn member_dir(&self, member: u32) -> &Path {
        self.member_dirs.get(member as usize).unwrap_or(&self.dir)
    }

    /// The file of member `member` of group `group` (both 0-based): `redo_01_a.log`, …
    pub fn member_path(&self, group: u32, member: u32) -> PathBuf {
        let letter = char::from(b'a' + member as u8);
        self.member_dir(member).join(format!("redo_{:02}_{letter}.log", group + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        RedoConfig::default().validate().unwrap();
        let cases: Vec<(RedoConfig, &str)> = vec![
            (RedoConfig { block_size: 1000, ..RedoConfig::default() }, "block_size"),
            (RedoConfig { block_size: 512, ..RedoConfig::default() }, "block_size"),
            (RedoConfig { log_file_size: 4096 * 10, ..RedoConfig::default() }, "log_file_size"),
            (RedoConfig { log_file_size: (1 << 20) + 1, ..RedoConfig::default() }, "log_file_size"),
            (RedoConfig { groups: 1, ..RedoConfig::default() }, "groups"),
            (RedoConfig { members: 5, ..RedoConfig::default() }, "members"),
            (
                RedoConfig { members: 2, member_dirs: vec!["/a".into()], ..RedoConfig::default() },
                "member_dirs",
            ),
            (RedoConfig { log_buffer_strands: 0, ..RedoConfig::default() }, "log_buffer_strands"),
            (RedoConfig { archive_dests: vec![], ..RedoConfig::default() }, "archive_dests"),
            (
                RedoConfig { archive_dests: vec!["redo".into()], ..RedoConfig::default() },
                "archive_dests",
            ),
            (
                RedoConfig {
                    archive_lag_target: Duration::from_millis(10),
                    ..RedoConfig::default()
                },
                "archive_lag_target",
            ),
        ];
        for (config, field) in cases {
            match config.validate() {
                Err(RedoError::Config { field: named, .. }) => assert_eq!(named, field),
                other => panic!("{field}: expected a config error, got {other:?}"),
            }
        }
        let direct =
            RedoConfig { block_size: 512, io_mode: IoMode::Direct, ..RedoConfig::default() };
        direct.validate().unwrap();
        // `auto` may fall back to buffered writes: its units must be whole pages.
        let auto = RedoConfig { block_size: 512, io_mode: IoMode::Auto, ..RedoConfig::default() };
        assert!(auto.validate().is_err());
        assert_eq!(RedoConfig::default().io_mode, IoMode::Auto);
        let named: RedoConfig = serde_json::from_str(r#"{"io_mode": "auto"}"#).unwrap();
        assert_eq!(named.io_mode, IoMode::Auto);
    }

    #[test]
    fn paths_resolve_against_the_data_directory() {
        let config = RedoConfig { members: 2, ..RedoConfig::default() }.resolve(Path::new("/data"));
        assert_eq!(config.member_path(0, 1), Path::new("/data/redo/redo_01_b.log"));
        assert_eq!(config.archive_dests, vec![PathBuf::from("/data/archive")]);
        let toml_like: RedoConfig =
            serde_json::from_str(r#"{"log_file_size": "1MiB", "groups": 4}"#).unwrap();
        assert_eq!(toml_like.log_file_size, 1 << 20);
        assert!(
            serde_json::from_str::<RedoConfig>(r#"{"log_size": 1}"#)
                .unwrap_err()
                .to_string()
                .contains("unknown field")
        );
    }
}
