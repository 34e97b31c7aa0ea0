//! Typed commands: a [`Request`](crate::Request) becomes a [`Command`] with Redis's arity checks
//! and error texts. Parsing says what the client asked; executing it is the server's job.
//!
//! One file per group, as Redis groups them: [`strings`], [`keyspace`] (and expiry), [`hash`],
//! [`list`], [`set`], [`zset`] (the data commands, parsed into `keyspace::Op`s), [`connection`]
//! (PING, ECHO, QUIT, HELLO, AUTH, CLIENT), [`server`] (INFO, SHUTDOWN, CONFIG, COMMAND,
//! FUNCTION), [`commit_mode`] (our COMMITMODE) and [`table`], the command table that drives
//! arity checks and COMMAND's replies.

mod commit_mode;
mod connection;
mod error;
mod hash;
mod keyspace;
mod list;
mod server;
mod set;
mod strings;
pub mod table;
mod zset;

use std::time::Duration;

use ::keyspace::KeyType;
pub use ::keyspace::Op;
use bytes::Bytes;

pub use commit_mode::{CommitMode, CommitWait, CommitWrite};
pub use connection::{ClientAttribute, HelloAuth};
pub use error::CommandError;
pub use server::{CommandQuery, ShutdownSave, help_reply};
pub use strings::SetCondition;

/// How a blocking pop's reply is shaped from its pop's (the same pops, without blocking).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockedReply {
    /// BLPOP, BRPOP: `[key, element]` (from LMPOP's `[key, [element]]`).
    KeyAndElement,
    /// BZPOPMIN, BZPOPMAX: `[key, member, score]` (from ZMPOP's `[key, [[member, score]]]`).
    KeyMemberScore,
    /// BLMOVE, BRPOPLPUSH, BLMPOP, BZMPOP: the pop's own reply.
    AsIs,
}

use crate::frame::ProtocolVersion;
use crate::request::Request;

