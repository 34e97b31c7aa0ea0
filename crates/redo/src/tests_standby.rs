//! A standby's side, fed in process: every write makes byte-identical archives, a late
//! standby catches up from online and archived logs, garbage is refused, a primary that
//! lost its tail makes the standby drop it, and a ship cursor reading the primary's files
//! keeps up with its log switches.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::crashdisk::{CrashDisk, Watchdog};
use crate::tests::{
    IMMEDIATE_WAIT, open_on, payload_for, small_config, standby_config, wait_until,
};
use crate::*;

/// A shipper that hands every write straight to an in-process standby (no network), as a
/// SYNC AFFIRM destination would.
pub(crate) struct Forward {
    pub(crate) standby: Arc<RedoLog>,
}

impl ship::Shipper for Forward {
    fn ship(&self, write: &Arc<ship::LogWrite>) -> Option<Box<dyn ship::ShipWait>> {
        self.standby
            .receive(write.seq, write.offset, write.kind, &write.bytes)
            .expect("the standby takes the primary's write");
        self.standby.sync_received().expect("sync");
        self.standby.note_primary_durable(write.durable_scn);
        None
    }
}

fn wait_archived(log: &RedoLog, seqs: &[LogSeq]) {
    wait_until("the archiver catches up", || {
        let archived: Vec<LogSeq> = log.archived_logs().iter().map(|entry| entry.seq).collect();
        seqs.iter().all(|seq| archived.contains(seq))
    });
}

fn assert_archives_identical(
    primary: &RedoLog,
    primary_disk: &CrashDisk,
    standby: &RedoLog,
    standby_disk: &CrashDisk,
) -> usize {
    let primary_logs = primary.archived_logs();
    let seqs: Vec<LogSeq> = primary_logs.iter().map(|entry| entry.seq).collect();
    wait_archived(standby, &seqs);
    let standby_logs = standby.archived_logs();
    for entry in &primary_logs {
        let copy = standby_logs
            .iter()
            .find(|copy| copy.seq == entry.seq)
            .expect("archived on the standby");
        let ours = primary_disk.contents(&entry.path).unwrap();
        let theirs = standby_disk.contents(&copy.path).unwrap();
        assert!(ours == theirs, "archived log {} differs between primary and standby", entry.seq);
    }
    primary_logs.len()
}

#[test]
fn a_standby_fed_every_write_has_byte_identical_archives() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "byte-identical standby");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    let standby = Arc::new(
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap(),
    );
    assert_eq!(standby.identity().database_id, DatabaseId(0), "a new standby has no identity");
    assert!(matches!(standby.append(b"x"), Err(RedoError::Standby)));
    assert!(
        matches!(standby.switch_logfile(), Err(RedoError::Refused(message)) if message.contains("switch logs on the primary")),
        "a standby's logs switch only with its primary's"
    );
    standby.adopt_identity(primary.identity().database_id).unwrap();
    primary.set_shipper(Some(Arc::new(Forward { standby: standby.clone() })));
    let mut expected = Vec::new();
    for n in 0..300u64 {
        let payload = payload_for(n, 50 + (n as usize * 97) % 4000);
        expected
            .push(RedoRecord { scn: primary.commit(&payload, IMMEDIATE_WAIT).unwrap(), payload });
    }
    primary.switch_logfile().unwrap();
    wait_until("the primary archives", || primary.archived_logs().len() >= 5);
    let compared = assert_archives_identical(&primary, &primary_disk, &standby, &standby_disk);
    assert!(compared >= 5, "{compared} logs compared");
    // The standby reads the same records, from its standby logs and archive.
    let records: Vec<RedoRecord> =
        standby.read_from_scn(Scn(1)).unwrap().map(|record| record.unwrap()).collect();
    assert_eq!(records, expected);
    assert_eq!(standby.confirmed_scn(), primary.durable_scn());
    // Another database's primary is refused.
    assert!(matches!(standby.adopt_identity(DatabaseId(42)), Err(RedoError::Refused(_))));
    primary.shutdown().unwrap();
    standby.shutdown().unwrap();
}

