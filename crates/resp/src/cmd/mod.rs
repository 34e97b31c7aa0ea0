//! Typed commands: a [`Request`](crate::Request) becomes a [`Command`] with Redis's arity checks
//! and error texts. Parsing says what the client asked; executing it is the server's job.
//!
//! One file per group, as Redis groups them: [`strings`] (SET, GET, INCR, INCRBY, MSET, MGET),
//! [`keyspace`] (DEL, EXISTS, DBSIZE, KEYS, SCAN, SELECT), [`connection`] (PING, ECHO, QUIT,
//! HELLO, AUTH, CLIENT), [`server`] (INFO, SHUTDOWN, CONFIG, COMMAND), [`commit_mode`] (our COMMITMODE)
//! and [`table`], the command table that drives arity checks and COMMAND's replies.

mod commit_mode;
mod connection;
mod error;
mod keyspace;
mod server;
mod strings;
pub mod table;

use bytes::Bytes;

pub use commit_mode::{CommitMode, CommitWait, CommitWrite};
pub use connection::{ClientAttribute, HelloAuth};
pub use error::CommandError;
pub use server::{CommandQuery, ShutdownSave, help_reply};
pub use strings::SetCondition;

use crate::frame::ProtocolVersion;
use crate::request::Request;

/// One client command, arguments parsed and checked.
///
/// Keys and values are [`Bytes`] slices of the connection's read buffer: copy them before
/// storing them, or the whole buffer they came from stays allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `PING [message]`: `+PONG`, or the message as a bulk string.
    Ping { message: Option<Bytes> },
    /// `ECHO message`
    Echo { message: Bytes },
    /// `SET key value [NX|XX] [KEEPTTL]`
    Set { key: Bytes, value: Bytes, condition: SetCondition },
    /// `GET key`
    Get { key: Bytes },
    /// `DEL key [key …]`: replies the number of keys removed.
    Del { keys: Vec<Bytes> },
    /// `EXISTS key [key …]`: replies how many of the keys exist (a repeated key counts twice).
    Exists { keys: Vec<Bytes> },
    /// `INCR key`
    Incr { key: Bytes },
    /// `INCRBY key increment`
    IncrBy { key: Bytes, increment: i64 },
    /// `MSET key value [key value …]`
    MSet { pairs: Vec<(Bytes, Bytes)> },
    /// `MGET key [key …]`
    MGet { keys: Vec<Bytes> },
    /// `DBSIZE`
    DbSize,
    /// `KEYS pattern` (see [`glob`](crate::glob))
    Keys { pattern: Bytes },
    /// `SCAN cursor [MATCH pattern] [COUNT count]`
    Scan { cursor: u64, pattern: Option<Bytes>, count: Option<u64> },
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
        match spec.name {
            "ping" | "echo" | "quit" | "hello" | "client" | "auth" => connection::parse(spec, args),
            "set" | "get" | "incr" | "incrby" | "mset" | "mget" => strings::parse(spec, args),
            "del" | "exists" | "dbsize" | "keys" | "scan" | "select" => keyspace::parse(spec, args),
            "info" | "shutdown" | "config" | "command" | "role" => server::parse(spec, args),
            "commitmode" => commit_mode::parse(args),
            "multi" => Ok(Command::Multi),
            "exec" => Ok(Command::Exec),
            "discard" => Ok(Command::Discard),
            other => unreachable!("command {other} is in the table but has no parser"),
        }
    }

    /// The lower-case name Redis uses in errors and statistics (`client|setname`).
    pub fn name(&self) -> &'static str {
        match self {
            Command::Ping { .. } => "ping",
            Command::Echo { .. } => "echo",
            Command::Set { .. } => "set",
            Command::Get { .. } => "get",
            Command::Del { .. } => "del",
            Command::Exists { .. } => "exists",
            Command::Incr { .. } => "incr",
            Command::IncrBy { .. } => "incrby",
            Command::MSet { .. } => "mset",
            Command::MGet { .. } => "mget",
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

    /// Whether the command changes the key-value state, so it is a transaction with one commit
    /// (SET, DEL, INCR, INCRBY, MSET). A SET NX that sets nothing still counts: whether it
    /// writes is known only when it runs.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Command::Set { .. }
                | Command::Del { .. }
                | Command::Incr { .. }
                | Command::IncrBy { .. }
                | Command::MSet { .. }
        )
    }

    /// Whether the command may be queued between MULTI and EXEC: the key-value commands, PING,
    /// ECHO and INFO. Commands that change the connection (HELLO, CLIENT, SELECT, COMMITMODE)
    /// or the server (SHUTDOWN) are refused there, as Redis refuses its `no-multi` commands.
    pub fn is_allowed_in_transaction(&self) -> bool {
        matches!(
            self,
            Command::Set { .. }
                | Command::Get { .. }
                | Command::Del { .. }
                | Command::Exists { .. }
                | Command::Incr { .. }
                | Command::IncrBy { .. }
                | Command::MSet { .. }
                | Command::MGet { .. }
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
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] if digits.len() <= 19 => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(byte - b'0'))?;
    }
    if negative { 0i64.checked_sub_unsigned(magnitude) } else { i64::try_from(magnitude).ok() }
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
