//! A standby killed with SIGKILL under load and restarted, on the real binary: the primary
//! (SYNC AFFIRM, Maximum Availability) goes on committing without it; while it is down the
//! primary switches logs until the log the standby was receiving is no longer online there,
//! so the standby's missing sequences can only come from the primary's archive. Restarted, it
//! catches up by itself (killed once more soon after its restart, most likely in the middle
//! of that) and becomes synchronized again; no acknowledged write is lost, and both databases
//! and all their archived logs end up identical.

mod common;
mod replication_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replication_support::{Pair, PairConfig, block_on, destination};
use transport::Phase;

const CLIENTS: usize = 4;
/// Log switches forced while the standby is down: more than the primary has groups.
const SWITCHES_WHILE_DOWN: usize = 5;
const CYCLES: usize = 3;

#[test]
fn a_standby_killed_under_load_catches_up_from_the_archive_and_loses_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(80), "the standby restart test");
    let started = Instant::now();
    let seed = common::seed();
    println!("seed {seed} (set REDOGUARD_TEST_SEED to replay the same choices)");
    let mut rng = StdRng::seed_from_u64(seed);
    let config = PairConfig {
        // A commit waits at most this for the dead standby (its sockets are reset at once
        // anyway, by the kernel, when it dies).
        net_timeout: Duration::from_secs(5),
        groups: 3,
        ..PairConfig::default()
    };
    let mut pair = Pair::start(config);
    pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
    let load = replication_support::Load::start(
        replication_support::connections(pair.primary().resp_addr(), CLIENTS),
        "load",
        rng.random(),
    );
    let mut written_while_down = std::collections::BTreeSet::new();
    for cycle in 0..CYCLES {
        // The first kill lands under load on a synchronized standby; the next ones as soon as
        // the primary is back in touch with the restarted standby: most likely while it is
        // still catching up from the archive.
        let at_kill = if cycle == 0 {
            std::thread::sleep(Duration::from_millis(rng.random_range(200..800)));
            assert!(load.wait_for_more(1, Duration::from_secs(20)), "no commits\n{}", pair.logs());
            destination(&pair.primary().status()).clone()
        } else {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let now = destination(&pair.primary().status()).clone();
                if matches!(now.phase, Phase::CatchingUp | Phase::Synchronized) {
                    break now;
                }
                assert!(Instant::now() < deadline, "no reconnection\n{}", pair.logs());
            }
        };
        // What the standby holds for sure, as the primary knows it.
        let (receiving, phase_at_kill) = (at_kill.acknowledged.seq, at_kill.phase);
        pair.kill_standby();
        let killed_at = Instant::now();
        let acknowledged_at_kill = load.acknowledged();

        // The primary goes on without it: commits are acknowledged, and logs switched.
        assert!(
            load.wait_for_more(200, Duration::from_secs(15)),
            "commits stalled after the standby's kill -9\n{}",
            pair.logs()
        );
        let admin = pair.primary().admin_addr().to_string();
        for _ in 0..SWITCHES_WHILE_DOWN {
            server::status::http_post(&admin, "/logswitch", Duration::from_secs(30))
                .unwrap_or_else(|error| panic!("POST /logswitch: {error:#}\n{}", pair.logs()));
            assert!(
                load.wait_for_more(50, Duration::from_secs(15)),
                "commits stalled\n{}",
                pair.logs()
            );
        }
        let primary_now = pair.primary().status();
        assert_ne!(
            destination(&primary_now).phase,
            Phase::Synchronized,
            "synchronized with a dead standby"
        );
        assert_eq!(primary_now.replication.synchronized, Some(false));
        // The log the standby was receiving is gone from the primary's online logs (its group
        // was reused): catching up must read it, and those after it, from the archive.
        let online: Vec<u64> = primary_now
            .database
            .redo
            .groups
            .iter()
            .filter_map(|group| group.seq.map(|seq| seq.0))
            .collect();
        assert!(
            !online.contains(&receiving.0),
            "log {receiving} the standby was receiving is still online on the primary \
             ({online:?}); switch more so that it is read from the archive"
        );
        written_while_down.extend(receiving.0.max(1)..primary_now.database.redo.durable_addr.seq.0);
        println!(
            "cycle {cycle}: standby killed ({phase_at_kill:?}) holding up to log {receiving}; {} \
             writes acknowledged without it in {:.1?}; primary now at log {} (online {online:?})",
            load.acknowledged() - acknowledged_at_kill,
            killed_at.elapsed(),
            primary_now.database.redo.durable_addr.seq
        );
        pair.start_standby();
    }

    // Restarted, the standby catches up by itself while the load goes on.
    let restarted_at = Instant::now();
    pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
    let caught_up_in = restarted_at.elapsed();
    assert!(
        load.wait_for_more(200, Duration::from_secs(15)),
        "commits stalled once the standby was back\n{}",
        pair.logs()
    );
    assert!(!load.any_stopped(), "a client failed\n{}", pair.logs());
    let logs = load.stop();
    for log in &logs {
        assert!(log.error.is_none(), "a client failed: {:?}\n{}", log.error, pair.logs());
    }
    let synchronized = pair.primary().status();
    assert_eq!(destination(&synchronized).failures, 0, "{:?}", destination(&synchronized));

    // Everything acknowledged is on both; both hold the same data and archived logs.
    let archived = block_on(workload::demo::switch_and_wait_archived(
        pair.primary().admin_addr(),
        pair.standby().admin_addr(),
        &pair.primary_dir.join("archive"),
        &pair.standby_dir.join("archive"),
        Duration::from_secs(30),
    ))
    .unwrap_or_else(|error| panic!("{error:#}\n{}", pair.logs()));
    let standby_archive = pair.standby_dir.join("archive");
    for seq in &written_while_down {
        let name = format!("1_{seq:010}.arc");
        assert!(
            archived.iter().any(|path| path.ends_with(&name))
                && standby_archive.join(&name).exists(),
            "log {seq}, written while the standby was down, is not archived on both"
        );
    }
    let differing = workload::demo::differing_archives(&archived, &standby_archive).unwrap();
    assert!(differing.is_empty(), "archived logs differ on the standby: {differing:?}");
    let checked = replication_support::verify_acknowledged(
        &mut pair.standby().redis(),
        &logs,
        "the restarted standby",
    );
    replication_support::verify_acknowledged(&mut pair.primary().redis(), &logs, "the primary");
    let ours = block_on(workload::demo::all_data(pair.primary().resp_addr())).unwrap();
    let theirs = block_on(workload::demo::all_data(pair.standby().resp_addr())).unwrap();
    assert_eq!(ours.len(), theirs.len(), "key counts differ");
    assert!(ours == theirs, "the standby's data differs from the primary's");
    println!(
        "standby restarted and synchronized again in {caught_up_in:.1?}; {checked} acknowledged \
         writes on both; {} keys and {} archived logs (logs {written_while_down:?} written \
         while it was down) identical, in {:.1?}",
        ours.len(),
        archived.len(),
        started.elapsed()
    );
    pair.stop();
}
