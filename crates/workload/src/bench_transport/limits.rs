//! The physical limits of a run: the file system's raw fdatasync and the RTT, measured with
//! no server running (and the fdatasync again around each case).

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use super::PathLimits;
use crate::network::Network;

/// Bytes of the file the raw fdatasync is measured on (kept between measurements, so that
/// only the first one writes it).
const RAW_FILE_BYTES: u64 = 16 << 20;

/// Raw 4 KiB write + fdatasync by `jobs` writers at once, in `work`/raw, for `duration`.
pub(super) fn raw_fdatasync(
    work: &Path,
    jobs: u32,
    duration: Duration,
) -> anyhow::Result<tools::iotest::IoTestReport> {
    let dir = work.join("raw");
    std::fs::create_dir_all(&dir)?;
    let mut iotest =
        tools::iotest::IoTestConfig::new(&dir, 4096, tools::iotest::SyncMethod::Fdatasync);
    iotest.jobs = jobs;
    iotest.duration = duration;
    iotest.file_bytes = Some(RAW_FILE_BYTES);
    iotest.keep_files = true;
    tools::iotest::run(&iotest).with_context(|| format!("measuring fdatasync in {}", dir.display()))
}

/// Raw fdatasync (one writer, then two at once) and the RTT, with no server running. With a
/// directory for the standbys (`standby_work`, another file system): one writer there too, and
/// the two at once are one here and one there.
pub(super) fn measure_limits(
    network: &Network,
    rtt: u32,
    work: &Path,
    standby_work: Option<&Path>,
    case_duration: Duration,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<PathLimits> {
    // 2 s and 1 s, or less for cases shorter than that.
    let one_writer = case_duration.min(Duration::from_secs(2));
    let two_writers = (case_duration / 2).min(Duration::from_secs(1));
    let standby = if standby_work.is_some() { ", here and in standby-dir" } else { "" };
    progress(&format!(
        "RTT {rtt} ms: raw fdatasync (4 KiB; one writer {one_writer:?}, two writers {two_writers:?}{standby}), RTT"
    ));
    let one = raw_fdatasync(work, 1, one_writer)?;
    let (two, standby_one) = match standby_work {
        None => (raw_fdatasync(work, 2, two_writers)?, None),
        Some(standby_work) => {
            let standby_one = raw_fdatasync(standby_work, 1, one_writer)?;
            // The p50 here while one writer runs there.
            let here = std::thread::scope(|scope| {
                let there = scope.spawn(|| raw_fdatasync(standby_work, 1, two_writers));
                let here = raw_fdatasync(work, 1, two_writers);
                there.join().map_err(|_| anyhow::anyhow!("the fdatasync writer panicked"))??;
                here
            })?;
            (here, Some(standby_one.lat_p50_us))
        }
    };
    let rtt_ms = network.measure_rtt_ms()?;
    Ok(PathLimits {
        rtt_set_ms: rtt,
        rtt_ms,
        fdatasync_p50_us: one.lat_p50_us,
        fdatasync_p99_us: one.lat_p99_us,
        fdatasync_two_writers_p50_us: two.lat_p50_us,
        standby_fdatasync_p50_us: standby_one,
    })
}
