//! String commands: GET, SET (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL), SETNX, SETEX, PSETEX,
//! GETSET, GETEX, GETDEL, MGET, MSET, MSETNX, APPEND, STRLEN, GETRANGE (SUBSTR), SETRANGE, INCR,
//! DECR, INCRBY, DECRBY, INCRBYFLOAT, LCS, SETBIT, GETBIT.

use bytes::Bytes;
pub use keyspace::SetCondition;
use keyspace::{GetExExpiry, LcsOptions, Op, SetExpiry, Time, TimeUnit};

use super::table::CommandSpec;
use super::{Command, CommandError, is, parse_float, parse_integer};

fn integer(arg: &[u8]) -> Result<i64, CommandError> {
    parse_integer(arg).ok_or(CommandError::NotInteger)
}

/// A time option's amount (`EX 10`): an integer, else Redis's error.
fn time(amount: &[u8], unit: TimeUnit, absolute: bool) -> Result<Time, CommandError> {
    Ok(Time { amount: integer(amount)?, unit, absolute })
}

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let name = spec.name;
    let mut args = args.into_iter();
    args.next();
    let mut next = || args.next().expect("arity checked");
    let op = match name {
        "get" => Op::Get { key: next() },
        "getdel" => Op::GetDel { key: next() },
        "strlen" => Op::StrLen { key: next() },
        "incr" => Op::IncrBy { key: next(), increment: 1 },
        "decr" => Op::IncrBy { key: next(), increment: -1 },
        "incrby" => {
            let key = next();
            Op::IncrBy { key, increment: integer(&next())? }
        }
        "decrby" => {
            let key = next();
            let decrement = integer(&next())?;
            let increment = decrement
                .checked_neg()
                .ok_or(CommandError::Text("ERR decrement would overflow".into()))?;
            Op::IncrBy { key, increment }
        }
        "incrbyfloat" => {
            let key = next();
            let increment = parse_float(&next()).ok_or(CommandError::NotFloat)?;
            Op::IncrByFloat { key, increment }
        }
        "append" => {
            let key = next();
            Op::Append { key, value: next() }
        }
        "getrange" | "substr" => {
            let key = next();
            let start = integer(&next())?;
            let end = integer(&next())?;
            Op::GetRange { key, start, end }
        }
        "setrange" => {
            let key = next();
            let offset = integer(&next())?;
            Op::SetRange { key, offset, value: next() }
        }
        "setnx" => {
            let key = next();
            Op::SetNx { key, value: next() }
        }
        "getset" => {
            let key = next();
            let value = next();
            Op::Set {
                key,
                value,
                condition: SetCondition::Always,
                expiry: SetExpiry::Clear,
                get: true,
                command: "getset",
            }
        }
        "setex" | "psetex" => {
            let key = next();
            let unit = if name == "setex" { TimeUnit::Seconds } else { TimeUnit::Milliseconds };
            let time = time(&next(), unit, false)?;
            let value = next();
            let command = if name == "setex" { "setex" } else { "psetex" };
            Op::Set {
                key,
                value,
                condition: SetCondition::Always,
                expiry: SetExpiry::At(time),
                get: false,
                command,
            }
        }
        "set" => {
            let key = next();
            let value = next();
            let rest: Vec<Bytes> = args.collect();
            parse_set(key, value, &rest)?
        }
        "getex" => {
            let key = next();
            let rest: Vec<Bytes> = args.collect();
            Op::GetEx { key, expiry: parse_getex(&rest)? }
        }
        "mget" => Op::MGet { keys: args.collect() },
        "mset" | "msetnx" => {
            if !args.len().is_multiple_of(2) {
                return Err(CommandError::WrongArity(if name == "mset" {
                    "mset"
                } else {
                    "msetnx"
                }));
            }
            let mut pairs = Vec::with_capacity(args.len() / 2);
            while let (Some(key), Some(value)) = (args.next(), args.next()) {
                pairs.push((key, value));
            }
            if name == "mset" { Op::MSet { pairs } } else { Op::MSetNx { pairs } }
        }
        "setbit" | "getbit" => {
            let key = next();
            let offset = parse_integer(&next())
                .filter(|offset| (0..1i64 << 32).contains(offset))
                .ok_or_else(|| {
                    CommandError::Text("ERR bit offset is not an integer or out of range".into())
                })? as u64;
            if name == "getbit" {
                Op::GetBit { key, offset }
            } else {
                let bit = match next().as_ref() {
                    b"0" => false,
                    b"1" => true,
                    _ => {
                        return Err(CommandError::Text(
                            "ERR bit is not an integer or out of range".into(),
                        ));
                    }
                };
                Op::SetBit { key, offset, bit }
            }
        }
        "lcs" => {
            let first = next();
            let second = next();
            let rest: Vec<Bytes> = args.collect();
            Op::Lcs { first, second, options: parse_lcs(&rest)? }
        }
        other => unreachable!("{other} is not a string command"),
    };
    Ok(Command::data(op))
}

