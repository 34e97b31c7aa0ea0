//! The data files' row filter (`row_filter`): it never says a row the data files hold is
//! absent, whether it was built from the data files at open, or while checkpoints wrote, or
//! rebuilt under them; and a reopened database answers from it as from the data files.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redo::DatabaseId;
use redo::crashdisk::CrashDisk;

use super::tests::{WAIT, open, wait_until};
use super::*;
use crate::cache::Layer;
use crate::layout::Namespace;
use crate::store::{self, Changed, Store};

/// A small page cache and row filter, and no row cache: what these tests read must come
/// through the filter.
fn sizes() -> store::Sizes {
    store::Sizes { cache_bytes: 4 << 20, row_filter_max: 8 << 20, row_cache_bytes: 0 }
}

fn b(text: String) -> Bytes {
    Bytes::from(text)
}

/// One checkpoint of `rows` (key rows and element rows, `None` to delete) at `scn`.
fn checkpoint(
    store: &Store,
    scn: u64,
    keys: &[(Bytes, Option<Bytes>)],
    elements: &[(Bytes, Option<Bytes>)],
) {
    let mut rows: [Changed; Namespace::COUNT] = Default::default();
    for (key, value) in keys {
        rows[Namespace::Keys.index()].insert(key.clone().into(), value.clone());
    }
    for (key, value) in elements {
        rows[Namespace::Elements.index()].insert(key.clone().into(), value.clone());
    }
    store.checkpoint(&Layer::from_rows(rows), Scn(scn), DatabaseId(7), &[], &mut |_| {}).unwrap();
}

#[test]
fn a_filter_built_while_checkpoints_write_holds_every_row_the_data_files_hold() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn redo::storage::Storage> = Arc::new(redo::OsStorage::default());
    let store = Arc::new(Store::open(&storage, &dir.path().join("kv.redb"), sizes()).unwrap());
    let mut rng = StdRng::seed_from_u64(7);
    let value = Some(Bytes::from_static(b"v"));
    let mut present: BTreeSet<(bool, Bytes)> = BTreeSet::new();
    // Rows before the builder starts: its first build reads them from the data files.
    let keys: Vec<_> = (0..20_000).map(|n| (b(format!("key:{n}")), value.clone())).collect();
    let elements: Vec<_> = (0..20_000).map(|n| (b(format!("el:{n}")), value.clone())).collect();
    checkpoint(&store, 1, &keys, &elements);
    present.extend(keys.iter().map(|(key, _)| (true, key.clone())));
    present.extend(elements.iter().map(|(key, _)| (false, key.clone())));
    let builder = {
        let store = store.clone();
        thread::spawn(move || store.run_row_filter_builder())
    };
    // Checkpoints of new rows and deletes of old ones, with a rebuild asked for before every
    // other one: builds register, read and start answering between and during them.
    for round in 0..40u64 {
        if round % 2 == 0 {
            store.row_filter().want_build();
        }
        let mut keys = Vec::new();
        let mut elements = Vec::new();
        for n in 0..500 {
            let id = round * 1000 + n;
            keys.push((b(format!("key:new:{id}")), value.clone()));
            elements.push((b(format!("el:new:{id}")), value.clone()));
        }
        for _ in 0..100 {
            let n = rng.random_range(0..20_000);
            keys.push((b(format!("key:{n}")), None));
        }
        checkpoint(&store, 2 + round, &keys, &elements);
        for (key, value) in &keys {
            if value.is_some() {
                present.insert((true, key.clone()));
            } else {
                present.remove(&(true, key.clone()));
            }
        }
        present.extend(elements.iter().map(|(key, _)| (false, key.clone())));
    }
    wait_until("a filter answers", || store.row_filter().answering());
    store.stop_row_filter_builder();
    builder.join().unwrap();
    for (is_key, row) in &present {
        let namespace = if *is_key { Namespace::Keys } else { Namespace::Elements };
        assert!(store.row_filter().may_contain(namespace, row), "{namespace:?} {row:?} ruled out");
        assert_eq!(store.get_row(namespace, row).unwrap(), value, "{row:?}");
    }
    // Rows never written are (nearly all) ruled out, and read as absent either way.
    let mut ruled_out = 0;
    for n in 0..10_000 {
        let row = b(format!("el:absent:{n}"));
        ruled_out += usize::from(!store.row_filter().may_contain(Namespace::Elements, &row));
        assert_eq!(store.get_row(Namespace::Elements, &row).unwrap(), None);
    }
    assert!(ruled_out > 9_800, "only {ruled_out} of 10 000 absent rows ruled out");
    store.close();
}

#[test]
fn a_reopened_database_finds_every_row_of_its_data_files_through_the_filter() {
    let disk = CrashDisk::new();
    let member = |n: u32| b(format!("member:{n}"));
    {
        let db = open(&disk).unwrap();
        for chunk in 0..10u32 {
            let fields = (chunk * 100..chunk * 100 + 100).map(|n| (member(n), member(n))).collect();
            let members = (chunk * 100..chunk * 100 + 100).map(member).collect::<Vec<_>>();
            db.transact(
                &[
                    Op::HSet { key: b("hash".into()), pairs: fields, reply_ok: false },
                    Op::SAdd { key: b("set".into()), members },
                ],
                WAIT,
            )
            .unwrap();
        }
        db.checkpoint().unwrap();
        db.shutdown().unwrap();
    }
    let db = open(&disk).unwrap();
    wait_until("the filter answers", || db.inner.store.row_filter().answering());
    // Every member is found (the filter was built from the data files, not from any write)…
    let again = (0..1000).map(member).collect::<Vec<_>>();
    let replies = db.transact(&[Op::SAdd { key: b("set".into()), members: again }], WAIT).unwrap();
    assert_eq!(
        replies.results,
        vec![OpResult::Integer(0)],
        "members of the data files counted as new"
    );
    let fields = (0..1000).map(|n| (member(n), member(n + 1))).collect();
    let replies = db
        .transact(&[Op::HSet { key: b("hash".into()), pairs: fields, reply_ok: false }], WAIT)
        .unwrap();
    assert_eq!(
        replies.results,
        vec![OpResult::Integer(0)],
        "fields of the data files counted as new"
    );
    // … and new ones are new, most of them without a search of the data files (the status
    // counts them).
    let built = db.status().row_filter.expect("a filter answers");
    assert!(built.rows >= 2000, "{built:?}: 1 000 fields and 1 000 members, and two keys");
    let fresh = (1000..1010).map(member).collect::<Vec<_>>();
    let replies = db.transact(&[Op::SAdd { key: b("set".into()), members: fresh }], WAIT).unwrap();
    assert_eq!(replies.results, vec![OpResult::Integer(10)]);
    let after = db.status().row_filter.expect("a filter answers");
    assert!(after.ruled_out >= built.ruled_out + 9, "{built:?} then {after:?}");
    db.shutdown().unwrap();
}
