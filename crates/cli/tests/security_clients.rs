//! The ports clients use, attacked, on the real binary: the Redis protocol with passwords and
//! permissions (an unauthenticated SHUTDOWN, an HTTP POST from a web page, a thousand idle
//! connections, requests that hold memory and stop), its TLS port, and the admin API (a POST
//! without the token, idle connections, slow headers). Each attack fails and the server goes
//! on serving its clients.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Server, Watchdog};

const ROOT_PASSWORD: &str = "root-secret-password";
const TOKEN: &str = "an-admin-token-of-some-length";

fn config_text(dir: &std::path::Path) -> String {
    let reader = server::auth::hash_password(b"reader-password").unwrap();
    let writer = server::auth::hash_password(b"writer-password").unwrap();
    format!(
        "[server]\nauth_timeout = \"2s\"\nunauthenticated_max = 20\nrequest_buffer_total = \"8MiB\"\nadmin_max_connections = 8\nadmin_header_timeout = \"1s\"\n\
         [limits]\nbulk_bytes_max = 1048576\nrequest_bytes_max = 4194304\n\
         [auth]\nrequirepass = \"{ROOT_PASSWORD}\"\nadmin_token = \"{TOKEN}\"\n\
         [[auth.users]]\nname = \"reader\"\npassword_hash = \"{reader}\"\npermission = \"read\"\n\
         [[auth.users]]\nname = \"writer\"\npassword_hash = \"{writer}\"\npermission = \"write\"\n\
         [tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/server.pem\"\nkey_file = \"{0}/server-key.pem\"\nname = \"server\"\nredo = false\nresp_port = 0\n",
        dir.display()
    )
}

fn connect(addr: SocketAddr, user: &str, password: &str) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{user}:{password}@{addr}/")).unwrap();
    let connection = client.get_connection_with_timeout(Duration::from_secs(10)).unwrap();
    connection.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    connection
}

/// `AUTH` and `PING` over the TLS port at `addr`, trusting the CA in `dir`: the two replies.
fn tls_ping(dir: &std::path::Path, addr: SocketAddr) -> std::io::Result<[u8; 12]> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls::pki_types::CertificateDer::pem_file_iter(dir.join("ca.pem")).unwrap()
    {
        roots.add(certificate.unwrap()).unwrap();
    }
    let client = tls::redo::client_only(Arc::new(roots));
    let connection =
        rustls::ClientConnection::new(client, "127.0.0.1".try_into().unwrap()).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, common::raw(addr));
    stream.write_all(format!("AUTH {ROOT_PASSWORD}\r\nPING\r\n").as_bytes())?;
    let mut reply = [0u8; 12];
    stream.read_exact(&mut reply)?;
    Ok(reply)
}

/// Sends `bytes` and reads what comes back until the server closes the connection.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = common::raw(addr);
    stream.write_all(bytes).unwrap();
    String::from_utf8_lossy(&common::read_to_close(&mut stream)).into_owned()
}

