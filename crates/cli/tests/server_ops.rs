//! The server as an operator meets it, on the real binary: a bad configuration is refused
//! by name, one server per data directory, `redoguard status` (text and JSON), SHUTDOWN,
//! the idle timeout, and the demo end to end.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Server, Watchdog, binary, run_bounded};

fn redoguard() -> Command {
    Command::new(binary())
}

/// Runs `redoguard server` with a configuration file of `text`; it must refuse to start.
/// Returns its stderr.
fn refused_config(dir: &Path, name: &str, text: &str) -> String {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, text).unwrap();
    let data_dir = dir.join(format!("{name}-data"));
    let (success, stdout, stderr) = run_bounded(
        redoguard()
            .arg("server")
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--port", "0", "--admin-port", "0"]),
        Duration::from_secs(30),
    );
    assert!(!success, "{name}: the server started with\n{text}\nstdout: {stdout}");
    assert!(!stdout.contains("ready"), "{name}: {stdout}");
    assert!(!data_dir.exists(), "{name}: a refused configuration created the data directory");
    stderr
}

#[test]
fn an_invalid_config_is_refused_naming_the_field() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the invalid config test");
    let dir = tempfile::tempdir().unwrap();
    for (name, text, expected) in [
        ("groups", "[redo]\ngroups = 1\n", "redo.groups: 1 is outside 2..=64"),
        ("connections", "[server]\nmax_connections = 0\n", "server.max_connections: 0 is outside"),
        ("interval", "[db]\ncheckpoint_interval = \"1ms\"\n", "db.checkpoint_interval"),
        ("bulk", "[limits]\nbulk_bytes_max = 10\n", "limits.bulk_bytes_max"),
        ("unknown", "[redo]\nlog_size = \"4MiB\"\n", "log_size"),
        ("size", "[redo]\nlog_file_size = \"huge\"\n", "not a size"),
        ("type", "[server]\nport = \"six\"\n", "port"),
    ] {
        let stderr = refused_config(dir.path(), name, text);
        assert!(
            stderr.contains("redoguard: error:") && stderr.contains(expected),
            "{name}: expected an error naming {expected:?}, got:\n{stderr}"
        );
    }
    let (success, _, stderr) = run_bounded(
        redoguard().arg("server").arg("--config").arg(dir.path().join("missing.toml")),
        Duration::from_secs(30),
    );
    assert!(!success);
    assert!(stderr.contains("cannot read the configuration file"), "{stderr}");
}

#[test]
fn a_second_server_on_the_same_data_directory_is_refused() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the second server test");
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let first = Server::start(&data_dir, None, &dir.path().join("first.log"));
    let (success, stdout, stderr) = run_bounded(
        redoguard().arg("server").arg("--data-dir").arg(&data_dir).args([
            "--port",
            "0",
            "--admin-port",
            "0",
        ]),
        Duration::from_secs(30),
    );
    assert!(!success, "a second server started: {stdout}");
    let expected = format!("in use by another redoguard process (pid {})", first.pid());
    assert!(stderr.contains(&expected), "expected {expected:?} in:\n{stderr}");
    // The first one is unharmed.
    let mut client = first.redis();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut client).unwrap();
    let pong: String = redis::cmd("PING").query(&mut client).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn status_shows_groups_checkpoint_and_waits_and_its_json_parses() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the status test");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redoguard.toml");
    std::fs::write(&config, "[db]\ncheckpoint_interval = \"200ms\"\n").unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let mut client = server.redis();
    for n in 0..100 {
        let _: () = redis::cmd("SET").arg(format!("key:{n}")).arg(n).query(&mut client).unwrap();
    }
    common::wait_until(Duration::from_secs(30), "a checkpoint", || {
        server.status().database.checkpoints > 0
    });
    let admin = server.admin_addr().to_string();

    let (success, text, stderr) =
        run_bounded(redoguard().args(["status", "--addr", &admin]), Duration::from_secs(30));
    assert!(success, "{stderr}");
    for expected in [
        &format!("pid {}", server.pid()),
        "online logs",
        "CURRENT",
        "UNUSED",
        "checkpoints ",
        "top wait events",
        "log file sync",
        "log file parallel write",
        // Every reason a session waits for at a log switch, waited for or not.
        "waits at log switches",
        "log file switch (checkpoint incomplete)",
        "log file switch (archiving needed)",
        "log file switch (SYNC standby)",
        "log file switch completion",
        "redo size",
        "keys 100",
    ] {
        assert!(text.contains(expected), "`redoguard status` lacks {expected:?}:\n{text}");
    }
    let group_lines = text.lines().filter(|line| line.contains("redo_0")).count();
    assert_eq!(group_lines, 3, "one line per log group (3 by default):\n{text}");

    let (success, json, stderr) = run_bounded(
        redoguard().args(["status", "--addr", &admin, "--json"]),
        Duration::from_secs(30),
    );
    assert!(success, "{stderr}");
    let value: serde_json::Value = serde_json::from_str(&json).expect("status --json is JSON");
    assert_eq!(value["server"]["pid"], u64::from(server.pid()));
    assert_eq!(value["database"]["keys"], 100);
    assert_eq!(value["database"]["redo"]["groups"].as_array().map(Vec::len), Some(3));
    assert!(value["database"]["checkpoints"].as_u64() > Some(0));
    let waits = value["metrics"]["waits"].as_array().expect("waits");
    let sync = waits.iter().find(|wait| wait["name"] == "log file sync").expect("log file sync");
    assert!(sync["count"].as_u64() >= Some(100), "{sync}");
    let status: server::ServerStatus = serde_json::from_str(&json).unwrap();
    assert_eq!(status.server.writes_refused, None);

    // The admin API's other endpoints.
    let (code, body) = common::http_get(server.admin_addr(), "/health");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let (code, metrics) = common::http_get(server.admin_addr(), "/metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("\nredoguard_writes_refused 0\n"), "{metrics}");
    assert!(metrics.contains("\nredoguard_log_writer_stalled 0\n"), "{metrics}");
    assert!(metrics.contains("\nredoguard_keys 100\n"), "{metrics}");

    // Nobody there: a clear error, not a hang.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (success, _, stderr) = run_bounded(
        redoguard().args(["status", "--addr", &nobody.to_string()]),
        Duration::from_secs(30),
    );
    assert!(!success);
    assert!(stderr.contains("cannot connect to the admin API"), "{stderr}");
}

