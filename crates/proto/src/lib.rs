//! The redo transport wire protocol, sans-IO: messages, their encoding, and the handshake's
//! rules. `docs/wire-protocol.md` is the byte-exact description; this crate is its only
//! implementation.
//!
//! *Architecture Invariant*: this crate does no I/O and reads no clock. Times travel as fields
//! the caller fills in. Decoding never panics and never allocates more than a frame's bounded
//! length: "need more bytes" is `Ok(None)`, anything malformed is a `ProtoError` naming it.

use std::fmt;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// The oldest version it still accepts from a peer.
pub const PROTOCOL_VERSION_MIN: u16 = 1;
/// Bytes of a frame header.
pub const FRAME_HEADER_LEN: usize = 16;
/// Default bound on a frame's payload: a redo write is at most the log buffer (plus unit
/// headers), an archive chunk is chosen by the sender.
pub const FRAME_PAYLOAD_MAX_DEFAULT: usize = 64 << 20;
/// Longest text field (names, messages).
pub const TEXT_MAX: usize = 4096;

const MAGIC: u32 = u32::from_le_bytes(*b"RGWP");

// Format of a frame (little-endian):
// { magic: u32 "RGWP" | length: u32 (payload bytes) | kind: u8 | reserved: [u8; 3]
// | crc32c: u32 (over bytes 8..12 and the payload) | payload: [u8; length] }

/// Message kinds on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Hello = 1,
    Welcome = 2,
    Write = 3,
    Ack = 4,
    Heartbeat = 5,
    StandbyStatus = 6,
    ArchiveChunk = 7,
    ArchiveAck = 8,
    GapRequest = 9,
    Error = 10,
}

impl Kind {
    fn from_u8(value: u8) -> Option<Kind> {
        Some(match value {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Write,
            4 => Kind::Ack,
            5 => Kind::Heartbeat,
            6 => Kind::StandbyStatus,
            7 => Kind::ArchiveChunk,
            8 => Kind::ArchiveAck,
            9 => Kind::GapRequest,
            10 => Kind::Error,
            _ => return None,
        })
    }
}

/// Which connection of a destination this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Channel {
    /// Handshake, catch-up and ASYNC streaming, heartbeats, gap shipping.
    Control = 1,
    /// One redo write at a time, each acknowledged: the SYNC path, driven by the log writer.
    Sync = 2,
}

/// What a write's sender wants back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AckWanted {
    /// No acknowledgement (ASYNC streaming; the standby reports progress in status messages).
    None = 0,
    /// Once received (NOAFFIRM).
    Received = 1,
    /// Once durable on the standby (AFFIRM).
    Durable = 2,
}

/// What the bytes of a write are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WriteKind {
    /// Redo units.
    Units = 1,
    /// The open header block: a new log begins.
    OpenHeader = 2,
    /// The closed header block: the log ends (the primary switched away from it).
    ClosedHeader = 3,
}

/// The primary's first frame on every connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub version_min: u16,
    pub database_id: u64,
    pub incarnation: u32,
    pub thread: u16,
    pub channel: Channel,
    /// The destination's name in the primary's configuration.
    pub destination: String,
    pub block_size: u32,
    pub log_file_size: u64,
    pub groups: u32,
    pub primary_time_us: u64,
}

/// Where a standby is, as it tells its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Every log up to this sequence is complete on the standby (archived), with no gap.
    pub complete_through_seq: u64,
    /// The next log the standby needs (the one being received, or the one after its newest
    /// closed log; 1 when it has none) and the durable end of what it holds of it.
    pub current_seq: u64,
    pub current_offset: u64,
    /// The highest SCN applied to the standby's data.
    pub applied_scn: u64,
}

/// The standby's answer to a hello it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub version: u16,
    /// The database the standby protects: the hello's, once checked (or adopted by a new
    /// standby).
    pub database_id: u64,
    pub position: Position,
    pub standby_time_us: u64,
}

