//! The messages of redo transport and what their payloads hold, and the encoding of every
//! message kind's payload (the role and copy messages are in `roles` and `copy`).

use crate::copy::{CopyBegin, CopyChunk, CopyEnd, CopyRequest};
use crate::error::{ErrorCode, ErrorMessage, ProtoError};
use crate::frame::{Reader, Writer};
use crate::observer::{ObserverPing, ObserverPong};
use crate::roles::{self, IncarnationRecord, Probe, RelaySeal, RoleInfo};

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
    Probe = 11,
    RoleInfo = 12,
    CopyRequest = 13,
    CopyBegin = 14,
    CopyChunk = 15,
    CopyEnd = 16,
    ObserverPing = 17,
    ObserverPong = 18,
    /// A `Write` whose trailing zero bytes are left out (version 5): see [`Write::zero_tail`].
    TrimmedWrite = 19,
    /// A failover target asks the member it receives from to stop taking the old primary's
    /// redo and say where its own ends (version 8): see [`RelaySeal`].
    RelaySeal = 20,
}

impl Kind {
    pub(crate) fn from_u8(value: u8) -> Option<Kind> {
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
            11 => Kind::Probe,
            12 => Kind::RoleInfo,
            13 => Kind::CopyRequest,
            14 => Kind::CopyBegin,
            15 => Kind::CopyChunk,
            16 => Kind::CopyEnd,
            17 => Kind::ObserverPing,
            18 => Kind::ObserverPong,
            19 => Kind::TrimmedWrite,
            20 => Kind::RelaySeal,
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
    /// Pieces of whole archived logs only (`ArchiveChunk`, answered by `ArchiveAck`): one of a
    /// destination's `max_connections` parallel connections for gap resolution and catch-up
    /// (version 4; a primary opens one only to a standby whose `Welcome` says version 4).
    Archive = 3,
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

/// The primary's first frame on every redo connection.
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
    /// The primary's own member name (empty for a primary in no named configuration).
    pub member: String,
    /// The newest entries of the primary's incarnation history, oldest first (at most
    /// `HISTORY_MAX`; incarnation 1 has no entry).
    pub history: Vec<IncarnationRecord>,
    /// Version 7, cascading: the primary whose redo the sender forwards (the sender, `member`,
    /// is then a standby or far sync that a redo route names); empty when the sender is that
    /// primary. Encoded only when not empty, so a primary's hello is as in version 6.
    pub relay_of: String,
}

/// Where a standby is, as it tells its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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
    /// How many zero bytes follow `bytes` in the write without being sent (version 5: the
    /// zero padding of the write's last unit, most of a small write). 0: `bytes` is the whole
    /// write, sent as a `Write`; above 0 the message is a `TrimmedWrite`, at most
    /// [`ZERO_TAIL_MAX`]. [`Write::untrimmed`] puts the zeros back.
    pub zero_tail: u32,
}

/// The longest zero tail a `TrimmedWrite` may leave out: the largest redo unit (64 KiB). Every
/// unit begins with its non-zero magic, so a write's trailing zeros lie within its last unit;
/// the bound keeps what a peer can make the receiver allocate within a frame's length plus
/// this.
pub const ZERO_TAIL_MAX: u32 = 64 << 10;

impl Write {
    /// The write's length: the bytes sent and the zero tail left out.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64 + u64::from(self.zero_tail)
    }

    /// Whether the write holds no byte (never so on the wire).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The write with its zero tail put back: `bytes` is the whole write, `zero_tail` 0.
    pub fn untrimmed(mut self) -> Write {
        let len = self.bytes.len() + self.zero_tail as usize;
        self.bytes.resize(len, 0);
        self.zero_tail = 0;
        self
    }
}

