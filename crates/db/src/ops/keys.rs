//! Commands on keys whatever their type: DEL, EXISTS, TYPE, RENAME, COPY, RANDOMKEY,
//! FLUSHALL, TOUCH; and expiry: EXPIRE (NX, XX, GT, LT), TTL, EXPIRETIME, PERSIST.
//!
//! Deadlines are absolute milliseconds since the Unix epoch, decided here by the primary's
//! clock and carried in the redo as such: a standby and a failed-over primary keep them.

use std::ops::Bound;

use bytes::Bytes;
use keyspace::{ExpireCondition, Op, OpResult, Time, TimeUnit};

use super::{Context, error};
use crate::Result;
use crate::change::Change;
use crate::layout::{KeyRow, Namespace};
use crate::view::View;

/// How a deadline's amount is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeadlineCheck {
    /// SET, GETEX: the amount must be positive.
    Positive,
    /// EXPIRE: any amount (a past deadline deletes the key).
    Any,
}

/// The absolute deadline, in milliseconds, of a time a client gave, with Redis's overflow
/// checks and error text; it may lie in the past.
pub(crate) fn deadline(
    time: Time,
    now: u64,
    command: &str,
    check: DeadlineCheck,
) -> std::result::Result<i64, OpResult> {
    let invalid = || error(format!("ERR invalid expire time in '{command}' command"));
    if check == DeadlineCheck::Positive && time.amount <= 0 {
        return Err(invalid());
    }
    let milliseconds = match time.unit {
        TimeUnit::Seconds => time.amount.checked_mul(1000).ok_or_else(invalid)?,
        TimeUnit::Milliseconds => time.amount,
    };
    if time.absolute {
        return Ok(milliseconds);
    }
    milliseconds.checked_add(now as i64).ok_or_else(invalid)
}

