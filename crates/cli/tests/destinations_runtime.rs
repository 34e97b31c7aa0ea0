//! Destinations changed at run time on the real binary (`redoguard edit`): deferred while
//! writes go on and the gap resolved by itself once enabled again, kept across a kill -9;
//! transport, compression and connections changed while redo flows; the protection mode
//! raised and lowered; and every change the mode forbids, or that is malformed, refused with
//! nothing changed.

mod common;
mod replication_support;
mod roles_support;

use std::time::Duration;

use common::Watchdog;
use roles_support::{Cluster, ClusterConfig, all_data};
use transport::Phase;

fn destination(cluster: &Cluster, primary: &str, name: &str) -> transport::DestinationStatus {
    cluster
        .server(primary)
        .status()
        .replication
        .destinations
        .into_iter()
        .find(|destination| destination.name == name)
        .unwrap_or_else(|| panic!("{primary} has no destination {name}"))
}

fn wait_phase(cluster: &Cluster, primary: &str, name: &str, phases: &[Phase]) {
    let ok = common::poll_until(Duration::from_secs(30), || {
        phases.contains(&destination(cluster, primary, name).phase)
    });
    assert!(
        ok,
        "{name} is not {phases:?}: {:?}\n{}",
        destination(cluster, primary, name),
        cluster.logs()
    );
}

fn write_keys(cluster: &Cluster, name: &str, prefix: &str, count: usize) {
    let mut connection = common::redis_connection(cluster.resp_addr(name));
    let value = "v".repeat(2000);
    for index in 0..count {
        redis::cmd("SET")
            .arg(format!("{prefix}:{index}"))
            .arg(&value)
            .query::<()>(&mut connection)
            .unwrap_or_else(|error| panic!("SET on {name}: {error}\n{}", cluster.logs()));
    }
}

fn same_data(cluster: &Cluster, a: &str, b: &str) -> bool {
    all_data(&mut common::redis_connection(cluster.resp_addr(a)))
        == all_data(&mut common::redis_connection(cluster.resp_addr(b)))
}

/// `redoguard ARGS`, which must fail: its stderr.
fn refused(cluster: &Cluster, args: &[&str]) -> String {
    let (ok, stdout, stderr) = cluster.redoguard(args);
    assert!(!ok, "redoguard {args:?} succeeded:\n{stdout}");
    stderr
}

