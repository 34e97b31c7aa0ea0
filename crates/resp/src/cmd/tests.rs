//! Command parsing: every command, its arity and its error texts, checked against Redis's.

use bytes::Bytes;

use super::*;

fn parse(words: &[&str]) -> Result<Command, CommandError> {
    Command::parse(Request::new(words.iter().map(|word| Bytes::from(word.to_string())).collect()))
}

fn error(words: &[&str]) -> String {
    parse(words).unwrap_err().to_string()
}

fn bytes(text: &str) -> Bytes {
    Bytes::from(text.to_string())
}

#[test]
fn names_are_case_insensitive() {
    assert_eq!(parse(&["get", "k"]), data("get", Op::Get { key: bytes("k") }));
    assert_eq!(parse(&["GeT", "k"]), data("get", Op::Get { key: bytes("k") }));
}

#[test]
fn unknown_commands_quote_their_arguments_like_redis() {
    assert_eq!(
        error(&["FOO", "a", "b"]),
        "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "
    );
    assert_eq!(error(&["foo"]), "ERR unknown command 'foo', with args beginning with: ");
    let long = "x".repeat(200);
    let text = error(&["FOO", &long, "next"]);
    assert_eq!(
        text,
        format!("ERR unknown command 'FOO', with args beginning with: '{}' ", "x".repeat(128))
    );
    assert_eq!(
        Command::parse(Request::new(vec![])).unwrap_err().to_string(),
        "ERR unknown command '', with args beginning with: "
    );
}

#[test]
fn arity_errors_name_the_command_in_lower_case() {
    assert_eq!(error(&["GET"]), "ERR wrong number of arguments for 'get' command");
    assert_eq!(error(&["GET", "a", "b"]), "ERR wrong number of arguments for 'get' command");
    assert_eq!(error(&["SET", "k"]), "ERR wrong number of arguments for 'set' command");
    assert_eq!(error(&["MSET", "a", "1", "b"]), "ERR wrong number of arguments for 'mset' command");
    assert_eq!(error(&["DEL"]), "ERR wrong number of arguments for 'del' command");
    assert_eq!(error(&["INCRBY", "k"]), "ERR wrong number of arguments for 'incrby' command");
    assert_eq!(error(&["PING", "a", "b"]), "ERR wrong number of arguments for 'ping' command");
    assert_eq!(
        error(&["CLIENT", "SETNAME"]),
        "ERR wrong number of arguments for 'client|setname' command"
    );
    assert_eq!(error(&["CONFIG", "GET"]), "ERR wrong number of arguments for 'config|get' command");
    assert_eq!(
        error(&["COMMITMODE", "WAIT", "BATCH", "x"]),
        "ERR wrong number of arguments for 'commitmode' command"
    );
}

fn data(name: &'static str, op: Op) -> Result<Command, CommandError> {
    Ok(Command::Data { name, op })
}

