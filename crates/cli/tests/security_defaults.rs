//! Secure by default: each attack of issue 31 tried against servers with their defaults (no
//! `[auth]`, no `[tls]`), on the real binary, and refused.
//!
//! - the admin API: a cross-site POST (a page of another site, with and without the token),
//!   a request whose Host is another name (DNS rebinding), a POST without the token;
//! - the Redis protocol: SHUTDOWN and CONFIG from a client that gave no password;
//! - a new standby: a stranger's hello claiming to be the primary, with a database id of its
//!   own, is refused, and the real primary is followed afterwards (and HELLO on the standby
//!   says `replica`);
//! - protected mode: a server bound beyond loopback without TLS and a password does not start,
//!   and says what is missing; with `--insecure` it starts and says so in `/status`.

mod common;

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::Duration;

use common::{Server, Watchdog};
use proto::{Channel, ErrorCode, Hello, Message};
use transport::conn::Conn;

/// One HTTP/1.1 request with these extra header lines: the status code and the body.
fn request(addr: SocketAddr, method: &str, path: &str, headers: &[String]) -> (u16, String) {
    let mut stream = common::raw(addr);
    let mut text =
        format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n");
    for header in headers {
        text += header;
        text += "\r\n";
    }
    text += "\r\n";
    stream.write_all(text.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (code, body.to_string())
}

#[test]
fn the_admin_api_and_the_redis_port_refuse_what_a_stranger_tries_on_the_defaults() {
    let _watchdog = Watchdog::new(Duration::from_secs(90), "attacks on the defaults");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, None, &dir.path().join("server.log"));
    let admin = server.admin_addr();
    let host = format!("Host: {admin}");
    let seq = || server.status().database.redo.groups.iter().filter_map(|g| g.seq).max();
    let before = seq();

    // The token the server made at its first start: private to its user.
    let token_file = data.join("admin-token");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&token_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the admin token file is readable by others");
    let token = std::fs::read_to_string(&token_file).unwrap().lines().next().unwrap().to_string();
    let bearer = format!("Authorization: Bearer {token}");
    let status = server.status();
    assert!(status.server.admin_token_required);
    assert_eq!(
        status.server.admin_token_file.as_deref(),
        Some(std::path::absolute(&token_file).unwrap().to_str().unwrap())
    );

    // A POST without the token, the defaults notwithstanding.
    let (code, body) = request(admin, "POST", "/logswitch", std::slice::from_ref(&host));
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("admin-token"), "the refusal says where the token is: {body}");
    // A cross-site POST, as a page of another site makes a browser send it: without the token,
    // and even with it.
    let origin = "Origin: http://evil.example".to_string();
    let (code, body) = request(admin, "POST", "/logswitch", &[host.clone(), origin.clone()]);
    assert_eq!(code, 403, "{body}");
    let (code, body) =
        request(admin, "POST", "/logswitch", &[host.clone(), origin.clone(), bearer.clone()]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("another site"), "{body}");
    let (code, _) = request(
        admin,
        "POST",
        "/roles/failover",
        &[host.clone(), "Sec-Fetch-Site: cross-site".into(), bearer.clone()],
    );
    assert_eq!(code, 403);
    // DNS rebinding: the right port, another name; GETs too (the page would read /status).
    let rebound = "Host: evil.example:80".to_string();
    let (code, body) = request(admin, "GET", "/status", std::slice::from_ref(&rebound));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("evil.example"), "the refusal names the Host: {body}");
    let (code, _) = request(admin, "POST", "/logswitch", &[rebound, bearer.clone()]);
    assert_eq!(code, 403);
    assert_eq!(seq(), before, "a refused request switched logs");
    // The page's own requests work, and so does the token from this host.
    let (code, _) = request(admin, "GET", "/", &[host.clone(), format!("Origin: http://{admin}")]);
    assert_eq!(code, 200);
    let (code, body) = request(admin, "POST", "/logswitch", &[host.clone(), bearer]);
    assert_eq!(code, 200, "{body}");
    // And `redoguard logswitch` finds the token by itself (same host, same user).
    let (ok, stdout, stderr) = common::run_bounded(
        std::process::Command::new(common::binary()).args([
            "logswitch",
            "--addr",
            &admin.to_string(),
        ]),
        Duration::from_secs(30),
    );
    assert!(ok, "{stdout}{stderr}");

    // SHUTDOWN and CONFIG from a client without a password: NOPERM, the server stays.
    let mut raw = common::raw(server.resp_addr());
    assert_eq!(
        common::ask(&mut raw, "SHUTDOWN\r\n"),
        "-NOPERM User default has no permissions to run the 'shutdown' command\r\n"
    );
    assert!(common::ask(&mut raw, "CONFIG GET *\r\n").starts_with("-NOPERM"));
    assert_eq!(common::ask(&mut raw, "SET still here\r\n"), "+OK\r\n");
    assert_eq!(common::ask(&mut raw, "PING\r\n"), "+PONG\r\n");
    server.stop();
}

