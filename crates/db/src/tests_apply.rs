//! A standby's apply and its primary's confirmations: what the primary confirmed durable goes
//! to the data files, what it did not stays in the pending layer (visible to reads, never
//! checkpointed), and both end in the same state once confirmed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use keyspace::{Op, SetCondition};
use redo::Scn;
use redo::crashdisk::{CrashDisk, Watchdog};

use crate::Database;
use crate::tests::{WAIT, full_state, model_apply, open, open_standby, wait_until};

/// Hands every primary log write to an in-process standby (as `tests::Forward`), passing on
/// the primary's durable SCN only up to `limit`: the primary's confirmations held back.
struct ForwardHeld {
    standby: Arc<Database>,
    limit: Arc<AtomicU64>,
}

impl redo::ship::Shipper for ForwardHeld {
    fn ship(&self, write: &Arc<redo::ship::LogWrite>) -> Option<Box<dyn redo::ship::ShipWait>> {
        let redo = self.standby.redo();
        redo.receive(write.seq, write.offset, write.kind, &write.bytes).expect("standby receives");
        redo.sync_received().expect("standby syncs");
        let limit = self.limit.load(Ordering::Acquire);
        redo.note_primary_durable(Scn(write.durable_scn.0.min(limit)));
        None
    }
}

/// SETs of 20 keys, a few of them already written (the pending layer over the dirty one).
fn transaction(n: u64) -> Vec<Op> {
    (0..20u64)
        .map(|k| {
            let key = Bytes::from(format!("key:{}", (n * 7 + k * 13) % 300));
            Op::set(key, Bytes::from(format!("value {n}.{k}")), SetCondition::Always)
        })
        .collect()
}

#[test]
fn a_standby_checkpoints_only_what_its_primary_confirmed_and_applies_the_rest_in_place() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "standby apply and confirmations");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open(&primary_disk).unwrap();
    let standby = Arc::new(open_standby(&standby_disk).unwrap());
    standby.redo().adopt_identity(primary.database_id()).unwrap();
    let limit = Arc::new(AtomicU64::new(u64::MAX));
    primary.redo().set_shipper(Some(Arc::new(ForwardHeld {
        standby: standby.clone(),
        limit: limit.clone(),
    })));
    let mut model = BTreeMap::new();
    let commit = |n: u64, model: &mut BTreeMap<Bytes, Bytes>| {
        let ops = transaction(n);
        primary.transact(&ops, WAIT).unwrap();
        model_apply(model, &ops);
    };
    // Confirmed as it arrives.
    for n in 0..100 {
        commit(n, &mut model);
    }
    let confirmed = primary.redo().durable_scn();
    standby.redo().note_primary_durable(confirmed);
    wait_until("the standby applies the confirmed redo", || standby.applied_scn() >= confirmed);
    wait_until("the standby promotes all it applied", || {
        standby.status().promoted_scn == confirmed
    });
    // Applied, never confirmed: readable, not in the data files.
    limit.store(confirmed.0, Ordering::Release);
    for n in 100..200 {
        commit(n, &mut model);
    }
    let unconfirmed = primary.redo().durable_scn();
    wait_until("the standby applies the unconfirmed redo", || standby.applied_scn() >= unconfirmed);
    assert_eq!(full_state(&standby), model);
    assert_eq!(standby.redo().confirmed_scn(), confirmed);
    assert_eq!(standby.status().promoted_scn, confirmed, "nothing unconfirmed promoted");
    let checkpointed = standby.checkpoint().unwrap();
    assert_eq!(checkpointed, confirmed, "the data files hold what was confirmed, no more");
    // Confirmed later: what was pending goes first, then the new redo.
    limit.store(u64::MAX, Ordering::Release);
    standby.redo().note_primary_durable(unconfirmed);
    for n in 200..250 {
        commit(n, &mut model);
    }
    let last = primary.redo().durable_scn();
    standby.redo().note_primary_durable(last);
    wait_until("the standby applies the rest", || standby.applied_scn() >= last);
    assert_eq!(full_state(&standby), model);
    assert_eq!(standby.dbsize().unwrap(), model.len() as u64);
    let checkpointed = standby.checkpoint().unwrap();
    assert_eq!(checkpointed, last, "everything confirmed is in the data files");
    // From its data files (and no redo after them), the same state.
    primary.redo().set_shipper(None);
    standby.shutdown().unwrap();
    drop(standby);
    let standby = open_standby(&standby_disk).unwrap();
    assert_eq!(full_state(&standby), model);
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