#[test]
fn string_commands() {
    use ::keyspace::{SetExpiry, Time, TimeUnit};
    let set = |condition, expiry, get| Op::Set {
        key: bytes("k"),
        value: bytes("v"),
        condition,
        expiry,
        get,
        command: "set",
    };
    assert_eq!(
        parse(&["SET", "k", "v"]),
        data("set", set(SetCondition::Always, SetExpiry::Clear, false))
    );
    assert_eq!(
        parse(&["set", "k", "v", "nx"]),
        data("set", set(SetCondition::IfAbsent, SetExpiry::Clear, false))
    );
    assert_eq!(
        parse(&["SET", "k", "v", "XX", "KEEPTTL", "xx"]),
        data("set", set(SetCondition::IfPresent, SetExpiry::Keep, false))
    );
    let in_ten = SetExpiry::At(Time { amount: 10, unit: TimeUnit::Seconds, absolute: false });
    assert_eq!(
        parse(&["SET", "k", "v", "ex", "10", "GET"]),
        data("set", set(SetCondition::Always, in_ten, true))
    );
    assert_eq!(error(&["SET", "k", "v", "NX", "XX"]), "ERR syntax error");
    assert_eq!(error(&["SET", "k", "v", "BOGUS"]), "ERR syntax error");
    assert_eq!(error(&["SET", "k", "v", "EX", "10", "PX", "1"]), "ERR syntax error");
    assert_eq!(error(&["SET", "k", "v", "EX", "10", "KEEPTTL"]), "ERR syntax error");
    assert_eq!(error(&["SET", "k", "v", "EX"]), "ERR syntax error");
    assert_eq!(error(&["SET", "k", "v", "EX", "x"]), "ERR value is not an integer or out of range");
    assert_eq!(parse(&["INCR", "c"]), data("incr", Op::IncrBy { key: bytes("c"), increment: 1 }));
    assert_eq!(parse(&["DECR", "c"]), data("decr", Op::IncrBy { key: bytes("c"), increment: -1 }));
    assert_eq!(
        parse(&["INCRBY", "c", "-5"]),
        data("incrby", Op::IncrBy { key: bytes("c"), increment: -5 })
    );
    for bad in ["1.5", "", "+1", "01", " 1", "9223372036854775808", "-0", "x"] {
        assert_eq!(
            error(&["INCRBY", "c", bad]),
            "ERR value is not an integer or out of range",
            "{bad:?}"
        );
    }
    assert_eq!(
        parse(&["INCRBY", "c", "-9223372036854775808"]),
        data("incrby", Op::IncrBy { key: bytes("c"), increment: i64::MIN })
    );
    assert_eq!(error(&["DECRBY", "c", "-9223372036854775808"]), "ERR decrement would overflow");
    assert_eq!(error(&["INCRBYFLOAT", "c", "nan"]), "ERR value is not a valid float");
    assert_eq!(
        parse(&["MSET", "a", "1", "b", "2"]),
        data("mset", Op::MSet { pairs: vec![(bytes("a"), bytes("1")), (bytes("b"), bytes("2"))] })
    );
    assert_eq!(
        parse(&["MGET", "a", "b"]),
        data("mget", Op::MGet { keys: vec![bytes("a"), bytes("b")] })
    );
    assert_eq!(
        error(&["MSETNX", "a", "1", "b"]),
        "ERR wrong number of arguments for 'msetnx' command"
    );
}

