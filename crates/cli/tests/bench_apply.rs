//! `redoguard bench apply` end to end, as small as it goes: two seconds of each of the demo's
//! workloads on a real primary, a real standby holding apply back, then applying it after a
//! restart; every field of the report, its figure, and nothing left behind.

mod common;

use std::process::Command;
use std::time::Duration;

fn redoguard() -> Command {
    Command::new(common::binary())
}

#[test]
fn bench_apply_help_names_its_flags_and_refuses_bad_values() {
    let output = redoguard().args(["bench", "apply", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in
        ["--json", "--duration", "--workloads", "--clients", "--batch-clients", "--log-file-size"]
    {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let refused = |args: &[&str], message: &str| {
        let output = redoguard().args(["bench", "apply", "--json", "x.json"]).args(args).output();
        let output = output.unwrap();
        assert!(!output.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    };
    refused(&["--workloads", "olap"], "'olap' is not a workload (oltp, batch)");
    refused(&["--clients", "0"], "--clients: 0 is outside 1..=256");
    refused(&["--log-file-size", "512KiB"], "--log-file-size: 524288 is outside");
}

#[test]
fn a_tiny_run_measures_both_workloads_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("apply.json");
    let mut command = redoguard();
    command
        .args(["bench", "apply", "--duration", "2s", "--clients", "4", "--batch-clients", "2"])
        .args(["--log-file-size", "16MiB", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json);
    // Bounded: SIGTERM (the benchmark stops its servers), then SIGKILL.
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(240),
        Duration::from_secs(20),
        "bench apply",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("target: oltp apply >= 2 x the primary's peak"), "{stdout}");
    assert!(stdout.contains("reference: Data Guard's published Redo Apply rates"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cases = report["cases"].as_array().unwrap();
    let names: Vec<_> = cases.iter().map(|case| case["workload"].as_str().unwrap()).collect();
    assert_eq!(names, ["oltp", "batch"], "{report}");
    for case in cases {
        let number = |field: &str| {
            case[field].as_f64().unwrap_or_else(|| panic!("{field} missing in {case}"))
        };
        assert!(number("records") > 0.0 && number("redo_mb") > 0.0, "no load: {case}");
        assert!(number("primary_peak_mb_per_s") >= number("primary_mean_mb_per_s") * 0.99);
        // Apply counted what it applied (the window may leave out what the standby applied
        // while it opened, never more than there was, give or take what the primary wrote
        // before the load began).
        assert!(number("apply_window_records") > 0.0, "nothing applied: {case}");
        assert!(number("apply_window_records") <= number("records") + 100.0, "{case}");
        assert!(number("apply_mb_per_s") > 0.0 && number("apply_records_per_s") > 0.0);
        let ratio = number("apply_mb_per_s") / number("primary_peak_mb_per_s");
        assert!((number("apply_over_peak") - ratio).abs() < 1e-6 * ratio.max(1.0), "{case}");
        assert_eq!(case["target_met"].as_bool().unwrap(), ratio >= 2.0, "{case}");
        assert!(!case["primary_rate"].as_array().unwrap().is_empty(), "{case}");
        assert!(["samples", "start"].contains(&case["apply_basis"].as_str().unwrap()), "{case}");
    }
    let batch = &cases[1];
    let oltp = &cases[0];
    assert!(
        batch["redo_mb"].as_f64().unwrap() / batch["records"].as_f64().unwrap()
            > 10.0 * oltp["redo_mb"].as_f64().unwrap() / oltp["records"].as_f64().unwrap(),
        "the batch's records are not large: {report}"
    );
    assert!(report["failures"].as_array().unwrap().is_empty(), "{report}");
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["apply.json", "apply.svg"]);
    let svg = std::fs::read_to_string(dir.path().join("apply.svg")).unwrap();
    assert!(svg.contains("<svg"), "not an SVG: {svg:.200}");
    for text in ["Data Guard", "standby applying", "primary generating", "target"] {
        assert!(svg.contains(text), "{text} missing from the SVG");
    }
}
