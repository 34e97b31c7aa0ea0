//! A cut network link between a primary and its SYNC AFFIRM standby, on the real binary: the
//! primary runs in one network namespace of a linkemu link, the standby in the other, so that
//! all their redo crosses the emulated link, which the test cuts (every packet dropped, as
//! with a pulled cable) and restores.
//!
//! - Maximum Availability: commits stall for at most about `net_timeout`, then go on without
//!   the standby (status: not synchronized); once the link is back the standby catches up and
//!   the primary is synchronized again by itself; nothing acknowledged is missing on it.
//! - Maximum Protection: a commit issued during the cut does not complete, however long the
//!   cut lasts (well past `net_timeout`); once the link is back it completes, and its write is
//!   on the standby.
//!
//! linkemu needs root, `/dev/net/tun` and `ip`: without them these tests fail, saying why.

mod common;
mod replication_support;

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Server, Watchdog};
use linkemu::{Link, LinkConfig, Side};
use rand::{Rng, SeedableRng};
use replication_support::{Load, PairConfig, block_on, destination};
use transport::Phase;

/// One test at a time: both measure stalls against `net_timeout` on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

const NET_TIMEOUT: Duration = Duration::from_secs(2);
/// What a stall may exceed `net_timeout` by on a busy machine.
const MARGIN: Duration = Duration::from_millis(1500);

/// A primary in side A of a link and its standby in side B.
struct LinkedPair {
    primary: Server,
    standby: Server,
    /// Dropped after the servers (killed first), before the directory.
    link: Link,
    root: tempfile::TempDir,
}

impl LinkedPair {
    fn start(protection_mode: &'static str) -> LinkedPair {
        if let Some(reason) = linkemu::unavailable_reason() {
            panic!("this test needs linkemu, which cannot run here: {reason}");
        }
        let link = Link::up(LinkConfig { rtt: Duration::from_millis(2), ..LinkConfig::default() })
            .unwrap_or_else(|error| panic!("bringing the link up: {error}"));
        let config = PairConfig {
            protection_mode,
            net_timeout: NET_TIMEOUT,
            reopen: Duration::from_millis(200),
            ..PairConfig::default()
        };
        let root = tempfile::tempdir().unwrap();
        // Beyond loopback, as protected mode wants it: redo over mutual TLS.
        let certs = root.path().join("certs");
        replication_support::make_certs(&certs);
        let config = PairConfig { tls: Some(certs), ..config };
        let standby_config = root.path().join("standby.toml");
        let listen = format!("{}:0", link.address(Side::B));
        std::fs::write(&standby_config, config.standby_text(&listen)).unwrap();
        let standby = link
            .run_in(Side::B, || {
                Server::start(
                    &root.path().join("standby"),
                    Some(&standby_config),
                    &root.path().join("standby.log"),
                )
            })
            .expect("enter side B");
        let redo_addr = link
            .run_in(Side::B, || replication_support::redo_listener(&standby))
            .expect("enter side B");
        assert_eq!(redo_addr.ip(), link.address(Side::B));
        let primary_config = root.path().join("primary.toml");
        std::fs::write(&primary_config, config.primary_text(&redo_addr.to_string())).unwrap();
        let primary = link
            .run_in(Side::A, || {
                Server::start(
                    &root.path().join("primary"),
                    Some(&primary_config),
                    &root.path().join("primary.log"),
                )
            })
            .expect("enter side A");
        LinkedPair { primary, standby, link, root }
    }

    /// Runs `work` in the primary's namespace (A), where its ports are.
    fn on_primary<R: Send>(&self, work: impl FnOnce(&Server) -> R + Send) -> R {
        self.link.run_in(Side::A, || work(&self.primary)).expect("enter side A")
    }

    /// Runs `work` in the standby's namespace (B).
    fn on_standby<R: Send>(&self, work: impl FnOnce(&Server) -> R + Send) -> R {
        self.link.run_in(Side::B, || work(&self.standby)).expect("enter side B")
    }

    fn primary_status(&self) -> server::ServerStatus {
        self.on_primary(Server::status)
    }

    fn logs(&self) -> String {
        let log = |name: &str| common::tail(&self.root.path().join(name), 25);
        format!(
            "--- primary log:\n{}\n--- standby log:\n{}",
            log("primary.log"),
            log("standby.log")
        )
    }