/// Redo bytes to write at `offset` of log `seq`, exactly as the primary wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub write_id: u64,
    pub seq: u64,
    pub offset: u64,
    pub kind: WriteKind,
    pub ack: AckWanted,
    /// When the log writer made the write (for pieces read back from the log files: when
    /// they were sent).
    pub primary_time_us: u64,
    /// The last SCN these bytes hold (for a header from the log writer: the last SCN before
    /// the log; 0 for pieces read back from the log files).
    pub last_scn: u64,
    /// Every SCN at or below this is durable on the primary.
    pub primary_durable_scn: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub write_id: u64,
    pub seq: u64,
    /// The standby holds log `seq` up to here (received, or durable if `durable`).
    pub end_offset: u64,
    pub durable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    pub primary_time_us: u64,
    /// The last SCN the primary handed out, and the last durable one.
    pub current_scn: u64,
    pub durable_scn: u64,
    pub current_seq: u64,
    pub current_offset: u64,
    /// The primary's measure of this destination's transport lag.
    pub transport_lag_us: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandbyStatus {
    pub position: Position,
    pub apply_lag_us: u64,
    pub standby_time_us: u64,
}

/// A piece of a whole (archived) log: gap resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveChunk {
    pub seq: u64,
    pub offset: u64,
    /// The whole log's length (its end of redo).
    pub total_len: u64,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveAck {
    pub seq: u64,
    /// The log is complete and archived on the standby.
    pub complete: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapRequest {
    pub from_seq: u64,
    pub to_seq: u64,
}

/// Why a peer is refused or a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    VersionMismatch = 1,
    WrongDatabase = 2,
    NotAStandby = 3,
    LayoutMismatch = 4,
    Malformed = 5,
    Busy = 6,
    Internal = 7,
    ShuttingDown = 8,
}

impl ErrorCode {
    fn from_u16(value: u16) -> ErrorCode {
        match value {
            1 => ErrorCode::VersionMismatch,
            2 => ErrorCode::WrongDatabase,
            3 => ErrorCode::NotAStandby,
            4 => ErrorCode::LayoutMismatch,
            5 => ErrorCode::Malformed,
            6 => ErrorCode::Busy,
            8 => ErrorCode::ShuttingDown,
            _ => ErrorCode::Internal,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMessage {
    pub code: ErrorCode,
    pub message: String,
}

/// Every message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello(Hello),
    Welcome(Welcome),
    Write(Write),
    Ack(Ack),
    Heartbeat(Heartbeat),
    StandbyStatus(StandbyStatus),
    ArchiveChunk(ArchiveChunk),
    ArchiveAck(ArchiveAck),
    GapRequest(GapRequest),
    Error(ErrorMessage),
}

/// A frame or a message that cannot be decoded, or a peer that must be refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("not a redoguard redo transport frame (bad magic {0:#010x})")]
    Magic(u32),
    #[error("frame of {length} bytes exceeds the limit of {max}")]
    TooLong { length: usize, max: usize },
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("malformed {kind:?} message: {reason}")]
    Malformed { kind: Kind, reason: String },
}

