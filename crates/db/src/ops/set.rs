//! Set commands: SADD, SREM, SCARD, SISMEMBER, SMISMEMBER, SMEMBERS, SRANDMEMBER, SPOP, SMOVE,
//! SUNION, SINTER, SDIFF (and their …STORE forms), SINTERCARD. A member is one element row.

use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;
use keyspace::{KeyType, Op, OpResult, SetOperation};

use super::hash::pick;
use super::{
    Context, Found, create, elements, over_collection_limit, over_command_limit, random_positions,
    typed,
};
use crate::Result;
use crate::change::Change;
use crate::layout::{self, Namespace};
use crate::view::View;

fn is_member(view: &View, id: u64, member: &[u8]) -> Result<bool> {
    Ok(view.get(Namespace::Elements, &layout::element_row(id, member))?.is_some())
}

fn members(view: &View, found: &Found) -> Result<Vec<Bytes>> {
    let rows =
        elements(view, found.info.id, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)?;
    Ok(rows.into_iter().map(|(member, _)| member).collect())
}

fn array(members: impl IntoIterator<Item = Bytes>) -> OpResult {
    OpResult::Array(members.into_iter().map(OpResult::Value).collect())
}

/// Replaces whatever `key` holds by the set of `members` (none: the key goes). Returns its size.
pub(super) fn store_set(view: &mut View, key: &Bytes, members: &BTreeSet<Bytes>) -> Result<i64> {
    if view.key(key)?.is_some() {
        view.record(Change::Delete { key: key.clone() })?;
    }
    if !members.is_empty() {
        create(view, key, KeyType::Set, None)?;
        for member in members {
            view.record(Change::SetAdd { key: key.clone(), member: member.clone() })?;
        }
    }
    Ok(members.len() as i64)
}

/// Replaces whatever `key` holds by a list of `elements` (none: the key goes). Returns its
/// length.
pub(super) fn store_list(view: &mut View, key: &Bytes, elements: Vec<Bytes>) -> Result<i64> {
    if view.key(key)?.is_some() {
        view.record(Change::Delete { key: key.clone() })?;
    }
    let len = elements.len() as i64;
    if !elements.is_empty() {
        create(view, key, KeyType::List, None)?;
        for value in elements {
            view.record(Change::ListPush { key: key.clone(), end: keyspace::End::Right, value })?;
        }
    }
    Ok(len)
}

