//! Zero data loss with a SYNC AFFIRM standby under Maximum Availability, on the real binary:
//! clients commit under load, the primary is killed with SIGKILL at a random moment, and every
//! write it acknowledged must be readable on the standby (after it applied what it received),
//! round after round. The primary restarts on its data directory each time (crash recovery,
//! then it closes the log it was writing, possibly shorter than what the standby received: the
//! standby drops that tail again), and at the end both databases and their archived logs must
//! be identical. Redo transport runs over mutual TLS, as a deployment across hosts would.

mod common;
mod replication_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replication_support::{ClientLog, Pair, PairConfig, block_on, destination};
use transport::Phase;

const ROUNDS: usize = 8;
const CLIENTS: usize = 6;

#[test]
fn kill_dash_nine_of_the_primary_loses_no_acknowledged_commit_on_a_sync_affirm_standby() {
    let _watchdog = Watchdog::new(Duration::from_secs(80), "the zero data loss test");
    let started = Instant::now();
    let seed = common::seed();
    println!("seed {seed} (set REDOGUARD_TEST_SEED to replay the same choices)");
    let mut rng = StdRng::seed_from_u64(seed);
    let certs = tempfile::tempdir().unwrap();
    replication_support::make_certs(certs.path());
    let mut pair =
        Pair::start(PairConfig { tls: Some(certs.path().to_path_buf()), ..PairConfig::default() });
    let mut all_logs: Vec<ClientLog> = Vec::new();
    for round in 0..ROUNDS {
        pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
        let log_start = replication_support::file_len(&pair.primary_log());
        let load = replication_support::Load::start(
            replication_support::connections(pair.primary().resp_addr(), CLIENTS),
            &format!("r{round}"),
            rng.random(),
        );
        // A random moment under load, right after some acknowledgement.
        std::thread::sleep(Duration::from_millis(rng.random_range(200..1200)));
        assert!(
            load.wait_for_more(1, Duration::from_secs(20)),
            "round {round}: no commit acknowledged for 20 s\n{}",
            pair.logs()
        );
        assert!(
            !load.any_stopped(),
            "round {round}: a client failed before the kill\n{}",
            pair.logs()
        );
        let before_kill = pair.primary().status();
        let pid = pair.primary().pid();
        pair.kill_primary();
        let logs = load.stop();
        // Zero data loss is promised while synchronized: the primary must have stayed so.
        let primary_said = replication_support::log_since(&pair.primary_log(), log_start);
        assert!(
            !primary_said.contains("UNSYNCHRONIZED"),
            "round {round}: the primary left the synchronized set under load:\n{primary_said}"
        );
        assert_eq!(
            destination(&before_kill).phase,
            Phase::Synchronized,
            "round {round}: not synchronized at the kill"
        );

        // A failover applies everything the standby received first.
        block_on(workload::demo::wait_applied_all_received(
            pair.standby().admin_addr(),
            Duration::from_secs(30),
        ))
        .unwrap_or_else(|error| panic!("round {round}: {error:#}\n{}", pair.logs()));
        let mut standby = pair.standby().redis();
        let checked = replication_support::verify_acknowledged(
            &mut standby,
            &logs,
            &format!("round {round}, standby after the primary's kill -9"),
        );
        // Earlier rounds' writes too: the standby dropping a lost tail must not drop them.
        replication_support::verify_acknowledged(
            &mut standby,
            &all_logs,
            "standby, earlier rounds",
        );
        let in_flight = logs.iter().filter(|log| log.in_flight.is_some()).count();
        println!(
            "round {round}: killed pid {pid} after {} acknowledged writes ({in_flight} in flight); \
             all {checked} on the standby; log seq {}",
            replication_support::acknowledged(&logs),
            before_kill.database.redo.durable_addr.seq
        );
        assert!(checked > 0, "round {round}: no write was acknowledged");
        all_logs.extend(logs);
        pair.start_primary();
    }

    // The restarted primary (crash recovery) still holds everything, the standby catches up
    // with it, and then both hold the same data and the same archived logs.
    pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
    let mut primary = pair.primary().redis();
    let total =
        replication_support::verify_acknowledged(&mut primary, &all_logs, "the restarted primary");
    let archived = block_on(workload::demo::switch_and_wait_archived(
        pair.primary().admin_addr(),
        pair.standby().admin_addr(),
        &pair.primary_dir.join("archive"),
        &pair.standby_dir.join("archive"),
        Duration::from_secs(30),
    ))
    .unwrap_or_else(|error| panic!("{error:#}\n{}", pair.logs()));
    let differing =
        workload::demo::differing_archives(&archived, &pair.standby_dir.join("archive")).unwrap();
    assert!(differing.is_empty(), "archived logs differ on the standby: {differing:?}");
    let ours = block_on(workload::demo::all_data(pair.primary().resp_addr())).unwrap();
    let theirs = block_on(workload::demo::all_data(pair.standby().resp_addr())).unwrap();
    if ours != theirs {
        let only_primary: Vec<_> =
            ours.keys().filter(|key| !theirs.contains_key(*key)).take(5).collect();
        let only_standby: Vec<_> =
            theirs.keys().filter(|key| !ours.contains_key(*key)).take(5).collect();
        let different: Vec<_> = ours
            .iter()
            .filter(|(key, value)| theirs.get(*key).is_some_and(|theirs| theirs != *value))
            .map(|(key, _)| key)
            .take(5)
            .collect();
        panic!(
            "the standby's data differs from the primary's ({} vs {} keys): only on the primary {only_primary:?}, only on the standby {only_standby:?}, different values {different:?}",
            ours.len(),
            theirs.len()
        );
    }
    // (How often the standby held redo that the killed primary never made durable.)
    let tails_dropped = std::fs::read_to_string(pair.standby_log())
        .unwrap()
        .matches("closed a log shorter than received here")
        .count();
    println!(
        "{ROUNDS} kill -9 rounds: {total} acknowledged writes all on the standby at each kill; \
         then {} keys and {} archived logs identical on both (the standby dropped a tail the \
         primary lost {tails_dropped} times), in {:.1?}",
        ours.len(),
        archived.len(),
        started.elapsed()
    );
    pair.stop();
}
