//! Every type against a model: random transactions of strings, hashes, lists, sets, sorted
//! sets, deadlines, renames, copies and flushes, run on a primary that ships its redo to an
//! in-process standby, with a clock moved by hand. The model is a `BTreeMap` of values with
//! deadlines; after the run the primary, the primary recovered from a power cut, and the
//! standby (which applied the redo) must each hold exactly the model's live keys, deadlines
//! included. Failures print the seed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use keyspace::{
    End, ExpireCondition, KeyType, SetExpiry, Time, TimeUnit, ZAddOptions, ZRange, ZRangeBy,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redo::crashdisk::{CrashDisk, Tear, Watchdog};

use super::tests::{Forward, WAIT, open, open_standby};
use super::*;

/// A value as the model holds it.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    String(Bytes),
    Hash(BTreeMap<Bytes, Bytes>),
    List(VecDeque<Bytes>),
    Set(BTreeSet<Bytes>),
    ZSet(BTreeMap<Bytes, i64>),
}

type Model = BTreeMap<Bytes, (Value, u64)>;

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn pick(rng: &mut StdRng, words: &[&str]) -> Bytes {
    b(words[rng.random_range(0..words.len())])
}

const KEYS: &[&str] = &["a", "b", "c", "d", "e"];
const ITEMS: &[&str] = &["x", "y", "z", "w", "", "long-element-value"];

/// One random operation, and what it does to the model (at `now`).
fn random_op(rng: &mut StdRng) -> Op {
    let key = pick(rng, KEYS);
    let item = pick(rng, ITEMS);
    match rng.random_range(0..22) {
        0 => Op::set(key, item, SetCondition::Always),
        1 => Op::Set {
            key,
            value: item,
            condition: SetCondition::Always,
            expiry: SetExpiry::At(Time {
                amount: rng.random_range(1..60),
                unit: TimeUnit::Milliseconds,
                absolute: false,
            }),
            get: false,
            command: "set",
        },
        2 => Op::Del { keys: vec![key] },
        3 => Op::Expire {
            key,
            at: Time {
                amount: rng.random_range(1..80),
                unit: TimeUnit::Milliseconds,
                absolute: false,
            },
            condition: ExpireCondition::Always,
            command: "pexpire",
        },
        4 => Op::Persist { key },
        5 => Op::HSet { key, pairs: vec![(pick(rng, ITEMS), item)], reply_ok: false },
        6 => Op::HDel { key, fields: vec![item] },
        7 | 8 => Op::Push {
            key,
            end: if rng.random_bool(0.5) { End::Left } else { End::Right },
            values: vec![item],
            only_if_exists: false,
        },
        9 => Op::Pop {
            key,
            end: if rng.random_bool(0.5) { End::Left } else { End::Right },
            count: None,
        },
        10 => Op::LSet { key, index: rng.random_range(-3..3), value: item },
        11 => {
            Op::LInsert { key, before: rng.random_bool(0.5), pivot: pick(rng, ITEMS), value: item }
        }
        12 => Op::LRem { key, count: rng.random_range(-2..3), value: item },
        13 => Op::SAdd { key, members: vec![item] },
        14 => Op::SRem { key, members: vec![item] },
        15 | 16 => Op::ZAdd {
            key,
            options: ZAddOptions::default(),
            pairs: vec![(rng.random_range(-3..4) as f64, item)],
        },
        17 => Op::ZRem { key, members: vec![item] },
        18 => Op::Rename { from: key, to: pick(rng, KEYS), if_absent: false },
        19 => Op::Copy { from: key, to: pick(rng, KEYS), replace: rng.random_bool(0.5) },
        20 => Op::IncrBy { key, increment: rng.random_range(-5..5) },
        _ => {
            if rng.random_ratio(1, 8) {
                Op::FlushAll
            } else {
                Op::LTrim { key, start: rng.random_range(-3..2), stop: rng.random_range(-2..3) }
            }
        }
    }
}

/// The model's live value of `key` at `now` (one past its deadline is gone).
fn live(model: &mut Model, key: &Bytes, now: u64) -> Option<Value> {
    match model.get(key) {
        Some((_, deadline)) if *deadline != 0 && *deadline <= now => {
            model.remove(key);
            None
        }
        Some((value, _)) => Some(value.clone()),
        None => None,
    }
}

fn list_index(len: usize, index: i64) -> Option<usize> {
    let index = if index < 0 { len as i64 + index } else { index };
    (0..len as i64).contains(&index).then_some(index as usize)
}

