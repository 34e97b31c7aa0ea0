//! The switchover in the restart model (`model/restart.rs` has the members, the hellos, the
//! failover and the faults): `redoguard switchover --to T` as the broker runs it
//! (`broker::transitions::switchover`) and as P and T carry it out
//! (`server::role::change::switchover`), each durable step its own, so that a crash, a cut or
//! another role change may come between any two.
//!
//! - **The broker's run** (`switchover`): a switchover left half done (a member that is a
//!   standby, its `switchover.pending` naming T) is completed, with that member's id and its
//!   incarnation *now* (`pending_switchover`); otherwise it needs the configuration's primary
//!   P (of the newest incarnation among the primaries it reaches, not fenced, gate open or
//!   not) and T a standby, not fenced, connected to P (`validate`), and calls P's prepare.
//!   A pending record is completed only while no member is an open primary.
//!   T's refusal (of the complete) makes it call P's abort; a failure ends the run. A run may
//!   end at any step without its answer (killed, or the answer lost: a fault), and up to
//!   `brokers` runs go at once (an operator running it again while one waits).
//! - **P's prepare** (`prepare_switchover`, under P's transition lock): P a primary, not
//!   fenced, its gate open, T one of its destinations connected to it; its gate closes
//!   (`Quiesced`). Then T acknowledges everything (abstract: T is connected to
//!   P: redo is not modelled) and P writes `switchover.pending` (T, a new id), durably; or a
//!   wait runs out first and the gate is set `Open` (`undo`). Then its control file says
//!   standby, `followed` cleared (the commit point), and it opens again as a standby: its
//!   sessions as a primary end, its welcomes are forgotten; the answer goes to the broker.
//!   News of a newer incarnation meanwhile waits for the lock (`fence` takes it): applied if
//!   the prepare is undone, "a standby now" if not.
//! - **T's complete** (`complete_switchover`, under T's transition lock): refused if the id is
//!   in `switchover.refused` (not recorded again); a failure (no abort) if it is in
//!   `switchover.completed`, or T is the primary of that incarnation already; refused, the id
//!   recorded first, if T is not a standby that can take over or is in another incarnation.
//!   Then it waits for P's end: received (abstract: T holds the database), T records the id
//!   in `switchover.completed`, writes its control file, role primary with `followed`, and
//!   opens unconfirmed, as a restarted primary (its sessions as a standby ended): its gate
//!   opens once every destination has welcomed it in its incarnation, so that a failover
//!   given while the switchover was half done fences it instead; unless the file names
//!   another incarnation *then* (a hello may have made it adopt a newer one while it waited:
//!   the receiver does not take the lock), which is refused as a wait that runs out is: the
//!   id recorded, refused.
//! - **P's abort** (`abort_switchover`, under P's lock): refused unless P is a standby, not
//!   fenced, with *that* switchover pending (the id the broker names); a record that is void
//!   (P follows a newer incarnation than it was prepared in, or a failover from that one
//!   sealed P, its relay) is removed and no role given back. Its database still open, hellos
//!   and seals still come; then, in one step with its database closed (`reopen`), it reads
//!   its files again (the record gone: the switchover completed; void now: removed, refused),
//!   removes `switchover.pending`, its control file says primary with `followed`, and it
//!   opens from its control file: unconfirmed.
//! - **A standby with a pending switchover** drops the record once it follows T
//!   (`note_switchover_complete`, with the welcome of T's hello here); a restart keeps it.
//! - A failover whose target, or a primary it would fence, is under its transition lock is
//!   taken once the change is done (its calls wait for the lock).

use crate::restart::{Action, BROKER, MEMBERS, RestartSystem, Role, State, Variant};

/// A role change a member runs under its transition lock (volatile: a crash ends it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    /// P's prepare for T: gate quiesced; `pending`: its record written.
    Prepare { to: u8, pending: bool },
    /// T's complete of switchover `id`, prepared in `incarnation`, waiting for P's end.
    Complete { from: u8, id: u8, incarnation: u8 },
    /// P's abort, its pending record removed.
    Abort,
}

