//! Byte-identical archives, on the real binary: 100 000 commits from many pipelining clients
//! to a primary with a SYNC AFFIRM standby, small logs so that they switch many times, log
//! switches forced in between (POST /logswitch) and at the end; then every log the primary
//! archived is on the standby, byte for byte the same, and both hold the same data.

mod common;
mod replication_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::Watchdog;
use replication_support::{Pair, PairConfig, block_on, destination};
use transport::Phase;

const COMMITS: u64 = 100_000;
const CLIENTS: u64 = 50;
/// SETs sent at once by a client: each its own commit, all in flight together.
const PIPELINE: u64 = 125;
/// Log switches forced while the load runs, evenly spread.
const FORCED_SWITCHES: u64 = 3;

fn client(addr: SocketAddr, number: u64, committed: &AtomicU64) {
    let mut connection = common::redis_connection(addr);
    let per_client = COMMITS / CLIENTS;
    for batch in 0..per_client / PIPELINE {
        let mut pipe = redis::pipe();
        for index in 0..PIPELINE {
            let key = format!("k:{number}:{}", batch * PIPELINE + index);
            pipe.cmd("SET").arg(&key).arg(replication_support::value_of(&key)).ignore();
        }
        pipe.query::<()>(&mut connection)
            .unwrap_or_else(|error| panic!("client {number}: {error}"));
        committed.fetch_add(PIPELINE, Ordering::Release);
    }
}

#[test]
fn a_hundred_thousand_commits_leave_byte_identical_archives_on_the_standby() {
    let _watchdog = Watchdog::new(Duration::from_secs(80), "the archives test");
    let started = Instant::now();
    let pair =
        Pair::start(PairConfig { log_file_size: "4MiB", groups: 4, ..PairConfig::default() });
    pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
    let first = pair.primary().status();
    let commits_before = first.metrics.stat("user commits");
    let switches_before = first.metrics.stat("redo log switches");

    let load_started = Instant::now();
    let committed = Arc::new(AtomicU64::new(0));
    let addr = pair.primary().resp_addr();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|number| {
            let committed = committed.clone();
            std::thread::spawn(move || client(addr, number, &committed))
        })
        .collect();
    let admin = pair.primary().admin_addr().to_string();
    for switch in 1..=FORCED_SWITCHES {
        let target = COMMITS * switch / (FORCED_SWITCHES + 1);
        common::wait_until(Duration::from_secs(60), "the load to progress", || {
            committed.load(Ordering::Acquire) >= target || clients.iter().all(|c| c.is_finished())
        });
        server::status::http_post(&admin, "/logswitch", Duration::from_secs(30))
            .unwrap_or_else(|error| panic!("POST /logswitch: {error:#}\n{}", pair.logs()));
    }
    for client in clients {
        client.join().expect("a client failed");
    }
    let load_took = load_started.elapsed();
    assert_eq!(committed.load(Ordering::Acquire), COMMITS);
    let status = pair.primary().status();
    assert_eq!(status.metrics.stat("user commits") - commits_before, COMMITS);
    let destination_now = destination(&status);
    assert_eq!(destination_now.phase, Phase::Synchronized, "{destination_now:?}");
    assert_eq!(destination_now.failures, 0, "{destination_now:?}");

    // The final switch closes the last log; the standby then holds every archived log.
    let archived = block_on(workload::demo::switch_and_wait_archived(
        pair.primary().admin_addr(),
        pair.standby().admin_addr(),
        &pair.primary_dir.join("archive"),
        &pair.standby_dir.join("archive"),
        Duration::from_secs(30),
    ))
    .unwrap_or_else(|error| panic!("{error:#}\n{}", pair.logs()));
    let switches = pair.primary().status().metrics.stat("redo log switches") - switches_before;
    assert!(
        switches > FORCED_SWITCHES + 1,
        "only {switches} log switches: the load should fill logs too"
    );
    let standby_archive = pair.standby_dir.join("archive");
    let differing = workload::demo::differing_archives(&archived, &standby_archive).unwrap();
    assert!(differing.is_empty(), "archived logs differ on the standby: {differing:?}");
    let standby_names = workload::demo::archive_files(&standby_archive).unwrap();
    assert_eq!(
        standby_names.iter().map(|path| path.file_name().unwrap()).collect::<Vec<_>>(),
        archived.iter().map(|path| path.file_name().unwrap()).collect::<Vec<_>>(),
        "the standby archived other sequences than the primary"
    );
    let bytes: u64 = archived.iter().map(|path| replication_support::file_len(path)).sum();
    let ours = block_on(workload::demo::all_data(pair.primary().resp_addr())).unwrap();
    let theirs = block_on(workload::demo::all_data(pair.standby().resp_addr())).unwrap();
    assert_eq!(ours.len() as u64, COMMITS);
    assert!(ours == theirs, "the standby's data differs from the primary's");
    println!(
        "{COMMITS} commits in {load_took:.1?} ({:.0}/s), {switches} log switches; {} archived logs \
         ({bytes} bytes) byte-identical on the standby; {} keys equal; in {:.1?}",
        COMMITS as f64 / load_took.as_secs_f64(),
        archived.len(),
        ours.len(),
        started.elapsed()
    );
    pair.stop();
}
