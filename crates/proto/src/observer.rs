//! What an observer (fast-start failover, `docs/fast-start-failover.md`) and the members say
//! to each other, on a member's redo listener: the observer pings every member on a
//! connection it keeps open; each answers with its role and its fast-start failover state.
//! The ping carries the observer's decisions: to let a primary go on without some of its
//! targets (`grant_unsync`), to fail over to a target (`failover`), to tell an old primary it
//! has been failed over (`newer_incarnation`), and to a primary which targets name this
//! observer (`following`: how an observer hand-over completes).

use crate::error::ProtoError;
use crate::frame::{Reader, Writer};
use crate::roles::RoleInfo;

/// The observer's ping.
// Format (version 6): { observer: text | time_us: u64 | lease: u8 | grant_unsync: names
// | failover: u8 | newer_incarnation: u32 | new_primary: text | following: names
// | failover_from: text | failover_incarnation: u32 | threshold_ms: u64 | lag_limit_ms: u64
// | protection: u8 }
// (names: { count: u8 (at most 16) | count × text }; text: { len: u16 | UTF-8 })
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ObserverPing {
    pub observer: String,
    pub time_us: u64,
    /// To the primary: the observer still sees it as the primary. Only such a ping renews the
    /// primary's lease (its right to acknowledge commits no SYNC target has).
    pub lease: bool,
    /// To the primary: it may go on acknowledging commits that these targets have not
    /// acknowledged (the observer has recorded, before sending this, that it will not fail
    /// over to them until the primary calls them synchronized again). Only the active
    /// observer grants, and only targets the primary asked for (`ObserverPong::wants_unsync`).
    pub grant_unsync: Vec<String>,
    /// To the target: become the primary (a failover) of the incarnation after
    /// `failover_incarnation`, in place of `failover_from`.
    pub failover: bool,
    /// To an old primary: it has been failed over, in this incarnation, to `new_primary`
    /// (0: no such news).
    pub newer_incarnation: u32,
    pub new_primary: String,
    /// To the primary: the targets that answered this observer recently naming it as the
    /// observer their primary announced (in heartbeats). A primary hands its decisions to a
    /// new observer only once every target it ever announced an observer to is here, so that
    /// no target still takes a failover from the old one.
    pub following: Vec<String>,
    /// The primary and incarnation a failover request fails over from (a target that follows
    /// another primary, or is of another incarnation, refuses it).
    pub failover_from: String,
    pub failover_incarnation: u32,
    /// The observer's fast-start failover settings, which must be the member's own (a member
    /// refuses a ping that disagrees, naming the field): `threshold`, `lag_limit` and the
    /// protection mode (1: Maximum Availability, 2: Maximum Performance).
    pub threshold_ms: u64,
    pub lag_limit_ms: u64,
    pub protection: u8,
}

/// Whether fast-start failover runs on a member now: its file enables it, and the run-time
/// setting does not make it observe-only (planned maintenance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum FastStartMode {
    /// Not enabled in this member's file.
    #[default]
    Disabled = 0,
    Enabled = 1,
    /// Watched and reported, but no failover: a target refuses one, and the observer asks none.
    ObserveOnly = 2,
}

impl FastStartMode {
    fn decode(r: &mut Reader<'_>) -> Result<FastStartMode, ProtoError> {
        match r.u8()? {
            0 => Ok(FastStartMode::Disabled),
            1 => Ok(FastStartMode::Enabled),
            2 => Ok(FastStartMode::ObserveOnly),
            other => Err(r.bad(format!("{other} is not a fast-start failover mode"))),
        }
    }
}