#[test]
fn the_redis_protocol_and_the_admin_api_refuse_what_they_should() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the client security test");
    let dir = tempfile::tempdir().unwrap();
    tls::certs::write_set(dir.path(), &[("server".into(), vec!["127.0.0.1".into()])]).unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(&config, config_text(dir.path())).unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let resp = server.resp_addr();
    let status = server.status();
    assert!(status.server.auth_required && status.server.admin_token_required);

    // Unauthenticated: NOAUTH for everything but AUTH, HELLO and QUIT; SHUTDOWN does nothing.
    let mut raw = common::raw(resp);
    assert_eq!(common::ask(&mut raw, "GET k\r\n"), "-NOAUTH Authentication required.\r\n");
    assert_eq!(common::ask(&mut raw, "SHUTDOWN\r\n"), "-NOAUTH Authentication required.\r\n");
    assert!(common::ask(&mut raw, "HELLO 3\r\n").starts_with("-NOAUTH HELLO must be called"));
    assert_eq!(
        common::ask(&mut raw, "AUTH wrong\r\n"),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(common::ask(&mut raw, "AUTH nobody writer-password\r\n").chars().next(), Some('-'));
    assert_eq!(common::ask(&mut raw, &format!("AUTH {ROOT_PASSWORD}\r\n")), "+OK\r\n");
    assert_eq!(common::ask(&mut raw, "SET k v\r\n"), "+OK\r\n");
    drop(raw);

    // Users and their permissions.
    let mut reader = connect(resp, "reader", "reader-password");
    let value: String = redis::cmd("GET").arg("k").query(&mut reader).unwrap();
    assert_eq!(value, "v");
    let refused = redis::cmd("SET").arg("k").arg("x").query::<()>(&mut reader).unwrap_err();
    assert!(refused.to_string().to_lowercase().contains("noperm"), "{refused}");
    let mut writer = connect(resp, "writer", "writer-password");
    redis::cmd("SET").arg("k").arg("w").query::<()>(&mut writer).unwrap();
    for admin_only in [redis::cmd("SHUTDOWN"), {
        let mut config = redis::cmd("CONFIG");
        config.arg("GET").arg("*");
        config
    }] {
        let refused = admin_only.query::<()>(&mut writer).unwrap_err();
        assert!(refused.to_string().to_lowercase().contains("noperm"), "{refused}");
    }
    // HELLO 3 with AUTH authenticates and switches protocol at once.
    let mut raw = common::raw(resp);
    let reply = common::ask(&mut raw, "HELLO 3 AUTH writer writer-password\r\n");
    assert!(reply.starts_with('%'), "{reply}");
    drop(raw);

    // A web page posting to the Redis port: closed at once, nothing in the body runs.
    let answer = exchange(
        resp,
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 30\r\n\r\nAUTH root-secret-password\r\nSET evil 1\r\n",
    );
    assert_eq!(answer, "", "an HTTP request was answered");
    let exists: i64 = redis::cmd("EXISTS").arg("evil").query(&mut writer).unwrap();
    assert_eq!(exists, 0);

    // A thousand idle connections that never authenticate: each newcomer ends the oldest, each
    // lasts at most auth_timeout, and clients still get in at once.
    let flood_started = Instant::now();
    let idle: Vec<TcpStream> = (0..1000).filter_map(|_| TcpStream::connect(resp).ok()).collect();
    let started = Instant::now();
    let mut late = connect(resp, "writer", "writer-password");
    redis::cmd("SET").arg("during:flood").arg(1).query::<()>(&mut late).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "a client waited {:.1?}",
        started.elapsed()
    );
    for (index, mut stream) in idle.into_iter().enumerate() {
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let closed = stream.read_to_end(&mut rest).is_ok()
            || flood_started.elapsed() < Duration::from_secs(10);
        assert!(closed, "idle connection {index} still open");
    }
    assert!(flood_started.elapsed() < Duration::from_secs(15), "{:.1?}", flood_started.elapsed());
    // The flood's evictions and timeouts are logged 20 every 10 s at most, not one line each:
    // junk connections do not fill the disk with the server's log.
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    let said = log.lines().filter(|line| line.contains("closing a connection that")).count();
    assert!(said <= 40, "the flood's closings took {said} lines of the log");

    // Requests that hold memory and stop: before authenticating, 64 KiB is the most; after,
    // the shared budget (8 MiB) is refused clearly once spent, and given back on close.
    let answer =
        exchange(resp, format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", 1 << 20).as_bytes());
    assert!(answer.contains("Protocol error"), "{answer}");
    // An MSET of four 900 000-byte values (3.6 MB): each bulk within bulk_bytes_max.
    let mset = |fill: u8| {
        let mut bytes = b"AUTH writer writer-password\r\n*9\r\n$4\r\nMSET\r\n".to_vec();
        for index in 0..4 {
            bytes.extend_from_slice(format!("$2\r\nk{index}\r\n$900000\r\n").as_bytes());
            bytes.extend(std::iter::repeat_n(fill, 900_000));
            bytes.extend_from_slice(b"\r\n");
        }
        bytes
    };
    let partial = |stream: &mut TcpStream| {
        let bytes = mset(b'x');
        stream.write_all(&bytes[..bytes.len() - 100_000]).unwrap();
        let mut ok = [0u8; 5];
        stream.read_exact(&mut ok).unwrap();
        assert_eq!(&ok, b"+OK\r\n");
    };
    let mut first = common::raw(resp);
    partial(&mut first);
    let mut second = common::raw(resp);
    partial(&mut second);
    // (Until the server has read what the kernel still holds of both.)
    std::thread::sleep(Duration::from_secs(1));
    let mut third = common::raw(resp);
    let bytes = mset(b'z');
    let _ = third.write_all(&bytes[..bytes.len() - 100_000]);
    let answer = String::from_utf8_lossy(&common::read_to_close(&mut third)).into_owned();
    assert!(answer.contains("request buffers are full"), "{answer}");
    redis::cmd("SET").arg("small").arg(1).query::<()>(&mut late).unwrap();
    drop((first, second));
    let given_back = common::poll_until(Duration::from_secs(5), || {
        let mut again = common::raw(resp);
        let mut reply = [0u8; 10];
        again.write_all(&mset(b'y')).is_ok()
            && again.read_exact(&mut reply).is_ok()
            && reply.starts_with(b"+OK\r\n+OK")
    });
    assert!(given_back, "the budget was not given back");

    // The TLS port: a rustls client that trusts the test CA.
    let tls_addr: SocketAddr = server.status().server.resp_tls_addr.unwrap().parse().unwrap();
    assert_eq!(&tls_ping(dir.path(), tls_addr).unwrap(), b"+OK\r\n+PONG\r\n");

    // The admin API: GETs open, POSTs need the token.
    let admin = server.admin_addr();
    let post = |authorization: &str| {
        exchange(admin, format!("POST /logswitch HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n{authorization}Content-Length: 0\r\n\r\n").as_bytes())
    };
    assert!(post("").starts_with("HTTP/1.1 401"), "{}", post(""));
    assert!(post("Authorization: Bearer wrong-token-wrong-token\r\n").starts_with("HTTP/1.1 403"));
    assert!(post(&format!("Authorization: Bearer {TOKEN}\r\n")).starts_with("HTTP/1.1 200"));
    let (ok, _, stderr) = common::run_bounded(
        std::process::Command::new(common::binary()).args([
            "logswitch",
            "--addr",
            &admin.to_string(),
        ]),
        Duration::from_secs(30),
    );
    assert!(!ok && stderr.contains("admin token"), "{stderr}");
    let (ok, stdout, stderr) = common::run_bounded(
        std::process::Command::new(common::binary()).args([
            "logswitch",
            "--addr",
            &admin.to_string(),
            "--token",
            TOKEN,
        ]),
        Duration::from_secs(30),
    );
    assert!(ok, "{stdout}{stderr}");
    // Idle admin connections: beyond 8 the answer is 503; each ends after the header timeout.
    let idle: Vec<TcpStream> = (0..8).map(|_| common::raw(admin)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let busy = exchange(admin, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    for mut stream in idle {
        let started = Instant::now();
        let _ = common::read_to_close(&mut stream);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let (code, _) = common::http_get(admin, "/health");
    assert_eq!(code, 200);
    // Still serving.
    let value: i64 = redis::cmd("GET").arg("during:flood").query(&mut late).unwrap();
    assert_eq!(value, 1);
}

/// Connections to the TLS port that never begin their handshake: each newcomer beyond
/// `unauthenticated_max` ends the oldest handshake, as it ends an unauthenticated plain
/// connection, and clients still get in at once on both ports. Before, a handshake held its
/// slot for `auth_timeout` and was never ended to make room: 200 silent connections kept every
/// client out of both ports for ten seconds, renewable (found by a hostile-input audit).
#[test]
fn silent_tls_handshakes_do_not_keep_clients_out() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "silent TLS handshakes");
    let dir = tempfile::tempdir().unwrap();
    tls::certs::write_set(dir.path(), &[("server".into(), vec!["127.0.0.1".into()])]).unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nmax_connections = 200\nunauthenticated_max = 20\nauth_timeout = \"10s\"\n\
             [auth]\nrequirepass = \"{ROOT_PASSWORD}\"\nadmin_token = \"{TOKEN}\"\n\
             [tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/server.pem\"\nkey_file = \"{0}/server-key.pem\"\nname = \"server\"\nredo = false\nresp_port = 0\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let tls_addr: SocketAddr = server.status().server.resp_tls_addr.unwrap().parse().unwrap();
    let tls_ping = || tls_ping(dir.path(), tls_addr);
    assert_eq!(&tls_ping().unwrap(), b"+OK\r\n+PONG\r\n");
    let silent: Vec<TcpStream> =
        (0..300).filter_map(|_| TcpStream::connect(tls_addr).ok()).collect();
    assert_eq!(silent.len(), 300);
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let reply = tls_ping();
    assert!(matches!(&reply, Ok(reply) if reply == b"+OK\r\n+PONG\r\n"), "the TLS port: {reply:?}");
    let mut plain = common::raw(server.resp_addr());
    let reply = common::ask(&mut plain, &format!("AUTH {ROOT_PASSWORD}\r\n"));
    assert_eq!(reply, "+OK\r\n", "the plain port");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a client waited {:.1?}",
        started.elapsed()
    );
    drop(silent);
}

