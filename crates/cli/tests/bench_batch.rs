//! `redoguard bench batch` end to end, as small as it goes: a 3-second batch at 20 MB/s over a
//! real linkemu link at 100 Mbit/s, the four cases (needs root: the test says so and passes
//! without it, as the other linkemu tests do).

mod common;

use std::process::Command;
use std::time::Duration;

fn redoguard() -> Command {
    Command::new(common::binary())
}

#[test]
fn bench_batch_help_names_its_flags_and_bounds() {
    let output = redoguard().args(["bench", "batch", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--json", "--duration", "--rate", "--rtt", "--compression", "--dir"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let output = redoguard()
        .args(["bench", "batch", "--json", "x.json", "--compression", "gzip"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("'gzip' is not lz4 or zstd"));
}

#[test]
fn a_tiny_run_writes_every_field_and_leaves_nothing_behind() {
    if let Some(reason) = linkemu::unavailable_reason() {
        println!("skipped: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("batch.json");
    let mut command = redoguard();
    command.args(["bench", "batch", "--duration", "3s", "--rate", "20", "--dir"]).arg(dir.path());
    command.arg("--json").arg(&json);
    // Bounded: SIGTERM (the benchmark cleans up), then SIGKILL.
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(300),
        Duration::from_secs(20),
        "bench batch",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("deferral: state = \"defer\"") && stdout.contains("reference:"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cases = report["cases"].as_array().unwrap();
    let names: Vec<_> = cases.iter().map(|case| case["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["async_none", "async_zstd", "deferred_none", "deferred_zstd"]);
    for case in cases {
        for field in
            ["redo_mb", "mb_shipped", "mb_on_wire", "lag", "lag_max_s", "oltp_ops_per_s_before"]
        {
            assert!(case.get(field).is_some(), "{field} missing in {case}");
        }
        assert!(!case["lag"].as_array().unwrap().is_empty(), "{case}");
        assert!(case["redo_mb"].as_f64().unwrap() > 10.0, "no batch: {case}");
        let deferred = case["deferred"].as_bool().unwrap();
        assert_eq!(case["gap_resolution_s"].is_number(), deferred, "{case}");
        if case["compression"] == "zstd" {
            let (sent, wire) =
                (case["mb_shipped"].as_f64().unwrap(), case["mb_on_wire"].as_f64().unwrap());
            assert!(wire < sent, "zstd shrank nothing: {case}");
        }
    }
    assert!(report["failures"].as_array().unwrap().is_empty(), "{report}");
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["batch.json", "batch.svg"]);
    let svg = std::fs::read_to_string(dir.path().join("batch.svg")).unwrap();
    assert!(svg.contains("<svg"), "not an SVG: {svg:.200}");
    // Lag over time as lines, one per case, above the bars.
    for text in ["Transport lag over time, ASYNC", "Transport lag over time, transport deferred"] {
        assert!(svg.contains(text), "{text} missing from the SVG");
    }
    assert!(svg.contains("async_none") && svg.contains("deferred_zstd"), "a case has no line");
}