#[test]
fn a_deferred_destination_misses_redo_then_resolves_the_gap_once_enabled_even_after_kill_dash_nine()
{
    let _watchdog = Watchdog::new(Duration::from_secs(240), "deferred destination");
    let mut cluster = Cluster::start(ClusterConfig::pair());
    cluster.wait_shipping("east", Duration::from_secs(30));
    // Maximum Availability with west the only SYNC destination: deferring it is refused.
    let error = refused(&cluster, &["edit", "destination", "west", "state=defer"]);
    assert!(error.contains("maximum_availability needs"), "{error}");
    assert!(error.contains("nothing changed"), "{error}");
    assert_eq!(destination(&cluster, "east", "west").phase, Phase::Synchronized);
    // Lowered to Maximum Performance at run time, it may be deferred.
    let out = cluster.must(&["edit", "protection-mode", "maximum_performance"]);
    assert!(out.contains("Applied on the primary 'east'"), "{out}");
    assert_eq!(
        cluster.server("east").status().replication.protection_mode,
        transport::ProtectionMode::MaximumPerformance
    );
    let out = cluster.must(&["edit", "destination", "west", "state=defer"]);
    println!("redoguard edit destination west state=defer:\n{out}");
    assert!(out.contains("state=defer"), "{out}");
    wait_phase(&cluster, "east", "west", &[Phase::Deferred]);
    assert_eq!(destination(&cluster, "east", "west").state, "defer");
    // Writes go on (nothing waits for west), over several logs: a gap of archived logs.
    let before = cluster.server("west").status().database.applied_scn;
    for round in 0..4 {
        write_keys(&cluster, "east", &format!("deferred{round}"), 300);
        cluster.must(&["logswitch", "--addr", &cluster.addr_of("east")]);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        cluster.server("west").status().database.applied_scn,
        before,
        "west received redo while deferred\n{}",
        cluster.logs()
    );
    // Kept across a kill -9 of the primary and of the standby.
    cluster.kill("east");
    cluster.kill("west");
    cluster.start_member("east");
    cluster.start_member("west");
    wait_phase(&cluster, "east", "west", &[Phase::Deferred]);
    assert_eq!(
        cluster.server("east").status().replication.protection_mode,
        transport::ProtectionMode::MaximumPerformance
    );
    // A restarted primary takes writes only once a standby confirmed that no failover
    // happened meanwhile; its only standby is deferred, and the refusal says what to do.
    let mut connection = common::redis_connection(cluster.resp_addr("east"));
    let error = redis::cmd("SET").arg("k").arg("v").query::<()>(&mut connection).unwrap_err();
    assert!(error.to_string().contains("deferred: enable it"), "{error}");
    // Enabled: it confirms, and the gap resolves by itself.
    cluster.must(&["edit", "destination", "west", "state=enable"]);
    write_keys(&cluster, "east", "after-restart", 100);
    wait_phase(&cluster, "east", "west", &[Phase::Synchronized]);
    cluster.wait_applied("west", "east", Duration::from_secs(60));
    assert!(same_data(&cluster, "east", "west"), "west differs after the gap\n{}", cluster.logs());
    // Back to the files' settings: Maximum Availability, synchronized.
    cluster.must(&["edit", "destination", "west", "--reset"]);
    cluster.must(&["edit", "protection-mode", "maximum_availability"]);
    let status = cluster.server("east").status().replication;
    assert_eq!(status.protection_mode, transport::ProtectionMode::MaximumAvailability);
    for name in ["east", "west"] {
        assert!(
            !cluster.data_dir(name).join("settings.json").exists(),
            "{name} still keeps run-time settings after they were all reset"
        );
    }
}

#[test]
fn transport_compression_and_connections_change_while_redo_flows_and_the_mode_follows() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "edited destination");
    let cluster = Cluster::start(ClusterConfig::pair());
    cluster.wait_shipping("east", Duration::from_secs(30));
    let writer = {
        let addr = cluster.resp_addr("east");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut connection = common::redis_connection(addr);
            let mut count = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                redis::cmd("SET")
                    .arg(format!("flow:{count}"))
                    .arg("x".repeat(500))
                    .query::<()>(&mut connection)
                    .expect("a write refused while a destination was edited");
                count += 1;
            }
            count
        });
        (stop, thread)
    };
    // Under Maximum Availability west may not become ASYNC (it is the only SYNC one).
    let error = refused(&cluster, &["edit", "destination", "west", "transport=async"]);
    assert!(error.contains("maximum_availability needs"), "{error}");
    // Timeouts change in place; compression and connections reconnect it.
    let out = cluster.must(&["edit", "destination", "west", "net_timeout=7s"]);
    assert!(out.contains("west in_place"), "{out}");
    let out = cluster.must(&[
        "edit",
        "destination",
        "west",
        "compression=zstd",
        "compression_for=all",
        "max_connections=3",
    ]);
    assert!(out.contains("west reconnect"), "{out}");
    wait_phase(&cluster, "east", "west", &[Phase::Synchronized]);
    let status = destination(&cluster, "east", "west");
    let compression = status.compression.expect("compression in status");
    assert_eq!(compression.codec, "zstd");
    assert!(compression.active, "{compression:?}");
    // Raised to Maximum Protection while west is synchronized; then deferring or making
    // west ASYNC is refused.
    cluster.must(&["edit", "protection-mode", "maximum_protection"]);
    assert_eq!(
        cluster.server("east").status().replication.protection_mode,
        transport::ProtectionMode::MaximumProtection
    );
    let error = refused(&cluster, &["edit", "destination", "west", "state=defer"]);
    assert!(error.contains("maximum_protection needs"), "{error}");
    let error = refused(&cluster, &["edit", "destination", "west", "affirm=false"]);
    assert!(error.contains("maximum_protection needs"), "{error}");
    cluster.must(&["edit", "protection-mode", "maximum_performance"]);
    let out = cluster.must(&["edit", "destination", "west", "transport=async"]);
    assert!(out.contains("west reconnect"), "{out}");
    wait_phase(&cluster, "east", "west", &[Phase::Streaming]);
    assert_eq!(destination(&cluster, "east", "west").transport, "ASYNC");
    // Raising to Maximum Protection with no SYNC AFFIRM standby is refused.
    let error = refused(&cluster, &["edit", "protection-mode", "maximum_protection"]);
    assert!(error.contains("maximum_protection needs"), "{error}");
    let out = cluster.must(&["edit", "destination", "west", "--reset"]);
    assert!(out.contains("west reconnect"), "{out}");
    cluster.must(&["edit", "protection-mode", "maximum_availability"]);
    wait_phase(&cluster, "east", "west", &[Phase::Synchronized]);
    let (stop, thread) = writer;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = thread.join().expect("the writer");
    assert!(written > 0);
    cluster.wait_applied("west", "east", Duration::from_secs(60));
    assert!(same_data(&cluster, "east", "west"), "west differs\n{}", cluster.logs());
}

