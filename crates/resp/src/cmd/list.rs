//! List commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LINDEX, LSET, LRANGE, LTRIM,
//! LINSERT, LREM, LPOS, LMOVE, RPOPLPUSH, LMPOP, and the blocking BLPOP, BRPOP, BLMOVE,
//! BRPOPLPUSH, BLMPOP.

use std::time::Duration;

use bytes::Bytes;
use keyspace::{End, Op};

use super::table::CommandSpec;
use super::{BlockedReply, Command, CommandError, is, parse_integer};

fn integer(arg: &[u8]) -> Result<i64, CommandError> {
    parse_integer(arg).ok_or(CommandError::NotInteger)
}

fn end(arg: &[u8]) -> Result<End, CommandError> {
    if is(arg, "LEFT") {
        Ok(End::Left)
    } else if is(arg, "RIGHT") {
        Ok(End::Right)
    } else {
        Err(CommandError::Syntax)
    }
}

/// A pop's COUNT argument: a positive integer.
pub(super) fn positive_count(arg: &[u8]) -> Result<i64, CommandError> {
    match parse_integer(arg) {
        Some(count) if count >= 0 => Ok(count),
        _ => Err(CommandError::Text("ERR value is out of range, must be positive".into())),
    }
}

/// A blocking command's timeout in seconds (a float): how long to wait, zero for ever.
pub(super) fn timeout(arg: &[u8]) -> Result<Duration, CommandError> {
    let seconds = super::parse_float(arg)
        .filter(|seconds| seconds.is_finite())
        .ok_or_else(|| CommandError::Text("ERR timeout is not a float or out of range".into()))?;
    if seconds < 0.0 {
        return Err(CommandError::Text("ERR timeout is negative".into()));
    }
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| CommandError::Text("ERR timeout is out of range".into()))
}

/// `numkeys key … ` then the rest: the keys, and the arguments after them.
pub(super) fn numkeys(args: &[Bytes]) -> Result<(Vec<Bytes>, &[Bytes]), CommandError> {
    let count = match parse_integer(&args[0]) {
        Some(count) if count > 0 => count as usize,
        _ => return Err(CommandError::Text("ERR numkeys should be greater than 0".into())),
    };
    if count >= args.len() {
        return Err(CommandError::Syntax);
    }
    Ok((args[1..=count].to_vec(), &args[count + 1..]))
}

