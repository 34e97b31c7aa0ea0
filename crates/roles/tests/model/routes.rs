//! Redo routes in the restart model (`model/restart.rs` has the members, the hellos, the
//! failover and the faults; `model/switchover.rs` the switchover): which members a primary
//! ships to directly, which get its redo from a relay (a cascading standby), what a relay
//! forwards, and the seal a failover target puts on its relay (docs/roles.md, "Failover
//! through a far sync", "Switchover and routes").
//!
//! - **Routes** are the configuration every member runs with: under each member as primary,
//!   the member each other one receives from (`Routes`; `DIRECT`: every member from the
//!   primary itself, the model without routes). A primary says hello only to the members it
//!   ships to directly (its first hops), and its gate waits for their welcomes alone
//!   (`roles::confirmation::awaited` over them; deferred ones not).
//! - **A relay** (a standby in session with its primary, in its incarnation) forwards the
//!   primary's hello to the members the routes give their redo from it
//!   (`receiver::cascade`): one step with its answer. The member decides as it would the
//!   primary's own hello (`decide`: follow, adopt, or fenced as diverged; a member that is a
//!   primary is fenced by a newer one, as its port does); its refusal of an older primary is
//!   only logged by the relay, and its welcome is not the primary's: no session, no welcome
//!   recorded, nothing judged (the relay reports nothing upstream).
//! - **The seal** (`server::role::relay_tail`, `transport::receiver::seal`): a failover's
//!   target whose source under the primary it heard from is a relay seals that relay first;
//!   one that has heard from no primary since it started (its process, or a switchover's
//!   prepare, began a new receiver) takes the relay the routes give it under every other
//!   member, if they agree (none if it is a first hop of them all). A relay that itself
//!   receives from a relay is not sealed (`roles::relay::sealable`: refused). The relay must
//!   be up, reached by the target, a standby that heard from that primary (or, unnamed, from
//!   any), in the target's incarnation, and the routes must give the target its redo from it;
//!   then its control file says `sealed_below` (`roles::relay::seal`), its sessions of older
//!   incarnations end, and it refuses their hellos from then on (`roles::relay::takes_redo`:
//!   `ShuttingDown`, which changes nothing at the sender). A seal that cannot be had refuses
//!   the failover, unless `--force` (which opens without it). The tail itself is taken at
//!   once (redo is not modelled); a failover that sealed its relay and then gave up is not
//!   modelled (a seal only refuses more: it makes nothing open).
//! - **What each member heard** (`heard`, volatile): the primary of its last welcome, direct
//!   or forwarded, since its process (or its receiver) started.

use crate::restart::{Action, MEMBERS, Member, NAMES, RestartSystem, Role, State};

/// Under each member as primary (the first index), the member each member receives from (the
/// second index; a member's own entry is itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Routes(pub [[u8; MEMBERS]; MEMBERS]);

impl Routes {
    /// Every member ships to every other directly: the model without routes.
    pub const DIRECT: Routes = Routes([[0, 0, 0], [1, 1, 1], [2, 2, 2]]);
    /// A ships to B and C directly; under B, A relays to C; C ships to both. A switchover from
    /// A to B would leave C, which A ships to directly, behind A for B: a failover to C while
    /// it was half done would go unseen by B's confirmation (`roles::switchover::unseen_hops`
    /// refuses it).
    pub const RELAYED_UNDER_TARGET: Routes = Routes([[0, 0, 0], [1, 1, 0], [2, 2, 2]]);
    /// The cascade of `replication_cascade`'s sealed-target test: under A, B relays to C;
    /// under B and under C, A relays to the other. A switchover from A to B keeps every first
    /// hop, but a failover to C while it is half done seals B, its target.
    pub const CASCADE: Routes = Routes([[0, 0, 1], [1, 1, 0], [0, 2, 2]]);

    /// The member `member` receives from while `primary` is the primary.
    pub fn source(&self, primary: usize, member: usize) -> usize {
        usize::from(self.0[primary][member])
    }
}

impl RestartSystem {
    pub(crate) fn source(&self, primary: usize, member: usize) -> usize {
        self.config.routes.source(primary, member)
    }

    /// The members `primary` ships to directly (deferred or not).
    pub(crate) fn first_hops(&self, primary: usize) -> Vec<usize> {
        (0..MEMBERS).filter(|m| *m != primary && self.source(primary, *m) == primary).collect()
    }

    /// `roles::switchover::unseen_hops` over the routes (P's first hops, deferred ones too;
    /// T's enabled ones): whether a switchover from `from` to `to` is refused.
    pub(crate) fn unseen_hops(&self, state: &State, from: usize, to: usize) -> bool {
        let names = |members: Vec<usize>| -> Vec<String> {
            members.into_iter().map(|m| NAMES[m].to_string()).collect()
        };
        let primary_hops = names(self.first_hops(from));
        let target_hops = names(
            self.first_hops(to)
                .into_iter()
                .filter(|m| !state.deferred.contains(&(*m as u8)))
                .collect(),
        );
        !roles::switchover::unseen_hops(&primary_hops, NAMES[to], &target_hops).is_empty()
    }

