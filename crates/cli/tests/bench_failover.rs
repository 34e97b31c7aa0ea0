//! `redoguard bench failover` end to end, as small as it goes: one trial of the kill -9 case
//! (a real pair, a real observer, real writers through its Sentinel front), no Redis.

mod common;

use std::process::Command;
use std::time::Duration;

fn redoguard() -> Command {
    Command::new(common::binary())
}

#[test]
fn bench_failover_help_names_its_flags_and_bounds() {
    let output = redoguard().args(["bench", "failover", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--json", "--trials", "--threshold", "--cases", "--no-sentinel", "--dir"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let output = redoguard()
        .args(["bench", "failover", "--json", "x.json", "--trials", "0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("trials: 0 is outside"));
    let output = redoguard()
        .args(["bench", "failover", "--json", "x.json", "--cases", "nap"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("'nap' is not a case"));
}

#[test]
fn one_kill_trial_measures_the_outage_loses_nothing_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("failover.json");
    let mut command = redoguard();
    command
        .args(["bench", "failover", "--trials", "1", "--cases", "kill", "--no-sentinel", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json);
    // Bounded: SIGTERM (the benchmark cleans up), then SIGKILL.
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(120),
        Duration::from_secs(20),
        "bench failover",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("kill_9") && stdout.contains("targets:"), "{stdout}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{report}");
    let row = &results[0];
    for field in ["case", "system", "trials", "seconds_p50", "seconds_max", "samples"] {
        assert!(row.get(field).is_some(), "{field} missing in {row}");
    }
    assert_eq!((row["case"].as_str(), row["system"].as_str()), (Some("kill_9"), Some("redoguard")));
    assert_eq!(row["trials"], 1);
    assert_eq!(row["acknowledged_lost"], 0, "{row}");
    assert!(row["acknowledged"].as_u64().unwrap() > 100, "{row}");
    let seconds = row["seconds_p50"].as_f64().unwrap();
    // Loose: a busy 2-core machine; the benchmark, not this test, says how fast it is.
    assert!(seconds > 0.0 && seconds < 30.0, "{row}");
    assert_eq!(row["samples"].as_array().unwrap().len(), 1);
    assert!(report["failures"].as_array().unwrap().is_empty(), "{report}");
    assert_eq!(report["targets"].as_array().unwrap().len(), 1, "{report}");

    // Everything the run made is gone: only the JSON file and its figure are left.
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["failover.json", "failover.svg"]);
    let svg = std::fs::read_to_string(dir.path().join("failover.svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.contains("<svg"), "not an SVG: {svg:.200}");
}