/// What `op` does to the model at `now` (nothing if Redis would reply an error).
fn model_apply(model: &mut Model, op: &Op, now: u64) {
    let deadline = |model: &Model, key: &Bytes| model.get(key).map_or(0, |(_, deadline)| *deadline);
    let put = |model: &mut Model, key: &Bytes, value: Value, at: u64| {
        let empty = match &value {
            Value::Hash(map) => map.is_empty(),
            Value::List(list) => list.is_empty(),
            Value::Set(set) => set.is_empty(),
            Value::ZSet(zset) => zset.is_empty(),
            Value::String(_) => false,
        };
        if empty {
            model.remove(key);
        } else {
            model.insert(key.clone(), (value, at));
        }
    };
    match op {
        Op::Set { key, value, expiry, .. } => {
            let at = match expiry {
                SetExpiry::At(time) => now + time.amount as u64,
                _ => 0,
            };
            live(model, key, now);
            model.insert(key.clone(), (Value::String(value.clone()), at));
        }
        Op::Del { keys } => {
            for key in keys {
                model.remove(key);
            }
        }
        Op::Expire { key, at, .. } => {
            if live(model, key, now).is_some() {
                model.get_mut(key).expect("live").1 = now + at.amount as u64;
            }
        }
        Op::Persist { key } => {
            if live(model, key, now).is_some() {
                model.get_mut(key).expect("live").1 = 0;
            }
        }
        Op::IncrBy { key, increment } => {
            let current = match live(model, key, now) {
                None => Some(0),
                Some(Value::String(value)) => keyspace::number::parse_integer(&value),
                Some(_) => None,
            };
            if let Some(new) = current.and_then(|current| current.checked_add(*increment)) {
                let at = deadline(model, key);
                model.insert(key.clone(), (Value::String(Bytes::from(new.to_string())), at));
            }
        }
        Op::HSet { key, pairs, .. } => match live(model, key, now) {
            None | Some(Value::Hash(_)) => {
                let at = deadline(model, key);
                let Some(Value::Hash(mut map)) =
                    live(model, key, now).or(Some(Value::Hash(BTreeMap::new())))
                else {
                    unreachable!()
                };
                for (field, value) in pairs {
                    map.insert(field.clone(), value.clone());
                }
                put(model, key, Value::Hash(map), at);
            }
            Some(_) => {}
        },
        Op::HDel { key, fields } => {
            if let Some(Value::Hash(mut map)) = live(model, key, now) {
                for field in fields {
                    map.remove(field);
                }
                let at = deadline(model, key);
                put(model, key, Value::Hash(map), at);
            }
        }
        Op::Push { key, end, values, .. } => {
            let list = match live(model, key, now) {
                None => Some(VecDeque::new()),
                Some(Value::List(list)) => Some(list),
                Some(_) => None,
            };
            if let Some(mut list) = list {
                for value in values {
                    match end {
                        End::Left => list.push_front(value.clone()),
                        End::Right => list.push_back(value.clone()),
                    }
                }
                let at = deadline(model, key);
                put(model, key, Value::List(list), at);
            }
        }
        Op::Pop { key, end, .. } => {
            if let Some(Value::List(mut list)) = live(model, key, now) {
                match end {
                    End::Left => list.pop_front(),
                    End::Right => list.pop_back(),
                };
                let at = deadline(model, key);
                put(model, key, Value::List(list), at);
            }
        }
        Op::LSet { key, index, value } => {
            if let Some(Value::List(mut list)) = live(model, key, now)
                && let Some(index) = list_index(list.len(), *index)
            {
                list[index] = value.clone();
                let at = deadline(model, key);
                put(model, key, Value::List(list), at);
            }
        }
        Op::LInsert { key, before, pivot, value } => {
            if let Some(Value::List(mut list)) = live(model, key, now)
                && let Some(position) = list.iter().position(|element| element == pivot)
            {
                list.insert(if *before { position } else { position + 1 }, value.clone());
                let at = deadline(model, key);
                put(model, key, Value::List(list), at);
            }
        }
        Op::LRem { key, count, value } => {
            if let Some(Value::List(list)) = live(model, key, now) {
                let mut elements: Vec<Bytes> = list.into_iter().collect();
                let limit = if *count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
                let mut removed = 0;
                if *count >= 0 {
                    elements.retain(|element| {
                        let drop = element == value && removed < limit;
                        removed += usize::from(drop);
                        !drop
                    });
                } else {
                    elements.reverse();
                    elements.retain(|element| {
                        let drop = element == value && removed < limit;
                        removed += usize::from(drop);
                        !drop
                    });
                    elements.reverse();
                }
                let at = deadline(model, key);
                put(model, key, Value::List(elements.into()), at);
            }
        }
        Op::LTrim { key, start, stop } => {
            if let Some(Value::List(list)) = live(model, key, now) {
                let kept: VecDeque<Bytes> = match ops::index_range(*start, *stop, list.len() as u64)
                {
                    None => VecDeque::new(),
                    Some((first, last)) => list
                        .into_iter()
                        .skip(first as usize)
                        .take((last - first + 1) as usize)
                        .collect(),
                };
                let at = deadline(model, key);
                put(model, key, Value::List(kept), at);
            }
        }
        Op::SAdd { key, members } => {
            let set = match live(model, key, now) {
                None => Some(BTreeSet::new()),
                Some(Value::Set(set)) => Some(set),
                Some(_) => None,
            };
            if let Some(mut set) = set {
                set.extend(members.iter().cloned());
                let at = deadline(model, key);
                put(model, key, Value::Set(set), at);
            }
        }
        Op::SRem { key, members } => {
            if let Some(Value::Set(mut set)) = live(model, key, now) {
                for member in members {
                    set.remove(member);
                }
                let at = deadline(model, key);
                put(model, key, Value::Set(set), at);
            }
        }
        Op::ZAdd { key, pairs, .. } => {
            let zset = match live(model, key, now) {
                None => Some(BTreeMap::new()),
                Some(Value::ZSet(zset)) => Some(zset),
                Some(_) => None,
            };
            if let Some(mut zset) = zset {
                for (score, member) in pairs {
                    zset.insert(member.clone(), *score as i64);
                }
                let at = deadline(model, key);
                put(model, key, Value::ZSet(zset), at);
            }
        }
        Op::ZRem { key, members } => {
            if let Some(Value::ZSet(mut zset)) = live(model, key, now) {
                for member in members {
                    zset.remove(member);
                }
                let at = deadline(model, key);
                put(model, key, Value::ZSet(zset), at);
            }
        }
        Op::Rename { from, to, .. } => {
            live(model, to, now);
            if live(model, from, now).is_some() && from != to {
                let entry = model.remove(from).expect("live");
                model.insert(to.clone(), entry);
            }
        }
        Op::Copy { from, to, replace } => {
            let exists = live(model, to, now).is_some();
            if live(model, from, now).is_some() && from != to && (!exists || *replace) {
                let entry = model.get(from).expect("live").clone();
                model.insert(to.clone(), entry);
            }
        }
        Op::FlushAll => model.clear(),
        other => unreachable!("the model knows no {other:?}"),
    }
}