/// A configuration of two members without TLS, in `dir`: east's and west's files.
fn pair_files(dir: &std::path::Path) -> [(std::path::PathBuf, [u16; 3]); 2] {
    let ports: Vec<[u16; 3]> =
        (0..2).map(|_| std::array::from_fn(|_| workload::ports::free_port().unwrap())).collect();
    let members: String = ["east", "west"]
        .iter()
        .zip(&ports)
        .map(|(name, [resp, admin, redo])| {
            format!(
                "[[replication.members]]\nname = \"{name}\"\nresp = \"127.0.0.1:{resp}\"\nadmin = \"127.0.0.1:{admin}\"\nredo = \"127.0.0.1:{redo}\"\ntransport = \"sync\"\n"
            )
        })
        .collect();
    let file = |name: &str, role: &str| {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "[redo]\nlog_file_size = \"2MiB\"\ngroups = 4\n[replication]\nmember = \"{name}\"\nrole = \"{role}\"\nprotection_mode = \"maximum_availability\"\n{members}"
            ),
        )
        .unwrap();
        path
    };
    [(file("east", "primary"), ports[0]), (file("west", "standby"), ports[1])]
}

#[test]
fn a_new_standby_adopts_no_identity_from_a_strangers_hello_and_follows_its_primary() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "a stranger's hello");
    let dir = tempfile::tempdir().unwrap();
    let [(east_file, _), (west_file, [_, _, west_redo])] = pair_files(dir.path());
    let start = |name: &str, file: &std::path::Path| {
        let data = dir.path().join(name);
        Server::start_args(
            &["--config", file.to_str().unwrap(), "--data-dir", data.to_str().unwrap()],
            &dir.path().join(format!("{name}.log")),
        )
    };
    let west = start("west", &west_file);
    // A stranger on this host claims to be east, with a database of its own.
    let hello = Hello {
        version: proto::PROTOCOL_VERSION,
        version_min: proto::PROTOCOL_VERSION_MIN,
        database_id: 0x5eed_5eed_5eed,
        incarnation: 1,
        thread: 1,
        channel: Channel::Control,
        destination: "west".into(),
        block_size: 4096,
        log_file_size: 2 << 20,
        groups: 3,
        primary_time_us: 0,
        member: "east".into(),
        history: Vec::new(),
        relay_of: String::new(),
    };
    let address = format!("127.0.0.1:{west_redo}");
    let mut conn = Conn::connect(&address, Duration::from_secs(5), None, 1 << 20)
        .and_then(|conn| conn.secure(None, "west", Duration::from_secs(5)))
        .unwrap();
    conn.send(&Message::Hello(hello), Duration::from_secs(5)).unwrap();
    match conn.recv(Some(Duration::from_secs(20))) {
        Ok(Message::Error(error)) => {
            assert_eq!(error.code, ErrorCode::Unauthenticated, "{}", error.message);
            assert!(error.message.contains("adopts no database identity"), "{}", error.message);
        }
        other => panic!("the stranger's hello was answered {other:?}"),
    }
    assert_eq!(west.status().database.redo.identity.database_id.0, 0, "west adopted an identity");
    // The real primary is followed.
    let east = start("east", &east_file);
    let east_id = east.status().database.redo.identity.database_id.0;
    let followed = common::poll_until(Duration::from_secs(60), || {
        west.status().database.redo.identity.database_id.0 == east_id
            && east
                .status()
                .replication
                .destinations
                .iter()
                .any(|destination| destination.phase == transport::Phase::Synchronized)
    });
    assert!(followed, "west did not follow east\n{}\n{}", east.log_tail(), west.log_tail());
    // HELLO says each one's role as ROLE does: a standby is a replica.
    for (server, role) in [(&west, "replica"), (&east, "master")] {
        let mut raw = common::raw(server.resp_addr());
        raw.write_all(b"HELLO 3\r\n").unwrap();
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !String::from_utf8_lossy(&reply).contains("modules") {
            assert_eq!(raw.read(&mut byte).unwrap(), 1, "closed after {reply:?}");
            reply.push(byte[0]);
        }
        let reply = String::from_utf8_lossy(&reply);
        assert!(reply.contains(&format!("+role\r\n${}\r\n{role}\r\n", role.len())), "{reply}");
    }
    east.stop();
    west.stop();
}

