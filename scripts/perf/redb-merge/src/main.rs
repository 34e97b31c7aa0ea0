//! A checkpoint's writes on redb alone: a table of 1M keys (16 bytes, values of 100), then
//! three transactions of ~263k sorted random keys (nine in ten already present), written
//! either by `Table::insert` per row (as the checkpointer does) or by one mutable cursor walked
//! forward (`remove_next` + `insert_before`), or (`run`) each into a table of its own in key
//! order, as sorted runs, and then all three merged into the 1M-row table in one transaction (the
//! compaction the runs defer); each committed durably. Prints the time to write and the time to
//! write and commit.

use std::ops::Bound;
use std::time::Instant;

use redb::{Database, Durability, ReadableTable, TableDefinition};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
const KEYS: u64 = 1_000_000;
const ROWS: usize = 300_000;

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:012}").into_bytes()
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("insert");
    let cache: usize = args.get(2).map(|s| s.parse().expect("CACHE_BYTES")).unwrap_or(64 << 20);
    let dir = args.get(3).cloned().unwrap_or_else(|| std::env::temp_dir().display().to_string());
    let path = std::path::Path::new(&dir).join("redb-merge.redb");
    let _ = std::fs::remove_file(&path);
    let db = Database::builder().set_cache_size(cache).create(&path).expect("create");
    let value = vec![b'x'; 100];
    let load = db.begin_write().expect("begin");
    {
        let mut table = load.open_table(TABLE).expect("table");
        // Even numbers: the rows a checkpoint replaces; odd ones are new.
        for i in 0..KEYS {
            table.insert(key(i * 2).as_slice(), value.as_slice()).expect("insert");
        }
    }
    load.commit().expect("commit");
    let mut state = 88_172_645_463_325_252u64;
    for round in 0..3u8 {
        let mut rows: Vec<u64> = (0..ROWS)
            .map(|_| {
                let r = xorshift(&mut state) % (KEYS * 2);
                if r % 10 == 0 { r | 1 } else { r & !1 }
            })
            .collect();
        rows.sort_unstable();
        rows.dedup();
        let new_value = vec![b'a' + round; 100];
        let started = Instant::now();
        let mut transaction = db.begin_write().expect("begin");
        transaction.set_durability(Durability::Immediate).expect("durability");
        let mut replaced = 0;
        {
            let mut table = transaction.open_table(TABLE).expect("table");
            match mode {
                "insert" => {
                    for &row in &rows {
                        let old = table.insert(key(row).as_slice(), new_value.as_slice());
                        replaced += old.expect("insert").is_some() as usize;
                    }
                }
                "cursor" => {
                    let first = key(rows[0]);
                    let mut cursor =
                        table.lower_bound_mut(Bound::Included(first.as_slice())).expect("cursor");
                    for &row in &rows {
                        let row = key(row);
                        while cursor
                            .peek_next()
                            .expect("peek")
                            .is_some_and(|(next, _)| next.value() < row.as_slice())
                        {
                            cursor.next().expect("next");
                        }
                        let present = cursor
                            .peek_next()
                            .expect("peek")
                            .is_some_and(|(next, _)| next.value() == row.as_slice());
                        if present {
                            cursor.remove_next().expect("remove");
                            replaced += 1;
                        }
                        cursor.insert_before(row.as_slice(), new_value.as_slice()).expect("insert");
                    }
                    cursor.close().expect("close");
                }
                "run" => {
                    // A sorted run of its own: an empty table filled in key order.
                    let name = format!("run{round}");
                    let run: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&name);
                    let mut table = transaction.open_table(run).expect("run table");
                    for &row in &rows {
                        table.insert(key(row).as_slice(), new_value.as_slice()).expect("insert");
                    }
                }
                other => panic!("mode {other}: insert, cursor or run"),
            }
        }
        let written = started.elapsed();
        transaction.commit().expect("commit");
        println!(
            "{mode}, cache {} MiB, round {round}: {} rows ({replaced} replaced) written in {written:.2?}, \
             committed after {:.2?}",
            cache >> 20,
            rows.len(),
            started.elapsed()
        );
    }
    if mode == "run" {
        // The compaction the runs defer: every run's rows into the table, in one transaction.
        let started = Instant::now();
        let mut transaction = db.begin_write().expect("begin");
        transaction.set_durability(Durability::Immediate).expect("durability");
        let mut merged = 0usize;
        {
            let mut table = transaction.open_table(TABLE).expect("table");
            for round in 0..3u8 {
                let name = format!("run{round}");
                let run: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&name);
                let source = transaction.open_table(run).expect("run table");
                for entry in source.iter().expect("iter") {
                    let (row, value) = entry.expect("entry");
                    table.insert(row.value(), value.value()).expect("insert");
                    merged += 1;
                }
            }
        }
        for round in 0..3u8 {
            let name = format!("run{round}");
            let run: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&name);
            transaction.delete_table(run).expect("delete");
        }
        let written = started.elapsed();
        transaction.commit().expect("commit");
        println!(
            "run, cache {} MiB, compaction: {merged} rows merged in {written:.2?}, committed after {:.2?}",
            cache >> 20,
            started.elapsed()
        );
    }
    drop(db);
    let _ = std::fs::remove_file(&path);
}