/// Clients that send requests and never read the replies, strangers and authenticated ones:
/// each is closed at its deadline (`auth_timeout`, `idle_timeout`) as a silent one is, and its
/// slot is free again. Before, a connection whose replies filled its socket waited in the
/// write with no deadline, no eviction and no shutdown signal: 20 of them kept every client
/// out for good (found by reading what a stranger can hold).
#[test]
fn clients_that_never_read_do_not_keep_clients_out() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "clients that never read");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nmax_connections = 20\nunauthenticated_max = 20\nauth_timeout = \"6s\"\nidle_timeout = \"6s\"\n\
             [auth]\nrequirepass = \"{ROOT_PASSWORD}\"\nadmin_token = \"{TOKEN}\"\n"
        ),
    )
    .unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let addr = server.resp_addr();
    let mut setup = common::raw(addr);
    assert_eq!(common::ask(&mut setup, &format!("AUTH {ROOT_PASSWORD}\r\n")), "+OK\r\n");
    let value = "v".repeat(100_000);
    assert_eq!(
        common::ask(&mut setup, &format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$100000\r\n{value}\r\n")),
        "+OK\r\n"
    );
    drop(setup);
    // (Its slot is free again before the flood takes them all.)
    common::wait_until(Duration::from_secs(10), "the setup client's end", || {
        server.status().server.connected_clients == 0
    });
    std::thread::sleep(Duration::from_millis(200));
    // Ten strangers pipelining PINGs (each answered NOAUTH), ten clients pipelining GETs of
    // 100 KB; each writes until the server stops reading it for half a second.
    let flooders: Vec<_> = (0..20)
        .map(|index| {
            std::thread::spawn(move || {
                let mut stream = common::raw(addr);
                let request: &[u8] = if index % 2 == 0 {
                    b"PING\r\n"
                } else {
                    assert_eq!(
                        common::ask(&mut stream, &format!("AUTH {ROOT_PASSWORD}\r\n")),
                        "+OK\r\n"
                    );
                    b"GET big\r\n"
                };
                let sent = common::send_until_stalled(&mut stream, request);
                (stream, sent)
            })
        })
        .collect();
    let flooders: Vec<(TcpStream, usize)> =
        flooders.into_iter().map(|flooder| flooder.join().unwrap()).collect();
    let flooded = Instant::now();
    // Every slot is taken by a client that does not read.
    let mut refused = common::raw(addr);
    let answer = String::from_utf8_lossy(&common::read_to_close(&mut refused)).into_owned();
    assert_eq!(answer, "-ERR max number of clients reached\r\n", "the slots were not all taken");
    // Their deadlines end them all; a client gets in.
    let got_in = common::poll_until(Duration::from_secs(25), || {
        let Ok(mut client) = TcpStream::connect(addr) else { return false };
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = client.write_all(format!("AUTH {ROOT_PASSWORD}\r\nPING\r\n").as_bytes());
        let mut reply = [0u8; 12];
        client.read_exact(&mut reply).is_ok() && &reply == b"+OK\r\n+PONG\r\n"
    });
    assert!(
        got_in,
        "clients that never read kept the slots for 25 s (flooders sent {:?} bytes)\n{}",
        flooders.iter().map(|(_, sent)| sent).collect::<Vec<_>>(),
        server.log_tail()
    );
    println!("a client got in {:.1?} after the flood", flooded.elapsed());
    assert!(flooded.elapsed() < Duration::from_secs(15), "{:.1?}", flooded.elapsed());
    drop(flooders);
}

