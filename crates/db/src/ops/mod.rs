//! The operations a transaction is made of, with Redis's semantics: each reads the key space
//! through the transaction's view and records its changes there (`change::Change`), which
//! both makes them visible to the operations after it and is the transaction's redo.
//!
//! An operation that fails as Redis would reply an error (`WRONGTYPE …`, a limit) checks
//! everything before it records its first change, so a failed operation changed nothing.
//! One file per type: `strings`, `keys` (and expiry), `hash`, `list`, `set`, `zset`.

mod hash;
mod keys;
mod list;
mod set;
mod strings;
mod zset;

use std::ops::Bound;

use bytes::Bytes;
use keyspace::KeyType;
pub use keyspace::{Op, OpResult, SetCondition};

use crate::Result;
use crate::change::Change;
use crate::config::DataLimits;
use crate::layout::{self, Collection, Namespace};
use crate::view::View;

pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
pub(crate) const NOT_A_FLOAT: &str = "ERR value is not a valid float";
pub(crate) const OVERFLOW: &str = "ERR increment or decrement would overflow";

/// What an operation needs besides the view: the limits, chance (SPOP, SRANDMEMBER …), and
/// the cursors HSCAN, SSCAN and ZSCAN hand out.
pub(crate) struct Context<'a> {
    pub(crate) limits: DataLimits,
    pub(crate) random: &'a mut Random,
    pub(crate) cursors: &'a parking_lot::Mutex<crate::scan::Cursors>,
}

/// A small, fast generator (xorshift64*): chance for SPOP and friends, not for secrets.
#[derive(Debug)]
pub(crate) struct Random(u64);

