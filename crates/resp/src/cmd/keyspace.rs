//! Keyspace commands: DEL, EXISTS, DBSIZE, KEYS, SCAN, SELECT.

use bytes::Bytes;

use super::table::CommandSpec;
use super::{Command, CommandError, is, parse_integer};

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let mut args = args.into_iter();
    args.next();
    match spec.name {
        "del" => Ok(Command::Del { keys: args.collect() }),
        "exists" => Ok(Command::Exists { keys: args.collect() }),
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

/// `SCAN cursor [MATCH pattern] [COUNT count]`; options in any order, the last one given wins.
fn parse_scan(mut args: impl ExactSizeIterator<Item = Bytes>) -> Result<Command, CommandError> {
    let cursor = args.next().expect("arity checked");
    // Redis reads the cursor as an unsigned 64-bit number; digits only here.
    let cursor = std::str::from_utf8(&cursor)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
        .and_then(|text| text.parse::<u64>().ok())
        .ok_or(CommandError::InvalidCursor)?;
    let mut pattern = None;
    let mut count = None;
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
            return Err(CommandError::Unsupported {
                what: "SCAN option 'TYPE'".into(),
                why: "every redoguard key is a string",
            });
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(Command::Scan { cursor, pattern, count })
}