    /// Its receiver stops (a crash, a reopen, a role of its own): it has heard from no
    /// primary, and forwards for none, until a hello or a seal.
    pub(crate) fn receiver_stops(member: &mut Member) {
        member.heard = None;
        member.forwarding = None;
    }

    /// Whether `relay` forwards `primary`'s hellos to `to` now.
    fn forwards(&self, state: &State, primary: usize, relay: usize, to: usize) -> bool {
        let member = &state.members[relay];
        member.up
            && member.role == Role::Standby
            && member.forwarding == Some(primary as u8)
            && to != relay
            && self.source(primary, to) == relay
            && !state.deferred.contains(&(to as u8))
            && state.members[to].up
            && self.live(state, relay, to)
    }

    /// A relay's forwarded hellos: from a standby that forwards a primary's redo (whether or
    /// not that primary is still up, in session, or the primary: its forwarder reconnects with
    /// what it holds), in the relay's incarnation, to each member the routes under that
    /// primary give their redo from it.
    pub(crate) fn forward_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (relay, member) in state.members.iter().enumerate() {
            let Some(primary) = member.forwarding.map(usize::from) else { continue };
            for to in (0..MEMBERS).filter(|to| self.forwards(state, primary, relay, *to)) {
                actions.push(Action::Forward { primary, relay, to, beyond: false });
                if self.adopts(member.incarnation, &state.members[to]) {
                    actions.push(Action::Forward { primary, relay, to, beyond: true });
                }
            }
        }
    }

    /// A relay forwards its primary's hello (`None`: it does not, now).
    pub(crate) fn forward(
        &self,
        state: &mut State,
        primary: usize,
        relay: usize,
        to: usize,
        beyond: bool,
    ) -> Option<()> {
        if !self.forwards(state, primary, relay, to) {
            return None;
        }
        self.greet(state, primary, relay, to, beyond);
        Some(())
    }

    /// The failover target `to` seals its relay, if it has one (`relay_tail`): `Err` if the
    /// seal cannot be had (the failover is refused, unless `--force`).
    pub(crate) fn seal_relay(&self, state: &mut State, to: usize) -> Result<(), ()> {
        let heard = state.members[to].heard.map(usize::from);
        let (named, relay) = match heard {
            Some(primary) => {
                let source = self.source(primary, to);
                if source == primary {
                    return Ok(());
                }
                (Some(primary), source)
            }
            None => {
                let relays: Vec<Option<usize>> = (0..MEMBERS)
                    .filter(|candidate| *candidate != to)
                    .map(|candidate| {
                        Some(self.source(candidate, to)).filter(|source| *source != candidate)
                    })
                    .collect();
                match relays[0] {
                    _ if relays.iter().all(Option::is_none) => return Ok(()),
                    Some(relay) if relays.iter().all(|other| *other == Some(relay)) => {
                        (None, relay)
                    }
                    _ => return Err(()),
                }
            }
        };
        let candidates: Vec<usize> = match named {
            Some(primary) => vec![primary],
            None => (0..MEMBERS).filter(|candidate| *candidate != to).collect(),
        };
        for candidate in candidates {
            let upstream = self.source(candidate, relay);
            let sealable = roles::relay::sealable(
                NAMES[candidate],
                NAMES[relay],
                (upstream != relay).then_some(NAMES[upstream]),
            );
            if sealable.is_err() {
                return Err(());
            }
        }
        // The relay's own checks (`receiver::seal`).
        let member = &state.members[relay];
        let incarnation = state.members[to].incarnation;
        if !member.up || !self.live(state, to, relay) || member.role != Role::Standby {
            return Err(());
        }
        // The primary it fails over from: the one named, or the one the relay heard.
        let primary = match (named, member.heard.map(usize::from)) {
            (None, Some(heard)) => heard,
            (None, None) => return Err(()),
            (Some(named), Some(heard)) if heard != named => return Err(()),
            (Some(named), _) => named,
        };
        if self.source(primary, to) != relay || member.incarnation != incarnation {
            return Err(());
        }
        let sealed_below = roles::relay::seal(
            redo::Incarnation(u32::from(member.sealed_below)),
            redo::Incarnation(u32::from(incarnation)),
        );
        let sealed_below = sealed_below.0 as u8;
        state.members[relay].sealed_below = sealed_below;
        // It forwards the tail (`cascade.follow`).
        state.members[relay].forwarding = Some(primary as u8);
        // Its sessions of the sealed incarnations end (each connection at its next message).
        let incarnations: Vec<u8> = state.members.iter().map(|m| m.incarnation).collect();
        state.sessions.retain(|(primary, standby)| {
            usize::from(*standby) != relay || incarnations[usize::from(*primary)] >= sealed_below
        });
        Ok(())
    }

    /// Whether a relay sealed below `sealed_below` refuses a hello of `incarnation`.
    pub(crate) fn sealed_against(sealed_below: u8, incarnation: u8) -> bool {
        !roles::relay::takes_redo(
            redo::Incarnation(u32::from(sealed_below)),
            redo::Incarnation(u32::from(incarnation)),
        )
    }
}
