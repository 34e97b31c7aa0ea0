//! String commands: SET, GET, INCR, INCRBY, MSET, MGET.

use bytes::Bytes;

use super::table::CommandSpec;
use super::{Command, CommandError, is, parse_integer, upper};

/// What SET requires of the key before it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetCondition {
    /// No condition: always set.
    #[default]
    Always,
    /// `NX`: only if the key does not exist. The reply is `$-1` (null) when nothing was set.
    IfAbsent,
    /// `XX`: only if the key already exists. The reply is `$-1` (null) when nothing was set.
    IfPresent,
}

pub(super) fn parse(spec: &CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let mut args = args.into_iter();
    args.next();
    let mut next = || args.next().expect("arity checked");
    match spec.name {
        "get" => Ok(Command::Get { key: next() }),
        "incr" => Ok(Command::Incr { key: next() }),
        "incrby" => {
            let key = next();
            let increment = parse_integer(&next()).ok_or(CommandError::NotInteger)?;
            Ok(Command::IncrBy { key, increment })
        }
        "set" => {
            let key = next();
            let value = next();
            let condition = parse_set_options(args)?;
            Ok(Command::Set { key, value, condition })
        }
        "mget" => Ok(Command::MGet { keys: args.collect() }),
        "mset" => {
            if !args.len().is_multiple_of(2) {
                return Err(CommandError::WrongArity("mset"));
            }
            let mut pairs = Vec::with_capacity(args.len() / 2);
            while let (Some(key), Some(value)) = (args.next(), args.next()) {
                pairs.push((key, value));
            }
            Ok(Command::MSet { pairs })
        }
        other => unreachable!("{other} is not a string command"),
    }
}

/// NX and XX (not both; repeating one is allowed, as in Redis); KEEPTTL is accepted and means
/// nothing since keys never expire; the expiry options and GET are refused by name.
fn parse_set_options(options: impl Iterator<Item = Bytes>) -> Result<SetCondition, CommandError> {
    let mut condition = SetCondition::Always;
    for option in options {
        if is(&option, "NX") && condition != SetCondition::IfPresent {
            condition = SetCondition::IfAbsent;
        } else if is(&option, "XX") && condition != SetCondition::IfAbsent {
            condition = SetCondition::IfPresent;
        } else if is(&option, "KEEPTTL") {
            // Keys have no time to live to keep.
        } else if ["EX", "PX", "EXAT", "PXAT"].iter().any(|word| is(&option, word)) {
            return Err(CommandError::Unsupported {
                what: format!("SET option '{}'", upper(&option)),
                why: "keys never expire in redoguard",
            });
        } else if is(&option, "GET") {
            return Err(CommandError::Unsupported {
                what: "SET option 'GET'".into(),
                why: "send GET, then SET, inside MULTI/EXEC",
            });
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(condition)
}