impl Random {
    pub(crate) fn new(seed: u64) -> Random {
        Random(seed | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..bound` (bound > 0).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        ((self.next() as u128 * bound as u128) >> 64) as u64
    }
}

/// Runs one operation.
pub(crate) fn run(view: &mut View, op: &Op, cx: &mut Context) -> Result<OpResult> {
    if let Some(result) = strings::run(view, op, cx)? {
        return Ok(result);
    }
    if let Some(result) = keys::run(view, op, cx)? {
        return Ok(result);
    }
    if let Some(result) = hash::run(view, op, cx)? {
        return Ok(result);
    }
    if let Some(result) = list::run(view, op, cx)? {
        return Ok(result);
    }
    if let Some(result) = set::run(view, op, cx)? {
        return Ok(result);
    }
    if let Some(result) = zset::run(view, op, cx)? {
        return Ok(result);
    }
    match op {
        Op::ScanCollection { key, kind, cursor, pattern, count } => {
            scan_collection(view, cx, key, *kind, *cursor, pattern.as_ref(), *count)
        }
        other => unreachable!("no type runs {other:?}"),
    }
}

/// HSCAN, SSCAN, ZSCAN: the next elements after the cursor, and the next cursor (0: done).
/// A cursor names the last element returned, so elements added or removed meanwhile never
/// make an iteration skip one that was there throughout.
fn scan_collection(
    view: &mut View,
    cx: &mut Context,
    key: &Bytes,
    kind: KeyType,
    cursor: u64,
    pattern: Option<&Bytes>,
    count: u64,
) -> Result<OpResult> {
    let reply = |cursor: u64, items: Vec<OpResult>| {
        OpResult::Array(vec![
            OpResult::Value(Bytes::from(cursor.to_string())),
            OpResult::Array(items),
        ])
    };
    let found = match collection(view, key, kind)? {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(reply(0, Vec::new())),
        Err(reply) => return Ok(reply),
    };
    let after = if cursor == 0 {
        None
    } else {
        match cx.cursors.lock().keys.get(&cursor).cloned() {
            // Another collection's cursor (or one of this key before it was replaced): done.
            Some(row) if row.starts_with(&layout::id_prefix(found.info.id)) => Some(row.slice(8..)),
            Some(_) => return Ok(reply(0, Vec::new())),
            None => return Ok(error("ERR invalid cursor")),
        }
    };
    let (lower, upper): (Bound<&[u8]>, Bound<&[u8]>) = match kind {
        KeyType::ZSet => {
            (Bound::Included(&[layout::ZSET_BY_MEMBER]), Bound::Excluded(&[layout::ZSET_BY_SCORE]))
        }
        _ => (Bound::Unbounded, Bound::Unbounded),
    };
    let lower = after.as_ref().map_or(lower, |sub| Bound::Excluded(sub.as_ref()));
    let count = count.clamp(1, cx.limits.command_elements_max) as usize;
    let rows = elements(view, found.info.id, lower, upper, false, count)?;
    let next = match rows.last() {
        Some((sub, _)) if rows.len() == count => {
            cx.cursors.lock().issue(layout::element_row(found.info.id, sub))
        }
        _ => 0,
    };
    let mut items = Vec::new();
    for (sub, value) in rows {
        let name = if kind == KeyType::ZSet { sub.slice(1..) } else { sub };
        if pattern.is_some_and(|pattern| !keyspace::glob::matches(pattern, &name)) {
            continue;
        }
        items.push(OpResult::Value(name));
        match kind {
            KeyType::Hash => items.push(OpResult::Value(value)),
            KeyType::ZSet => {
                let score = layout::decode_score(&value).map_err(|error| {
                    crate::DbError::Store { path: "elements".into(), reason: error.to_string() }
                })?;
                items.push(OpResult::Value(Bytes::from(keyspace::number::format_score(score))));
            }
            _ => {}
        }
    }
    Ok(reply(next, items))
}

pub(crate) fn error(text: impl Into<String>) -> OpResult {
    OpResult::Error(text.into())
}

/// A collection as an operation found it.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) info: Collection,
}

/// The collection of type `kind` at `key`: `Ok(None)` if there is none, `Err(reply)` if the
/// key holds another type.
pub(crate) fn collection(
    view: &mut View,
    key: &Bytes,
    kind: KeyType,
) -> Result<std::result::Result<Option<Found>, OpResult>> {
    Ok(match view.key(key)? {
        None => Ok(None),
        Some(row) if row.kind == kind => {
            let info = row.collection_info().expect("a collection's row");
            Ok(Some(Found { info }))
        }
        Some(_) => Err(error(WRONGTYPE)),
    })
}

/// Evaluates to the collection (or `None`), or returns the WRONGTYPE reply.
macro_rules! typed {
    ($view:expr, $key:expr, $kind:expr) => {
        match $crate::ops::collection($view, $key, $kind)? {
            Ok(found) => found,
            Err(reply) => return Ok(Some(reply)),
        }
    };
}
pub(crate) use typed;

/// The collection at `key`, created (its CREATE recorded) if there is none.
pub(crate) fn create(
    view: &mut View,
    key: &Bytes,
    kind: KeyType,
    found: Option<Found>,
) -> Result<Found> {
    if let Some(found) = found {
        return Ok(found);
    }
    let id = view.new_id();
    view.record(Change::Create { key: key.clone(), kind, id })?;
    let row = view.raw_key(key)?.expect("just created");
    let info = row.collection_info().expect("a collection");
    Ok(Found { info })
}

/// The collection's elements whose `sub` lies within `(lower, upper)` (relative to its id),
/// in order, up to `limit`: `(sub, value)`.
pub(crate) fn elements(
    view: &View,
    id: u64,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    reverse: bool,
    limit: usize,
) -> Result<Vec<(Bytes, Bytes)>> {
    let with_id = |bound: Bound<&[u8]>, end: bool| -> Bound<Bytes> {
        match bound {
            Bound::Included(sub) => Bound::Included(layout::element_row(id, sub)),
            Bound::Excluded(sub) => Bound::Excluded(layout::element_row(id, sub)),
            Bound::Unbounded if end => Bound::Excluded(layout::id_range(id).1),
            Bound::Unbounded => Bound::Included(layout::id_range(id).0),
        }
    };
    let rows = view.range(
        Namespace::Elements,
        with_id(lower, false),
        with_id(upper, true),
        reverse,
        limit,
    )?;
    Ok(rows.into_iter().map(|(row, value)| (row.slice(8..), value)).collect())
}

/// The limit on elements one command may read, return or change, as a reply if `count`
/// passes it.
pub(crate) fn over_command_limit(cx: &Context, count: u64) -> Option<OpResult> {
    (count > cx.limits.command_elements_max).then(|| {
        error(format!(
            "ERR the command would touch {count} elements; the limit is {} (limits.command_elements_max): use a range, a COUNT or SCAN",
            cx.limits.command_elements_max
        ))
    })
}

/// The limit on a collection's size, as a reply if growing it to `count` passes it.
pub(crate) fn over_collection_limit(cx: &Context, count: u64) -> Option<OpResult> {
    (count > cx.limits.collection_elements_max).then(|| {
        error(format!(
            "ERR the collection would hold {count} elements; the limit is {} (limits.collection_elements_max)",
            cx.limits.collection_elements_max
        ))
    })
}

/// Redis's start/stop of a range over `len` elements (negative from the end) as a range of
/// indexes, or `None` if it selects nothing.
pub(crate) fn index_range(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop.min(len - 1) };
    (start <= stop && start < len && stop >= 0).then_some((start as u64, stop as u64))
}

/// Picks elements at random positions among `len`: `count` distinct ones (all, if fewer), or
/// with `repeat` exactly `count` (some perhaps twice). Positions in no particular order.
pub(crate) fn random_positions(
    random: &mut Random,
    len: u64,
    count: u64,
    repeat: bool,
) -> Vec<u64> {
    if repeat {
        return (0..count).map(|_| random.below(len)).collect();
    }
    if count >= len {
        return (0..len).collect();
    }
    // Floyd's algorithm: `count` distinct positions without a table of `len`.
    let mut chosen = std::collections::BTreeSet::new();
    for upper in (len - count)..len {
        let pick = random.below(upper + 1);
        if !chosen.insert(pick) {
            chosen.insert(upper);
        }
    }
    let mut positions: Vec<u64> = chosen.into_iter().collect();
    // Shuffle, so that a client taking the first few gets no bias to the front.
    for index in (1..positions.len()).rev() {
        let other = random.below(index as u64 + 1) as usize;
        positions.swap(index, other);
    }
    positions
}

/// The elements of a collection at sorted `positions` (ascending) of its rows within
/// `(lower, upper)`: one walk, the rows in between skipped a chunk at a time.
pub(crate) fn elements_at(
    view: &View,
    id: u64,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    positions: &[u64],
) -> Result<Vec<(Bytes, Bytes)>> {
    let mut out = Vec::with_capacity(positions.len());
    let Some(&last) = positions.last() else { return Ok(out) };
    let mut index = 0u64;
    let mut wanted = positions.iter().peekable();
    let mut after: Option<Bytes> = None;
    while index <= last {
        let low = match &after {
            Some(sub) => Bound::Excluded(sub.as_ref()),
            None => lower,
        };
        let chunk = elements(view, id, low, upper, false, 4096)?;
        if chunk.is_empty() {
            break;
        }
        for (sub, value) in &chunk {
            while wanted.next_if(|&&position| position == index).is_some() {
                out.push((sub.clone(), value.clone()));
            }
            index += 1;
        }
        after = chunk.last().map(|(sub, _)| sub.clone());
    }
    Ok(out)
}