/// A standby whose data files fall behind its apply (here: its checkpoints held, as a slow
/// disk would) stops applying at `dirty_bytes_max` of confirmed, unwritten changes, waiting
/// under `free buffer waits`, instead of holding its whole backlog in memory; a standby whose
/// checkpoints run applies everything within the same bound.
#[test]
fn a_standby_applies_within_dirty_bytes_max() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "standby apply memory bound");
    const LIMIT: u64 = 2 << 20;
    // A record: 20 SETs of 1 KiB values; 400 of them: about 8 MiB of rows, 4 × the limit.
    let value = Bytes::from(vec![b'v'; 1024]);
    let transaction = |n: u64| -> Vec<Op> {
        (0..20u64)
            .map(|k| {
                let key = Bytes::from(format!("key:{n}:{k}"));
                Op::set(key, value.clone(), SetCondition::Always)
            })
            .collect()
    };
    let open_small_standby = |disk: &CrashDisk, metrics: &Arc<stats::Metrics>| {
        let (db, redo) = crate::tests::configs(std::path::Path::new("/standby"));
        let db =
            crate::DbConfig { checkpoint_dirty_bytes: LIMIT / 2, dirty_bytes_max: LIMIT, ..db };
        Arc::new(
            Database::open_standby(
                db,
                redo::RedoConfig { groups: 4, ..redo },
                Arc::new(disk.clone()),
                metrics.clone(),
            )
            .unwrap(),
        )
    };
    // A few records' rows at most beyond the limit: the check is before each record (about
    // 23 KiB of rows each), and `unwritten_bytes` also counts what is still pending (a record
    // or two the primary has not yet confirmed).
    let bound = LIMIT + 256 * 1024;
    for held in [true, false] {
        let primary_disk = CrashDisk::new();
        let standby_disk = CrashDisk::new();
        let metrics = stats::Metrics::new();
        let primary = open(&primary_disk).unwrap();
        let standby = open_small_standby(&standby_disk, &metrics);
        standby.redo().adopt_identity(primary.database_id()).unwrap();
        if held {
            standby.suspend_checkpoints();
        }
        primary.redo().set_shipper(Some(Arc::new(ForwardHeld {
            standby: standby.clone(),
            limit: Arc::new(AtomicU64::new(u64::MAX)),
        })));
        let mut model = BTreeMap::new();
        for n in 0..400 {
            let ops = transaction(n);
            primary.transact(&ops, WAIT).unwrap();
            model_apply(&mut model, &ops);
        }
        let end = primary.redo().durable_scn();
        let waits = || metrics.snapshot().wait("free buffer waits").map_or(0, |wait| wait.count);
        if held {
            // It stops short of the end, at the limit, and stays there.
            let mut stopped = standby.applied_scn();
            loop {
                std::thread::sleep(Duration::from_millis(300));
                let now = standby.applied_scn();
                if now == stopped {
                    break;
                }
                stopped = now;
            }
            assert!(stopped < end, "the whole backlog was applied into memory");
            let unwritten = standby.status().unwritten_bytes;
            assert!(
                (LIMIT..=bound).contains(&unwritten),
                "{unwritten} bytes unwritten, the limit is {LIMIT}"
            );
        } else {
            let mut most = 0;
            while standby.applied_scn() < end {
                most = most.max(standby.status().unwritten_bytes);
                std::thread::sleep(Duration::from_micros(200));
            }
            assert!(most <= bound, "{most} bytes unwritten at most, the limit is {LIMIT}");
            assert_eq!(full_state(&standby), model, "the standby holds what the primary wrote");
        }
        // Shut down while waiting, or after: bounded by the watchdog.
        primary.redo().set_shipper(None);
        drop(primary);
        drop(Arc::into_inner(standby).expect("the only reference"));
        if held {
            assert_eq!(waits(), 1, "the wait, ended by the shutdown, is counted");
        }
    }
}
