//! What members tell each other about roles and incarnations: the incarnation history a
//! primary's hello carries (so that a standby can tell whether it may follow a primary of a
//! newer incarnation), `Probe` / `RoleInfo`, by which any member asks another who it is, and
//! `RelaySeal`, by which a failover target takes the tail its relay holds.

use crate::error::ProtoError;
use crate::frame::{Reader, Writer};
use crate::message::Position;

/// Most incarnation records a message carries: the newest ones. A member further behind than
/// that (64 failovers) must be rebuilt.
pub const HISTORY_MAX: usize = 64;

/// Where an incarnation began: the record a failover writes. Incarnation 1 (the database's
/// creation) has none.
// Format: { incarnation: u32 | parent: u32 | first_seq: u64 | first_scn: u64
// | prev_end_offset: u64 | prev_closed_here: u8 | created_us: u64 | member: text }
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct IncarnationRecord {
    pub incarnation: u32,
    /// The incarnation it branched from (always `incarnation - 1`).
    pub parent: u32,
    /// The first log of the new incarnation, and the first SCN it gives.
    pub first_seq: u64,
    pub first_scn: u64,
    /// Where the last log of the parent (`first_seq - 1`) ends on this branch.
    pub prev_end_offset: u64,
    /// Whether the new primary closed that log itself (it was still open on it, as a standby's
    /// log being received is): a member that holds it closed by the old primary is on the old
    /// branch even at the same end.
    pub prev_closed_here: bool,
    pub created_us: u64,
    /// The member that opened the incarnation (by failover).
    pub member: String,
}

/// A member's role, as it says on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WireRole {
    Primary = 1,
    Standby = 2,
}

/// "Who are you?": the first frame of a connection that only asks (a member confirming its
/// role after a restart, a reinstate fetching the new primary's history, an observer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The asking member (empty for a tool).
    pub member: String,
    pub time_us: u64,
}

/// "I fail over from `primary` of `incarnation`: take no more of its redo, and tell me where
/// yours ends": the first frame of a connection from a failover target to the member it
/// receives its redo from (its far sync or cascading standby, version 8). The relay stops
/// taking that primary's redo of that incarnation (or older), makes what it received durable
/// and answers with its `RoleInfo`, whose position is then its final end: every write the
/// old primary had acknowledged by it is before it, and it forwards all of it to the target.
// Format: { member: text | primary: text | incarnation: u32 | time_us: u64 }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelaySeal {
    /// The asking member (the failover target).
    pub member: String,
    /// The primary it fails over from; empty if the target has heard from none since it
    /// started: then the one the relay receives from (the answer's `primary` names it).
    pub primary: String,
    pub incarnation: u32,
    pub time_us: u64,
}

impl RelaySeal {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.member);
        w.text(&self.primary);
        w.u32(self.incarnation);
        w.u64(self.time_us);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<RelaySeal, ProtoError> {
        Ok(RelaySeal {
            member: r.text()?,
            primary: r.text()?,
            incarnation: r.u32()?,
            time_us: r.u64()?,
        })
    }
}

/// The answer to a `Probe`: who this member is, in which incarnation, and where its redo is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RoleInfo {
    pub member: String,
    pub role: WireRole,
    pub database_id: u64,
    pub incarnation: u32,
    /// Non-zero: this member knows of that newer incarnation, which it is not part of (a
    /// failed-over primary, or a standby left on the old branch): it must be reinstated.
    pub fenced_incarnation: u32,
    /// The member it follows (a standby), or that is primary in `fenced_incarnation`.
    pub primary: String,
    /// Where its redo is (for a primary: `current_seq`/`current_offset` is its durable end).
    pub position: Position,
    /// Every SCN at or below this is durable here.
    pub durable_scn: u64,
    pub time_us: u64,
    /// Its incarnation history, newest `HISTORY_MAX` records, oldest first.
    pub history: Vec<IncarnationRecord>,
}

pub(crate) fn encode_history(history: &[IncarnationRecord], w: &mut Writer<'_>) {
    let newest = &history[history.len().saturating_sub(HISTORY_MAX)..];
    w.u16(newest.len() as u16);
    for record in newest {
        w.u32(record.incarnation);
        w.u32(record.parent);
        w.u64(record.first_seq);
        w.u64(record.first_scn);
        w.u64(record.prev_end_offset);
        w.bool(record.prev_closed_here);
        w.u64(record.created_us);
        w.text(&record.member);
    }
}

/// The fewest bytes an incarnation record takes on the wire: its fixed fields (4 + 4 + 8 + 8 + 8
/// + 1 + 8) and an empty member name's length (2).
const HISTORY_RECORD_MIN_BYTES: usize = 43;

pub(crate) fn decode_history(r: &mut Reader<'_>) -> Result<Vec<IncarnationRecord>, ProtoError> {
    let count = r.u16()? as usize;
    if count > HISTORY_MAX {
        return Err(r.bad(format!("{count} incarnation records, more than {HISTORY_MAX}")));
    }
    // A count the payload cannot hold is a lie, refused before anything is allocated for it.
    if count > r.remaining() / HISTORY_RECORD_MIN_BYTES {
        return Err(
            r.bad(format!("{count} incarnation records cannot fit in {} bytes", r.remaining()))
        );
    }
    let mut history: Vec<IncarnationRecord> = Vec::with_capacity(count);
    for _ in 0..count {
        let record = IncarnationRecord {
            incarnation: r.u32()?,
            parent: r.u32()?,
            first_seq: r.u64()?,
            first_scn: r.u64()?,
            prev_end_offset: r.u64()?,
            prev_closed_here: r.bool()?,
            created_us: r.u64()?,
            member: r.text()?,
        };
        if record.incarnation < 2 || record.parent != record.incarnation - 1 {
            return Err(r.bad(format!(
                "incarnation {} cannot branch from {}",
                record.incarnation, record.parent
            )));
        }
        if history.last().is_some_and(|last| last.incarnation + 1 != record.incarnation) {
            return Err(r.bad("incarnation records are not consecutive".to_string()));
        }
        history.push(record);
    }
    Ok(history)
}

impl Probe {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.member);
        w.u64(self.time_us);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Probe, ProtoError> {
        Ok(Probe { member: r.text()?, time_us: r.u64()? })
    }
}

impl RoleInfo {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.member);
        w.u8(self.role as u8);
        w.u64(self.database_id);
        w.u32(self.incarnation);
        w.u32(self.fenced_incarnation);
        w.text(&self.primary);
        w.position(&self.position);
        w.u64(self.durable_scn);
        w.u64(self.time_us);
        encode_history(&self.history, w);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<RoleInfo, ProtoError> {
        let member = r.text()?;
        let role = match r.u8()? {
            1 => WireRole::Primary,
            2 => WireRole::Standby,
            other => return Err(r.bad(format!("unknown role {other}"))),
        };
        Ok(RoleInfo {
            member,
            role,
            database_id: r.u64()?,
            incarnation: r.u32()?,
            fenced_incarnation: r.u32()?,
            primary: r.text()?,
            position: r.position()?,
            durable_scn: r.u64()?,
            time_us: r.u64()?,
            history: decode_history(r)?,
        })
    }
}
