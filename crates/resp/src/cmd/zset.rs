//! Sorted-set commands: ZADD, ZINCRBY, ZREM, ZCARD, ZSCORE, ZMSCORE, ZRANK, ZREVRANK, ZCOUNT,
//! ZLEXCOUNT, ZRANGE (BYSCORE, BYLEX, REV, LIMIT, WITHSCORES), ZRANGESTORE, ZREVRANGE,
//! ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZREMRANGEBYRANK, BYSCORE,
//! BYLEX, ZPOPMIN, ZPOPMAX, ZMPOP, BZPOPMIN, BZPOPMAX, BZMPOP, ZRANDMEMBER, ZUNION, ZINTER,
//! ZDIFF, their …STORE forms, ZINTERCARD, ZSCAN.

use bytes::Bytes;
use keyspace::{
    Aggregate, KeyType, LexBound, Op, ScoreBound, SetCondition, SetOperation, ZAddOptions, ZRange,
    ZRangeBy,
};

use super::hash::{count_argument, paired_count};
use super::list::{positive_count, timeout};
use super::set::parse_limit;
use super::table::CommandSpec;
use super::{
    BlockedReply, Command, CommandError, is, parse_collection_scan, parse_float, parse_integer,
};

fn text(message: &str) -> CommandError {
    CommandError::Text(message.to_string())
}

fn integer(arg: &[u8]) -> Result<i64, CommandError> {
    parse_integer(arg).ok_or(CommandError::NotInteger)
}

