//! Server commands: INFO, SHUTDOWN, CONFIG, COMMAND.

use bytes::Bytes;

use super::table::{COMMANDS, CommandSpec, find, find_subcommand};
use super::{Command, CommandError, is, upper};
use crate::frame::Frame;

/// SHUTDOWN's choice about saving. redoguard's durability is the redo log, so both mean "stop";
/// SAVE asks for a checkpoint first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSave {
    Save,
    NoSave,
}

/// What `COMMAND …` asks about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandQuery {
    /// `COMMAND`: every command's INFO entry.
    All,
    /// `COMMAND COUNT`
    Count,
    /// `COMMAND INFO [name …]`: entries for the names (null for unknown ones), all if none.
    Info(Vec<Bytes>),
    /// `COMMAND DOCS [name …]`: answered with an empty map; clients fall back to their own help.
    Docs(Vec<Bytes>),
    /// `COMMAND LIST`
    List,
}

impl CommandQuery {
    pub(super) fn name(&self) -> &'static str {
        match self {
            CommandQuery::All => "command",
            CommandQuery::Count => "command|count",
            CommandQuery::Info(_) => "command|info",
            CommandQuery::Docs(_) => "command|docs",
            CommandQuery::List => "command|list",
        }
    }

    /// The reply, built from the command table (needs no server state).
    pub fn reply(&self) -> Frame {
        match self {
            CommandQuery::All => all_commands(),
            CommandQuery::Info(names) if names.is_empty() => all_commands(),
            CommandQuery::Info(names) => Frame::Array(
                names
                    .iter()
                    .map(|name| find(name).map_or(Frame::NullArray, CommandSpec::to_frame))
                    .collect(),
            ),
            CommandQuery::Count => Frame::Integer(COMMANDS.len() as i64),
            CommandQuery::Docs(_) => Frame::Map(Vec::new()),
            CommandQuery::List => Frame::Array(
                COMMANDS
                    .iter()
                    .map(|spec| Frame::Bulk(Bytes::from_static(spec.name.as_bytes())))
                    .collect(),
            ),
        }
    }
}

fn all_commands() -> Frame {
    Frame::Array(COMMANDS.iter().map(CommandSpec::to_frame).collect())
}

/// The lines of `CLIENT HELP`, `COMMAND HELP` and `CONFIG HELP`.
pub fn help_reply(command: &str) -> Frame {
    let lines: &[&str] = match command {
        "CLIENT" => &[
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "SETINFO <LIB-NAME|LIB-VER> <value>",
            "    Set the client library name or version.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "HELP",
            "    Print this help.",
        ],
        "CONFIG" => &[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "HELP",
            "    Print this help.",
        ],
        _ => &[
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all commands.",
            "COUNT",
            "    Return the total number of commands.",
            "DOCS [<command-name> ...]",
            "    Return documentation details (none: see docs/resp.md).",
            "INFO [<command-name> ...]",
            "    Return details about the given commands, or all of them.",
            "LIST",
            "    Return the names of all commands.",
            "HELP",
            "    Print this help.",
        ],
    };
    Frame::Array(lines.iter().map(|line| Frame::simple(line)).collect())
}

pub(super) fn parse(spec: &'static CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    match spec.name {
        "info" => Ok(Command::Info {
            sections: args
                .iter()
                .skip(1)
                .map(|section| String::from_utf8_lossy(section).to_ascii_lowercase())
                .collect(),
        }),
        "shutdown" => parse_shutdown(&args[1..]),
        "role" => Ok(Command::Role),
        "config" | "command" | "function" | "memory" => parse_container(spec, args),
        "time" => Ok(Command::Time),
        "save" => Ok(Command::Save),
        other => unreachable!("{other} is not a server command"),
    }
}

fn parse_shutdown(options: &[Bytes]) -> Result<Command, CommandError> {
    let mut save = None;
    for option in options {
        let choice = if is(option, "SAVE") {
            ShutdownSave::Save
        } else if is(option, "NOSAVE") {
            ShutdownSave::NoSave
        } else if ["NOW", "FORCE", "ABORT"].iter().any(|word| is(option, word)) {
            return Err(CommandError::Unsupported {
                what: format!("SHUTDOWN option '{}'", upper(option)),
                why: "redoguard always shuts down cleanly and at once",
            });
        } else {
            return Err(CommandError::Syntax);
        };
        if save.is_some_and(|earlier| earlier != choice) {
            return Err(CommandError::Syntax);
        }
        save = Some(choice);
    }
    Ok(Command::Shutdown { save })
}

fn parse_container(spec: &'static CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let container = match spec.name {
        "config" => "CONFIG",
        "function" => "FUNCTION",
        "memory" => "MEMORY",
        _ => "COMMAND",
    };
    let Some(name) = args.get(1) else {
        return Ok(Command::Introspect(CommandQuery::All));
    };
    let Some(sub) = find_subcommand(spec, name) else {
        if container == "CONFIG" && ["RESETSTAT", "REWRITE"].iter().any(|word| is(name, word)) {
            return Err(CommandError::Unsupported {
                what: format!("CONFIG {}", upper(name)),
                why: "the configuration comes from the server's TOML file and is fixed at start",
            });
        }
        return Err(CommandError::UnknownSubcommand {
            command: container,
            subcommand: String::from_utf8_lossy(name).into_owned(),
        });
    };
    if !sub.accepts(args.len()) {
        return Err(CommandError::WrongArity(sub.name));
    }
    let rest = || args[2..].to_vec();
    match sub.name {
        "config|get" => Ok(Command::ConfigGet { parameters: rest() }),
        "config|set" => {
            let rest = rest();
            if !rest.len().is_multiple_of(2) {
                return Err(CommandError::WrongArity("config|set"));
            }
            Ok(Command::ConfigSet {
                pairs: rest.chunks(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect(),
            })
        }
        "memory|usage" => {
            let key = args[2].clone();
            let samples = match &args[3..] {
                [] => 5,
                [word, count] if is(word, "SAMPLES") => match super::parse_integer(count) {
                    Some(count) if count >= 0 => count as u64,
                    _ => return Err(CommandError::NotInteger),
                },
                _ => return Err(CommandError::Syntax),
            };
            Ok(Command::data(keyspace::Op::MemoryUsage { key, samples }))
        }
        "function|flush" => match &args[2..] {
            [] => Ok(Command::FunctionFlush),
            [mode] if is(mode, "ASYNC") || is(mode, "SYNC") => Ok(Command::FunctionFlush),
            _ => Err(CommandError::Syntax),
        },
        "config|help" | "command|help" => Ok(Command::Help { command: container }),
        "command|count" => Ok(Command::Introspect(CommandQuery::Count)),
        "command|info" => Ok(Command::Introspect(CommandQuery::Info(rest()))),
        "command|docs" => Ok(Command::Introspect(CommandQuery::Docs(rest()))),
        "command|list" if args.len() == 2 => Ok(Command::Introspect(CommandQuery::List)),
        "command|list" => Err(CommandError::Unsupported {
            what: "COMMAND LIST FILTERBY".into(),
            why: "the list is short enough to filter on the client",
        }),
        other => unreachable!("{other} has no parser"),
    }
}