/// LMPOP's and BLMPOP's `numkeys key … LEFT|RIGHT [COUNT count]`.
fn parse_mpop(args: &[Bytes]) -> Result<Op, CommandError> {
    let (keys, rest) = numkeys(args)?;
    let Some((side, options)) = rest.split_first() else { return Err(CommandError::Syntax) };
    let end = end(side)?;
    let count = match options {
        [] => 1,
        [word, count] if is(word, "COUNT") => match parse_integer(count) {
            Some(count) if count > 0 => count,
            _ => return Err(CommandError::Text("ERR count should be greater than 0".into())),
        },
        _ => return Err(CommandError::Syntax),
    };
    Ok(Op::LMPop { keys, end, count })
}

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let name = spec.name;
    let args = &args[1..];
    let op = match name {
        "lpush" | "rpush" | "lpushx" | "rpushx" => Op::Push {
            key: args[0].clone(),
            end: if name.starts_with('l') { End::Left } else { End::Right },
            values: args[1..].to_vec(),
            only_if_exists: name.ends_with('x'),
        },
        "lpop" | "rpop" => {
            let end = if name == "lpop" { End::Left } else { End::Right };
            let count = match args {
                [_] => None,
                [_, count] => Some(positive_count(count)?),
                _ => {
                    return Err(CommandError::WrongArity(if name == "lpop" {
                        "lpop"
                    } else {
                        "rpop"
                    }));
                }
            };
            Op::Pop { key: args[0].clone(), end, count }
        }
        "llen" => Op::LLen { key: args[0].clone() },
        "lindex" => Op::LIndex { key: args[0].clone(), index: integer(&args[1])? },
        "lset" => {
            Op::LSet { key: args[0].clone(), index: integer(&args[1])?, value: args[2].clone() }
        }
        "lrange" => {
            Op::LRange { key: args[0].clone(), start: integer(&args[1])?, stop: integer(&args[2])? }
        }
        "ltrim" => {
            Op::LTrim { key: args[0].clone(), start: integer(&args[1])?, stop: integer(&args[2])? }
        }
        "linsert" => {
            let before = if is(&args[1], "BEFORE") {
                true
            } else if is(&args[1], "AFTER") {
                false
            } else {
                return Err(CommandError::Syntax);
            };
            Op::LInsert {
                key: args[0].clone(),
                before,
                pivot: args[2].clone(),
                value: args[3].clone(),
            }
        }
        "lrem" => {
            Op::LRem { key: args[0].clone(), count: integer(&args[1])?, value: args[2].clone() }
        }
        "lpos" => {
            let (mut rank, mut count, mut max_len) = (1i64, None, 0i64);
            let mut at = 2;
            while at < args.len() {
                let option = &args[at];
                let Some(value) = args.get(at + 1) else { return Err(CommandError::Syntax) };
                if is(option, "RANK") {
                    rank = integer(value)?;
                    if rank == 0 {
                        return Err(CommandError::Text("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list".into()));
                    }
                    if rank == i64::MIN {
                        return Err(CommandError::Text("ERR value is out of range".into()));
                    }
                } else if is(option, "COUNT") {
                    let value = integer(value)?;
                    if value < 0 {
                        return Err(CommandError::Text("ERR COUNT can't be negative".into()));
                    }
                    count = Some(value);
                } else if is(option, "MAXLEN") {
                    max_len = integer(value)?;
                    if max_len < 0 {
                        return Err(CommandError::Text("ERR MAXLEN can't be negative".into()));
                    }
                } else {
                    return Err(CommandError::Syntax);
                }
                at += 2;
            }
            Op::LPos { key: args[0].clone(), value: args[1].clone(), rank, count, max_len }
        }
        "lmove" => Op::LMove {
            from: args[0].clone(),
            to: args[1].clone(),
            from_end: end(&args[2])?,
            to_end: end(&args[3])?,
        },
        "rpoplpush" => Op::LMove {
            from: args[0].clone(),
            to: args[1].clone(),
            from_end: End::Right,
            to_end: End::Left,
        },
        "lmpop" => parse_mpop(args)?,
        "blpop" | "brpop" => {
            let (keys, last) = args.split_at(args.len() - 1);
            let end = if name == "blpop" { End::Left } else { End::Right };
            return Ok(Command::Block {
                name: "",
                op: Op::LMPop { keys: keys.to_vec(), end, count: 1 },
                timeout: timeout(&last[0])?,
                reply: BlockedReply::KeyAndElement,
            });
        }
        "blmove" => {
            let op = Op::LMove {
                from: args[0].clone(),
                to: args[1].clone(),
                from_end: end(&args[2])?,
                to_end: end(&args[3])?,
            };
            return Ok(Command::Block {
                name: "",
                op,
                timeout: timeout(&args[4])?,
                reply: BlockedReply::AsIs,
            });
        }
        "brpoplpush" => {
            let op = Op::LMove {
                from: args[0].clone(),
                to: args[1].clone(),
                from_end: End::Right,
                to_end: End::Left,
            };
            return Ok(Command::Block {
                name: "",
                op,
                timeout: timeout(&args[2])?,
                reply: BlockedReply::AsIs,
            });
        }
        "blmpop" => {
            let timeout = timeout(&args[0])?;
            return Ok(Command::Block {
                name: "",
                op: parse_mpop(&args[1..])?,
                timeout,
                reply: BlockedReply::AsIs,
            });
        }
        other => unreachable!("{other} is not a list command"),
    };
    Ok(Command::data(op))
}