#[test]
fn keyspace_commands() {
    use ::keyspace::{ExpireCondition, Time, TimeUnit};
    assert_eq!(
        parse(&["DEL", "a", "b"]),
        data("del", Op::Del { keys: vec![bytes("a"), bytes("b")] })
    );
    assert_eq!(parse(&["UNLINK", "a"]), data("unlink", Op::Del { keys: vec![bytes("a")] }));
    assert_eq!(parse(&["EXISTS", "a"]), data("exists", Op::Exists { keys: vec![bytes("a")] }));
    assert_eq!(parse(&["DBSIZE"]), Ok(Command::DbSize));
    assert_eq!(parse(&["KEYS", "user:*"]), Ok(Command::Keys { pattern: bytes("user:*") }));
    assert_eq!(parse(&["SELECT", "0"]), Ok(Command::Select));
    assert_eq!(error(&["SELECT", "1"]), "ERR DB index is out of range");
    assert_eq!(error(&["SELECT", "x"]), "ERR invalid DB index");
    assert_eq!(
        parse(&["SCAN", "0"]),
        Ok(Command::Scan { cursor: 0, pattern: None, count: None, kind: None })
    );
    assert_eq!(
        parse(&["scan", "18446744073709551615", "count", "10", "match", "a*", "type", "hash"]),
        Ok(Command::Scan {
            cursor: u64::MAX,
            pattern: Some(bytes("a*")),
            count: Some(10),
            kind: Some(bytes("hash"))
        })
    );
    assert_eq!(error(&["SCAN", "-1"]), "ERR invalid cursor");
    assert_eq!(error(&["SCAN", "18446744073709551616"]), "ERR invalid cursor");
    assert_eq!(error(&["SCAN", "0", "COUNT", "0"]), "ERR syntax error");
    assert_eq!(error(&["SCAN", "0", "COUNT", "x"]), "ERR value is not an integer or out of range");
    assert_eq!(error(&["SCAN", "0", "MATCH"]), "ERR syntax error");
    assert_eq!(error(&["SCAN", "0", "LIMIT", "1"]), "ERR syntax error");
    assert_eq!(
        parse(&["PEXPIREAT", "k", "100", "gt"]),
        data(
            "pexpireat",
            Op::Expire {
                key: bytes("k"),
                at: Time { amount: 100, unit: TimeUnit::Milliseconds, absolute: true },
                condition: ExpireCondition::IfLater,
                command: "pexpireat",
            }
        )
    );
    assert_eq!(
        error(&["EXPIRE", "k", "1", "NX", "XX"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        error(&["EXPIRE", "k", "1", "GT", "LT"]),
        "ERR GT and LT options at the same time are not compatible"
    );
    assert_eq!(error(&["EXPIRE", "k", "1", "foo"]), "ERR Unsupported option foo");
    assert_eq!(error(&["FLUSHALL", "LAZY"]), "ERR syntax error");
    assert_eq!(parse(&["FLUSHDB", "ASYNC"]), data("flushdb", Op::FlushAll));
}

#[test]
fn collection_commands_parse_with_redis_error_texts() {
    assert_eq!(error(&["HSET", "h", "f"]), "ERR wrong number of arguments for 'hset' command");
    assert_eq!(
        error(&["HSET", "h", "f", "v", "g"]),
        "ERR wrong number of arguments for 'hset' command"
    );
    assert_eq!(error(&["HINCRBYFLOAT", "h", "f", "x"]), "ERR value is not a valid float");
    assert_eq!(error(&["LPOP", "l", "-1"]), "ERR value is out of range, must be positive");
    assert_eq!(
        error(&["LPOS", "l", "a", "RANK", "0"]).split(':').next(),
        Some("ERR RANK can't be zero")
    );
    assert_eq!(error(&["LMPOP", "0", "l", "LEFT"]), "ERR numkeys should be greater than 0");
    assert_eq!(
        error(&["LMPOP", "1", "l", "LEFT", "COUNT", "0"]),
        "ERR count should be greater than 0"
    );
    assert_eq!(error(&["BLPOP", "l", "-1"]), "ERR timeout is negative");
    assert_eq!(error(&["BLPOP", "l", "x"]), "ERR timeout is not a float or out of range");
    assert_eq!(
        error(&["SINTERCARD", "2", "a"]),
        "ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(error(&["SINTERCARD", "1", "a", "LIMIT", "-1"]), "ERR LIMIT can't be negative");
    assert_eq!(
        error(&["ZADD", "z", "NX", "XX", "1", "a"]),
        "ERR XX and NX options at the same time are not compatible"
    );
    assert_eq!(
        error(&["ZADD", "z", "GT", "LT", "1", "a"]),
        "ERR GT, LT, and/or NX options at the same time are not compatible"
    );
    assert_eq!(
        error(&["ZADD", "z", "INCR", "1", "a", "2", "b"]),
        "ERR INCR option supports a single increment-element pair"
    );
    assert_eq!(error(&["ZADD", "z", "x", "a"]), "ERR value is not a valid float");
    assert_eq!(error(&["ZADD", "z", "1", "a", "2"]), "ERR syntax error");
    assert_eq!(error(&["ZRANGEBYSCORE", "z", "x", "1"]), "ERR min or max is not a float");
    assert_eq!(
        error(&["ZRANGEBYLEX", "z", "a", "+"]),
        "ERR min or max not valid string range item"
    );
    assert_eq!(
        error(&["ZRANGE", "z", "0", "1", "LIMIT", "0", "1"]),
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
    );
    assert_eq!(
        error(&["ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES"]),
        "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
    );
    assert_eq!(
        error(&["ZUNIONSTORE", "d", "0", "a"]),
        "ERR at least 1 input key is needed for 'zunionstore' command"
    );
    assert_eq!(
        error(&["ZINTERSTORE", "d", "1", "a", "WEIGHTS", "x"]),
        "ERR weight value is not a float"
    );
    let Ok(Command::Data { op: Op::ZRange { range, .. }, .. }) =
        parse(&["ZREVRANGEBYSCORE", "z", "(5", "1", "LIMIT", "1", "2"])
    else {
        panic!("a ZRANGE")
    };
    assert!(range.reverse);
    assert_eq!(range.limit, Some((1, 2)));
    assert_eq!(
        range.by,
        ::keyspace::ZRangeBy::Score {
            min: ::keyspace::ScoreBound { value: 1.0, exclusive: false },
            max: ::keyspace::ScoreBound { value: 5.0, exclusive: true },
        }
    );
    assert!(matches!(
        parse(&["BZPOPMIN", "a", "b", "0.5"]),
        Ok(Command::Block { name: "bzpopmin", .. })
    ));
    assert!(matches!(parse(&["WATCH", "a", "b"]), Ok(Command::Watch { .. })));
}

#[test]
fn connection_commands() {
    assert_eq!(parse(&["PING"]), Ok(Command::Ping { message: None }));
    assert_eq!(parse(&["PING", "hi"]), Ok(Command::Ping { message: Some(bytes("hi")) }));
    assert_eq!(parse(&["ECHO", "hi"]), Ok(Command::Echo { message: bytes("hi") }));
    assert_eq!(parse(&["QUIT"]), Ok(Command::Quit));
    assert_eq!(
        parse(&["HELLO"]),
        Ok(Command::Hello { protocol: None, auth: None, client_name: None })
    );
    assert_eq!(
        parse(&["hello", "3", "auth", "default", "pw", "setname", "app"]),
        Ok(Command::Hello {
            protocol: Some(ProtocolVersion::Resp3),
            auth: Some(HelloAuth { username: bytes("default"), password: bytes("pw") }),
            client_name: Some(bytes("app")),
        })
    );
    assert_eq!(error(&["HELLO", "4"]), "NOPROTO unsupported protocol version");
    assert_eq!(error(&["HELLO", "x"]), "ERR Protocol version is not an integer or out of range");
    assert_eq!(error(&["HELLO", "3", "AUTH", "u"]), "ERR Syntax error in HELLO option 'AUTH'");
    assert_eq!(error(&["HELLO", "3", "FOO"]), "ERR Syntax error in HELLO option 'FOO'");
    assert_eq!(
        error(&["HELLO", "3", "SETNAME", "a b"]),
        "ERR Client names cannot contain spaces, newlines or special characters."
    );
    assert_eq!(
        parse(&["CLIENT", "SETNAME", "app"]),
        Ok(Command::ClientSetName { name: bytes("app") })
    );
    assert_eq!(parse(&["client", "setname", ""]), Ok(Command::ClientSetName { name: bytes("") }));
    assert_eq!(parse(&["CLIENT", "GETNAME"]), Ok(Command::ClientGetName));
    assert_eq!(parse(&["CLIENT", "ID"]), Ok(Command::ClientId));
    assert_eq!(parse(&["CLIENT", "HELP"]), Ok(Command::Help { command: "CLIENT" }));
    assert_eq!(
        parse(&["CLIENT", "SETINFO", "lib-name", "redis-py"]),
        Ok(Command::ClientSetInfo {
            attribute: ClientAttribute::LibraryName,
            value: bytes("redis-py")
        })
    );
    assert_eq!(
        parse(&["CLIENT", "SETINFO", "LIB-VER", "5.0.1"]),
        Ok(Command::ClientSetInfo {
            attribute: ClientAttribute::LibraryVersion,
            value: bytes("5.0.1")
        })
    );
    assert_eq!(error(&["CLIENT", "SETINFO", "lib-foo", "x"]), "ERR Unrecognized option 'lib-foo'");
    assert_eq!(
        error(&["CLIENT", "SETINFO", "LIB-NAME", "a\nb"]),
        "ERR lib-name cannot contain spaces, newlines or special characters."
    );
    assert_eq!(error(&["CLIENT", "KILL", "x"]), "ERR unknown subcommand 'KILL'. Try CLIENT HELP.");
}

#[test]
fn server_commands() {
    assert_eq!(parse(&["INFO"]), Ok(Command::Info { sections: vec![] }));
    assert_eq!(
        parse(&["INFO", "Server", "redo"]),
        Ok(Command::Info { sections: vec!["server".into(), "redo".into()] })
    );
    assert_eq!(parse(&["SHUTDOWN"]), Ok(Command::Shutdown { save: None }));
    assert_eq!(
        parse(&["SHUTDOWN", "nosave"]),
        Ok(Command::Shutdown { save: Some(ShutdownSave::NoSave) })
    );
    assert_eq!(
        parse(&["SHUTDOWN", "SAVE"]),
        Ok(Command::Shutdown { save: Some(ShutdownSave::Save) })
    );
    assert_eq!(error(&["SHUTDOWN", "SAVE", "NOSAVE"]), "ERR syntax error");
    assert_eq!(error(&["SHUTDOWN", "BOGUS"]), "ERR syntax error");
    assert_eq!(
        error(&["SHUTDOWN", "NOW"]),
        "ERR SHUTDOWN option 'NOW' is not supported: redoguard always shuts down cleanly and at once"
    );
    assert_eq!(parse(&["COMMAND"]), Ok(Command::Introspect(CommandQuery::All)));
    assert_eq!(parse(&["COMMAND", "DOCS"]), Ok(Command::Introspect(CommandQuery::Docs(vec![]))));
    assert_eq!(parse(&["COMMAND", "count"]), Ok(Command::Introspect(CommandQuery::Count)));
    assert_eq!(
        parse(&["COMMAND", "INFO", "get"]),
        Ok(Command::Introspect(CommandQuery::Info(vec![bytes("get")])))
    );
    assert_eq!(parse(&["COMMAND", "LIST"]), Ok(Command::Introspect(CommandQuery::List)));
    assert_eq!(
        error(&["COMMAND", "GETKEYS", "x"]),
        "ERR unknown subcommand 'GETKEYS'. Try COMMAND HELP."
    );
    assert_eq!(
        parse(&["CONFIG", "GET", "save", "appendonly"]),
        Ok(Command::ConfigGet { parameters: vec![bytes("save"), bytes("appendonly")] })
    );
    assert_eq!(
        parse(&["CONFIG", "SET", "save", ""]),
        Ok(Command::ConfigSet { pairs: vec![(bytes("save"), bytes(""))] })
    );
    assert_eq!(
        error(&["CONFIG", "SET", "save"]),
        "ERR wrong number of arguments for 'config|set' command"
    );
    assert_eq!(error(&["CONFIG", "FOO"]), "ERR unknown subcommand 'FOO'. Try CONFIG HELP.");
    assert_eq!(parse(&["MULTI"]), Ok(Command::Multi));
    assert_eq!(parse(&["EXEC"]), Ok(Command::Exec));
    assert_eq!(parse(&["DISCARD"]), Ok(Command::Discard));
    assert_eq!(error(&["MULTI", "x"]), "ERR wrong number of arguments for 'multi' command");
}

#[test]
fn commit_mode_takes_either_or_both_options_in_any_order() {
    use CommitWait::*;
    use CommitWrite::*;
    let mode = |wait, write| Ok(Command::CommitMode { wait, write });
    assert_eq!(parse(&["COMMITMODE"]), mode(None, None));
    assert_eq!(parse(&["COMMITMODE", "nowait"]), mode(Some(NoWait), None));
    assert_eq!(parse(&["COMMITMODE", "BATCH"]), mode(None, Some(Batch)));
    assert_eq!(parse(&["commitmode", "BATCH", "WAIT"]), mode(Some(Wait), Some(Batch)));
    assert_eq!(parse(&["COMMITMODE", "NOWAIT", "IMMEDIATE"]), mode(Some(NoWait), Some(Immediate)));
    assert_eq!(
        error(&["COMMITMODE", "WAIT", "NOWAIT"]),
        "ERR COMMITMODE takes WAIT or NOWAIT once, not both or twice"
    );
    assert_eq!(
        error(&["COMMITMODE", "BATCH", "BATCH"]),
        "ERR COMMITMODE takes IMMEDIATE or BATCH once, not both or twice"
    );
    assert_eq!(
        error(&["COMMITMODE", "SYNC"]),
        "ERR COMMITMODE option 'SYNC' is unknown: expected WAIT, NOWAIT, IMMEDIATE or BATCH"
    );
    assert_eq!(CommitMode::default().to_string(), "WAIT IMMEDIATE");
    let mut mode = CommitMode::default();
    mode.apply(Some(NoWait), None);
    assert_eq!(mode.to_string(), "NOWAIT IMMEDIATE");
    mode.apply(None, Some(Batch));
    assert_eq!(mode.to_string(), "NOWAIT BATCH");
}

#[test]
fn every_table_entry_parses_with_its_minimum_arity() {
    for spec in table::COMMANDS {
        let count = spec.arity.unsigned_abs() as usize;
        let mut words = vec![spec.name.to_string()];
        // Arguments that must be a word, not a number, for the minimal call to parse.
        let special: &[&str] = match spec.name {
            "blmove" => &["a", "b", "LEFT", "RIGHT", "0"],
            "lmove" => &["a", "b", "LEFT", "RIGHT"],
            "blmpop" | "bzmpop" => {
                &["0", "1", "a", if spec.name == "blmpop" { "LEFT" } else { "MIN" }]
            }
            "lmpop" => &["1", "a", "LEFT"],
            "zmpop" => &["1", "a", "MIN"],
            "linsert" => &["l", "BEFORE", "p", "v"],
            "sintercard" | "zintercard" | "zunion" | "zinter" | "zdiff" => &["1", "a"],
            "zunionstore" | "zinterstore" | "zdiffstore" => &["d", "1", "a"],
            "zlexcount" | "zrangebylex" | "zrevrangebylex" | "zremrangebylex" => &["z", "-", "+"],
            _ => &[],
        };
        if !special.is_empty() {
            words.extend(special.iter().map(|word| word.to_string()));
        } else if spec.name == "select" {
            words.push("0".into());
        } else if spec.name == "incrby" {
            words.extend(["k".into(), "1".into()]);
        } else if !spec.subcommands.is_empty() {
            let sub = spec.subcommands[0];
            words.push(sub.name.split('|').nth(1).unwrap().into());
            words.extend((2..sub.arity.unsigned_abs() as usize).map(|_| "lib-name".to_string()));
        } else {
            words.extend((1..count).map(|_| "0".to_string()));
        }
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let command = parse(&words).unwrap_or_else(|error| panic!("{words:?}: {error}"));
        assert!(command.name().starts_with(spec.name), "{} vs {}", command.name(), spec.name);
    }
}

#[test]
fn writes_and_transaction_rules() {
    assert!(parse(&["SET", "k", "v"]).unwrap().is_write());
    assert!(parse(&["MSET", "k", "v"]).unwrap().is_write());
    assert!(!parse(&["GET", "k"]).unwrap().is_write());
    assert!(parse(&["GET", "k"]).unwrap().is_allowed_in_transaction());
    assert!(!parse(&["HELLO", "3"]).unwrap().is_allowed_in_transaction());
    assert!(!parse(&["COMMITMODE", "NOWAIT"]).unwrap().is_allowed_in_transaction());
}
