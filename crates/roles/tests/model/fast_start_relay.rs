//! The model of fast-start failover to a target behind a far sync: a primary P ships SYNC
//! AFFIRM to a far sync F, which forwards ASYNC to a terminal standby T, the observer O's
//! target; Maximum Availability. P's decisions are `roles::fast_start::Primary`'s (the far
//! sync's acknowledgements count for T: `admit`, `refresh`, the grants, `owed`), T's are
//! `roles::fast_start::accept_failover` and `roles::relay`'s (seal, tail), the observer's are
//! its rules (docs/fast-start-failover.md), written out here.
//!
//! What is modelled, and how:
//!
//! - **Logs as lengths** (every log is a prefix of P's), as in `relay.rs`; a write, its sync
//!   and the acknowledgement that carries the synced end are one step.
//! - **Messages** are a set in flight, delivered in any order or never (lost): P's redo and its
//!   heartbeat to F (the heartbeat carries P's word for T: the observer it may take a failover
//!   from, whether it is synchronized), F's acknowledgement, F's forwarding and its own
//!   heartbeat to T (the word it holds from P's last heartbeat, in F's current session), T's
//!   seal and F's answer. A crash ends a process's connections: what was in flight to or from
//!   it is gone. F's messages carry its session (a boot count): T forgets the word at a newer
//!   session's first message (its hello), and takes nothing from an older one.
//! - **P** takes writes, acknowledges one when `Primary::admit` says so (F's acknowledgement
//!   covering it, or the lease and the grant for T), drops F from SYNC (a timeout) and ships
//!   SYNC again at any moment (`set_shipping_sync`: synchronized only once F holds what is
//!   owed). Its lease, once given, never runs out: Maximum Availability's argument needs no
//!   clock, so P is given every chance to act. It crashes (kill -9) and, if the
//!   configuration says so, restarts with exactly what the server keeps on disk: its redo (the
//!   writes, durable before acknowledged) and its `fast-start.record` (the active observer,
//!   the targets named one; `PrimaryRecord`), rebuilt by `Primary::new` owing T its durable end
//!   (`server::role` opening a primary: `RecordFile::load`, `FastStart::new(..,
//!   durable_addr())`). Its leases, grants, SYNC destinations, synchronized targets and `owed`
//!   are memory: gone. Its connections are new: an observer's first ping gives no lease, and F
//!   forgets P's word at the new session's hello (unless F is sealed: it refuses the hello).
//!   A write pending at the crash may be acknowledged after the restart (the real server
//!   acknowledges only later writes, at later positions: no weaker a check).
//! - **O** pings P (a grant recorded before the ping that carries it; P's answer: the targets
//!   synchronized, the targets it wants to go on without, its durable end): the ping and its
//!   answer one step, the answer possibly lost. F's position and T's word it reads when it
//!   decides, if it reaches them (an earlier answer would only hold less: F's log only grows,
//!   and T checks its own word again when asked).
//!   It decides P is lost whenever it likes (no timing assumption), if T is ready: P's last
//!   answer listed T synchronized with no grant since, T names O and is synchronized by its
//!   own account, and F holds P's durable end as of that answer. The decision is final until T
//!   refuses finally; from then on it leases P nothing. (A ping whose answer is lost is a
//!   step only while O has T ineligible or has decided: otherwise it would change only P's
//!   lease of O, and after P's restart O learning nothing; left out, since no grant comes
//!   without an answer that shows P asking.)
//! - **O2** (a second observer, after O in priority, when the configuration has it) pings P
//!   with its lease, says T follows it when T names it, and grants T away while P names it
//!   active and asks; it is never the one that fails over. Its pings before P's first restart
//!   are left out: O's lease never runs out, so they change nothing that lasts.
//! - **T** takes the request by `accept_failover`, then seals F, waits for the tail, opens (or
//!   gives up, not finally: O asks again). While it waits it goes on receiving from F (the
//!   tail comes that way), F's heartbeats included, as the real target does
//!   (`server::role::relay_tail`: the receiver stops only after the tail).
//! - **Faults**, from a budget: crashes of P (for good, or restarted) and of F (it restarts,
//!   keeping its log and its seal, forgetting P's word), one-way cuts of a link.

