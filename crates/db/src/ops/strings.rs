//! String commands: GET, SET (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL), SETNX, GETEX, GETDEL,
//! MGET, MSET, MSETNX, APPEND, STRLEN, GETRANGE, SETRANGE, INCRBY, INCRBYFLOAT, LCS, SETBIT,
//! GETBIT.

use bytes::Bytes;
use keyspace::number::{format_human, parse_double, parse_integer};
use keyspace::{GetExExpiry, KeyType, LcsOptions, Op, OpResult, SetCondition, SetExpiry};

use super::keys::{DeadlineCheck, deadline};
use super::{Context, NOT_A_FLOAT, NOT_AN_INTEGER, OVERFLOW, WRONGTYPE, error};
use crate::Result;
use crate::change::Change;
use crate::layout::{self, Body, KeyRow};
use crate::view::View;

/// Largest string SETRANGE and APPEND may make (Redis's `proto-max-bulk-len` default).
pub(crate) const STRING_BYTES_MAX: usize = 512 << 20;

/// The string at `key`: `Ok(None)` if there is none, `Err(reply)` if it holds another type.
fn string(
    view: &mut View,
    key: &Bytes,
) -> Result<std::result::Result<Option<(Bytes, u64)>, OpResult>> {
    Ok(match view.key(key)? {
        None => Ok(None),
        Some(KeyRow { body: Body::String(value), expires_at, .. }) => Ok(Some((value, expires_at))),
        Some(_) => Err(error(WRONGTYPE)),
    })
}

macro_rules! string_or_reply {
    ($view:expr, $key:expr) => {
        match string($view, $key)? {
            Ok(found) => found,
            Err(reply) => return Ok(Some(reply)),
        }
    };
}

fn set_string(view: &mut View, key: &Bytes, value: &[u8], expires_at: u64) -> Result<()> {
    view.record(Change::String {
        key: key.clone(),
        row: layout::encode_string_row(value, expires_at),
    })
}

