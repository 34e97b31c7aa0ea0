//! Sorted-set commands: ZADD, ZINCRBY, ZREM, ZCARD, ZSCORE, ZMSCORE, ZRANK, ZREVRANK, ZCOUNT,
//! ZLEXCOUNT, the ZRANGE family (BYSCORE, BYLEX, REV, LIMIT, WITHSCORES, ZRANGESTORE),
//! ZREMRANGEBY…, ZPOPMIN, ZPOPMAX, ZMPOP, ZRANDMEMBER, ZUNION, ZINTER, ZDIFF (and …STORE),
//! ZINTERCARD.
//!
//! A member is two element rows: its score by member, and its place in the order (score, then
//! member bytes, as Redis orders). A ZADD to a set of a million is four row changes at most;
//! a range by score or member is a range of rows. A rank costs a walk of that many rows.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use keyspace::{
    Aggregate, KeyType, LexBound, Op, OpResult, ScoreBound, SetOperation, ZAddOptions, ZRange,
    ZRangeBy,
};

use super::{
    Context, Found, create, elements, error, index_range, over_collection_limit,
    over_command_limit, typed,
};
use crate::Result;
use crate::change::Change;
use crate::layout::{self, Namespace, ZSET_BY_MEMBER, ZSET_BY_SCORE};
use crate::view::View;

fn score_of(view: &View, id: u64, member: &[u8]) -> Result<Option<f64>> {
    let row = layout::element_row(id, &layout::zset_member_sub(member));
    view.get(Namespace::Elements, &row)?
        .map(|value| layout::decode_score(&value).map_err(corrupt))
        .transpose()
}

fn corrupt(error: layout::LayoutError) -> crate::DbError {
    crate::DbError::Store { path: "elements".into(), reason: error.to_string() }
}

/// A member and its score from an order row's `sub`: `{ 1 | score | member }`.
fn from_order(sub: &Bytes) -> Result<(Bytes, f64)> {
    let score = layout::score_of_key(sub.get(1..).unwrap_or_default()).map_err(corrupt)?;
    Ok((sub.slice(9..), score))
}

/// The order rows' bounds for a score range.
fn score_bounds(min: ScoreBound, max: ScoreBound) -> Bounds {
    let key = |score: f64, bump: bool| -> Vec<u8> {
        let mut sub = vec![ZSET_BY_SCORE];
        let ordered = u64::from_be_bytes(layout::score_key(score));
        // Past every member of this score: the next score key (never beyond: scores are not NaN).
        sub.extend_from_slice(
            &(if bump { ordered.saturating_add(1) } else { ordered }).to_be_bytes(),
        );
        sub
    };
    let lower = Bound::Included(key(min.value, min.exclusive));
    let upper = Bound::Excluded(key(max.value, !max.exclusive));
    (lower, upper)
}