/// `1`, `(1`, `-inf`, `+inf`.
fn score_bound(arg: &[u8]) -> Result<ScoreBound, CommandError> {
    let (exclusive, number) = match arg {
        [b'(', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    let value = parse_float(number).ok_or_else(|| text("ERR min or max is not a float"))?;
    Ok(ScoreBound { value, exclusive })
}

/// `-`, `+`, `[a`, `(a`.
fn lex_bound(arg: &Bytes) -> Result<LexBound, CommandError> {
    match arg.as_ref() {
        b"-" => Ok(LexBound::Min),
        b"+" => Ok(LexBound::Max),
        [b'[', ..] => Ok(LexBound::Inclusive(arg.slice(1..))),
        [b'(', ..] => Ok(LexBound::Exclusive(arg.slice(1..))),
        _ => Err(text("ERR min or max not valid string range item")),
    }
}

/// The selection of a ZRANGE: by rank, score or member; bounds given lowest first unless
/// `reverse` (then the first is the highest).
fn range_by(
    kind: &str,
    first: &Bytes,
    second: &Bytes,
    reverse: bool,
) -> Result<ZRangeBy, CommandError> {
    let (low, high) = if reverse { (second, first) } else { (first, second) };
    Ok(match kind {
        "score" => ZRangeBy::Score { min: score_bound(low)?, max: score_bound(high)? },
        "lex" => ZRangeBy::Lex { min: lex_bound(low)?, max: lex_bound(high)? },
        _ => ZRangeBy::Rank { start: integer(first)?, stop: integer(second)? },
    })
}

/// ZRANGE's options after `start stop`: BYSCORE, BYLEX, REV, LIMIT, WITHSCORES.
fn parse_zrange(
    first: &Bytes,
    second: &Bytes,
    options: &[Bytes],
    store: bool,
) -> Result<ZRange, CommandError> {
    let (mut kind, mut reverse, mut limit, mut with_scores) = ("rank", false, None, false);
    let mut at = 0;
    while at < options.len() {
        let option = &options[at];
        if is(option, "BYSCORE") {
            kind = "score";
        } else if is(option, "BYLEX") {
            kind = "lex";
        } else if is(option, "REV") {
            reverse = true;
        } else if is(option, "WITHSCORES") && !store {
            with_scores = true;
        } else if is(option, "LIMIT") && at + 2 < options.len() {
            limit = Some((integer(&options[at + 1])?, integer(&options[at + 2])?));
            at += 2;
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    if limit.is_some() && kind == "rank" {
        return Err(text(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && kind == "lex" {
        return Err(text("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    Ok(ZRange { by: range_by(kind, first, second, reverse)?, reverse, limit, with_scores })
}

/// ZRANGEBYSCORE's and friends' `[WITHSCORES] [LIMIT offset count]`.
fn parse_legacy(
    kind: &str,
    first: &Bytes,
    second: &Bytes,
    options: &[Bytes],
    reverse: bool,
) -> Result<ZRange, CommandError> {
    let (mut limit, mut with_scores) = (None, false);
    let mut at = 0;
    while at < options.len() {
        let option = &options[at];
        if is(option, "WITHSCORES") && kind != "lex" {
            with_scores = true;
        } else if is(option, "LIMIT") && at + 2 < options.len() && kind != "rank" {
            limit = Some((integer(&options[at + 1])?, integer(&options[at + 2])?));
            at += 2;
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    Ok(ZRange { by: range_by(kind, first, second, reverse)?, reverse, limit, with_scores })
}

fn parse_zadd(key: Bytes, args: &[Bytes]) -> Result<Op, CommandError> {
    let mut options = ZAddOptions::default();
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    let mut at = 0;
    while at < args.len() {
        let option = &args[at];
        if is(option, "NX") {
            nx = true;
        } else if is(option, "XX") {
            xx = true;
        } else if is(option, "GT") {
            gt = true;
        } else if is(option, "LT") {
            lt = true;
        } else if is(option, "CH") {
            options.changed = true;
        } else if is(option, "INCR") {
            options.increment = true;
        } else {
            break;
        }
        at += 1;
    }
    let pairs = &args[at..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(CommandError::Syntax);
    }
    if nx && xx {
        return Err(text("ERR XX and NX options at the same time are not compatible"));
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Err(text("ERR GT, LT, and/or NX options at the same time are not compatible"));
    }
    if options.increment && pairs.len() > 2 {
        return Err(text("ERR INCR option supports a single increment-element pair"));
    }
    options.condition = if nx {
        SetCondition::IfAbsent
    } else if xx {
        SetCondition::IfPresent
    } else {
        SetCondition::Always
    };
    options.greater = if gt {
        Some(true)
    } else if lt {
        Some(false)
    } else {
        None
    };
    let mut scored = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        let score = parse_float(&pair[0]).ok_or(CommandError::NotFloat)?;
        scored.push((score, pair[1].clone()));
    }
    Ok(Op::ZAdd { key, options, pairs: scored })
}

/// `numkeys key … [WEIGHTS w …] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]`.
fn parse_combine(
    name: &'static str,
    operation: SetOperation,
    args: &[Bytes],
    store: Option<Bytes>,
) -> Result<Op, CommandError> {
    let count = integer(&args[0])?;
    if count < 1 {
        return Err(CommandError::Text(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    let count = count as usize;
    if count > args.len() - 1 {
        return Err(CommandError::Syntax);
    }
    let keys = args[1..=count].to_vec();
    let options = &args[count + 1..];
    let (mut weights, mut aggregate, mut with_scores) = (None, Aggregate::Sum, false);
    let mut at = 0;
    while at < options.len() {
        let option = &options[at];
        let left = options.len() - at - 1;
        if is(option, "WEIGHTS") && operation != SetOperation::Diff && left >= count {
            let mut parsed = Vec::with_capacity(count);
            for weight in &options[at + 1..=at + count] {
                parsed.push(
                    parse_float(weight).ok_or_else(|| text("ERR weight value is not a float"))?,
                );
            }
            weights = Some(parsed);
            at += count;
        } else if is(option, "AGGREGATE") && operation != SetOperation::Diff && left >= 1 {
            let value = &options[at + 1];
            aggregate = if is(value, "SUM") {
                Aggregate::Sum
            } else if is(value, "MIN") {
                Aggregate::Min
            } else if is(value, "MAX") {
                Aggregate::Max
            } else {
                return Err(CommandError::Syntax);
            };
            at += 1;
        } else if is(option, "WITHSCORES") && store.is_none() {
            with_scores = true;
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    Ok(Op::ZCombine { operation, keys, weights, aggregate, with_scores, store })
}

/// ZMPOP's and BZMPOP's `numkeys key … MIN|MAX [COUNT count]`.
fn parse_mpop(args: &[Bytes]) -> Result<Op, CommandError> {
    let (keys, rest) = super::list::numkeys(args)?;
    let Some((side, options)) = rest.split_first() else { return Err(CommandError::Syntax) };
    let max = if is(side, "MIN") {
        false
    } else if is(side, "MAX") {
        true
    } else {
        return Err(CommandError::Syntax);
    };
    let count = match options {
        [] => 1,
        [word, count] if is(word, "COUNT") => match parse_integer(count) {
            Some(count) if count > 0 => count,
            _ => return Err(text("ERR count should be greater than 0")),
        },
        _ => return Err(CommandError::Syntax),
    };
    Ok(Op::ZMPop { keys, max, count })
}

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let name = spec.name;
    let args = &args[1..];
    let key = || args[0].clone();
    let op = match name {
        "zadd" => parse_zadd(key(), &args[1..])?,
        "zincrby" => {
            let increment = parse_float(&args[1]).ok_or(CommandError::NotFloat)?;
            Op::ZIncrBy { key: key(), increment, member: args[2].clone() }
        }
        "zrem" => Op::ZRem { key: key(), members: args[1..].to_vec() },
        "zcard" => Op::ZCard { key: key() },
        "zscore" => Op::ZScore { key: key(), member: args[1].clone() },
        "zmscore" => Op::ZMScore { key: key(), members: args[1..].to_vec() },
        "zrank" | "zrevrank" => {
            Op::ZRank { key: key(), member: args[1].clone(), reverse: name == "zrevrank" }
        }
        "zcount" => {
            Op::ZCount { key: key(), min: score_bound(&args[1])?, max: score_bound(&args[2])? }
        }
        "zlexcount" => {
            Op::ZLexCount { key: key(), min: lex_bound(&args[1])?, max: lex_bound(&args[2])? }
        }
        "zrange" => Op::ZRange {
            key: key(),
            range: parse_zrange(&args[1], &args[2], &args[3..], false)?,
            store: None,
        },
        "zrangestore" => Op::ZRange {
            key: args[1].clone(),
            range: parse_zrange(&args[2], &args[3], &args[4..], true)?,
            store: Some(args[0].clone()),
        },
        "zrevrange" => Op::ZRange {
            key: key(),
            range: parse_legacy("rank", &args[1], &args[2], &args[3..], true)?,
            store: None,
        },
        "zrangebyscore" | "zrevrangebyscore" => Op::ZRange {
            key: key(),
            range: parse_legacy("score", &args[1], &args[2], &args[3..], name.starts_with("zrev"))?,
            store: None,
        },
        "zrangebylex" | "zrevrangebylex" => Op::ZRange {
            key: key(),
            range: parse_legacy("lex", &args[1], &args[2], &args[3..], name.starts_with("zrev"))?,
            store: None,
        },
        "zremrangebyrank" => {
            Op::ZRemRange { key: key(), by: range_by("rank", &args[1], &args[2], false)? }
        }
        "zremrangebyscore" => {
            Op::ZRemRange { key: key(), by: range_by("score", &args[1], &args[2], false)? }
        }
        "zremrangebylex" => {
            Op::ZRemRange { key: key(), by: range_by("lex", &args[1], &args[2], false)? }
        }
        "zpopmin" | "zpopmax" => {
            let count = match args {
                [_] => None,
                [_, count] => Some(positive_count(count)?),
                _ => return Err(CommandError::Syntax),
            };
            Op::ZPop { key: key(), max: name == "zpopmax", count }
        }
        "zmpop" => parse_mpop(args)?,
        "bzpopmin" | "bzpopmax" => {
            let (keys, last) = args.split_at(args.len() - 1);
            return Ok(Command::Block {
                name: "",
                op: Op::ZMPop { keys: keys.to_vec(), max: name == "bzpopmax", count: 1 },
                timeout: timeout(&last[0])?,
                reply: BlockedReply::KeyMemberScore,
            });
        }
        "bzmpop" => {
            let timeout = timeout(&args[0])?;
            return Ok(Command::Block {
                name: "",
                op: parse_mpop(&args[1..])?,
                timeout,
                reply: BlockedReply::AsIs,
            });
        }
        "zrandmember" => match args {
            [key] => Op::ZRandMember { key: key.clone(), count: None, with_scores: false },
            [key, count] => Op::ZRandMember {
                key: key.clone(),
                count: Some(count_argument(count)?),
                with_scores: false,
            },
            [key, count, option] if is(option, "WITHSCORES") => Op::ZRandMember {
                key: key.clone(),
                count: Some(paired_count(count)?),
                with_scores: true,
            },
            _ => return Err(CommandError::Syntax),
        },
        "zunion" => parse_combine("zunion", SetOperation::Union, args, None)?,
        "zinter" => parse_combine("zinter", SetOperation::Inter, args, None)?,
        "zdiff" => parse_combine("zdiff", SetOperation::Diff, args, None)?,
        "zunionstore" => {
            parse_combine("zunionstore", SetOperation::Union, &args[1..], Some(key()))?
        }
        "zinterstore" => {
            parse_combine("zinterstore", SetOperation::Inter, &args[1..], Some(key()))?
        }
        "zdiffstore" => parse_combine("zdiffstore", SetOperation::Diff, &args[1..], Some(key()))?,
        "zintercard" => {
            let count = match parse_integer(&args[0]) {
                Some(count) if count > 0 => count as usize,
                Some(_) => {
                    return Err(text(
                        "ERR at least 1 input key is needed for 'zintercard' command",
                    ));
                }
                None => return Err(CommandError::NotInteger),
            };
            if count > args.len() - 1 {
                return Err(text("ERR Number of keys can't be greater than number of args"));
            }
            Op::ZInterCard {
                keys: args[1..=count].to_vec(),
                limit: parse_limit(&args[count + 1..])?,
            }
        }
        "zscan" => {
            return parse_collection_scan(key(), KeyType::ZSet, args[1..].iter().cloned());
        }
        other => unreachable!("{other} is not a sorted-set command"),
    };
    Ok(Command::data(op))
}
