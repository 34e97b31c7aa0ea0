//! Online log sizing (`redoguard advise --from-status`): from the redo rate a member observed
//! (its `/status`, and its `/history` when it is asked over HTTP), the log file size and group
//! count that give a target log switch interval, with the arithmetic printed.
//!
//! The reference: size the online logs so that they switch every 15–20 minutes at the peak, and
//! have enough groups that the writer never comes back to a group still being archived or
//! checkpointed. The peak sized for is the busiest stretch *as long as the switch interval*
//! (a burst of a few seconds says nothing of how fast a 15-minute log fills), from the archive
//! catalog's recent logs and the history's seconds; a member observed for less than that is
//! sized for its busiest stretch it has, and the advice says so. Every rate here is in bytes of *log* (redo units with their padding), which is
//! what fills a log file: "redo size" counts the records alone, and small commits pad each write
//! to a whole unit ("redo wastage"), so a rate of records alone would oversize the interval.
//!
//! Parsing reads only the fields it needs, as plain JSON: the tools do not depend on the
//! database crates (ARCHITECTURE.md), and a status from another version still parses if those
//! fields are there.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::format_bytes;

/// The reference's switch interval in production: every 15–20 minutes.
pub const SWITCH_INTERVAL_DEFAULT: Duration = Duration::from_secs(15 * 60);
/// Bounds of `--switch-interval`.
pub const SWITCH_INTERVAL_MIN: Duration = Duration::from_secs(1);
pub const SWITCH_INTERVAL_MAX: Duration = Duration::from_secs(24 * 3600);
/// The fewest groups advised: one being written, one being archived and checkpointed, one
/// ready, so a switch never waits even when a log fills faster than expected.
pub const GROUPS_MIN: u32 = 3;
/// The redo engine's bounds on groups and on a log file (`[redo]`, docs/config.md).
pub const GROUPS_MAX: u32 = 64;
pub const LOG_FILE_SIZE_MAX: u64 = 64 << 30;
/// The smallest log advised.
pub const LOG_FILE_SIZE_MIN: u64 = 1 << 20;

/// What a member's status (and history) says about the redo it has seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedRedo {
    /// Where the status came from (a URL or a file).
    pub source: String,
    pub role: String,
    pub uptime_s: u64,
    /// The member's online logs now.
    pub log_file_size: u64,
    pub groups: u32,
    /// "redo size": bytes of records generated since the member started.
    pub redo_size: u64,
    /// "redo size" + "redo wastage": bytes of log units filled since it started.
    pub log_bytes: u64,
    pub archived_logs: u64,
    /// The archived log generated fastest (bytes of log over the time it was current): its
    /// sequence, bytes and seconds.
    pub fastest_log: Option<LogRate>,
    /// The slowest archiver copy among the recent archived logs, bytes per second: from the
    /// switch that closed a log to its archived copy being durable.
    pub archive_bytes_per_s: Option<f64>,
    /// How long a checkpoint takes, seconds: the p99 of its "db file parallel write" wait
    /// (writing the data files and making them durable), if one ran.
    #[serde(default)]
    pub checkpoint_s: Option<f64>,
    /// The recent archived logs, oldest first: what they held and when.
    pub recent_logs: Vec<LogSpan>,
    /// From `/history`: "redo size" per second, oldest first.
    pub history: Option<Vec<f64>>,
}

/// One archived log: its bytes and the time it was current (µs since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogSpan {
    pub seq: u64,
    pub bytes: u64,
    pub first_time_us: u64,
    pub next_time_us: u64,
}

/// The rate sized for, and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizingRate {
    /// Bytes of log per second.
    pub bytes_per_s: f64,
    /// Seconds the rate is the mean over (the switch interval, or all that was observed if
    /// that is shorter).
    pub window_s: f64,
    /// Less than the switch interval was observed.
    pub short: bool,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogRate {
    pub seq: u64,
    pub bytes: u64,
    pub seconds: f64,
}

impl LogRate {
    pub fn bytes_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-6)
    }
}