/// One client command, arguments parsed and checked.
///
/// Keys and values are [`Bytes`] slices of the connection's read buffer: copy them before
/// storing them, or the whole buffer they came from stays allocated.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `PING [message]`: `+PONG`, or the message as a bulk string.
    Ping { message: Option<Bytes> },
    /// `ECHO message`
    Echo { message: Bytes },
    /// A command on the key space (strings, hashes, lists, sets, sorted sets, keys, expiry):
    /// what it asks, as the database takes it.
    /// `name` is the command's (`hset`), as errors and statistics name it.
    Data { name: &'static str, op: Op },
    /// A blocking pop: the pop, and how long to wait for something to pop (zero: for ever).
    Block { name: &'static str, op: Op, timeout: Duration, reply: BlockedReply },
    /// `WATCH key [key …]`
    Watch { keys: Vec<Bytes> },
    /// `UNWATCH`
    Unwatch,
    /// `CONFIG SET parameter value [parameter value …]`
    ConfigSet { pairs: Vec<(Bytes, Bytes)> },
    /// `FUNCTION FLUSH [ASYNC|SYNC]`: there are no functions to flush.
    FunctionFlush,
    /// `TIME`: the server's clock.
    Time,
    /// `SAVE`: a checkpoint now (the data files made durable up to the last commit).
    Save,
    /// `DBSIZE`
    DbSize,
    /// `KEYS pattern` (see [`glob`](crate::glob))
    Keys { pattern: Bytes },
    /// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`
    Scan { cursor: u64, pattern: Option<Bytes>, count: Option<u64>, kind: Option<Bytes> },
    /// `MULTI`
    Multi,
    /// `EXEC`
    Exec,
    /// `DISCARD`
    Discard,
    /// `INFO [section …]`, section names in lower case.
    Info { sections: Vec<String> },
    /// `ROLE`: master with its replicas, or slave with its master (as Redis answers).
    Role,
    /// `SHUTDOWN [NOSAVE|SAVE]`
    Shutdown { save: Option<ShutdownSave> },
    /// `QUIT`: reply `+OK`, then close.
    Quit,
    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`
    Hello { protocol: Option<ProtocolVersion>, auth: Option<HelloAuth>, client_name: Option<Bytes> },
    /// `AUTH [username] password`. redoguard has no users but Redis's password-less `default`.
    Auth { username: Option<Bytes>, password: Bytes },
    /// `COMMAND`, `COMMAND COUNT|INFO|DOCS|LIST|HELP`
    Introspect(CommandQuery),
    /// `CLIENT SETNAME name` (an empty name removes it)
    ClientSetName { name: Bytes },
    /// `CLIENT GETNAME`
    ClientGetName,
    /// `CLIENT SETINFO LIB-NAME|LIB-VER value`
    ClientSetInfo { attribute: ClientAttribute, value: Bytes },
    /// `CLIENT ID`
    ClientId,
    /// `SELECT 0`: only database 0 exists, any other index is refused while parsing.
    Select,
    /// `CONFIG GET parameter [parameter …]`, each a glob pattern matched ignoring case.
    ConfigGet { parameters: Vec<Bytes> },
    /// `COMMITMODE [WAIT|NOWAIT] [IMMEDIATE|BATCH]`: with neither, a query of the current mode.
    CommitMode { wait: Option<CommitWait>, write: Option<CommitWrite> },
    /// `CLIENT HELP`, `COMMAND HELP`, `CONFIG HELP`: `command` is the upper-case container.
    Help { command: &'static str },
}

impl Command {
    /// Parses a request. Arity is checked against [`table::COMMANDS`] before any argument.
    pub fn parse(request: Request) -> Result<Command, CommandError> {
        if request.looks_like_http() {
            return Err(CommandError::LooksLikeHttp);
        }
        let args = request.into_args();
        let Some(name) = args.first() else {
            return Err(CommandError::UnknownCommand { name: String::new(), args: String::new() });
        };
        let Some(spec) = table::find(name) else {
            return Err(unknown_command(&args));
        };
        if !spec.accepts(args.len()) {
            return Err(CommandError::WrongArity(spec.name));
        }
        let mut command = match table::group(spec.name) {
            table::Group::Connection => connection::parse(spec, args),
            table::Group::Strings => strings::parse(spec, args),
            table::Group::Keyspace => keyspace::parse(spec, args),
            table::Group::Hash => hash::parse(spec, args),
            table::Group::List => list::parse(spec, args),
            table::Group::Set => set::parse(spec, args),
            table::Group::ZSet => zset::parse(spec, args),
            table::Group::Server => server::parse(spec, args),
            table::Group::Transaction => match spec.name {
                "commitmode" => commit_mode::parse(args),
                "multi" => Ok(Command::Multi),
                "exec" => Ok(Command::Exec),
                "discard" => Ok(Command::Discard),
                "unwatch" => Ok(Command::Unwatch),
                "watch" => Ok(Command::Watch { keys: args[1..].to_vec() }),
                other => unreachable!("command {other} is in the table but has no parser"),
            },
        }?;
        if let Command::Data { name, .. } | Command::Block { name, .. } = &mut command {
            *name = spec.name;
        }
        Ok(command)
    }

    /// A data command; `Command::parse` names it after the command that was sent.
    pub(crate) fn data(op: Op) -> Command {
        Command::Data { name: "", op }
    }

    /// The lower-case name Redis uses in errors and statistics (`client|setname`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Ping { .. } => "ping",
            Command::Echo { .. } => "echo",
            Command::Data { name, .. } | Command::Block { name, .. } => name,
            Command::Watch { .. } => "watch",
            Command::Unwatch => "unwatch",
            Command::ConfigSet { .. } => "config|set",
            Command::FunctionFlush => "function|flush",
            Command::Time => "time",
            Command::Save => "save",
            Command::DbSize => "dbsize",
            Command::Keys { .. } => "keys",
            Command::Scan { .. } => "scan",
            Command::Multi => "multi",
            Command::Exec => "exec",
            Command::Discard => "discard",
            Command::Info { .. } => "info",
            Command::Role => "role",
            Command::Shutdown { .. } => "shutdown",
            Command::Quit => "quit",
            Command::Hello { .. } => "hello",
            Command::Auth { .. } => "auth",
            Command::Introspect(query) => query.name(),
            Command::ClientSetName { .. } => "client|setname",
            Command::ClientGetName => "client|getname",
            Command::ClientSetInfo { .. } => "client|setinfo",
            Command::ClientId => "client|id",
            Command::Select => "select",
            Command::ConfigGet { .. } => "config|get",
            Command::CommitMode { .. } => "commitmode",
            Command::Help { command: "CLIENT" } => "client|help",
            Command::Help { command: "CONFIG" } => "config|help",
            Command::Help { .. } => "command|help",
        }
    }

    /// Whether the command may change the key space, so it is a transaction with one commit.
    /// A SET NX that sets nothing still counts: whether it writes is known only when it runs.
    pub fn is_write(&self) -> bool {
        match self {
            Command::Data { op, .. } | Command::Block { op, .. } => op.is_write(),
            _ => false,
        }
    }

    /// Whether the command may be queued between MULTI and EXEC: the key-value commands (a
    /// blocking pop runs there as its pop, without blocking, as in Redis), PING, ECHO and INFO.
    /// Commands that change the connection (HELLO, CLIENT, SELECT, COMMITMODE, WATCH) or the
    /// server (SHUTDOWN) are refused there, as Redis refuses its `no-multi` commands.
    pub fn is_allowed_in_transaction(&self) -> bool {
        matches!(
            self,
            Command::Data { .. }
                | Command::Block { .. }
                | Command::ConfigSet { .. }
                | Command::Time
                | Command::DbSize
                | Command::Keys { .. }
                | Command::Scan { .. }
                | Command::Ping { .. }
                | Command::Echo { .. }
                | Command::Info { .. }
                | Command::Role
        )
    }
}

/// Redis's text for an unknown command: the name cut at 128 bytes, then each argument quoted
/// and followed by a space until 128 bytes of arguments have been written.
fn unknown_command(args: &[Bytes]) -> CommandError {
    const SHOWN_BYTES_MAX: usize = 128;
    let name = &args[0][..args[0].len().min(SHOWN_BYTES_MAX)];
    let mut shown = String::new();
    for arg in &args[1..] {
        if shown.len() >= SHOWN_BYTES_MAX {
            break;
        }
        let room = SHOWN_BYTES_MAX - shown.len();
        shown.push('\'');
        shown.push_str(&String::from_utf8_lossy(&arg[..arg.len().min(room)]));
        shown.push_str("' ");
    }
    CommandError::UnknownCommand { name: String::from_utf8_lossy(name).into_owned(), args: shown }
}

/// Parses a signed integer with Redis's `string2ll` rules: optional `-`, digits, no `+`, no
/// leading zero, no blanks, within i64.
pub(crate) fn parse_integer(text: &[u8]) -> Option<i64> {
    ::keyspace::number::parse_integer(text)
}

/// Parses a double as Redis's `strtod` over the whole argument: no blanks, not NaN.
pub(crate) fn parse_float(text: &[u8]) -> Option<f64> {
    ::keyspace::number::parse_double(text)
}

/// HSCAN's, SSCAN's, ZSCAN's `cursor [MATCH pattern] [COUNT count]` (after the key).
pub(crate) fn parse_collection_scan(
    key: Bytes,
    kind: KeyType,
    mut args: impl Iterator<Item = Bytes>,
) -> Result<Command, CommandError> {
    let cursor = keyspace::parse_cursor(&args.next().expect("arity checked"))?;
    let (mut pattern, mut count) = (None, 10u64);
    while let Some(option) = args.next() {
        let Some(value) = args.next() else { return Err(CommandError::Syntax) };
        if is(&option, "MATCH") {
            pattern = Some(value);
        } else if is(&option, "COUNT") {
            match parse_integer(&value) {
                Some(value) if value >= 1 => count = value as u64,
                Some(_) => return Err(CommandError::Syntax),
                None => return Err(CommandError::NotInteger),
            }
        } else {
            return Err(CommandError::Syntax);
        }
    }
    Ok(Command::data(Op::ScanCollection { key, kind, cursor, pattern, count }))
}

/// Whether `arg` spells `word` (upper case ASCII) in any case.
pub(crate) fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

pub(crate) fn upper(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_uppercase()
}

#[cfg(test)]
mod tests;
