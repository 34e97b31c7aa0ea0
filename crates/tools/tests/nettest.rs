//! nettest client and server over loopback: every mode, and a server that keeps serving
//! whatever a hostile or broken client does.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tools::nettest::frame::{self, Header, Hello, Kind, Mode, Status, Welcome};
use tools::nettest::{ClientConfig, NettestError, Server, ServerConfig, SocketBuffer, run_client};

fn server(file: Option<std::path::PathBuf>) -> Server {
    Server::start(ServerConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        file,
        file_bytes: 8 << 20,
        message_bytes_max: 1 << 20,
        connections_max: 8,
        handshake_timeout: Duration::from_secs(2),
        ..ServerConfig::default()
    })
    .unwrap()
}

/// The server's counters once every connection thread has finished (a client returns
/// when it has its SUMMARY, a moment before the server's thread counts the test).
fn settled_stats(server: &Server) -> tools::nettest::ServerStats {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.connections() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    server.stats()
}

fn client(server: &Server, mode: Mode) -> ClientConfig {
    let mut config = ClientConfig::new("127.0.0.1", server.local_addr().port(), mode);
    config.duration = Duration::from_millis(300);
    config.interval = Duration::from_millis(100);
    config.timeout = Duration::from_secs(5);
    config
}

fn check_consistent(report: &tools::nettest::ClientReport) {
    assert!(report.messages > 0, "{report:?}");
    assert_eq!(report.bytes, report.messages * report.length as u64);
    assert!(report.lat_p50_us > 0.0);
    assert!(report.lat_p50_us <= report.lat_p99_us && report.lat_p99_us <= report.lat_max_us);
    assert!(report.intervals.len() >= 3, "{} intervals", report.intervals.len());
    assert_eq!(report.intervals.iter().map(|i| i.bytes).sum::<u64>(), report.bytes);
    assert!(report.elapsed_s >= 0.3);
    assert!(!report.congestion.is_empty());
    let json = serde_json::to_value(report).unwrap();
    for field in [
        "mode",
        "write",
        "length",
        "num_conn",
        "mb_per_s",
        "msgs_per_s",
        "lat_p50_us",
        "lat_p99_us",
        "lat_max_us",
        "intervals",
    ] {
        assert!(json.get(field).is_some(), "JSON lacks {field}");
    }
}

#[test]
fn every_mode_runs_over_loopback() {
    let server = server(None);
    for mode in [Mode::Sync, Mode::Async, Mode::Rtt] {
        let mut config = client(&server, mode);
        config.connections = 2;
        let mut seen = 0;
        let report = tools::nettest::run_client_with(&config, |_| seen += 1).unwrap();
        check_consistent(&report);
        assert_eq!(seen, report.intervals.len());
        assert_eq!(report.mode, mode);
        assert_eq!(report.num_conn, 2);
        assert_eq!(report.server_syncs, 0);
    }
    let stats = settled_stats(&server);
    assert_eq!(stats.tests_completed, 6, "{stats:?}");
    assert_eq!(stats.aborted + stats.refused_protocol + stats.failed, 0, "{stats:?}");
}

#[test]
fn write_mode_syncs_each_acknowledged_message_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(Some(dir.path().join("srl")));
    let mut config = client(&server, Mode::Sync);
    config.write = true;
    config.message_bytes = 4096;
    let report = run_client(&config).unwrap();
    check_consistent(&report);
    // SYNC: every message is made durable before its acknowledgement.
    assert_eq!(report.server_syncs, report.messages);
    assert!(report.server_sync_p50_us > 0.0);
    assert!(report.lat_p50_us >= report.server_sync_p50_us * 0.5);
    let file = dir.path().join("srl.0");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 8 << 20, "preallocated");

    let mut config = client(&server, Mode::Async);
    config.write = true;
    config.message_bytes = 64 * 1024;
    let report = run_client(&config).unwrap();
    check_consistent(&report);
    // ASYNC: one fdatasync may cover many messages, never the other way round.
    assert!(report.server_syncs >= 1 && report.server_syncs <= report.messages);
}

