//! Set commands: SADD, SREM, SCARD, SISMEMBER, SMISMEMBER, SMEMBERS, SRANDMEMBER, SPOP, SMOVE,
//! SUNION, SINTER, SDIFF, SUNIONSTORE, SINTERSTORE, SDIFFSTORE, SINTERCARD, SSCAN.

use bytes::Bytes;
use keyspace::{KeyType, Op, SetOperation};

use super::hash::count_argument;
use super::list::positive_count;
use super::table::CommandSpec;
use super::{Command, CommandError, is, parse_collection_scan, parse_integer};

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let name = spec.name;
    let args = &args[1..];
    let op = match name {
        "sadd" => Op::SAdd { key: args[0].clone(), members: args[1..].to_vec() },
        "srem" => Op::SRem { key: args[0].clone(), members: args[1..].to_vec() },
        "scard" => Op::SCard { key: args[0].clone() },
        "sismember" => Op::SIsMember { key: args[0].clone(), member: args[1].clone() },
        "smismember" => Op::SMIsMember { key: args[0].clone(), members: args[1..].to_vec() },
        "smembers" => Op::SMembers { key: args[0].clone() },
        "srandmember" => match args {
            [key] => Op::SRandMember { key: key.clone(), count: None },
            [key, count] => {
                Op::SRandMember { key: key.clone(), count: Some(count_argument(count)?) }
            }
            _ => return Err(CommandError::Syntax),
        },
        "spop" => match args {
            [key] => Op::SPop { key: key.clone(), count: None },
            [key, count] => Op::SPop { key: key.clone(), count: Some(positive_count(count)?) },
            _ => return Err(CommandError::Syntax),
        },
        "smove" => {
            Op::SMove { from: args[0].clone(), to: args[1].clone(), member: args[2].clone() }
        }
        "sunion" | "sinter" | "sdiff" => {
            Op::SCombine { operation: operation(name), keys: args.to_vec(), store: None }
        }
        "sunionstore" | "sinterstore" | "sdiffstore" => Op::SCombine {
            operation: operation(name),
            keys: args[1..].to_vec(),
            store: Some(args[0].clone()),
        },
        "sintercard" => {
            let count = match parse_integer(&args[0]) {
                Some(count) if count > 0 => count as usize,
                _ => return Err(CommandError::Text("ERR numkeys should be greater than 0".into())),
            };
            if count > args.len() - 1 {
                return Err(CommandError::Text(
                    "ERR Number of keys can't be greater than number of args".into(),
                ));
            }
            let keys = args[1..=count].to_vec();
            let limit = parse_limit(&args[count + 1..])?;
            Op::SInterCard { keys, limit }
        }
        "sscan" => {
            return parse_collection_scan(args[0].clone(), KeyType::Set, args[1..].iter().cloned());
        }
        other => unreachable!("{other} is not a set command"),
    };
    Ok(Command::data(op))
}

fn operation(name: &str) -> SetOperation {
    match &name[1..4] {
        "uni" => SetOperation::Union,
        "int" => SetOperation::Inter,
        _ => SetOperation::Diff,
    }
}

/// SINTERCARD's and ZINTERCARD's `[LIMIT limit]`.
pub(super) fn parse_limit(options: &[Bytes]) -> Result<i64, CommandError> {
    match options {
        [] => Ok(0),
        [word, limit] if is(word, "LIMIT") => match parse_integer(limit) {
            Some(limit) if limit >= 0 => Ok(limit),
            _ => Err(CommandError::Text("ERR LIMIT can't be negative".into())),
        },
        _ => Err(CommandError::Syntax),
    }
}