/// How many trailing zero bytes of a write of `bytes` may go unsent as its zero tail: all of
/// them up to [`ZERO_TAIL_MAX`], leaving at least one byte (a write on the wire is never
/// empty).
pub fn zero_tail(bytes: &[u8]) -> usize {
    let most = bytes.len().saturating_sub(1).min(ZERO_TAIL_MAX as usize);
    let candidates = &bytes[bytes.len() - most..];
    let mut tail = 0;
    // 64 bytes at a time while they are all zero (an OR the compiler vectorises: a 4 KiB
    // unit's padding is scanned in a few hundred cycles), then byte by byte.
    for chunk in candidates.rchunks_exact(64) {
        if chunk.iter().fold(0u8, |any, &byte| any | byte) != 0 {
            break;
        }
        tail += 64;
    }
    tail + candidates[..most - tail].iter().rev().take_while(|&&byte| byte == 0).count()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub write_id: u64,
    pub seq: u64,
    /// The standby holds log `seq` up to here (received, or durable if `durable`).
    pub end_offset: u64,
    pub durable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub primary_time_us: u64,
    /// The last SCN the primary handed out, and the last durable one.
    pub current_scn: u64,
    pub durable_scn: u64,
    pub current_seq: u64,
    pub current_offset: u64,
    /// The primary's measure of this destination's transport lag.
    pub transport_lag_us: u64,
    /// Whether this destination is caught up: SYNCHRONIZED (SYNC) or STREAMING (ASYNC).
    pub caught_up: bool,
    /// The observer the primary takes fast-start failover decisions from (empty: none): the
    /// standby takes a failover only from it.
    pub observer: String,
    /// Version 9, only when there is something to say, and only to a peer whose `Welcome` says
    /// version 9 or later: the primary's word for the fast-start targets behind this relay
    /// (primary → far sync), or how long ago the relay last heard its primary (forwarder →
    /// cascaded standby). A version 8 peer would refuse the trailing bytes as malformed, so it
    /// is never sent them.
    pub relay: Option<RelayWord>,
}

/// What a `Heartbeat` says through a relay (version 9; docs/fast-start-failover.md, "Targets
/// behind a far sync").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RelayWord {
    /// Forwarder → standby: milliseconds since this relay last heard its primary (0 from a
    /// primary).
    pub primary_silence_ms: u64,
    /// Primary → relay: for each fast-start target this relay forwards to, the observer it may
    /// take a failover from and whether the primary calls it synchronized. The relay passes
    /// each on, in its own heartbeats' `observer` and `caught_up`, to that target alone.
    pub targets: Vec<TargetWord>,
}

/// The primary's word for one fast-start target behind a relay.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetWord {
    pub member: String,
    /// The observer it may take a failover from (empty: none).
    pub observer: String,
    /// Synchronized (Maximum Availability: its relay shipped SYNC holds every commit the
    /// primary acknowledged without it), or caught up.
    pub caught_up: bool,
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
    Probe(Probe),
    RoleInfo(RoleInfo),
    CopyRequest(CopyRequest),
    CopyBegin(CopyBegin),
    CopyChunk(CopyChunk),
    CopyEnd(CopyEnd),
    ObserverPing(ObserverPing),
    ObserverPong(ObserverPong),
    RelaySeal(RelaySeal),
}

impl Message {
    pub fn kind(&self) -> Kind {
        match self {
            Message::Hello(_) => Kind::Hello,
            Message::Welcome(_) => Kind::Welcome,
            Message::Write(write) if write.zero_tail > 0 => Kind::TrimmedWrite,
            Message::Write(_) => Kind::Write,
            Message::Ack(_) => Kind::Ack,
            Message::Heartbeat(_) => Kind::Heartbeat,
            Message::StandbyStatus(_) => Kind::StandbyStatus,
            Message::ArchiveChunk(_) => Kind::ArchiveChunk,
            Message::ArchiveAck(_) => Kind::ArchiveAck,
            Message::GapRequest(_) => Kind::GapRequest,
            Message::Error(_) => Kind::Error,
            Message::Probe(_) => Kind::Probe,
            Message::RoleInfo(_) => Kind::RoleInfo,
            Message::CopyRequest(_) => Kind::CopyRequest,
            Message::CopyBegin(_) => Kind::CopyBegin,
            Message::CopyChunk(_) => Kind::CopyChunk,
            Message::CopyEnd(_) => Kind::CopyEnd,
            Message::ObserverPing(_) => Kind::ObserverPing,
            Message::ObserverPong(_) => Kind::ObserverPong,
            Message::RelaySeal(_) => Kind::RelaySeal,
        }
    }
}

pub(crate) fn encode_payload(message: &Message, w: &mut Writer<'_>) {
    match message {
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
            w.text(&hello.member);
            roles::encode_history(&hello.history, w);
            if !hello.relay_of.is_empty() {
                w.text(&hello.relay_of);
            }
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
            if write.zero_tail > 0 {
                w.u32(write.zero_tail);
            }
            w.bytes(&write.bytes);
        }
        Message::Ack(ack) => {
            w.u64(ack.write_id);
            w.u64(ack.seq);
            w.u64(ack.end_offset);
            w.bool(ack.durable);
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
            w.bool(beat.caught_up);
            w.text(&beat.observer);
            // Format (version 9, only when present): { primary_silence_ms u64 | count u16 |
            // count × { member text | observer text | caught_up bool } }
            if let Some(relay) = &beat.relay {
                w.u64(relay.primary_silence_ms);
                w.u16(relay.targets.len() as u16);
                for target in &relay.targets {
                    w.text(&target.member);
                    w.text(&target.observer);
                    w.bool(target.caught_up);
                }
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
            w.bytes(&chunk.bytes);
        }
        Message::ArchiveAck(ack) => {
            w.u64(ack.seq);
            w.bool(ack.complete);
        }
        Message::GapRequest(gap) => {
            w.u64(gap.from_seq);
            w.u64(gap.to_seq);
        }
        Message::Error(error) => {
            w.u16(error.code as u16);
            w.text(&error.message);
            w.u32(error.incarnation);
            w.text(&error.primary);
        }
        Message::Probe(probe) => probe.encode(w),
        Message::RoleInfo(info) => info.encode(w),
        Message::CopyRequest(request) => request.encode(w),
        Message::CopyBegin(begin) => begin.encode(w),
        Message::CopyChunk(chunk) => chunk.encode(w),
        Message::CopyEnd(end) => end.encode(w),
        Message::ObserverPing(ping) => ping.encode(w),
        Message::ObserverPong(pong) => pong.encode(w),
        Message::RelaySeal(seal) => seal.encode(w),
    }
}

