//! What a primary sends a standby of each protocol version, seen from a standby made of
//! sockets: a version 5 standby gets writes without the zero padding of their last unit
//! (`TrimmedWrite`), a version 4 standby gets every write whole (it would refuse the new kind),
//! on each path a write takes: live ASYNC writes from the queue, catch-up pieces read back from
//! the log files, and SYNC writes on the SYNC connection (acknowledged by this standby). In
//! every case the writes, once their zero tail is put back, are exactly the units the primary
//! wrote (each unit's checksum holds). The primary's status counts the difference
//! (`wire_bytes_sent` against `bytes_sent`). A relay of version 9 gets, in the primary's
//! heartbeats, its word for the fast-start target behind it; one of version 8 never does (it
//! would refuse the bytes as malformed).

mod common;

use std::io::{Read, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Primary, destination, wait_until};
use parking_lot::Mutex;
use proto::{Ack, AckWanted, Channel, Decoder, Kind, Message, Position, Welcome, WriteKind};
use redo::crashdisk::Watchdog;
use transport::{Phase, ProtectionMode, Transport};

/// A redo write as received: the message kind, the redo bytes that travelled, the channel it
/// came on, and the write with its zero tail put back.
struct Received {
    kind: Kind,
    wire_bytes: usize,
    channel: Channel,
    write: proto::Write,
}

/// A standby of `version` made of a listener: it welcomes every connection as a standby that
/// has nothing yet, acknowledges the writes that ask for it (durable at once: nothing is kept),
/// and collects the writes, until stopped.
struct SocketStandby {
    address: String,
    received: Arc<Mutex<Vec<Received>>>,
    /// The heartbeats it received, in order.
    beats: Arc<Mutex<Vec<proto::Heartbeat>>>,
    stop: Arc<AtomicBool>,
    accepting: std::thread::JoinHandle<()>,
}

impl SocketStandby {
    fn start(version: u16) -> SocketStandby {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let received = Arc::new(Mutex::new(Vec::new()));
        let beats = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let accepting = {
            let (received, beats, stop) = (received.clone(), beats.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut connections = Vec::new();
                while !stop.load(Ordering::Acquire) {
                    match listener.accept() {
                        Ok((socket, _)) => {
                            let (received, beats, stop) =
                                (received.clone(), beats.clone(), stop.clone());
                            connections.push(std::thread::spawn(move || {
                                serve(socket, version, &received, &beats, &stop)
                            }));
                        }
                        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(error) => panic!("accepting: {error}"),
                    }
                }
                for connection in connections {
                    connection.join().unwrap();
                }
            })
        };
        SocketStandby { address, received, beats, stop, accepting }
    }

    fn units(&self) -> usize {
        self.received.lock().iter().filter(|r| r.write.kind == WriteKind::Units).count()
    }

    fn stop(self) -> Vec<Received> {
        self.stop.store(true, Ordering::Release);
        self.accepting.join().unwrap();
        std::mem::take(&mut *self.received.lock())
    }
}