impl Message {
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello(_) => Kind::Hello,
            Message::Welcome(_) => Kind::Welcome,
            Message::Write(_) => Kind::Write,
            Message::Ack(_) => Kind::Ack,
            Message::Heartbeat(_) => Kind::Heartbeat,
            Message::StandbyStatus(_) => Kind::StandbyStatus,
            Message::ArchiveChunk(_) => Kind::ArchiveChunk,
            Message::ArchiveAck(_) => Kind::ArchiveAck,
            Message::GapRequest(_) => Kind::GapRequest,
            Message::Error(_) => Kind::Error,
        }
    }

    /// Appends the whole frame for this message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
        let mut w = Writer(out);
        match self {
            Message::Hello(hello) => {
                w.u16(hello.version);
                w.u16(hello.version_min);
                w.u64(hello.database_id);
                w.u32(hello.incarnation);
                w.u16(hello.thread);
                w.u8(hello.channel as u8);
                w.u32(hello.block_size);
                w.u64(hello.log_file_size);
                w.u32(hello.groups);
                w.u64(hello.primary_time_us);
                w.text(&hello.destination);
            }
            Message::Welcome(welcome) => {
                w.u16(welcome.version);
                w.u64(welcome.database_id);
                w.position(&welcome.position);
                w.u64(welcome.standby_time_us);
            }
            Message::Write(write) => {
                w.u64(write.write_id);
                w.u64(write.seq);
                w.u64(write.offset);
                w.u8(write.kind as u8);
                w.u8(write.ack as u8);
                w.u64(write.primary_time_us);
                w.u64(write.last_scn);
                w.u64(write.primary_durable_scn);
                w.0.extend_from_slice(&write.bytes);
            }
            Message::Ack(ack) => {
                w.u64(ack.write_id);
                w.u64(ack.seq);
                w.u64(ack.end_offset);
                w.u8(u8::from(ack.durable));
            }
            Message::Heartbeat(beat) => {
                for value in [
                    beat.primary_time_us,
                    beat.current_scn,
                    beat.durable_scn,
                    beat.current_seq,
                    beat.current_offset,
                    beat.transport_lag_us,
                ] {
                    w.u64(value);
                }
            }
            Message::StandbyStatus(status) => {
                w.position(&status.position);
                w.u64(status.apply_lag_us);
                w.u64(status.standby_time_us);
            }
            Message::ArchiveChunk(chunk) => {
                w.u64(chunk.seq);
                w.u64(chunk.offset);
                w.u64(chunk.total_len);
                w.0.extend_from_slice(&chunk.bytes);
            }
            Message::ArchiveAck(ack) => {
                w.u64(ack.seq);
                w.u8(u8::from(ack.complete));
            }
            Message::GapRequest(gap) => {
                w.u64(gap.from_seq);
                w.u64(gap.to_seq);
            }
            Message::Error(error) => {
                w.u16(error.code as u16);
                w.text(&error.message);
            }
        }
        let length = out.len() - start - FRAME_HEADER_LEN;
        let header = &mut out[start..start + FRAME_HEADER_LEN];
        header[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        header[4..8].copy_from_slice(&(length as u32).to_le_bytes());
        header[8] = self.kind() as u8;
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&out[start + 8..start + 12]),
            &out[start + FRAME_HEADER_LEN..],
        );
        out[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
    }

    /// The frame for this message.
    pub fn to_frame(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Decodes frames from a byte stream, refusing any frame longer than `payload_max` before
/// reading its payload.
#[derive(Debug, Clone, Copy)]
pub struct Decoder {
    pub payload_max: usize,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder { payload_max: FRAME_PAYLOAD_MAX_DEFAULT }
    }
}