pub(super) fn run(view: &mut View, op: &Op, _cx: &mut Context) -> Result<Option<OpResult>> {
    let now = view.now_ms.unwrap_or(0);
    Ok(Some(match op {
        Op::Get { key } => match string_or_reply!(view, key) {
            Some((value, _)) => OpResult::Value(value),
            None => OpResult::Nil,
        },
        Op::Set { key, value, condition, expiry, get, command } => {
            let at = match expiry {
                SetExpiry::At(time) => match deadline(*time, now, command, DeadlineCheck::Positive)
                {
                    Ok(at) => Some(at),
                    Err(reply) => return Ok(Some(reply)),
                },
                _ => None,
            };
            // A plain SET needs nothing of the key: it does not read it (`key_count`).
            let blind = *condition == SetCondition::Always && !*get && *expiry != SetExpiry::Keep;
            let old = if blind {
                None
            } else {
                match view.key(key)? {
                    Some(row) if *get && row.kind != KeyType::String => {
                        return Ok(Some(error(WRONGTYPE)));
                    }
                    old => Some(old),
                }
            };
            let exists = old.as_ref().map(Option::is_some);
            let applies = match condition {
                SetCondition::Always => true,
                SetCondition::IfAbsent => exists == Some(false),
                SetCondition::IfPresent => exists == Some(true),
            };
            let reply = if *get {
                match old.as_ref().and_then(Option::as_ref).map(|row| &row.body) {
                    Some(Body::String(value)) => OpResult::Value(value.clone()),
                    _ => OpResult::Nil,
                }
            } else if applies {
                OpResult::Ok
            } else {
                OpResult::Nil
            };
            if applies {
                match at {
                    // Already past: the key goes (as Redis deletes it at once).
                    Some(at) if at <= now as i64 => {
                        if exists != Some(false) && view.key(key)?.is_some() {
                            view.record(Change::Delete { key: key.clone() })?;
                        }
                    }
                    Some(at) => set_string(view, key, value, at as u64)?,
                    None => {
                        let keep = match (expiry, old.as_ref().and_then(Option::as_ref)) {
                            (SetExpiry::Keep, Some(row)) => row.expires_at,
                            _ => 0,
                        };
                        set_string(view, key, value, keep)?;
                    }
                }
            }
            reply
        }
        Op::SetNx { key, value } => {
            if view.key(key)?.is_some() {
                OpResult::Integer(0)
            } else {
                set_string(view, key, value, 0)?;
                OpResult::Integer(1)
            }
        }
        Op::GetEx { key, expiry } => {
            let Some((value, expires_at)) = string_or_reply!(view, key) else {
                return Ok(Some(OpResult::Nil));
            };
            match expiry {
                GetExExpiry::Unchanged => {}
                GetExExpiry::Persist => {
                    if expires_at != 0 {
                        view.record(Change::Expire { key: key.clone(), at: 0 })?;
                    }
                }
                GetExExpiry::At(time) => {
                    match deadline(*time, now, "getex", DeadlineCheck::Positive) {
                        Err(reply) => return Ok(Some(reply)),
                        Ok(at) if at <= now as i64 => {
                            view.record(Change::Delete { key: key.clone() })?
                        }
                        Ok(at) => {
                            view.record(Change::Expire { key: key.clone(), at: at as u64 })?
                        }
                    }
                }
            }
            OpResult::Value(value)
        }
        Op::GetDel { key } => match string_or_reply!(view, key) {
            Some((value, _)) => {
                view.record(Change::Delete { key: key.clone() })?;
                OpResult::Value(value)
            }
            None => OpResult::Nil,
        },
        Op::MGet { keys } => {
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                values.push(match view.key(key)? {
                    Some(KeyRow { body: Body::String(value), .. }) => Some(value),
                    _ => None,
                });
            }
            OpResult::Values(values)
        }
        Op::MSet { pairs } => {
            for (key, value) in pairs {
                set_string(view, key, value, 0)?;
            }
            OpResult::Ok
        }
        Op::MSetNx { pairs } => {
            for (key, _) in pairs {
                if view.key(key)?.is_some() {
                    return Ok(Some(OpResult::Integer(0)));
                }
            }
            for (key, value) in pairs {
                set_string(view, key, value, 0)?;
            }
            OpResult::Integer(1)
        }
        Op::Append { key, value } => {
            let old = string_or_reply!(view, key);
            let (old, expires_at) = old.unwrap_or_default();
            if old.len() + value.len() > STRING_BYTES_MAX {
                return Ok(Some(error(
                    "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
                )));
            }
            let mut new = Vec::with_capacity(old.len() + value.len());
            new.extend_from_slice(&old);
            new.extend_from_slice(value);
            set_string(view, key, &new, expires_at)?;
            OpResult::Integer(new.len() as i64)
        }
        Op::StrLen { key } => OpResult::Integer(
            string_or_reply!(view, key).map_or(0, |(value, _)| value.len() as i64),
        ),
        Op::GetRange { key, start, end } => {
            let value = string_or_reply!(view, key).map(|(value, _)| value).unwrap_or_default();
            OpResult::Value(get_range(&value, *start, *end))
        }
        Op::SetRange { key, offset, value } => {
            if *offset < 0 {
                return Ok(Some(error("ERR offset is out of range")));
            }
            let old = string_or_reply!(view, key);
            let offset = *offset as usize;
            if value.is_empty() {
                return Ok(Some(OpResult::Integer(old.map_or(0, |(old, _)| old.len() as i64))));
            }
            if offset.saturating_add(value.len()) > STRING_BYTES_MAX {
                return Ok(Some(error(
                    "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
                )));
            }
            let (old, expires_at) = old.unwrap_or_default();
            let mut new = old.to_vec();
            if new.len() < offset + value.len() {
                new.resize(offset + value.len(), 0);
            }
            new[offset..offset + value.len()].copy_from_slice(value);
            set_string(view, key, &new, expires_at)?;
            OpResult::Integer(new.len() as i64)
        }
        Op::IncrBy { key, increment } => {
            let old = string_or_reply!(view, key);
            let current = match &old {
                None => 0,
                Some((value, _)) => match parse_integer(value) {
                    Some(current) => current,
                    None => return Ok(Some(error(NOT_AN_INTEGER))),
                },
            };
            let Some(new) = current.checked_add(*increment) else {
                return Ok(Some(error(OVERFLOW)));
            };
            set_string(view, key, new.to_string().as_bytes(), old.map_or(0, |(_, at)| at))?;
            OpResult::Integer(new)
        }
        Op::IncrByFloat { key, increment } => {
            let old = string_or_reply!(view, key);
            let current = match &old {
                None => 0.0,
                Some((value, _)) => match parse_double(value) {
                    Some(current) => current,
                    None => return Ok(Some(error(NOT_A_FLOAT))),
                },
            };
            let new = current + increment;
            if !new.is_finite() {
                return Ok(Some(error("ERR increment would produce NaN or Infinity")));
            }
            let text = format_human(new);
            set_string(view, key, text.as_bytes(), old.map_or(0, |(_, at)| at))?;
            OpResult::Value(Bytes::from(text))
        }
        Op::GetBit { key, offset } => {
            let value = string_or_reply!(view, key).map(|(value, _)| value).unwrap_or_default();
            let byte = value.get((offset / 8) as usize).copied().unwrap_or(0);
            OpResult::Integer(i64::from(byte >> (7 - offset % 8) & 1))
        }
        Op::SetBit { key, offset, bit } => {
            let old = string_or_reply!(view, key);
            let (old, expires_at) = old.unwrap_or_default();
            let index = (offset / 8) as usize;
            let mut new = old.to_vec();
            if new.len() <= index {
                new.resize(index + 1, 0);
            }
            let mask = 1u8 << (7 - offset % 8);
            let was = new[index] & mask != 0;
            if *bit {
                new[index] |= mask;
            } else {
                new[index] &= !mask;
            }
            set_string(view, key, &new, expires_at)?;
            OpResult::Integer(i64::from(was))
        }
        Op::Lcs { first, second, options } => {
            let a = string_or_reply!(view, first).map(|(value, _)| value).unwrap_or_default();
            let b = string_or_reply!(view, second).map(|(value, _)| value).unwrap_or_default();
            lcs(&a, &b, options)
        }
        _ => return Ok(None),
    }))
}

