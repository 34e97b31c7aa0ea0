//! `redoguard bench ship` end to end, as small as it goes: a 4 MiB log, RTT 0 and 25 ms, one
//! and two connections, with and without LZ4, through a real linkemu link (needs root: the
//! test says so and passes without it, as the other linkemu tests do).

mod common;

use std::process::Command;
use std::time::Duration;

fn redoguard() -> Command {
    Command::new(common::binary())
}

#[test]
fn bench_ship_help_names_its_flags_and_bounds() {
    let output = redoguard().args(["bench", "ship", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in ["--json", "--rtts", "--connections", "--compression", "--size", "--full", "--dir"]
    {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let output = redoguard()
        .args(["bench", "ship", "--json", "x.json", "--connections", "21"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("connections: 21 is outside 1..=20"));
}

#[test]
fn a_tiny_run_writes_every_field_and_leaves_nothing_behind() {
    if let Some(reason) = linkemu::unavailable_reason() {
        println!("skipped: {reason}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("ship.json");
    let mut command = redoguard();
    command
        .args(["bench", "ship", "--rtts", "0,25", "--connections", "1,2"])
        .args(["--compression", "none,lz4", "--size", "4MiB", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json);
    // Bounded: SIGTERM (the benchmark cleans up), then SIGKILL.
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(240),
        Duration::from_secs(20),
        "bench ship",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("x_line") && stdout.contains("x_tcp") && stdout.contains("reference:"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cases = report["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 8, "{report}");
    for case in cases {
        for field in
            ["rtt_ms", "connections", "compression", "seconds", "line_rate_seconds", "mb_shipped"]
        {
            assert!(case.get(field).is_some(), "{field} missing in {case}");
        }
        let seconds = case["seconds"].as_f64().unwrap();
        let line = case["line_rate_seconds"].as_f64().unwrap();
        assert!(seconds > 0.0 && line > 0.0 && seconds < 120.0, "{case}");
        // TCP alone with the same bytes at that RTT, measured in the same run.
        let tcp = case["tcp_seconds"].as_f64().unwrap_or_else(|| panic!("no tcp_seconds: {case}"));
        assert!(tcp > 0.0 && tcp < 120.0, "{case}");
        assert!(case["mb_shipped"].as_f64().unwrap() >= 4.0, "{case}");
        // (Sampled every 20 ms while shipping: a tiny log may be shipped between samples.)
        assert!(case["archive_connections"].as_u64().unwrap() <= 2, "{case}");
        if case["compression"] == "lz4" {
            let wire = case["mb_on_wire"].as_f64().unwrap();
            assert!(wire < case["mb_shipped"].as_f64().unwrap(), "LZ4 shrank nothing: {case}");
        }
    }
    assert!(
        cases.iter().any(|case| case["connections"] == 2 && case["archive_connections"] == 2),
        "no case with 2 connections was seen shipping over 2 archive connections: {report}"
    );
    assert!(report["failures"].as_array().unwrap().is_empty(), "{report}");
    let mut left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["ship.json", "ship.svg"]);
    let svg = std::fs::read_to_string(dir.path().join("ship.svg")).unwrap();
    assert!(svg.contains("<svg"), "not an SVG: {svg:.200}");
}