#[test]
fn a_rate_limit_is_respected() {
    let server = server(None);
    let mut config = client(&server, Mode::Async);
    config.duration = Duration::from_millis(500);
    config.message_bytes = 10_000;
    config.rate_bytes_per_s = Some(2_000_000.0);
    let report = run_client(&config).unwrap();
    // 2 MB/s for 0.5 s is 100 messages; pacing allows one ahead.
    assert!((95..=102).contains(&report.messages), "{} messages", report.messages);
}

#[test]
fn explicit_socket_buffers_are_applied_and_capping_is_detected() {
    let server = server(None);
    let mut config = client(&server, Mode::Rtt);
    config.sockbuf = SocketBuffer::Bytes(64 * 1024);
    let report = run_client(&config).unwrap();
    assert_eq!(report.client_sndbuf, 128 * 1024, "Linux doubles the request");
    assert_eq!(report.server_rcvbuf, 128 * 1024);
    assert!(!report.sockbuf_capped);

    let (wmem_max, _) = tools::nettest::socket::buffer_limits().unwrap();
    config.sockbuf = SocketBuffer::Bytes(wmem_max * 2);
    let report = run_client(&config).unwrap();
    if tools::nettest::socket::buffer_limits().unwrap().0 == wmem_max {
        assert!(report.sockbuf_capped, "{report:?}");
        assert!(report.summary_text().contains("capped"));
    }
}

fn connect(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(server.local_addr()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream
}

fn hello(mode: Mode, write: bool, message_bytes: u32) -> Vec<u8> {
    let hello = Hello { version: frame::VERSION, mode, write, message_bytes, sockbuf_bytes: 0 };
    let mut out = Vec::new();
    frame::encode(&mut out, Kind::Hello, 0, 0, &hello.encode());
    out
}

/// Reads frames until the server closes; returns them.
fn read_until_closed(stream: &mut TcpStream) -> Vec<(Header, Vec<u8>)> {
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    let mut frames = Vec::new();
    let mut rest = &bytes[..];
    while let Ok(Some((frame, used))) = frame::decode(rest, u32::MAX) {
        frames.push((frame.header, frame.body.to_vec()));
        rest = &rest[used..];
    }
    frames
}

fn error_text(frames: &[(Header, Vec<u8>)]) -> String {
    let (_, body) =
        frames.iter().find(|(header, _)| header.kind == Kind::Error).expect("an ERROR frame");
    String::from_utf8(body.clone()).unwrap()
}

#[test]
fn the_server_survives_hostile_and_broken_clients() {
    let server = server(None);

    // A port scanner: connect, close.
    drop(connect(&server));

    // A wrong-protocol client.
    let mut http = connect(&server);
    http.write_all(b"GET / HTTP/1.1\r\nHost: standby\r\n\r\n").unwrap();
    let text = error_text(&read_until_closed(&mut http));
    assert!(text.contains("unknown frame kind 71") && text.contains("GET / HTTP"), "{text}");

    // A 4 GB length field after a proper handshake.
    let mut huge = connect(&server);
    huge.write_all(&hello(Mode::Async, false, 9400)).unwrap();
    let header = Header { kind: Kind::Data, flags: 0, body_bytes: u32::MAX, seq: 1 };
    huge.write_all(&header.encode()).unwrap();
    let frames = read_until_closed(&mut huge);
    assert_eq!(frames[0].0.kind, Kind::Welcome);
    let text = error_text(&frames);
    assert!(text.contains("4294967295 bytes is longer than the maximum of 1048576"), "{text}");

    // A client that dies in the middle of a message.
    let mut dying = connect(&server);
    dying.write_all(&hello(Mode::Sync, false, 9400)).unwrap();
    let header = Header { kind: Kind::Data, flags: frame::FLAG_SYNC, body_bytes: 9400, seq: 1 };
    dying.write_all(&header.encode()).unwrap();
    dying.write_all(&[0u8; 5000]).unwrap();
    drop(dying);

    // A client that sends half a header and vanishes, and one with a newer version.
    let mut half = connect(&server);
    half.write_all(&[1, 0, 0]).unwrap();
    drop(half);
    let mut newer = connect(&server);
    let hello_v2 =
        Hello { version: 2, mode: Mode::Sync, write: false, message_bytes: 1, sockbuf_bytes: 0 };
    let mut out = Vec::new();
    frame::encode(&mut out, Kind::Hello, 0, 0, &hello_v2.encode());
    newer.write_all(&out).unwrap();
    let frames = read_until_closed(&mut newer);
    let welcome = Welcome::decode(&frames[0].1).unwrap();
    assert_eq!(welcome.status, Status::Version);
    assert!(welcome.reason.contains("version 1"), "{}", welcome.reason);

    // Everyone else is still served.
    let report = run_client(&client(&server, Mode::Sync)).unwrap();
    assert!(report.messages > 0);

    // Each misbehaviour was recognised for what it was.
    let stats = settled_stats(&server);
    assert_eq!(stats.closed_silent, 1, "{stats:?}");
    assert_eq!(stats.refused_protocol, 3, "http, half header, version: {stats:?}");
    assert_eq!(stats.refused_too_long, 1, "{stats:?}");
    assert_eq!(stats.aborted, 1, "{stats:?}");
    assert_eq!(stats.tests_completed, 1, "{stats:?}");
}

#[test]
fn a_silent_connection_is_dropped_after_the_handshake_timeout() {
    let server = server(None);
    let mut silent = connect(&server);
    let start = std::time::Instant::now();
    let frames = read_until_closed(&mut silent);
    assert!(frames.is_empty());
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(5), "{waited:?}");
}