/// The busiest stretch of at least `window_s` among `spans` ((start s, end s, bytes), in time
/// order, back to back): its bytes per second and length; over all of them if they cover less
/// than `window_s` (then `short`). `None` without spans or time.
pub fn busiest(spans: &[(f64, f64, f64)], window_s: f64) -> Option<(f64, f64, bool)> {
    let (first, last) = (spans.first()?, spans.last()?);
    let whole = last.1 - first.0;
    if whole <= 0.0 {
        return None;
    }
    if whole < window_s {
        let bytes: f64 = spans.iter().map(|span| span.2).sum();
        return Some((bytes / whole, whole, true));
    }
    let mut best: Option<(f64, f64)> = None;
    for (index, start) in spans.iter().enumerate() {
        let mut bytes = 0.0;
        for span in &spans[index..] {
            bytes += span.2;
            let length = span.1 - start.0;
            if length >= window_s {
                let rate = bytes / length;
                if best.is_none_or(|(best_rate, _)| rate > best_rate) {
                    best = Some((rate, length));
                }
                break;
            }
        }
    }
    best.map(|(rate, length)| (rate, length, false))
}

// The fields of `/status` read here (admin::ServerStatus has them all).
#[derive(Deserialize)]
struct Status {
    server: Server,
    database: Database,
    archive: Archive,
    metrics: Metrics,
}

#[derive(Deserialize)]
struct Server {
    role: String,
    uptime_s: u64,
}

#[derive(Deserialize)]
struct Database {
    redo: Redo,
}

#[derive(Deserialize)]
struct Redo {
    groups: Vec<Group>,
}

#[derive(Deserialize)]
struct Group {
    size_bytes: u64,
}

#[derive(Deserialize)]
struct Archive {
    archived_logs: u64,
    recent: Vec<Archived>,
    peak_bytes_per_s: f64,
    peak_seq: Option<u64>,
}

#[derive(Deserialize)]
struct Archived {
    seq: u64,
    first_time_us: u64,
    next_time_us: u64,
    size_bytes: u64,
    completed_us: u64,
}

#[derive(Deserialize)]
struct Metrics {
    stats: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    waits: Vec<Wait>,
}

#[derive(Deserialize)]
struct Wait {
    name: String,
    count: u64,
    p99_us: u64,
}

/// The wait event a checkpoint's writing of the data files is timed by.
pub const CHECKPOINT_WAIT: &str = "db file parallel write";

#[derive(Deserialize)]
struct History {
    samples: Vec<Sample>,
}

#[derive(Deserialize)]
struct Sample {
    redo_bytes_per_s: f64,
}

/// Reads a member's `/status` (and `/history`, if given) as its JSON.
pub fn observed(source: &str, status: &str, history: Option<&str>) -> anyhow::Result<ObservedRedo> {
    use anyhow::Context as _;
    let status: Status = serde_json::from_str(status)
        .with_context(|| format!("{source} is not a redoguard /status (JSON)"))?;
    let first = status
        .database
        .redo
        .groups
        .first()
        .with_context(|| format!("{source}: the status lists no online log groups"))?;
    let stat = |name: &str| status.metrics.stats.get(name).copied().unwrap_or(0);
    let archive = &status.archive;
    // The fastest log as the catalog computed it, found among the recent ones for its bytes
    // and seconds; its rate alone if it is older than those.
    let fastest_log = archive.peak_seq.filter(|_| archive.peak_bytes_per_s > 0.0).map(|seq| {
        match archive.recent.iter().find(|log| log.seq == seq) {
            Some(log) => LogRate {
                seq,
                bytes: log.size_bytes,
                seconds: log.next_time_us.saturating_sub(log.first_time_us) as f64 / 1e6,
            },
            None => LogRate { seq, bytes: archive.peak_bytes_per_s.round() as u64, seconds: 1.0 },
        }
    });
    let archive_bytes_per_s = archive
        .recent
        .iter()
        .filter(|log| log.completed_us > log.next_time_us)
        .map(|log| log.size_bytes as f64 / ((log.completed_us - log.next_time_us) as f64 / 1e6))
        .min_by(f64::total_cmp);
    let checkpoint_s = status
        .metrics
        .waits
        .iter()
        .find(|wait| wait.name == CHECKPOINT_WAIT && wait.count > 0)
        .map(|wait| wait.p99_us as f64 / 1e6);
    let history = match history {
        None => None,
        Some(text) => {
            let history: History = serde_json::from_str(text)
                .with_context(|| format!("{source}: the /history answer is not its JSON"))?;
            Some(history.samples.iter().map(|sample| sample.redo_bytes_per_s).collect())
        }
    };
    let mut recent_logs: Vec<LogSpan> = archive
        .recent
        .iter()
        .map(|log| LogSpan {
            seq: log.seq,
            bytes: log.size_bytes,
            first_time_us: log.first_time_us,
            next_time_us: log.next_time_us,
        })
        .collect();
    recent_logs.sort_by_key(|log| log.seq);
    Ok(ObservedRedo {
        source: source.to_string(),
        role: status.server.role,
        uptime_s: status.server.uptime_s,
        log_file_size: first.size_bytes,
        groups: status.database.redo.groups.len() as u32,
        redo_size: stat("redo size"),
        log_bytes: stat("redo size") + stat("redo wastage"),
        archived_logs: archive.archived_logs,
        fastest_log,
        archive_bytes_per_s,
        checkpoint_s,
        recent_logs,
        history,
    })
}