/// The whole live key space of `db` at its clock, as the model holds it.
fn dump(db: &Database) -> Model {
    let mut state = Model::new();
    for key in db.keys(&|_| true).unwrap() {
        let reads = [
            Op::Type { key: key.clone() },
            Op::Ttl { key: key.clone(), unit: TimeUnit::Milliseconds, absolute: true },
        ];
        let results = db.read(&reads).unwrap();
        let OpResult::Status(kind) = &results[0] else { panic!("TYPE {key:?}: {results:?}") };
        let deadline = match results[1] {
            OpResult::Integer(-1) => 0,
            OpResult::Integer(at) if at > 0 => at as u64,
            ref other => panic!("PEXPIRETIME {key:?}: {other:?}"),
        };
        let kind = KeyType::from_name(kind.as_bytes()).expect("a type");
        let read = match kind {
            KeyType::String => Op::Get { key: key.clone() },
            KeyType::Hash => Op::HGetAll { key: key.clone(), keys: true, values: true },
            KeyType::List => Op::LRange { key: key.clone(), start: 0, stop: -1 },
            KeyType::Set => Op::SMembers { key: key.clone() },
            KeyType::ZSet => Op::ZRange {
                key: key.clone(),
                range: ZRange {
                    by: ZRangeBy::Rank { start: 0, stop: -1 },
                    reverse: false,
                    limit: None,
                    with_scores: true,
                },
                store: None,
            },
        };
        let value =
            match db.read(&[read]).unwrap().pop().unwrap() {
                OpResult::Value(value) => Value::String(value),
                OpResult::Map(pairs) => Value::Hash(
                    pairs
                        .into_iter()
                        .map(|pair| match pair {
                            (OpResult::Value(field), OpResult::Value(value)) => (field, value),
                            other => panic!("{other:?}"),
                        })
                        .collect(),
                ),
                OpResult::Array(items) => Value::List(
                    items
                        .into_iter()
                        .map(|item| {
                            if let OpResult::Value(item) = item { item } else { panic!("{item:?}") }
                        })
                        .collect(),
                ),
                OpResult::Set(items) => Value::Set(
                    items
                        .into_iter()
                        .map(|item| {
                            if let OpResult::Value(item) = item { item } else { panic!("{item:?}") }
                        })
                        .collect(),
                ),
                OpResult::Pairs(pairs) => Value::ZSet(
                    pairs
                        .into_iter()
                        .map(|pair| match pair {
                            (OpResult::Value(member), OpResult::Score(score)) => {
                                (member, score as i64)
                            }
                            other => panic!("{other:?}"),
                        })
                        .collect(),
                ),
                other => panic!("{key:?}: {other:?}"),
            };
        state.insert(key, (value, deadline));
    }
    state
}