/// `auth.open_permission = "admin"`: Redis without `requirepass`, as the Redis test suite's
/// server needs (its client cannot authenticate, and starts with FLUSHALL); the default
/// refuses it.
#[test]
fn open_permission_admin_lets_a_passwordless_client_flushall() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "open_permission");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(&config, "[auth]\nopen_permission = \"admin\"\n").unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let mut raw = common::raw(server.resp_addr());
    assert_eq!(common::ask(&mut raw, "SET k v\r\n"), "+OK\r\n");
    assert_eq!(common::ask(&mut raw, "FLUSHALL\r\n"), "+OK\r\n");
    assert_eq!(common::ask(&mut raw, "EXISTS k\r\n"), ":0\r\n");
    drop(raw);
    let default = Server::start(&dir.path().join("data2"), None, &dir.path().join("log2"));
    let mut raw = common::raw(default.resp_addr());
    assert!(common::ask(&mut raw, "FLUSHALL\r\n").starts_with("-NOPERM"));
}

#[test]
fn protected_mode_refuses_a_bind_beyond_loopback_without_tls_and_a_password() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "protected mode");
    let dir = tempfile::tempdir().unwrap();
    // A standby whose redo listener and Redis port are on every address, nothing else given.
    let west_file = dir.path().join("west.toml");
    std::fs::write(
        &west_file,
        format!(
            "[server]\nport = 0\nadmin_port = 0\n[replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"0.0.0.0:{}\"\n",
            workload::ports::free_port().unwrap()
        ),
    )
    .unwrap();
    let data = dir.path().join("west");
    let args = |extra: &[&str]| {
        let mut args = vec![
            "server".to_string(),
            "--config".into(),
            west_file.to_str().unwrap().into(),
            "--data-dir".into(),
            data.to_str().unwrap().into(),
            "--bind".into(),
            "0.0.0.0".into(),
        ];
        args.extend(extra.iter().map(|arg| arg.to_string()));
        args
    };
    let (ok, stdout, stderr) = common::run_bounded(
        std::process::Command::new(common::binary()).args(args(&[])),
        Duration::from_secs(30),
    );
    assert!(!ok, "it started: {stdout}{stderr}");
    assert!(stderr.contains("protected mode"), "{stderr}");
    assert!(stderr.contains("without a password"), "one line for RESP: {stderr}");
    assert!(stderr.contains("redo listener binds 0.0.0.0"), "one line for redo: {stderr}");
    assert!(stderr.contains("--insecure"), "{stderr}");
    assert!(!data.join("redo").exists(), "it created its logs before refusing");
    // With --insecure it starts, and says so.
    let log = dir.path().join("insecure.log");
    let args = args(&["--insecure"]);
    let args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    let server = Server::start_args(&args, &log);
    let status = server.status();
    assert!(status.server.insecure);
    assert!(
        status.server.security_warnings.iter().any(|line| line.contains("without a password")),
        "{:?}",
        status.server.security_warnings
    );
    assert!(common::tail(&log, 200).contains("INSECURE"), "{}", common::tail(&log, 50));
    server.stop();
}
