//! A full disk, on the real binary: the data directory is a small tmpfs of its own, a
//! ballast file takes most of it, and a client writes large values until the server refuses
//! writes. It must say why (no space), go on serving reads, answer 503 on `/health`, answer a
//! write in flight at once (one whose log switch the failure holds up is told "not durable
//! yet", and written once space returns), accept writes again by itself once space returns,
//! and keep every write it acknowledged across a kill -9.

mod common;

use std::ffi::CString;
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, Tmpfs, Watchdog};

const VALUE_BYTES: usize = 256 << 10;
const CHECKPOINTED_KEYS: i64 = 100;

fn value_of(key: &str) -> Vec<u8> {
    key.bytes().chain(std::iter::once(b'|')).cycle().take(VALUE_BYTES).collect()
}

fn available_bytes(path: &Path) -> u64 {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs with a NUL-terminated path and a pointer to a zeroed local.
    unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(path.as_ptr(), &mut stat), 0);
        stat.f_bavail as u64 * stat.f_frsize as u64
    }
}

/// Writes `bytes` of real data (a sparse file would take no space on tmpfs).
fn write_ballast(path: &Path, bytes: u64) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0x5a; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    file.sync_all().unwrap();
}

/// What the writer saw.
#[derive(Debug, Default)]
struct Writes {
    acknowledged: Vec<String>,
    /// Refused with an error: these must never appear.
    refused: Vec<String>,
    /// In flight when the disk filled: answered at once that they are not durable yet, and
    /// written once space returns (before anything acknowledged after it).
    stalled: Vec<String>,
    /// The longest any SET took to be answered.
    slowest: Duration,
    /// The first refusal's text.
    refusal: Option<String>,
    unexpected: Option<String>,
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Which file system fills up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// The one holding the data files: checkpoints fail (the data file cannot grow).
    DataFiles,
    /// The archive destination's: archiving of filled logs fails.
    Archive,
    /// The data files', with checkpoints made only when a log switch needs one (two small
    /// groups, no timed checkpoints): the first checkpoint that fails holds up the switch that
    /// the commit in flight needs, so that commit is answered "not durable yet".
    DataFilesAtSwitch,
}

#[test]
fn a_full_data_disk_refuses_writes_serves_reads_and_recovers_by_itself() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the full data disk test");
    full_disk(Fill::DataFiles);
}

#[test]
fn a_commit_whose_log_switch_waits_for_a_failing_checkpoint_is_answered_at_once() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the stalled log switch test");
    full_disk(Fill::DataFilesAtSwitch);
}

#[test]
fn a_full_archive_disk_refuses_writes_serves_reads_and_recovers_by_itself() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the full archive disk test");
    full_disk(Fill::Archive);
}

/// Mounts a tmpfs, or says why this machine cannot run the test (only if there is no
/// `mount` at all); panics if not root or if mount fails.
fn tmpfs(size: &str) -> Option<Tmpfs> {
    if std::process::Command::new("mount").arg("--version").output().is_err() {
        println!(
            "SKIPPED: there is no `mount` command on this machine, so this test cannot mount a small file system to fill"
        );
        return None;
    }
    assert!(
        is_root(),
        "this test fills a file system of its own (a tmpfs it mounts), so it must run as root; it is not running as root"
    );
    match Tmpfs::mount(size) {
        Ok(tmpfs) => Some(tmpfs),
        Err(common::NoTmpfs::NoMountCommand(reason)) => {
            println!("SKIPPED: {reason}");
            None
        }
    }
}

