//! Hash commands: HSET, HMSET, HSETNX, HGET, HMGET, HDEL, HLEN, HSTRLEN, HEXISTS, HKEYS, HVALS,
//! HGETALL, HINCRBY, HINCRBYFLOAT, HRANDFIELD, HSCAN.

use bytes::Bytes;
use keyspace::{KeyType, Op};

use super::table::CommandSpec;
use super::{Command, CommandError, parse_collection_scan, parse_float, parse_integer};

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let name = spec.name;
    let mut args = args.into_iter();
    args.next();
    let key = args.next().expect("arity checked");
    let op = match name {
        "hset" | "hmset" => {
            if !args.len().is_multiple_of(2) {
                return Err(CommandError::WrongArity(if name == "hset" {
                    "hset"
                } else {
                    "hmset"
                }));
            }
            let mut pairs = Vec::with_capacity(args.len() / 2);
            while let (Some(field), Some(value)) = (args.next(), args.next()) {
                pairs.push((field, value));
            }
            Op::HSet { key, pairs, reply_ok: name == "hmset" }
        }
        "hsetnx" => {
            let field = args.next().expect("arity checked");
            Op::HSetNx { key, field, value: args.next().expect("arity checked") }
        }
        "hget" => Op::HGet { key, field: args.next().expect("arity checked") },
        "hmget" => Op::HMGet { key, fields: args.collect() },
        "hdel" => Op::HDel { key, fields: args.collect() },
        "hlen" => Op::HLen { key },
        "hstrlen" => Op::HStrLen { key, field: args.next().expect("arity checked") },
        "hexists" => Op::HExists { key, field: args.next().expect("arity checked") },
        "hkeys" => Op::HGetAll { key, keys: true, values: false },
        "hvals" => Op::HGetAll { key, keys: false, values: true },
        "hgetall" => Op::HGetAll { key, keys: true, values: true },
        "hincrby" => {
            let field = args.next().expect("arity checked");
            let increment = parse_integer(&args.next().expect("arity checked"))
                .ok_or(CommandError::NotInteger)?;
            Op::HIncrBy { key, field, increment }
        }
        "hincrbyfloat" => {
            let field = args.next().expect("arity checked");
            let increment =
                parse_float(&args.next().expect("arity checked")).ok_or(CommandError::NotFloat)?;
            Op::HIncrByFloat { key, field, increment }
        }
        "hrandfield" => {
            let rest: Vec<Bytes> = args.collect();
            match rest.as_slice() {
                [] => Op::HRandField { key, count: None, with_values: false },
                [count] => {
                    Op::HRandField { key, count: Some(count_argument(count)?), with_values: false }
                }
                [count, option] if super::is(option, "WITHVALUES") => {
                    Op::HRandField { key, count: Some(paired_count(count)?), with_values: true }
                }
                _ => return Err(CommandError::Syntax),
            }
        }
        "hscan" => return parse_collection_scan(key, KeyType::Hash, args),
        other => unreachable!("{other} is not a hash command"),
    };
    Ok(Command::data(op))
}

/// HRANDFIELD, SRANDMEMBER, ZRANDMEMBER's count: any integer whose magnitude fits.
pub(super) fn count_argument(count: &[u8]) -> Result<i64, CommandError> {
    let count = parse_integer(count).ok_or(CommandError::NotInteger)?;
    if count == i64::MIN {
        return Err(CommandError::Text("ERR value is out of range".into()));
    }
    Ok(count)
}

/// A count of pairs to reply (WITHVALUES, WITHSCORES): twice as many elements must fit.
pub(super) fn paired_count(count: &[u8]) -> Result<i64, CommandError> {
    let count = count_argument(count)?;
    if count.unsigned_abs() > (i64::MAX / 2) as u64 {
        return Err(CommandError::Text("ERR value is out of range".into()));
    }
    Ok(count)
}
