//! What a primary sends a standby of each protocol version, seen from a standby made of a
//! socket: a version 5 standby gets small writes without the zero padding of their last unit
//! (`TrimmedWrite`), a version 4 standby gets every write whole (it would refuse the new kind),
//! and in both cases the writes, once their zero tail is put back, are exactly the units the
//! primary wrote (each unit's checksum holds). The primary's status counts the difference
//! (`wire_bytes_sent` against `bytes_sent`).

mod common;

use std::io::{Read, Write as _};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{Primary, destination};
use proto::{Decoder, Kind, Message, Position, Welcome, WriteKind};
use redo::crashdisk::Watchdog;
use transport::{ProtectionMode, Transport};

/// Redo writes, as received: the message kind and the write with its zero tail put back.
struct Received {
    kind: Kind,
    wire_bytes: usize,
    write: proto::Write,
}

/// Accepts the primary's control connection, welcomes it as a standby of `version` that has
/// nothing yet, and collects the redo writes it sends until `enough` of them carry units or
/// the time is up.
fn standby_of_version(listener: TcpListener, version: u16, enough: usize) -> Vec<Received> {
    let (mut socket, _) = listener.accept().unwrap();
    socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let decoder = Decoder::default();
    let mut buffer = Vec::new();
    let mut received = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.iter().filter(|r: &&Received| r.write.kind == WriteKind::Units).count() < enough
    {
        assert!(Instant::now() < deadline, "the primary sent too few writes: {}", received.len());
        while let Some((message, used)) = decoder.decode(&buffer).unwrap() {
            buffer.drain(..used);
            match message {
                Message::Hello(hello) => {
                    let welcome = Message::Welcome(Welcome {
                        version,
                        database_id: hello.database_id,
                        position: Position {
                            complete_through_seq: 0,
                            current_seq: 1,
                            current_offset: 0,
                            applied_scn: 0,
                        },
                        standby_time_us: 0,
                    });
                    socket.write_all(&welcome.to_frame()).unwrap();
                }
                Message::Write(write) => received.push(Received {
                    kind: Message::Write(write.clone()).kind(),
                    wire_bytes: write.bytes.len(),
                    write: write.untrimmed(),
                }),
                _ => {}
            }
        }
        let mut chunk = [0u8; 64 << 10];
        match socket.read(&mut chunk) {
            Ok(0) => panic!("the primary closed the connection"),
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
            Err(error) => panic!("reading from the primary: {error}"),
        }
    }
    let _ = TcpStream::shutdown(&socket, std::net::Shutdown::Both);
    received
}

/// Ships to a standby of `version` while committing small transactions one at a time (a
/// write each, mostly padding), and returns what the standby received and the primary's
/// count of redo bytes sent and of bytes on the wire.
fn ship_to_standby_of_version(version: u16) -> (Vec<Received>, u64, u64) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let standby = std::thread::spawn(move || standby_of_version(listener, version, 20));
    let mut primary = Primary::open();
    let mut config = destination(address, Transport::Async);
    config.reopen = Duration::from_secs(60);
    primary.ship_to(ProtectionMode::MaximumPerformance, config);
    let mut n = 0;
    while !standby.is_finished() {
        primary.set(&format!("key{n}"), "a small value");
        n += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    let received = standby.join().unwrap();
    let status = primary.transport.as_ref().unwrap().status().remove(0);
    primary.stop();
    (received, status.bytes_sent, status.wire_bytes_sent)
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

#[test]
fn a_version_5_standby_gets_small_writes_without_their_padding() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "version 5 standby");
    let (received, redo_bytes, wire_bytes) = ship_to_standby_of_version(5);
    assert_units_whole(&received);
    assert!(
        wire_bytes * 3 < redo_bytes,
        "the primary counts {wire_bytes} bytes on the wire for {redo_bytes} bytes of redo"
    );
    let units: Vec<_> = received.iter().filter(|r| r.write.kind == WriteKind::Units).collect();
    assert!(units.iter().all(|r| r.kind == Kind::TrimmedWrite), "every small write is trimmed");
    let wire: usize = units.iter().map(|r| r.wire_bytes).sum();
    let whole: usize = units.iter().map(|r| r.write.bytes.len()).sum();
    assert!(
        wire * 4 < whole,
        "{} writes of units: {wire} bytes sent of {whole} written",
        units.len()
    );
}

#[test]
fn a_version_4_standby_gets_every_write_whole() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "version 4 standby");
    let (received, redo_bytes, wire_bytes) = ship_to_standby_of_version(4);
    assert_units_whole(&received);
    assert!(
        wire_bytes > redo_bytes,
        "the primary counts {wire_bytes} bytes on the wire for {redo_bytes} bytes of redo"
    );
    assert!(received.iter().all(|r| r.kind == Kind::Write), "no TrimmedWrite to version 4");
    assert!(received.iter().all(|r| r.wire_bytes == r.write.bytes.len()));
}
