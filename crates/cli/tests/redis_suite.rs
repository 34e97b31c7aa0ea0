//! Redis's own test suite (7.0.15, in its external-server mode) against the real binary, through
//! `scripts/redis-suite` as a user runs it: the files of issue 32, judged by what nobody here
//! wrote. The suite fetches Redis's tests from Debian's source package (and installs tcl) the
//! first time. docs/redis-suite.md has the table and the reason for every failing test.
//!
//! The bar is below today's (903 passed of 923 run, 97.8 %) by a margin for the suite's timing
//! tests on a loaded machine: at least 95 % of the tests run pass, and at least 880. A server
//! that refuses the suite's first command, or a file that hangs, falls far below it; on
//! 2026-11-28 the suite silently ran no test at all for three days.

mod common;

use std::time::Duration;

use common::Watchdog;

#[test]
fn redis_s_own_test_suite_passes_as_docs_redis_suite_md_says() {
    let _watchdog = Watchdog::new(Duration::from_secs(850), "Redis's test suite");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (ok, stdout, stderr) = common::run_bounded(
        std::process::Command::new("bash")
            .arg(root.join("scripts/redis-suite"))
            .current_dir(&root)
            // The binary cargo built for this test, wherever its target directory is: not one
            // the script would find (or build) on its own, which may be older.
            .env("REDOGUARD_BIN", env!("CARGO_BIN_EXE_redoguard")),
        Duration::from_secs(800),
    );
    assert!(ok, "scripts/redis-suite failed\nstdout: {stdout}\nstderr: {stderr}");
    println!("{stdout}");
    // | **all** | 903 | 20 | 86 | 97.8 % |
    let all = stdout
        .lines()
        .find(|line| line.starts_with("| **all** |"))
        .unwrap_or_else(|| panic!("no total in the report\n{stdout}\n{stderr}"));
    let counts: Vec<u32> = all.split('|').filter_map(|cell| cell.trim().parse().ok()).collect();
    let [passed, failed, _skipped] = counts[..] else { panic!("cannot read {all:?}") };
    let run = passed + failed;
    assert!(
        passed >= 880 && passed * 100 >= run * 95,
        "{passed} passed of {run} run (the bar: 880, 95 %)\n{stdout}"
    );
}
