//! Errors a well-framed request can still have: unknown command, wrong arity, bad argument.

use crate::frame::Frame;

/// Why a request is not a valid command. `Display` is the exact Redis error text, code first
/// (`ERR wrong number of arguments for 'get' command`); the connection stays open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// `args` is already formatted as Redis does it: `'a' 'b' ` (each quoted, each followed by a
    /// space, cut at 128 bytes).
    #[error("ERR unknown command '{name}', with args beginning with: {args}")]
    UnknownCommand { name: String, args: String },
    /// `command` is upper case as Redis prints it: `Try CLIENT HELP.`
    #[error("ERR unknown subcommand '{subcommand}'. Try {command} HELP.")]
    UnknownSubcommand { command: &'static str, subcommand: String },
    /// The lower-case full name: `get`, `client|setname`.
    #[error("ERR wrong number of arguments for '{0}' command")]
    WrongArity(&'static str),
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR value is not a valid float")]
    NotFloat,
    /// Any other of Redis's texts for a bad argument, code first.
    #[error("{0}")]
    Text(String),
    #[error("ERR invalid cursor")]
    InvalidCursor,
    #[error("ERR invalid DB index")]
    InvalidDbIndex,
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    #[error("ERR Protocol version is not an integer or out of range")]
    InvalidProtocolVersion,
    #[error("NOPROTO unsupported protocol version")]
    UnsupportedProtocol,
    #[error("ERR Syntax error in HELLO option '{0}'")]
    HelloOption(String),
    #[error("ERR Client names cannot contain spaces, newlines or special characters.")]
    InvalidClientName,
    #[error("ERR {0} cannot contain spaces, newlines or special characters.")]
    InvalidClientInfo(&'static str),
    #[error("ERR Unrecognized option '{0}'")]
    UnrecognizedOption(String),
    /// A real Redis option that redoguard deliberately does not implement.
    #[error("ERR {what} is not supported: {why}")]
    Unsupported { what: String, why: &'static str },
    /// A COMMITMODE argument that is not WAIT, NOWAIT, IMMEDIATE or BATCH, or a repeated choice.
    #[error("ERR COMMITMODE {0}")]
    CommitMode(String),
    /// The request is the start of an HTTP request: the connection is closed without a reply
    /// (see `Request::looks_like_http`).
    #[error("ERR Possible SECURITY ATTACK detected: an HTTP request on the Redis port")]
    LooksLikeHttp,
}

impl CommandError {
    pub fn to_frame(&self) -> Frame {
        Frame::error(self.to_string())
    }
}