#[test]
fn malformed_or_unknown_changes_are_refused_and_name_what_is_wrong() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "malformed edits");
    let cluster = Cluster::start(ClusterConfig::pair());
    cluster.wait_shipping("east", Duration::from_secs(30));
    let error = refused(&cluster, &["edit", "destination", "west", "address=10.0.0.1:1"]);
    assert!(error.contains("'address' cannot be changed at run time"), "{error}");
    let error = refused(&cluster, &["edit", "destination", "west", "transport=pigeon"]);
    assert!(error.contains("pigeon"), "{error}");
    let error = refused(&cluster, &["edit", "destination", "south", "state=defer"]);
    assert!(error.contains("no destination is named 'south'"), "{error}");
    let error = refused(&cluster, &["edit", "destination", "west", "max_connections=99"]);
    assert!(error.contains("max_connections"), "{error}");
    let error = refused(&cluster, &["edit", "protection-mode", "maximum_paranoia"]);
    assert!(error.contains("not a protection mode"), "{error}");
    // The admin API itself, spoken to directly.
    let addr = cluster.addr_of("east");
    for (body, expected) in [
        (&b"{not json"[..], 400),
        (&b"{\"address\": \"10.0.0.1:1\"}"[..], 400),
        (&b"{}"[..], 400),
        (&b"{\"net_timeout\": \"1 fortnight\"}"[..], 400),
        (&b"{\"net_timeout\": \"1e300\"}"[..], 400),
    ] {
        let (code, answer) = server::status::http_call_with_body(
            &addr,
            "POST",
            "/settings/destinations/west",
            body,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(code, expected, "{}: {answer}", String::from_utf8_lossy(body));
    }
    // Nothing changed anywhere.
    for name in ["east", "west"] {
        assert!(
            !cluster.data_dir(name).join("settings.json").exists(),
            "{name} kept a refused change"
        );
    }
    assert_eq!(destination(&cluster, "east", "west").phase, Phase::Synchronized);
}

#[test]
fn a_destination_given_up_is_retried_by_an_edit_that_changes_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "given-up destination");
    let mut config = ClusterConfig::pair();
    config.members[1].extra = "max_failure = 1\n";
    let mut cluster = Cluster::start(config);
    cluster.wait_shipping("east", Duration::from_secs(30));
    cluster.kill("west");
    wait_phase(&cluster, "east", "west", &[Phase::GaveUp]);
    cluster.start_member("west");
    // Given up: not retried by itself, even with west back.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(destination(&cluster, "east", "west").phase, Phase::GaveUp, "{}", cluster.logs());
    write_keys(&cluster, "east", "while-given-up", 50);
    let out = cluster.must(&["edit", "destination", "west", "state=enable"]);
    assert!(out.contains("Applied on the primary 'east'"), "{out}");
    wait_phase(&cluster, "east", "west", &[Phase::Synchronized]);
    cluster.wait_applied("west", "east", Duration::from_secs(60));
    assert!(same_data(&cluster, "east", "west"), "west differs\n{}", cluster.logs());
}