use std::collections::BTreeSet;
use std::time::Duration;

use proto::ObserverPing;
use roles::fast_start::{
    Admission, FailoverRequest, Position, Primary, PrimaryRecord, Protection, Settings, TargetView,
    Time, accept_failover,
};
use roles::relay;
use stateright::{Model, Property};

use redo::{Incarnation, LogSeq, RedoAddr};

/// The logic checked: today's, or one with a step missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Current,
    /// The observer's failover opens T with what it holds: F's acknowledgements are counted for
    /// T without the seal and the tail.
    NoTail,
    /// P calls T synchronized once it ships to F synchronously again, whether or not F holds
    /// what P acknowledged without it, and the observer takes P's word without comparing F's
    /// position (issue 29's "synchronized once sent", through a relay).
    SynchronizedOnceSent,
    /// P restarts with no record (`fast-start.record` lost): it has named no observer to
    /// anyone, so a second observer becomes active at once (issue 29's second hole, through a
    /// relay).
    RestartWithoutRecord,
    /// T, while it takes over (sealing F and waiting for its tail, still receiving from F),
    /// passes on the word F's heartbeats carry, as the server did before the fix of the hole
    /// the restart check found (docs/fast-start-failover.md, "A target keeps its word while
    /// it takes over"): a second observer P named after its restart becomes active through T
    /// and grants T away. Today T keeps the word it took the request under until the request
    /// ends (opened, or given up): `server::role::fast_start::Hooks::taking_over`.
    WordPassedOnWhileFailingOver,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub writes: u8,
    pub faults: u8,
    pub cuts: bool,
    pub variant: Variant,
    /// Whether P, crashed, may restart (with what it keeps on disk: its redo and its record).
    pub restarts: bool,
    /// The observers: O, and (2) O2 after it in priority, which leases and grants but is never
    /// the one that fails over.
    pub observers: u8,
    /// Whether the fault budget buys crashes of F too (else of P only).
    pub far_crashes: bool,
    /// Whether O pings P (a variant's hunt may leave it out: a counterexample among fewer
    /// behaviours is one among all).
    pub observer_pings: bool,
}

pub const P: usize = 0;
pub const F: usize = 1;
pub const T: usize = 2;
pub const O: usize = 3;
pub const O2: usize = 4;