/// Bounds of a range of rows, owned.
type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The member rows' bounds for a lexicographic range (`None`: empty).
fn lex_bounds(min: &LexBound, max: &LexBound) -> Option<Bounds> {
    let with = |member: &Bytes| layout::zset_member_sub(member);
    let lower = match min {
        LexBound::Min => Bound::Included(vec![ZSET_BY_MEMBER]),
        LexBound::Max => return None,
        LexBound::Inclusive(member) => Bound::Included(with(member)),
        LexBound::Exclusive(member) => Bound::Excluded(with(member)),
    };
    let upper = match max {
        LexBound::Min => return None,
        LexBound::Max => Bound::Excluded(vec![ZSET_BY_SCORE]),
        LexBound::Inclusive(member) => Bound::Included(with(member)),
        LexBound::Exclusive(member) => Bound::Excluded(with(member)),
    };
    Some((lower, upper))
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(key) => Bound::Included(key.as_slice()),
        Bound::Excluded(key) => Bound::Excluded(key.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

const ALL_ORDER: (&[u8], &[u8]) = (&[ZSET_BY_SCORE], &[ZSET_BY_SCORE + 1]);

/// Members with scores in order, skipping `offset`, at most `count`, within order bounds.
fn ordered(
    view: &View,
    found: &Found,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    reverse: bool,
    offset: u64,
    count: u64,
) -> Result<Vec<(Bytes, f64)>> {
    let limit = offset.saturating_add(count).min(found.info.count) as usize;
    let rows = elements(view, found.info.id, lower, upper, reverse, limit)?;
    rows.into_iter().skip(offset as usize).map(|(sub, _)| from_order(&sub)).collect()
}

/// Members of a lexicographic range in order (with scores).
fn by_lex(
    view: &View,
    found: &Found,
    min: &LexBound,
    max: &LexBound,
    reverse: bool,
    offset: u64,
    count: u64,
) -> Result<Vec<(Bytes, f64)>> {
    let Some((lower, upper)) = lex_bounds(min, max) else { return Ok(Vec::new()) };
    let limit = offset.saturating_add(count).min(found.info.count) as usize;
    let rows = elements(view, found.info.id, as_ref(&lower), as_ref(&upper), reverse, limit)?;
    rows.into_iter()
        .skip(offset as usize)
        .map(|(sub, value)| Ok((sub.slice(1..), layout::decode_score(&value).map_err(corrupt)?)))
        .collect()
}

/// What a ZRANGE selects, in reply order.
fn select(view: &View, found: &Found, range: &ZRange) -> Result<Vec<(Bytes, f64)>> {
    let (offset, count) = match range.limit {
        Some((offset, _)) if offset < 0 => return Ok(Vec::new()),
        Some((offset, count)) => (offset as u64, if count < 0 { u64::MAX } else { count as u64 }),
        None => (0, u64::MAX),
    };
    match &range.by {
        ZRangeBy::Rank { start, stop } => {
            let Some((first, last)) = index_range(*start, *stop, found.info.count) else {
                return Ok(Vec::new());
            };
            ordered(
                view,
                found,
                Bound::Included(ALL_ORDER.0),
                Bound::Excluded(ALL_ORDER.1),
                range.reverse,
                first,
                last - first + 1,
            )
        }
        ZRangeBy::Score { min, max } => {
            let (lower, upper) = score_bounds(*min, *max);
            ordered(view, found, as_ref(&lower), as_ref(&upper), range.reverse, offset, count)
        }
        ZRangeBy::Lex { min, max } => by_lex(view, found, min, max, range.reverse, offset, count),
    }
}

fn with_scores(members: Vec<(Bytes, f64)>, scores: bool) -> OpResult {
    if scores {
        OpResult::Pairs(
            members
                .into_iter()
                .map(|(member, score)| (OpResult::Value(member), OpResult::Score(score)))
                .collect(),
        )
    } else {
        OpResult::Array(members.into_iter().map(|(member, _)| OpResult::Value(member)).collect())
    }
}

/// Replaces whatever `key` holds by a sorted set of `members` (none: the key goes).
fn store_zset(view: &mut View, key: &Bytes, members: &[(Bytes, f64)]) -> Result<i64> {
    if view.key(key)?.is_some() {
        view.record(Change::Delete { key: key.clone() })?;
    }
    if !members.is_empty() {
        create(view, key, KeyType::ZSet, None)?;
        for (member, score) in members {
            view.record(Change::ZAdd { key: key.clone(), member: member.clone(), score: *score })?;
        }
    }
    Ok(members.len() as i64)
}

/// Pops `count` members from the lowest (or highest) scores.
fn pop(
    view: &mut View,
    key: &Bytes,
    found: &Found,
    max: bool,
    count: u64,
) -> Result<Vec<(Bytes, f64)>> {
    let members = ordered(
        view,
        found,
        Bound::Included(ALL_ORDER.0),
        Bound::Excluded(ALL_ORDER.1),
        max,
        0,
        count,
    )?;
    for (member, _) in &members {
        view.record(Change::ZRemove { key: key.clone(), member: member.clone() })?;
    }
    Ok(members)
}

/// ZADD of one pair: the new score if the options let it change, and whether it is new.
fn added_score(
    old: Option<f64>,
    score: f64,
    options: &ZAddOptions,
) -> std::result::Result<Option<f64>, OpResult> {
    use keyspace::SetCondition::{IfAbsent, IfPresent};
    match (old, options.condition) {
        (Some(_), IfAbsent) | (None, IfPresent) => return Ok(None),
        _ => {}
    }
    let Some(old) = old else { return Ok(Some(score)) };
    let new = if options.increment { old + score } else { score };
    if new.is_nan() {
        return Err(error("ERR resulting score is not a number (NaN)"));
    }
    match options.greater {
        Some(true) if new <= old => Ok(None),
        Some(false) if new >= old => Ok(None),
        _ => Ok(Some(new)),
    }
}

pub(super) fn run(view: &mut View, op: &Op, cx: &mut Context) -> Result<Option<OpResult>> {
    Ok(Some(match op {
        Op::ZAdd { key, options, pairs } => {
            let found = typed!(view, key, KeyType::ZSet);
            // Decide every pair first: nothing is changed if one fails.
            let mut decided: BTreeMap<Bytes, (Option<f64>, f64)> = BTreeMap::new();
            let mut last_score = None;
            for (score, member) in pairs {
                let old = match decided.get(member) {
                    Some((_, current)) => Some(*current),
                    None => match &found {
                        Some(found) => score_of(view, found.info.id, member)?,
                        None => None,
                    },
                };
                let original = decided.get(member).map_or(old, |(original, _)| *original);
                match added_score(old, *score, options) {
                    Err(reply) => return Ok(Some(reply)),
                    Ok(None) => last_score = None,
                    Ok(Some(new)) => {
                        decided.insert(member.clone(), (original, new));
                        last_score = Some(new);
                    }
                }
            }
            let added = decided.values().filter(|(original, _)| original.is_none()).count() as u64;
            let changed = decided
                .values()
                .filter(|(original, new)| original.is_some_and(|old| old != *new))
                .count() as u64;
            let count = found.as_ref().map_or(0, |found| found.info.count);
            if let Some(reply) = over_collection_limit(cx, count + added) {
                return Ok(Some(reply));
            }
            if !decided.is_empty() {
                create(view, key, KeyType::ZSet, found)?;
                for (member, (original, new)) in decided {
                    if original != Some(new) {
                        view.record(Change::ZAdd { key: key.clone(), member, score: new })?;
                    }
                }
            }
            if options.increment {
                last_score.map_or(OpResult::Nil, OpResult::Score)
            } else if options.changed {
                OpResult::Integer((added + changed) as i64)
            } else {
                OpResult::Integer(added as i64)
            }
        }
        Op::ZIncrBy { key, increment, member } => {
            let options = ZAddOptions { increment: true, ..ZAddOptions::default() };
            let pairs = vec![(*increment, member.clone())];
            return run(view, &Op::ZAdd { key: key.clone(), options, pairs }, cx);
        }
        Op::ZRem { key, members } => {
            let Some(found) = typed!(view, key, KeyType::ZSet) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            let mut removed = std::collections::BTreeSet::new();
            for member in members {
                if !removed.contains(member) && score_of(view, found.info.id, member)?.is_some() {
                    removed.insert(member.clone());
                }
            }
            for member in &removed {
                view.record(Change::ZRemove { key: key.clone(), member: member.clone() })?;
            }
            OpResult::Integer(removed.len() as i64)
        }
        Op::ZCard { key } => OpResult::Integer(
            typed!(view, key, KeyType::ZSet).map_or(0, |found| found.info.count as i64),
        ),
        Op::ZScore { key, member } => match typed!(view, key, KeyType::ZSet) {
            Some(found) => {
                score_of(view, found.info.id, member)?.map_or(OpResult::Nil, OpResult::Score)
            }
            None => OpResult::Nil,
        },
        Op::ZMScore { key, members } => {
            let found = typed!(view, key, KeyType::ZSet);
            let mut scores = Vec::with_capacity(members.len());
            for member in members {
                scores.push(match &found {
                    Some(found) => score_of(view, found.info.id, member)?
                        .map_or(OpResult::Nil, OpResult::Score),
                    None => OpResult::Nil,
                });
            }
            OpResult::Array(scores)
        }
        Op::ZRank { key, member, reverse } => {
            let Some(found) = typed!(view, key, KeyType::ZSet) else {
                return Ok(Some(OpResult::Nil));
            };
            let Some(score) = score_of(view, found.info.id, member)? else {
                return Ok(Some(OpResult::Nil));
            };
            // The rows before the member's own.
            let own = layout::zset_order_sub(score, member);
            let before =
                count_rows(view, &found, Bound::Included(ALL_ORDER.0), Bound::Excluded(&own), cx)?;
            let Some(before) = before else {
                return Ok(over_command_limit(cx, found.info.count));
            };
            OpResult::Integer(if *reverse {
                found.info.count as i64 - 1 - before as i64
            } else {
                before as i64
            })
        }
        Op::ZCount { key, min, max } => {
            let Some(found) = typed!(view, key, KeyType::ZSet) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            let (lower, upper) = score_bounds(*min, *max);
            match count_rows(view, &found, as_ref(&lower), as_ref(&upper), cx)? {
                Some(count) => OpResult::Integer(count as i64),
                None => return Ok(over_command_limit(cx, found.info.count)),
            }
        }
        Op::ZLexCount { key, min, max } => {
            let Some(found) = typed!(view, key, KeyType::ZSet) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            let Some((lower, upper)) = lex_bounds(min, max) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            match count_rows(view, &found, as_ref(&lower), as_ref(&upper), cx)? {
                Some(count) => OpResult::Integer(count as i64),
                None => return Ok(over_command_limit(cx, found.info.count)),
            }
        }
        Op::ZRange { key, range, store } => {
            let source = typed!(view, key, KeyType::ZSet);
            let members = match &source {
                Some(found) => {
                    if let Some(reply) =
                        over_command_limit(cx, found.info.count.min(range_size(range)))
                    {
                        return Ok(Some(reply));
                    }
                    select(view, found, range)?
                }
                None => Vec::new(),
            };
            match store {
                Some(destination) => OpResult::Integer(store_zset(view, destination, &members)?),
                None => with_scores(members, range.with_scores),
            }
        }
        Op::ZRemRange { key, by } => {
            let Some(found) = typed!(view, key, KeyType::ZSet) else {
                return Ok(Some(OpResult::Integer(0)));
            };
            if let Some(reply) = over_command_limit(cx, found.info.count) {
                return Ok(Some(reply));
            }
            let range = ZRange { by: by.clone(), reverse: false, limit: None, with_scores: false };
            let members = select(view, &found, &range)?;
            for (member, _) in &members {
                view.record(Change::ZRemove { key: key.clone(), member: member.clone() })?;
            }
            OpResult::Integer(members.len() as i64)
        }
        Op::ZPop { key, max, count } => {
            let Some(found) = typed!(view, key, KeyType::ZSet) else {
                return Ok(Some(OpResult::Array(Vec::new())));
            };
            let want = count.map_or(1, |count| count as u64);
            if let Some(reply) = over_command_limit(cx, want.min(found.info.count)) {
                return Ok(Some(reply));
            }
            let members = pop(view, key, &found, *max, want)?;
            match count {
                None => OpResult::Array(
                    members
                        .into_iter()
                        .flat_map(|(member, score)| {
                            [OpResult::Value(member), OpResult::Score(score)]
                        })
                        .collect(),
                ),
                Some(_) => with_scores(members, true),
            }
        }
        Op::ZMPop { keys, max, count } => {
            for key in keys {
                let Some(found) = typed!(view, key, KeyType::ZSet) else { continue };
                if let Some(reply) = over_command_limit(cx, (*count as u64).min(found.info.count)) {
                    return Ok(Some(reply));
                }
                let members = pop(view, key, &found, *max, *count as u64)?;
                let members = OpResult::Array(
                    members
                        .into_iter()
                        .map(|(member, score)| {
                            OpResult::Array(vec![OpResult::Value(member), OpResult::Score(score)])
                        })
                        .collect(),
                );
                return Ok(Some(OpResult::Array(vec![OpResult::Value(key.clone()), members])));
            }
            OpResult::NilArray
        }
        Op::ZRandMember { key, count, with_scores: scores } => {
            let Some(found) = typed!(view, key, KeyType::ZSet) else {
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
            let positions = super::random_positions(cx.random, found.info.count, want, repeat);
            let mut sorted = positions.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let rows = super::elements_at(
                view,
                found.info.id,
                Bound::Included(ALL_ORDER.0),
                Bound::Excluded(ALL_ORDER.1),
                &sorted,
            )?;
            let by_position: BTreeMap<u64, (Bytes, Bytes)> = sorted.into_iter().zip(rows).collect();
            let mut picked = Vec::with_capacity(positions.len());
            for position in &positions {
                if let Some((sub, _)) = by_position.get(position) {
                    picked.push(from_order(sub)?);
                }
            }
            match count {
                None => picked
                    .into_iter()
                    .next()
                    .map_or(OpResult::Nil, |(member, _)| OpResult::Value(member)),
                Some(_) => with_scores(picked, *scores),
            }
        }
        Op::ZCombine { operation, keys, weights, aggregate, with_scores: scores, store } => {
            let mut inputs = Vec::with_capacity(keys.len());
            for key in keys {
                inputs.push(match view.key(key)? {
                    None => None,
                    Some(row) if matches!(row.kind, KeyType::ZSet | KeyType::Set) => {
                        Some((row.kind, row.collection_info().expect("a collection")))
                    }
                    Some(_) => return Ok(Some(error(super::WRONGTYPE))),
                });
            }
            let work: u64 = inputs.iter().flatten().map(|(_, info)| info.count).sum();
            if let Some(reply) = over_command_limit(cx, work) {
                return Ok(Some(reply));
            }
            let members = combine(view, *operation, &inputs, weights.as_deref(), *aggregate, 0)?;
            match store {
                Some(destination) => {
                    if let Some(reply) = over_collection_limit(cx, members.len() as u64) {
                        return Ok(Some(reply));
                    }
                    OpResult::Integer(store_zset(view, destination, &members)?)
                }
                None => with_scores(members, *scores),
            }
        }
        Op::ZInterCard { keys, limit } => {
            let mut inputs = Vec::with_capacity(keys.len());
            for key in keys {
                inputs.push(match view.key(key)? {
                    None => None,
                    Some(row) if matches!(row.kind, KeyType::ZSet | KeyType::Set) => {
                        Some((row.kind, row.collection_info().expect("a collection")))
                    }
                    Some(_) => return Ok(Some(error(super::WRONGTYPE))),
                });
            }
            let work: u64 = inputs.iter().flatten().map(|(_, info)| info.count).sum();
            if let Some(reply) = over_command_limit(cx, work) {
                return Ok(Some(reply));
            }
            let members =
                combine(view, SetOperation::Inter, &inputs, None, Aggregate::Sum, *limit as usize)?;
            OpResult::Integer(members.len() as i64)
        }
        _ => return Ok(None),
    }))
}

/// How many elements a range could select at most (for the command limit).
fn range_size(range: &ZRange) -> u64 {
    match (&range.by, range.limit) {
        (ZRangeBy::Rank { start, stop }, _) if *start >= 0 && *stop >= 0 => {
            (stop - start + 1).max(0) as u64
        }
        (_, Some((_, count))) if count >= 0 => count as u64,
        _ => u64::MAX,
    }
}

/// Rows of the set within bounds, counted by walking them; `None` past the command limit.
fn count_rows(
    view: &View,
    found: &Found,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    cx: &Context,
) -> Result<Option<u64>> {
    let mut count = 0u64;
    let mut after: Option<Bytes> = None;
    loop {
        let low = match &after {
            Some(sub) => Bound::Excluded(sub.as_ref()),
            None => lower,
        };
        let chunk = elements(view, found.info.id, low, upper, false, 4096)?;
        let Some((last, _)) = chunk.last() else { return Ok(Some(count)) };
        count += chunk.len() as u64;
        if count > cx.limits.command_elements_max {
            return Ok(None);
        }
        after = Some(last.clone());
    }
}

/// Every member of a set or sorted set with its score (a set's members score 1).
fn scored(view: &View, kind: KeyType, id: u64) -> Result<Vec<(Bytes, f64)>> {
    let (lower, upper): (Bound<&[u8]>, Bound<&[u8]>) = match kind {
        KeyType::ZSet => (Bound::Included(&[ZSET_BY_MEMBER]), Bound::Excluded(&[ZSET_BY_SCORE])),
        _ => (Bound::Unbounded, Bound::Unbounded),
    };
    let rows = elements(view, id, lower, upper, false, usize::MAX)?;
    rows.into_iter()
        .map(|(sub, value)| match kind {
            KeyType::ZSet => Ok((sub.slice(1..), layout::decode_score(&value).map_err(corrupt)?)),
            _ => Ok((sub, 1.0)),
        })
        .collect()
}

fn score_in(view: &View, kind: KeyType, id: u64, member: &[u8]) -> Result<Option<f64>> {
    match kind {
        KeyType::ZSet => score_of(view, id, member),
        _ => Ok(view.get(Namespace::Elements, &layout::element_row(id, member))?.map(|_| 1.0)),
    }
}

fn aggregated(aggregate: Aggregate, target: f64, value: f64) -> f64 {
    match aggregate {
        Aggregate::Sum => {
            let sum = target + value;
            if sum.is_nan() { 0.0 } else { sum }
        }
        Aggregate::Min => target.min(value),
        Aggregate::Max => target.max(value),
    }
}

fn weighted(score: f64, weight: f64) -> f64 {
    let product = score * weight;
    if product.is_nan() { 0.0 } else { product }
}

/// ZUNION, ZINTER, ZDIFF of `inputs`, in score order; an intersection stops at `limit`
/// members (0: none).
fn combine(
    view: &View,
    operation: SetOperation,
    inputs: &[Option<(KeyType, layout::Collection)>],
    weights: Option<&[f64]>,
    aggregate: Aggregate,
    limit: usize,
) -> Result<Vec<(Bytes, f64)>> {
    let weight =
        |index: usize| weights.and_then(|weights| weights.get(index).copied()).unwrap_or(1.0);
    let mut result: BTreeMap<Bytes, f64> = BTreeMap::new();
    match operation {
        SetOperation::Union => {
            for (index, input) in inputs.iter().enumerate() {
                let Some((kind, info)) = input else { continue };
                for (member, score) in scored(view, *kind, info.id)? {
                    let score = weighted(score, weight(index));
                    result
                        .entry(member)
                        .and_modify(|target| *target = aggregated(aggregate, *target, score))
                        .or_insert(score);
                }
            }
        }
        SetOperation::Inter => {
            if inputs.iter().any(Option::is_none) || inputs.is_empty() {
                return Ok(Vec::new());
            }
            let smallest = (0..inputs.len())
                .min_by_key(|&index| inputs[index].expect("all present").1.count)
                .expect("one input");
            let (kind, info) = inputs[smallest].expect("present");
            'members: for (member, score) in scored(view, kind, info.id)? {
                let mut total = weighted(score, weight(smallest));
                for (index, input) in inputs.iter().enumerate() {
                    if index == smallest {
                        continue;
                    }
                    let (kind, info) = input.expect("present");
                    match score_in(view, kind, info.id, &member)? {
                        Some(score) => {
                            total = aggregated(aggregate, total, weighted(score, weight(index)))
                        }
                        None => continue 'members,
                    }
                }
                // The smallest input's score first, as Redis aggregates in key order: redo the
                // sum in the keys' order so that float rounding matches.
                if smallest != 0 && aggregate == Aggregate::Sum {
                    let mut ordered_total = 0.0;
                    for (index, input) in inputs.iter().enumerate() {
                        let (kind, info) = input.expect("present");
                        let score =
                            score_in(view, kind, info.id, &member)?.expect("a member of each");
                        ordered_total = if index == 0 {
                            weighted(score, weight(0))
                        } else {
                            aggregated(aggregate, ordered_total, weighted(score, weight(index)))
                        };
                    }
                    total = ordered_total;
                }
                result.insert(member, total);
                if limit != 0 && result.len() >= limit {
                    break;
                }
            }
        }
        SetOperation::Diff => {
            let Some(Some((kind, info))) = inputs.first() else { return Ok(Vec::new()) };
            'members: for (member, score) in scored(view, *kind, info.id)? {
                for (kind, info) in inputs[1..].iter().flatten() {
                    if score_in(view, *kind, info.id, &member)?.is_some() {
                        continue 'members;
                    }
                }
                result.insert(member, score);
            }
        }
    }
    let mut members: Vec<(Bytes, f64)> = result.into_iter().collect();
    members.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    Ok(members)
}
