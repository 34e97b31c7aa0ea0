//! `redoguard bench transport` end to end, as small as it goes: loopback only, one client,
//! one second per case, one steady rate, small logs, no PostgreSQL or Redis; the base
//! experiments in one run, the issue 11 ones in another (with the standbys' data in a
//! directory of its own).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn redoguard() -> Command {
    Command::new(common::binary())
}

#[test]
fn bench_transport_help_names_its_flags() {
    let output = redoguard().args(["bench", "transport", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--json",
        "--duration",
        "--rtts",
        "--clients",
        "--lag-rates",
        "--no-external",
        "--experiments",
        "--quorum-rtts",
        "--sync-rate-rtts",
        "--sync-rate",
        "--commit-mode-rtt",
        "--async-cpu-rtt",
        "--async-cpu-rate",
        "--standby-dir",
        "--far-sync-rtt",
        "--far-sync-near-rtt",
        "--far-sync-clients",
        "--fan-out-rtt",
        "--fan-out-rate",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let output = redoguard()
        .args(["bench", "transport", "--json", "x.json", "--clients", "0", "--no-external"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("clients: 0 is outside"));
    let output = redoguard()
        .args(["bench", "transport", "--json", "x.json", "--experiments", "fast"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown experiment"));
}

#[test]
fn a_tiny_run_writes_every_field_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("transport.json");
    let mut command = redoguard();
    command
        .args(["bench", "transport", "--duration", "1s", "--rtts", "0", "--clients", "1"])
        .args(["--lag-rates", "2", "--log-file-size", "16MiB", "--no-external"])
        .args(["--experiments", "modes,lag", "--dir"])
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

#[test]
fn a_tiny_run_of_the_issue_11_experiments_writes_their_fields_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    // The standbys' data goes to a directory of its own (`--standby-dir`).
    let standby_dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("experiments.json");
    let mut command = redoguard();
    command
        .args(["bench", "transport", "--duration", "1s", "--clients", "1"])
        .args(["--experiments", "quorum,sync-rate,commit-mode,async-cpu"])
        .args(["--rtts", "0", "--quorum-rtts", "0", "--sync-rate-rtts", "0"])
        .args(["--commit-mode-rtt", "0", "--async-cpu-rtt", "0", "--async-cpu-rate", "200"])
        .args(["--log-file-size", "16MiB", "--no-external", "--dir"])
        .arg(dir.path())
        .arg("--standby-dir")
        .arg(standby_dir.path())
        .arg("--json")
        .arg(&json);
    // Meanwhile: which servers' data directories (holding files) appear in the standbys'
    // directory (`<run>/<setup>/<server>/`).
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (done, root) = (done.clone(), standby_dir.path().to_path_buf());
        std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            let entries = |path: &Path| -> Vec<PathBuf> {
                std::fs::read_dir(path)
                    .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
                    .unwrap_or_default()
            };
            while !done.load(Ordering::Relaxed) {
                for setup in entries(&root).iter().flat_map(|run| entries(run)) {
                    for server in entries(&setup) {
                        if !entries(&server).is_empty() {
                            seen.insert(server.file_name().unwrap().to_string_lossy().into_owned());
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        })
    };
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(240),
        Duration::from_secs(30),
        "bench transport experiments",
    );
    done.store(true, Ordering::Relaxed);
    let seen = watcher.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Every standby's data, and only theirs, went there; and nothing is left.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["standby", "standby1", "standby2"],
        "data directories seen in --standby-dir"
    );
    assert_eq!(std::fs::read_dir(standby_dir.path()).unwrap().count(), 0);
    assert!(stdout.contains("standbys' fdatasync p50"), "{stdout}");
    for table in ["two SYNC standbys", "steady redo rate", "COMMITMODE", "CPU per commit"] {
        assert!(stdout.contains(table), "{table} missing from:\n{stdout}");
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["failures"].as_array().unwrap().len(), 0, "{report}");
    assert_eq!(report["standby_dir"].as_str(), standby_dir.path().to_str());
    assert!(report["standby_filesystem"].is_string(), "{report}");
    assert!(report["limits"][0]["standby_fdatasync_p50_us"].as_f64().unwrap() > 0.0);
    let cases = report["cases"].as_array().unwrap();
    let of = |experiment: &str| -> Vec<&serde_json::Value> {
        cases.iter().filter(|case| case["experiment"] == experiment).collect()
    };
    for case in cases {
        for field in [
            "experiment",
            "system",
            "mode",
            "rtt_ms",
            "clients",
            "commits_per_s",
            "p50_us",
            "p99_us",
            "standbys",
            "commit_mode",
            "cpu_us_per_commit",
            "commits_change_pct",
            "p50_change_pct",
            "target",
        ] {
            assert!(case.get(field).is_some(), "{field} missing in {case}");
        }
        assert!(case["commits_per_s"].as_f64().unwrap() > 0.0, "{case}");
        assert!(case["cpu_us_per_commit"].as_f64().unwrap() > 0.0, "{case}");
        assert_ne!(case["experiment"], "modes", "{case}");
    }

    // Two SYNC standbys: all runs (with the key, or the server's same default); any 1 runs
    // or is marked as needing the key.
    let quorum = of("quorum");
    let modes: Vec<&str> = quorum.iter().map(|case| case["mode"].as_str().unwrap()).collect();
    assert!(modes.starts_with(&["sync_affirm", "sync_affirm_2_all"]), "{modes:?}");
    assert_eq!(quorum[1]["standbys"], 2);
    let needs = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .any(|skipped| skipped.as_str().unwrap().contains("needs sync_quorum"));
    assert!(modes.contains(&"sync_affirm_2_any_1") != needs, "{modes:?} {report}");

    // SYNC at a steady rate, against no standby at the same RTT, with its target.
    let rate = of("sync_rate");
    assert_eq!(rate.len(), 2, "{rate:?}");
    assert_eq!(
        (rate[0]["mode"].as_str(), rate[1]["mode"].as_str()),
        (Some("no_standby"), Some("sync_affirm"))
    );
    assert!(rate[1]["commits_change_pct"].as_f64().is_some(), "{}", rate[1]);
    assert!(rate[1]["target"]["met"].is_boolean(), "{}", rate[1]);
    assert_eq!(rate[1]["redo_mb_per_s_target"], 4.0);

    // Each COMMITMODE, compared with WAIT IMMEDIATE; NOWAIT held to the reference.
    let modes: Vec<&str> =
        of("commit_mode").iter().map(|case| case["commit_mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["WAIT IMMEDIATE", "WAIT BATCH", "NOWAIT IMMEDIATE", "NOWAIT BATCH"]);
    for case in &of("commit_mode")[1..] {
        assert!(case["p50_change_pct"].as_f64().is_some(), "{case}");
    }
    assert!(of("commit_mode")[3]["target"]["ratio"].as_f64().is_some());

    // CPU per commit with and without ASYNC, and the ratio: each mode summed over its four
    // rounds, which alternate A B B A B A A B.
    let cpu = of("async_cpu");
    assert_eq!(cpu.len(), 2, "{cpu:?}");
    assert_eq!(cpu[1]["mode"], "async");
    assert!(cpu[1]["target"]["ratio"].as_f64().is_some(), "{}", cpu[1]);
    let places = |case: &serde_json::Value| -> Vec<u64> {
        let rounds = case["cpu_rounds"].as_array().unwrap();
        for round in rounds {
            assert!(round["commits"].as_u64().unwrap() > 0, "{round}");
            assert!(round["commits_per_log_write"].as_f64().unwrap() > 0.0, "{round}");
        }
        rounds.iter().map(|round| round["position"].as_u64().unwrap()).collect()
    };
    assert_eq!((places(cpu[0]), places(cpu[1])), (vec![1, 4, 6, 7], vec![2, 3, 5, 8]));
    for case in &cpu {
        let summed: u64 = case["cpu_rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|round| round["commits"].as_u64().unwrap())
            .sum();
        assert_eq!(case["commits"].as_u64(), Some(summed), "{case}");
        assert!(case["cpu_s"].as_f64().is_some(), "{case}");
        assert!(case["commits_per_log_write"].as_f64().unwrap() > 0.0, "{case}");
    }
    assert!(stdout.contains("rounds:"), "no rounds in:\n{stdout}");

    let svg = std::fs::read_to_string(dir.path().join("experiments.svg")).unwrap();
    for text in [
        "Two SYNC standbys",
        "steady 4 MB/s",
        "COMMITMODE under SYNC AFFIRM",
        "CPU time per commit",
        "NOWAIT BATCH",
    ] {
        assert!(svg.contains(text), "{text} is not in the figure");
    }
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["experiments.json", "experiments.svg"]);
}