#[test]
fn shutdown_stops_the_server_cleanly_and_nothing_is_left_to_replay() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the SHUTDOWN test");
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let log = dir.path().join("log");
    // SHUTDOWN needs the admin permission: a password.
    let config = dir.path().join("redoguard.toml");
    std::fs::write(&config, "[auth]\nrequirepass = \"the root password\"\n").unwrap();
    let server = Server::start(&data_dir, Some(&config), &log);
    let mut client = common::redis_connection_as(server.resp_addr(), "the root password");
    for n in 0..50 {
        let _: () = redis::cmd("INCR").arg("counter").query(&mut client).unwrap();
        let _: () = redis::cmd("SET").arg(format!("key:{n}")).arg(n).query(&mut client).unwrap();
    }
    // SHUTDOWN has no reply: the connection closes and the server exits.
    let mut stream = common::raw(server.resp_addr());
    assert_eq!(common::ask(&mut stream, "AUTH \"the root password\"\r\n"), "+OK\r\n");
    stream.write_all(b"SHUTDOWN\r\n").unwrap();
    assert_eq!(common::read_to_close(&mut stream), b"");
    let addr = server.resp_addr();
    common::wait_until(Duration::from_secs(30), "the server to stop listening", || {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err()
    });
    // Exit status 0 (this also reaps it).
    server.stop();
    let server = Server::start(&data_dir, Some(&config), &log);
    let mut client = common::redis_connection_as(server.resp_addr(), "the root password");
    assert_eq!(common::recovered_records(&mut client), 0, "a clean stop leaves nothing to replay");
    let counter: i64 = redis::cmd("GET").arg("counter").query(&mut client).unwrap();
    assert_eq!(counter, 50);
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut client).unwrap();
    assert_eq!(dbsize, 51);
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the idle timeout test");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("redoguard.toml");
    std::fs::write(&config, "[server]\nidle_timeout = \"1s\"\n").unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let mut idle = common::raw(server.resp_addr());
    let opened = Instant::now();
    // An active client, meanwhile, is never idle for a second.
    let mut active = server.redis();
    while opened.elapsed() < Duration::from_millis(1500) {
        let pong: String = redis::cmd("PING").query(&mut active).unwrap();
        assert_eq!(pong, "PONG");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(common::read_to_close(&mut idle), b"");
    let closed_after = opened.elapsed();
    assert!(closed_after >= Duration::from_millis(900), "closed after {closed_after:?}");
    let pong: String = redis::cmd("PING").query(&mut active).unwrap();
    assert_eq!(pong, "PONG");
}