    fn primary_log(&self) -> std::path::PathBuf {
        self.root.path().join("primary.log")
    }

    fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        condition: impl Fn(&server::ServerStatus) -> bool,
    ) {
        let reached = common::poll_until(limit, || condition(&self.primary_status()));
        if !reached {
            panic!(
                "waited {limit:?} for {what}: {:?}\n{}",
                destination(&self.primary_status()),
                self.logs()
            );
        }
    }

    fn wait_synchronized(&self, limit: Duration) {
        self.wait_for("the destination to be synchronized", limit, |status| {
            destination(status).phase == Phase::Synchronized
                && status.replication.synchronized == Some(true)
        });
    }

    /// Redis connections to the primary, made in its namespace.
    fn primary_connections(&self, count: usize) -> Vec<redis::Connection> {
        self.on_primary(|primary| replication_support::connections(primary.resp_addr(), count))
    }

    /// Once the standby applied all it received: the writes of `logs` are all there, and
    /// both databases hold the same keys and values.
    fn verify_standby(&self, logs: &[replication_support::ClientLog]) -> u64 {
        let standby_admin = self.standby.admin_addr();
        self.on_standby(|standby| {
            block_on(workload::demo::wait_applied_all_received(
                standby_admin,
                Duration::from_secs(30),
            ))
            .unwrap_or_else(|error| panic!("{error:#}"));
            replication_support::verify_acknowledged(&mut standby.redis(), logs, "the standby")
        })
    }

    fn assert_same_data(&self) -> usize {
        let data = |addr: SocketAddr| block_on(workload::demo::all_data(addr)).unwrap();
        let standby_admin = self.standby.admin_addr();
        // Everything durable on the primary is applied on the standby first.
        let durable = self.primary_status().database.redo.durable_scn;
        let applied = self.on_standby(|_| {
            let reached = common::poll_until(Duration::from_secs(30), || {
                workload::process::status_at(standby_admin).unwrap().database.applied_scn >= durable
            });
            assert!(reached, "the standby did not apply up to SCN {durable}");
            data(self.standby.resp_addr())
        });
        let ours = self.on_primary(|primary| data(primary.resp_addr()));
        assert_eq!(ours.len(), applied.len(), "key counts differ");
        assert!(ours == applied, "the standby's data differs from the primary's");
        ours.len()
    }
}

#[test]
fn maximum_availability_goes_on_without_a_cut_off_standby_and_resynchronizes_by_itself() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog =
        Watchdog::new(Duration::from_secs(60), "the Maximum Availability link cut test");
    let started = Instant::now();
    let seed = common::seed();
    println!("seed {seed} (set REDOGUARD_TEST_SEED to replay the same choices)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let pair = LinkedPair::start("maximum_availability");
    pair.wait_synchronized(Duration::from_secs(30));
    let load = Load::start(pair.primary_connections(3), "ma", rng.random());
    assert!(load.wait_for_more(100, Duration::from_secs(20)), "no commits\n{}", pair.logs());

    // Cut: commits stall until the standby is dropped from the synchronized set, then go on.
    pair.link.cut();
    let cut_at = Instant::now();
    assert!(
        load.wait_for_more(100, NET_TIMEOUT + MARGIN + Duration::from_secs(5)),
        "commits did not go on after the cut\n{}",
        pair.logs()
    );
    let resumed_after = cut_at.elapsed();
    let status = pair.primary_status();
    let cut_off = destination(&status);
    assert_ne!(cut_off.phase, Phase::Synchronized, "{cut_off:?}");
    assert_eq!(status.replication.synchronized, Some(false), "{cut_off:?}");
    assert!(cut_off.last_error.is_some(), "no reason given: {cut_off:?}");
    // And go on for as long as the cut lasts, without stalling again.
    let during = load.acknowledged();
    std::thread::sleep(NET_TIMEOUT);
    assert!(load.acknowledged() > during + 100, "commits stalled again during the cut");
    assert_ne!(destination(&pair.primary_status()).phase, Phase::Synchronized);

    // Restore: the standby catches up and the primary is synchronized again, by itself.
    pair.link.restore();
    let restored_at = Instant::now();
    pair.wait_synchronized(Duration::from_secs(30));
    let resynchronized_after = restored_at.elapsed();
    assert!(load.wait_for_more(100, Duration::from_secs(20)), "no commits after the restore");
    assert!(!load.any_stopped(), "a client failed\n{}", pair.logs());
    let logs = load.stop();
    let slowest = logs.iter().map(|log| log.latency_max).max().unwrap();
    for log in &logs {
        assert!(log.error.is_none(), "{:?}", log.error);
    }
    assert!(
        slowest <= NET_TIMEOUT + MARGIN,
        "a commit took {slowest:?}: more than net_timeout ({NET_TIMEOUT:?}) + {MARGIN:?}"
    );
    let primary_said = std::fs::read_to_string(pair.primary_log()).unwrap();
    assert!(primary_said.contains("UNSYNCHRONIZED"), "the transition was not logged");
    let checked = pair.verify_standby(&logs);
    let keys = pair.assert_same_data();
    println!(
        "cut: commits resumed after {resumed_after:.1?} (slowest commit {slowest:.1?}, \
         net_timeout {NET_TIMEOUT:?}); restored: synchronized again after \
         {resynchronized_after:.1?}; {checked} acknowledged writes and {keys} keys on the \
         standby; in {:.1?}",
        started.elapsed()
    );
}

