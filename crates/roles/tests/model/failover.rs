//! The DBA's role changes outside a switchover in the restart model (`model/restart.rs` has
//! the members, the hellos and the faults): `failover --to T` as the broker and T check it
//! (with its relay's seal, `model/routes.rs`), deferring a failed old primary, and a new
//! standby built from a copy.

use crate::restart::{BROKER, Broker, Hidden, MEMBERS, RestartSystem, Role, State, Variant};

impl RestartSystem {
    /// A copy of `from`'s data for the new standby `to` (`transport::copy`, served by a
    /// primary that is not fenced or by a standby): it takes `from`'s identity, incarnation
    /// and history. A primary writes `followed` before it serves it (`role::copy`).
    pub(crate) fn copy(&self, state: &mut State, from: usize, to: usize) -> Option<()> {
        let source = state.members[from].clone();
        let target = &state.members[to];
        let serves =
            source.up && source.holds && !(source.role == Role::Primary && source.fenced.is_some());
        if !serves || !target.up || target.holds || !self.live(state, from, to) {
            return None;
        }
        let target = &mut state.members[to];
        target.holds = true;
        target.incarnation = source.incarnation;
        target.history = source.history.clone();
        if source.role == Role::Primary && self.config.variant != Variant::CopyNotFollowed {
            state.members[from].followed = true;
        }
        Some(())
    }

    /// The broker's and T's checks; `None`: refused.
    pub(crate) fn failover(&self, state: &mut State, to: usize, force: bool) -> Option<()> {
        let reached: Vec<bool> = (0..MEMBERS)
            .map(|node| match self.config.hidden {
                Hidden::No => true,
                Hidden::Yes => self.live(state, node, BROKER),
            })
            .collect();
        let reached = |node: usize| reached[node];
        let target = &state.members[to];
        if !target.up || !reached(to) || target.role != Role::Standby || target.fenced.is_some() {
            return None;
        }
        // A member under its transition lock answers once its change is done (the fence, or
        // the failover, waits for it): the failover is taken after.
        let amid = !state.runs.is_empty() || state.members.iter().any(|m| m.pending.is_some());
        if amid && !self.config.failover_amid_switchover {
            return None;
        }
        let locked = |node: usize| state.members[node].change.is_some();
        let fenced_first = |node: usize| reached(node) && state.members[node].primary();
        if locked(to) || (0..MEMBERS).any(|node| locked(node) && fenced_first(node)) {
            return None;
        }
        // A standby that holds no database refuses (`change::failover`).
        if !target.holds && self.config.variant != Variant::EmptyFailover {
            return None;
        }
        // So does one a failover target sealed against its incarnation, unless `--force`.
        if Self::sealed_against(target.sealed_below, target.incarnation) && !force {
            return None;
        }
        let primaries: Vec<usize> =
            (0..MEMBERS).filter(|node| state.members[*node].primary() && reached(*node)).collect();
        let new_incarnation = target.incarnation + 1;
        // (A fence that is not newer than the primary's incarnation is refused by it: the
        // broker changes nothing.)
        let fenceable = |node: &usize| new_incarnation > state.members[*node].incarnation;
        let fence: Vec<usize> = match self.config.broker {
            Broker::NewestOnly => {
                let newest = primaries.iter().map(|node| state.members[*node].incarnation).max();
                let in_newest: Vec<usize> = primaries
                    .iter()
                    .copied()
                    .filter(|node| Some(state.members[*node].incarnation) == newest)
                    .collect();
                // Two in the newest incarnation: it names them, takes neither, refuses not.
                if in_newest.len() == 1 { in_newest } else { Vec::new() }
            }
            Broker::EveryPrimary => primaries,
        };
        if !fence.is_empty() && (!force || !fence.iter().all(fenceable)) {
            return None;
        }
        for node in fence {
            self.fence(state, node, new_incarnation);
        }
        let target_incarnation = state.members[to].incarnation;
        let connected = state.sessions.iter().any(|(primary, standby)| {
            usize::from(*standby) == to
                && state.members[usize::from(*primary)].incarnation == target_incarnation
        });
        if connected && !force {
            return None;
        }
        // Behind a relay: its seal first (`relay_tail`), or `--force` opens without it.
        if self.seal_relay(state, to).is_err() && !force {
            return None;
        }
        // Point 3's window: a primary that runs out of the broker's sight now, its gate open
        // or not (its welcomes may be older than this failover).
        for node in 0..MEMBERS {
            if state.members[node].primary() && !reached(node) {
                state.members[node].hidden = true;
            }
        }
        self.end_sessions(state, to);
        state.failovers += 1;
        let member = &mut state.members[to];
        member.role = Role::Primary;
        member.incarnation = new_incarnation;
        member.followed = self.config.variant != Variant::FailoverNotFollowed;
        member.fenced = None;
        member.history.push(to as u8);
        Self::receiver_stops(member);
        // Made primary by this process: open at once.
        member.welcomed.clear();
        member.open = true;
        Some(())
    }

    /// The DBA's word that `node` is not a primary, given only when it is true for good: a
    /// member whose control file names it primary of an incarnation older than another
    /// member's (the failed old primary, gone for good; it is not failed over to, and nothing
    /// here makes it a standby again). The gates are judged again at once.
    pub(crate) fn defer(&self, state: &mut State, node: usize) -> Option<()> {
        let member = &state.members[node];
        let newer = state
            .members
            .iter()
            .any(|other| other.role == Role::Primary && other.incarnation > member.incarnation);
        if member.role != Role::Primary || !newer || !state.deferred.insert(node as u8) {
            return None;
        }
        for primary in 0..MEMBERS {
            self.confirm(state, primary);
        }
        Some(())
    }
}