pub(crate) fn decode_payload(kind: Kind, r: &mut Reader<'_>) -> Result<Message, ProtoError> {
    Ok(match kind {
        Kind::Hello => {
            let version = r.u16()?;
            let version_min = r.u16()?;
            let database_id = r.u64()?;
            let incarnation = r.u32()?;
            let thread = r.u16()?;
            let channel = match r.u8()? {
                1 => Channel::Control,
                2 => Channel::Sync,
                3 => Channel::Archive,
                other => return Err(r.bad(format!("unknown channel {other}"))),
            };
            let block_size = r.u32()?;
            let log_file_size = r.u64()?;
            let groups = r.u32()?;
            let primary_time_us = r.u64()?;
            let destination = r.text()?;
            let member = r.text()?;
            let history = roles::decode_history(r)?;
            let relay_of = if r.remaining() > 0 { r.text()? } else { String::new() };
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
                member,
                history,
                relay_of,
            })
        }
        Kind::Welcome => Message::Welcome(Welcome {
            version: r.u16()?,
            database_id: r.u64()?,
            position: r.position()?,
            standby_time_us: r.u64()?,
        }),
        Kind::Write | Kind::TrimmedWrite => {
            let trimmed = kind == Kind::TrimmedWrite;
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
            let zero_tail = if trimmed { r.u32()? } else { 0 };
            if trimmed && !(1..=ZERO_TAIL_MAX).contains(&zero_tail) {
                return Err(r.bad(format!(
                    "a trimmed write's zero tail of {zero_tail} bytes is outside 1..={ZERO_TAIL_MAX}"
                )));
            }
            // Room for the zero tail (at most ZERO_TAIL_MAX, checked above), which the receiver
            // puts back.
            let bytes = r.rest_with_room(zero_tail as usize);
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
                zero_tail,
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
            caught_up: r.bool()?,
            observer: r.text()?,
            relay: if r.remaining() > 0 { Some(decode_relay_word(r)?) } else { None },
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
        Kind::Error => Message::Error(ErrorMessage {
            code: ErrorCode::from_u16(r.u16()?),
            message: r.text()?,
            incarnation: r.u32()?,
            primary: r.text()?,
        }),
        Kind::Probe => Message::Probe(Probe::decode(r)?),
        Kind::RoleInfo => Message::RoleInfo(RoleInfo::decode(r)?),
        Kind::CopyRequest => Message::CopyRequest(CopyRequest::decode(r)?),
        Kind::CopyBegin => Message::CopyBegin(CopyBegin::decode(r)?),
        Kind::CopyChunk => Message::CopyChunk(CopyChunk::decode(r)?),
        Kind::CopyEnd => Message::CopyEnd(CopyEnd::decode(r)?),
        Kind::ObserverPing => Message::ObserverPing(ObserverPing::decode(r)?),
        Kind::ObserverPong => Message::ObserverPong(ObserverPong::decode(r)?),
        Kind::RelaySeal => Message::RelaySeal(RelaySeal::decode(r)?),
    })
}

/// A heartbeat's `RelayWord` (version 9).
fn decode_relay_word(r: &mut Reader<'_>) -> Result<RelayWord, ProtoError> {
    let primary_silence_ms = r.u64()?;
    let count = r.u16()? as usize;
    if count > crate::NAMES_MAX {
        return Err(r.bad(format!(
            "a heartbeat names {count} targets behind a relay; at most {}",
            crate::NAMES_MAX
        )));
    }
    let mut targets = Vec::with_capacity(count);
    for _ in 0..count {
        targets.push(TargetWord { member: r.text()?, observer: r.text()?, caught_up: r.bool()? });
    }
    Ok(RelayWord { primary_silence_ms, targets })
}