impl Decoder {
    /// If `buffer` starts with a frame header, the total length of its frame (header +
    /// payload): how many bytes to have before `decode` can succeed. Checks the magic and the
    /// length bound first, so a lying length is refused before anything is read for it.
    pub fn frame_len(&self, buffer: &[u8]) -> Result<Option<usize>, ProtoError> {
        if buffer.len() < FRAME_HEADER_LEN {
            // Refuse garbage as early as the magic is readable.
            if buffer.len() >= 4 {
                let magic = u32::from_le_bytes(buffer[0..4].try_into().expect("4 bytes"));
                if magic != MAGIC {
                    return Err(ProtoError::Magic(magic));
                }
            }
            return Ok(None);
        }
        let magic = u32::from_le_bytes(buffer[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(ProtoError::Magic(magic));
        }
        let length = u32::from_le_bytes(buffer[4..8].try_into().expect("4 bytes")) as usize;
        if length > self.payload_max {
            return Err(ProtoError::TooLong { length, max: self.payload_max });
        }
        Ok(Some(FRAME_HEADER_LEN + length))
    }

    /// Decodes the frame at the start of `buffer`: `Ok(None)` if it is not all there yet,
    /// else the message and the bytes it took.
    pub fn decode(&self, buffer: &[u8]) -> Result<Option<(Message, usize)>, ProtoError> {
        let Some(total) = self.frame_len(buffer)? else { return Ok(None) };
        if buffer.len() < total {
            return Ok(None);
        }
        let crc = u32::from_le_bytes(buffer[12..16].try_into().expect("4 bytes"));
        let payload = &buffer[FRAME_HEADER_LEN..total];
        if crc32c::crc32c_append(crc32c::crc32c(&buffer[8..12]), payload) != crc {
            return Err(ProtoError::Checksum);
        }
        let kind = Kind::from_u8(buffer[8]).ok_or(ProtoError::UnknownKind(buffer[8]))?;
        let message = decode_payload(kind, payload)?;
        Ok(Some((message, total)))
    }
}

fn decode_payload(kind: Kind, payload: &[u8]) -> Result<Message, ProtoError> {
    let mut r = Reader { bytes: payload, at: 0, kind };
    let message = match kind {
        Kind::Hello => {
            let version = r.u16()?;
            let version_min = r.u16()?;
            let database_id = r.u64()?;
            let incarnation = r.u32()?;
            let thread = r.u16()?;
            let channel = match r.u8()? {
                1 => Channel::Control,
                2 => Channel::Sync,
                other => return Err(r.bad(format!("unknown channel {other}"))),
            };
            let block_size = r.u32()?;
            let log_file_size = r.u64()?;
            let groups = r.u32()?;
            let primary_time_us = r.u64()?;
            let destination = r.text()?;
            Message::Hello(Hello {
                version,
                version_min,
                database_id,
                incarnation,
                thread,
                channel,
                destination,
                block_size,
                log_file_size,
                groups,
                primary_time_us,
            })
        }
        Kind::Welcome => Message::Welcome(Welcome {
            version: r.u16()?,
            database_id: r.u64()?,
            position: r.position()?,
            standby_time_us: r.u64()?,
        }),
        Kind::Write => {
            let write_id = r.u64()?;
            let seq = r.u64()?;
            let offset = r.u64()?;
            let kind = match r.u8()? {
                1 => WriteKind::Units,
                2 => WriteKind::OpenHeader,
                3 => WriteKind::ClosedHeader,
                other => return Err(r.bad(format!("unknown write kind {other}"))),
            };
            let ack = match r.u8()? {
                0 => AckWanted::None,
                1 => AckWanted::Received,
                2 => AckWanted::Durable,
                other => return Err(r.bad(format!("unknown acknowledgement request {other}"))),
            };
            let primary_time_us = r.u64()?;
            let last_scn = r.u64()?;
            let primary_durable_scn = r.u64()?;
            let bytes = r.rest();
            if bytes.is_empty() {
                return Err(r.bad("a write carries no bytes".to_string()));
            }
            Message::Write(Write {
                write_id,
                seq,
                offset,
                kind,
                ack,
                primary_time_us,
                last_scn,
                primary_durable_scn,
                bytes,
            })
        }
        Kind::Ack => Message::Ack(Ack {
            write_id: r.u64()?,
            seq: r.u64()?,
            end_offset: r.u64()?,
            durable: r.bool()?,
        }),
        Kind::Heartbeat => Message::Heartbeat(Heartbeat {
            primary_time_us: r.u64()?,
            current_scn: r.u64()?,
            durable_scn: r.u64()?,
            current_seq: r.u64()?,
            current_offset: r.u64()?,
            transport_lag_us: r.u64()?,
        }),
        Kind::StandbyStatus => Message::StandbyStatus(StandbyStatus {
            position: r.position()?,
            apply_lag_us: r.u64()?,
            standby_time_us: r.u64()?,
        }),
        Kind::ArchiveChunk => {
            let seq = r.u64()?;
            let offset = r.u64()?;
            let total_len = r.u64()?;
            let bytes = r.rest();
            if bytes.is_empty()
                || offset.checked_add(bytes.len() as u64).is_none_or(|end| end > total_len)
            {
                return Err(r.bad(format!(
                    "chunk of {} bytes at {offset} does not fit a log of {total_len}",
                    bytes.len()
                )));
            }
            Message::ArchiveChunk(ArchiveChunk { seq, offset, total_len, bytes })
        }
        Kind::ArchiveAck => Message::ArchiveAck(ArchiveAck { seq: r.u64()?, complete: r.bool()? }),
        Kind::GapRequest => {
            let gap = GapRequest { from_seq: r.u64()?, to_seq: r.u64()? };
            if gap.from_seq == 0 || gap.to_seq < gap.from_seq {
                return Err(r.bad(format!("gap {}..={} is empty", gap.from_seq, gap.to_seq)));
            }
            Message::GapRequest(gap)
        }
        Kind::Error => {
            Message::Error(ErrorMessage { code: ErrorCode::from_u16(r.u16()?), message: r.text()? })
        }
    };
    if r.at != payload.len() {
        return Err(r.bad(format!("{} bytes after the message", payload.len() - r.at)));
    }
    Ok(message)
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u16(&mut self, value: u16) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn text(&mut self, text: &str) {
        let mut end = text.len().min(TEXT_MAX);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let bytes = &text.as_bytes()[..end];
        self.u16(bytes.len() as u16);
        self.0.extend_from_slice(bytes);
    }
    fn position(&mut self, position: &Position) {
        for value in [
            position.complete_through_seq,
            position.current_seq,
            position.current_offset,
            position.applied_scn,
        ] {
            self.u64(value);
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    kind: Kind,
}

impl Reader<'_> {
    fn bad(&self, reason: String) -> ProtoError {
        ProtoError::Malformed { kind: self.kind, reason }
    }
    fn take(&mut self, len: usize) -> Result<&[u8], ProtoError> {
        if self.bytes.len() - self.at < len {
            return Err(self.bad(format!("truncated at byte {}", self.at)));
        }
        let slice = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(slice)
    }
    fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.bad(format!("{other} is not a boolean"))),
        }
    }
    fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn text(&mut self) -> Result<String, ProtoError> {
        let len = self.u16()? as usize;
        if len > TEXT_MAX {
            return Err(self.bad(format!("text of {len} bytes is over {TEXT_MAX}")));
        }
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.bad("text is not UTF-8".to_string()))
    }
    fn position(&mut self) -> Result<Position, ProtoError> {
        Ok(Position {
            complete_through_seq: self.u64()?,
            current_seq: self.u64()?,
            current_offset: self.u64()?,
            applied_scn: self.u64()?,
        })
    }
    fn rest(&mut self) -> Vec<u8> {
        let rest = self.bytes[self.at..].to_vec();
        self.at = self.bytes.len();
        rest
    }
}