/// The replies before a blocking pop go out while it waits, as in Redis, also when the client
/// pipelined a request behind the pop: `SET`'s `+OK` came only when the pop ended.
#[test]
fn replies_before_a_blocking_pop_go_out_while_it_waits() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "replies before a blocking pop");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None, &dir.path().join("log"));
    let mut client = common::raw(server.resp_addr());
    let sent = Instant::now();
    client.write_all(b"SET k v\r\nBLPOP empty 3\r\nGET k\r\n").unwrap();
    let mut ok = [0u8; 5];
    std::io::Read::read_exact(&mut client, &mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let waited = sent.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "+OK came {waited:?} after the request, with the pop's end"
    );
    // Then the pop's timeout (a null array) and the GET.
    let mut rest = [0u8; 5 + 7];
    std::io::Read::read_exact(&mut client, &mut rest).unwrap();
    assert_eq!(&rest, b"*-1\r\n$1\r\nv\r\n");
    assert!(sent.elapsed() >= Duration::from_millis(2900), "{:?}", sent.elapsed());
}

/// A client that goes away while its blocking pop waits, with a request pipelined behind the
/// pop, is noticed at once, and nothing is popped for it: the element pushed later stays in
/// the list. Before, the request stashed behind the pop stopped the server reading the client,
/// and the next push was popped for the dead connection and lost.
#[test]
fn nothing_is_popped_for_a_client_that_went_away_while_it_waited() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a blocked client that went away");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None, &dir.path().join("log"));
    let mut blocked = common::raw(server.resp_addr());
    blocked.write_all(b"BLPOP queue 0\r\nPING\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(blocked);
    std::thread::sleep(Duration::from_millis(300));
    let mut client = server.redis();
    let length: i64 = redis::cmd("LPUSH").arg("queue").arg("job").query(&mut client).unwrap();
    assert_eq!(length, 1);
    std::thread::sleep(Duration::from_millis(300));
    let left: i64 = redis::cmd("LLEN").arg("queue").query(&mut client).unwrap();
    assert_eq!(left, 1, "the element was popped for a client that had gone away");
}

#[test]
fn the_demo_crashes_its_server_and_verifies_every_commit() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "the demo test");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("demo.json");
    let (success, stdout, stderr) = run_bounded(
        redoguard().args(["demo", "--duration", "3s", "--json"]).arg(&json),
        Duration::from_secs(150),
    );
    assert!(success, "the demo failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("PASSED"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for field in
        ["commits", "commits_per_s", "redo_bytes", "commit_p50_us", "commit_p99_us", "waits"]
    {
        assert!(!report[field].is_null(), "the report lacks {field}: {report}");
    }
    assert!(report["commits"].as_u64() > Some(0));
    assert!(report["commits_per_s"].as_f64() > Some(0.0));
    assert!(report["redo_bytes"].as_u64() > Some(0));
    assert!(report["commit_p50_us"].as_u64() <= report["commit_p99_us"].as_u64());
    assert!(report["waits"].as_array().is_some_and(|waits| !waits.is_empty()));
    let verification = &report["verification"];
    assert_eq!(verification["passed"], true, "{verification}");
    assert_eq!(verification["crashed_and_restarted"], true, "{verification}");
    assert_eq!(verification["orders_missing"], 0, "{verification}");
}

/// `redoguard demo --far-sync`: the primary ships SYNC AFFIRM to a far sync that forwards to
/// the standby; after SIGKILL of the primary, the failover to the standby takes the far sync's
/// tail and loses nothing acknowledged, and the old primary is reinstated.
#[test]
fn the_demo_through_a_far_sync_fails_over_with_its_tail_and_loses_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(420), "the far sync demo test");
    // The observer's failover (the default), then the DBA's (`--no-observer`).
    for (extra, how, reinstated_by) in [
        (None, "fast-start failover through the far sync fs", "the observer"),
        (Some("--no-observer"), "failover through the far sync fs", "`redoguard reinstate`"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("demo.json");
        let mut command = redoguard();
        command.args(["demo", "--far-sync", "--duration", "4s", "--json"]).arg(&json);
        command.args(extra);
        let (success, stdout, stderr) = run_bounded(&mut command, Duration::from_secs(200));
        assert!(success, "the demo ({how}) failed:\n{stdout}\n{stderr}");
        assert!(stdout.contains("ALL CHECKS PASSED"), "{stdout}");
        assert!(stdout.contains("took the tail held by 'fs'"), "{stdout}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(report["failover"]["acknowledged_lost"], 0, "{report}");
        assert_eq!(report["failover"]["how"], how, "{report}");
        assert_eq!(report["reinstate"]["ok"], true, "{report}");
        assert_eq!(report["reinstate"]["by"], reinstated_by, "{report}");
        assert_eq!(report["verification"]["passed"], true, "{report}");
        assert_eq!(report["standby"]["data_equal"], true, "{report}");
    }
}