/// A member's answer: who it is, and what fast-start failover needs to know.
// Format: { info: RoleInfo | active_observer: text | synchronized: u8 | wants_unsync: names
// | isolated: u8 | primary_silence_ms: u64 | transport_lag_ms: u64 | apply_lag_ms: u64
// | refusal: text | targets_synchronized: names | refusal_final: u8 | mode: u8 }
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObserverPong {
    pub info: RoleInfo,
    /// The observer this member takes decisions from (a primary: the one whose lease and
    /// grants it takes; a standby: the one its primary named in its last heartbeat, the only
    /// one it takes a failover from); empty: none.
    pub active_observer: String,
    /// A primary: every fast-start target is synchronized. A standby: its primary said it is
    /// synchronized (SYNC) or streaming caught up (ASYNC) at its last heartbeat.
    pub synchronized: bool,
    /// A primary: the targets that are not synchronized and that it has no grant for; commits
    /// that those targets did not acknowledge wait for `grant_unsync`.
    pub wants_unsync: Vec<String>,
    /// A primary that takes no write because it lost both its target and the observer.
    pub isolated: bool,
    /// A standby: milliseconds since its primary was last heard from.
    pub primary_silence_ms: u64,
    pub transport_lag_ms: u64,
    pub apply_lag_ms: u64,
    /// Why the ping's request (a failover, say) was refused; empty if none was, or it was done.
    pub refusal: String,
    /// A primary: the fast-start targets that are synchronized SYNC destinations now. Under
    /// Maximum Availability the observer fails over only to a target that the primary's last
    /// answer listed here.
    pub targets_synchronized: Vec<String>,
    /// The refusal is final: the member evaluated the request and will not act on it (it did
    /// not take it up, and nothing of it goes on). A refusal that is not final (a role change
    /// was under way, say) leaves the request undecided: the observer asks again.
    pub refusal_final: bool,
    /// Whether fast-start failover runs on this member now.
    pub mode: FastStartMode,
}

impl ObserverPing {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.observer);
        w.u64(self.time_us);
        w.bool(self.lease);
        w.names(&self.grant_unsync);
        w.bool(self.failover);
        w.u32(self.newer_incarnation);
        w.text(&self.new_primary);
        w.names(&self.following);
        w.text(&self.failover_from);
        w.u32(self.failover_incarnation);
        w.u64(self.threshold_ms);
        w.u64(self.lag_limit_ms);
        w.u8(self.protection);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<ObserverPing, ProtoError> {
        Ok(ObserverPing {
            observer: r.text()?,
            time_us: r.u64()?,
            lease: r.bool()?,
            grant_unsync: r.names()?,
            failover: r.bool()?,
            newer_incarnation: r.u32()?,
            new_primary: r.text()?,
            following: r.names()?,
            failover_from: r.text()?,
            failover_incarnation: r.u32()?,
            threshold_ms: r.u64()?,
            lag_limit_ms: r.u64()?,
            protection: r.u8()?,
        })
    }
}

impl ObserverPong {
    /// An answer that says nothing beyond who answers (`info`): no observer followed, not
    /// synchronized, no lag, no request. The base of every answer a member builds.
    pub fn empty(info: RoleInfo) -> ObserverPong {
        ObserverPong {
            info,
            active_observer: String::new(),
            synchronized: false,
            wants_unsync: Vec::new(),
            isolated: false,
            primary_silence_ms: 0,
            transport_lag_ms: 0,
            apply_lag_ms: 0,
            refusal: String::new(),
            targets_synchronized: Vec::new(),
            refusal_final: false,
            mode: FastStartMode::Disabled,
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        self.info.encode(w);
        w.text(&self.active_observer);
        w.bool(self.synchronized);
        w.names(&self.wants_unsync);
        w.bool(self.isolated);
        w.u64(self.primary_silence_ms);
        w.u64(self.transport_lag_ms);
        w.u64(self.apply_lag_ms);
        w.text(&self.refusal);
        w.names(&self.targets_synchronized);
        w.bool(self.refusal_final);
        w.u8(self.mode as u8);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<ObserverPong, ProtoError> {
        Ok(ObserverPong {
            info: RoleInfo::decode(r)?,
            active_observer: r.text()?,
            synchronized: r.bool()?,
            wants_unsync: r.names()?,
            isolated: r.bool()?,
            primary_silence_ms: r.u64()?,
            transport_lag_ms: r.u64()?,
            apply_lag_ms: r.u64()?,
            refusal: r.text()?,
            targets_synchronized: r.names()?,
            refusal_final: r.bool()?,
            mode: FastStartMode::decode(r)?,
        })
    }
}
