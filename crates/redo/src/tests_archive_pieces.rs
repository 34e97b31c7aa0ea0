//! Archived logs received in pieces out of order (a destination's `max_connections`): each
//! piece lands at its offset, the log is archived only once every byte is in and the whole
//! log scans clean, and a lying piece is refused without losing what was received.

use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::crashdisk::CrashDisk;
use crate::standby::Ranges;
use crate::tests::{IMMEDIATE_WAIT, open_on, payload_for, small_config, standby_config};
use crate::*;

/// A primary with a few archived logs, and an empty standby of its database.
fn primary_and_standby() -> (Arc<RedoLog>, CrashDisk, RedoLog, CrashDisk) {
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    for n in 0..120u64 {
        primary.commit(&payload_for(n, 3000), IMMEDIATE_WAIT).unwrap();
    }
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap();
    standby.adopt_identity(primary.identity().database_id).unwrap();
    (primary, primary_disk, standby, standby_disk)
}

/// The pieces of log `seq` of `primary`, `piece` bytes each (the last shorter).
fn pieces_of(primary: &RedoLog, seq: LogSeq, piece: u64) -> (u64, Vec<(u64, Vec<u8>)>) {
    let total = primary.log_extent(seq).expect("the log").end.expect("closed").end_offset;
    let pieces = (0..total)
        .step_by(piece as usize)
        .map(|offset| {
            let len = (total - offset).min(piece);
            (offset, primary.read_log_bytes(seq, offset, len as usize).unwrap())
        })
        .collect();
    (total, pieces)
}

fn archived_bytes(log: &RedoLog, disk: &CrashDisk, seq: LogSeq) -> Option<Vec<u8>> {
    let entry = log.archived_logs().into_iter().find(|entry| entry.seq == seq)?;
    Some(disk.contents(&entry.path).unwrap())
}

#[test]
fn pieces_in_any_order_make_a_byte_identical_archived_log() {
    let (primary, primary_disk, standby, standby_disk) = primary_and_standby();
    let seq = LogSeq(1);
    let (total, mut pieces) = pieces_of(&primary, seq, 7000);
    assert!(pieces.len() > 4, "the log spans several pieces");
    let seed = rand::random::<u64>();
    let mut rng = StdRng::seed_from_u64(seed);
    pieces.shuffle(&mut rng);
    // Some pieces twice (a primary that reconnected ships the log again).
    let last = pieces.pop().unwrap();
    let again: Vec<_> = pieces.iter().filter(|_| rng.random_bool(0.3)).cloned().collect();
    for (offset, bytes) in pieces.iter().chain(&again) {
        let complete = standby.receive_archive_chunk(seq, *offset, total, bytes).unwrap();
        assert!(!complete, "seed {seed}: complete before the last piece");
    }
    assert!(standby.receive_archive_chunk(seq, last.0, total, &last.1).unwrap(), "seed {seed}");
    let ours = primary_disk.contents(&primary.archived_logs()[0].path).unwrap();
    assert_eq!(archived_bytes(&standby, &standby_disk, seq).unwrap(), ours, "seed {seed}");
    // A piece of a log already archived changes nothing.
    assert!(standby.receive_archive_chunk(seq, 0, total, &last.1[..1]).unwrap());
}

/// Connections write their pieces at once (no lock held across a write); the log is checked
/// as it arrives and archived by exactly one of them, byte-identical.
#[test]
fn pieces_from_several_connections_at_once_make_a_byte_identical_archived_log() {
    let (primary, primary_disk, standby, standby_disk) = primary_and_standby();
    let seq = LogSeq(1);
    let (total, mut pieces) = pieces_of(&primary, seq, 5000);
    let seed = rand::random::<u64>();
    pieces.shuffle(&mut StdRng::seed_from_u64(seed));
    let completed: usize = std::thread::scope(|scope| {
        let threads: Vec<_> = pieces
            .chunks(pieces.len().div_ceil(4))
            .map(|share| {
                let standby = &standby;
                scope.spawn(move || {
                    share
                        .iter()
                        .filter(|(offset, bytes)| {
                            standby.receive_archive_chunk(seq, *offset, total, bytes).unwrap()
                        })
                        .count()
                })
            })
            .collect();
        threads.into_iter().map(|thread| thread.join().unwrap()).sum()
    });
    assert_eq!(completed, 1, "seed {seed}: one connection archives the log");
    let ours = primary_disk.contents(&primary.archived_logs()[0].path).unwrap();
    assert_eq!(archived_bytes(&standby, &standby_disk, seq).unwrap(), ours, "seed {seed}");
}