pub(super) fn run(view: &mut View, op: &Op, cx: &mut Context) -> Result<Option<OpResult>> {
    Ok(Some(match op {
        Op::SAdd { key, members } => {
            let found = typed!(view, key, KeyType::Set);
            let mut new = BTreeSet::new();
            for member in members {
                let exists = match &found {
                    Some(found) => is_member(view, found.info.id, member)?,
                    None => false,
                };
                if !exists {
                    new.insert(member.clone());
                }
            }
            let count = found.as_ref().map_or(0, |found| found.info.count);
            if let Some(reply) = over_collection_limit(cx, count + new.len() as u64) {
                return Ok(Some(reply));
            }
            if !new.is_empty() {
                create(view, key, KeyType::Set, found)?;
                for member in &new {
                    view.record(Change::SetAdd { key: key.clone(), member: member.clone() })?;
                }
            }
            OpResult::Integer(new.len() as i64)
        }
        Op::SRem { key, members } => {
            let Some(found) = typed!(view, key, KeyType::Set) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            let mut removed = BTreeSet::new();
            for member in members {
                if !removed.contains(member) && is_member(view, found.info.id, member)? {
                    removed.insert(member.clone());
                }
            }
            for member in &removed {
                view.record(Change::SetRemove { key: key.clone(), member: member.clone() })?;
            }
            OpResult::Integer(removed.len() as i64)
        }
        Op::SCard { key } => OpResult::Integer(
            typed!(view, key, KeyType::Set).map_or(0, |found| found.info.count as i64),
        ),
        Op::SIsMember { key, member } => match typed!(view, key, KeyType::Set) {
            Some(found) => OpResult::Integer(i64::from(is_member(view, found.info.id, member)?)),
            None => OpResult::Integer(0),
        },
        Op::SMIsMember { key, members } => {
            let found = typed!(view, key, KeyType::Set);
            let mut answers = Vec::with_capacity(members.len());
            for member in members {
                let yes = match &found {
                    Some(found) => is_member(view, found.info.id, member)?,
                    None => false,
                };
                answers.push(OpResult::Integer(i64::from(yes)));
            }
            OpResult::Array(answers)
        }
        Op::SMembers { key } => {
            let Some(found) = typed!(view, key, KeyType::Set) else {
                return Ok(Some(OpResult::Set(Vec::new())));
            };
            if let Some(reply) = over_command_limit(cx, found.info.count) {
                return Ok(Some(reply));
            }
            OpResult::Set(members(view, &found)?.into_iter().map(OpResult::Value).collect())
        }
        Op::SRandMember { key, count } => {
            let Some(found) = typed!(view, key, KeyType::Set) else {
                return Ok(Some(if count.is_some() {
                    OpResult::Array(Vec::new())
                } else {
                    OpResult::Nil
                }));
            };
            let (want, repeat) = match count {
                None => (1, false),
                Some(count) if *count >= 0 => (*count as u64, false),
                Some(count) => (count.unsigned_abs(), true),
            };
            if let Some(reply) =
                over_command_limit(cx, if repeat { want } else { want.min(found.info.count) })
            {
                return Ok(Some(reply));
            }
            let positions = random_positions(cx.random, found.info.count, want, repeat);
            let picked = pick(view, found.info.id, &positions)?;
            match count {
                None => picked
                    .into_iter()
                    .next()
                    .map_or(OpResult::Nil, |(member, _)| OpResult::Value(member)),
                Some(_) => array(picked.into_iter().map(|(member, _)| member)),
            }
        }
        Op::SPop { key, count } => {
            let Some(found) = typed!(view, key, KeyType::Set) else {
                return Ok(Some(if count.is_some() {
                    OpResult::Array(Vec::new())
                } else {
                    OpResult::Nil
                }));
            };
            let want = count.map_or(1, |count| count as u64).min(found.info.count);
            if let Some(reply) = over_command_limit(cx, want) {
                return Ok(Some(reply));
            }
            let positions = random_positions(cx.random, found.info.count, want, false);
            let picked = pick(view, found.info.id, &positions)?;
            for (member, _) in &picked {
                view.record(Change::SetRemove { key: key.clone(), member: member.clone() })?;
            }
            match count {
                None => picked
                    .into_iter()
                    .next()
                    .map_or(OpResult::Nil, |(member, _)| OpResult::Value(member)),
                Some(_) => OpResult::Set(
                    picked.into_iter().map(|(member, _)| OpResult::Value(member)).collect(),
                ),
            }
        }
        Op::SMove { from, to, member } => {
            let source = typed!(view, from, KeyType::Set);
            let destination = typed!(view, to, KeyType::Set);
            let Some(source) = source else { return Ok(Some(OpResult::Integer(0))) };
            if !is_member(view, source.info.id, member)? {
                return Ok(Some(OpResult::Integer(0)));
            }
            if from == to {
                return Ok(Some(OpResult::Integer(1)));
            }
            let already = match &destination {
                Some(found) => is_member(view, found.info.id, member)?,
                None => false,
            };
            if !already
                && let Some(reply) = over_collection_limit(
                    cx,
                    destination.as_ref().map_or(0, |found| found.info.count) + 1,
                )
            {
                return Ok(Some(reply));
            }
            view.record(Change::SetRemove { key: from.clone(), member: member.clone() })?;
            if !already {
                create(view, to, KeyType::Set, destination)?;
                view.record(Change::SetAdd { key: to.clone(), member: member.clone() })?;
            }
            OpResult::Integer(1)
        }
        Op::SCombine { operation, keys, store } => {
            let mut sets = Vec::with_capacity(keys.len());
            for key in keys {
                sets.push(typed!(view, key, KeyType::Set));
            }
            let work: u64 = sets.iter().flatten().map(|found| found.info.count).sum();
            if let Some(reply) = over_command_limit(cx, work) {
                return Ok(Some(reply));
            }
            let result = combine(view, *operation, &sets, 0)?;
            match store {
                Some(destination) => {
                    if let Some(reply) = over_collection_limit(cx, result.len() as u64) {
                        return Ok(Some(reply));
                    }
                    OpResult::Integer(store_set(view, destination, &result)?)
                }
                None => OpResult::Set(result.into_iter().map(OpResult::Value).collect()),
            }
        }
        Op::SInterCard { keys, limit } => {
            let mut sets = Vec::with_capacity(keys.len());
            for key in keys {
                sets.push(typed!(view, key, KeyType::Set));
            }
            let work: u64 = sets.iter().flatten().map(|found| found.info.count).min().unwrap_or(0);
            if let Some(reply) = over_command_limit(cx, work) {
                return Ok(Some(reply));
            }
            OpResult::Integer(
                combine(view, SetOperation::Inter, &sets, *limit as usize)?.len() as i64
            )
        }
        _ => return Ok(None),
    }))
}

/// The union, intersection or difference of `sets` (a missing key is an empty set); an
/// intersection stops at `limit` members (0: none).
fn combine(
    view: &View,
    operation: SetOperation,
    sets: &[Option<Found>],
    limit: usize,
) -> Result<BTreeSet<Bytes>> {
    let mut result = BTreeSet::new();
    match operation {
        SetOperation::Union => {
            for found in sets.iter().flatten() {
                result.extend(members(view, found)?);
            }
        }
        SetOperation::Inter => {
            if sets.iter().any(Option::is_none) {
                return Ok(result);
            }
            let mut sets: Vec<&Found> = sets.iter().flatten().collect();
            sets.sort_by_key(|found| found.info.count);
            let Some((smallest, others)) = sets.split_first() else { return Ok(result) };
            'members: for member in members(view, smallest)? {
                for other in others {
                    if !is_member(view, other.info.id, &member)? {
                        continue 'members;
                    }
                }
                result.insert(member);
                if limit != 0 && result.len() >= limit {
                    break;
                }
            }
        }
        SetOperation::Diff => {
            let Some(Some(first)) = sets.first() else { return Ok(result) };
            'members: for member in members(view, first)? {
                for other in sets[1..].iter().flatten() {
                    if is_member(view, other.info.id, &member)? {
                        continue 'members;
                    }
                }
                result.insert(member);
            }
        }
    }
    Ok(result)
}
