//! `redoguard bench failover`: how long applications cannot write when the primary is lost or
//! moved, and whether a write they were told was done is lost, with Redis Sentinel beside.
//!
//! # Cases
//!
//! Each case runs `trials` times, every trial on fresh data directories and fresh processes;
//! between trials everything is stopped and the machine left alone for a second.
//!
//! - `kill_9` (redoguard): a SYNC AFFIRM pair under Maximum Availability with fast-start
//!   failover (default settings but `threshold`) and one observer, on loopback. Once fast-start
//!   failover is armed and [`writers::WRITERS`] writers (connected through the observer's
//!   Sentinel front, see `writers`) have written steadily for a second, the primary gets
//!   SIGKILL.
//! - `network_cut` (redoguard): the same, each server and the observer in a site of their own
//!   of a linkemu mesh and the writers in a fourth linked to all; the primary's links to the
//!   standby and to the observer are cut (its clients still reach it).
//! - `switchover` (redoguard): the same pair on loopback, `redoguard switchover --to west`
//!   (the broker's own function) under the writers.
//! - `manual_failover` (redoguard): the pair without fast-start failover (no observer); the
//!   primary gets SIGKILL, and once the standby has seen its primary go, `redoguard failover
//!   --to west`. The writers try both servers in turn.
//! - `kill_9` and `network_cut` (redis_sentinel): Debian's redis-server, a primary and a
//!   replica (`appendonly yes`, `appendfsync always`), three redis-sentinel (quorum 2,
//!   `down-after-milliseconds 1000`, `failover-timeout 3000`), the same writers through
//!   Sentinel; SIGKILL of the Redis primary, or the same cut (Sentinels in the observer's site).
//!
//! # Measures, from the writers' own records
//!
//! - `kill_9`, `network_cut`: **seconds without writes**: from the last write acknowledged
//!   (by any server but the new primary) before the new primary's first acknowledgement, to
//!   that first acknowledgement. For a killed primary this is from its last acknowledged write.
//!   A cut Redis primary goes on acknowledging writes to clients that still reach it, so its
//!   clients may see no pause at all: what that costs shows in `acknowledged_lost`.
//! - `switchover`, `manual_failover`: from the start of the command to the first write the
//!   new primary acknowledged; and (`switchover_command`, `manual_failover_command`) how long
//!   the command itself took.
//! - every case: `to_new_primary_s`, from the kill, the cut or the command to the new
//!   primary's first acknowledgement; and `acknowledged_lost`, the acknowledged writes missing
//!   on the new primary at the end (each key is written once, with itself as its value).
//!
//! A redoguard trial that loses an acknowledged write, or fails, is listed in `failures` and
//! makes the command fail: both point at a bug. Redis's lost writes are a result.
//!
//! # Cleaning up
//!
//! Every process is a child of this one, killed by its PID when its guard drops (also on an
//! error or an interrupt); the mesh's drop deletes its namespaces; each trial's directory and
//! the work directory are removed.

mod harness;
mod redoguard;
mod sentinel;
pub(crate) mod writers;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;

use crate::bench_commit::Target;
use harness::{Place, Spawned, measure_event, wait_until};

/// The most trials per case.
pub const TRIALS_MAX: u32 = 100;
/// The pause between two trials, everything stopped.
const SETTLE: Duration = Duration::from_secs(1);
/// How long the writers write before the event (at least), once the system is ready.
const WARM: Duration = Duration::from_secs(1);
/// How long the writers go on after the new primary's first acknowledgement.
const AFTER: Duration = Duration::from_millis(300);
/// How long a new primary may take to acknowledge a write, beyond what the case expects.
const FAILOVER_LIMIT: Duration = Duration::from_secs(60);

/// The sites of the mesh of the `network_cut` cases.
const SITE_PRIMARY: usize = 0;
const SITE_STANDBY: usize = 1;
/// The observer, or the three Sentinels.
const SITE_WATCH: usize = 2;
const SITE_CLIENTS: usize = 3;
const SITES: usize = 4;

/// A case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Kill,
    Cut,
    Switchover,
    Failover,
}