fn full_disk(fill: Fill) {
    let outside = tempfile::tempdir().unwrap();
    let log = outside.path().join("server.log");
    // Declared before the server, so dropped after it: nothing holds the mounts by then.
    // The data directory is always on a tmpfs of its own (the logs are preallocated there);
    // the archive is on a second one, or on the ordinary disk when the data files fill.
    let Some(data_fs) = tmpfs("64m") else { return };
    let archive_fs = match fill {
        Fill::Archive => match tmpfs("16m") {
            Some(archive_fs) => Some(archive_fs),
            None => return,
        },
        Fill::DataFiles | Fill::DataFilesAtSwitch => None,
    };
    let archive = match &archive_fs {
        Some(archive_fs) => archive_fs.path.join("archive"),
        None => outside.path().join("archive"),
    };
    let config = outside.path().join("redoguard.toml");
    let (log_layout, checkpoint_interval) = match fill {
        Fill::DataFilesAtSwitch => ("log_file_size = \"1MiB\"\ngroups = 2", "1h"),
        Fill::DataFiles | Fill::Archive => ("log_file_size = \"4MiB\"\ngroups = 3", "200ms"),
    };
    std::fs::write(
        &config,
        format!(
            "[redo]\n{log_layout}\narchive_retry_interval = \"100ms\"\n\
             archive_dests = [\"{}\"]\n\
             [db]\ncheckpoint_interval = \"{checkpoint_interval}\"\ncheckpoint_retry_interval = \"100ms\"\n",
            archive.display()
        ),
    )
    .unwrap();
    let data_dir = data_fs.path.join("data");
    let (filled, cause) = match fill {
        Fill::DataFiles | Fill::DataFilesAtSwitch => (data_fs.path.clone(), "checkpoint failed"),
        Fill::Archive => (archive_fs.as_ref().unwrap().path.clone(), "archiving of log sequence"),
    };
    let server = Server::start(&data_dir, Some(&config), &log);
    let (code, _) = common::http_get(server.admin_addr(), "/health");
    assert_eq!(code, 200);

    // Keys that a checkpoint has put in the data file before the disk fills: reading them
    // while it is full reads the data file, not only changes held in memory.
    let mut client = server.redis();
    for i in 0..CHECKPOINTED_KEYS {
        let _: () = redis::cmd("SET").arg(format!("early:{i}")).arg(i).query(&mut client).unwrap();
    }
    let durable = server.status().database.redo.durable_scn;
    if fill == Fill::DataFilesAtSwitch {
        // Only a log switch into a group still needed checkpoints: fill the two 1 MiB logs.
        for i in 0..12 {
            let key = format!("filler:{i}");
            let _: () = redis::cmd("SET").arg(&key).arg(value_of(&key)).query(&mut client).unwrap();
        }
    }
    common::wait_until(Duration::from_secs(30), "a checkpoint of the early keys", || {
        server.status().database.checkpoint_scn >= durable
    });

    // Leave about 6 MiB: one archived log (4 MiB) or some data file growth fits, not more.
    let ballast = filled.join("ballast");
    let free = available_bytes(&filled);
    write_ballast(&ballast, free.saturating_sub(6 << 20));
    println!(
        "{fill:?}: {} MiB free, the ballast leaves {} MiB",
        free >> 20,
        available_bytes(&filled) >> 20
    );

    let writes = Arc::new(Mutex::new(Writes::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (writes, stop, addr) = (writes.clone(), stop.clone(), server.resp_addr());
        std::thread::spawn(move || {
            // A write in flight when the disk fills is answered promptly too (not once space
            // returns): a reply slower than this is a hang, and fails the test.
            let mut connection =
                common::redis_connection_with_timeout(addr, Duration::from_secs(20));
            for i in 0.. {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                let key = format!("big:{i}");
                let sent = Instant::now();
                let result: redis::RedisResult<()> =
                    redis::cmd("SET").arg(&key).arg(value_of(&key)).query(&mut connection);
                let mut writes = writes.lock().unwrap();
                writes.slowest = writes.slowest.max(sent.elapsed());
                match result {
                    Ok(()) => writes.acknowledged.push(key),
                    Err(error) if error.to_string().contains("is not durable yet") => {
                        if !error.to_string().contains("No space left on device") {
                            writes.unexpected = Some(format!("SET {key} stalled: {error}"));
                            return;
                        }
                        writes.stalled.push(key);
                        drop(writes);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(error) if error.to_string().contains("writes are refused") => {
                        writes.refusal.get_or_insert(error.to_string());
                        writes.refused.push(key);
                        drop(writes);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(error) => {
                        writes.unexpected = Some(format!("SET {key}: {error}"));
                        return;
                    }
                }
            }
        })
    };

    // The disk fills: /health turns 503 with the reason.
    let filling = Instant::now();
    let mut health = String::new();
    common::wait_until(Duration::from_secs(60), "writes to be refused on a full disk", || {
        let (code, body) = common::http_get(server.admin_addr(), "/health");
        health = body;
        assert!(writes.lock().unwrap().unexpected.is_none(), "{:?}", writes.lock().unwrap());
        code == 503
    });
    println!(
        "writes refused after {:.1?} and {} acknowledged writes of {} KiB: {}",
        filling.elapsed(),
        writes.lock().unwrap().acknowledged.len(),
        VALUE_BYTES >> 10,
        health.trim()
    );
    assert!(
        health.contains(cause) && health.contains("No space left on device"),
        "/health must name the cause ({cause}, no space): {health}"
    );

    // New writes are refused, naming the cause; reads and PING go on.
    for i in 0..CHECKPOINTED_KEYS {
        let value: i64 = redis::cmd("GET").arg(format!("early:{i}")).query(&mut client).unwrap();
        assert_eq!(value, i, "GET early:{i} on a full disk");
    }
    let refused = redis::cmd("SET").arg("probe").arg("1").query::<()>(&mut client).unwrap_err();
    let refused = refused.to_string();
    assert!(
        refused.contains("writes are refused")
            && refused.contains(cause)
            && refused.contains("No space left on device"),
        "a write on a full disk: {refused}"
    );
    let first = writes
        .lock()
        .unwrap()
        .acknowledged
        .first()
        .cloned()
        .expect("a write before the disk filled");
    let value: Vec<u8> = redis::cmd("GET").arg(&first).query(&mut client).unwrap();
    assert!(value == value_of(&first), "GET {first} on a full disk");
    let pong: String = redis::cmd("PING").query(&mut client).unwrap();
    assert_eq!(pong, "PONG");
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut client).unwrap();
    let reason = common::info_field(&info, "writes_refused").unwrap();
    assert!(reason.contains("No space left on device"), "INFO writes_refused: {reason}");
    let status = server.status();
    assert!(
        status.server.writes_refused.as_deref().is_some_and(|r| r.contains("No space left")),
        "/status: {:?}",
        status.server.writes_refused
    );
    let (_, metrics) = common::http_get(server.admin_addr(), "/metrics");
    assert!(metrics.contains("\nredoguard_writes_refused 1\n"), "/metrics while refused");
    stop.store(true, Ordering::Release);

    // Space returns: writes are accepted again without anyone asking.
    std::fs::remove_file(&ballast).unwrap();
    let freed = Instant::now();
    let mut last_error = String::new();
    let resumed = common::poll_until(Duration::from_secs(30), || {
        match redis::cmd("SET").arg("probe").arg("after").query::<()>(&mut client) {
            Ok(()) => true,
            Err(error) => {
                last_error = error.to_string();
                false
            }
        }
    });
    assert!(
        resumed,
        "writes still refused 30 s after space returned: {last_error}\nserver log:\n{}",
        server.log_tail()
    );
    println!("writes accepted again {:.1?} after the ballast was deleted", freed.elapsed());
    let (code, body) = common::http_get(server.admin_addr(), "/health");
    assert_eq!(code, 200, "/health once space returned: {body}");
    writer.join().expect("the writer panicked");
    let writes = std::mem::take(&mut *writes.lock().unwrap());
    assert!(writes.unexpected.is_none(), "{:?}", writes.unexpected);
    if fill == Fill::DataFilesAtSwitch {
        assert!(
            !writes.stalled.is_empty(),
            "no commit was answered 'not durable yet' although the failing checkpoint held up a log switch: {writes:?}\n{}",
            server.log_tail()
        );
    }
    if let Some(refusal) = &writes.refusal {
        assert!(
            refusal.contains(cause) && refusal.contains("No space left on device"),
            "{refusal}"
        );
    }

    // Every acknowledged write survives a crash; no refused one appears.
    server.kill();
    let server = Server::start(&data_dir, Some(&config), &log);
    let mut client = server.redis();
    for key in &writes.acknowledged {
        let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut client).unwrap();
        assert!(
            value.is_some_and(|value| value == value_of(key)),
            "acknowledged {key} lost or wrong"
        );
    }
    for key in &writes.refused {
        let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut client).unwrap();
        assert_eq!(exists, 0, "refused {key} is in the database");
    }
    // Told "not durable yet", then written when space returned, before the probe that was
    // acknowledged after it.
    for key in &writes.stalled {
        let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut client).unwrap();
        assert!(
            value.is_some_and(|value| value == value_of(key)),
            "{key}, stalled on the full disk, was not written once space returned"
        );
    }
    for i in 0..CHECKPOINTED_KEYS {
        let value: i64 = redis::cmd("GET").arg(format!("early:{i}")).query(&mut client).unwrap();
        assert_eq!(value, i);
    }
    let probe: String = redis::cmd("GET").arg("probe").query(&mut client).unwrap();
    assert_eq!(probe, "after");
    println!(
        "verified {} acknowledged writes ({} refused ones absent, {} stalled ones written) after kill -9 and restart; the slowest SET was answered in {:.1?}",
        writes.acknowledged.len() + 1 + CHECKPOINTED_KEYS as usize,
        writes.refused.len(),
        writes.stalled.len(),
        writes.slowest
    );
    drop(client);
    drop(server);
    drop(archive_fs);
    drop(data_fs);
}
