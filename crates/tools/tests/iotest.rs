//! iotest on real files: every sync method, several jobs, and a clear refusal of O_DIRECT
//! where the filesystem has none.

use std::time::Duration;

use tools::iotest::{IoTestConfig, IoTestError, SyncMethod, run};

#[test]
fn each_method_measures_the_requested_writes_and_cleans_up() {
    let dir = tempfile::tempdir_in(".").unwrap();
    for method in [SyncMethod::Fdatasync, SyncMethod::Dsync, SyncMethod::Direct] {
        let mut config = IoTestConfig::new(dir.path(), 4096, method);
        config.writes = Some(50);
        let report = match run(&config) {
            Err(IoTestError::DirectRefused { filesystem, .. }) if method == SyncMethod::Direct => {
                eprintln!("the test directory is on {filesystem}, which has no O_DIRECT");
                continue;
            }
            other => other.unwrap(),
        };
        assert_eq!(report.writes, 50);
        assert_eq!(report.file_bytes, 50 * 4096);
        assert!(report.lat_p50_us > 0.0 && report.lat_p50_us <= report.lat_p99_us);
        assert!(report.lat_p99_us <= report.lat_max_us);
        assert!((report.iops * report.elapsed_s - 50.0).abs() < 0.5);
        assert!((report.mb_per_s - report.iops * 4096.0 / 1e6).abs() < 1e-6);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "files left behind");
    }
}

#[test]
fn jobs_split_the_writes_and_a_deadline_stops_a_run() {
    let dir = tempfile::tempdir_in(".").unwrap();
    let mut config = IoTestConfig::new(dir.path(), 12 * 1024, SyncMethod::Fdatasync);
    config.jobs = 3;
    config.writes = Some(31);
    config.keep_files = true;
    let report = run(&config).unwrap();
    assert_eq!(report.writes, 31);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);

    // Wrapping: a file of 4 writes, written 10 times, stays 4 writes long.
    let mut config = IoTestConfig::new(dir.path(), 4096, SyncMethod::Fdatasync);
    config.file_bytes = Some(4 * 4096);
    config.writes = Some(10);
    config.duration = Duration::from_secs(30);
    config.keep_files = true;
    run(&config).unwrap();
    let length = std::fs::metadata(dir.path().join("redoguard-iotest.0.dat")).unwrap().len();
    // Kept from the first run (31 writes over 3 jobs: 11 writes of 12 KiB per file): a
    // file longer than needed is reused as it is.
    assert_eq!(length, 11 * 12 * 1024);

    let mut config = IoTestConfig::new(dir.path(), 4096, SyncMethod::Fdatasync);
    config.duration = Duration::from_millis(200);
    let start = std::time::Instant::now();
    let report = run(&config).unwrap();
    assert!(report.writes > 0);
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
}

#[test]
fn o_direct_on_tmpfs_is_refused_clearly_or_measured_as_memory() {
    let shm = std::path::Path::new("/dev/shm");
    if tools::iotest::filesystem_name(shm).ok().as_deref() != Some("tmpfs") {
        eprintln!("skipping: /dev/shm is not a tmpfs here");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let mut config = IoTestConfig::new(dir.path(), 4096, SyncMethod::Direct);
    config.writes = Some(1);
    // tmpfs refused O_DIRECT until Linux 6.6 and accepts it since.
    match run(&config) {
        Err(error) => {
            let text = error.to_string();
            assert!(text.contains("tmpfs") && text.contains("refuses O_DIRECT"), "{text}");
        }
        Ok(report) => {
            assert_eq!(report.filesystem, "tmpfs");
            assert!(
                report.notes().iter().any(|note| note.contains("memory")),
                "{:?}",
                report.notes()
            );
        }
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "files left behind");
}