/// GETRANGE's bytes `start..=end`, negative from the end, clamped.
fn get_range(value: &Bytes, start: i64, end: i64) -> Bytes {
    let len = value.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return Bytes::new();
    }
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { (len + end).max(0) } else { end.min(len - 1) };
    if start > end || start >= len {
        return Bytes::new();
    }
    value.slice(start as usize..=end as usize)
}

/// A run of common bytes: its range in `a`, its range in `b` (inclusive).
type Run = ((usize, usize), (usize, usize));

/// The longest common subsequence of `a` and `b`, as Redis's LCS answers it.
fn lcs(a: &[u8], b: &[u8], options: &LcsOptions) -> OpResult {
    // (|a| + 1) × (|b| + 1) lengths of 4 bytes: refused past 512 MiB, as Redis refuses.
    let cells = (a.len() as u128 + 1) * (b.len() as u128 + 1);
    if cells * 4 > STRING_BYTES_MAX as u128 {
        return error(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let width = b.len() + 1;
    let mut table = vec![0u32; (a.len() + 1) * width];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let length = table[a.len() * width + b.len()] as usize;
    // Walk back from the end, collecting the common bytes and the ranges they form.
    let mut common = vec![0u8; length];
    let mut index = length;
    let mut matches: Vec<(Run, usize)> = Vec::new();
    let mut current: Option<Run> = None;
    let (mut i, mut j) = (a.len(), b.len());
    let flush = |current: &mut Option<Run>, matches: &mut Vec<(Run, usize)>| {
        if let Some((range_a, range_b)) = current.take() {
            let len = range_a.1 - range_a.0 + 1;
            if len as i64 >= options.min_match_len {
                matches.push(((range_a, range_b), len));
            }
        }
    };
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            index -= 1;
            common[index] = a[i - 1];
            let (ai, bj) = (i - 1, j - 1);
            match &mut current {
                Some((range_a, range_b)) if range_a.0 == ai + 1 && range_b.0 == bj + 1 => {
                    range_a.0 = ai;
                    range_b.0 = bj;
                }
                _ => {
                    flush(&mut current, &mut matches);
                    current = Some(((ai, ai), (bj, bj)));
                }
            }
            i -= 1;
            j -= 1;
        } else if table[(i - 1) * width + j] > table[i * width + j - 1] {
            i -= 1;
        } else {
            j -= 1;
        }
    }
    flush(&mut current, &mut matches);
    if options.idx {
        let range = |(start, end): (usize, usize)| {
            OpResult::Array(vec![OpResult::Integer(start as i64), OpResult::Integer(end as i64)])
        };
        let entries = matches
            .into_iter()
            .map(|((range_a, range_b), len)| {
                let mut entry = vec![range(range_a), range(range_b)];
                if options.with_match_len {
                    entry.push(OpResult::Integer(len as i64));
                }
                OpResult::Array(entry)
            })
            .collect();
        return OpResult::Map(vec![
            (OpResult::Value(Bytes::from_static(b"matches")), OpResult::Array(entries)),
            (OpResult::Value(Bytes::from_static(b"len")), OpResult::Integer(length as i64)),
        ]);
    }
    if options.len {
        return OpResult::Integer(length as i64);
    }
    OpResult::Value(Bytes::from(common))
}