/// One connection of the socket standby.
fn serve(
    mut socket: TcpStream,
    version: u16,
    received: &Mutex<Vec<Received>>,
    beats: &Mutex<Vec<proto::Heartbeat>>,
    stop: &AtomicBool,
) {
    socket.set_nonblocking(false).unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let decoder = Decoder::default();
    let mut buffer = Vec::new();
    let mut channel = Channel::Control;
    while !stop.load(Ordering::Acquire) {
        while let Some((message, used)) = decoder.decode(&buffer).unwrap() {
            buffer.drain(..used);
            let answer = match message {
                Message::Hello(hello) => {
                    channel = hello.channel;
                    Some(Message::Welcome(Welcome {
                        version,
                        database_id: hello.database_id,
                        position: Position {
                            complete_through_seq: 0,
                            current_seq: 1,
                            current_offset: 0,
                            applied_scn: 0,
                        },
                        standby_time_us: 0,
                    }))
                }
                Message::Write(write) => {
                    let kind = Message::Write(write.clone()).kind();
                    let wire_bytes = write.bytes.len();
                    let write = write.untrimmed();
                    let ack = (write.ack != AckWanted::None).then(|| {
                        Message::Ack(Ack {
                            write_id: write.write_id,
                            seq: write.seq,
                            end_offset: write.offset + write.len(),
                            durable: write.ack == AckWanted::Durable,
                        })
                    });
                    received.lock().push(Received { kind, wire_bytes, channel, write });
                    ack
                }
                Message::Heartbeat(beat) => {
                    beats.lock().push(beat);
                    None
                }
                _ => None,
            };
            if let Some(answer) = answer
                && socket.write_all(&answer.to_frame()).is_err()
            {
                return;
            }
        }
        let mut chunk = [0u8; 64 << 10];
        match socket.read(&mut chunk) {
            Ok(0) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// Which path the writes take.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    /// ASYNC, committed after the standby is connected: live writes from the queue.
    Queue,
    /// ASYNC, committed before the transport starts: pieces read back from the log files.
    Files,
    /// SYNC AFFIRM under Maximum Availability: live writes on the SYNC connection.
    Sync,
}

/// What a standby of `version` receives on `path` while the primary commits small
/// transactions one at a time (a write each, mostly padding), with the primary's count of
/// redo bytes sent and of bytes on the wire.
fn ship_to_standby_of_version(version: u16, path: Path) -> (Vec<Received>, u64, u64) {
    let standby = SocketStandby::start(version);
    let mut primary = Primary::open();
    let mut n = 0;
    let mut commit = |primary: &Primary| {
        primary.set(&format!("key{n}"), "a small value");
        n += 1;
    };
    if path == Path::Files {
        for _ in 0..30 {
            commit(&primary);
        }
    }
    let (mode, transport) = match path {
        Path::Sync => (ProtectionMode::MaximumAvailability, Transport::Sync),
        _ => (ProtectionMode::MaximumPerformance, Transport::Async),
    };
    let mut config = destination(standby.address.clone(), transport);
    config.reopen = Duration::from_secs(60);
    primary.ship_to(mode, config);
    // Catch-up sends the files in pieces of many writes each: one will do.
    let enough = if path == Path::Files { 1 } else { 20 };
    let deadline = Instant::now() + Duration::from_secs(30);
    while standby.units() < enough {
        assert!(Instant::now() < deadline, "{path:?}: the primary sent too few writes");
        if path != Path::Files {
            commit(&primary);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if path == Path::Sync {
        // Once synchronized, commits go over the SYNC connection.
        wait_until("synchronized", Duration::from_secs(20), || {
            primary.phase() == Phase::Synchronized
        });
        for _ in 0..20 {
            commit(&primary);
        }
    }
    let status = primary.transport.as_ref().unwrap().status().remove(0);
    primary.stop();
    (standby.stop(), status.bytes_sent, status.wire_bytes_sent)
}

/// Every unit of a write of units holds its checksum: the zero tail put back is the padding
/// the primary checksummed, byte for byte.
fn assert_units_whole(received: &[Received]) {
    let block = 4096;
    for Received { write, .. } in received.iter().filter(|r| r.write.kind == WriteKind::Units) {
        assert_eq!(write.bytes.len() % block, 0, "a write of whole units at {}", write.offset);
        for unit in write.bytes.chunks(block) {
            assert_eq!(&unit[..4], b"RGRU");
            let crc = crc32c::crc32c_append(crc32c::crc32c(&unit[..4]), &unit[8..]);
            assert_eq!(
                crc.to_le_bytes(),
                unit[4..8],
                "the unit of log {} at {} checksums",
                write.seq,
                write.offset
            );
        }
    }
}

/// The writes of units that came on `channel`, with `ack` asked.
fn units_on(received: &[Received], channel: Channel, ack: AckWanted) -> Vec<&Received> {
    received
        .iter()
        .filter(|r| r.write.kind == WriteKind::Units && r.channel == channel && r.write.ack == ack)
        .collect()
}

#[test]
fn a_version_5_standby_gets_writes_without_their_padding_on_every_path() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "version 5 standby");
    for path in [Path::Queue, Path::Files, Path::Sync] {
        let (received, redo_bytes, wire_bytes) = ship_to_standby_of_version(5, path);
        assert_units_whole(&received);
        let units = match path {
            Path::Sync => units_on(&received, Channel::Sync, AckWanted::Durable),
            _ => units_on(&received, Channel::Control, AckWanted::None),
        };
        let enough = if path == Path::Files { 1 } else { 10 };
        assert!(units.len() >= enough, "{path:?}: {} writes of units", units.len());
        assert!(
            units.iter().all(|r| r.kind == Kind::TrimmedWrite),
            "{path:?}: every write of small commits is trimmed"
        );
        let wire: usize = units.iter().map(|r| r.wire_bytes).sum();
        let whole: u64 = units.iter().map(|r| r.write.len()).sum();
        if path != Path::Files {
            // One commit a write: nearly all padding. (A piece read back from the files holds
            // many writes, each padded, and only its last unit's padding is left out.)
            assert!(
                (wire as u64) * 4 < whole,
                "{path:?}: {} writes of units: {wire} bytes sent of {whole}",
                units.len()
            );
            assert!(
                wire_bytes * 3 < redo_bytes,
                "{path:?}: the primary counts {wire_bytes} bytes on the wire for {redo_bytes} bytes of redo"
            );
        }
    }
}

#[test]
fn a_version_4_standby_gets_every_write_whole_on_every_path() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "version 4 standby");
    for path in [Path::Queue, Path::Files, Path::Sync] {
        let (received, redo_bytes, wire_bytes) = ship_to_standby_of_version(4, path);
        assert_units_whole(&received);
        if path == Path::Sync {
            let sync = units_on(&received, Channel::Sync, AckWanted::Durable);
            assert!(sync.len() >= 10, "{} SYNC writes", sync.len());
        }
        assert!(received.iter().all(|r| r.kind == Kind::Write), "{path:?}: no TrimmedWrite");
        assert!(received.iter().all(|r| r.wire_bytes as u64 == r.write.len()));
        assert!(
            wire_bytes > redo_bytes,
            "{path:?}: the primary counts {wire_bytes} bytes on the wire for {redo_bytes} bytes of redo"
        );
    }
}

