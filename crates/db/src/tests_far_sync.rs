//! A far sync's database (`Database::open_far_sync`): the redo it receives is in its standby
//! logs, readable back, and nothing else happens — no data file is created, nothing is applied
//! or replayed, no checkpoint writes anything — before and after a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redo::crashdisk::{CrashDisk, Watchdog};
use redo::storage::Storage as _;
use redo::{RedoConfig, RedoLog, Role, Scn};
use stats::Metrics;

use crate::tests::{Forward, WAIT, configs, open, set};
use crate::{Database, Result};

fn open_far_sync(disk: &CrashDisk) -> Result<Database> {
    let (db, redo) = configs(Path::new("/fs"));
    let storage: Arc<dyn redo::storage::Storage> = Arc::new(disk.clone());
    let metrics = Metrics::new();
    let redo =
        RedoLog::open_standby(RedoConfig { groups: 4, ..redo }, storage.clone(), metrics.clone())?;
    Database::open_far_sync(db, redo, &storage, &metrics)
}

/// Every record the far sync's redo holds, from the first: their SCNs.
fn records(far_sync: &Database, through: Scn) -> Vec<Scn> {
    let mut reader = far_sync.redo().read_from_scn(Scn(1)).unwrap();
    let mut scns = Vec::new();
    while scns.last().is_none_or(|&scn| scn < through) {
        match reader.next_record().unwrap() {
            Some(record) => scns.push(record.scn),
            None => break,
        }
    }
    scns
}

#[test]
fn a_far_sync_keeps_the_redo_it_receives_and_opens_applies_and_replays_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "far sync");
    let primary_disk = CrashDisk::new();
    let far_sync_disk = CrashDisk::new();
    let data_file = configs(Path::new("/fs")).0.data_file();
    let primary = open(&primary_disk).unwrap();
    let far_sync = Arc::new(open_far_sync(&far_sync_disk).unwrap());
    assert!(far_sync.is_far_sync());
    assert_eq!(far_sync.role(), Role::Standby);
    assert!(!far_sync_disk.exists(&data_file), "a far sync creates no data file");
    far_sync.redo().adopt_identity(primary.database_id()).unwrap();
    primary.redo().set_shipper(Some(Arc::new(Forward { standby: far_sync.clone() })));
    for n in 0..300u64 {
        primary.transact(&[set(&format!("key:{}", n % 50), &format!("v{n}"))], WAIT).unwrap();
    }
    let last = primary.redo().durable_scn();
    // Received, durable, readable back: every record the primary wrote.
    let received = records(&far_sync, last);
    assert_eq!(received.last(), Some(&last), "the far sync holds the redo through {last}");
    assert_eq!(received.len(), 300);
    // And nothing else: no apply, no checkpoint, no data file (SAVE's checkpoint included).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(far_sync.applied_scn(), Scn(0), "a far sync applies nothing");
    assert_eq!(far_sync.checkpoint().unwrap(), Scn(0));
    assert_eq!(far_sync.status().checkpoints, 0);
    assert!(!far_sync_disk.exists(&data_file), "no data file after receiving");
    primary.redo().set_shipper(None);
    far_sync.shutdown().unwrap();
    drop(far_sync);

    // Restarted: nothing replayed, still no data file, the redo all there.
    let far_sync = open_far_sync(&far_sync_disk).unwrap();
    assert_eq!(far_sync.status().recovered_records, 0);
    assert_eq!(far_sync.applied_scn(), Scn(0));
    assert_eq!(records(&far_sync, last).last(), Some(&last));
    assert!(!far_sync_disk.exists(&data_file), "no data file after a restart");
    far_sync.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn a_far_sync_is_never_opened_as_a_primary() {
    let disk = CrashDisk::new();
    let (db, redo) = configs(Path::new("/fs"));
    let storage: Arc<dyn redo::storage::Storage> = Arc::new(disk.clone());
    let metrics = Metrics::new();
    let redo = RedoLog::open(redo, storage.clone(), metrics.clone()).unwrap();
    let error = Database::open_far_sync(db, redo, &storage, &metrics).unwrap_err().to_string();
    assert!(error.contains("never a primary"), "{error}");
}
