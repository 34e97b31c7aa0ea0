//! List commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LINDEX, LSET, LRANGE, LTRIM,
//! LINSERT, LREM, LPOS, LMOVE (RPOPLPUSH), LMPOP. A list of `count` elements holds the dense
//! positions `head .. head + count` (`layout`), so an index is a point read.

use std::ops::Bound;

use bytes::Bytes;
use keyspace::{End, KeyType, Op, OpResult};

use super::{
    Context, Found, create, elements, error, index_range, over_collection_limit,
    over_command_limit, typed,
};
use crate::Result;
use crate::change::Change;
use crate::layout::{self, Namespace};
use crate::view::View;

fn at(view: &View, found: &Found, index: u64) -> Result<Option<Bytes>> {
    let position = found.info.head + index as i64;
    view.get(
        Namespace::Elements,
        &layout::element_row(found.info.id, &layout::position_sub(position)),
    )
}

/// Elements `first..=last` (indexes), in order.
fn slice(view: &View, found: &Found, first: u64, last: u64) -> Result<Vec<Bytes>> {
    let low = layout::position_sub(found.info.head + first as i64);
    let high = layout::position_sub(found.info.head + last as i64);
    let rows = elements(
        view,
        found.info.id,
        Bound::Included(&low),
        Bound::Included(&high),
        false,
        usize::MAX,
    )?;
    Ok(rows.into_iter().map(|(_, value)| value).collect())
}

/// Walks the list from one end, a chunk at a time, calling `visit(index, element)` until it
/// returns false.
fn walk(
    view: &View,
    found: &Found,
    from_tail: bool,
    mut visit: impl FnMut(u64, &Bytes) -> bool,
) -> Result<()> {
    let count = found.info.count;
    let mut done = 0u64;
    while done < count {
        let take = (count - done).min(1024);
        let (first, last) = if from_tail {
            (count - done - take, count - done - 1)
        } else {
            (done, done + take - 1)
        };
        let chunk = slice(view, found, first, last)?;
        let mut indexes: Vec<(u64, &Bytes)> = (first..=last).zip(chunk.iter()).collect();
        if from_tail {
            indexes.reverse();
        }
        for (index, element) in indexes {
            if !visit(index, element) {
                return Ok(());
            }
        }
        done += take;
    }
    Ok(())
}

/// Pops up to `count` elements from `end` of the list at `key`.
fn pop(view: &mut View, key: &Bytes, found: &Found, end: End, count: u64) -> Result<Vec<Bytes>> {
    let count = count.min(found.info.count);
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut values = match end {
        End::Left => slice(view, found, 0, count - 1)?,
        End::Right => slice(view, found, found.info.count - count, found.info.count - 1)?,
    };
    if end == End::Right {
        values.reverse();
    }
    for _ in 0..count {
        view.record(Change::ListPop { key: key.clone(), end })?;
    }
    Ok(values)
}

fn values(values: Vec<Bytes>) -> OpResult {
    OpResult::Array(values.into_iter().map(OpResult::Value).collect())
}