/// A repeat writes nothing: bytes once checked are never rewritten before the log is archived
/// (here a repeat with other bytes, which a sound primary never sends).
#[test]
fn a_repeated_piece_never_rewrites_what_was_received() {
    let (primary, primary_disk, standby, standby_disk) = primary_and_standby();
    let seq = LogSeq(1);
    let (total, pieces) = pieces_of(&primary, seq, 7000);
    let (last, rest) = pieces.split_last().unwrap();
    for (offset, bytes) in rest {
        assert!(!standby.receive_archive_chunk(seq, *offset, total, bytes).unwrap());
    }
    let (offset, bytes) = &rest[1];
    let other: Vec<u8> = bytes.iter().map(|byte| byte ^ 0x5a).collect();
    assert!(!standby.receive_archive_chunk(seq, *offset, total, &other).unwrap());
    assert!(standby.receive_archive_chunk(seq, last.0, total, &last.1).unwrap());
    let ours = primary_disk.contents(&primary.archived_logs()[0].path).unwrap();
    assert_eq!(archived_bytes(&standby, &standby_disk, seq).unwrap(), ours);
}

#[test]
fn a_piece_outside_the_log_or_of_another_length_is_refused() {
    let (primary, _, standby, _) = primary_and_standby();
    let seq = LogSeq(1);
    let (total, pieces) = pieces_of(&primary, seq, 7000);
    let (offset, bytes) = &pieces[1];
    assert!(!standby.receive_archive_chunk(seq, *offset, total, bytes).unwrap());
    let outside = standby.receive_archive_chunk(seq, total - 10, total, &[0u8; 20]).unwrap_err();
    assert!(outside.to_string().contains("outside"), "{outside}");
    let overflow = standby.receive_archive_chunk(seq, u64::MAX - 5, total, &[0u8; 20]);
    assert!(overflow.unwrap_err().to_string().contains("outside"));
    let too_long = standby.receive_archive_chunk(seq, 0, 1 << 40, &[0u8; 20]).unwrap_err();
    assert!(too_long.to_string().contains("cannot be a log of this layout"), "{too_long}");
    // Those were refused before anything was written: the log still completes.
    let lying = standby.receive_archive_chunk(seq, 0, total - 4096, &pieces[0].1).unwrap_err();
    assert!(lying.to_string().contains("earlier pieces said"), "{lying}");
    // A length that changes drops the log being assembled; shipped again, it completes.
    for (offset, bytes) in &pieces {
        standby.receive_archive_chunk(seq, *offset, total, bytes).unwrap();
    }
    assert_eq!(standby.standby_position().complete_through_seq, LogSeq(1));
}

#[test]
fn a_log_whose_bytes_do_not_scan_is_never_archived() {
    let (primary, _, standby, standby_disk) = primary_and_standby();
    let seq = LogSeq(1);
    let (total, mut pieces) = pieces_of(&primary, seq, 7000);
    // A unit damaged in transit past every frame check (the CRC of the unit catches it).
    let damaged = pieces.len() / 2;
    pieces[damaged].1[100] ^= 0x40;
    let mut refused = None;
    for (offset, bytes) in &pieces {
        if let Err(error) = standby.receive_archive_chunk(seq, *offset, total, bytes) {
            refused = Some(error);
        }
    }
    let refused = refused.expect("the damaged log is refused when it is whole");
    assert!(matches!(refused, RedoError::Corrupt { .. }), "{refused}");
    assert!(archived_bytes(&standby, &standby_disk, seq).is_none());
    assert_eq!(standby.standby_position().complete_through_seq, LogSeq(0));
    // Shipped again, sound, it is archived.
    let (_, sound) = pieces_of(&primary, seq, 7000);
    for (offset, bytes) in &sound {
        standby.receive_archive_chunk(seq, *offset, total, bytes).unwrap();
    }
    assert_eq!(standby.standby_position().complete_through_seq, LogSeq(1));
}

#[test]
fn a_peer_spraying_tiny_pieces_is_refused_at_the_range_bound() {
    let (primary, _, standby, _) = primary_and_standby();
    let seq = LogSeq(1);
    let (total, _) = pieces_of(&primary, seq, 7000);
    assert!(total > 2 * 1100 * 3, "room for the pieces");
    let mut refused = None;
    for n in 0..1100u64 {
        if let Err(error) = standby.receive_archive_chunk(seq, 3 * n, total, &[0u8]) {
            refused = Some((n, error));
            break;
        }
    }
    let (n, error) = refused.expect("refused");
    assert_eq!(n, 1024, "{error}");
    assert!(error.to_string().contains("separate pieces"), "{error}");
}

#[test]
fn ranges_merge_like_a_model() {
    let seed = rand::random::<u64>();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..200 {
        let total = rng.random_range(1..200u64);
        let mut ranges = Ranges::default();
        let mut model = vec![false; total as usize];
        for _ in 0..rng.random_range(1..40) {
            let start = rng.random_range(0..total);
            let end = rng.random_range(start + 1..=total);
            ranges.add(start, end);
            model[start as usize..end as usize].iter_mut().for_each(|held| *held = true);
            assert_eq!(ranges.covers(total), model.iter().all(|&held| held), "seed {seed}");
            let from = rng.random_range(0..total);
            let to = rng.random_range(from + 1..=total);
            let mut gaps = Vec::new();
            for at in from..to {
                if !model[at as usize] {
                    match gaps.last_mut() {
                        Some((_, end)) if *end == at => *end += 1,
                        _ => gaps.push((at, at + 1)),
                    }
                }
            }
            assert_eq!(ranges.gaps(from, to), gaps, "seed {seed}");
        }
    }
}
