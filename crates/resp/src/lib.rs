//! The Redis protocol for redoguard's primary: frames, requests, commands and a connection.
//!
//! The core is sans-IO: [`RequestDecoder`] turns bytes into [`Request`]s, [`Command::parse`]
//! turns a request into a typed [`Command`], and [`Frame::encode`] writes a reply in RESP2 or
//! RESP3. [`Session`] keeps the per-connection state that is pure protocol (protocol version,
//! client name, commit mode, the MULTI queue) and answers the commands that need no database.
//! [`Connection`] is the thin tokio layer that moves bytes between a socket and these types.
//!
//! Every limit on what a client can make us buffer or parse lives in [`Limits`]. Decoders never
//! panic on bytes from the network: "need more bytes" is `Ok(None)`, anything malformed is a
//! [`ProtocolError`] whose text is the Redis one, after which the connection is closed.
//!
//! *Architecture Invariant*: this crate knows nothing of redo, commits or the key-value store. A
//! [`Command`] says what the client asked; executing it belongs to the server.

pub mod auth;
pub mod budget;
pub mod cmd;
mod connection;
mod error;
mod frame;
pub use keyspace::glob;
mod limits;
mod parse;
mod request;
mod session;
pub mod waiting;

pub use auth::{Permission, User};
pub use budget::Budget;
pub use cmd::{
    BlockedReply, ClientAttribute, Command, CommandError, CommandQuery, CommitMode, CommitWait,
    CommitWrite, HelloAuth, SetCondition, ShutdownSave,
};
pub use connection::{Connection, ConnectionError, turn_away};
pub use error::ProtocolError;
pub use frame::{Frame, ProtocolVersion};
pub use keyspace::{Op, OpResult};
pub use limits::{Limits, LimitsError};
pub use request::{Request, RequestDecoder};
pub use session::{Action, EncodingHints, HelloRest, ServerFacts, Session};