impl ObservedRedo {
    /// Bytes of log per byte of records: what padding adds to "redo size".
    pub fn log_bytes_per_redo_byte(&self) -> f64 {
        if self.redo_size == 0 { 1.0 } else { self.log_bytes as f64 / self.redo_size as f64 }
    }

    pub fn mean_log_bytes_per_s(&self) -> f64 {
        self.log_bytes as f64 / (self.uptime_s.max(1) as f64)
    }

    /// The rate to size for, in bytes of log per second: the busiest stretch as long as
    /// `window` among the recent archived logs and the history's seconds (scaled from records
    /// to log bytes), whichever is higher; without either, the mean since the member started.
    pub fn sizing_rate(&self, window: Duration) -> Option<SizingRate> {
        let window_s = window.as_secs_f64();
        let logs: Vec<(f64, f64, f64)> = self
            .recent_logs
            .iter()
            .map(|log| {
                (log.first_time_us as f64 / 1e6, log.next_time_us as f64 / 1e6, log.bytes as f64)
            })
            .collect();
        let padding = self.log_bytes_per_redo_byte();
        let seconds: Vec<(f64, f64, f64)> = self
            .history
            .iter()
            .flatten()
            .enumerate()
            .map(|(second, rate)| (second as f64, second as f64 + 1.0, rate * padding))
            .collect();
        let from_logs = busiest(&logs, window_s).map(|(rate, length, short)| SizingRate {
            bytes_per_s: rate,
            window_s: length,
            short,
            source: format!(
                "the busiest {} of the {} recent archived logs",
                format_seconds(length),
                logs.len()
            ),
        });
        let from_history = busiest(&seconds, window_s).map(|(rate, length, short)| SizingRate {
            bytes_per_s: rate,
            window_s: length,
            short,
            source: format!(
                "the busiest {} of the history's \"redo size\", × {padding:.2} for padding",
                format_seconds(length)
            ),
        });
        let best = match (from_logs, from_history) {
            (Some(logs), Some(history)) => {
                Some(if history.bytes_per_s > logs.bytes_per_s { history } else { logs })
            }
            (logs, history) => logs.or(history),
        };
        if best.as_ref().is_some_and(|best| best.bytes_per_s > 0.0) {
            return best;
        }
        let mean = self.mean_log_bytes_per_s();
        (mean > 0.0).then(|| SizingRate {
            bytes_per_s: mean,
            window_s: self.uptime_s as f64,
            short: (self.uptime_s as f64) < window_s,
            source: "the mean since the member started".to_string(),
        })
    }
}