/// SET's options, in any order: NX or XX, GET, and one of EX, PX, EXAT, PXAT, KEEPTTL.
fn parse_set(key: Bytes, value: Bytes, options: &[Bytes]) -> Result<Op, CommandError> {
    let mut condition = SetCondition::Always;
    let mut expiry = SetExpiry::Clear;
    let mut get = false;
    let mut at = 0;
    while at < options.len() {
        let option = &options[at];
        let has_next = at + 1 < options.len();
        let timed = [
            ("EX", TimeUnit::Seconds, false),
            ("PX", TimeUnit::Milliseconds, false),
            ("EXAT", TimeUnit::Seconds, true),
            ("PXAT", TimeUnit::Milliseconds, true),
        ]
        .into_iter()
        .find(|(word, _, _)| is(option, word));
        if is(option, "NX") && condition != SetCondition::IfPresent {
            condition = SetCondition::IfAbsent;
        } else if is(option, "XX") && condition != SetCondition::IfAbsent {
            condition = SetCondition::IfPresent;
        } else if is(option, "GET") {
            get = true;
        } else if is(option, "KEEPTTL") && matches!(expiry, SetExpiry::Clear | SetExpiry::Keep) {
            expiry = SetExpiry::Keep;
        } else if let Some((_, unit, absolute)) = timed
            && expiry == SetExpiry::Clear
            && has_next
        {
            at += 1;
            expiry = SetExpiry::At(time(&options[at], unit, absolute)?);
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    Ok(Op::Set { key, value, condition, expiry, get, command: "set" })
}

/// GETEX's one option: EX, PX, EXAT, PXAT or PERSIST.
fn parse_getex(options: &[Bytes]) -> Result<GetExExpiry, CommandError> {
    match options {
        [] => Ok(GetExExpiry::Unchanged),
        [persist] if is(persist, "PERSIST") => Ok(GetExExpiry::Persist),
        [option, amount] => {
            let (unit, absolute) = if is(option, "EX") {
                (TimeUnit::Seconds, false)
            } else if is(option, "PX") {
                (TimeUnit::Milliseconds, false)
            } else if is(option, "EXAT") {
                (TimeUnit::Seconds, true)
            } else if is(option, "PXAT") {
                (TimeUnit::Milliseconds, true)
            } else {
                return Err(CommandError::Syntax);
            };
            Ok(GetExExpiry::At(time(amount, unit, absolute)?))
        }
        _ => Err(CommandError::Syntax),
    }
}

fn parse_lcs(options: &[Bytes]) -> Result<LcsOptions, CommandError> {
    let mut lcs = LcsOptions::default();
    let mut at = 0;
    while at < options.len() {
        let option = &options[at];
        if is(option, "LEN") {
            lcs.len = true;
        } else if is(option, "IDX") {
            lcs.idx = true;
        } else if is(option, "WITHMATCHLEN") {
            lcs.with_match_len = true;
        } else if is(option, "MINMATCHLEN") && at + 1 < options.len() {
            at += 1;
            lcs.min_match_len = integer(&options[at])?.max(0);
        } else {
            return Err(CommandError::Syntax);
        }
        at += 1;
    }
    if lcs.len && lcs.idx {
        return Err(CommandError::Text(
            "ERR If you want both the length and indexes, please just use IDX.".into(),
        ));
    }
    Ok(lcs)
}