#[test]
fn a_late_standby_catches_up_from_online_and_archived_logs() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "late standby");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    for n in 0..200u64 {
        primary.commit(&payload_for(n, 3000), IMMEDIATE_WAIT).unwrap();
    }
    let standby = Arc::new(
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap(),
    );
    standby.adopt_identity(primary.identity().database_id).unwrap();
    let position = standby.standby_position();
    assert_eq!(position.complete_through_seq, LogSeq(0));
    assert_eq!(position.next, RedoAddr { seq: LogSeq(1), offset: 0 });
    // The first logs come whole (gap resolution, as archive chunks), the rest as writes.
    let online_oldest = primary.groups().iter().filter_map(|group| group.seq).min().unwrap();
    for seq in 1..online_oldest.0 {
        let extent = primary.log_extent(LogSeq(seq)).expect("archived");
        let total = extent.readable_end;
        let mut offset = 0;
        while offset < total {
            let len = (total - offset).min(5000);
            let bytes = primary.read_log_bytes(LogSeq(seq), offset, len as usize).unwrap();
            let complete =
                standby.receive_archive_chunk(LogSeq(seq), offset, total, &bytes).unwrap();
            offset += len;
            assert_eq!(complete, offset == total);
        }
    }
    assert_eq!(standby.standby_position().complete_through_seq, online_oldest.prev_seq());
    let mut cursor = ship::ShipCursor::new(RedoAddr { seq: online_oldest, offset: 0 });
    while let ship::Shipment::Write { seq, offset, kind, bytes } =
        cursor.next_shipment(&primary, 20_000).unwrap()
    {
        standby.receive(seq, offset, kind, &bytes).unwrap();
    }
    standby.sync_received().unwrap();
    // And from there, live.
    primary.set_shipper(Some(Arc::new(Forward { standby: standby.clone() })));
    for n in 200..260u64 {
        primary.commit(&payload_for(n, 3000), IMMEDIATE_WAIT).unwrap();
    }
    primary.switch_logfile().unwrap();
    wait_until("the primary archives", || {
        primary.archived_logs().iter().any(|entry| entry.seq >= LogSeq(online_oldest.0 + 3))
    });
    assert_archives_identical(&primary, &primary_disk, &standby, &standby_disk);
    let records = standby.read_from_scn(Scn(1)).unwrap().collect::<Result<Vec<_>>>().unwrap().len();
    assert_eq!(records, 260);
    // A restarted standby resumes where it was.
    let before = standby.standby_position();
    standby.shutdown().unwrap();
    drop(standby);
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap();
    assert_eq!(standby.standby_position(), before);
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn a_standby_refuses_garbage_and_writes_nothing() {
    let primary_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    primary.commit(&payload_for(1, 2000), IMMEDIATE_WAIT).unwrap();
    let standby_disk = CrashDisk::new();
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap();
    // Before adopting the primary's identity, its logs are another database's.
    let header = primary.read_log_bytes(LogSeq(1), 0, 4096).unwrap();
    let refused = standby.receive(LogSeq(1), 0, ship::WriteKind::OpenHeader, &header).unwrap_err();
    assert!(refused.to_string().contains("belongs to database"), "{refused}");
    standby.adopt_identity(primary.identity().database_id).unwrap();
    standby.receive(LogSeq(1), 0, ship::WriteKind::OpenHeader, &header).unwrap();
    let units = primary.read_log_bytes(LogSeq(1), 8192, 4096).unwrap();
    let members = [standby_config().member_path(0, 0)];
    let before = standby_disk.contents(&members[0]).unwrap();
    // A flipped bit, units of another log, units for another place, a gap, a bad header.
    let mut flipped = units.clone();
    flipped[100] ^= 1;
    for (seq, offset, bytes, why) in [
        (1u64, 8192u64, flipped, "checksum"),
        (2, 8192, units.clone(), "has not begun"),
        (1, 12288, units.clone(), "holds that log up to"),
        (1, 8192, vec![0u8; 4096], "no redo unit"),
    ] {
        let error =
            standby.receive(LogSeq(seq), offset, ship::WriteKind::Units, &bytes).unwrap_err();
        assert!(error.to_string().contains(why), "{why}: {error}");
    }
    assert!(
        standby.receive(LogSeq(1), 4096, ship::WriteKind::ClosedHeader, &vec![7u8; 4096]).is_err()
    );
    assert_eq!(
        standby_disk.contents(&members[0]).unwrap(),
        before,
        "nothing refused reached the standby log"
    );
    standby.receive(LogSeq(1), 8192, ship::WriteKind::Units, &units).unwrap();
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn a_primary_that_lost_its_tail_makes_the_standby_drop_it() {
    let primary_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(CrashDisk::new()), Metrics::new())
            .unwrap();
    standby.adopt_identity(primary.identity().database_id).unwrap();
    for n in 0..3u64 {
        primary.commit(&payload_for(n, 1000), IMMEDIATE_WAIT).unwrap();
    }
    let mut cursor = ship::ShipCursor::new(RedoAddr { seq: LogSeq(1), offset: 0 });
    while let ship::Shipment::Write { seq, offset, kind, bytes } =
        cursor.next_shipment(&primary, 1 << 20).unwrap()
    {
        standby.receive(seq, offset, kind, &bytes).unwrap();
    }
    standby.sync_received().unwrap();
    // The primary "crashed" after the first two writes only: it closes the log there.
    let header =
        match format::decode_header(&primary.read_log_bytes(LogSeq(1), 0, 4096).unwrap(), 0)
            .unwrap()
        {
            format::HeaderBlock::Open(header) => header,
            other => panic!("{other:?}"),
        };
    let end = format::LogEnd { next_scn: Scn(3), next_time_us: 1, end_offset: 8192 + 2 * 4096 };
    let mut closed = vec![0u8; 4096];
    format::encode_header(&mut closed, &format::HeaderBlock::Closed(header, end));
    let received =
        standby.receive(LogSeq(1), 4096, ship::WriteKind::ClosedHeader, &closed).unwrap();
    assert_eq!(received.closed, Some(end));
    assert_eq!(standby.take_divergence(), Some(Scn(3)));
    let records: Vec<Scn> =
        standby.read_from_scn(Scn(1)).unwrap().map(|record| record.unwrap().scn).collect();
    assert_eq!(records, vec![Scn(1), Scn(2)], "nothing past the primary's end is read");
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

/// A standby's acknowledgement of a SYNC AFFIRM write leaves before real-time apply is woken:
/// `sync_received_then` runs it with the end published (the standby's position never reads
/// below what it acknowledged) and only then wakes the readers waiting for redo.
#[test]
fn a_standby_acknowledges_before_it_wakes_its_readers() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let _watchdog = Watchdog::new(Duration::from_secs(60), "acknowledge before waking");
    let primary_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    primary.commit(&payload_for(1, 2000), IMMEDIATE_WAIT).unwrap();
    let standby = Arc::new(
        RedoLog::open_standby(standby_config(), Arc::new(CrashDisk::new()), Metrics::new())
            .unwrap(),
    );
    standby.adopt_identity(primary.identity().database_id).unwrap();
    let header = primary.read_log_bytes(LogSeq(1), 0, 4096).unwrap();
    standby.receive(LogSeq(1), 0, ship::WriteKind::OpenHeader, &header).unwrap();
    let units = primary.read_log_bytes(LogSeq(1), 8192, 4096).unwrap();
    let received = standby.receive(LogSeq(1), 8192, ship::WriteKind::Units, &units).unwrap();
    let before = standby.durable_addr();
    assert!(before.offset < received.end_offset, "units are durable only once synced");
    // A reader waiting for more redo than `before`, as real-time apply does.
    let ready = Arc::new(AtomicBool::new(false));
    let woken = Arc::new(AtomicBool::new(false));
    let reader = {
        let (standby, ready, woken) = (standby.clone(), ready.clone(), woken.clone());
        std::thread::spawn(move || {
            ready.store(true, Ordering::Release);
            let started = std::time::Instant::now();
            standby.wait_for_redo(before, Duration::from_secs(20));
            woken.store(true, Ordering::Release);
            started.elapsed()
        })
    };
    // Counted under the lock the end is published with, which the reader holds until it is
    // parked: from here on a publication finds it waiting.
    wait_until("the reader waits", || {
        ready.load(Ordering::Acquire)
            && standby.shared.log_writer.redo_waiters.load(Ordering::SeqCst) == 1
    });
    let acknowledged = standby
        .sync_received_then(|durable| {
            assert_eq!(durable.offset, received.end_offset, "all received is durable");
            assert_eq!(standby.durable_addr(), durable, "published before the acknowledgement");
            // Long enough for a woken reader to have run.
            std::thread::sleep(Duration::from_millis(200));
            assert!(!woken.load(Ordering::Acquire), "the reader ran before the acknowledgement");
            durable
        })
        .unwrap();
    let waited = reader.join().unwrap();
    assert!(woken.load(Ordering::Acquire));
    assert!(waited < Duration::from_secs(10), "the reader was woken, not timed out: {waited:?}");
    assert_eq!(acknowledged, standby.durable_addr());
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

/// A sender that reads the files keeps up with log switches: at a switch the next log is in
/// the group table before the writer's position moves into it, and a cursor polling there
/// must find "caught up", never "log not available" (which ends a standby's session). One
/// thread commits through many switches; the other follows with a cursor, as an ASYNC
/// destination reading the files does, and ends with every byte the primary wrote.
#[test]
fn a_cursor_following_the_writer_through_log_switches_never_finds_a_log_missing() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "cursor through switches");
    let disk = CrashDisk::new();
    let primary = open_on(&disk, &small_config(Path::new("/db"))).unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committer = {
        let primary = primary.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            for n in 0..1500u64 {
                primary.commit(&payload_for(n, 3000), IMMEDIATE_WAIT).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    let mut cursor = ship::ShipCursor::new(RedoAddr { seq: LogSeq(1), offset: 0 });
    let mut shipped = 0u64;
    loop {
        let finished = done.load(std::sync::atomic::Ordering::Acquire);
        match cursor.next_shipment(&primary, 20_000) {
            Ok(ship::Shipment::Write { bytes, .. }) => shipped += bytes.len() as u64,
            Ok(ship::Shipment::CaughtUp) if finished => break,
            Ok(ship::Shipment::CaughtUp) => std::hint::spin_loop(),
            Err(error) => panic!("after {shipped} bytes, at {:?}: {error}", cursor),
        }
    }
    committer.join().unwrap();
    assert_eq!(cursor.next, primary.written_addr(), "the cursor ends where the writer does");
    let switches = primary.metrics().stat("redo log switches").get();
    assert!(switches > 50, "only {switches} log switches ({shipped} bytes shipped)");
    primary.shutdown().unwrap();
}

/// A connection of an earlier session may deliver, after a partition heals, a write the
/// standby already has: the open header of its current log, say. The standby's position (what
/// it reports it holds, and writes after it) never goes back.
#[test]
fn a_resent_open_header_does_not_move_the_standby_back() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a resent open header");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    let standby = Arc::new(
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap(),
    );
    standby.adopt_identity(primary.identity().database_id).unwrap();
    // Every write, recorded as the primary shipped it.
    struct Record {
        standby: Arc<RedoLog>,
        writes: std::sync::Mutex<Vec<Arc<ship::LogWrite>>>,
    }
    impl ship::Shipper for Record {
        fn ship(&self, write: &Arc<ship::LogWrite>) -> Option<Box<dyn ship::ShipWait>> {
            self.standby.receive(write.seq, write.offset, write.kind, &write.bytes).unwrap();
            self.standby.sync_received().unwrap();
            self.writes.lock().unwrap().push(write.clone());
            None
        }
    }
    let record = Arc::new(Record { standby: standby.clone(), writes: Default::default() });
    primary.set_shipper(Some(record.clone()));
    for n in 0..20u64 {
        primary.commit(&payload_for(n, 300), IMMEDIATE_WAIT).unwrap();
    }
    let before = standby.standby_position();
    let received = standby.received_position();
    let header = record
        .writes
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|write| write.kind == ship::WriteKind::OpenHeader)
        .cloned()
        .expect("an open header was shipped");
    let resent = standby.receive(header.seq, header.offset, header.kind, &header.bytes).unwrap();
    assert_eq!(resent.end_offset, received.offset, "the resend reports where the standby is");
    standby.sync_received().unwrap();
    assert_eq!(standby.standby_position(), before);
    assert_eq!(standby.received_position(), received);
    // And the primary's next writes are taken where they follow.
    for n in 20..25u64 {
        primary.commit(&payload_for(n, 300), IMMEDIATE_WAIT).unwrap();
    }
    assert!(standby.standby_position().next > before.next);
    primary.shutdown().unwrap();
    standby.shutdown().unwrap();
}