/// Who the local side is, for the handshake's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalIdentity {
    /// 0 for a standby that has no database yet.
    pub database_id: u64,
    pub block_size: u32,
    pub log_file_size: u64,
}

/// A standby's decision about a primary's hello: `Ok` to accept (adopting the primary's
/// database if it has none), or the error to send before closing.
pub fn check_hello(hello: &Hello, local: &LocalIdentity) -> Result<(), ErrorMessage> {
    if hello.version < PROTOCOL_VERSION_MIN || hello.version_min > PROTOCOL_VERSION {
        return Err(ErrorMessage {
            code: ErrorCode::VersionMismatch,
            message: format!(
                "protocol version {} (accepting {}..={}) is not compatible with this standby's {}..={}",
                hello.version,
                hello.version_min,
                hello.version,
                PROTOCOL_VERSION_MIN,
                PROTOCOL_VERSION
            ),
        });
    }
    if local.database_id != 0 && hello.database_id != local.database_id {
        return Err(ErrorMessage {
            code: ErrorCode::WrongDatabase,
            message: format!(
                "this standby protects database {:016x}; a primary of database {:016x} was refused",
                local.database_id, hello.database_id
            ),
        });
    }
    if hello.block_size != local.block_size || hello.log_file_size != local.log_file_size {
        return Err(ErrorMessage {
            code: ErrorCode::LayoutMismatch,
            message: format!(
                "the primary's logs have block size {} and size {}; this standby's logs have {} and {}: configure the same redo.block_size and redo.log_file_size on both",
                hello.block_size, hello.log_file_size, local.block_size, local.log_file_size
            ),
        });
    }
    Ok(())
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests;
