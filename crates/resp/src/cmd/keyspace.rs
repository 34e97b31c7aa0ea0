//! Keyspace commands: DEL, UNLINK, EXISTS, TOUCH, TYPE, RENAME, RENAMENX, COPY, RANDOMKEY,
//! FLUSHDB, FLUSHALL, DBSIZE, KEYS, SCAN, SELECT; and expiry: EXPIRE, PEXPIRE, EXPIREAT,
//! PEXPIREAT (NX, XX, GT, LT), TTL, PTTL, EXPIRETIME, PEXPIRETIME, PERSIST; SORT (without BY
//! and GET).

use bytes::Bytes;
use keyspace::{ExpireCondition, Op, Time, TimeUnit};

use super::table::CommandSpec;
use super::{Command, CommandError, is, parse_integer};

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let name = spec.name;
    let mut args = args.into_iter();
    args.next();
    let data = |op| Ok(Command::data(op));
    match name {
        "del" | "unlink" => data(Op::Del { keys: args.collect() }),
        "exists" => data(Op::Exists { keys: args.collect() }),
        "touch" => data(Op::Touch { keys: args.collect() }),
        "type" => data(Op::Type { key: args.next().expect("arity checked") }),
        "randomkey" => data(Op::RandomKey),
        "rename" | "renamenx" => {
            let from = args.next().expect("arity checked");
            let to = args.next().expect("arity checked");
            data(Op::Rename { from, to, if_absent: name == "renamenx" })
        }
        "copy" => {
            let from = args.next().expect("arity checked");
            let to = args.next().expect("arity checked");
            let mut replace = false;
            while let Some(option) = args.next() {
                if is(&option, "REPLACE") {
                    replace = true;
                } else if is(&option, "DB") {
                    let Some(index) = args.next() else { return Err(CommandError::Syntax) };
                    match parse_integer(&index) {
                        None => return Err(CommandError::NotInteger),
                        Some(0) => {}
                        Some(_) => return Err(CommandError::DbIndexOutOfRange),
                    }
                } else {
                    return Err(CommandError::Syntax);
                }
            }
            data(Op::Copy { from, to, replace })
        }
        "flushall" | "flushdb" => {
            match args.len() {
                0 => {}
                1 => {
                    let mode = args.next().expect("one");
                    if !is(&mode, "ASYNC") && !is(&mode, "SYNC") {
                        return Err(CommandError::Syntax);
                    }
                }
                _ => return Err(CommandError::Syntax),
            }
            data(Op::FlushAll)
        }
        "expire" | "pexpire" | "expireat" | "pexpireat" => {
            let key = args.next().expect("arity checked");
            let amount = parse_integer(&args.next().expect("arity checked"))
                .ok_or(CommandError::NotInteger)?;
            let unit =
                if name.starts_with('p') { TimeUnit::Milliseconds } else { TimeUnit::Seconds };
            let command = match name {
                "expire" => "expire",
                "pexpire" => "pexpire",
                "expireat" => "expireat",
                _ => "pexpireat",
            };
            let condition = parse_expire_condition(args)?;
            data(Op::Expire {
                key,
                at: Time { amount, unit, absolute: name.ends_with("at") },
                condition,
                command,
            })
        }
        "ttl" | "pttl" | "expiretime" | "pexpiretime" => {
            let key = args.next().expect("arity checked");
            let unit =
                if name.starts_with('p') { TimeUnit::Milliseconds } else { TimeUnit::Seconds };
            data(Op::Ttl { key, unit, absolute: name.ends_with("time") })
        }
        "persist" => data(Op::Persist { key: args.next().expect("arity checked") }),
        "sort" | "sort_ro" => {
            let key = args.next().expect("arity checked");
            let options: Vec<Bytes> = args.collect();
            let (mut limit, mut descending, mut alpha, mut store) = (None, false, false, None);
            let mut at = 0;
            while at < options.len() {
                let option = &options[at];
                let left = options.len() - at - 1;
                if is(option, "ASC") {
                    descending = false;
                } else if is(option, "DESC") {
                    descending = true;
                } else if is(option, "ALPHA") {
                    alpha = true;
                } else if is(option, "LIMIT") && left >= 2 {
                    let offset = parse_integer(&options[at + 1]).ok_or(CommandError::NotInteger)?;
                    let count = parse_integer(&options[at + 2]).ok_or(CommandError::NotInteger)?;
                    limit = Some((offset, count));
                    at += 2;
                } else if is(option, "STORE") && left >= 1 && name == "sort" {
                    store = Some(options[at + 1].clone());
                    at += 1;
                } else if (is(option, "BY") || is(option, "GET")) && left >= 1 {
                    return Err(CommandError::Unsupported {
                        what: format!("SORT option '{}'", super::upper(option)),
                        why: "sort the elements themselves, and read other keys with MGET or HMGET",
                    });
                } else {
                    return Err(CommandError::Syntax);
                }
                at += 1;
            }
            data(Op::Sort { key, limit, descending, alpha, store })
        }
        "dbsize" => Ok(Command::DbSize),
        "keys" => Ok(Command::Keys { pattern: args.next().expect("arity checked") }),
        "select" => {
            let index = args.next().expect("arity checked");
            match parse_integer(&index) {
                None => Err(CommandError::InvalidDbIndex),
                Some(0) => Ok(Command::Select),
                Some(_) => Err(CommandError::DbIndexOutOfRange),
            }
        }
        "scan" => parse_scan(args),
        other => unreachable!("{other} is not a keyspace command"),
    }
}