/// A client that reads a long reply slowly is active, not idle: `idle_timeout` runs from when
/// it last took some of its replies, as in Redis, so a reply larger than the sockets' buffers
/// is not cut off while the client goes on reading it (found by a review of the change above,
/// which put the writing of replies under the idle timeout).
#[test]
fn a_client_reading_a_long_reply_slowly_is_not_cut_off() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "a slow reader");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nidle_timeout = \"1s\"\nauth_timeout = \"1s\"\n[auth]\nrequirepass = \"{ROOT_PASSWORD}\"\nadmin_token = \"{TOKEN}\"\n"
        ),
    )
    .unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let mut client = connect(server.resp_addr(), "default", ROOT_PASSWORD);
    // 32 elements of 1 MiB (a transaction's redo is at most a log buffer strand).
    const ELEMENT: usize = 1 << 20;
    const ELEMENTS: usize = 32;
    for _ in 0..ELEMENTS {
        redis::cmd("RPUSH").arg("large").arg(vec![b'l'; ELEMENT]).query::<()>(&mut client).unwrap();
    }
    drop(client);
    let mut stream = common::raw(server.resp_addr());
    assert_eq!(common::ask(&mut stream, &format!("AUTH {ROOT_PASSWORD}\r\n")), "+OK\r\n");
    stream.write_all(b"LRANGE large 0 -1\r\n").unwrap();
    // A read every 20 ms: several seconds for the whole reply, never a second without reading.
    let expected = format!("*{ELEMENTS}\r\n").len()
        + ELEMENTS * (format!("${ELEMENT}\r\n").len() + ELEMENT + 2);
    let started = Instant::now();
    let mut received = 0usize;
    let mut chunk = vec![0u8; 128 << 10];
    while received < expected {
        match stream.read(&mut chunk[..(128 << 10).min(expected - received)]) {
            Ok(0) => break,
            Ok(read) => received += read,
            Err(error) => panic!("after {received} bytes: {error}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        received,
        expected,
        "the reply was cut off after {received} bytes, {:.1?} after the request",
        started.elapsed()
    );
    println!("{expected} bytes read in {:.1?} with idle_timeout 1s", started.elapsed());
    assert!(started.elapsed() > Duration::from_secs(2), "the reply was read too fast to tell");
}

/// `tls.admin`: the admin API speaks only HTTPS. A plain HTTP client gets nothing; the
/// `redoguard` commands work with the configuration's CA and fail, naming the certificate,
/// without it or with another CA; a POST still needs the token.
#[test]
fn the_admin_api_over_https_needs_the_ca_and_still_the_token() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the admin HTTPS test");
    let dir = tempfile::tempdir().unwrap();
    tls::certs::write_set(dir.path(), &[("server".into(), vec!["127.0.0.1".into()])]).unwrap();
    let other = dir.path().join("other-ca");
    tls::certs::write_set(&other, &[("server".into(), vec!["127.0.0.1".into()])]).unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nadmin_token = \"{TOKEN}\"\n\
             [tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/server.pem\"\nkey_file = \"{0}/server-key.pem\"\nname = \"server\"\nredo = false\nadmin = true\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let server = Server::start(&dir.path().join("data"), Some(&config), &dir.path().join("log"));
    let admin = server.admin_addr().to_string();
    let ca = dir.path().join("ca.pem");
    let other_ca = other.join("ca.pem");
    let redoguard = |args: &[&str]| {
        let mut command = std::process::Command::new(common::binary());
        command.args(args).env_remove("REDOGUARD_CA").env_remove("REDOGUARD_TOKEN");
        common::run_bounded(&mut command, Duration::from_secs(30))
    };

    // Plain HTTP: no answer that a browser or curl would take for one.
    let plain = exchange(server.admin_addr(), b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(!plain.contains("HTTP/1.1 200") && !plain.contains("database_id"), "{plain}");

    // With the CA: status over HTTPS.
    let (ok, stdout, stderr) =
        redoguard(&["status", "--addr", &admin, "--ca", ca.to_str().unwrap(), "--json"]);
    assert!(ok, "{stdout}{stderr}");
    let status: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(status["server"]["admin_token_required"].as_bool().unwrap(), "{stdout}");

    // Without a CA, or with a CA that did not sign the server's certificate: refused, saying so.
    let (ok, stdout, stderr) = redoguard(&["status", "--addr", &admin]);
    assert!(!ok, "plain HTTP to an HTTPS admin API succeeded: {stdout}");
    assert!(stderr.contains("--ca"), "{stderr}");
    let (ok, stdout, stderr) =
        redoguard(&["status", "--addr", &admin, "--ca", other_ca.to_str().unwrap()]);
    assert!(!ok, "an untrusted server certificate was accepted: {stdout}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    // A POST over HTTPS still needs the token.
    let (ok, _, stderr) = redoguard(&["logswitch", "--addr", &admin, "--ca", ca.to_str().unwrap()]);
    assert!(!ok && stderr.contains("admin token"), "{stderr}");
    let (ok, stdout, stderr) =
        redoguard(&["logswitch", "--addr", &admin, "--ca", ca.to_str().unwrap(), "--token", TOKEN]);
    assert!(ok, "{stdout}{stderr}");
    // The server went on serving its clients meanwhile.
    let mut client = server.redis();
    let _: () = redis::cmd("SET").arg("after").arg("https").query(&mut client).unwrap();
}
