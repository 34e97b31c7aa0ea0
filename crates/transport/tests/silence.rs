//! The standby's receive-silence limit (`silence_timeout`), in one process over loopback: a
//! redo source that says nothing on any of its connections is ended, a live primary's idle
//! channel is not.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use redo::crashdisk::Watchdog;
use redo::{OsStorage, Scn};
use transport::{ProtectionMode, StandbyConfig, Transport};

const SILENCE_TIMEOUT: Duration = Duration::from_secs(2);
/// What ending a silent connection may take beyond the limit on a loaded machine.
const SLACK: Duration = Duration::from_secs(8);

/// A peer that says hello as `member` on `channel` with the primary's identity, reads the
/// welcome, then says nothing more.
fn silent_peer(
    standby: &Standby,
    primary: &Primary,
    member: &str,
    channel: proto::Channel,
) -> TcpStream {
    let (identity, config) = (primary.db.redo().identity(), primary.db.redo().config());
    let hello = proto::Message::Hello(proto::Hello {
        version: proto::PROTOCOL_VERSION,
        version_min: proto::PROTOCOL_VERSION_MIN,
        database_id: identity.database_id.0,
        incarnation: identity.incarnation.0,
        thread: identity.thread.0,
        channel,
        destination: "standby".into(),
        block_size: config.block_size,
        log_file_size: config.log_file_size,
        groups: config.groups,
        primary_time_us: 0,
        member: member.into(),
        history: Vec::new(),
        relay_of: String::new(),
    });
    let mut peer = TcpStream::connect(standby.address()).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    peer.write_all(&hello.to_frame()).unwrap();
    let mut received = Vec::new();
    loop {
        match proto::Decoder::default().decode(&received).unwrap() {
            Some((proto::Message::Welcome(_), _)) => return peer,
            Some((other, _)) => panic!("{member}: {other:?} instead of a welcome"),
            None => {}
        }
        let mut buffer = [0u8; 256];
        let read = peer.read(&mut buffer).unwrap();
        assert!(read > 0, "{member}: closed before the welcome");
        received.extend_from_slice(&buffer[..read]);
    }
}

/// Whether the standby has ended `peer`'s connection (reading within `wait`).
fn ended(peer: &mut TcpStream, wait: Duration) -> bool {
    peer.set_read_timeout(Some(wait)).unwrap();
    let mut buffer = [0u8; 256];
    loop {
        match peer.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// A member that fell silent after its hello (as over a cut link: no FIN, no RST) is ended
/// after `silence_timeout`, never before. A SYNC connection that says nothing is kept as
/// long as its member's control connection hears heartbeats (a live primary with no commit
/// to ship), and ended once that member is gone too; the standby then says it has no
/// primary.
#[test]
fn a_silent_source_is_ended_and_an_idle_channel_of_a_live_one_is_not() {
    let _watchdog = Watchdog::new(Duration::from_secs(90), "silence timeout");
    let config = StandbyConfig {
        listen: "127.0.0.1:0".into(),
        silence_timeout: SILENCE_TIMEOUT,
        ..StandbyConfig::default()
    };
    let standby = Standby::open_configured(
        tempfile::tempdir().unwrap(),
        config,
        Arc::new(OsStorage::default()),
    );
    let mut primary = Primary::open();
    primary.ship_to(
        ProtectionMode::MaximumPerformance,
        destination(standby.address(), Transport::Async),
    );
    primary.set("k", "1");
    wait_until("the standby applies its primary's redo", Duration::from_secs(10), || {
        standby.db.applied_scn() >= Scn(1)
    });
    // The primary's own name as its hello gave it (none: its host, as the standby keys it).
    let member = standby.service.status().primary_member.unwrap_or_default();

    let idle_since = Instant::now();
    let mut idle_sync = silent_peer(&standby, &primary, &member, proto::Channel::Sync);
    let silent_since = Instant::now();
    let mut silent = silent_peer(&standby, &primary, "silent", proto::Channel::Control);
    assert!(ended(&mut silent, SILENCE_TIMEOUT + SLACK), "the silent member is still connected");
    let after = silent_since.elapsed();
    assert!(after >= SILENCE_TIMEOUT - Duration::from_millis(500), "ended after {after:?} only");

    // Twice the limit without a word on the SYNC connection: its member is heard on the other.
    let twice = (idle_since + 2 * SILENCE_TIMEOUT).saturating_duration_since(Instant::now());
    assert!(!ended(&mut idle_sync, twice), "an idle channel of the live primary was ended");
    let status = standby.service.status();
    assert!(status.primary_connected, "{status:?}");
    let shipping = &primary.transport.as_ref().unwrap().status()[0];
    assert_eq!(shipping.failures, 0, "the primary's own connection was ended: {shipping:?}");

    // The primary goes: its idle SYNC connection follows within the limit.
    primary.stop();
    assert!(ended(&mut idle_sync, SILENCE_TIMEOUT + SLACK), "the gone primary's channel stays");
    wait_until("the standby says no primary is connected", Duration::from_secs(5), || {
        !standby.service.status().connected
    });
    standby.stop();
}