/// The model's live keys at `now`.
fn live_model(model: &Model, now: u64) -> Model {
    model
        .iter()
        .filter(|(_, (_, at))| *at == 0 || *at > now)
        .map(|(key, entry)| (key.clone(), entry.clone()))
        .collect()
}

fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open(&primary_disk).unwrap();
    primary.set_clock(clock.clone());
    let standby = Arc::new(open_standby(&standby_disk).unwrap());
    standby.set_clock(clock.clone());
    standby.redo().adopt_identity(primary.database_id()).unwrap();
    primary.redo().set_shipper(Some(Arc::new(Forward { standby: standby.clone() })));
    let mut model = Model::new();
    for n in 0..300 {
        let ops: Vec<Op> = (0..rng.random_range(1..4)).map(|_| random_op(&mut rng)).collect();
        let now = clock.now_ms();
        let executed = primary
            .transact(&ops, WAIT)
            .unwrap_or_else(|error| panic!("seed {seed}: {ops:?}: {error}"));
        for (op, result) in ops.iter().zip(&executed.results) {
            if !matches!(result, OpResult::Error(_)) {
                model_apply(&mut model, op, now);
            }
        }
        if rng.random_ratio(1, 4) {
            clock.advance(rng.random_range(0..40));
        }
        if rng.random_ratio(1, 10) {
            let step = primary.expire_step(rng.random_range(1..5)).unwrap();
            if let Some(scn) = step.scn {
                primary.commit_blocking(scn, WAIT).unwrap();
            }
        }
        if n % 50 == 49 {
            primary.checkpoint().unwrap();
        }
        if n % 25 == 0 {
            let now = clock.now_ms();
            assert_eq!(
                dump(&primary),
                live_model(&model, now),
                "seed {seed}, after transaction {n}: {ops:?}"
            );
        }
    }
    let now = clock.now_ms();
    let expected = live_model(&model, now);
    assert_eq!(dump(&primary), expected, "seed {seed}: the primary");
    let last = primary.redo().durable_scn();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while standby.applied_scn() < last {
        assert!(
            std::time::Instant::now() < deadline,
            "seed {seed}: the standby applies everything"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(dump(&standby), expected, "seed {seed}: the standby");
    assert_eq!(standby.dbsize().unwrap(), primary.dbsize().unwrap(), "seed {seed}: the key counts");
    // A power cut now: everything was acknowledged, so recovery brings all of it back.
    let image = primary_disk.crash_image(&mut rng, Tear::Nothing);
    primary.redo().set_shipper(None);
    let recovered = open(&image).unwrap();
    recovered.set_clock(clock.clone());
    assert_eq!(dump(&recovered), expected, "seed {seed}: the primary recovered from a power cut");
    assert_eq!(
        recovered.dbsize().unwrap(),
        primary.dbsize().unwrap(),
        "seed {seed}: the recovered key count"
    );
    // And after a checkpoint of what recovery replayed (the data files' layout per type).
    recovered.checkpoint().unwrap();
    recovered.shutdown().unwrap();
    drop(recovered);
    let reopened = open(&image).unwrap();
    reopened.set_clock(clock.clone());
    assert_eq!(dump(&reopened), expected, "seed {seed}: the checkpointed data files");
    reopened.shutdown().unwrap();
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn every_type_matches_the_model_on_the_primary_after_recovery_and_on_the_standby() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the model test of every type");
    for seed in 1..=4 {
        run_seed(seed);
    }
}

#[test]
fn a_zadd_to_a_million_member_set_is_a_row_change_not_a_rewrite() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the large sorted set test");
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    let key = b("big");
    // In transactions of a thousand (a record must fit in a strand of the test's log buffer).
    for chunk in 0..1000u32 {
        let pairs = (0..1000u32)
            .map(|n| (f64::from(chunk * 1000 + n), Bytes::from(format!("m{chunk}:{n}"))))
            .collect();
        db.transact(&[Op::ZAdd { key: key.clone(), options: ZAddOptions::default(), pairs }], WAIT)
            .unwrap();
        if chunk % 100 == 99 {
            db.checkpoint().unwrap();
        }
    }
    db.checkpoint().unwrap();
    let started = std::time::Instant::now();
    let executed = db
        .transact(
            &[Op::ZAdd {
                key: key.clone(),
                options: ZAddOptions::default(),
                pairs: vec![(0.5, b("new"))],
            }],
            WAIT,
        )
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(executed.results, vec![OpResult::Integer(1)]);
    // The redo of that ZADD: a few dozen bytes, whatever the size of the set.
    let scn = executed.scn.unwrap();
    let mut reader = db.redo().read_from_scn(scn).unwrap();
    let record = reader.next_record().unwrap().unwrap();
    assert!(record.payload.len() < 64, "a ZADD's redo is {} bytes", record.payload.len());
    let read = db
        .read(&[
            Op::ZCard { key: key.clone() },
            Op::ZScore { key: key.clone(), member: b("new") },
            Op::ZRange {
                key: key.clone(),
                range: ZRange {
                    by: ZRangeBy::Rank { start: 0, stop: 1 },
                    reverse: false,
                    limit: None,
                    with_scores: false,
                },
                store: None,
            },
        ])
        .unwrap();
    assert_eq!(read[0], OpResult::Integer(1_000_001));
    assert_eq!(read[1], OpResult::Score(0.5));
    assert_eq!(
        read[2],
        OpResult::Array(vec![OpResult::Value(b("m0:0")), OpResult::Value(b("new"))])
    );
    // Far below what rewriting a million members would take (tens of milliseconds at least),
    // even on a slow, shared machine: the commit's fdatasync dominates.
    assert!(elapsed < Duration::from_millis(200), "a ZADD to a set of a million took {elapsed:?}");
    // The checkpoint writes the few rows that changed.
    let started = std::time::Instant::now();
    db.checkpoint().unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "its checkpoint took {:?}",
        started.elapsed()
    );
    db.shutdown().unwrap();
}