/// What the log sizing starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogSizingInput {
    /// Bytes of log per second at the peak sized for.
    pub peak_bytes_per_s: f64,
    /// Bytes of log per second on average, if known.
    pub mean_bytes_per_s: Option<f64>,
    pub switch_interval: Duration,
    /// How fast the archiver copies a log (the slowest seen), bytes per second.
    pub archive_bytes_per_s: Option<f64>,
    /// How long a checkpoint takes (its p99), seconds.
    #[serde(default)]
    pub checkpoint_s: Option<f64>,
    /// The member's log file size and group count now.
    pub current: Option<(u64, u32)>,
}

/// The advice, every figure with its unit in its name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogAdvice {
    pub input: LogSizingInput,
    /// peak × interval, before rounding.
    pub exact_bytes: f64,
    pub log_file_size: u64,
    /// The size needed is beyond the largest log file.
    pub capped: bool,
    pub switch_at_peak_s: f64,
    pub switch_at_mean_s: Option<f64>,
    /// Seconds to archive one log of `log_file_size`.
    pub archive_s: Option<f64>,
    /// What the archiver needs (`2 + ⌈archive / switch⌉`) and what the checkpointer needs
    /// (`2 + ⌈2 × checkpoint / switch⌉`), each if known: `groups` is the larger, at least
    /// `GROUPS_MIN`.
    #[serde(default)]
    pub groups_for_archiving: Option<u32>,
    #[serde(default)]
    pub groups_for_checkpoints: Option<u32>,
    pub groups: u32,
    /// Standby logs: the same size, one group more (what the receiver needs while the last
    /// one is archived).
    pub standby_groups: u32,
    /// The current logs' switch interval at the peak.
    pub current_switch_at_peak_s: Option<f64>,
}

/// Rounds up to a size a DBA writes: a power of two MiB up to 1 GiB, whole GiB above; within
/// the bounds.
pub fn round_log_size(bytes: f64) -> u64 {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    let bytes = bytes.max(LOG_FILE_SIZE_MIN as f64);
    let rounded = if bytes <= GIB as f64 {
        let mut size = MIB;
        while (size as f64) < bytes {
            size *= 2;
        }
        size
    } else {
        (bytes / GIB as f64).ceil() as u64 * GIB
    };
    rounded.min(LOG_FILE_SIZE_MAX)
}

/// The groups that let a log switch every `switch_s` seconds never wait for work that takes
/// `busy_s` seconds after a group fills: a filled group is written again (groups − 1) switches
/// later, so `2 + ⌈busy / switch⌉` (one group spare), at least `GROUPS_MIN`, at most
/// `GROUPS_MAX`.
///
/// For the archiver, `busy_s` is one log's copy. For the checkpointer it is twice a checkpoint:
/// the checkpoint that frees a group must begin after the group filled, and may have to wait
/// for the one running then to end first.
pub fn groups_for(busy_s: f64, switch_s: f64) -> u32 {
    let switches = (busy_s / switch_s.max(1e-9)).ceil();
    if !switches.is_finite() || switches >= f64::from(GROUPS_MAX) {
        return GROUPS_MAX;
    }
    (2 + switches.max(0.0) as u32).clamp(GROUPS_MIN, GROUPS_MAX)
}

/// Computes the advice. Pure.
pub fn size_logs(input: &LogSizingInput) -> LogAdvice {
    let peak = input.peak_bytes_per_s.max(1e-9);
    let interval_s = input.switch_interval.as_secs_f64();
    let exact_bytes = input.peak_bytes_per_s * interval_s;
    let log_file_size = round_log_size(exact_bytes);
    let capped = exact_bytes > LOG_FILE_SIZE_MAX as f64;
    let switch_at_peak_s = log_file_size as f64 / peak;
    let archive_s = input.archive_bytes_per_s.map(|rate| log_file_size as f64 / rate.max(1e-9));
    let groups_for_archiving = archive_s.map(|archive_s| groups_for(archive_s, switch_at_peak_s));
    let groups_for_checkpoints =
        input.checkpoint_s.map(|checkpoint_s| groups_for(2.0 * checkpoint_s, switch_at_peak_s));
    let groups = groups_for_archiving
        .into_iter()
        .chain(groups_for_checkpoints)
        .fold(GROUPS_MIN, u32::max)
        .clamp(GROUPS_MIN, GROUPS_MAX);
    LogAdvice {
        input: input.clone(),
        exact_bytes,
        log_file_size,
        capped,
        switch_at_peak_s,
        switch_at_mean_s: input
            .mean_bytes_per_s
            .filter(|mean| *mean > 0.0)
            .map(|mean| log_file_size as f64 / mean),
        archive_s,
        groups_for_archiving,
        groups_for_checkpoints,
        groups,
        standby_groups: (groups + 1).min(GROUPS_MAX),
        current_switch_at_peak_s: input.current.map(|(size, _)| size as f64 / peak),
    }
}

