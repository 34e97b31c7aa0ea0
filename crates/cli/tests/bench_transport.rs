//! `redoguard bench transport` end to end, as small as it goes: loopback only, one client,
//! one second per case, one steady rate, small logs, no PostgreSQL or Redis.

mod common;

use std::process::Command;
use std::time::Duration;

fn redoguard() -> Command {
    Command::new(common::binary())
}

#[test]
fn bench_transport_help_names_its_flags() {
    let output = redoguard().args(["bench", "transport", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--json", "--duration", "--rtts", "--clients", "--lag-rates", "--no-external"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let output = redoguard()
        .args(["bench", "transport", "--json", "x.json", "--clients", "0", "--no-external"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("clients: 0 is outside"));
}

#[test]
fn a_tiny_run_writes_every_field_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("transport.json");
    let mut command = redoguard();
    command
        .args(["bench", "transport", "--duration", "1s", "--rtts", "0", "--clients", "1"])
        .args(["--lag-rates", "2", "--log-file-size", "16MiB", "--no-external", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json);
    // Bounded: SIGTERM (the benchmark cleans up), then SIGKILL.
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(180),
        Duration::from_secs(30),
        "bench transport",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("sync_affirm") && stdout.contains("targets:"), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cases = report["cases"].as_array().unwrap();
    let modes: Vec<&str> = cases.iter().map(|case| case["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["no_standby", "async", "sync_noaffirm", "sync_affirm", "async"]);
    for case in cases {
        for field in [
            "system",
            "mode",
            "rtt_ms",
            "clients",
            "commits_per_s",
            "p50_us",
            "p99_us",
            "fdatasync_p50_us",
            "redo_mb_per_s",
            "transport_lag_p99_ms",
            "target",
        ] {
            assert!(case.get(field).is_some(), "{field} missing in {case}");
        }
        assert_eq!(case["system"], "redoguard");
        assert!(case["commits_per_s"].as_f64().unwrap() > 0.0, "{case}");
        assert!(case["fdatasync_p50_us"].as_f64().unwrap() > 0.0, "{case}");
    }
    let steady = &cases[4];
    assert_eq!(steady["load"], "steady_rate");
    assert!(steady["redo_mb_per_s"].as_f64().unwrap() > 0.0, "{steady}");
    assert!(steady["transport_lag_p99_ms"].as_f64().is_some(), "{steady}");
    // The three cases the issue sets targets for: ASYNC against no standby, SYNC AFFIRM
    // against fdatasync and RTT, ASYNC lag against the RTT.
    for index in [1, 3, 4] {
        let target = &cases[index]["target"];
        assert!(target["ratio"].as_f64().is_some() && target["met"].is_boolean(), "{target}");
    }
    assert!(cases[0]["target"].is_null() && cases[2]["target"].is_null());
    assert_eq!(
        report["targets_met"].as_u64().unwrap() + report["targets_missed"].as_u64().unwrap(),
        3
    );
    assert_eq!(report["failures"].as_array().unwrap().len(), 0, "{report}");

    // The figure beside the JSON: the run's cases, against the physical limit.
    let svg = std::fs::read_to_string(dir.path().join("transport.svg")).unwrap();
    for text in ["SYNC AFFIRM", "RTT 0 ms", "round trip + raw fdatasync p50", "2 MB/s"] {
        assert!(svg.contains(text), "{text} is not in the figure");
    }
    assert!(stdout.contains("plot: "), "{stdout}");

    // Everything the run made is gone: only the JSON file and its figure are left.
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["transport.json", "transport.svg"]);
}
