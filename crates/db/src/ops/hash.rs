//! Hash commands: HSET, HMSET, HSETNX, HGET, HMGET, HDEL, HLEN, HSTRLEN, HEXISTS, HKEYS, HVALS,
//! HGETALL, HINCRBY, HINCRBYFLOAT, HRANDFIELD. A field is one element row.

use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;
use keyspace::number::{format_human, parse_double, parse_integer};
use keyspace::{KeyType, Op, OpResult};

use super::{
    Context, OVERFLOW, create, elements, elements_at, error, over_collection_limit,
    over_command_limit, random_positions, typed,
};
use crate::Result;
use crate::change::Change;
use crate::layout::{self, Namespace};
use crate::view::View;

fn field_value(view: &View, id: u64, field: &[u8]) -> Result<Option<Bytes>> {
    view.get(Namespace::Elements, &layout::element_row(id, field))
}

pub(super) fn run(view: &mut View, op: &Op, cx: &mut Context) -> Result<Option<OpResult>> {
    Ok(Some(match op {
        Op::HSet { key, pairs, reply_ok } => {
            let found = typed!(view, key, KeyType::Hash);
            let mut new = BTreeSet::new();
            for (field, _) in pairs {
                let exists = match &found {
                    Some(found) => field_value(view, found.info.id, field)?.is_some(),
                    None => false,
                };
                if !exists {
                    new.insert(field.clone());
                }
            }
            let count = found.as_ref().map_or(0, |found| found.info.count);
            if let Some(reply) = over_collection_limit(cx, count + new.len() as u64) {
                return Ok(Some(reply));
            }
            create(view, key, KeyType::Hash, found)?;
            for (field, value) in pairs {
                view.record(Change::HashSet {
                    key: key.clone(),
                    field: field.clone(),
                    value: value.clone(),
                })?;
            }
            if *reply_ok { OpResult::Ok } else { OpResult::Integer(new.len() as i64) }
        }
        Op::HSetNx { key, field, value } => {
            let found = typed!(view, key, KeyType::Hash);
            if let Some(found) = &found {
                if field_value(view, found.info.id, field)?.is_some() {
                    return Ok(Some(OpResult::Integer(0)));
                }
                if let Some(reply) = over_collection_limit(cx, found.info.count + 1) {
                    return Ok(Some(reply));
                }
            }
            create(view, key, KeyType::Hash, found)?;
            view.record(Change::HashSet {
                key: key.clone(),
                field: field.clone(),
                value: value.clone(),
            })?;
            OpResult::Integer(1)
        }
        Op::HGet { key, field } => match typed!(view, key, KeyType::Hash) {
            Some(found) => {
                field_value(view, found.info.id, field)?.map_or(OpResult::Nil, OpResult::Value)
            }
            None => OpResult::Nil,
        },
        Op::HMGet { key, fields } => {
            let found = typed!(view, key, KeyType::Hash);
            let mut values = Vec::with_capacity(fields.len());
            for field in fields {
                values.push(match &found {
                    Some(found) => field_value(view, found.info.id, field)?,
                    None => None,
                });
            }
            OpResult::Values(values)
        }
        Op::HDel { key, fields } => {
            let Some(found) = typed!(view, key, KeyType::Hash) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            let mut deleted = BTreeSet::new();
            for field in fields {
                if !deleted.contains(field) && field_value(view, found.info.id, field)?.is_some() {
                    deleted.insert(field.clone());
                }
            }
            for field in &deleted {
                view.record(Change::HashDelete { key: key.clone(), field: field.clone() })?;
            }
            OpResult::Integer(deleted.len() as i64)
        }
        Op::HLen { key } => OpResult::Integer(
            typed!(view, key, KeyType::Hash).map_or(0, |found| found.info.count as i64),
        ),
        Op::HStrLen { key, field } => match typed!(view, key, KeyType::Hash) {
            Some(found) => OpResult::Integer(
                field_value(view, found.info.id, field)?.map_or(0, |value| value.len() as i64),
            ),
            None => OpResult::Integer(0),
        },
        Op::HExists { key, field } => match typed!(view, key, KeyType::Hash) {
            Some(found) => {
                OpResult::Integer(i64::from(field_value(view, found.info.id, field)?.is_some()))
            }
            None => OpResult::Integer(0),
        },
        Op::HGetAll { key, keys, values } => {
            let Some(found) = typed!(view, key, KeyType::Hash) else {
                return Ok(Some(if *keys && *values {
                    OpResult::Map(Vec::new())
                } else {
                    OpResult::Array(Vec::new())
                }));
            };
            if let Some(reply) = over_command_limit(cx, found.info.count) {
                return Ok(Some(reply));
            }
            let all = elements(
                view,
                found.info.id,
                Bound::Unbounded,
                Bound::Unbounded,
                false,
                usize::MAX,
            )?;
            if *keys && *values {
                OpResult::Map(
                    all.into_iter()
                        .map(|(field, value)| (OpResult::Value(field), OpResult::Value(value)))
                        .collect(),
                )
            } else if *keys {
                OpResult::Array(all.into_iter().map(|(field, _)| OpResult::Value(field)).collect())
            } else {
                OpResult::Array(all.into_iter().map(|(_, value)| OpResult::Value(value)).collect())
            }
        }
        Op::HIncrBy { key, field, increment } => {
            let found = typed!(view, key, KeyType::Hash);
            let old = match &found {
                Some(found) => field_value(view, found.info.id, field)?,
                None => None,
            };
            let current = match &old {
                None => 0,
                Some(value) => match parse_integer(value) {
                    Some(current) => current,
                    None => return Ok(Some(error("ERR hash value is not an integer"))),
                },
            };
            let Some(new) = current.checked_add(*increment) else {
                return Ok(Some(error(OVERFLOW)));
            };
            if old.is_none()
                && let Some(reply) = over_collection_limit(
                    cx,
                    found.as_ref().map_or(0, |found| found.info.count) + 1,
                )
            {
                return Ok(Some(reply));
            }
            create(view, key, KeyType::Hash, found)?;
            view.record(Change::HashSet {
                key: key.clone(),
                field: field.clone(),
                value: Bytes::from(new.to_string()),
            })?;
            OpResult::Integer(new)
        }
        Op::HIncrByFloat { key, field, increment } => {
            let found = typed!(view, key, KeyType::Hash);
            let old = match &found {
                Some(found) => field_value(view, found.info.id, field)?,
                None => None,
            };
            let current = match &old {
                None => 0.0,
                Some(value) => match parse_double(value) {
                    Some(current) => current,
                    None => return Ok(Some(error("ERR hash value is not a float"))),
                },
            };
            if !increment.is_finite() {
                return Ok(Some(error("ERR value is NaN or Infinity")));
            }
            let new = current + increment;
            if !new.is_finite() {
                return Ok(Some(error("ERR increment would produce NaN or Infinity")));
            }
            if old.is_none()
                && let Some(reply) = over_collection_limit(
                    cx,
                    found.as_ref().map_or(0, |found| found.info.count) + 1,
                )
            {
                return Ok(Some(reply));
            }
            let text = Bytes::from(format_human(new));
            create(view, key, KeyType::Hash, found)?;
            view.record(Change::HashSet {
                key: key.clone(),
                field: field.clone(),
                value: text.clone(),
            })?;
            OpResult::Value(text)
        }
        Op::HRandField { key, count, with_values } => {
            let found = typed!(view, key, KeyType::Hash);
            let Some(found) = found else {
                return Ok(Some(if count.is_some() {
                    OpResult::Array(Vec::new())
                } else {
                    OpResult::Nil
                }));
            };
            let len = found.info.count;
            let (want, repeat) = match count {
                None => (1, false),
                Some(count) if *count >= 0 => (*count as u64, false),
                Some(count) => (count.unsigned_abs(), true),
            };
            if let Some(reply) =
                over_command_limit(cx, want.min(if repeat { u64::MAX } else { len }))
            {
                return Ok(Some(reply));
            }
            let positions = random_positions(cx.random, len, want, repeat);
            let picked = pick(view, found.info.id, &positions)?;
            match count {
                None => picked
                    .into_iter()
                    .next()
                    .map_or(OpResult::Nil, |(field, _)| OpResult::Value(field)),
                Some(_) if *with_values => OpResult::Pairs(
                    picked
                        .into_iter()
                        .map(|(field, value)| (OpResult::Value(field), OpResult::Value(value)))
                        .collect(),
                ),
                Some(_) => OpResult::Array(
                    picked.into_iter().map(|(field, _)| OpResult::Value(field)).collect(),
                ),
            }
        }
        _ => return Ok(None),
    }))
}

/// The elements at `positions` (in any order, perhaps repeated), in that order.
pub(super) fn pick(view: &View, id: u64, positions: &[u64]) -> Result<Vec<(Bytes, Bytes)>> {
    let mut sorted: Vec<u64> = positions.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let found = elements_at(view, id, Bound::Unbounded, Bound::Unbounded, &sorted)?;
    let by_position: std::collections::BTreeMap<u64, (Bytes, Bytes)> =
        sorted.into_iter().zip(found).collect();
    Ok(positions.iter().filter_map(|position| by_position.get(position).cloned()).collect())
}
