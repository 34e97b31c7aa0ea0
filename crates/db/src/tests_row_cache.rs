//! The row cache against the data files it stands for (`store::row_cache`): what a read finds
//! after a checkpoint returns is what that checkpoint wrote, whatever reads of the older data
//! files were putting rows meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use bytes::Bytes;
use redo::{DatabaseId, Scn};

use crate::cache::Layer;
use crate::layout::Namespace;
use crate::store::{self, Changed, Store};

fn open(dir: &tempfile::TempDir) -> Arc<Store> {
    let storage: Arc<dyn redo::storage::Storage> = Arc::new(redo::OsStorage::default());
    let sizes = store::Sizes { cache_bytes: 4 << 20, row_filter_max: 0, row_cache_bytes: 1 << 20 };
    Arc::new(Store::open(&storage, &dir.path().join("kv.redb"), sizes).unwrap())
}

/// One checkpoint of key rows (`None`: deleted) at `scn`.
fn checkpoint(store: &Store, scn: u64, keys: &[(&'static [u8], Option<Bytes>)]) {
    let mut rows: [Changed; Namespace::COUNT] = Default::default();
    for (key, value) in keys {
        rows[Namespace::Keys.index()].insert(Bytes::from_static(key).into(), value.clone());
    }
    store.checkpoint(&Layer::from_rows(rows), Scn(scn), DatabaseId(7), &[], &mut |_| {}).unwrap();
}

#[test]
fn a_read_after_a_checkpoint_finds_what_it_wrote_while_other_reads_fill_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    checkpoint(&store, 1, &[(b"hot", Some(Bytes::from("0")))]);
    let stop = Arc::new(AtomicBool::new(false));
    // Readers that keep reading the key, so that some read the data files just before each
    // checkpoint commits and try to put the older row after it.
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, stop) = (store.clone(), stop.clone());
            thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Acquire) {
                    store.get(b"hot").unwrap();
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for version in 1..=300u64 {
        let value = (version % 7 != 0).then(|| Bytes::from(version.to_string()));
        checkpoint(&store, version + 1, &[(b"hot", value.clone())]);
        assert_eq!(store.get(b"hot").unwrap(), value, "after checkpoint {version}");
    }
    stop.store(true, Ordering::Release);
    let reads: u64 = readers.into_iter().map(|reader| reader.join().unwrap()).sum();
    assert!(reads > 300, "the readers read {reads} times");
    let status = store.row_cache_status();
    assert!(status.hits > 0, "no read found its row in the cache: {status:?}");
}

#[test]
fn a_closed_store_answers_no_read_from_its_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    checkpoint(&store, 1, &[(b"key", Some(Bytes::from("value")))]);
    assert_eq!(store.get(b"key").unwrap(), Some(Bytes::from("value")));
    assert_eq!(store.get(b"key").unwrap(), Some(Bytes::from("value")));
    assert_eq!(store.row_cache_status().hits, 1);
    store.close();
    assert!(store.get(b"key").is_err(), "a closed store answered a read");
    assert_eq!(store.row_cache_status().rows, 0);
}

#[test]
fn a_row_read_before_a_checkpoint_is_not_kept_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    checkpoint(&store, 1, &[(b"key", Some(Bytes::from("old")))]);
    // A read of the data files, then a checkpoint that replaces the row, then the read's put:
    // the order the readers of the test above can only meet by chance.
    let (old, generation) = store.search_row(Namespace::Keys, b"key").unwrap();
    assert_eq!(old, Some(Bytes::from("old")));
    checkpoint(&store, 2, &[(b"key", Some(Bytes::from("new")))]);
    store.keep_row(b"key", old.as_ref().unwrap(), generation);
    assert_eq!(store.get(b"key").unwrap(), Some(Bytes::from("new")));
    assert_eq!(store.get(b"key").unwrap(), Some(Bytes::from("new")));
    assert_eq!(store.row_cache_status().hits, 1, "the second read is the cache's");
}
