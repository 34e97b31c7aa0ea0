//! iotest: what "RFS write" will cost on a standby's disk. Sequential writes of one size
//! into a preallocated file (zeros written and synced first, then overwritten in place,
//! as a standby redo log is), each made durable with fdatasync, O_DSYNC or
//! O_DIRECT + O_DSYNC, by one or more jobs each at queue depth 1.
//!
//! ```no_run
//! use tools::iotest::{IoTestConfig, SyncMethod};
//! # fn main() -> Result<(), tools::iotest::IoTestError> {
//! let mut config = IoTestConfig::new("/var/lib/redoguard", 4096, SyncMethod::Fdatasync);
//! config.writes = Some(2000); // a short run: 2000 writes or the duration, whichever first
//! let report = tools::iotest::run(&config)?;
//! println!("p50 {:.0} µs, {:.0} IOPS", report.lat_p50_us, report.iops);
//! # Ok(())
//! # }
//! ```

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::fileio::{self, AlignedBuffer};
use crate::units::{ByteSize, parse_duration};

/// Largest single write.
pub const WRITE_BYTES_MAX: u64 = 64 << 20;
/// Most jobs.
pub const JOBS_MAX: u32 = 64;
/// Largest file per job.
pub const FILE_BYTES_MAX: u64 = 64 << 30;
/// Default file per job: big enough that a run of seconds rarely wraps, small enough to
/// prepare in well under a second.
pub const FILE_BYTES_DEFAULT: u64 = 64 << 20;
/// O_DIRECT needs writes in whole logical blocks; 512 is the smallest block any disk has.
pub const DIRECT_BLOCK_BYTES: u64 = 512;

/// How each write is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SyncMethod {
    /// `pwrite` then `fdatasync` (what redoguard's log writer and receiver do where the file
    /// system refuses O_DIRECT, or with `io_mode = "fdatasync"`).
    Fdatasync,
    /// File opened with `O_DSYNC`: each `pwrite` returns once durable.
    Dsync,
    /// `O_DIRECT | O_DSYNC`: bypass the page cache too (aligned buffers, whole blocks; what
    /// redoguard's log writer and receiver do by default where the file system takes it).
    Direct,
}

impl SyncMethod {
    fn open_flags(self) -> i32 {
        match self {
            SyncMethod::Fdatasync => 0,
            SyncMethod::Dsync => libc::O_DSYNC,
            SyncMethod::Direct => libc::O_DSYNC | libc::O_DIRECT,
        }
    }
}

/// One iotest run.
#[derive(Debug, Clone, PartialEq)]
pub struct IoTestConfig {
    /// Directory on the disk to test; the files `redoguard-iotest.<job>.dat` are created
    /// there and removed afterwards (unless `keep_files`).
    pub dir: PathBuf,
    /// Bytes per write. Bounds: 1..=64 MiB; a multiple of 512 with `Direct`.
    pub write_bytes: u64,
    pub method: SyncMethod,
    /// Parallel writers, each at queue depth 1 on its own file. Default: 1. Bounds: 1..=64.
    pub jobs: u32,
    /// Stop after this long. Default: 10 s. Bounds: at most 24 h.
    pub duration: Duration,
    /// Or after this many writes in total (over all jobs), whichever comes first.
    /// Default: none.
    pub writes: Option<u64>,
    /// File size per job; writes wrap around to its start. Default: 64 MiB, or less when
    /// `writes` needs less. Bounds: at least one write, at most 64 GiB.
    pub file_bytes: Option<u64>,
    /// Leave the files in place (a second run then skips preallocation). Default: false.
    pub keep_files: bool,
}

impl IoTestConfig {
    pub fn new(dir: impl Into<PathBuf>, write_bytes: u64, method: SyncMethod) -> IoTestConfig {
        IoTestConfig {
            dir: dir.into(),
            write_bytes,
            method,
            jobs: 1,
            duration: Duration::from_secs(10),
            writes: None,
            file_bytes: None,
            keep_files: false,
        }
    }