/// A plain SET does not read the key it replaces; the checkpoint that writes it learns what it
/// replaced: the old deadline's expires row goes, and a replaced collection's elements become
/// garbage and leave the data files.
#[test]
fn the_checkpoint_cleans_up_after_a_blind_set() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the blind SET test");
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    let store = &db.inner.store;
    let rows = |namespace: layout::Namespace| {
        store
            .range(namespace, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false, 100)
            .unwrap()
            .len()
    };
    let fields = (0..3).map(|n| (Bytes::from(format!("f{n}")), b("v"))).collect();
    db.transact(&[Op::HSet { key: b("h"), pairs: fields, reply_ok: false }], WAIT).unwrap();
    let in_a_day = Time { amount: 86_400, unit: TimeUnit::Seconds, absolute: false };
    let expiring = Op::Set {
        key: b("t"),
        value: b("v"),
        condition: SetCondition::Always,
        expiry: SetExpiry::At(in_a_day),
        get: false,
        command: "set",
    };
    db.transact(&[expiring], WAIT).unwrap();
    db.checkpoint().unwrap();
    assert_eq!(rows(layout::Namespace::Elements), 3);
    assert_eq!(rows(layout::Namespace::Expires), 1);
    // Reopened, nothing of `h` or `t` is in the cache: the SETs below cannot know them.
    db.shutdown().unwrap();
    drop(db);
    let db = open(&disk).unwrap();
    let store = &db.inner.store;
    let rows = |namespace: layout::Namespace| {
        store
            .range(namespace, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false, 100)
            .unwrap()
            .len()
    };
    db.transact(&[Op::set(b("h"), b("string now"), SetCondition::Always)], WAIT).unwrap();
    db.transact(&[Op::set(b("t"), b("no deadline"), SetCondition::Always)], WAIT).unwrap();
    db.checkpoint().unwrap();
    assert_eq!(rows(layout::Namespace::Elements), 0, "the hash's elements are gone");
    assert_eq!(rows(layout::Namespace::Garbage), 0, "and so is its id");
    assert_eq!(rows(layout::Namespace::Expires), 0, "the old deadline's row is gone");
    assert_eq!(db.dbsize().unwrap(), 2);
    let ttl =
        db.read(&[Op::Ttl { key: b("t"), unit: TimeUnit::Seconds, absolute: false }]).unwrap();
    assert_eq!(ttl, vec![OpResult::Integer(-1)]);
    db.shutdown().unwrap();
}