/// The switch interval `log_file_size` gives at `bytes_per_s` (the demo's note uses it).
pub fn switch_interval_s(log_file_size: u64, bytes_per_s: f64) -> f64 {
    log_file_size as f64 / bytes_per_s.max(1e-9)
}

/// `95.3 s`, `14.6 min`, `2.1 h`.
pub fn format_seconds(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.0} ms", seconds * 1e3)
    } else if seconds < 120.0 {
        format!("{seconds:.1} s")
    } else if seconds < 7200.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

fn mb_per_s(bytes_per_s: f64) -> String {
    format!("{:.2} MB/s", bytes_per_s / 1e6)
}

/// A size as the configuration takes it: `"16MiB"`, `"2GiB"`.
pub fn config_size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 30) {
        format!("\"{}GiB\"", bytes >> 30)
    } else if bytes.is_multiple_of(1 << 20) {
        format!("\"{}MiB\"", bytes >> 20)
    } else {
        bytes.to_string()
    }
}

impl ObservedRedo {
    /// What the status says, as a person reads it.
    pub fn text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "Redo observed ({}: {}, up {}):",
            self.source,
            self.role,
            format_seconds(self.uptime_s as f64)
        );
        let _ = writeln!(
            t,
            "  since start       {:.1} MB of log units (\"redo size\" {:.1} MB + \"redo wastage\" {:.1} MB) in {} s = {} mean",
            self.log_bytes as f64 / 1e6,
            self.redo_size as f64 / 1e6,
            self.log_bytes.saturating_sub(self.redo_size) as f64 / 1e6,
            self.uptime_s,
            mb_per_s(self.mean_log_bytes_per_s())
        );
        match &self.fastest_log {
            Some(log) => {
                let _ = writeln!(
                    t,
                    "  fastest log       log {}: {} in {} = {} (of {} archived logs)",
                    log.seq,
                    format_bytes(log.bytes),
                    format_seconds(log.seconds),
                    mb_per_s(log.bytes_per_s()),
                    self.archived_logs
                );
            }
            None => {
                let _ = writeln!(t, "  fastest log       none archived yet");
            }
        }
        if let Some(history) = self.history.as_ref().filter(|history| !history.is_empty()) {
            let _ = writeln!(
                t,
                "  history           last {} s of \"redo size\": peak second {}, mean {}",
                history.len(),
                mb_per_s(history.iter().copied().fold(0.0, f64::max)),
                mb_per_s(history.iter().sum::<f64>() / history.len() as f64)
            );
        }
        if let Some(rate) = self.archive_bytes_per_s {
            let _ = writeln!(
                t,
                "  archiver          slowest recent copy {} (switch to archived copy durable)",
                mb_per_s(rate)
            );
        }
        if let Some(checkpoint_s) = self.checkpoint_s {
            let _ = writeln!(
                t,
                "  checkpoints       p99 {} to write the data files (\"{CHECKPOINT_WAIT}\")",
                format_seconds(checkpoint_s)
            );
        }
        t
    }
}