impl Case {
    pub const ALL: [Case; 4] = [Case::Kill, Case::Cut, Case::Switchover, Case::Failover];

    pub fn name(self) -> &'static str {
        match self {
            Case::Kill => "kill_9",
            Case::Cut => "network_cut",
            Case::Switchover => "switchover",
            Case::Failover => "manual_failover",
        }
    }
}

impl std::str::FromStr for Case {
    type Err = String;

    fn from_str(text: &str) -> Result<Case, String> {
        match text {
            "kill" | "kill_9" => Ok(Case::Kill),
            "cut" | "network_cut" => Ok(Case::Cut),
            "switchover" => Ok(Case::Switchover),
            "failover" | "manual_failover" => Ok(Case::Failover),
            other => Err(format!("'{other}' is not a case (kill, cut, switchover, failover)")),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct FailoverConfig {
    /// The `redoguard` binary the servers and the observer run from.
    pub binary: PathBuf,
    /// File system for every server's files: a temporary directory is made inside it and
    /// removed at the end.
    pub dir: PathBuf,
    /// Trials per case and system. Bounds: 1..=100.
    pub trials: u32,
    /// redoguard's fast-start failover threshold. Bounds: 500ms..=1h (the configuration's).
    pub threshold: Duration,
    /// The cases, in this order. Bounds: at least one.
    pub cases: Vec<Case>,
    /// Run Redis Sentinel beside (the `kill_9` and `network_cut` cases).
    pub sentinel: bool,
}

impl FailoverConfig {
    /// Refuses values out of bounds, naming the field.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=TRIALS_MAX).contains(&self.trials),
            "trials: {} is outside 1..={TRIALS_MAX}",
            self.trials
        );
        anyhow::ensure!(
            (Duration::from_millis(500)..=Duration::from_secs(3600)).contains(&self.threshold),
            "threshold: {:?} is outside 500ms..=1h",
            self.threshold
        );
        anyhow::ensure!(!self.cases.is_empty(), "cases: give at least one case");
        Ok(())
    }
}

/// One case of one system over its trials.
#[derive(Serialize, Clone, Debug)]
pub struct FailoverResult {
    /// `kill_9`, `network_cut`, `switchover`, `switchover_command`, `manual_failover`,
    /// `manual_failover_command`.
    pub case: String,
    /// `redoguard` or `redis_sentinel`.
    pub system: String,
    /// Trials measured.
    pub trials: u32,
    /// Trials that failed (see `failures` or `skipped`).
    pub trials_failed: u32,
    /// The median of `samples` (the mean of the two middle ones for an even count).
    pub seconds_p50: f64,
    pub seconds_max: f64,
    /// Each trial's measure, in seconds, in trial order.
    pub samples: Vec<f64>,
    /// Acknowledged writes missing on the new primary, over every trial.
    pub acknowledged_lost: u64,
    /// Acknowledged writes, over every trial.
    pub acknowledged: u64,
    /// Each trial's time from the event (kill, cut, command) to the new primary's first
    /// acknowledged write.
    pub to_new_primary_s: Vec<f64>,
    /// What `samples` measure.
    pub measure: String,
}

#[derive(Serialize, Clone, Debug, Default)]
pub struct FailoverReport {
    pub dir: String,
    pub threshold_s: f64,
    pub trials: u32,
    pub results: Vec<FailoverResult>,
    pub targets: Vec<Target>,
    /// What did not run, and why (Redis's failed trials too).
    pub skipped: Vec<String>,
    /// redoguard trials that failed or lost an acknowledged write: each a bug.
    pub failures: Vec<String>,
    pub elapsed_s: f64,
}

/// One trial's outcome.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sample {
    /// The longest the writers went without an acknowledged write before the new primary's
    /// first.
    pub(crate) without_writes_s: f64,
    pub(crate) to_new_primary_s: f64,
    /// How long the command took (switchover, manual failover).
    pub(crate) command_s: Option<f64>,
    pub(crate) acknowledged: u64,
    pub(crate) lost: u64,
    /// Errors the writers met and retried after.
    pub(crate) errors: u64,
    /// What the observer said it did, for the progress lines.
    pub(crate) note: Option<String>,
}