    pub fn validate(&self) -> Result<(), IoTestError> {
        let invalid = |field, reason: String| Err(IoTestError::Config { field, reason });
        if !(1..=WRITE_BYTES_MAX).contains(&self.write_bytes) {
            return invalid(
                "size",
                format!("{} bytes is outside 1 byte..=64 MiB", self.write_bytes),
            );
        }
        if self.method == SyncMethod::Direct && !self.write_bytes.is_multiple_of(DIRECT_BLOCK_BYTES)
        {
            return invalid(
                "size",
                format!(
                    "{} bytes: O_DIRECT writes whole blocks, use a multiple of 512",
                    self.write_bytes
                ),
            );
        }
        if !(1..=JOBS_MAX).contains(&self.jobs) {
            return invalid("jobs", format!("{} is outside 1..={JOBS_MAX}", self.jobs));
        }
        if self.duration.is_zero() || self.duration > Duration::from_secs(24 * 3600) {
            return invalid("duration", format!("{:?} is outside (0, 24h]", self.duration));
        }
        if self.writes == Some(0) {
            return invalid("writes", "at least one write".into());
        }
        let file_bytes = self.effective_file_bytes();
        if file_bytes < self.write_bytes || file_bytes > FILE_BYTES_MAX {
            return invalid(
                "file-size",
                format!(
                    "{file_bytes} bytes must hold one write ({} bytes) and be at most 64 GiB",
                    self.write_bytes
                ),
            );
        }
        Ok(())
    }

    /// The file size per job this run uses.
    pub fn effective_file_bytes(&self) -> u64 {
        if let Some(bytes) = self.file_bytes {
            return bytes;
        }
        let needed = self
            .writes
            .map(|writes| writes.div_ceil(self.jobs as u64).saturating_mul(self.write_bytes))
            .unwrap_or(u64::MAX);
        let bytes = needed.min(FILE_BYTES_DEFAULT).max(self.write_bytes);
        // Whole writes, so that wrapping never splits one.
        bytes - bytes % self.write_bytes
    }
}

/// Everything iotest can refuse or fail at, naming what.
#[derive(Debug, thiserror::Error)]
pub enum IoTestError {
    #[error("invalid iotest setting '--{field}': {reason}")]
    Config { field: &'static str, reason: String },
    #[error(
        "the filesystem at {dir} ({filesystem}) refuses O_DIRECT; use --method dsync or fdatasync, or a directory on a disk"
    )]
    DirectRefused { dir: PathBuf, filesystem: String },
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// What a run measured. MB = 1,000,000 bytes; latencies in µs, per write including its
/// sync.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoTestReport {
    pub dir: PathBuf,
    /// Filesystem type of `dir` (ext4, xfs, tmpfs, …).
    pub filesystem: String,
    pub method: SyncMethod,
    pub write_bytes: u64,
    pub jobs: u32,
    pub file_bytes: u64,
    pub writes: u64,
    pub elapsed_s: f64,
    /// Time spent preallocating (not part of the measurement).
    pub prepare_s: f64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_max_us: f64,
    pub lat_mean_us: f64,
}

/// Runs the test; a short run (`writes: Some(500)`) takes well under a second on a disk
/// with sub-millisecond syncs.
pub fn run(config: &IoTestConfig) -> Result<IoTestReport, IoTestError> {
    config.validate()?;
    let io = |what: String| move |source| IoTestError::Io { what, source };
    let filesystem =
        filesystem_name(&config.dir).map_err(io(format!("inspect {}", config.dir.display())))?;
    let file_bytes = config.effective_file_bytes();
    let prepare_start = Instant::now();
    let paths: Vec<PathBuf> = (0..config.jobs)
        .map(|job| config.dir.join(format!("redoguard-iotest.{job}.dat")))
        .collect();
    let mut files = Vec::with_capacity(paths.len());
    let cleanup = |paths: &[PathBuf]| {
        if !config.keep_files {
            paths.iter().for_each(|path| drop(std::fs::remove_file(path)));
        }
    };
    for path in &paths {
        match fileio::preallocate(path, file_bytes, config.method.open_flags()) {
            Ok(file) => files.push(file),
            Err(error) => {
                cleanup(&paths);
                return Err(open_error(config, &filesystem, path, error));
            }
        }
    }
    let prepare_s = prepare_start.elapsed().as_secs_f64();

    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let deadline = start + config.duration;
    let results: Vec<Result<Histogram<u64>, IoTestError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(job, file)| {
                let quota = config.writes.map(|writes| {
                    writes / config.jobs as u64
                        + u64::from((job as u64) < writes % config.jobs as u64)
                });
                let (stop, path) = (&stop, &paths[job]);
                scope.spawn(move || {
                    let result = write_loop(file, config, file_bytes, quota, deadline, stop, path);
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    result
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("iotest jobs do not panic")).collect()
    });
    let elapsed_s = start.elapsed().as_secs_f64();
    cleanup(&paths);
    let mut latency = new_histogram();
    for result in results {
        let _ = latency.add(result?);
    }
    let writes = latency.len();
    let us = |ns: u64| ns as f64 / 1000.0;
    Ok(IoTestReport {
        dir: config.dir.clone(),
        filesystem,
        method: config.method,
        write_bytes: config.write_bytes,
        jobs: config.jobs,
        file_bytes,
        writes,
        elapsed_s,
        prepare_s,
        iops: writes as f64 / elapsed_s,
        mb_per_s: (writes * config.write_bytes) as f64 / elapsed_s / 1e6,
        lat_p50_us: us(latency.value_at_quantile(0.5)),
        lat_p99_us: us(latency.value_at_quantile(0.99)),
        lat_max_us: us(latency.max()),
        lat_mean_us: latency.mean() / 1000.0,
    })
}

