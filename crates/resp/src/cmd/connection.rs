//! Connection commands: PING, ECHO, QUIT, HELLO, AUTH, CLIENT.

use bytes::Bytes;

use super::table::{CommandSpec, find_subcommand};
use super::{Command, CommandError, is, parse_integer};
use crate::frame::ProtocolVersion;

/// `HELLO … AUTH username password`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloAuth {
    pub username: Bytes,
    pub password: Bytes,
}

/// The attributes `CLIENT SETINFO` may set (client libraries send both on connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAttribute {
    LibraryName,
    LibraryVersion,
}

impl ClientAttribute {
    /// The lower-case name as Redis prints it.
    pub fn name(self) -> &'static str {
        match self {
            ClientAttribute::LibraryName => "lib-name",
            ClientAttribute::LibraryVersion => "lib-ver",
        }
    }
}

pub(super) fn parse(spec: &'static CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    match spec.name {
        // The table says "at least one"; PING checks its upper bound itself, as in Redis.
        "ping" if args.len() > 2 => Err(CommandError::WrongArity("ping")),
        "ping" => Ok(Command::Ping { message: args.into_iter().nth(1) }),
        "echo" => Ok(Command::Echo { message: args.into_iter().nth(1).expect("arity checked") }),
        "quit" => Ok(Command::Quit),
        "hello" => parse_hello(args),
        // Redis answers more than `AUTH username password` with a syntax error, not an arity one.
        "auth" if args.len() > 3 => Err(CommandError::Syntax),
        "auth" => {
            let mut args = args.into_iter().skip(1);
            let first = args.next().expect("arity checked");
            Ok(match args.next() {
                Some(password) => Command::Auth { username: Some(first), password },
                None => Command::Auth { username: None, password: first },
            })
        }
        "client" => parse_client(spec, args),
        other => unreachable!("{other} is not a connection command"),
    }
}

fn parse_hello(args: Vec<Bytes>) -> Result<Command, CommandError> {
    let mut args = args.into_iter().skip(1);
    let Some(version) = args.next() else {
        return Ok(Command::Hello { protocol: None, auth: None, client_name: None });
    };
    let protocol = match parse_integer(&version).ok_or(CommandError::InvalidProtocolVersion)? {
        2 => ProtocolVersion::Resp2,
        3 => ProtocolVersion::Resp3,
        _ => return Err(CommandError::UnsupportedProtocol),
    };
    let mut auth = None;
    let mut client_name = None;
    let rest: Vec<Bytes> = args.collect();
    let mut position = 0;
    while position < rest.len() {
        let option = &rest[position];
        let more = rest.len() - position - 1;
        if is(option, "AUTH") && more >= 2 {
            auth = Some(HelloAuth {
                username: rest[position + 1].clone(),
                password: rest[position + 2].clone(),
            });
            position += 3;
        } else if is(option, "SETNAME") && more >= 1 {
            let name = rest[position + 1].clone();
            validate_client_name(&name)?;
            client_name = Some(name);
            position += 2;
        } else {
            return Err(CommandError::HelloOption(String::from_utf8_lossy(option).into_owned()));
        }
    }
    Ok(Command::Hello { protocol: Some(protocol), auth, client_name })
}

fn parse_client(spec: &'static CommandSpec, args: Vec<Bytes>) -> Result<Command, CommandError> {
    let Some(sub) = find_subcommand(spec, &args[1]) else {
        return Err(CommandError::UnknownSubcommand {
            command: "CLIENT",
            subcommand: String::from_utf8_lossy(&args[1]).into_owned(),
        });
    };
    if !sub.accepts(args.len()) {
        return Err(CommandError::WrongArity(sub.name));
    }
    let mut args = args.into_iter().skip(2);
    let mut next = || args.next().expect("arity checked");
    match sub.name {
        "client|setname" => {
            let name = next();
            validate_client_name(&name)?;
            Ok(Command::ClientSetName { name })
        }
        "client|getname" => Ok(Command::ClientGetName),
        "client|id" => Ok(Command::ClientId),
        "client|help" => Ok(Command::Help { command: "CLIENT" }),
        "client|setinfo" => {
            let attribute = next();
            let attribute = if is(&attribute, "LIB-NAME") {
                ClientAttribute::LibraryName
            } else if is(&attribute, "LIB-VER") {
                ClientAttribute::LibraryVersion
            } else {
                return Err(CommandError::UnrecognizedOption(
                    String::from_utf8_lossy(&attribute).into_owned(),
                ));
            };
            let value = next();
            if !is_printable_without_spaces(&value) {
                return Err(CommandError::InvalidClientInfo(attribute.name()));
            }
            Ok(Command::ClientSetInfo { attribute, value })
        }
        other => unreachable!("{other} has no parser"),
    }
}

/// Client names are printable ASCII without spaces (so CLIENT LIST stays one line per client).
fn validate_client_name(name: &[u8]) -> Result<(), CommandError> {
    if is_printable_without_spaces(name) { Ok(()) } else { Err(CommandError::InvalidClientName) }
}

fn is_printable_without_spaces(text: &[u8]) -> bool {
    text.iter().all(|&byte| (b'!'..=b'~').contains(&byte))
}