#[test]
fn requests_the_server_cannot_serve_are_refused_with_the_reason() {
    let server = server(None);
    let mut config = client(&server, Mode::Sync);
    config.write = true;
    let error = run_client(&config).unwrap_err();
    assert!(matches!(error, NettestError::Refused { .. }), "{error}");
    assert!(error.to_string().contains("without --file"), "{error}");

    let mut config = client(&server, Mode::Sync);
    config.message_bytes = 2 << 20;
    let error = run_client(&config).unwrap_err().to_string();
    assert!(error.contains("exceed this server's maximum of 1048576 bytes"), "{error}");
}

#[test]
fn a_full_server_says_busy_and_keeps_its_clients() {
    let server = Server::start(ServerConfig {
        bind: "127.0.0.1:0".parse().unwrap(),
        connections_max: 1,
        ..ServerConfig::default()
    })
    .unwrap();
    let mut holder = connect(&server);
    holder.write_all(&hello(Mode::Rtt, false, 1)).unwrap();
    let mut welcome = [0u8; 16 + Welcome::FIXED_BYTES];
    holder.read_exact(&mut welcome).unwrap();
    let error = run_client(&client(&server, Mode::Rtt)).unwrap_err().to_string();
    assert!(error.contains("Busy") && error.contains("slots are busy"), "{error}");
    // The first client is still served.
    let mut ping = Vec::new();
    frame::encode(&mut ping, Kind::Ping, 0, 7, &[1]);
    holder.write_all(&ping).unwrap();
    let mut pong = [0u8; 16];
    holder.read_exact(&mut pong).unwrap();
    let header = Header::decode(&pong, 0).unwrap();
    assert_eq!((header.kind, header.seq), (Kind::Pong, 7));
    assert_eq!(server.stats().refused_busy, 1);
}

#[test]
fn a_server_that_never_answers_times_out_clearly() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let holder = std::thread::spawn(move || listener.accept().map(|(stream, _)| stream));
    let mut config = ClientConfig::new("127.0.0.1", port, Mode::Sync);
    config.timeout = Duration::from_millis(200);
    config.duration = Duration::from_millis(100);
    config.interval = Duration::from_millis(100);
    let error = run_client(&config).unwrap_err();
    assert!(matches!(error, NettestError::Timeout { .. }), "{error}");
    drop(holder.join());
}

#[test]
fn a_server_that_dies_mid_test_fails_the_client_clearly() {
    let server = server(None);
    let mut config = client(&server, Mode::Sync);
    config.duration = Duration::from_secs(5);
    let address = server.local_addr();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        server.shutdown();
    });
    let start = std::time::Instant::now();
    let error = run_client(&config).unwrap_err();
    killer.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(3), "the client noticed late");
    let text = error.to_string();
    assert!(text.contains(&address.to_string()), "{text}");
}
