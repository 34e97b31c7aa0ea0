//! The redo transport wire protocol, sans-IO: messages, their encoding, and the handshake's
//! rules. `docs/wire-protocol.md` is the byte-exact description; this crate is its only
//! implementation.
//!
//! - `frame`: the 16-byte frame around every message, and the decoder that bounds a frame's
//!   length before reading it;
//! - `compress`: redo frames compressed with LZ4 or zstd (version 3), and their bounded
//!   decompression;
//! - `message`: redo transport proper (hello, welcome, writes, acknowledgements, heartbeats,
//!   status, archived logs, gaps, errors);
//! - `roles`: what members tell each other about roles and incarnations (`Probe`,
//!   `RoleInfo`, the incarnation history a hello carries);
//! - `copy`: a consistent copy of a primary's data files for a new standby;
//! - `observer`: the fast-start failover observer's pings and the members' answers;
//! - `handshake`: a standby's checks of a primary's hello.
//!
//! *Architecture Invariant*: this crate does no I/O and reads no clock. Times travel as fields
//! the caller fills in. Decoding never panics and never allocates more than a frame's bounded
//! length (a `TrimmedWrite`: that and room for its zero tail, at most `ZERO_TAIL_MAX`): "need
//! more bytes" is `Ok(None)`, anything malformed is a `ProtoError` naming it.

mod compress;
mod copy;
mod error;
mod frame;
mod handshake;
mod message;
mod observer;
mod roles;

pub use compress::{
    COMPRESSED_PREFIX_LEN, Codec, DECOMPRESSED_MAX, Encoded, FrameCompressor, compressed_sizes,
    compressible,
};
pub use copy::{COPY_CHUNK_ENTRIES_MAX, CopyBegin, CopyChunk, CopyEnd, CopyRequest};
pub use error::{ErrorCode, ErrorMessage, ProtoError};
pub use frame::{Decoder, FRAME_HEADER_LEN, FRAME_PAYLOAD_MAX_DEFAULT};
pub use handshake::{LocalIdentity, check_hello};
pub use message::{
    Ack, AckWanted, ArchiveAck, ArchiveChunk, Channel, GapRequest, Heartbeat, Hello, Kind, Message,
    Position, RelayWord, StandbyStatus, TargetWord, Welcome, Write, WriteKind, ZERO_TAIL_MAX,
    zero_tail,
};
pub use observer::{FastStartMode, ObserverPing, ObserverPong};
pub use roles::{HISTORY_MAX, IncarnationRecord, Probe, RelaySeal, RoleInfo, WireRole};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 9;
/// The first version whose `Heartbeat` may carry a `RelayWord`: sent only to a peer whose
/// `Welcome` says this or later.
pub const RELAY_WORD_VERSION_MIN: u16 = 9;
/// The oldest version it still accepts from a peer. (Version 2 added member names, the
/// incarnation history in `Hello`, structured `Error`s, `Probe`/`RoleInfo` and the data
/// copy; a version 1 peer cannot take part in role transitions. Version 3 added compressed
/// frames, which a primary sends only to a standby whose `Welcome` says version 3 or later, so
/// a version 2 peer still works with this build, uncompressed. Version 4 added archive
/// connections, version 5 `TrimmedWrite`: a primary opens the one and sends the other only to a
/// standby whose `Welcome` says so. Version 6 changed the observer's ping and the members'
/// answer (the failover request names what it fails over from, the ping carries the
/// observer's settings, the answer says whether a refusal is final and whether fast-start
/// failover runs): observers and members must be upgraded together. Version 7 added
/// `Hello::relay_of`, sent only by a member that forwards redo (cascading): a version 6 member
/// refuses such a hello as malformed, and takes a primary's as before. Version 8 added
/// `RelaySeal`, sent only by a failover target to the member it receives from: a version 7
/// relay refuses it as malformed, and the target then fails over as it would without the
/// relay's tail. Version 9 added `Heartbeat::relay` (the primary's word for the fast-start
/// targets behind a relay, and the relay's silence of its primary), trailing, sent only to a
/// peer whose `Welcome` says version 9: an older peer is sent the version 8 heartbeat, and its
/// targets behind the relay are never called synchronized nor told of an observer.)
pub const PROTOCOL_VERSION_MIN: u16 = 2;
/// Longest text field (names, messages).
pub const TEXT_MAX: usize = 4096;
/// Most names in one list field (members of a configuration are at most 10).
pub const NAMES_MAX: usize = 16;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_compress;