impl Sample {
    /// The case's measure (see the module documentation).
    fn seconds(&self, case: Case) -> f64 {
        match case {
            Case::Kill | Case::Cut => self.without_writes_s,
            Case::Switchover | Case::Failover => self.to_new_primary_s,
        }
    }
}

/// Runs every case; see the module documentation.
pub fn run(
    config: &FailoverConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<FailoverReport> {
    config.validate()?;
    let started = Instant::now();
    let progress: &mut dyn FnMut(&str) = &mut progress;
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("cannot create {}", config.dir.display()))?;
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-failover-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("cannot create a directory in {}", config.dir.display()))?;
    let mut report = FailoverReport {
        dir: config.dir.display().to_string(),
        threshold_s: config.threshold.as_secs_f64(),
        trials: config.trials,
        ..FailoverReport::default()
    };
    let redis = config.sentinel && {
        match sentinel::ensure_installed(progress) {
            Ok(()) => true,
            Err(reason) => {
                report.skipped.push(format!("redis_sentinel: {reason}"));
                false
            }
        }
    };
    let bench = Bench { config, work: work.path() };
    for &case in &config.cases {
        match case {
            Case::Kill | Case::Switchover | Case::Failover => {
                bench.cases(case, Place::Loopback, redis, &mut report, progress)?;
            }
            Case::Cut => {
                let mesh = match linkemu::unavailable_reason() {
                    Some(reason) => Err(anyhow::anyhow!(reason)),
                    None => {
                        progress(
                            "linkemu: a mesh of 4 sites (primary, standby, observer or Sentinels, clients)",
                        );
                        linkemu::Mesh::up(SITES, linkemu::LinkConfig::default())
                            .context("bringing the mesh up")
                    }
                };
                match mesh {
                    Ok(mesh) => {
                        // This thread reaches every site from the clients' one.
                        let inside = linkemu::namespace::enter(mesh.namespace(SITE_CLIENTS))
                            .context("entering the clients' site")?;
                        let result =
                            bench.cases(case, Place::Mesh(&mesh), redis, &mut report, progress);
                        drop(inside);
                        result?;
                    }
                    Err(error) => report.skipped.push(format!("network_cut: {error:#}")),
                }
            }
        }
    }
    report.targets = targets(&report.results);
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// What every case shares.
struct Bench<'a> {
    config: &'a FailoverConfig,
    work: &'a Path,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Redoguard,
    Redis,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Redoguard => "redoguard",
            System::Redis => "redis_sentinel",
        }
    }
}

impl Bench<'_> {
    /// One case: redoguard's trials, then Redis's if it has the case and is installed.
    fn cases(
        &self,
        case: Case,
        place: Place<'_>,
        redis: bool,
        report: &mut FailoverReport,
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        self.trials(case, System::Redoguard, report, progress, |number| {
            redoguard::trial(self, case, place, number)
        })?;
        if redis && matches!(case, Case::Kill | Case::Cut) {
            self.trials(case, System::Redis, report, progress, |number| {
                sentinel::trial(self, case, place, number)
            })?;
        }
        Ok(())
    }

    /// Runs `trial` the configured number of times and adds the case's rows.
    fn trials(
        &self,
        case: Case,
        system: System,
        report: &mut FailoverReport,
        progress: &mut dyn FnMut(&str),
        mut trial: impl FnMut(u32) -> anyhow::Result<Sample>,
    ) -> anyhow::Result<()> {
        let mut samples = Vec::new();
        let mut failed = 0;
        for number in 1..=self.config.trials {
            crate::interrupt::check()?;
            let what =
                format!("{} {} trial {number}/{}", system.name(), case.name(), self.config.trials);
            progress(&what);
            match trial(number) {
                Ok(sample) => {
                    progress(&format!(
                        "{what}: {:.3} s, new primary's first write {:.3} s after the event{}, {} acknowledged, {} lost, {} client errors",
                        sample.seconds(case),
                        sample.to_new_primary_s,
                        sample.command_s.map_or(String::new(), |s| format!(", command {s:.3} s")),
                        sample.acknowledged,
                        sample.lost,
                        sample.errors
                    ));
                    if let Some(note) = &sample.note {
                        progress(&format!("{what}: {note}"));
                    }
                    if system == System::Redoguard && sample.lost > 0 {
                        report
                            .failures
                            .push(format!("{what}: {} acknowledged writes LOST", sample.lost));
                    }
                    samples.push(sample);
                }
                Err(error) => {
                    crate::interrupt::check()?;
                    failed += 1;
                    let message = format!("{what}: {error:#}");
                    progress(&format!("FAILED: {message}"));
                    match system {
                        System::Redoguard => report.failures.push(message),
                        System::Redis => report.skipped.push(message),
                    }
                }
            }
            std::thread::sleep(SETTLE);
        }
        report.results.extend(rows(case, system, &samples, failed));
        Ok(())
    }

    /// A fresh directory for one trial, removed when dropped.
    fn trial_dir(
        &self,
        system: System,
        case: Case,
        number: u32,
    ) -> anyhow::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(&format!("{}-{}-{number}-", system.name(), case.name()))
            .tempdir_in(self.work)
            .context("creating a trial's directory")
    }
}