/// Names the cause when opening a test file fails: `EINVAL` on an `O_DIRECT` open means
/// the filesystem has no direct I/O (tmpfs before Linux 6.6, some FUSE filesystems).
fn open_error(
    config: &IoTestConfig,
    filesystem: &str,
    path: &Path,
    error: std::io::Error,
) -> IoTestError {
    if config.method == SyncMethod::Direct && error.raw_os_error() == Some(libc::EINVAL) {
        return IoTestError::DirectRefused {
            dir: config.dir.clone(),
            filesystem: filesystem.to_string(),
        };
    }
    IoTestError::Io { what: format!("prepare {}", path.display()), source: error }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn write_loop(
    file: &std::fs::File,
    config: &IoTestConfig,
    file_bytes: u64,
    quota: Option<u64>,
    deadline: Instant,
    stop: &AtomicBool,
    path: &Path,
) -> Result<Histogram<u64>, IoTestError> {
    let mut buffer = AlignedBuffer::zeroed(config.write_bytes as usize);
    // Not zeros: a filesystem or device that shortcuts zero pages must not flatter us.
    for (index, byte) in buffer.as_mut_slice().iter_mut().enumerate() {
        *byte = (index as u8).wrapping_mul(31).wrapping_add(7);
    }
    let mut latency = new_histogram();
    let mut offset = 0u64;
    let mut done = 0u64;
    while quota.is_none_or(|quota| done < quota)
        && !stop.load(Ordering::Relaxed)
        && Instant::now() < deadline
    {
        if offset + config.write_bytes > file_bytes {
            offset = 0;
        }
        let began = Instant::now();
        file.write_all_at(buffer.as_slice(), offset).map_err(|source| IoTestError::Io {
            what: format!(
                "write {} bytes at offset {offset} of {}",
                config.write_bytes,
                path.display()
            ),
            source,
        })?;
        if config.method == SyncMethod::Fdatasync {
            file.sync_data().map_err(|source| IoTestError::Io {
                what: format!("fdatasync {}", path.display()),
                source,
            })?;
        }
        let _ = latency.record((began.elapsed().as_nanos() as u64).max(1));
        offset += config.write_bytes;
        done += 1;
    }
    Ok(latency)
}

/// The filesystem type of `dir`, by its statfs magic number.
pub fn filesystem_name(dir: &Path) -> std::io::Result<String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path with a NUL byte")
    })?;
    // SAFETY: statfs fills a zeroed struct from a NUL-terminated path.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(match stat.f_type as i64 {
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        0x6969 => "nfs".into(),
        0x0187 => "autofs".into(),
        0x6573_5546 => "fuse".into(),
        other => format!("unknown (magic {other:#x})"),
    })
}

