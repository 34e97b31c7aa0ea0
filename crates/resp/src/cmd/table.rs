//! The command table: name, arity, flags and key positions of every command we accept, as
//! Redis's `COMMAND INFO` describes them. It drives arity checks and the COMMAND replies.

use bytes::Bytes;

use crate::frame::Frame;

/// One command (or subcommand) as `COMMAND INFO` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    /// Lower case; subcommands are `container|sub` (`client|setname`).
    pub name: &'static str,
    /// Redis's convention: `n` means exactly n arguments (name included), `-n` at least n.
    pub arity: i64,
    pub flags: &'static [&'static str],
    /// Position of the first key argument (0: none), of the last (-1: the last argument), and
    /// the step between keys.
    pub first_key: i64,
    pub last_key: i64,
    pub step: i64,
    pub subcommands: &'static [CommandSpec],
}

impl CommandSpec {
    /// Whether `count` arguments (name included) satisfy the arity.
    pub fn accepts(&self, count: usize) -> bool {
        let count = count as i64;
        if self.arity >= 0 { count == self.arity } else { count >= -self.arity }
    }

    /// The `COMMAND INFO` entry: name, arity, flags, first key, last key, step, ACL categories,
    /// tips, key specifications, subcommands.
    pub fn to_frame(&self) -> Frame {
        Frame::Array(vec![
            Frame::Bulk(Bytes::from_static(self.name.as_bytes())),
            Frame::Integer(self.arity),
            Frame::Set(self.flags.iter().map(|flag| Frame::simple(flag)).collect()),
            Frame::Integer(self.first_key),
            Frame::Integer(self.last_key),
            Frame::Integer(self.step),
            Frame::Set(Vec::new()),
            Frame::Array(Vec::new()),
            Frame::Array(Vec::new()),
            Frame::Array(self.subcommands.iter().map(CommandSpec::to_frame).collect()),
        ])
    }
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        subcommands: &[],
    }
}

const NO_KEYS: (i64, i64, i64) = (0, 0, 0);
const ONE_KEY: (i64, i64, i64) = (1, 1, 1);
const ALL_KEYS: (i64, i64, i64) = (1, -1, 1);
const CONNECTION: &[&str] = &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"];

const CLIENT_SUBCOMMANDS: &[CommandSpec] = &[
    spec("client|getname", 2, &["noscript", "loading", "stale"], NO_KEYS),
    spec("client|help", 2, &["loading", "stale"], NO_KEYS),
    spec("client|id", 2, &["noscript", "loading", "stale"], NO_KEYS),
    spec("client|setinfo", 4, &["noscript", "loading", "stale"], NO_KEYS),
    spec("client|setname", 3, &["noscript", "loading", "stale"], NO_KEYS),
];

const COMMAND_SUBCOMMANDS: &[CommandSpec] = &[
    spec("command|count", 2, &["loading", "stale"], NO_KEYS),
    spec("command|docs", -2, &["loading", "stale"], NO_KEYS),
    spec("command|help", 2, &["loading", "stale"], NO_KEYS),
    spec("command|info", -2, &["loading", "stale"], NO_KEYS),
    spec("command|list", -2, &["loading", "stale"], NO_KEYS),
];

const CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    spec("config|get", -3, &["admin", "noscript", "loading", "stale"], NO_KEYS),
    spec("config|help", 2, &["loading", "stale"], NO_KEYS),
];

/// Every command we accept, in alphabetical order.
pub const COMMANDS: &[CommandSpec] = &[
    spec("auth", -2, CONNECTION, NO_KEYS),
    CommandSpec { subcommands: CLIENT_SUBCOMMANDS, ..spec("client", -2, &[], NO_KEYS) },
    CommandSpec {
        subcommands: COMMAND_SUBCOMMANDS,
        ..spec("command", -1, &["loading", "stale"], NO_KEYS)
    },
    spec("commitmode", -1, &["fast", "loading", "stale"], NO_KEYS),
    CommandSpec { subcommands: CONFIG_SUBCOMMANDS, ..spec("config", -2, &[], NO_KEYS) },
    spec("dbsize", 1, &["readonly", "fast"], NO_KEYS),
    spec("del", -2, &["write"], ALL_KEYS),
    spec("discard", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO_KEYS),
    spec("echo", 2, &["fast"], NO_KEYS),
    spec("exec", 1, &["noscript", "loading", "stale", "skip_slowlog"], NO_KEYS),
    spec("exists", -2, &["readonly", "fast"], ALL_KEYS),
    spec("get", 2, &["readonly", "fast"], ONE_KEY),
    spec("hello", -1, CONNECTION, NO_KEYS),
    spec("incr", 2, &["write", "denyoom", "fast"], ONE_KEY),
    spec("incrby", 3, &["write", "denyoom", "fast"], ONE_KEY),
    spec("info", -1, &["loading", "stale"], NO_KEYS),
    spec("keys", 2, &["readonly"], NO_KEYS),
    spec("mget", -2, &["readonly", "fast"], ALL_KEYS),
    spec("mset", -3, &["write", "denyoom"], (1, -1, 2)),
    spec("multi", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO_KEYS),
    spec("ping", -1, &["fast"], NO_KEYS),
    spec("quit", -1, CONNECTION, NO_KEYS),
    spec("role", 1, &["noscript", "loading", "stale", "fast"], NO_KEYS),
    spec("scan", -2, &["readonly"], NO_KEYS),
    spec("select", 2, &["loading", "stale", "fast"], NO_KEYS),
    spec("set", -3, &["write", "denyoom"], ONE_KEY),
    spec(
        "shutdown",
        -1,
        &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"],
        NO_KEYS,
    ),
];

/// Finds a command by name, in any case.
pub fn find(name: &[u8]) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|spec| name.eq_ignore_ascii_case(spec.name.as_bytes()))
}

/// Finds a subcommand of `container` by its own name (`setname`), in any case.
pub fn find_subcommand(container: &CommandSpec, name: &[u8]) -> Option<&'static CommandSpec> {
    container.subcommands.iter().find(|spec| {
        let own = &spec.name[container.name.len() + 1..];
        name.eq_ignore_ascii_case(own.as_bytes())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_unique_and_its_subcommands_are_named_after_it() {
        for pair in COMMANDS.windows(2) {
            assert!(pair[0].name < pair[1].name, "{} before {}", pair[0].name, pair[1].name);
        }
        for spec in COMMANDS {
            for sub in spec.subcommands {
                assert!(sub.name.starts_with(&format!("{}|", spec.name)));
                assert_eq!(
                    find_subcommand(spec, sub.name.split('|').nth(1).unwrap().as_bytes()),
                    Some(sub)
                );
            }
        }
    }

    #[test]
    fn arity_follows_redis_convention() {
        let get = find(b"GET").unwrap();
        assert!(get.accepts(2) && !get.accepts(1) && !get.accepts(3));
        let del = find(b"dEl").unwrap();
        assert!(!del.accepts(1) && del.accepts(2) && del.accepts(100));
        assert!(find(b"nosuch").is_none());
    }

    #[test]
    fn command_info_entries_have_the_ten_redis_fields() {
        let Frame::Array(fields) = find(b"mset").unwrap().to_frame() else { panic!() };
        assert_eq!(fields.len(), 10);
        assert_eq!(fields[0], Frame::bulk("mset"));
        assert_eq!(fields[1], Frame::Integer(-3));
        assert_eq!(fields[5], Frame::Integer(2));
    }
}
