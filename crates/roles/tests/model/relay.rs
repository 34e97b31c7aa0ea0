//! The model of a failover through a far sync: a primary P ships SYNC AFFIRM to a far sync F
//! (or, with two relays, to F1, which forwards to F2), the last relay forwards ASYNC to a
//! terminal standby T, and T fails over: it seals its relay, takes the tail, opens. Every
//! interleaving of their steps and of the faults is explored, with the decisions made by
//! `roles::relay` (what a sealed relay takes, which relay may be sealed, when the tail is
//! taken) and `roles::follow::decide` (whether a relay follows a primary's incarnation).
//!
//! What is modelled, and how:
//!
//! - **Logs as lengths.** Only P writes in incarnation 1, and every other member holds a
//!   prefix of P's log, so a log is how many of P's writes it holds. A relay's or T's log is
//!   durable as it is written: the write, its sync and the acknowledgement that carries the
//!   synced end are one step (the group commit's; what was written and not synced is never
//!   acknowledged nor forwarded, so a crash losing it changes nothing here).
//! - **Messages** are a set in flight: P's redo to the first relay (`Redo`, "my log up to
//!   n", in P's incarnation), each relay's forwarding to the next hop, the first relay's
//!   acknowledgement to P (`Ack`, its durable end), T's seal and the relay's answer (its
//!   durable end after the seal). Any message may be delivered at any time, in any order, or
//!   lost; a cut link (a partition, one way) holds what is sent on it until healed.
//! - **P** acknowledges a write to its client when the first relay's acknowledgement covers
//!   it (Maximum Protection's SYNC AFFIRM: the acknowledgement's arrival and the commit's
//!   answer are one step). P never acknowledges alone (that is Maximum Availability after a
//!   timeout: its divergent tail, docs/roles.md). A relay that knows incarnation 2 refuses P's
//!   redo as stale, which fences P.
//! - **A relay** takes redo only if `relay::takes_redo` (the seal) and `follow::decide` (the
//!   incarnation) allow, in that order, as its receiver does. A seal sets the bound in memory
//!   and, with today's logic, in its control file before the answer; a crash loses what was in
//!   memory, a restart reloads the control file.
//! - **T** fails over: `relay::sealable` (behind two relays it refuses), a seal (lost, or
//!   answered), a wait until `relay::tail_taken`, then it opens in incarnation 2 (its branch
//!   point is what it holds). It may give up waiting (the failover fails; the relay stays
//!   sealed) and try again, and crash and restart (what it received is durable; the failover
//!   under way is lost). Once open, it ships to every relay: a hello of incarnation 2 that
//!   each adopts (or, holding more than the branch point, refuses as diverged: it is fenced).
//! - **Faults**, from a budget: the crash of a relay or of T, a one-way cut of a link.
//!   Messages are lost without limit.

use std::collections::BTreeSet;

use redo::{Incarnation, LogSeq, RedoAddr, Scn};
use roles::history::{Branch, IncarnationHistory};
use roles::{StandbyView, Verdict, decide, relay};
use stateright::{Model, Property};

/// The logic checked: today's, or one with a step of the failover missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Current,
    /// The relay keeps its seal in memory only: a restart forgets it.
    SealInMemory,
    /// The target asks its relay where its durable redo ends and takes that tail, but does
    /// not seal it.
    NoSeal,
    /// Behind two relays, the target seals the nearer one and takes its tail (no
    /// `relay::sealable` refusal).
    NoTwoRelayCheck,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Relays between P and T: 1 (a far sync) or 2 (a far sync that forwards to a cascading
    /// standby).
    pub relays: usize,
    /// Client writes P takes.
    pub writes: u8,
    /// Crashes of a relay or of T, and cuts of a link, in all.
    pub faults: u8,
    /// Which faults the budget buys.
    pub crashes: bool,
    pub cuts: bool,
    pub variant: Variant,
}