/// `redoguard iotest`.
#[derive(Debug, Clone, clap::Args)]
pub struct IoTestArgs {
    /// Directory on the disk to test (the standby's log directory).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Bytes per write; several sizes (comma-separated) run one after the other.
    #[arg(long, default_value = "4KiB", value_delimiter = ',')]
    pub size: Vec<ByteSize>,
    /// How each write is made durable.
    #[arg(long, value_enum, default_value = "fdatasync")]
    pub method: SyncMethod,
    /// Parallel writers, each at queue depth 1.
    #[arg(long, default_value_t = 1)]
    pub jobs: u32,
    /// How long each size runs.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Or stop after this many writes, whichever first.
    #[arg(long)]
    pub writes: Option<u64>,
    /// File size per job (default 64MiB or what --writes needs).
    #[arg(long)]
    pub file_size: Option<ByteSize>,
    /// Keep the test files.
    #[arg(long)]
    pub keep: bool,
    /// Also write the reports as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl IoTestArgs {
    /// One configuration per size.
    pub fn configs(&self) -> Result<Vec<IoTestConfig>, IoTestError> {
        self.size
            .iter()
            .map(|size| {
                let config = IoTestConfig {
                    jobs: self.jobs,
                    duration: self.duration,
                    writes: self.writes,
                    file_bytes: self.file_size.map(ByteSize::bytes),
                    keep_files: self.keep,
                    ..IoTestConfig::new(self.dir.clone(), size.bytes(), self.method)
                };
                config.validate()?;
                Ok(config)
            })
            .collect()
    }
}

impl IoTestReport {
    /// Remarks a person should read next to the figures.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.filesystem == "tmpfs" {
            notes.push(format!(
                "{} is tmpfs (memory): these figures say nothing about a disk",
                self.dir.display()
            ));
        }
        if self.writes < 100 {
            notes.push(format!(
                "only {} writes: percentiles from so few samples are rough",
                self.writes
            ));
        }
        notes
    }

    pub fn heading() -> String {
        format!(
            "{:>10} {:>10} {:>5} {:>9} {:>10} {:>9} {:>10} {:>10} {:>10}",
            "size", "method", "jobs", "writes", "IOPS", "MB/s", "p50 µs", "p99 µs", "max µs"
        )
    }

    pub fn line(&self) -> String {
        format!(
            "{:>10} {:>10} {:>5} {:>9} {:>10.0} {:>9.2} {:>10.1} {:>10.1} {:>10.1}",
            crate::units::format_bytes(self.write_bytes),
            format!("{:?}", self.method).to_lowercase(),
            self.jobs,
            self.writes,
            self.iops,
            self.mb_per_s,
            self.lat_p50_us,
            self.lat_p99_us,
            self.lat_max_us
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_size_follows_the_write_count() {
        let mut config = IoTestConfig::new("/tmp", 4096, SyncMethod::Fdatasync);
        assert_eq!(config.effective_file_bytes(), FILE_BYTES_DEFAULT);
        config.writes = Some(100);
        assert_eq!(config.effective_file_bytes(), 409_600);
        config.jobs = 3;
        assert_eq!(config.effective_file_bytes(), 34 * 4096);
        config.write_bytes = 9400;
        config.writes = None;
        assert_eq!(config.effective_file_bytes() % 9400, 0);
    }

    #[test]
    fn einval_on_an_o_direct_open_names_the_filesystem() {
        let config = IoTestConfig::new("/mnt/x", 4096, SyncMethod::Direct);
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        let text = open_error(&config, "tmpfs", Path::new("/mnt/x/f"), einval).to_string();
        assert_eq!(
            text,
            "the filesystem at /mnt/x (tmpfs) refuses O_DIRECT; use --method dsync or fdatasync, or a directory on a disk"
        );
        let config = IoTestConfig::new("/mnt/x", 4096, SyncMethod::Dsync);
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        assert!(matches!(
            open_error(&config, "tmpfs", Path::new("/f"), einval),
            IoTestError::Io { .. }
        ));
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let base = IoTestConfig::new("/tmp", 4096, SyncMethod::Direct);
        let cases = [
            ("size", IoTestConfig { write_bytes: 1000, ..base.clone() }),
            ("size", IoTestConfig { write_bytes: 0, ..base.clone() }),
            ("jobs", IoTestConfig { jobs: 0, ..base.clone() }),
            ("writes", IoTestConfig { writes: Some(0), ..base.clone() }),
            ("duration", IoTestConfig { duration: Duration::ZERO, ..base.clone() }),
            ("file-size", IoTestConfig { file_bytes: Some(100), ..base.clone() }),
        ];
        for (field, config) in cases {
            match config.validate() {
                Err(IoTestError::Config { field: named, .. }) => assert_eq!(named, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