/// The rows of a case: its measure, and the command's own time if it has one.
fn rows(case: Case, system: System, samples: &[Sample], failed: u32) -> Vec<FailoverResult> {
    let measure = match case {
        Case::Kill | Case::Cut => {
            "seconds without writes: from the last write acknowledged before the new primary's first, to that first one, as the writers saw them"
        }
        Case::Switchover | Case::Failover => {
            "from the start of the command to the first write the new primary acknowledged"
        }
    };
    let row = |name: String, measure: &str, values: Vec<f64>| FailoverResult {
        case: name,
        system: system.name().into(),
        trials: samples.len() as u32,
        trials_failed: failed,
        seconds_p50: median(&values),
        seconds_max: values.iter().copied().fold(0.0, f64::max),
        samples: values,
        acknowledged_lost: samples.iter().map(|sample| sample.lost).sum(),
        acknowledged: samples.iter().map(|sample| sample.acknowledged).sum(),
        to_new_primary_s: samples.iter().map(|sample| sample.to_new_primary_s).collect(),
        measure: measure.into(),
    };
    let mut rows = vec![row(
        case.name().into(),
        measure,
        samples.iter().map(|sample| sample.seconds(case)).collect(),
    )];
    if matches!(case, Case::Switchover | Case::Failover) {
        rows.push(row(
            format!("{}_command", case.name()),
            "how long the command took, from its start to its answer",
            samples.iter().filter_map(|sample| sample.command_s).collect(),
        ));
    }
    rows
}

/// The median (the mean of the two middle values for an even count); 0 for none.
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The targets: p50 below 2 s after kill -9, and ahead of Redis Sentinel.
fn targets(results: &[FailoverResult]) -> Vec<Target> {
    let find = |case: &str, system: &str| {
        results.iter().find(|row| row.case == case && row.system == system && row.trials > 0)
    };
    let mut targets = Vec::new();
    if let Some(ours) = find("kill_9", "redoguard") {
        targets.push(Target {
            name: "redoguard kill_9: p50 seconds without writes".into(),
            value: ours.seconds_p50,
            limit: "< 2".into(),
            met: ours.seconds_p50 < 2.0,
        });
        if let Some(theirs) = find("kill_9", "redis_sentinel") {
            let ratio = ours.seconds_p50 / theirs.seconds_p50;
            targets.push(Target {
                name: "redoguard kill_9 p50 / Redis Sentinel kill_9 p50".into(),
                value: ratio,
                limit: "< 1".into(),
                met: ratio < 1.0,
            });
        }
    }
    targets
}