/// The primary's word for T: the observer named, and synchronized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Word {
    /// The observer named (O or O2).
    pub observer: Option<usize>,
    pub synchronized: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PrimaryNode {
    pub up: bool,
    /// Its session (with F and the observers): one more at every restart.
    pub boot: u8,
    pub log: u8,
    pub answered: u8,
    /// F's durable end as its acknowledgements said.
    pub f_acknowledged: u8,
    /// Whether it ships to F synchronously now.
    pub shipping_sync: bool,
    pub core: Primary,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FarSync {
    pub up: bool,
    /// Its session with T (and P): one more at every restart.
    pub boot: u8,
    pub log: u8,
    /// On disk before the seal's answer.
    pub sealed_below: u32,
    /// P's word for T, from P's last heartbeat of this session.
    pub word: Option<Word>,
    /// P's session it last took a hello of (a new one: P's word is forgotten).
    pub p_boot: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failover {
    Idle,
    Sealing,
    Waiting { end: u8 },
    Open { branch: u8 },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Terminal {
    pub log: u8,
    /// F's session it last heard, and the word it passed on in it.
    pub boot: u8,
    pub word: Option<Word>,
    pub failover: Failover,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObserverNode {
    /// Its first ping to P gives no lease.
    pub pinged: bool,
    /// P named it active in its last answer.
    pub active: bool,
    /// P's last answer: T synchronized, T wanted to go without, P's durable end.
    /// P's last answer: T synchronized, P's durable end.
    pub p_answer: Option<(bool, u8)>,
    /// On disk: T granted away (until P lists it synchronized again), and a failover decided.
    pub ineligible: bool,
    pub decided: bool,
}

/// O2: it leases P, and grants what P asks while it is active (recording first that it will
/// not fail over to T: it never does in this model).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct SecondObserver {
    /// Its first ping on a connection to P gives no lease.
    pub pinged: bool,
    /// It grants T away on its pings (P asked while O2 was active).
    pub granting: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Body {
    Redo { end: u8 },
    Beat { word: Word },
    Ack { end: u8 },
    Forward { boot: u8, end: u8 },
    ForwardBeat { boot: u8, word: Option<Word> },
    Seal,
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
    pub primary: PrimaryNode,
    pub far: FarSync,
    pub terminal: Terminal,
    pub observer: ObserverNode,
    pub second: SecondObserver,
    pub in_flight: BTreeSet<Message>,
    pub cut: BTreeSet<(usize, usize)>,
    pub faults_left: u8,
    pub answered_at_open: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    Write,
    Ship,
    Heartbeat,
    /// P acknowledges its next write, if `admit` lets it.
    Acknowledge,
    /// P drops F from SYNC (a timeout).
    DropSync,
    /// P ships to F synchronously again.
    ShipSync,
    Forward,
    ForwardBeat,
    Deliver(Message),
    /// O pings a member; `answered`: its answer arrives.
    Ping {
        to: usize,
        answered: bool,
    },
    /// O2 pings P; `answered`: its answer arrives.
    PingSecond {
        answered: bool,
    },
    /// O decides P is lost and T ready.
    Decide,
    /// O asks T to fail over (answered, one step).
    Ask,
    Open,
    GiveUp,
    Crash(usize),
    Restart(usize),
    Cut(usize, usize),
    Heal(usize, usize),
}

pub struct FastStartRelay {
    pub config: Config,
}

const OLD: u32 = 1;

fn at(writes: u8) -> Position {
    Position { seq: 1, offset: u64::from(writes) }
}

fn addr(writes: u8) -> RedoAddr {
    RedoAddr { seq: LogSeq(1), offset: u64::from(writes) }
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

pub fn name(node: usize) -> &'static str {
    ["P", "F", "T", "O", "O2"][node]
}

fn settings(observers: u8) -> Settings {
    Settings {
        threshold: Duration::from_secs(2),
        lag_limit: Duration::from_secs(30),
        protection: Protection::MaximumAvailability,
        targets: vec!["T".into()],
        observers: ["O", "O2"][..usize::from(observers)].iter().map(|o| o.to_string()).collect(),
        relays: [("P".to_string(), [("T".to_string(), "F".to_string())].into())].into(),
    }
}

impl FastStartRelay {
    fn link(&self, state: &State, from: usize, to: usize) -> bool {
        !state.cut.contains(&(from, to))
    }

    fn both_ways(&self, state: &State, a: usize, b: usize) -> bool {
        self.link(state, a, b) && self.link(state, b, a)
    }

    /// A message on a connection replaces the one of its kind still in flight there (the older
    /// one as good as lost: a connection delivers in order, so only the newest can matter once
    /// both arrived); messages of different kinds and links arrive in any order.
    fn send(state: &mut State, from: usize, to: usize, body: Body) {
        let kind = std::mem::discriminant(&body);
        state.in_flight.retain(|message| {
            (message.from, message.to, std::mem::discriminant(&message.body)) != (from, to, kind)
        });
        state.in_flight.insert(Message { from, to, body });
    }

    /// How far each destination has acknowledged, as P knows it (the variant: F "holds"
    /// everything once shipped to synchronously).
    fn acknowledged(&self, state: &State) -> impl Fn(&str) -> Position + use<> {
        let f = if self.config.variant == Variant::SynchronizedOnceSent {
            u8::MAX
        } else {
            state.primary.f_acknowledged
        };
        move |name| if name == "F" { at(f) } else { at(0) }
    }

    /// F takes P's current session: at its first message (its hello), unless sealed (then
    /// refused), F forgets the last session's word (`transport::receiver::handshake`). Whatever
    /// of an older session was in flight went with P's crash.
    fn hello(state: &mut State) -> bool {
        let far = &mut state.far;
        if far.p_boot < state.primary.boot {
            if !relay::takes_redo(Incarnation(far.sealed_below), Incarnation(OLD)) {
                return false;
            }
            far.p_boot = state.primary.boot;
            far.word = None;
        }
        true
    }

    fn deliver(&self, state: &mut State, message: Message) -> Option<()> {
        if !self.link(state, message.from, message.to) {
            return None;
        }
        state.in_flight.remove(&message);
        if message.from == P && !Self::hello(state) {
            return Some(());
        }
        match message.body {
            Body::Redo { end } => {
                let far = &mut state.far;
                if far.up && relay::takes_redo(Incarnation(far.sealed_below), Incarnation(OLD)) {
                    far.log = far.log.max(end);
                    let held = far.log;
                    Self::send(state, F, P, Body::Ack { end: held });
                }
            }
            Body::Beat { word } => {
                if state.far.up {
                    state.far.word = Some(word);
                }
            }
            Body::Ack { end } => {
                let primary = &mut state.primary;
                primary.f_acknowledged = primary.f_acknowledged.max(end);
                let acknowledged = self.acknowledged(state);
                state.primary.core.refresh(&acknowledged);
            }
            Body::Forward { boot, .. } | Body::ForwardBeat { boot, .. } => {
                let t = &mut state.terminal;
                if matches!(t.failover, Failover::Open { .. }) || boot < t.boot {
                    return Some(());
                }
                if boot > t.boot {
                    // A new session of F: its hello came first; the last one's word is gone.
                    t.boot = boot;
                    t.word = None;
                }
                let keeps = self.config.variant != Variant::WordPassedOnWhileFailingOver
                    && t.failover != Failover::Idle;
                match message.body {
                    Body::Forward { end, .. } => t.log = t.log.max(end),
                    Body::ForwardBeat { .. } if keeps => {}
                    Body::ForwardBeat { word, .. } => t.word = word,
                    _ => unreachable!(),
                }
            }
            Body::Seal => {
                let far = &mut state.far;
                if far.up {
                    far.sealed_below =
                        relay::seal(Incarnation(far.sealed_below), Incarnation(OLD)).0;
                    let end = far.log;
                    Self::send(state, F, T, Body::Sealed { end });
                }
            }
            Body::Sealed { end } => {
                if state.terminal.failover == Failover::Sealing {
                    state.terminal.failover = Failover::Waiting { end };
                }
            }
        }
        Some(())
    }

    /// O's ping to P, and (if `answered`) P's answer.
    fn ping_primary(&self, state: &mut State, answered: bool) {
        let observer = &mut state.observer;
        let ping = ObserverPing {
            observer: "O".into(),
            lease: !observer.decided,
            grant_unsync: if observer.ineligible && !observer.decided {
                vec!["T".into()]
            } else {
                Vec::new()
            },
            following: if state.terminal.word.is_some_and(|word| word.observer == Some(O)) {
                vec!["T".into()]
            } else {
                Vec::new()
            },
            ..ObserverPing::default()
        };
        let lease_from = observer.pinged.then_some(Time(0));
        observer.pinged = true;
        let primary = &mut state.primary;
        let _ = primary.core.note_ping(&ping, lease_from, Time(0), &mut |_| Ok(()));
        if !answered {
            return;
        }
        let view = primary.core.view(Time(0));
        let synchronized = view.synchronized.iter().any(|name| name == "T");
        let wants = view.wants_unsync.iter().any(|name| name == "T");
        let observer = &mut state.observer;
        observer.active = primary.core.active() == Some("O");
        observer.p_answer = Some((synchronized, primary.log));
        if observer.active && !observer.decided {
            // A grant is recorded before the ping that carries it; a target listed
            // synchronized is eligible again.
            if synchronized {
                observer.ineligible = false;
            } else if wants {
                observer.ineligible = true;
            }
        }
    }

    /// O2's ping to P, and (if `answered`) P's answer: O2 is active once P names it, and from
    /// then on grants what P asks (until P lists T synchronized).
    fn ping_second(&self, state: &mut State, answered: bool) {
        let second = &mut state.second;
        let ping = ObserverPing {
            observer: "O2".into(),
            lease: true,
            grant_unsync: if second.granting { vec!["T".into()] } else { Vec::new() },
            following: if state.terminal.word.is_some_and(|word| word.observer == Some(O2)) {
                vec!["T".into()]
            } else {
                Vec::new()
            },
            ..ObserverPing::default()
        };
        let lease_from = second.pinged.then_some(Time(0));
        second.pinged = true;
        let primary = &mut state.primary;
        let _ = primary.core.note_ping(&ping, lease_from, Time(0), &mut |_| Ok(()));
        if !answered {
            return;
        }
        let view = primary.core.view(Time(0));
        if primary.core.active() == Some("O2") {
            if view.synchronized.iter().any(|name| name == "T") {
                state.second.granting = false;
            } else if view.wants_unsync.iter().any(|name| name == "T") {
                state.second.granting = true;
            }
        }
    }

    /// P restarts with what the server keeps on disk (`server::role` opening a primary:
    /// `transport::fast_start::RecordFile::load` and `FastStart::new(.., record,
    /// durable_addr())`): its redo and its record (the active observer, the targets named
    /// one); its leases, grants, what it ships SYNC, the synchronized targets and `owed` are
    /// memory, rebuilt by `Primary::new` owing every target its durable end. Its connections
    /// are new: each observer's first ping gives no lease, F forgets its word at the hello.
    fn restart_primary(&self, state: &mut State) {
        let primary = &mut state.primary;
        let record = if self.config.variant == Variant::RestartWithoutRecord {
            PrimaryRecord::default()
        } else {
            primary.core.record().clone()
        };
        primary.core = Primary::new(settings(self.config.observers), "P", record, at(primary.log));
        primary.up = true;
        primary.boot += 1;
        primary.f_acknowledged = 0;
        primary.shipping_sync = false;
        state.observer.pinged = false;
        state.second.pinged = false;
    }

    /// Whether O fails over to T now. What F and T answer is taken as they are at this
    /// moment (O reaching them): an earlier answer only holds less (F's log only grows), and T
    /// checks its own word again when asked.
    fn ready(&self, state: &State) -> bool {
        let observer = &state.observer;
        let Some((synchronized, end)) = observer.p_answer else { return false };
        let Some(word) = state.terminal.word else { return false };
        let reaches = |member| self.both_ways(state, O, member);
        let holds_end = self.config.variant == Variant::SynchronizedOnceSent
            || (state.far.up && reaches(F) && state.far.log >= end);
        observer.active
            && reaches(T)
            && synchronized
            && !observer.ineligible
            && word.observer == Some(O)
            && word.synchronized
            && holds_end
    }
}

impl Model for FastStartRelay {
    type State = State;
    type Action = Action;

    /// Armed: P ships SYNC to F, O is active (it pinged P twice), P told T (through F) that
    /// it is synchronized and names O, and O has heard every member say so.
    fn init_states(&self) -> Vec<State> {
        let mut core =
            Primary::new(settings(self.config.observers), "P", PrimaryRecord::default(), at(0));
        core.set_shipping_sync(names(&["F"]), &|_| at(0));
        let ping = ObserverPing { observer: "O".into(), lease: true, ..ObserverPing::default() };
        let _ = core.note_ping(&ping, None, Time(0), &mut |_| Ok(()));
        let _ = core.note_ping(&ping, Some(Time(0)), Time(0), &mut |_| Ok(()));
        assert_eq!(core.active(), Some("O"));
        assert!(core.announce_to("T", &mut |_| Ok(())).is_some());
        assert_eq!(core.view(Time(0)).synchronized, ["T"]);
        let word = Some(Word { observer: Some(O), synchronized: true });
        vec![State {
            primary: PrimaryNode {
                up: true,
                boot: 0,
                log: 0,
                answered: 0,
                f_acknowledged: 0,
                shipping_sync: true,
                core,
            },
            far: FarSync { up: true, boot: 0, log: 0, sealed_below: 0, word, p_boot: 0 },
            terminal: Terminal { log: 0, boot: 0, word, failover: Failover::Idle },
            observer: ObserverNode {
                pinged: true,
                active: true,
                p_answer: Some((true, 0)),
                ineligible: false,
                decided: false,
            },
            second: SecondObserver::default(),
            in_flight: BTreeSet::new(),
            cut: BTreeSet::new(),
            faults_left: self.config.faults,
            answered_at_open: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let primary = &state.primary;
        let open = matches!(state.terminal.failover, Failover::Open { .. });
        if primary.up {
            if primary.log < self.config.writes {
                actions.push(Action::Write);
            }
            if self.link(state, P, F) {
                if primary.log > 0 {
                    actions.push(Action::Ship);
                }
                actions.push(Action::Heartbeat);
            }
            if primary.answered < primary.log {
                actions.push(Action::Acknowledge);
            }
            actions.push(if primary.shipping_sync { Action::DropSync } else { Action::ShipSync });
        }
        if state.far.up && self.link(state, F, T) && !open {
            if state.far.log > 0 {
                actions.push(Action::Forward);
            }
            actions.push(Action::ForwardBeat);
        }
        for message in &state.in_flight {
            // (No loss as a step of its own: a message never delivered is one lost, and stays
            // in flight only until its connection's next message of its kind, or a crash.)
            if self.link(state, message.from, message.to) {
                actions.push(Action::Deliver(*message));
            }
        }
        if primary.up && self.config.observer_pings && self.link(state, O, P) {
            if state.observer.ineligible || state.observer.decided {
                // P notes the ping (a grant, or the lease withdrawn), and its answer is lost.
                // (Otherwise such a ping changes nothing.)
                actions.push(Action::Ping { to: P, answered: false });
            }
            if self.link(state, P, O) {
                actions.push(Action::Ping { to: P, answered: true });
            }
        }
        // (O2's pings before P's first restart change nothing that lasts: O's lease never runs
        // out, so O2 is never proposed, and P forgets O2's lease when it restarts.)
        if primary.up && self.config.observers > 1 && primary.boot > 0 {
            if state.second.granting {
                actions.push(Action::PingSecond { answered: false });
            }
            actions.push(Action::PingSecond { answered: true });
        }
        if !state.observer.decided && self.ready(state) {
            actions.push(Action::Decide);
        }
        if state.observer.decided
            && state.terminal.failover == Failover::Idle
            && self.both_ways(state, O, T)
        {
            actions.push(Action::Ask);
        }
        match state.terminal.failover {
            Failover::Sealing => actions.push(Action::GiveUp),
            Failover::Waiting { .. } => {
                actions.push(Action::Open);
                actions.push(Action::GiveUp);
            }
            _ => {}
        }
        if state.faults_left > 0 {
            if primary.up {
                actions.push(Action::Crash(P));
            }
            if state.far.up && self.config.far_crashes {
                actions.push(Action::Crash(F));
            }
            if self.config.cuts {
                for (from, to) in [(P, F), (F, P), (F, T), (O, P), (P, O), (O, T), (O, F)] {
                    if !state.cut.contains(&(from, to)) {
                        actions.push(Action::Cut(from, to));
                    }
                }
            }
        }
        if !state.far.up {
            actions.push(Action::Restart(F));
        }
        if !primary.up && self.config.restarts {
            actions.push(Action::Restart(P));
        }
        for &(from, to) in &state.cut {
            actions.push(Action::Heal(from, to));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Write => state.primary.log += 1,
            Action::Ship => {
                let end = state.primary.log;
                Self::send(&mut state, P, F, Body::Redo { end });
            }
            Action::Heartbeat => {
                let core = &mut state.primary.core;
                let observer = core
                    .announce_to("T", &mut |_| Ok(()))
                    .map(|observer| if observer == "O" { O } else { O2 });
                let synchronized = core.view(Time(0)).synchronized.iter().any(|name| name == "T");
                Self::send(&mut state, P, F, Body::Beat { word: Word { observer, synchronized } });
            }
            Action::Acknowledge => {
                let primary = &mut state.primary;
                let next = primary.answered + 1;
                let holding =
                    if primary.f_acknowledged >= next { names(&["F"]) } else { BTreeSet::new() };
                match primary.core.admit(at(next), &holding, Time(0)) {
                    Admission::Admit => primary.answered = next,
                    Admission::Wait { .. } => return None,
                }
            }
            Action::DropSync => {
                let acknowledged = self.acknowledged(&state);
                state.primary.core.set_shipping_sync(BTreeSet::new(), &acknowledged);
                state.primary.shipping_sync = false;
            }
            Action::ShipSync => {
                let acknowledged = self.acknowledged(&state);
                state.primary.core.set_shipping_sync(names(&["F"]), &acknowledged);
                state.primary.shipping_sync = true;
            }
            Action::Forward => {
                let (boot, end) = (state.far.boot, state.far.log);
                Self::send(&mut state, F, T, Body::Forward { boot, end });
            }
            Action::ForwardBeat => {
                let (boot, word) = (state.far.boot, state.far.word);
                Self::send(&mut state, F, T, Body::ForwardBeat { boot, word });
            }
            Action::Deliver(message) => self.deliver(&mut state, message)?,
            Action::Ping { answered, .. } => self.ping_primary(&mut state, answered),
            Action::PingSecond { answered } => self.ping_second(&mut state, answered),
            Action::Decide => state.observer.decided = true,
            Action::Ask => {
                let t = &state.terminal;
                let word = t.word.unwrap_or_default();
                let view = TargetView {
                    member: "T".into(),
                    enabled: true,
                    open_standby: true,
                    incarnation: OLD,
                    primary: Some("P".into()),
                    observer: word.observer.map(|observer| name(observer).to_string()),
                    synchronized: word.synchronized,
                    silence: Duration::from_secs(3600),
                    primary_port_refuses: false,
                };
                let request =
                    FailoverRequest { observer: "O".into(), from: "P".into(), incarnation: OLD };
                match accept_failover(&settings(self.config.observers), &view, &request) {
                    Ok(()) if self.config.variant == Variant::NoTail => {
                        let branch = state.terminal.log;
                        state.terminal.failover = Failover::Open { branch };
                        state.answered_at_open = Some(state.primary.answered);
                    }
                    Ok(()) => {
                        state.terminal.failover = Failover::Sealing;
                        Self::send(&mut state, T, F, Body::Seal);
                    }
                    // A final refusal: the decision is removed, P may be leased again.
                    Err(_) => state.observer.decided = false,
                }
            }
            Action::Open => {
                let Failover::Waiting { end } = state.terminal.failover else { return None };
                let t = &mut state.terminal;
                if !relay::tail_taken(addr(end), addr(t.log), LogSeq(0)) {
                    return None;
                }
                t.failover = Failover::Open { branch: t.log };
                state.answered_at_open = Some(state.primary.answered);
            }
            Action::GiveUp => state.terminal.failover = Failover::Idle,
            Action::Crash(node) => {
                state.faults_left -= 1;
                match node {
                    P => state.primary.up = false,
                    _ => {
                        state.far.up = false;
                        state.far.word = None;
                    }
                }
                state.in_flight.retain(|message| message.from != node && message.to != node);
            }
            Action::Restart(P) => self.restart_primary(&mut state),
            Action::Restart(_) => {
                state.far.up = true;
                state.far.boot += 1;
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
            Property::<Self>::always(NOTHING_LOST, |_, state| match state.terminal.failover {
                Failover::Open { branch } => state.answered_at_open.unwrap_or(0) <= branch,
                _ => true,
            }),
            Property::<Self>::always(ONE_PRIMARY, |_, state| match state.terminal.failover {
                Failover::Open { branch } => {
                    state.primary.answered <= branch.max(state.answered_at_open.unwrap_or(0))
                }
                _ => true,
            }),
            Property::<Self>::sometimes(FAILS_OVER, |_, state| {
                matches!(state.terminal.failover, Failover::Open { .. })
                    && state.answered_at_open.is_some_and(|answered| answered > 0)
            }),
        ]
    }
}

pub const NOTHING_LOST: &str =
    "every write P acknowledged is on T when the observer's failover opens it";
pub const ONE_PRIMARY: &str = "once T opened, P acknowledges no write T does not hold";
pub const FAILS_OVER: &str = "the observer fails over to T after P acknowledged a write";
