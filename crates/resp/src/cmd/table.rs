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
    spec("config|set", -4, &["admin", "noscript", "loading", "stale"], NO_KEYS),
];

const MEMORY_SUBCOMMANDS: &[CommandSpec] = &[spec("memory|usage", -3, &["readonly"], (2, 2, 1))];

const FUNCTION_SUBCOMMANDS: &[CommandSpec] =
    &[spec("function|flush", -2, &["write", "noscript"], NO_KEYS)];

/// Every command we accept, in alphabetical order.
pub const COMMANDS: &[CommandSpec] = &[
    spec("append", 3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("auth", -2, CONNECTION, NO_KEYS),
    spec("blmove", 6, &["write", "denyoom", "noscript", "blocking"], (1, 2, 1)),
    spec("blmpop", -5, &["write", "blocking", "movablekeys"], (0, 0, 0)),
    spec("blpop", -3, &["write", "noscript", "blocking"], (1, -2, 1)),
    spec("brpop", -3, &["write", "noscript", "blocking"], (1, -2, 1)),
    spec("brpoplpush", 4, &["write", "denyoom", "noscript", "blocking"], (1, 2, 1)),
    spec("bzmpop", -5, &["write", "blocking", "movablekeys"], (0, 0, 0)),
    spec("bzpopmax", -3, &["write", "noscript", "blocking", "fast"], (1, -2, 1)),
    spec("bzpopmin", -3, &["write", "noscript", "blocking", "fast"], (1, -2, 1)),
    CommandSpec { subcommands: CLIENT_SUBCOMMANDS, ..spec("client", -2, &[], NO_KEYS) },
    CommandSpec {
        subcommands: COMMAND_SUBCOMMANDS,
        ..spec("command", -1, &["loading", "stale"], NO_KEYS)
    },
    spec("commitmode", -1, &["fast", "loading", "stale"], NO_KEYS),
    CommandSpec { subcommands: CONFIG_SUBCOMMANDS, ..spec("config", -2, &[], NO_KEYS) },
    spec("copy", -3, &["write", "denyoom"], (1, 2, 1)),
    spec("dbsize", 1, &["readonly", "fast"], NO_KEYS),
    spec("decr", 2, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("decrby", 3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("del", -2, &["write"], ALL_KEYS),
    spec("discard", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO_KEYS),
    spec("echo", 2, &["fast"], NO_KEYS),
    spec("exec", 1, &["noscript", "loading", "stale", "skip_slowlog"], NO_KEYS),
    spec("exists", -2, &["readonly", "fast"], ALL_KEYS),
    spec("expire", -3, &["write", "fast"], (1, 1, 1)),
    spec("expireat", -3, &["write", "fast"], (1, 1, 1)),
    spec("expiretime", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("flushall", -1, &["write"], (0, 0, 0)),
    spec("flushdb", -1, &["write"], (0, 0, 0)),
    CommandSpec { subcommands: FUNCTION_SUBCOMMANDS, ..spec("function", -2, &[], NO_KEYS) },
    spec("get", 2, &["readonly", "fast"], ONE_KEY),
    spec("getbit", 3, &["readonly", "fast"], ONE_KEY),
    spec("getdel", 2, &["write", "fast"], (1, 1, 1)),
    spec("getex", -2, &["write", "fast"], (1, 1, 1)),
    spec("getrange", 4, &["readonly"], (1, 1, 1)),
    spec("getset", 3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("hdel", -3, &["write", "fast"], (1, 1, 1)),
    spec("hello", -1, CONNECTION, NO_KEYS),
    spec("hexists", 3, &["readonly", "fast"], (1, 1, 1)),
    spec("hget", 3, &["readonly", "fast"], (1, 1, 1)),
    spec("hgetall", 2, &["readonly"], (1, 1, 1)),
    spec("hincrby", 4, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("hincrbyfloat", 4, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("hkeys", 2, &["readonly"], (1, 1, 1)),
    spec("hlen", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("hmget", -3, &["readonly", "fast"], (1, 1, 1)),
    spec("hmset", -4, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("hrandfield", -2, &["readonly"], (1, 1, 1)),
    spec("hscan", -3, &["readonly"], (1, 1, 1)),
    spec("hset", -4, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("hsetnx", 4, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("hstrlen", 3, &["readonly", "fast"], (1, 1, 1)),
    spec("hvals", 2, &["readonly"], (1, 1, 1)),
    spec("incr", 2, &["write", "denyoom", "fast"], ONE_KEY),
    spec("incrby", 3, &["write", "denyoom", "fast"], ONE_KEY),
    spec("incrbyfloat", 3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("info", -1, &["loading", "stale"], NO_KEYS),
    spec("keys", 2, &["readonly"], NO_KEYS),
    spec("lcs", -3, &["readonly"], (1, 2, 1)),
    spec("lindex", 3, &["readonly"], (1, 1, 1)),
    spec("linsert", 5, &["write", "denyoom"], (1, 1, 1)),
    spec("llen", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("lmove", 5, &["write", "denyoom"], (1, 2, 1)),
    spec("lmpop", -4, &["write", "movablekeys"], (0, 0, 0)),
    spec("lpop", -2, &["write", "fast"], (1, 1, 1)),
    spec("lpos", -3, &["readonly"], (1, 1, 1)),
    spec("lpush", -3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("lpushx", -3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("lrange", 4, &["readonly"], (1, 1, 1)),
    spec("lrem", 4, &["write"], (1, 1, 1)),
    spec("lset", 4, &["write", "denyoom"], (1, 1, 1)),
    spec("ltrim", 4, &["write"], (1, 1, 1)),
    CommandSpec { subcommands: MEMORY_SUBCOMMANDS, ..spec("memory", -2, &[], NO_KEYS) },
    spec("mget", -2, &["readonly", "fast"], ALL_KEYS),
    spec("mset", -3, &["write", "denyoom"], (1, -1, 2)),
    spec("msetnx", -3, &["write", "denyoom"], (1, -1, 2)),
    spec("multi", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], NO_KEYS),
    spec("persist", 2, &["write", "fast"], (1, 1, 1)),
    spec("pexpire", -3, &["write", "fast"], (1, 1, 1)),
    spec("pexpireat", -3, &["write", "fast"], (1, 1, 1)),
    spec("pexpiretime", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("ping", -1, &["fast"], NO_KEYS),
    spec("psetex", 4, &["write", "denyoom"], (1, 1, 1)),
    spec("pttl", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("quit", -1, CONNECTION, NO_KEYS),
    spec("randomkey", 1, &["readonly"], (0, 0, 0)),
    spec("rename", 3, &["write"], (1, 2, 1)),
    spec("renamenx", 3, &["write", "fast"], (1, 2, 1)),
    spec("role", 1, &["noscript", "loading", "stale", "fast"], NO_KEYS),
    spec("rpop", -2, &["write", "fast"], (1, 1, 1)),
    spec("rpoplpush", 3, &["write", "denyoom"], (1, 2, 1)),
    spec("rpush", -3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("rpushx", -3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("sadd", -3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("save", 1, &["admin", "noscript", "no_multi"], NO_KEYS),
    spec("scan", -2, &["readonly"], NO_KEYS),
    spec("scard", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("sdiff", -2, &["readonly"], (1, -1, 1)),
    spec("sdiffstore", -3, &["write", "denyoom"], (1, -1, 1)),
    spec("select", 2, &["loading", "stale", "fast"], NO_KEYS),
    spec("set", -3, &["write", "denyoom"], ONE_KEY),
    spec("setbit", 4, &["write", "denyoom"], ONE_KEY),
    spec("setex", 4, &["write", "denyoom"], (1, 1, 1)),
    spec("setnx", 3, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("setrange", 4, &["write", "denyoom"], (1, 1, 1)),
    spec(
        "shutdown",
        -1,
        &["admin", "noscript", "loading", "stale", "no_multi", "allow_busy"],
        NO_KEYS,
    ),
    spec("sinter", -2, &["readonly"], (1, -1, 1)),
    spec("sintercard", -3, &["readonly", "movablekeys"], (0, 0, 0)),
    spec("sinterstore", -3, &["write", "denyoom"], (1, -1, 1)),
    spec("sismember", 3, &["readonly", "fast"], (1, 1, 1)),
    spec("smembers", 2, &["readonly"], (1, 1, 1)),
    spec("smismember", -3, &["readonly", "fast"], (1, 1, 1)),
    spec("smove", 4, &["write", "fast"], (1, 2, 1)),
    spec("sort", -2, &["write", "denyoom", "movablekeys"], ONE_KEY),
    spec("sort_ro", -2, &["readonly", "movablekeys"], ONE_KEY),
    spec("spop", -2, &["write", "fast"], (1, 1, 1)),
    spec("srandmember", -2, &["readonly"], (1, 1, 1)),
    spec("srem", -3, &["write", "fast"], (1, 1, 1)),
    spec("sscan", -3, &["readonly"], (1, 1, 1)),
    spec("strlen", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("substr", 4, &["readonly"], (1, 1, 1)),
    spec("sunion", -2, &["readonly"], (1, -1, 1)),
    spec("sunionstore", -3, &["write", "denyoom"], (1, -1, 1)),
    spec("time", 1, &["loading", "stale", "fast"], NO_KEYS),
    spec("touch", -2, &["readonly", "fast"], (1, -1, 1)),
    spec("ttl", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("type", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("unlink", -2, &["write", "fast"], (1, -1, 1)),
    spec("unwatch", 1, &["noscript", "loading", "stale", "fast", "allow_busy"], (0, 0, 0)),
    spec("watch", -2, &["noscript", "loading", "stale", "fast", "allow_busy"], (1, -1, 1)),
    spec("zadd", -4, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("zcard", 2, &["readonly", "fast"], (1, 1, 1)),
    spec("zcount", 4, &["readonly", "fast"], (1, 1, 1)),
    spec("zdiff", -3, &["readonly", "movablekeys"], (0, 0, 0)),
    spec("zdiffstore", -4, &["write", "denyoom", "movablekeys"], (1, 1, 1)),
    spec("zincrby", 4, &["write", "denyoom", "fast"], (1, 1, 1)),
    spec("zinter", -3, &["readonly", "movablekeys"], (0, 0, 0)),
    spec("zintercard", -3, &["readonly", "movablekeys"], (0, 0, 0)),
    spec("zinterstore", -4, &["write", "denyoom", "movablekeys"], (1, 1, 1)),
    spec("zlexcount", 4, &["readonly", "fast"], (1, 1, 1)),
    spec("zmpop", -4, &["write", "movablekeys"], (0, 0, 0)),
    spec("zmscore", -3, &["readonly", "fast"], (1, 1, 1)),
    spec("zpopmax", -2, &["write", "fast"], (1, 1, 1)),
    spec("zpopmin", -2, &["write", "fast"], (1, 1, 1)),
    spec("zrandmember", -2, &["readonly"], (1, 1, 1)),
    spec("zrange", -4, &["readonly"], (1, 1, 1)),
    spec("zrangebylex", -4, &["readonly"], (1, 1, 1)),
    spec("zrangebyscore", -4, &["readonly"], (1, 1, 1)),
    spec("zrangestore", -5, &["write", "denyoom"], (1, 2, 1)),
    spec("zrank", 3, &["readonly", "fast"], (1, 1, 1)),
    spec("zrem", -3, &["write", "fast"], (1, 1, 1)),
    spec("zremrangebylex", 4, &["write"], (1, 1, 1)),
    spec("zremrangebyrank", 4, &["write"], (1, 1, 1)),
    spec("zremrangebyscore", 4, &["write"], (1, 1, 1)),
    spec("zrevrange", -4, &["readonly"], (1, 1, 1)),
    spec("zrevrangebylex", -4, &["readonly"], (1, 1, 1)),
    spec("zrevrangebyscore", -4, &["readonly"], (1, 1, 1)),
    spec("zrevrank", 3, &["readonly", "fast"], (1, 1, 1)),
    spec("zscan", -3, &["readonly"], (1, 1, 1)),
    spec("zscore", 3, &["readonly", "fast"], (1, 1, 1)),
    spec("zunion", -3, &["readonly", "movablekeys"], (0, 0, 0)),
    spec("zunionstore", -4, &["write", "denyoom", "movablekeys"], (1, 1, 1)),
];

/// Which parser a command belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Connection,
    Strings,
    Keyspace,
    Hash,
    List,
    Set,
    ZSet,
    Server,
    Transaction,
}

/// The group of a command in the table.
pub fn group(name: &str) -> Group {
    const STRINGS: &[&str] = &[
        "append",
        "decr",
        "decrby",
        "get",
        "getdel",
        "getex",
        "getrange",
        "getset",
        "incr",
        "incrby",
        "incrbyfloat",
        "lcs",
        "mget",
        "mset",
        "msetnx",
        "psetex",
        "set",
        "setex",
        "setnx",
        "setrange",
        "strlen",
        "substr",
        "setbit",
        "getbit",
    ];
    const KEYSPACE: &[&str] = &[
        "copy",
        "dbsize",
        "del",
        "exists",
        "expire",
        "expireat",
        "expiretime",
        "flushall",
        "flushdb",
        "keys",
        "persist",
        "pexpire",
        "pexpireat",
        "pexpiretime",
        "pttl",
        "randomkey",
        "rename",
        "renamenx",
        "scan",
        "select",
        "sort",
        "sort_ro",
        "touch",
        "ttl",
        "type",
        "unlink",
    ];
    match name {
        "ping" | "echo" | "quit" | "hello" | "client" | "auth" => Group::Connection,
        "info" | "shutdown" | "config" | "command" | "role" | "function" | "memory" | "time"
        | "save" => Group::Server,
        "commitmode" | "multi" | "exec" | "discard" | "watch" | "unwatch" => Group::Transaction,
        _ if STRINGS.contains(&name) => Group::Strings,
        _ if KEYSPACE.contains(&name) => Group::Keyspace,
        _ if name.starts_with('h') => Group::Hash,
        _ if name.starts_with('s') => Group::Set,
        _ if name.starts_with('z') || name.starts_with("bz") => Group::ZSet,
        _ => Group::List,
    }
}

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