/// A primary whose routes reach the fast-start target `t` through this destination (a relay),
/// shipping to a socket relay of `version`: the heartbeats the relay received.
fn heartbeats_to_relay_of_version(version: u16) -> Vec<proto::Heartbeat> {
    let relay = SocketStandby::start(version);
    let primary = Primary::open();
    let config = destination(relay.address.clone(), Transport::Async);
    let records = tempfile::tempdir().unwrap();
    let fast_start_config = transport::FastStartFailoverConfig {
        enabled: true,
        target: vec!["t".into()],
        ..Default::default()
    };
    let settings = roles::fast_start::Settings {
        threshold: fast_start_config.threshold,
        lag_limit: fast_start_config.lag_limit,
        protection: roles::fast_start::Protection::MaximumPerformance,
        targets: vec!["t".into()],
        observers: vec!["observer".into()],
        relays: [("primary".to_string(), [("t".to_string(), config.name.clone())].into())].into(),
    };
    let (file, record) = transport::fast_start::RecordFile::load(
        Arc::new(redo::storage::OsStorage::default()),
        records.path(),
    )
    .unwrap();
    let fast_start = transport::FastStart::new(
        fast_start_config,
        settings,
        "primary",
        file,
        record,
        primary.db.redo().durable_addr(),
    );
    let transport = transport::PrimaryTransport::start_as(
        primary.db.redo().handle(),
        transport::PrimaryIdentity::default(),
        ProtectionMode::MaximumPerformance,
        vec![config],
        &stats::Metrics::new(),
        Arc::new(|_| {}),
        Some(fast_start),
    )
    .unwrap();
    wait_until("three heartbeats", Duration::from_secs(20), || relay.beats.lock().len() >= 3);
    transport.stop();
    let beats = std::mem::take(&mut *relay.beats.lock());
    primary.stop();
    relay.stop();
    beats
}

#[test]
fn only_a_version_9_relay_gets_the_primarys_word_for_the_target_behind_it() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the relay word by version");
    let old = heartbeats_to_relay_of_version(8);
    assert!(old.iter().all(|beat| beat.relay.is_none()), "a version 8 relay got {old:?}");
    let new = heartbeats_to_relay_of_version(proto::PROTOCOL_VERSION);
    let word = new.last().and_then(|beat| beat.relay.clone()).expect("no word for t");
    assert_eq!(word.targets.len(), 1, "{word:?}");
    assert_eq!(word.targets[0].member, "t");
    // No observer has pinged this primary: none is named, and nothing is said of its silence.
    assert_eq!((word.targets[0].observer.as_str(), word.primary_silence_ms), ("", 0));
}
