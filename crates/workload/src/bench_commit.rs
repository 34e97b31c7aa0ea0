//! `redoguard bench commit`: what a commit costs against what the disk can do, measured in
//! one run on one file system.
//!
//! For each case, the raw cost of the same synced write (a preallocated file overwritten in
//! place, `tools::iotest`) is measured just before it, so that a disk made slower for a while
//! by other work is compared with itself. Cases: 1, 8 and 64 concurrent committers with 1 KiB
//! and 9400-byte records (leader/follower group commit, and the dedicated writer for
//! comparison), and sequential 1 MiB records (each waited for, and streamed).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use redo::{CommitLogging, CommitOptions, CommitWait, OsStorage, RedoConfig, RedoLog, WriterMode};
use serde::{Deserialize, Serialize};
use tools::iotest::{IoTestConfig, SyncMethod};

#[derive(Debug, Clone)]
pub struct BenchCommitConfig {
    /// Where the logs (and the raw test file) go: the file system being measured.
    pub dir: PathBuf,
    /// Each case runs this long (or until it has written `case_bytes_max`).
    pub duration: Duration,
    /// Runs only the cases whose names contain one of these (all when empty).
    pub cases: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawSync {
    pub write_bytes: u64,
    pub fdatasync_p50_us: f64,
    pub fdatasync_p99_us: f64,
    pub mb_per_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitCase {
    pub name: String,
    pub writer: String,
    pub committers: usize,
    /// Payload bytes of each record.
    pub redo_bytes: usize,
    pub commits: u64,
    pub seconds: f64,
    pub commits_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Payload megabytes (10^6) per second.
    pub mb_per_s: f64,
    /// Commits per log write (how well group commit groups).
    pub commits_per_write: f64,
    /// The raw synced write of the same size, measured just before this case.
    pub raw: RawSync,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    pub value: f64,
    pub limit: String,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchCommitReport {
    pub dir: String,
    pub filesystem: String,
    /// Raw fdatasync p50 of a 4 KiB overwrite at the start of the run.
    pub fdatasync_p50_us: f64,
    /// Raw p50 of a 4 KiB O_DIRECT|O_DSYNC overwrite: how the log writes by default
    /// (`io_mode = "auto"`) where the file system takes O_DIRECT; absent where it does not,
    /// and in older reports.
    #[serde(default)]
    pub direct_p50_us: Option<f64>,
    pub cases: Vec<CommitCase>,
    pub targets: Vec<Target>,
}

fn raw(dir: &Path, write_bytes: u64, seconds: f64) -> anyhow::Result<RawSync> {
    let mut config = IoTestConfig::new(dir, write_bytes, SyncMethod::Fdatasync);
    config.duration = Duration::from_secs_f64(seconds);
    // Enough file for the run without wrapping too often, small enough to prepare quickly.
    config.file_bytes = Some((write_bytes * 4096).clamp(64 << 20, 512 << 20));
    let report = tools::iotest::run(&config).context("measuring raw fdatasync")?;
    Ok(RawSync {
        write_bytes,
        fdatasync_p50_us: report.lat_p50_us,
        fdatasync_p99_us: report.lat_p99_us,
        mb_per_s: report.mb_per_s,
    })
}

/// The write a commit of `redo_bytes` issues: whole 4 KiB units of header and record.
fn write_bytes_for(redo_bytes: usize) -> u64 {
    let stream = redo_bytes + redo::format::RECORD_HEADER_LEN;
    (redo::format::units_for(stream, 4096) * 4096) as u64
}

struct Engine {
    log: Arc<RedoLog>,
    dir: PathBuf,
}

impl Engine {
    fn open(dir: &Path, writer: WriterMode) -> anyhow::Result<Engine> {
        let dir = dir.join(format!("redo-{writer:?}").to_lowercase());
        let _ = std::fs::remove_dir_all(&dir);
        let config = RedoConfig {
            // Large enough that a case never switches logs (the archiver would compete with
            // the commits being measured); cases stop early rather than fill it.
            log_file_size: 1 << 30,
            groups: 2,
            log_buffer_size: 64 << 20,
            writer,
            // `fresh_log` waits for each copy between cases: no case runs beside one.
            archive_spread_max: Duration::ZERO,
            ..RedoConfig::default()
        }
        .resolve(&dir);
        let log = RedoLog::open(config, Arc::new(OsStorage::default()), stats::Metrics::new())
            .with_context(|| format!("opening a redo log in {}", dir.display()))?;
        Ok(Engine { log: Arc::new(log), dir })
    }

    /// Starts the next case on an empty log: switch, wait for the archiver, checkpoint.
    fn fresh_log(&self) -> anyhow::Result<()> {
        let archived_before = self.log.archived_logs().len();
        if self.log.durable_addr().offset > redo::format::first_unit_offset(4096) {
            self.log.switch_logfile()?;
            let deadline = Instant::now() + Duration::from_secs(120);
            while self.log.archived_logs().len() <= archived_before {
                anyhow::ensure!(Instant::now() < deadline, "archiving did not finish in 120 s");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.log.advance_checkpoint(self.log.durable_scn())?;
        Ok(())
    }

    fn room_bytes(&self) -> u64 {
        (1u64 << 30) - self.log.durable_addr().offset
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.log.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a case measured: commits, seconds, the commit latency histogram (µs) and log writes.
type Measured = (u64, f64, Histogram<u64>, u64);

fn run_committers(
    engine: &Engine,
    committers: usize,
    redo_bytes: usize,
    duration: Duration,
) -> anyhow::Result<Measured> {
    engine.fresh_log()?;
    let writes_before = engine.log.metrics().stat("redo writes").get();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..committers)
        .map(|_| {
            let log = engine.log.clone();
            let stop = stop.clone();
            std::thread::spawn(move || -> anyhow::Result<(u64, Histogram<u64>)> {
                let payload = vec![0x5au8; redo_bytes];
                let mut histogram =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
                let mut commits = 0;
                while !stop.load(Ordering::Relaxed) {
                    let begun = Instant::now();
                    log.commit(&payload, CommitOptions::default())?;
                    let _ = histogram.record((begun.elapsed().as_nanos() as u64 / 1000).max(1));
                    commits += 1;
                }
                Ok((commits, histogram))
            })
        })
        .collect();
    // Stop at the duration, or before the log fills: a switch would bring the archiver into
    // the measurement.
    let room = engine.room_bytes();
    while started.elapsed() < duration && engine.room_bytes() > room / 5 {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut commits = 0;
    for thread in threads {
        let (count, histogram) =
            thread.join().map_err(|_| anyhow::anyhow!("a committer panicked"))??;
        commits += count;
        total.add(&histogram)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let writes = engine.log.metrics().stat("redo writes").get() - writes_before;
    Ok((commits, seconds, total, writes))
}

fn case(
    name: &str,
    writer: WriterMode,
    committers: usize,
    redo_bytes: usize,
    measured: Measured,
    raw: RawSync,
) -> CommitCase {
    let (commits, seconds, histogram, writes) = measured;
    CommitCase {
        name: name.to_string(),
        writer: format!("{writer:?}").to_lowercase(),
        committers,
        redo_bytes,
        commits,
        seconds,
        commits_per_s: commits as f64 / seconds,
        p50_us: histogram.value_at_quantile(0.5) as f64,
        p99_us: histogram.value_at_quantile(0.99) as f64,
        mb_per_s: commits as f64 * redo_bytes as f64 / 1e6 / seconds,
        commits_per_write: if writes == 0 { 0.0 } else { commits as f64 / writes as f64 },
        raw,
    }
}

/// Raw synced writes measured in slices between the slices of a case, on one file kept for
/// the whole case: the disk of a shared machine changes speed from one second to the next
/// (other work, its own writeback), and the file's preparation and removal (512 MiB written,
/// then discarded on a `discard` mount) must not land inside the case's own time.
struct RawSlices {
    config: IoTestConfig,
    writes: u64,
    seconds: f64,
    /// p50 of each slice, weighted by its writes.
    p50_weighted_us: f64,
    p99_max_us: f64,
}

impl RawSlices {
    fn new(dir: &Path, write_bytes: u64, slice: Duration) -> RawSlices {
        let mut config = IoTestConfig::new(dir, write_bytes, SyncMethod::Fdatasync);
        config.duration = slice;
        config.file_bytes = Some((write_bytes * 4096).clamp(64 << 20, 512 << 20));
        config.keep_files = true;
        RawSlices { config, writes: 0, seconds: 0.0, p50_weighted_us: 0.0, p99_max_us: 0.0 }
    }

    fn measure(&mut self) -> anyhow::Result<()> {
        let report = tools::iotest::run(&self.config).context("measuring raw fdatasync")?;
        self.writes += report.writes;
        self.seconds += report.elapsed_s;
        self.p50_weighted_us += report.lat_p50_us * report.writes as f64;
        self.p99_max_us = self.p99_max_us.max(report.lat_p99_us);
        Ok(())
    }

    /// Drops what was measured so far (the slice that prepared the file).
    fn forget(&mut self) {
        self.writes = 0;
        self.seconds = 0.0;
        self.p50_weighted_us = 0.0;
        self.p99_max_us = 0.0;
    }

    fn finish(&self) -> RawSync {
        let write_bytes = self.config.write_bytes;
        RawSync {
            write_bytes,
            fdatasync_p50_us: self.p50_weighted_us / (self.writes.max(1) as f64),
            fdatasync_p99_us: self.p99_max_us,
            mb_per_s: (self.writes * write_bytes) as f64 / 1e6 / self.seconds.max(1e-9),
        }
    }
}

impl Drop for RawSlices {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.config.dir.join("redoguard-iotest.0.dat"));
    }
}

/// 1 MiB records from one session: each waited for (`stream` false), or appended with
/// NOWAIT IMMEDIATE and flushed at the end of each slice (`stream` true). The case runs in
/// half-second slices alternating with slices of the raw synced write of the same size, and
/// each is compared with the sum of its own slices.
fn run_sequential(
    engine: &Engine,
    stream: bool,
    duration: Duration,
    raw_dir: &Path,
) -> anyhow::Result<(Measured, RawSync)> {
    let slice = Duration::from_millis(500);
    let mut raw = RawSlices::new(raw_dir, write_bytes_for(1 << 20), slice);
    // The first slice writes the raw file whole (before the case's log is fresh, so that
    // its writeback is over too).
    raw.measure()?;
    raw.forget();
    engine.fresh_log()?;
    let writes_before = engine.log.metrics().stat("redo writes").get();
    let payload = vec![0xa5u8; 1 << 20];
    let budget = engine.room_bytes() * 8 / 10;
    let options = if stream {
        CommitOptions { wait: CommitWait::NoWait, logging: CommitLogging::Immediate }
    } else {
        CommitOptions::default()
    };
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut seconds = 0.0;
    let mut commits = 0u64;
    'slices: while seconds < duration.as_secs_f64() {
        raw.measure()?;
        let started = Instant::now();
        while started.elapsed() < slice {
            if (commits + 1) * (1 << 20) >= budget {
                engine.log.flush()?;
                seconds += started.elapsed().as_secs_f64();
                break 'slices;
            }
            let begun = Instant::now();
            engine.log.commit(&payload, options)?;
            let _ = histogram.record((begun.elapsed().as_nanos() as u64 / 1000).max(1));
            commits += 1;
        }
        engine.log.flush()?;
        seconds += started.elapsed().as_secs_f64();
    }
    let writes = engine.log.metrics().stat("redo writes").get() - writes_before;
    Ok(((commits, seconds, histogram, writes), raw.finish()))
}

pub fn run(
    config: &BenchCommitConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<BenchCommitReport> {
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("cannot create {}", config.dir.display()))?;
    let work =
        tempfile::Builder::new().prefix("redoguard-bench-commit-").tempdir_in(&config.dir)?;
    let raw_seconds = 1.5;
    progress("raw fdatasync, 4 KiB");
    let first = raw(work.path(), 4096, raw_seconds)?;
    progress("raw direct write, 4 KiB");
    let direct_p50_us = {
        let mut direct = IoTestConfig::new(work.path(), 4096, SyncMethod::Direct);
        direct.duration = Duration::from_secs_f64(raw_seconds);
        tools::iotest::run(&direct).ok().map(|report| report.lat_p50_us)
    };
    let filesystem =
        tools::iotest::filesystem_name(&config.dir).unwrap_or_else(|_| "unknown".to_string());
    let wanted = |name: &str| {
        config.cases.is_empty() || config.cases.iter().any(|wanted| name.contains(wanted.as_str()))
    };
    let mut cases = Vec::new();
    for (writer, committer_counts) in
        [(WriterMode::Leader, vec![1usize, 8, 64]), (WriterMode::Dedicated, vec![1, 64])]
    {
        let engine = Engine::open(work.path(), writer)?;
        for redo_bytes in [1024usize, 9400] {
            for &committers in &committer_counts {
                if writer == WriterMode::Dedicated && redo_bytes != 1024 {
                    continue;
                }
                let name = format!(
                    "{committers} committers, {redo_bytes} B, {}",
                    format!("{writer:?}").to_lowercase()
                );
                if !wanted(&name) {
                    continue;
                }
                progress(&name);
                let raw = raw(work.path(), write_bytes_for(redo_bytes), raw_seconds)?;
                let measured = run_committers(&engine, committers, redo_bytes, config.duration)?;
                cases.push(case(&name, writer, committers, redo_bytes, measured, raw));
            }
        }
        if writer == WriterMode::Leader {
            for stream in [false, true] {
                let name = format!(
                    "sequential 1 MiB records, {}",
                    if stream { "streamed (NOWAIT)" } else { "each waited for" }
                );
                if !wanted(&name) {
                    continue;
                }
                progress(&name);
                let (measured, raw) =
                    run_sequential(&engine, stream, config.duration, work.path())?;
                cases.push(case(&name, writer, 1, 1 << 20, measured, raw));
            }
        }
    }
    let find = |committers: usize, redo_bytes: usize, writer: &str| {
        cases.iter().find(|case| {
            case.committers == committers && case.redo_bytes == redo_bytes && case.writer == writer
        })
    };
    let mut targets = Vec::new();
    for redo_bytes in [1024usize, 9400] {
        if let (Some(one), Some(many)) =
            (find(1, redo_bytes, "leader"), find(64, redo_bytes, "leader"))
        {
            let latency = one.p50_us / one.raw.fdatasync_p50_us;
            targets.push(Target {
                name: format!("1 committer p50 / raw fdatasync p50 ({redo_bytes} B)"),
                value: latency,
                limit: "<= 1.2".into(),
                met: latency <= 1.2,
            });
            let scaling = many.commits_per_s / one.commits_per_s;
            targets.push(Target {
                name: format!("64 committers / 1 committer commits/s ({redo_bytes} B)"),
                value: scaling,
                limit: ">= 20".into(),
                met: scaling >= 20.0,
            });
        }
    }
    for case in cases.iter().filter(|case| case.redo_bytes == 1 << 20) {
        let ratio = case.mb_per_s / case.raw.mb_per_s;
        targets.push(Target {
            name: format!("{} / raw 1 MiB fdatasync bandwidth", case.name),
            value: ratio,
            limit: ">= 0.85".into(),
            met: ratio >= 0.85,
        });
    }
    Ok(BenchCommitReport {
        dir: config.dir.display().to_string(),
        filesystem,
        fdatasync_p50_us: first.fdatasync_p50_us,
        direct_p50_us,
        cases,
        targets,
    })
}

pub fn render(report: &BenchCommitReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench commit on {} ({}): raw 4 KiB fdatasync p50 {:.0} µs{}",
        report.dir,
        report.filesystem,
        report.fdatasync_p50_us,
        crate::bench_resp::direct_note(report.direct_p50_us)
    );
    let _ = writeln!(
        out,
        "  {:<52} {:>10} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10}",
        "case", "commits/s", "p50 µs", "p99 µs", "MB/s", "per wr", "raw p50", "raw MB/s"
    );
    for case in &report.cases {
        let _ = writeln!(
            out,
            "  {:<52} {:>10.0} {:>9.0} {:>9.0} {:>9.1} {:>8.1} {:>10.0} {:>10.1}",
            case.name,
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            case.mb_per_s,
            case.commits_per_write,
            case.raw.fdatasync_p50_us,
            case.raw.mb_per_s
        );
    }
    let _ = writeln!(out, "targets:");
    for target in &report.targets {
        let _ = writeln!(
            out,
            "  {:<4} {:<70} {:>8.2} (target {})",
            if target.met { "met" } else { "MISS" },
            target.name,
            target.value,
            target.limit
        );
    }
    out
}