/// A broker's call under way, and what it then does with the answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    Prepare { from: u8 },
    Complete { from: u8, id: u8, incarnation: u8 },
    Abort { from: u8, id: u8 },
}

/// One run of `redoguard switchover --to T`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Run {
    pub to: u8,
    pub phase: Phase,
    /// Its call has reached the member it asks (which holds its transition lock for it).
    pub arrived: bool,
}

impl Run {
    /// The member the call asks.
    fn callee(&self) -> usize {
        usize::from(match self.phase {
            Phase::Prepare { from } | Phase::Abort { from, .. } => from,
            Phase::Complete { .. } => self.to,
        })
    }
}

impl RestartSystem {
    /// The broker reaches `node` (its process up; with `Hidden::Yes`, the link live too).
    fn reaches(&self, state: &State, node: usize) -> bool {
        let links = self.config.hidden == crate::restart::Hidden::Yes;
        state.members[node].up && (!links || self.live(state, node, BROKER))
    }

    pub(crate) fn switchover_actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.switchovers < self.config.switchovers
            && state.runs.len() < usize::from(self.config.brokers)
        {
            actions.extend((0..MEMBERS).map(|to| Action::Switchover { to }));
        }
        for (node, member) in state.members.iter().enumerate() {
            match member.change {
                Some(Change::Prepare { pending: false, .. }) => {
                    actions.push(Action::Prepare(node));
                    actions.push(Action::Undo(node));
                }
                Some(Change::Prepare { pending: true, .. }) => actions.push(Action::Prepare(node)),
                Some(Change::Complete { .. }) => {
                    actions.push(Action::TakeOver(node));
                    actions.push(Action::Refuse(node));
                }
                Some(Change::Abort) => actions.push(Action::TakeBack(node)),
                None => {}
            }
        }
        for (index, run) in state.runs.iter().enumerate() {
            if !run.arrived {
                actions.push(Action::Call(index));
            }
            if state.faults_left > 0 {
                actions.push(Action::Lost(index));
            }
        }
    }

    /// The broker's run starts: it completes a pending switchover, or calls P's prepare,
    /// which closes P's gate. `None`: refused, nothing changed.
    pub(crate) fn switchover(&self, state: &mut State, to: usize) -> Option<()> {
        let reached: Vec<bool> = (0..MEMBERS).map(|node| self.reaches(state, node)).collect();
        // The configuration's primary: the only one of the newest incarnation it reaches.
        let primaries: Vec<usize> =
            (0..MEMBERS).filter(|node| reached[*node] && state.members[*node].primary()).collect();
        let newest = primaries.iter().map(|node| state.members[*node].incarnation).max();
        let in_newest: Vec<usize> = primaries
            .into_iter()
            .filter(|node| Some(state.members[*node].incarnation) == newest)
            .collect();
        let pending = (0..MEMBERS).find(|node| {
            let member = &state.members[*node];
            reached[*node]
                && member.role == Role::Standby
                && member.pending.is_some_and(|(target, _, _)| usize::from(target) == to)
        });
        let stale_skipped = self.config.variant != Variant::CompleteTwice;
        if let Some(from) = pending.filter(|_| in_newest.len() != 1 || !stale_skipped) {
            let member = &state.members[from];
            let (_, id, prepared_in) = member.pending.expect("found");
            // The incarnation the switchover was prepared in, as its record keeps it.
            let incarnation = if self.config.variant == Variant::PendingIncarnationNow {
                member.incarnation
            } else {
                prepared_in
            };
            state.switchovers += 1;
            state.runs.push(Run {
                to: to as u8,
                phase: Phase::Complete { from: from as u8, id, incarnation },
                arrived: false,
            });
            return Some(());
        }
        let [from] = in_newest[..] else { return None };
        let target = &state.members[to];
        let connected = state.sessions.contains(&(from as u8, to as u8));
        if from == to || !reached[to] || target.role != Role::Standby || target.fenced.is_some() {
            return None;
        }
        // P's own checks, under its lock: T one of its destinations, connected and caught up.
        if !connected
            || state.deferred.contains(&(to as u8))
            || state.members[from].change.is_some()
        {
            return None;
        }
        // An unconfirmed primary does not know it is the primary still: it hands nothing over.
        if !state.members[from].open && self.config.variant != Variant::PrepareUnconfirmed {
            return None;
        }
        // Routes under which T would not wait for a member P ships to directly
        // (`refuse_unseen_hops`).
        if self.unseen_hops(state, from, to) && self.config.variant != Variant::NoRouteRule {
            return None;
        }
        state.switchovers += 1;
        let primary = &mut state.members[from];
        primary.change = Some(Change::Prepare { to: to as u8, pending: false });
        if self.config.variant != Variant::LateStandby {
            primary.open = false;
        }
        state.runs.push(Run {
            to: to as u8,
            phase: Phase::Prepare { from: from as u8 },
            arrived: true,
        });
        Some(())
    }

    /// The run whose call `node` is answering.
    fn answering(&self, state: &State, node: usize) -> Option<usize> {
        state.runs.iter().position(|run| run.arrived && run.callee() == node)
    }

    /// P's next durable step: its pending record once T has everything, then its control
    /// file says standby.
    pub(crate) fn prepare(&self, state: &mut State, node: usize) -> Option<()> {
        let Some(Change::Prepare { to, pending }) = state.members[node].change else {
            return None;
        };
        let late = self.config.variant == Variant::LateStandby;
        if !pending {
            // T acknowledged everything up to P's end (it is connected to P).
            if !state.sessions.contains(&(node as u8, to)) {
                return None;
            }
            let id = state.next_id;
            state.next_id += 1;
            let member = &mut state.members[node];
            member.pending = Some((to, id, member.incarnation));
            member.change = Some(Change::Prepare { to, pending: true });
            if late {
                self.answer_prepared(state, node);
            }
            return Some(());
        }
        // The commit point: its control file says standby; it opens again as one.
        let member = &mut state.members[node];
        member.role = Role::Standby;
        member.followed = false;
        member.change = None;
        // Its receiver starts anew: it has heard from no primary.
        Self::receiver_stops(member);
        member.fence_waiting = None;
        state.sessions.retain(|(primary, _)| usize::from(*primary) != node);
        self.open(state, node);
        if !late {
            self.answer_prepared(state, node);
        }
        Some(())
    }

    /// The broker hears P's answer to its prepare: it calls T's complete next.
    fn answer_prepared(&self, state: &mut State, node: usize) {
        let member = &state.members[node];
        let Some((_, id, incarnation)) = member.pending else {
            return;
        };
        if let Some(index) = self.answering(state, node) {
            let run = &mut state.runs[index];
            run.phase = Phase::Complete { from: node as u8, id, incarnation };
            run.arrived = false;
        }
    }

    /// P's prepare gives up before its pending record: `undo` sets the gate open, and the
    /// news of a newer incarnation that waited for the lock is acted on.
    pub(crate) fn undo(&self, state: &mut State, node: usize) -> Option<()> {
        let member = &mut state.members[node];
        if !matches!(member.change, Some(Change::Prepare { pending: false, .. })) {
            return None;
        }
        member.change = None;
        member.open = true;
        let waiting = member.fence_waiting.take();
        if let Some(index) = self.answering(state, node) {
            state.runs.remove(index);
        }
        if let Some(incarnation) = waiting {
            self.fence(state, node, incarnation);
        }
        Some(())
    }

    /// A run's call (T's complete, P's abort) reaches its member, which takes its lock (or
    /// the call fails: the member is down). The complete's checks before its wait.
    pub(crate) fn call(&self, state: &mut State, index: usize) -> Option<()> {
        let run = state.runs[index].clone();
        let node = run.callee();
        if !state.members[node].up {
            state.runs.remove(index);
            return Some(());
        }
        if !self.reaches(state, node) || state.members[node].change.is_some() {
            return None;
        }
        match run.phase {
            Phase::Prepare { .. } => return None,
            Phase::Complete { from, id, incarnation } => {
                let target = &state.members[node];
                let refused_before = target.refused.contains(&id);
                let completed_before =
                    target.completed.contains(&id) && self.config.variant != Variant::CompleteTwice;
                if refused_before && self.config.variant != Variant::CompleteIgnoresRefused {
                    state.runs[index].phase = Phase::Abort { from, id };
                } else if completed_before {
                    // A failure: P is not given its role back.
                    state.runs.remove(index);
                } else if target.role == Role::Primary
                    && target.fenced.is_none()
                    && target.incarnation == incarnation
                {
                    // A failure, not a refusal: P is not given its role back.
                    state.runs.remove(index);
                } else if target.role != Role::Standby
                    || target.fenced.is_some()
                    || target.incarnation != incarnation
                    || (self.unseen_hops(state, usize::from(from), node)
                        && self.config.variant != Variant::NoRouteRule)
                {
                    state.members[node].refused.insert(id);
                    state.runs[index].phase = Phase::Abort { from, id };
                } else {
                    state.members[node].change = Some(Change::Complete { from, id, incarnation });
                    state.runs[index].arrived = true;
                }
            }
            Phase::Abort { id, .. } => {
                let member = &state.members[node];
                let any = self.config.variant == Variant::AbortAnyId;
                let named = member.pending.is_some_and(|(_, pending, _)| any || pending == id);
                if !named || member.role != Role::Standby || member.fenced.is_some() {
                    state.runs.remove(index);
                } else if self.void(member) {
                    // It follows a newer incarnation than the switchover's, or a failover from
                    // its incarnation sealed it: a failover came after it. The record is
                    // removed; no role is given back.
                    state.members[node].pending = None;
                    state.runs.remove(index);
                } else {
                    // (Its database still open: hellos and seals still come, until `TakeBack`.)
                    state.members[node].change = Some(Change::Abort);
                    state.runs[index].arrived = true;
                }
            }
        }
        Some(())
    }

    /// T holds and has applied P's end: its control file says primary (`followed`), in the
    /// incarnation it names now, and it opens at once.
    pub(crate) fn take_over(&self, state: &mut State, node: usize) -> Option<()> {
        let Some(Change::Complete { id, incarnation, .. }) = state.members[node].change else {
            return None;
        };
        if !state.members[node].holds {
            return None;
        }
        if state.members[node].incarnation != incarnation {
            // It adopted a newer incarnation while it waited: refused, as its wait running
            // out is (`complete_switchover_locked`, read again under the closed database,
            // which then opens again: a new receiver).
            Self::receiver_stops(&mut state.members[node]);
            return self.refuse(state, node);
        }
        // A failover's target sealed it (its relay): that failover's primary may be open
        // already, and need not be a member it ships to directly. Refused too.
        if Self::sealed_against(state.members[node].sealed_below, incarnation)
            && self.config.variant != Variant::SealedTargetCompletes
        {
            Self::receiver_stops(&mut state.members[node]);
            return self.refuse(state, node);
        }
        let member = &mut state.members[node];
        member.change = None;
        // (Recorded first, durably: a crash before the control file's write leaves T a
        // standby that fails this switchover's complete from then on; no primary until a
        // failover or an abort by hand.)
        member.completed.insert(id);
        member.role = Role::Primary;
        member.followed = true;
        state.sessions.retain(|(_, standby)| usize::from(*standby) != node);
        // (Every older logic the variants keep had the target open at once.)
        if self.config.variant.target_opens_at_once() {
            let member = &mut state.members[node];
            member.welcomed.clear();
            member.open = true;
            self.note_switched_open(state, node);
        } else {
            // Unconfirmed, as a restarted primary: a failover may have come after the prepare
            // (`confirmation`); its gate opens once every destination has welcomed it.
            self.open(state, node);
            self.confirm(state, node);
        }
        if let Some(index) = self.answering(state, node) {
            state.runs.remove(index);
        }
        Some(())
    }

    /// A member that completed a switchover opens its gate (at once, or confirmed).
    pub(crate) fn note_switched_open(&self, state: &mut State, node: usize) {
        let completed = &state.members[node].completed;
        if !completed.is_empty() {
            state.took_over = true;
            state.took_over_after_crash |=
                completed.iter().any(|id| state.crashed_pending.contains(id));
        }
    }

    /// T's wait runs out: the id recorded as refused (durably), then the refusal, on which
    /// the broker calls P's abort.
    pub(crate) fn refuse(&self, state: &mut State, node: usize) -> Option<()> {
        let Some(Change::Complete { from, id, .. }) = state.members[node].change else {
            return None;
        };
        state.members[node].refused.insert(id);
        state.members[node].change = None;
        if let Some(index) = self.answering(state, node) {
            let run = &mut state.runs[index];
            run.phase = Phase::Abort { from, id };
            run.arrived = false;
        }
        Some(())
    }

    /// P's abort, its pending record removed: its control file says primary, and it opens
    /// from it.
    pub(crate) fn take_back(&self, state: &mut State, node: usize) -> Option<()> {
        if state.members[node].change != Some(Change::Abort) {
            return None;
        }
        // Its files read again, its database closed (`abort_switchover`'s `reopen`): the
        // switchover completed meanwhile (it followed T), or a failover came (a newer
        // incarnation adopted, or a seal), is refused; the record, void, removed.
        let member = &state.members[node];
        let recheck =
            !matches!(self.config.variant, Variant::AbortBeforeSeals | Variant::AbortChecksEarly);
        if recheck && (member.pending.is_none() || self.void(member)) {
            let member = &mut state.members[node];
            member.pending = None;
            member.change = None;
            // (Its database opens again as a standby: a new receiver.)
            Self::receiver_stops(member);
            if let Some(index) = self.answering(state, node) {
                state.runs.remove(index);
            }
            return Some(());
        }
        let member = &mut state.members[node];
        member.pending = None;
        member.change = None;
        member.role = Role::Primary;
        if self.config.variant != Variant::AbortNotFollowed {
            member.followed = true;
        }
        state.sessions.retain(|(_, standby)| usize::from(*standby) != node);
        self.open(state, node);
        self.confirm(state, node);
        if let Some(index) = self.answering(state, node) {
            state.runs.remove(index);
        }
        state.aborted = true;
        Some(())
    }

    /// Whether a pending record is void: a failover came after it (its member follows a newer
    /// incarnation than the one it was prepared in, or a failover from that one sealed it).
    fn void(&self, member: &crate::restart::Member) -> bool {
        let variant = self.config.variant;
        member.pending.is_some_and(|(_, _, prepared_in)| {
            (prepared_in != member.incarnation && variant != Variant::PendingIncarnationNow)
                || (Self::sealed_against(member.sealed_below, prepared_in)
                    && variant != Variant::AbortBeforeSeals)
        })
    }

    /// A crash ends the change under way (and fails the call it answers).
    pub(crate) fn crash_changes(&self, state: &mut State, node: usize) {
        if let Some(index) = self.answering(state, node) {
            state.runs.remove(index);
        }
        let member = &mut state.members[node];
        member.change = None;
        member.fence_waiting = None;
        if let Some((_, id, _)) = member.pending {
            state.crashed_pending.insert(id);
        }
    }
}

/// (Used by the checks' traces.)
pub fn describe_run(run: &Run) -> String {
    let name = |node: u8| crate::restart::NAMES[usize::from(node)];
    match run.phase {
        Phase::Prepare { from } => format!("prepare at {} for {}", name(from), name(run.to)),
        Phase::Complete { from, id, .. } => {
            format!("complete {id} from {} at {}", name(from), name(run.to))
        }
        Phase::Abort { from, id } => format!("abort {id} at {}", name(from)),
    }
}