pub(super) fn run(view: &mut View, op: &Op, cx: &mut Context) -> Result<Option<OpResult>> {
    Ok(Some(match op {
        Op::Push { key, end, values, only_if_exists } => {
            let found = typed!(view, key, KeyType::List);
            if found.is_none() && *only_if_exists {
                return Ok(Some(OpResult::Integer(0)));
            }
            let count = found.as_ref().map_or(0, |found| found.info.count) + values.len() as u64;
            if let Some(reply) = over_collection_limit(cx, count) {
                return Ok(Some(reply));
            }
            create(view, key, KeyType::List, found)?;
            for value in values {
                view.record(Change::ListPush {
                    key: key.clone(),
                    end: *end,
                    value: value.clone(),
                })?;
            }
            OpResult::Integer(count as i64)
        }
        Op::Pop { key, end, count } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(if count.is_some() { OpResult::NilArray } else { OpResult::Nil }));
            };
            match count {
                None => {
                    pop(view, key, &found, *end, 1)?.pop().map_or(OpResult::Nil, OpResult::Value)
                }
                Some(count) => {
                    let count = (*count as u64).min(found.info.count);
                    if let Some(reply) = over_command_limit(cx, count) {
                        return Ok(Some(reply));
                    }
                    values(pop(view, key, &found, *end, count)?)
                }
            }
        }
        Op::LLen { key } => OpResult::Integer(
            typed!(view, key, KeyType::List).map_or(0, |found| found.info.count as i64),
        ),
        Op::LIndex { key, index } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(OpResult::Nil));
            };
            match index_of(*index, found.info.count) {
                Some(index) => at(view, &found, index)?.map_or(OpResult::Nil, OpResult::Value),
                None => OpResult::Nil,
            }
        }
        Op::LSet { key, index, value } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(error("ERR no such key")));
            };
            let Some(index) = index_of(*index, found.info.count) else {
                return Ok(Some(error("ERR index out of range")));
            };
            view.record(Change::ListSet { key: key.clone(), index, value: value.clone() })?;
            OpResult::Ok
        }
        Op::LRange { key, start, stop } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(OpResult::Array(Vec::new())));
            };
            match index_range(*start, *stop, found.info.count) {
                None => OpResult::Array(Vec::new()),
                Some((first, last)) => {
                    if let Some(reply) = over_command_limit(cx, last - first + 1) {
                        return Ok(Some(reply));
                    }
                    values(slice(view, &found, first, last)?)
                }
            }
        }
        Op::LTrim { key, start, stop } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(OpResult::Ok));
            };
            let len = found.info.count;
            let (left, right) = match index_range(*start, *stop, len) {
                None => (len, 0),
                Some((first, last)) => (first, len - 1 - last),
            };
            if let Some(reply) = over_command_limit(cx, left + right) {
                return Ok(Some(reply));
            }
            for _ in 0..left {
                view.record(Change::ListPop { key: key.clone(), end: End::Left })?;
            }
            for _ in 0..right {
                view.record(Change::ListPop { key: key.clone(), end: End::Right })?;
            }
            OpResult::Ok
        }
        Op::LInsert { key, before, pivot, value } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            if let Some(reply) = over_collection_limit(cx, found.info.count + 1) {
                return Ok(Some(reply));
            }
            let mut position = None;
            walk(view, &found, false, |index, element| {
                if element == pivot {
                    position = Some(index);
                }
                position.is_none()
            })?;
            let Some(position) = position else { return Ok(Some(OpResult::Integer(-1))) };
            let index = if *before { position } else { position + 1 };
            view.record(Change::ListInsert { key: key.clone(), index, value: value.clone() })?;
            OpResult::Integer(found.info.count as i64 + 1)
        }
        Op::LRem { key, count, value } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            let limit = if *count == 0 { u64::MAX } else { count.unsigned_abs() };
            let mut matches = Vec::new();
            walk(view, &found, *count < 0, |index, element| {
                if element == value {
                    matches.push(index);
                }
                (matches.len() as u64) < limit
            })?;
            // Highest first: a removal moves only the elements after it.
            matches.sort_unstable_by(|a, b| b.cmp(a));
            for index in &matches {
                view.record(Change::ListRemove { key: key.clone(), index: *index })?;
            }
            OpResult::Integer(matches.len() as i64)
        }
        Op::LPos { key, value, rank, count, max_len } => {
            let Some(found) = typed!(view, key, KeyType::List) else {
                return Ok(Some(if count.is_some() {
                    OpResult::Array(Vec::new())
                } else {
                    OpResult::Nil
                }));
            };
            let mut skip = rank.unsigned_abs() - 1;
            let want = match count {
                None => 1,
                Some(0) => u64::MAX,
                Some(count) => *count as u64,
            };
            let mut compared = 0i64;
            let mut positions = Vec::new();
            walk(view, &found, *rank < 0, |index, element| {
                if *max_len != 0 && compared >= *max_len {
                    return false;
                }
                compared += 1;
                if element == value {
                    if skip > 0 {
                        skip -= 1;
                    } else {
                        positions.push(index as i64);
                    }
                }
                (positions.len() as u64) < want
            })?;
            match count {
                None => {
                    positions.first().map_or(OpResult::Nil, |position| OpResult::Integer(*position))
                }
                Some(_) => OpResult::Array(positions.into_iter().map(OpResult::Integer).collect()),
            }
        }
        Op::LMove { from, to, from_end, to_end } => {
            let Some(source) = typed!(view, from, KeyType::List) else {
                return Ok(Some(OpResult::Nil));
            };
            let destination = typed!(view, to, KeyType::List);
            if from != to
                && let Some(reply) = over_collection_limit(
                    cx,
                    destination.as_ref().map_or(0, |found| found.info.count) + 1,
                )
            {
                return Ok(Some(reply));
            }
            let value =
                pop(view, from, &source, *from_end, 1)?.pop().expect("a list is never empty");
            let destination =
                if from == to { typed!(view, to, KeyType::List) } else { destination };
            create(view, to, KeyType::List, destination)?;
            view.record(Change::ListPush { key: to.clone(), end: *to_end, value: value.clone() })?;
            OpResult::Value(value)
        }
        Op::LMPop { keys, end, count } => {
            for key in keys {
                let Some(found) = typed!(view, key, KeyType::List) else { continue };
                let count = (*count as u64).min(found.info.count);
                if let Some(reply) = over_command_limit(cx, count) {
                    return Ok(Some(reply));
                }
                let popped = pop(view, key, &found, *end, count)?;
                return Ok(Some(OpResult::Array(vec![
                    OpResult::Value(key.clone()),
                    values(popped),
                ])));
            }
            OpResult::NilArray
        }
        _ => return Ok(None),
    }))
}

/// An index (negative from the end) into `len` elements, if it is one.
fn index_of(index: i64, len: u64) -> Option<u64> {
    let index = if index < 0 { len as i64 + index } else { index };
    (index >= 0 && (index as u64) < len).then_some(index as u64)
}
