//! `redoguard bench transport --experiments far-sync,fan-out` end to end, as small as it goes:
//! one second per round, a far RTT of 10 ms, two clients, a low steady rate, small logs. Checks
//! that the run completes, its tables, JSON and figure are well formed and nothing is left
//! behind; not the performance targets (the benchmark's own run measures those).

mod common;

use std::process::Command;
use std::time::Duration;

#[test]
fn a_tiny_run_of_the_route_experiments_writes_their_fields_and_plots() {
    if let Some(reason) = linkemu::unavailable_reason() {
        panic!("this test needs linkemu meshes, which cannot run here: {reason}");
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("routes.json");
    let mut command = Command::new(common::binary());
    command
        .args(["bench", "transport", "--duration", "1s", "--experiments", "far-sync,fan-out"])
        .args(["--far-sync-near-rtt", "1", "--far-sync-rtt", "10", "--far-sync-clients", "2"])
        .args(["--fan-out-rtt", "1", "--fan-out-rate", "200"])
        .args(["--log-file-size", "16MiB", "--no-external", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json);
    // Bounded: SIGTERM (the benchmark cleans up), then SIGKILL.
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(240),
        Duration::from_secs(30),
        "bench transport far-sync,fan-out",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for table in
        ["far sync (closed loop", "clients/RTT/s", "fan-out: the primary's cost", "rounds:"]
    {
        assert!(stdout.contains(table), "{table} missing from:\n{stdout}");
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["failures"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["skipped"].as_array().unwrap().len(), 0, "{report}");
    // The limits of each mesh: the far sync's at its far RTT, the fan-out's.
    let limits: Vec<u64> = report["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|limits| limits["rtt_set_ms"].as_u64().unwrap())
        .collect();
    assert_eq!(limits, [10, 1]);
    let cases = report["cases"].as_array().unwrap();
    let of = |experiment: &str| -> Vec<&serde_json::Value> {
        cases.iter().filter(|case| case["experiment"] == experiment).collect()
    };
    for case in cases {
        for field in ["mode", "rtt_ms", "clients", "commits_per_s", "p50_us", "p99_us", "standbys"]
        {
            assert!(case.get(field).is_some(), "{field} missing in {case}");
        }
        assert!(case["commits_per_s"].as_f64().unwrap() > 0.0, "{case}");
        assert!(case["cpu_us_per_commit"].as_f64().unwrap() > 0.0, "{case}");
    }

    // The far sync, SYNC direct and ASYNC direct, each compared with ASYNC direct; the far
    // sync's target and SYNC direct's bound (clients / RTT: 2 / 10 ms = about 200).
    let far = of("far_sync");
    let modes: Vec<&str> = far.iter().map(|case| case["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["sync_affirm_far_sync", "sync_affirm_direct", "async_direct"]);
    assert!(far[0]["near_rtt_ms"].as_f64().unwrap() < far[0]["rtt_ms"].as_f64().unwrap());
    assert!(far[0]["rtt_ms"].as_f64().unwrap() >= 10.0, "{}", far[0]);
    for case in &far[..2] {
        assert_eq!(case["compared_with"], "async_direct", "{case}");
        assert!(case["commits_change_pct"].as_f64().is_some(), "{case}");
        assert!(case["target"]["met"].is_boolean(), "{case}");
    }
    let bound = far[1]["target"]["reference"].as_f64().unwrap();
    assert!((150.0..=210.0).contains(&bound), "2 clients / about 10 ms: {bound}");
    assert!(far[2]["target"].is_null());
    assert_eq!(far[0]["standbys"], 1, "the primary ships to the far sync alone");

    // One standby, four direct, four through a cascade: each summed over its two rounds
    // (A B C C B A), with the primary's CPU and bytes per commit; the cascade's two targets.
    let fan = of("fan_out");
    let modes: Vec<&str> = fan.iter().map(|case| case["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["async_one_standby", "async_four_direct", "async_cascade_1_to_3"]);
    let places = |case: &serde_json::Value| -> Vec<u64> {
        let rounds = case["cpu_rounds"].as_array().unwrap();
        rounds.iter().map(|round| round["position"].as_u64().unwrap()).collect()
    };
    assert_eq!(
        (places(fan[0]), places(fan[1]), places(fan[2])),
        (vec![1, 6], vec![2, 5], vec![3, 4])
    );
    assert_eq!(
        fan.iter().map(|case| case["standbys"].as_u64().unwrap()).collect::<Vec<_>>(),
        [1, 4, 1]
    );
    for case in &fan {
        assert!(case["wire_bytes_per_commit"].as_f64().unwrap() > 0.0, "{case}");
        assert!(case["redo_bytes_sent_per_commit"].as_f64().unwrap() > 0.0, "{case}");
    }
    // Four destinations carry about four times one's bytes.
    let bytes = |case: &serde_json::Value| case["redo_bytes_sent_per_commit"].as_f64().unwrap();
    assert!(bytes(fan[1]) > 2.0 * bytes(fan[0]), "{} {}", fan[1], fan[0]);
    assert!(fan[2]["target"]["ratio"].as_f64().is_some(), "{}", fan[2]);
    assert!(fan[2]["more_targets"][0]["ratio"].as_f64().is_some(), "{}", fan[2]);
    assert_eq!(
        report["targets_met"].as_u64().unwrap() + report["targets_missed"].as_u64().unwrap(),
        4
    );

    let svg = std::fs::read_to_string(dir.path().join("routes.svg")).unwrap();
    for text in [
        "Far sync: commits per second",
        "clients / far RTT",
        "Fan-out: the primary",
        "1.1 x one standby",
        "async_cascade_1_to_3",
    ] {
        assert!(svg.contains(text), "{text} is not in the figure");
    }
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["routes.json", "routes.svg"]);
}