/// EXPIRE's NX, XX, GT, LT (repeating one is allowed; NX with another is not, nor GT with LT).
fn parse_expire_condition(
    options: impl Iterator<Item = Bytes>,
) -> Result<ExpireCondition, CommandError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in options {
        if is(&option, "NX") {
            nx = true;
        } else if is(&option, "XX") {
            xx = true;
        } else if is(&option, "GT") {
            gt = true;
        } else if is(&option, "LT") {
            lt = true;
        } else {
            return Err(CommandError::Text(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(&option)
            )));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CommandError::Text(
            "ERR NX and XX, GT or LT options at the same time are not compatible".into(),
        ));
    }
    if gt && lt {
        return Err(CommandError::Text(
            "ERR GT and LT options at the same time are not compatible".into(),
        ));
    }
    // XX with GT or LT is GT or LT (which already need a deadline, or infinite for LT).
    Ok(if nx {
        ExpireCondition::IfNone
    } else if gt {
        ExpireCondition::IfLater
    } else if lt && xx {
        ExpireCondition::IfEarlierExisting
    } else if lt {
        ExpireCondition::IfEarlier
    } else if xx {
        ExpireCondition::IfSome
    } else {
        ExpireCondition::Always
    })
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`; options in any order, the last one
/// given wins.
fn parse_scan(mut args: impl ExactSizeIterator<Item = Bytes>) -> Result<Command, CommandError> {
    let cursor = args.next().expect("arity checked");
    let cursor = parse_cursor(&cursor)?;
    let mut pattern = None;
    let mut count = None;
    let mut kind = None;
    while let Some(option) = args.next() {
        let Some(value) = args.next() else { return Err(CommandError::Syntax) };
        if is(&option, "MATCH") {
            pattern = Some(value);
        } else if is(&option, "COUNT") {
            let value = parse_integer(&value).ok_or(CommandError::NotInteger)?;
            if value < 1 {
                return Err(CommandError::Syntax);
            }
            count = Some(value as u64);
        } else if is(&option, "TYPE") {
            kind = Some(value);
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(Command::Scan { cursor, pattern, count, kind })
}

/// A SCAN cursor: Redis reads it as an unsigned 64-bit number; digits only here.
pub(super) fn parse_cursor(cursor: &[u8]) -> Result<u64, CommandError> {
    std::str::from_utf8(cursor)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
        .and_then(|text| text.parse::<u64>().ok())
        .ok_or(CommandError::InvalidCursor)
}
