//! The `redoguard` binary's tool commands, run as a user would run them.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn redoguard() -> Command {
    Command::new(env!("CARGO_BIN_EXE_redoguard"))
}

fn run_ok(command: &mut Command) -> String {
    let output = command.output().expect("run redoguard");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed:\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Kills the child we started when the test ends, whatever happens.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    workload::ports::free_port().expect("a free port")
}

#[test]
fn nettest_server_and_client_write_a_json_report() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = redoguard()
        .args([
            "nettest",
            "server",
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--file-size",
            "1MiB",
            "--max-message",
            "64KiB",
            "--file",
        ])
        .arg(dir.path().join("srl"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Reaped(server);
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let json = dir.path().join("report.json");
    let stdout = run_ok(
        redoguard()
            .args([
                "nettest",
                "client",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--mode",
                "sync",
                "--write",
            ])
            .args(["--length", "9400", "--duration", "400ms", "--interval", "200ms", "--json"])
            .arg(&json),
    );
    assert!(stdout.contains("p50 µs") && stdout.contains("server fdatasync"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["mode"], "sync");
    assert_eq!(report["write"], true);
    assert_eq!(report["length"], 9400);
    assert!(report["msgs_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["intervals"].as_array().unwrap().len() >= 2);

    let output = redoguard()
        .args([
            "nettest",
            "client",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--mode",
            "sync",
            "--length",
            "2GiB",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("'--length'"));
}

#[test]
fn iotest_and_advise_print_their_figures() {
    let dir = tempfile::tempdir_in(".").unwrap();
    let json = dir.path().join("io.json");
    let stdout = run_ok(
        redoguard()
            .args(["iotest", "--size", "4KiB,12KiB", "--writes", "20", "--dir"])
            .arg(dir.path())
            .arg("--json")
            .arg(&json),
    );
    assert!(stdout.contains("4.0 KiB") && stdout.contains("12.0 KiB"), "{stdout}");
    let runs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2);

    let stdout = run_ok(redoguard().args([
        "advise",
        "--bandwidth",
        "1gbit",
        "--rtt",
        "25ms",
        "--redo-rate",
        "3MiB/s",
    ]));
    assert!(stdout.contains("3,125,000 bytes") && stdout.contains("9,375,000 bytes"), "{stdout}");
    assert!(stdout.contains("25.2 Mbit/s"), "{stdout}");
}

#[test]
fn linkemu_up_set_status_down_leaves_nothing_behind() {
    if let Some(reason) = linkemu::unavailable_reason() {
        eprintln!("skipping linkemu CLI test: {reason}");
        return;
    }
    let name = format!("rgle{}c", std::process::id());
    let stdout = run_ok(
        redoguard().args(["linkemu", "up", "--name", &name, "--rtt", "10ms", "--rate", "100mbit"]),
    );
    assert!(stdout.contains(&format!("namespace {name}-a address 198.18.0.1")), "{stdout}");
    // Whatever fails below, the link goes down.
    struct Down(String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = Command::new(env!("CARGO_BIN_EXE_redoguard"))
                .args(["linkemu", "down", "--name", &self.0])
                .output();
        }
    }
    let down = Down(name.clone());
    let output = redoguard().args(["linkemu", "up", "--name", &name]).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("already up"));
    let stdout =
        run_ok(redoguard().args(["linkemu", "set", "--name", &name, "--rtt", "20ms", "--cut"]));
    let response: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(response["cut"], true);
    assert_eq!(response["config"]["rtt"]["nanos"], 20_000_000);
    let output = redoguard()
        .args(["linkemu", "set", "--name", &name, "--loss", "50", "--restore"])
        .output()
        .unwrap();
    assert!(!output.status.success(), "a loss of 50 (not 50%) is refused");
    let stdout = run_ok(redoguard().args(["linkemu", "status", "--name", &name]));
    assert!(stdout.contains("rtt 20ms"), "{stdout}");
    drop(down);
    for side in ["a", "b"] {
        assert!(!std::path::Path::new(&format!("/run/netns/{name}-{side}")).exists());
    }
    assert!(!linkemu::daemon::links_dir().join(format!("{name}.json")).exists());
}