impl LogAdvice {
    /// The advice as a person reads it, with its arithmetic.
    pub fn text(&self, rate: &SizingRate) -> String {
        let input = &self.input;
        let interval_s = input.switch_interval.as_secs_f64();
        let mut t = String::new();
        let _ =
            writeln!(t, "Sizing for {} of log ({})", mb_per_s(input.peak_bytes_per_s), rate.source);
        if rate.short {
            let _ = writeln!(
                t,
                "  (only {} observed, less than the switch interval: a longer peak may be faster; ask again after one)",
                format_seconds(rate.window_s)
            );
        }
        if let (Some((size, groups)), Some(switch)) = (input.current, self.current_switch_at_peak_s)
        {
            let _ = writeln!(
                t,
                "Now:    {groups} groups × {}: a switch every {} at that rate",
                format_bytes(size),
                format_seconds(switch)
            );
        }
        let _ = writeln!(
            t,
            "Target: a switch every {} at that rate (the reference: every 15–20 minutes in production)",
            format_seconds(interval_s)
        );
        let _ = writeln!(
            t,
            "  log size     {} × {:.0} s = {:.1} MB → {} ({})",
            mb_per_s(input.peak_bytes_per_s),
            interval_s,
            self.exact_bytes / 1e6,
            format_bytes(self.log_file_size),
            if self.capped {
                "the largest log file: switches come sooner than the target"
            } else {
                "rounded up: a power of two MiB up to 1 GiB, whole GiB above"
            }
        );
        let _ = writeln!(
            t,
            "               → a switch every {} at that rate{}",
            format_seconds(self.switch_at_peak_s),
            self.switch_at_mean_s
                .map(|mean| format!(", every {} at the mean", format_seconds(mean)))
                .unwrap_or_default()
        );
        let mut rules = Vec::new();
        if let (Some(archive_s), Some(groups)) = (self.archive_s, self.groups_for_archiving) {
            let _ = writeln!(
                t,
                "  groups       a filled group is written again (groups − 1) switches later, so each rule is 2 + ⌈busy / {}⌉ (one spare):",
                format_seconds(self.switch_at_peak_s)
            );
            let _ = writeln!(
                t,
                "               archiving a {} log at {} takes {}: 2 + ⌈{} / {}⌉ = {groups}",
                format_bytes(self.log_file_size),
                mb_per_s(input.archive_bytes_per_s.unwrap_or(0.0)),
                format_seconds(archive_s),
                format_seconds(archive_s),
                format_seconds(self.switch_at_peak_s),
            );
            rules.push(groups.to_string());
        }
        if let (Some(checkpoint_s), Some(groups)) =
            (input.checkpoint_s, self.groups_for_checkpoints)
        {
            if rules.is_empty() {
                let _ = writeln!(
                    t,
                    "  groups       a filled group is written again (groups − 1) switches later, so each rule is 2 + ⌈busy / {}⌉ (one spare):",
                    format_seconds(self.switch_at_peak_s)
                );
            }
            let _ = writeln!(
                t,
                "               a checkpoint takes {} (p99), and the one that frees a group may wait for the one running: 2 + ⌈2 × {} / {}⌉ = {groups}",
                format_seconds(checkpoint_s),
                format_seconds(checkpoint_s),
                format_seconds(self.switch_at_peak_s),
            );
            rules.push(groups.to_string());
        }
        if rules.is_empty() {
            let _ = writeln!(
                t,
                "  groups       {} (no archived log or checkpoint to time: one written, one archived and checkpointed, one spare)",
                self.groups
            );
        } else {
            let _ = writeln!(
                t,
                "               so groups = max({GROUPS_MIN}, {}) = {}",
                rules.join(", "),
                self.groups
            );
        }
        let _ = writeln!(
            t,
            "  standby logs the same size, one group more: {} × {}",
            self.standby_groups,
            format_bytes(self.log_file_size)
        );
        let _ = writeln!(
            t,
            "  disk         {} per member of each group on the primary, {} on a standby",
            format_bytes(self.log_file_size * u64::from(self.groups)),
            format_bytes(self.log_file_size * u64::from(self.standby_groups))
        );
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "[redo]\nlog_file_size = {}\ngroups = {}",
            config_size(self.log_file_size),
            self.groups
        );
        let _ = write!(t, "# on a standby: groups = {}", self.standby_groups);
        t
    }
}

#[cfg(test)]
mod tests;
