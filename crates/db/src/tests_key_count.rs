//! The key count with unresolved keys (`key_count`): exact whoever resolves them (a checkpoint,
//! a reader of the count, both at once), across a failed checkpoint, and after a restart.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redo::crashdisk::{CrashDisk, Fault, Watchdog};

use crate::tests::{WAIT, full_state, model_apply, open, set};
use crate::{Op, SetCondition};

fn random_ops(rng: &mut StdRng, n: u64) -> Vec<Op> {
    let key = |rng: &mut StdRng| Bytes::from(format!("key:{}", rng.random_range(0..400u32)));
    let value = Bytes::from(format!("v{n}"));
    match rng.random_range(0..6) {
        0 => vec![Op::Del { keys: vec![key(rng), key(rng)] }],
        // The same key twice in one MSET: the second write knows it from the first.
        1 => {
            let twice = key(rng);
            vec![Op::MSet {
                pairs: vec![
                    (twice.clone(), value.clone()),
                    (key(rng), value.clone()),
                    (twice, value),
                ],
            }]
        }
        // A plain SET and then a DEL of the same key in one transaction.
        2 => {
            let key = key(rng);
            vec![
                Op::Set { key: key.clone(), value, condition: SetCondition::Always },
                Op::Del { keys: vec![key] },
            ]
        }
        3 => vec![Op::Set { key: key(rng), value, condition: SetCondition::IfAbsent }],
        _ => vec![Op::Set { key: key(rng), value, condition: SetCondition::Always }],
    }
}

/// Most writes find their key only in the data files, so most keys are unresolved; the count
/// is read only every 50 transactions, so that checkpoints (back to back in one thread)
/// resolve most of them, while another thread reads the count all the time, resolving keys
/// as checkpoints do. After every 50 transactions the count is the model's.
#[test]
fn the_key_count_stays_exact_whoever_resolves_the_keys() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the key count resolution test");
    let disk = CrashDisk::new();
    let db = Arc::new(open(&disk).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let checkpoints = {
        let (db, stop) = (db.clone(), stop.clone());
        thread::spawn(move || {
            let mut count = 0u64;
            while !stop.load(Ordering::Acquire) {
                db.checkpoint().unwrap();
                count += 1;
            }
            count
        })
    };
    let reader = {
        let (db, stop) = (db.clone(), stop.clone());
        thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Acquire) {
                db.dbsize().unwrap();
                reads += 1;
                thread::sleep(Duration::from_micros(300));
            }
            reads
        })
    };
    let mut rng = StdRng::seed_from_u64(11);
    let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    for n in 0..8000u64 {
        let ops = random_ops(&mut rng, n);
        db.transact(&ops, WAIT).unwrap();
        model_apply(&mut model, &ops);
        if n % 50 == 49 {
            assert_eq!(db.dbsize().unwrap(), model.len() as u64, "after transaction {n}");
        }
    }
    stop.store(true, Ordering::Release);
    let checkpoints = checkpoints.join().unwrap();
    let reads = reader.join().unwrap();
    assert!(checkpoints >= 10, "only {checkpoints} checkpoints ran");
    assert!(reads >= 10, "only {reads} counts were read meanwhile");
    assert_eq!(db.dbsize().unwrap(), model.len() as u64);
    assert_eq!(full_state(&db), model);
    db.shutdown().unwrap();
    // Reopened, the count comes from the data files and the logs alone.
    drop(db);
    let db = open(&disk).unwrap();
    assert_eq!(db.dbsize().unwrap(), model.len() as u64, "after a restart");
    db.shutdown().unwrap();
}

/// A checkpoint resolves its keys before its commit; if the commit then fails, the keys stay
/// resolved, the data files unchanged, and the count exact; the retry writes them again.
#[test]
fn the_key_count_stays_exact_across_a_failed_checkpoint() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the key count failed checkpoint test");
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    for key in ["a", "b", "c"] {
        db.transact(&[set(key, "1")], WAIT).unwrap();
    }
    db.checkpoint().unwrap();
    // Unresolved: a and b are in the data files, d and e are new.
    for key in ["a", "b", "d", "e"] {
        db.transact(&[set(key, "2")], WAIT).unwrap();
    }
    let data_file = Path::new("/db/data/kv.redb");
    disk.set_fault(data_file, Some(Fault::WriteError));
    db.checkpoint().unwrap_err();
    assert_eq!(db.dbsize().unwrap(), 5, "a b c d e");
    disk.set_fault(data_file, None);
    // The retry writes the failed checkpoint's changes again (writes are refused until then).
    db.checkpoint().unwrap();
    assert_eq!(db.dbsize().unwrap(), 5, "a b c d e, written");
    db.transact(&[set("a", "3"), set("f", "3")], WAIT).unwrap();
    db.checkpoint().unwrap();
    assert_eq!(db.dbsize().unwrap(), 6, "a b c d e f");
    db.shutdown().unwrap();
    let db = open(&disk).unwrap();
    assert_eq!(db.dbsize().unwrap(), 6, "after a restart");
    db.shutdown().unwrap();
}
