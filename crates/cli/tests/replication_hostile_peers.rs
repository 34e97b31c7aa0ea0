//! Hostile peers on a standby's redo listener, on the real binary: a handshake claiming another
//! database (after the standby adopted its primary's), garbage bytes, a well-formed frame with
//! a bad checksum, a frame header whose length field lies (4 GiB), and garbage redo after a
//! hello of the right database, compressed redo whose uncompressed length lies, and a
//! decompression bomb. Each is refused with an error message naming why, then the
//! connection is closed; the standby logs why; not a byte reaches its standby logs or its
//! archive; its status still names its real primary; and it goes on serving that primary,
//! which stays synchronized and keeps committing. Connections that say nothing are ended
//! within the handshake timeout. (Without TLS nothing proves a peer: the attacks that need
//! TLS to fail are in `security_redo.rs`.)

mod common;
mod replication_support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Watchdog;
use proto::{Channel, Decoder, ErrorCode, FRAME_HEADER_LEN, Hello, Message};
use replication_support::{Pair, PairConfig, block_on, destination};
use transport::Phase;

/// Every file under the standby's redo directory and archive, with its bytes.
fn standby_files(standby_dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    for dir in ["redo", "archive"] {
        for entry in std::fs::read_dir(standby_dir.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// What a standby is, for the comparison before and after the hostile peers.
#[derive(Debug, PartialEq, Eq)]
struct Received {
    received: String,
    complete_through_seq: u64,
    received_scn: u64,
    applied_scn: u64,
}

fn received(status: &server::ServerStatus) -> Received {
    let standby = status.replication.standby.as_ref().expect("a standby's status");
    Received {
        received: format!("{:?}", standby.received),
        complete_through_seq: standby.complete_through_seq.0,
        received_scn: standby.received_scn.0,
        applied_scn: status.database.applied_scn.0,
    }
}

/// Sends `bytes` to the redo listener and reads what comes back until the standby closes
/// the connection: the frames it sent, and the address the peer connected from.
fn hostile(addr: SocketAddr, bytes: &[u8], what: &str) -> (Vec<Message>, SocketAddr) {
    let mut stream = common::raw(addr);
    let from = stream.local_addr().unwrap();
    // The standby may close as soon as it has seen enough: a failed write is fine.
    let _ = stream.write_all(bytes);
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(error) => panic!("{what}: the standby did not close the connection: {error}"),
        }
        assert!(Instant::now() < deadline, "{what}: the standby kept the connection open");
    }
    let decoder = Decoder::default();
    let mut frames = Vec::new();
    let mut at = 0;
    while at < received.len() {
        match decoder.decode(&received[at..]) {
            Ok(Some((message, used))) => {
                frames.push(message);
                at += used;
            }
            other => {
                panic!("{what}: the standby answered with a bad frame ({other:?}): {received:?}")
            }
        }
    }
    (frames, from)
}

/// The one error message in `frames`, which must have `code` and mention `says`.
fn assert_refused(frames: &[Message], code: ErrorCode, says: &str, what: &str) {
    match frames {
        [Message::Error(error)] => {
            assert_eq!(error.code, code, "{what}: refused with {error:?}");
            assert!(error.message.contains(says), "{what}: refused with {error:?}, not '{says}'");
        }
        other => panic!("{what}: expected one error message, got {other:?}"),
    }
}

#[test]
fn hostile_peers_on_the_redo_listener_are_refused_and_change_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the hostile peers test");
    let started = Instant::now();
    let pair = Pair::start(PairConfig::default());
    pair.wait_for_phase(Phase::Synchronized, Duration::from_secs(30));
    let mut primary = pair.primary().redis();
    for index in 0..100 {
        let key = format!("before:{index}");
        redis::cmd("SET")
            .arg(&key)
            .arg(replication_support::value_of(&key))
            .query::<()>(&mut primary)
            .unwrap();
    }
    block_on(workload::demo::wait_applied_all_received(
        pair.standby().admin_addr(),
        Duration::from_secs(30),
    ))
    .unwrap();
    let primary_status = pair.primary().status();
    let database_id = primary_status.database.redo.identity.database_id.0;
    let standby_before = pair.standby().status();
    assert_eq!(
        standby_before.database.redo.identity.database_id.0, database_id,
        "the standby adopted its primary's identity"
    );
    let before = received(&standby_before);
    let files_before = standby_files(&pair.standby_dir);
    let refused_before = standby_before.replication.standby.as_ref().unwrap().refused;
    let log_start = replication_support::file_len(&pair.standby_log());

    let hello = |database_id: u64| Hello {
        version: proto::PROTOCOL_VERSION,
        version_min: proto::PROTOCOL_VERSION_MIN,
        database_id,
        incarnation: 1,
        thread: 1,
        channel: Channel::Control,
        destination: "impostor".to_string(),
        block_size: 4096,
        log_file_size: 2 << 20,
        groups: 3,
        primary_time_us: 0,
        member: "impostor".to_string(),
        history: Vec::new(),
        relay_of: String::new(),
    };
    let addr = pair.redo_addr;
    // (a) A primary of another database.
    let (frames, _) =
        hostile(addr, &Message::Hello(hello(database_id ^ 0x5a5a_5a5a)).to_frame(), "(a)");
    assert_refused(
        &frames,
        ErrorCode::WrongDatabase,
        "this standby protects database",
        "(a) wrong database",
    );
    // (b) Garbage: not our protocol at all.
    let (frames, _) = hostile(addr, b"GET /status HTTP/1.1\r\nHost: standby\r\n\r\n", "(b)");
    assert_refused(&frames, ErrorCode::Malformed, "bad magic", "(b) garbage");
    // (c) A well-formed hello of the right database, one bit of its checksum flipped.
    let mut frame = Message::Hello(hello(database_id)).to_frame();
    frame[12] ^= 0x01;
    let (frames, _) = hostile(addr, &frame, "(c)");
    assert_refused(&frames, ErrorCode::Malformed, "checksum", "(c) bad checksum");
    // (d) A header announcing a 4 GiB payload: refused before a byte of it is awaited.
    let mut frame = Message::Hello(hello(database_id)).to_frame();
    frame[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let (frames, _) = hostile(addr, &frame[..FRAME_HEADER_LEN], "(d)");
    assert_refused(&frames, ErrorCode::Malformed, "exceeds the limit", "(d) lying length");

    // (e) A hello of the right database (accepted: it could be the primary reconnecting),
    // then a write of garbage at exactly the place the standby expects its next redo.
    let position = standby_before.replication.standby.as_ref().unwrap().received;
    let garbage = Message::Write(proto::Write {
        write_id: 1,
        seq: position.seq.0,
        offset: position.offset,
        kind: proto::WriteKind::Units,
        ack: proto::AckWanted::Durable,
        primary_time_us: 0,
        last_scn: u64::MAX / 2,
        primary_durable_scn: 0,
        bytes: vec![0xa5; 4096],
        zero_tail: 0,
    });
    let mut bytes = Message::Hello(hello(database_id)).to_frame();
    bytes.extend_from_slice(&garbage.to_frame());
    let (frames, impostor) = hostile(addr, &bytes, "(e)");
    assert!(matches!(frames.first(), Some(Message::Welcome(_))), "(e): {frames:?}");
    assert_refused(
        &frames[1..],
        ErrorCode::Malformed,
        &format!("unit at offset {}", position.offset),
        "(e) garbage redo",
    );

    // (e2) A compressed write whose uncompressed length lies, and (e3) a decompression bomb
    // (65 MiB of zeros in a few KiB, claiming the frame bound): each refused as a compressed
    // frame that does not decompress to what it claims, with nothing allocated beyond the
    // bound and nothing written.
    let payload = {
        let frame = garbage.to_frame();
        frame[FRAME_HEADER_LEN..].to_vec()
    };
    let zeros = vec![0u8; 65 << 20];
    for (what, codec, claimed, data) in [
        ("(e2) lying length", 1u8, payload.len() as u32 + 1, lz4_flex::block::compress(&payload)),
        ("(e3) bomb", 2u8, (64 << 20) + 4096, zstd::bulk::compress(&zeros, 3).unwrap()),
    ] {
        let mut wire = claimed.to_le_bytes().to_vec();
        wire.extend_from_slice(&data);
        let mut frame = b"RGWP".to_vec();
        frame.extend_from_slice(&(wire.len() as u32).to_le_bytes());
        frame.extend_from_slice(&[3, codec, 0, 0]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[8..12]), &wire);
        frame.extend_from_slice(&crc.to_le_bytes());
        frame.extend_from_slice(&wire);
        let mut bytes = Message::Hello(hello(database_id)).to_frame();
        bytes.extend_from_slice(&frame);
        let (frames, _) = hostile(addr, &bytes, what);
        assert!(matches!(frames.first(), Some(Message::Welcome(_))), "{what}: {frames:?}");
        assert_refused(&frames[1..], ErrorCode::Malformed, "compressed Write frame refused", what);
    }

    // Each was logged as an error and counted.
    let standby_said = replication_support::log_since(&pair.standby_log(), log_start);
    let refusals: Vec<&str> =
        standby_said.lines().filter(|line| line.contains("refused a peer")).collect();
    assert_eq!(refusals.len(), 4, "the standby logged:\n{standby_said}");
    for (line, says) in
        refusals.iter().zip(["WrongDatabase", "bad magic", "checksum", "exceeds the limit"])
    {
        assert!(line.contains("ERROR") && line.contains(says), "logged as: {line}");
    }
    // (The standby logs why a connection ended once it has closed it.)
    let logged = common::poll_until(Duration::from_secs(5), || {
        replication_support::log_since(&pair.standby_log(), log_start).lines().any(|line| {
            line.contains("WARN")
                && line.contains("connection from the primary ended")
                && line.contains("unit at offset")
        })
    });
    assert!(
        logged,
        "(e) not logged:\n{}",
        replication_support::log_since(&pair.standby_log(), log_start)
    );
    let standby_after = pair.standby().status();
    let replication = standby_after.replication.standby.as_ref().unwrap();
    assert_eq!(replication.refused, refused_before + 4);
    // Its status still names its real primary's connection, not the impostor's.
    assert!(replication.connected, "{replication:?}");
    assert_ne!(
        replication.primary_peer.as_deref(),
        Some(impostor.to_string().as_str()),
        "the standby names a peer it dropped as its primary"
    );

    // Nothing written: the same position and the same bytes in every standby log and archive.
    assert_eq!(received(&standby_after), before, "the standby's position moved");
    let files_after = standby_files(&pair.standby_dir);
    assert_eq!(
        files_after.keys().collect::<Vec<_>>(),
        files_before.keys().collect::<Vec<_>>(),
        "files appeared or vanished"
    );
    for (path, bytes) in &files_before {
        assert!(files_after[path] == *bytes, "{} changed", path.display());
    }

    // The real primary was never disturbed: still synchronized, and it goes on committing.
    let status = pair.primary().status();
    let destination_now = destination(&status);
    assert_eq!(destination_now.phase, Phase::Synchronized, "{destination_now:?}");
    assert_eq!(destination_now.failures, 0, "{destination_now:?}");
    for index in 0..100 {
        let key = format!("after:{index}");
        redis::cmd("SET")
            .arg(&key)
            .arg(replication_support::value_of(&key))
            .query::<()>(&mut primary)
            .unwrap();
    }
    assert_eq!(destination(&pair.primary().status()).phase, Phase::Synchronized);
    block_on(workload::demo::wait_applied_all_received(
        pair.standby().admin_addr(),
        Duration::from_secs(30),
    ))
    .unwrap();
    let mut standby = pair.standby().redis();
    for prefix in ["before", "after"] {
        for index in 0..100 {
            let key = format!("{prefix}:{index}");
            let value: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(&mut standby).unwrap();
            assert!(value == Some(replication_support::value_of(&key)), "{key} on the standby");
        }
    }
    // (f) A flood of connections that say nothing: each holds a handshake slot for at most
    // the handshake timeout (5 s), and newer ones from the same address end the oldest, so the
    // flood never holds the listener; the primary goes on.
    let flood_started = Instant::now();
    let mut idle: Vec<std::net::TcpStream> = (0..40).map(|_| common::raw(addr)).collect();
    for (index, stream) in idle.iter_mut().enumerate() {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(0) => {}
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("(f) idle connection {index} was not closed: {other:?}"),
        }
    }
    assert!(
        flood_started.elapsed() < Duration::from_secs(9),
        "(f) idle connections were held {:.1?}",
        flood_started.elapsed()
    );
    drop(idle);
    redis::cmd("SET").arg("after:flood").arg("1").query::<()>(&mut primary).unwrap();
    assert_eq!(destination(&pair.primary().status()).phase, Phase::Synchronized);
    println!(
        "8 hostile peers refused; nothing written; replication undisturbed; in {:.1?}",
        started.elapsed()
    );
    pair.stop();
}