/// Node numbers: P is 0, the relays 1..=relays, T the last.
pub const PRIMARY: usize = 0;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Primary {
    /// Writes in its log (durable on it).
    pub log: u8,
    /// Writes acknowledged to their clients (in order: the first `answered`).
    pub answered: u8,
    /// Refused as stale by a member that knows incarnation 2: it takes no write, ships nothing.
    pub fenced: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Relay {
    // On disk.
    pub incarnation: u32,
    /// Refused incarnation 2 as diverged.
    pub fenced: bool,
    pub log: u8,
    pub sealed_below_on_disk: u32,
    // Volatile.
    pub up: bool,
    pub sealed_below: u32,
}

/// Where T's failover is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failover {
    Idle,
    /// Its seal is sent; no answer yet.
    Sealing,
    /// The relay answered with its durable end: T waits for its log to reach it.
    Waiting {
        end: u8,
    },
    /// T is the primary of incarnation 2, its redo beginning after `branch` of P's writes.
    Open {
        branch: u8,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Terminal {
    pub log: u8,
    pub up: bool,
    pub failover: Failover,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Body {
    /// Redo of `incarnation` up to `end` writes.
    Redo { incarnation: u32, end: u8 },
    /// The first relay holds `end` writes durably.
    Ack { end: u8 },
    /// T's seal (or, `NoSeal`, its question).
    Seal,
    /// The relay's durable end after the seal.
    Sealed { end: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Message {
    pub from: usize,
    pub to: usize,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub primary: Primary,
    pub relays: Vec<Relay>,
    pub terminal: Terminal,
    pub in_flight: BTreeSet<Message>,
    /// Cut links, one way: (from, to).
    pub cut: BTreeSet<(usize, usize)>,
    pub faults_left: u8,
    /// What P had acknowledged when T opened.
    pub answered_at_open: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    Write,
    /// P sends its redo to the first relay.
    Ship,
    /// A relay forwards its durable redo to the next hop.
    Forward(usize),
    Deliver(Message),
    Lose(Message),
    /// T begins a failover (it seals its relay).
    Failover,
    /// T opens: it holds the relay's tail.
    Open,
    /// T gives up waiting: the failover fails.
    GiveUp,
    /// T, the primary of incarnation 2, says hello to a relay.
    Hello(usize),
    Crash(usize),
    Restart(usize),
    Cut(usize, usize),
    Heal(usize, usize),
}

pub struct RelaySystem {
    pub config: Config,
}

/// P's and T's incarnations.
const OLD: u32 = 1;
const NEW: u32 = 2;

/// A log length as a position: one log, one unit a write.
fn at(writes: u8) -> RedoAddr {
    RedoAddr { seq: LogSeq(1), offset: u64::from(writes) }
}

/// The record of incarnation 2 that T writes when it opens after `branch` of P's writes.
fn branch_record(branch: u8) -> Branch {
    Branch {
        incarnation: Incarnation(NEW),
        first_seq: LogSeq(2),
        first_scn: Scn(u64::from(branch) + 1),
        prev_end_offset: u64::from(branch),
        prev_closed_here: true,
        created_us: 0,
        member: "terminal".into(),
    }
}

impl RelaySystem {
    pub fn terminal(&self) -> usize {
        self.config.relays + 1
    }

    /// The hop after `node`.
    fn next_hop(&self, node: usize) -> usize {
        node + 1
    }

    pub fn name(&self, node: usize) -> String {
        match node {
            PRIMARY => "P".into(),
            node if node == self.terminal() => "T".into(),
            node if self.config.relays == 1 => {
                let _ = node;
                "F".into()
            }
            node => format!("F{node}"),
        }
    }

    fn link(&self, state: &State, from: usize, to: usize) -> bool {
        !state.cut.contains(&(from, to))
    }

    fn send(&self, state: &mut State, from: usize, to: usize, body: Body) {
        // A message on a cut link stays in flight until the link is healed (or it is lost).
        state.in_flight.insert(Message { from, to, body });
    }

    fn relay_index(&self, node: usize) -> usize {
        node - 1
    }

    /// The verdict of relay `node` on redo of `incarnation`: taken or not, and whether the
    /// sender is told it is stale (which fences P).
    fn relay_takes(&self, relay: &Relay, incarnation: u32) -> (bool, bool) {
        if !relay::takes_redo(Incarnation(relay.sealed_below), Incarnation(incarnation)) {
            return (false, false);
        }
        // (Only P sends incarnation 1: the history a relay keeps of incarnation 2 has no
        // record to compare with it.)
        let history = IncarnationHistory::default();
        let view = StandbyView {
            incarnation: Incarnation(relay.incarnation),
            history: &history,
            next: at(relay.log),
            fenced_by: relay.fenced.then_some(Incarnation(NEW)),
            // (A far sync: no data files.)
            data_through: redo::Scn(0),
        };
        match decide(&view, Incarnation(incarnation), &[]) {
            Verdict::Follow => (true, false),
            Verdict::StalePrimary { .. } => (false, true),
            Verdict::Adopt(_) | Verdict::Diverged(_) => (false, false),
        }
    }

    fn deliver(&self, state: &mut State, message: Message) -> Option<()> {
        let Message { from, to, body } = message;
        if !self.link(state, from, to) {
            return None;
        }
        state.in_flight.remove(&message);
        let terminal = self.terminal();
        match body {
            Body::Redo { incarnation, end } if to == terminal => {
                let t = &mut state.terminal;
                // T follows its relay in incarnation 1 until it opens (then it takes no redo).
                if t.up && incarnation == OLD && !matches!(t.failover, Failover::Open { .. }) {
                    t.log = t.log.max(end);
                }
            }
            Body::Redo { incarnation, end } => {
                let index = self.relay_index(to);
                let relay = &state.relays[index];
                if !relay.up {
                    return Some(());
                }
                let (taken, stale) = self.relay_takes(relay, incarnation);
                if stale && from == PRIMARY {
                    state.primary.fenced = true;
                }
                if !taken {
                    return Some(());
                }
                let relay = &mut state.relays[index];
                relay.log = relay.log.max(end);
                let held = relay.log;
                if from == PRIMARY {
                    // SYNC AFFIRM: acknowledged once durable.
                    self.send(state, to, PRIMARY, Body::Ack { end: held });
                }
            }
            Body::Ack { end } => {
                let primary = &mut state.primary;
                if !primary.fenced {
                    primary.answered = primary.answered.max(end.min(primary.log));
                }
            }
            Body::Seal => {
                let index = self.relay_index(to);
                let persist = self.config.variant != Variant::SealInMemory;
                let seal = self.config.variant != Variant::NoSeal;
                let relay = &mut state.relays[index];
                // A relay in another incarnation holds no tail of incarnation 1: it refuses.
                if !relay.up || relay.incarnation != OLD {
                    return Some(());
                }
                if seal {
                    let below = relay::seal(Incarnation(relay.sealed_below), Incarnation(OLD));
                    relay.sealed_below = below.0;
                    if persist {
                        relay.sealed_below_on_disk = relay.sealed_below_on_disk.max(below.0);
                    }
                }
                let end = relay.log;
                self.send(state, to, terminal, Body::Sealed { end });
            }
            Body::Sealed { end } => {
                let t = &mut state.terminal;
                if t.up && t.failover == Failover::Sealing {
                    t.failover = Failover::Waiting { end };
                }
            }
        }
        Some(())
    }
}

impl Model for RelaySystem {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let relay = Relay {
            incarnation: OLD,
            fenced: false,
            log: 0,
            sealed_below_on_disk: 0,
            up: true,
            sealed_below: 0,
        };
        vec![State {
            primary: Primary { log: 0, answered: 0, fenced: false },
            relays: vec![relay; self.config.relays],
            terminal: Terminal { log: 0, up: true, failover: Failover::Idle },
            in_flight: BTreeSet::new(),
            cut: BTreeSet::new(),
            faults_left: self.config.faults,
            answered_at_open: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let terminal = self.terminal();
        let primary = &state.primary;
        if !primary.fenced && primary.log < self.config.writes {
            actions.push(Action::Write);
        }
        if !primary.fenced && primary.log > 0 && self.link(state, PRIMARY, 1) {
            actions.push(Action::Ship);
        }
        for (index, relay) in state.relays.iter().enumerate() {
            let node = index + 1;
            // (A relay that adopted incarnation 2 would forward T's redo, which T does not
            // write here.)
            let forwards = relay.up && relay.incarnation == OLD && !relay.fenced;
            if forwards && relay.log > 0 && self.link(state, node, self.next_hop(node)) {
                actions.push(Action::Forward(node));
            }
        }
        for message in &state.in_flight {
            if self.link(state, message.from, message.to) {
                actions.push(Action::Deliver(*message));
            }
            actions.push(Action::Lose(*message));
        }
        let t = &state.terminal;
        if t.up {
            match t.failover {
                Failover::Idle => actions.push(Action::Failover),
                Failover::Sealing => actions.push(Action::GiveUp),
                Failover::Waiting { .. } => {
                    actions.push(Action::Open);
                    actions.push(Action::GiveUp);
                }
                Failover::Open { .. } => {
                    for node in 1..=self.config.relays {
                        if self.link(state, terminal, node) && self.link(state, node, terminal) {
                            actions.push(Action::Hello(node));
                        }
                    }
                }
            }
        }
        if state.faults_left > 0 {
            if self.config.crashes {
                for (index, relay) in state.relays.iter().enumerate() {
                    if relay.up {
                        actions.push(Action::Crash(index + 1));
                    }
                }
                if t.up && !matches!(t.failover, Failover::Open { .. }) {
                    actions.push(Action::Crash(terminal));
                }
            }
            if self.config.cuts {
                for from in 0..=terminal {
                    for to in [from.wrapping_sub(1), from + 1] {
                        if to <= terminal && !state.cut.contains(&(from, to)) {
                            actions.push(Action::Cut(from, to));
                        }
                    }
                }
            }
        }
        for (index, relay) in state.relays.iter().enumerate() {
            if !relay.up {
                actions.push(Action::Restart(index + 1));
            }
        }
        if !t.up {
            actions.push(Action::Restart(terminal));
        }
        for &(from, to) in &state.cut {
            actions.push(Action::Heal(from, to));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let terminal = self.terminal();
        match action {
            Action::Write => state.primary.log += 1,
            Action::Ship => {
                let end = state.primary.log;
                self.send(&mut state, PRIMARY, 1, Body::Redo { incarnation: OLD, end });
            }
            Action::Forward(node) => {
                let relay = &state.relays[self.relay_index(node)];
                let body = Body::Redo { incarnation: relay.incarnation, end: relay.log };
                self.send(&mut state, node, self.next_hop(node), body);
            }
            Action::Deliver(message) => self.deliver(&mut state, message)?,
            Action::Lose(message) => {
                state.in_flight.remove(&message);
            }
            Action::Failover => {
                // T's relay is the last; it receives from the one before it (P with one relay).
                let relay = self.config.relays;
                let source = self.name(relay - 1);
                if self.config.variant != Variant::NoTwoRelayCheck
                    && relay::sealable("P", &self.name(relay), Some(&source)).is_err()
                {
                    // Refused: nothing changes.
                    return None;
                }
                state.terminal.failover = Failover::Sealing;
                self.send(&mut state, terminal, relay, Body::Seal);
            }
            Action::Open => {
                let Failover::Waiting { end } = state.terminal.failover else {
                    return None;
                };
                let t = &mut state.terminal;
                // The whole log is one log, complete below it.
                if !relay::tail_taken(at(end), at(t.log), LogSeq(0)) {
                    return None;
                }
                t.failover = Failover::Open { branch: t.log };
                state.answered_at_open = Some(state.primary.answered);
            }
            Action::GiveUp => state.terminal.failover = Failover::Idle,
            Action::Hello(node) => {
                let Failover::Open { branch } = state.terminal.failover else {
                    return None;
                };
                let index = self.relay_index(node);
                let relay = &state.relays[index];
                if !relay.up || relay.incarnation == NEW || relay.fenced {
                    return None;
                }
                let view = StandbyView {
                    incarnation: Incarnation(relay.incarnation),
                    history: &IncarnationHistory::default(),
                    next: at(relay.log),
                    fenced_by: None,
                    data_through: redo::Scn(0),
                };
                let verdict = decide(&view, Incarnation(NEW), &[branch_record(branch)]);
                let relay = &mut state.relays[index];
                match verdict {
                    Verdict::Adopt(_) => relay.incarnation = NEW,
                    Verdict::Diverged(_) => relay.fenced = true,
                    Verdict::Follow | Verdict::StalePrimary { .. } => return None,
                }
            }
            Action::Crash(node) => {
                state.faults_left -= 1;
                if node == terminal {
                    state.terminal.up = false;
                    state.terminal.failover = Failover::Idle;
                } else {
                    let relay = &mut state.relays[self.relay_index(node)];
                    relay.up = false;
                    relay.sealed_below = 0;
                }
            }
            Action::Restart(node) => {
                if node == terminal {
                    state.terminal.up = true;
                } else {
                    let relay = &mut state.relays[self.relay_index(node)];
                    relay.up = true;
                    relay.sealed_below = relay.sealed_below_on_disk;
                }
            }
            Action::Cut(from, to) => {
                state.faults_left -= 1;
                state.cut.insert((from, to));
            }
            Action::Heal(from, to) => {
                state.cut.remove(&(from, to));
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(ONE_PRIMARY, |_, state| match state.terminal.failover {
                Failover::Open { branch } => {
                    let at_open = state.answered_at_open.unwrap_or(0);
                    state.primary.answered <= branch.max(at_open)
                }
                _ => true,
            }),
            Property::<Self>::always(NOTHING_LOST, |_, state| match state.terminal.failover {
                Failover::Open { branch } => state.answered_at_open.unwrap_or(0) <= branch,
                _ => true,
            }),
            Property::<Self>::always(NO_LATE_ACKNOWLEDGEMENT, |_, state| {
                state.answered_at_open.is_none_or(|at_open| state.primary.answered == at_open)
            }),
            Property::<Self>::sometimes(OPENS, |_, state| {
                matches!(state.terminal.failover, Failover::Open { .. })
                    && state.answered_at_open.is_some_and(|answered| answered > 0)
            }),
        ]
    }
}

/// (a): once T opened, P acknowledges no write past T's branch point (no write of
/// incarnation 2's window but T's).
pub const ONE_PRIMARY: &str = "once T opened, P acknowledges no write T does not hold";
/// (b): zero data loss.
pub const NOTHING_LOST: &str = "every write P acknowledged is in T's log when T opens";
/// The strict reading of (a): P acknowledges nothing at all once T opened. Not a safety
/// property of the design: an acknowledgement sent before the seal may arrive after T opened,
/// for a write T holds (checked to be so).
pub const NO_LATE_ACKNOWLEDGEMENT: &str = "once T opened, P acknowledges no write at all";
/// T opens after P acknowledged a write (the model reaches the interesting case).
pub const OPENS: &str = "T opens after P acknowledged a write";
