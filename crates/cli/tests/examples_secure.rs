//! The README's steps on `examples/`, on copies of the files: `redoguard certs` and `redoguard
//! passwd` make them complete, the pair then starts secure (redo over mutual TLS, clients with
//! a password) and synchronizes, and the trio's and fast-start files load, with their
//! certificates, and expose nothing protected mode would refuse.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Server, Watchdog};

const PASSWORD: &str = "the README's password";

/// `redoguard ARGS` with `stdin`, which must succeed: its stdout.
fn redoguard(args: &[&str], stdin: &str) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new(common::binary())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "redoguard {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Copies `files` of `examples/SUB` into `dir`, runs the README's steps there (certs, passwd,
/// the hash and the Sentinel password put in), with every `127.0.0.1:PORT` of the files moved
/// to a free port: the paths of the copies.
fn prepared(sub: &str, files: &[&str], certs_from: &str, dir: &Path) -> Vec<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(sub);
    let mut ports = std::collections::BTreeMap::new();
    let copies: Vec<PathBuf> = files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(source.join(file)).unwrap();
            let mut moved = String::new();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("127.0.0.1:") {
                let (head, tail) = rest.split_at(at + "127.0.0.1:".len());
                let digits = tail.chars().take_while(char::is_ascii_digit).count();
                let port: u16 = tail[..digits].parse().unwrap();
                let free =
                    *ports.entry(port).or_insert_with(|| workload::ports::free_port().unwrap());
                moved += head;
                moved += &free.to_string();
                rest = &tail[digits..];
            }
            moved += rest;
            let copy = dir.join(file);
            std::fs::write(&copy, moved).unwrap();
            copy
        })
        .collect();
    let certs = dir.join("certs");
    let from = dir.join(certs_from);
    redoguard(&["certs", "--out", certs.to_str().unwrap(), "--config", from.to_str().unwrap()], "");
    let hash = redoguard(&["passwd"], PASSWORD).trim().to_string();
    for copy in &copies {
        let text = std::fs::read_to_string(copy).unwrap();
        assert!(
            text.contains("PASTE_THE_HASH_FROM_redoguard_passwd")
                || text.contains("PASTE_THE_SENTINEL_PASSWORD"),
            "{copy:?} has no place for the README's password"
        );
        let text = text
            .replace("PASTE_THE_HASH_FROM_redoguard_passwd", &hash)
            .replace("PASTE_THE_SENTINEL_PASSWORD", PASSWORD);
        std::fs::write(copy, text).unwrap();
    }
    copies
}

#[test]
fn the_examples_start_secure_after_the_readmes_steps() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the examples");
    let dir = tempfile::tempdir().unwrap();
    let pair = prepared("", &["primary.toml", "standby.toml"], "primary.toml", dir.path());
    // On the ports of its entry, as the README starts it (the broker reaches it there).
    let start = |config: &Path, name: &str| {
        let data = dir.path().join(name);
        let server = server::ServerConfig::load(config).unwrap().server;
        let (port, admin) = (server.port.to_string(), server.admin_port.to_string());
        Server::start_args(
            &[
                "--config",
                config.to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
                "--port",
                &port,
                "--admin-port",
                &admin,
            ],
            &dir.path().join(format!("{name}.log")),
        )
    };
    let west = start(&pair[1], "west");
    let east = start(&pair[0], "east");
    let synchronized = common::poll_until(Duration::from_secs(60), || {
        east.status()
            .replication
            .destinations
            .iter()
            .any(|destination| destination.phase == transport::Phase::Synchronized)
    });
    assert!(synchronized, "the pair did not synchronize\n{}\n{}", east.log_tail(), west.log_tail());
    // Clients need the password: dba's.
    let mut raw = common::raw(east.resp_addr());
    assert_eq!(common::ask(&mut raw, "SET k v\r\n"), "-NOAUTH Authentication required.\r\n");
    let client = redis::Client::open(format!(
        "redis://dba:{}@{}/",
        PASSWORD.replace(' ', "%20").replace('\'', "%27"),
        east.resp_addr()
    ))
    .unwrap();
    let mut connection = client.get_connection().unwrap();
    redis::cmd("SET").arg("greeting").arg("hello").query::<()>(&mut connection).unwrap();
    // The broker's commands need no token on this host.
    let (ok, stdout, stderr) = common::run_bounded(
        std::process::Command::new(common::binary()).args([
            "show",
            "configuration",
            "--addr",
            &east.admin_addr().to_string(),
        ]),
        Duration::from_secs(30),
    );
    assert!(ok && stdout.contains("SYNCHRONIZED"), "{stdout}{stderr}");
    east.stop();
    west.stop();

    // The trio and fast-start files: complete after the same steps, their certificates good,
    // nothing protected mode would refuse.
    for (sub, files, certs_from) in [
        ("trio", &["east.toml", "west.toml", "far.toml"][..], "east.toml"),
        ("fast-start", &["east.toml", "west.toml", "observer.toml"][..], "observer.toml"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        for copy in prepared(sub, files, certs_from, dir.path()) {
            if copy.ends_with("observer.toml") {
                let config = observer::ObserverConfig::load(&copy).unwrap();
                assert!(config.exposure().is_empty(), "{copy:?}: {:?}", config.exposure());
                assert!(config.redo_tls().unwrap().is_some(), "{copy:?} runs without TLS");
                continue;
            }
            let config = server::ServerConfig::load(&copy).unwrap();
            assert!(server::exposure(&config).missing.is_empty(), "{copy:?}");
            assert!(config.redo_tls().unwrap().is_some(), "{copy:?} runs without TLS");
            assert!(server::auth::Users::new(&config.auth).unwrap().required(), "{copy:?}");
        }
    }
}