/// The table, the targets, what was skipped and what failed.
pub fn render(report: &FailoverReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench failover: fast-start threshold {} s, {} trial(s) per case",
        report.threshold_s, report.trials
    );
    let _ = writeln!(
        out,
        "  {:<24} {:<15} {:>6} {:>8} {:>8} {:>12} {:>9} {:>6}",
        "case", "system", "trials", "p50 s", "max s", "to new p50 s", "acked", "lost"
    );
    for row in &report.results {
        let _ = writeln!(
            out,
            "  {:<24} {:<15} {:>6} {:>8.3} {:>8.3} {:>12.3} {:>9} {:>6}",
            row.case,
            row.system,
            if row.trials_failed > 0 {
                format!("{}+{}F", row.trials, row.trials_failed)
            } else {
                row.trials.to_string()
            },
            row.seconds_p50,
            row.seconds_max,
            median(&row.to_new_primary_s),
            row.acknowledged,
            row.acknowledged_lost
        );
    }
    let _ = writeln!(
        out,
        "  kill_9, network_cut: seconds without writes (last acknowledged write before the new primary's first, to it); switchover, manual_failover: from the command to the new primary's first write; *_command: the command's own time; to new: from the kill, cut or command to the new primary's first write"
    );
    if !report.targets.is_empty() {
        let _ = writeln!(out, "targets:");
        for target in &report.targets {
            let _ = writeln!(
                out,
                "  {:<4} {:<56} {:>8.3} (target {})",
                if target.met { "met" } else { "MISS" },
                target.name,
                target.value,
                target.limit
            );
        }
    }
    for skipped in &report.skipped {
        let _ = writeln!(out, "skipped: {skipped}");
    }
    for failure in &report.failures {
        let _ = writeln!(out, "FAILED: {failure}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_rows() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let samples = [
            Sample {
                to_new_primary_s: 1.0,
                without_writes_s: 9.0,
                command_s: Some(0.5),
                lost: 1,
                acknowledged: 10,
                ..Sample::default()
            },
            Sample {
                to_new_primary_s: 3.0,
                command_s: Some(0.7),
                acknowledged: 20,
                ..Sample::default()
            },
        ];
        let rows = rows(Case::Switchover, System::Redoguard, &samples, 1);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].case.as_str(), rows[0].seconds_p50, rows[0].seconds_max),
            ("switchover", 2.0, 3.0)
        );
        assert_eq!(
            (rows[0].acknowledged_lost, rows[0].acknowledged, rows[0].trials_failed),
            (1, 30, 1)
        );
        assert_eq!(rows[1].case, "switchover_command");
        assert_eq!(rows[1].samples, [0.5, 0.7]);
        let report = FailoverReport { results: rows, ..FailoverReport::default() };
        let figure = crate::bench_figures::failover(&report);
        let groups = &figure.panels[0].groups;
        assert_eq!(groups.len(), 2, "one group per case");
        assert_eq!(groups[0].values, [Some(2.0)]);
        assert!(figure.to_svg().unwrap().contains("<svg"));
    }

    #[test]
    fn targets_compare_with_sentinel() {
        let row = |system: &str, p50: f64| FailoverResult {
            case: "kill_9".into(),
            system: system.into(),
            trials: 1,
            trials_failed: 0,
            seconds_p50: p50,
            seconds_max: p50,
            samples: vec![p50],
            acknowledged_lost: 0,
            acknowledged: 1,
            to_new_primary_s: vec![p50],
            measure: String::new(),
        };
        let targets = targets(&[row("redoguard", 0.5), row("redis_sentinel", 2.5)]);
        assert_eq!(targets.len(), 2);
        assert!(targets.iter().all(|target| target.met));
        assert!((targets[1].value - 0.2).abs() < 1e-9);
    }

    #[test]
    fn config_bounds_are_named() {
        let good = FailoverConfig {
            binary: "redoguard".into(),
            dir: ".".into(),
            trials: 5,
            threshold: Duration::from_secs(2),
            cases: Case::ALL.to_vec(),
            sentinel: true,
        };
        good.validate().unwrap();
        let message = |config: FailoverConfig| config.validate().unwrap_err().to_string();
        assert!(message(FailoverConfig { trials: 0, ..good.clone() }).starts_with("trials"));
        assert!(
            message(FailoverConfig { threshold: Duration::from_millis(100), ..good.clone() })
                .starts_with("threshold")
        );
        assert!(message(FailoverConfig { cases: vec![], ..good }).starts_with("cases"));
        assert_eq!("cut".parse::<Case>(), Ok(Case::Cut));
        assert!("nope".parse::<Case>().is_err());
    }
}