pub(super) fn run(view: &mut View, op: &Op, cx: &mut Context) -> Result<Option<OpResult>> {
    let now = view.now_ms.unwrap_or(0);
    Ok(Some(match op {
        Op::Del { keys } => {
            let mut deleted = 0;
            for key in keys {
                if view.key(key)?.is_some() {
                    view.record(Change::Delete { key: key.clone() })?;
                    deleted += 1;
                }
            }
            OpResult::Integer(deleted)
        }
        Op::Exists { keys } | Op::Touch { keys } => {
            let mut count = 0;
            for key in keys {
                count += i64::from(view.key(key)?.is_some());
            }
            OpResult::Integer(count)
        }
        Op::Type { key } => OpResult::Status(view.key(key)?.map_or("none", |row| row.kind.name())),
        Op::Rename { from, to, if_absent } => {
            let Some(row) = view.key(from)? else { return Ok(Some(error("ERR no such key"))) };
            if from == to {
                return Ok(Some(if *if_absent { OpResult::Integer(0) } else { OpResult::Ok }));
            }
            if view.key(to)?.is_some() {
                if *if_absent {
                    return Ok(Some(OpResult::Integer(0)));
                }
                view.record(Change::Delete { key: to.clone() })?;
            }
            drop(row);
            view.record(Change::Rename { from: from.clone(), to: to.clone() })?;
            if *if_absent { OpResult::Integer(1) } else { OpResult::Ok }
        }
        Op::Copy { from, to, replace } => {
            let Some(row) = view.key(from)? else { return Ok(Some(OpResult::Integer(0))) };
            if from == to {
                return Ok(Some(error("ERR source and destination objects are the same")));
            }
            if let Some(info) = row.collection_info()
                && let Some(reply) = super::over_command_limit(cx, info.count)
            {
                return Ok(Some(reply));
            }
            if view.key(to)?.is_some() {
                if !*replace {
                    return Ok(Some(OpResult::Integer(0)));
                }
                view.record(Change::Delete { key: to.clone() })?;
            }
            let id = if row.collection_info().is_some() { view.new_id() } else { 0 };
            view.record(Change::Copy { from: from.clone(), to: to.clone(), id })?;
            OpResult::Integer(1)
        }
        Op::RandomKey => random_key(view, cx)?,
        Op::FlushAll => {
            view.record(Change::FlushAll)?;
            OpResult::Ok
        }
        Op::Expire { key, at, condition, command } => {
            let at = match deadline(*at, now, command, DeadlineCheck::Any) {
                Ok(at) => at,
                Err(reply) => return Ok(Some(reply)),
            };
            let Some(row) = view.key(key)? else { return Ok(Some(OpResult::Integer(0))) };
            let current = row.expires_at;
            let applies = match condition {
                ExpireCondition::Always => true,
                ExpireCondition::IfNone => current == 0,
                ExpireCondition::IfSome => current != 0,
                // No deadline counts as infinite.
                ExpireCondition::IfLater => current != 0 && at > current as i64,
                ExpireCondition::IfEarlier => current == 0 || at < current as i64,
                ExpireCondition::IfEarlierExisting => current != 0 && at < current as i64,
            };
            if !applies {
                return Ok(Some(OpResult::Integer(0)));
            }
            if at <= now as i64 {
                view.record(Change::Delete { key: key.clone() })?;
            } else {
                view.record(Change::Expire { key: key.clone(), at: at as u64 })?;
            }
            OpResult::Integer(1)
        }
        Op::Ttl { key, unit, absolute } => match view.key(key)? {
            None => OpResult::Integer(-2),
            Some(KeyRow { expires_at: 0, .. }) => OpResult::Integer(-1),
            Some(KeyRow { expires_at, .. }) => {
                let milliseconds = if *absolute {
                    expires_at as i64
                } else {
                    (expires_at as i64 - now as i64).max(0)
                };
                OpResult::Integer(match unit {
                    TimeUnit::Milliseconds => milliseconds,
                    // Rounded as Redis rounds TTL: to the nearest second.
                    TimeUnit::Seconds if *absolute => milliseconds / 1000,
                    TimeUnit::Seconds => (milliseconds + 500) / 1000,
                })
            }
        },
        Op::Sort { key, limit, descending, alpha, store } => {
            let Some(row) = view.key(key)? else {
                return Ok(Some(match store {
                    Some(destination) => {
                        OpResult::Integer(super::set::store_list(view, destination, Vec::new())?)
                    }
                    None => OpResult::Array(Vec::new()),
                }));
            };
            let Some(info) = row.collection_info() else {
                return Ok(Some(error(super::WRONGTYPE)));
            };
            if let Some(reply) = super::over_command_limit(cx, info.count) {
                return Ok(Some(reply));
            }
            let (lower, upper): (Bound<&[u8]>, Bound<&[u8]>) = match row.kind {
                keyspace::KeyType::ZSet => (
                    Bound::Included(&[crate::layout::ZSET_BY_MEMBER]),
                    Bound::Excluded(&[crate::layout::ZSET_BY_SCORE]),
                ),
                _ => (Bound::Unbounded, Bound::Unbounded),
            };
            let rows = super::elements(view, info.id, lower, upper, false, usize::MAX)?;
            let mut elements: Vec<Bytes> = rows
                .into_iter()
                .map(|(sub, value)| match row.kind {
                    keyspace::KeyType::List => value,
                    keyspace::KeyType::ZSet => sub.slice(1..),
                    _ => sub,
                })
                .collect();
            if *alpha {
                elements.sort();
            } else {
                let mut numbers = Vec::with_capacity(elements.len());
                for element in elements {
                    let Some(number) = keyspace::number::parse_double(&element) else {
                        return Ok(Some(error(
                            "ERR One or more scores can't be converted into double",
                        )));
                    };
                    numbers.push((number, element));
                }
                numbers.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
                elements = numbers.into_iter().map(|(_, element)| element).collect();
            }
            if *descending {
                elements.reverse();
            }
            if let Some((offset, count)) = limit {
                let offset = (*offset).max(0) as usize;
                let count = if *count < 0 { usize::MAX } else { *count as usize };
                elements = elements.into_iter().skip(offset).take(count).collect();
            }
            match store {
                Some(destination) => {
                    OpResult::Integer(super::set::store_list(view, destination, elements)?)
                }
                None => OpResult::Array(elements.into_iter().map(OpResult::Value).collect()),
            }
        }
        Op::MemoryUsage { key, samples } => match view.key(key)? {
            None => OpResult::Nil,
            Some(row) => {
                let mut bytes = (key.len() + row.encode().len()) as u64;
                if let Some(info) = row.collection_info() {
                    let sample = if *samples == 0 { usize::MAX } else { *samples as usize };
                    let (lower, upper) = crate::layout::id_range(info.id);
                    let rows = view.range(
                        Namespace::Elements,
                        Bound::Included(lower),
                        Bound::Excluded(upper),
                        false,
                        sample,
                    )?;
                    if !rows.is_empty() {
                        let sampled: u64 =
                            rows.iter().map(|(row, value)| (row.len() + value.len()) as u64).sum();
                        // A sorted set's member has two rows; the sample sees both kinds in turn.
                        bytes += sampled * info.count / rows.len() as u64
                            * if row.kind == keyspace::KeyType::ZSet { 2 } else { 1 };
                    }
                }
                OpResult::Integer(bytes as i64)
            }
        },
        Op::Persist { key } => match view.key(key)? {
            Some(row) if row.expires_at != 0 => {
                view.record(Change::Expire { key: key.clone(), at: 0 })?;
                OpResult::Integer(1)
            }
            _ => OpResult::Integer(0),
        },
        _ => return Ok(None),
    }))
}

/// A key at random: a random 8-byte point in the key space, the first live key at or after it
/// (wrapping round). Not uniform over keys of uneven spread, as Redis's is not either; a few
/// tries skip keys past their deadline.
fn random_key(view: &mut View, cx: &mut Context) -> Result<OpResult> {
    for _ in 0..16 {
        let point = Bytes::copy_from_slice(&cx.random.next().to_be_bytes());
        let mut found =
            view.range(Namespace::Keys, Bound::Included(point), Bound::Unbounded, false, 1)?;
        if found.is_empty() {
            found = view.range(Namespace::Keys, Bound::Unbounded, Bound::Unbounded, false, 1)?;
        }
        let Some((key, _)) = found.pop() else { return Ok(OpResult::Nil) };
        if view.key(&key)?.is_some() {
            return Ok(OpResult::Value(key));
        }
    }
    // Many keys past their deadline: the first live one in order.
    let mut after = Bound::Unbounded;
    loop {
        let keys = view.range(Namespace::Keys, after.clone(), Bound::Unbounded, false, 256)?;
        let Some((last, _)) = keys.last() else { return Ok(OpResult::Nil) };
        after = Bound::Excluded(last.clone());
        for (key, _) in keys {
            if view.key(&key)?.is_some() {
                return Ok(OpResult::Value(key));
            }
        }
    }
}
