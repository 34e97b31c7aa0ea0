//! What an observer (fast-start failover, `docs/fast-start-failover.md`) and the members say
//! to each other, on a member's redo listener: the observer pings every member on a
//! connection it keeps open; each answers with its role and its fast-start failover state.
//! The ping carries the observer's decisions: to let a primary go on without its SYNC target
//! (`grant_unsync`), to fail over to a target (`failover`), to tell an old primary it has been
//! failed over (`newer_incarnation`).

use crate::error::ProtoError;
use crate::frame::{Reader, Writer};
use crate::roles::RoleInfo;

/// The observer's ping.
// Format: { observer: text | time_us: u64 | lease: u8 | grant_unsync: u8 | failover: u8
// | newer_incarnation: u32 | new_primary: text }
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObserverPing {
    pub observer: String,
    pub time_us: u64,
    /// To the primary: the observer still sees it as the primary. Only such a ping renews the
    /// primary's lease (its right to acknowledge commits no SYNC target has).
    pub lease: bool,
    /// To the primary: it may drop its SYNC target and go on unsynchronized (the observer
    /// will not fail over to that target until it is synchronized again).
    pub grant_unsync: bool,
    /// To the target: become the primary (a failover).
    pub failover: bool,
    /// To an old primary: it has been failed over, in this incarnation, to `new_primary`
    /// (0: no such news).
    pub newer_incarnation: u32,
    pub new_primary: String,
}

/// A member's answer: who it is, and what fast-start failover needs to know.
// Format: { info: RoleInfo | active_observer: text | synchronized: u8 | wants_unsync: u8
// | isolated: u8 | primary_silence_ms: u64 | transport_lag_ms: u64 | apply_lag_ms: u64
// | refusal: text }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObserverPong {
    pub info: RoleInfo,
    /// The observer this member takes decisions from (a primary names it; a standby knows it
    /// from its primary's heartbeats); empty: none.
    pub active_observer: String,
    /// A primary: some SYNC standby (the target) is synchronized. A standby: its primary said
    /// it is synchronized (SYNC) or streaming caught up (ASYNC) at its last heartbeat.
    pub synchronized: bool,
    /// A primary whose SYNC target stopped answering: it waits for `grant_unsync`.
    pub wants_unsync: bool,
    /// A primary that takes no write because it lost both its target and the observer.
    pub isolated: bool,
    /// A standby: milliseconds since its primary was last heard from.
    pub primary_silence_ms: u64,
    pub transport_lag_ms: u64,
    pub apply_lag_ms: u64,
    /// Why the ping's request (a failover, say) was refused; empty if none was, or it was done.
    pub refusal: String,
}

impl ObserverPing {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.observer);
        w.u64(self.time_us);
        w.bool(self.lease);
        w.bool(self.grant_unsync);
        w.bool(self.failover);
        w.u32(self.newer_incarnation);
        w.text(&self.new_primary);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<ObserverPing, ProtoError> {
        Ok(ObserverPing {
            observer: r.text()?,
            time_us: r.u64()?,
            lease: r.bool()?,
            grant_unsync: r.bool()?,
            failover: r.bool()?,
            newer_incarnation: r.u32()?,
            new_primary: r.text()?,
        })
    }
}

impl ObserverPong {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        self.info.encode(w);
        w.text(&self.active_observer);
        w.bool(self.synchronized);
        w.bool(self.wants_unsync);
        w.bool(self.isolated);
        w.u64(self.primary_silence_ms);
        w.u64(self.transport_lag_ms);
        w.u64(self.apply_lag_ms);
        w.text(&self.refusal);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<ObserverPong, ProtoError> {
        Ok(ObserverPong {
            info: RoleInfo::decode(r)?,
            active_observer: r.text()?,
            synchronized: r.bool()?,
            wants_unsync: r.bool()?,
            isolated: r.bool()?,
            primary_silence_ms: r.u64()?,
            transport_lag_ms: r.u64()?,
            apply_lag_ms: r.u64()?,
            refusal: r.text()?,
        })
    }
}
