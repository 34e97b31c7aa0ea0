//! `redoguard advise --from-status` on the status of a real server: a primary with 1 MiB logs
//! takes about 6 MB of SETs (several log switches, each log archived), then `advise` reads its
//! `/status` and `/history` over HTTP, and the same status saved to a file; the advice's
//! arithmetic is checked against the status it read.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use tools::advise::logs;

fn redoguard() -> Command {
    Command::new(common::binary())
}

fn run_ok(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn advice_from_a_running_servers_status_sizes_its_logs_for_the_interval() {
    let _watchdog = common::Watchdog::new(Duration::from_secs(120), "advise --from-status");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("primary.toml");
    std::fs::write(&config, "[redo]\nlog_file_size = \"1MiB\"\ngroups = 3\n").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let server = common::Server::start(&data, Some(&config), &dir.path().join("server.log"));
    let mut redis = server.redis();
    let value = vec![b'v'; 2000];
    for index in 0..3000 {
        let _: () =
            redis::cmd("SET").arg(format!("key:{index}")).arg(&value).query(&mut redis).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.status().archive.archived_logs < 3 {
        assert!(Instant::now() < deadline, "no 3 logs archived: {}", server.log_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The history samples once a second: a server up for less has none yet to show.
    while !common::http_get(server.admin_addr(), "/history").1.contains("redo_bytes_per_s") {
        assert!(Instant::now() < deadline, "no second in /history: {}", server.log_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("http://{}/status", server.admin_addr());
    let json = dir.path().join("advice.json");
    let stdout = run_ok(
        redoguard()
            .args(["advise", "--from-status", &url, "--switch-interval", "10s", "--json"])
            .arg(&json),
    );
    for text in [
        format!("Redo observed ({url}: primary"),
        "fastest log       log ".to_string(),
        "last ".to_string(),
        "Now:    3 groups × 1.0 MiB".to_string(),
        "Target: a switch every 10.0 s".to_string(),
        "[redo]\nlog_file_size = ".to_string(),
    ] {
        assert!(stdout.contains(&text), "{text:?} missing from:\n{stdout}");
    }
    let advice: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let observed: logs::ObservedRedo = serde_json::from_value(advice["observed"].clone()).unwrap();
    let sized: logs::SizingRate = serde_json::from_value(advice["sized_for"].clone()).unwrap();
    let given: logs::LogAdvice = serde_json::from_value(advice["logs"].clone()).unwrap();
    assert_eq!((observed.log_file_size, observed.groups), (1 << 20, 3));
    assert!(observed.archived_logs >= 3 && observed.recent_logs.len() >= 3, "{observed:?}");
    assert!(observed.redo_size >= 3000 * 2000, "{observed:?}");
    assert!(observed.history.is_some(), "the history was not read over HTTP");
    // The arithmetic: the size is the rate sized for times the interval, rounded up. (JSON
    // need not give floats back to the last bit: compared within a billionth.)
    let again = observed.sizing_rate(Duration::from_secs(10)).unwrap();
    assert_eq!((&sized.source, sized.short), (&again.source, again.short), "{sized:?}");
    assert!((sized.bytes_per_s / again.bytes_per_s - 1.0).abs() < 1e-9, "{sized:?} {again:?}");
    assert!(sized.bytes_per_s > 0.0);
    assert_eq!(given.log_file_size, logs::round_log_size(sized.bytes_per_s * 10.0));
    assert!(given.log_file_size as f64 >= sized.bytes_per_s * 10.0);
    assert!(given.groups >= logs::GROUPS_MIN && given.standby_groups == given.groups + 1);
    assert!(
        stdout.contains(&format!("log_file_size = {}", logs::config_size(given.log_file_size))),
        "{stdout}"
    );
    assert!(advice["link"].is_null(), "no link was given: {advice}");

    // The same status saved to a file (as `redoguard status --json` prints it): the same
    // observation, without the history.
    let saved = dir.path().join("status.json");
    let status =
        run_ok(redoguard().args(["status", "--json", "--addr", &server.admin_addr().to_string()]));
    std::fs::write(&saved, status).unwrap();
    let stdout = run_ok(redoguard().args(["advise", "--from-status"]).arg(&saved).args([
        "--bandwidth",
        "1gbit",
        "--rtt",
        "10ms",
    ]));
    assert!(stdout.contains(&format!("Redo observed ({}: primary", saved.display())), "{stdout}");
    assert!(!stdout.contains("history           last"), "{stdout}");
    // With a link, its advice follows for the observed rate.
    assert!(stdout.contains("Bandwidth-delay prod.") && stdout.contains("SYNC "), "{stdout}");
    server.stop();
}

#[test]
fn advise_from_status_refuses_what_it_cannot_read() {
    let output = redoguard().args(["advise", "--from-status", "no/such/thing"]).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("'no/such/thing' is neither a file nor a member's admin address"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"server\": {\"role\": \"primary\"}}").unwrap();
    let output = redoguard().args(["advise", "--from-status"]).arg(&bad).output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not a redoguard /status") && stderr.contains("missing field"),
        "{stderr}"
    );
    let output = redoguard()
        .args(["advise", "--from-status", "127.0.0.1:1", "--switch-interval", "0s"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("--switch-interval"), "refused");
    // Without --from-status, the redo rate is still required.
    let output = redoguard().args(["advise", "--bandwidth", "1gbit", "--rtt", "10ms"]).output();
    assert!(String::from_utf8_lossy(&output.unwrap().stderr).contains("--redo-rate"));
}