/// A relay's seal (`seal_below`) is durable when it returns: a power cut right after it, with
/// nothing else flushed, leaves a control file that says it, and the seal only rises.
#[test]
fn a_relays_seal_survives_a_power_cut() {
    use rand::SeedableRng as _;
    let _watchdog = Watchdog::new(Duration::from_secs(60), "seal survives");
    let disk = CrashDisk::new();
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(disk.clone()), Metrics::new()).unwrap();
    assert_eq!(standby.control().sealed_below, Incarnation(0), "a new standby is not sealed");
    standby.seal_below(Incarnation(3)).unwrap();
    // A lower seal (an older incarnation's, asked again) does not lower it.
    standby.seal_below(Incarnation(2)).unwrap();
    let image = disk
        .crash_image(&mut rand::rngs::StdRng::seed_from_u64(7), crate::crashdisk::Tear::Nothing);
    drop(standby);
    let reopened =
        RedoLog::open_standby(standby_config(), Arc::new(image), Metrics::new()).unwrap();
    assert_eq!(reopened.control().sealed_below, Incarnation(3));
}

#[test]
fn entering_a_new_incarnation_takes_back_what_the_old_primary_confirmed_past_its_start() {
    let standby_disk = CrashDisk::new();
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap();
    standby.adopt_identity(DatabaseId(7)).unwrap();
    // The old primary said SCN 500 was durable; the new one's incarnation begins at SCN 301:
    // its records 301..=500 are confirmed only by its own word.
    standby.note_primary_durable(Scn(500));
    assert_eq!(standby.confirmed_scn(), Scn(500));
    standby.adopt_incarnation(Incarnation(2), Scn(301)).unwrap();
    assert_eq!(standby.confirmed_scn(), Scn(300));
    assert_eq!(standby.identity().incarnation, Incarnation(2));
    standby.note_primary_durable(Scn(350));
    assert_eq!(standby.confirmed_scn(), Scn(350), "the new primary's word raises it again");
    // An incarnation that begins past what was confirmed takes nothing back.
    standby.adopt_incarnation(Incarnation(3), Scn(900)).unwrap();
    assert_eq!(standby.confirmed_scn(), Scn(350));
    standby.shutdown().unwrap();
}