#[test]
fn maximum_protection_holds_a_commit_for_as_long_as_the_link_is_cut() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the Maximum Protection link cut test");
    let started = Instant::now();
    let pair = LinkedPair::start("maximum_protection");
    pair.wait_synchronized(Duration::from_secs(30));
    let mut connections = pair.primary_connections(2);
    let mut pending = connections.pop().unwrap();
    let mut other = connections.pop().unwrap();
    for index in 0..20 {
        redis::cmd("SET")
            .arg(format!("before:{index}"))
            .arg(index)
            .query::<()>(&mut other)
            .unwrap();
    }

    // Cut, then a commit: it must still be waiting well after net_timeout.
    pair.link.cut();
    let (done_sender, done) = mpsc::channel();
    let committer = std::thread::spawn(move || {
        let issued = Instant::now();
        let result = redis::cmd("SET").arg("during-cut").arg("protected").query::<()>(&mut pending);
        let _ = done_sender.send(Instant::now());
        (result, issued)
    });
    let hold = NET_TIMEOUT + MARGIN;
    assert!(
        done.recv_timeout(hold).is_err(),
        "a commit completed during the cut under Maximum Protection\n{}",
        pair.logs()
    );
    let status = pair.primary_status();
    assert_ne!(destination(&status).phase, Phase::Synchronized, "{:?}", destination(&status));
    assert_eq!(status.replication.synchronized, Some(false));

    // Restore: the commit completes, and its write is on the standby.
    pair.link.restore();
    let restored_at = Instant::now();
    let completed_at = done.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| {
        panic!("the commit did not complete after the restore\n{}", pair.logs())
    });
    let (result, issued) = committer.join().unwrap();
    result.unwrap_or_else(|error| panic!("the commit failed: {error}\n{}", pair.logs()));
    assert!(completed_at >= restored_at, "completed before the restore");
    let held = completed_at - issued;
    pair.wait_synchronized(Duration::from_secs(30));
    redis::cmd("SET").arg("after").arg("1").query::<()>(&mut other).unwrap();
    let standby_admin = pair.standby.admin_addr();
    let value: Option<String> = pair.on_standby(|standby| {
        block_on(workload::demo::wait_applied_all_received(standby_admin, Duration::from_secs(30)))
            .unwrap_or_else(|error| panic!("{error:#}"));
        redis::cmd("GET").arg("during-cut").query(&mut standby.redis()).unwrap()
    });
    assert_eq!(value.as_deref(), Some("protected"), "the protected commit is not on the standby");
    let keys = pair.assert_same_data();
    println!(
        "a commit issued during the cut was held {held:.1?} (net_timeout {NET_TIMEOUT:?}) and \
         completed {:.1?} after the restore; on the standby; {keys} keys equal; in {:.1?}",
        completed_at - restored_at,
        started.elapsed()
    );
}
