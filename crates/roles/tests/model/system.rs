//! The model: three members, two observers and the clients, driven through every interleaving
//! of their steps and of the faults, with the decisions made by `roles::fast_start` itself.
//!
//! What is modelled, and how:
//!
//! - **Members** keep on disk their role, incarnation, whether they are fenced, their redo (a
//!   log of write numbers: a standby holds a prefix of its primary's) and their fast-start
//!   record; everything else is lost when they crash. A primary's decisions are
//!   `fast_start::Primary`'s; a standby's acceptance of a failover is `accept_failover`.
//! - **Redo transport** between a primary and a standby: a session begins with a hello (the
//!   standby follows, adopts a newer incarnation, or refuses an older primary, which fences
//!   it), redo is *sent* (in flight), *delivered* (held durably by the standby) and
//!   *acknowledged*, in that order and each as a step of its own; the primary ships
//!   synchronously to a standby once everything is sent, and stops at any time (a timeout);
//!   heartbeats name the observer and whether the standby is synchronized.
//! - **Observers** keep on disk their record; their decisions are `fast_start::Observer`'s.
//!   A ping and its answer are one step, in which the ping may be lost, or the answer lost
//!   after the member acted on it (a failover request a target took without the observer
//!   knowing).
//! - **Clients** write to any member that takes writes, and a write is acknowledged when the
//!   primary's `admit` says so (a commit's acknowledgement and its check are one step: the
//!   stated assumption that no pause falls between them).
//! - **Time**: each process has its own clock. Under Maximum Availability each clock jumps
//!   forward by itself, by more than any timeout, whenever the checker likes: every timeout may
//!   fire at any moment, in any process, in any order — no timing assumption. Under Maximum
//!   Performance the clocks run at one rate (a tick of one second for all), as its argument
//!   assumes.
//! - **Faults**, from a budget: a one-way cut of any link (and its healing), the crash of any
//!   process (it restarts with what it kept on disk), a clock jump, a switchover.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use proto::{FastStartMode, ObserverPong, Position as WirePosition, RoleInfo, WireRole};
use roles::fast_start::{
    Admission, Observer, ObserverRecord, ObserverSettings, Position, Primary, PrimaryRecord,
    Protection, Settings, Time,
};
use stateright::{Model, Property};

#[path = "system/ping.rs"]
mod ping;
#[path = "system/start.rs"]
mod start;

pub const MEMBERS: [&str; 3] = ["east", "west", "south"];
pub const OBSERVERS: [&str; 2] = ["obs1", "obs2"];
/// Clocks start here (seconds), so that no time is ever below another's origin.
const CLOCK_START_S: u64 = 1000;
/// A clock jump under Maximum Availability: past every timeout.
const JUMP: Duration = Duration::from_secs(100);
/// A tick under Maximum Performance.
const TICK: Duration = Duration::from_secs(1);

/// The logic checked: today's, or the one before issue 29 with one of its holes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Current,
    /// An observer restarts with nothing on disk.
    ObserverAmnesia,
    /// A primary restarts, or takes over by a switchover, with no record of whom it named an
    /// observer to, and a standby keeps its last primary's word across a new session.
    TwoObservers,
    /// A standby counts as synchronized once everything is *sent* to it.
    SynchronizedWhenSent,
}

/// What is checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub protection: Protection,
    /// Members (2 or 3: east the primary, west a SYNC target, south an ASYNC standby that is
    /// never a target) and observers (1 or 2).
    pub members: usize,
    pub observers: usize,
    /// Client writes, and the fault budget (cuts, crashes, clock jumps under Maximum
    /// Availability; a switchover costs one too).
    pub writes: u8,
    pub faults: u8,
    pub switchovers: bool,
    /// Which faults the budget buys: one-way cuts, crashes, clock jumps (Maximum Availability).
    pub cuts: bool,
    pub crashes: bool,
    pub jumps: bool,
    pub variant: Variant,
    /// Start armed (every standby in session and synchronized, the first observer active and
    /// named to every target, and its view of them current), as the protocol's own steps
    /// reach it, instead of from the cold start.
    pub armed: bool,
}

impl Config {
    fn settings(&self) -> Settings {
        Settings {
            threshold: Duration::from_secs(2),
            lag_limit: Duration::from_secs(30),
            protection: self.protection,
            targets: vec!["east".into(), "west".into()],
            observers: OBSERVERS[..self.observers].iter().map(|name| name.to_string()).collect(),
            relays: Default::default(),
        }
    }

    fn observer_settings(&self, index: usize) -> ObserverSettings {
        ObserverSettings {
            me: OBSERVERS[index].into(),
            members: MEMBERS[..self.members].iter().map(|name| name.to_string()).collect(),
            fast_start: self.settings(),
            enabled: true,
            auto_reinstate: false,
        }
    }

    fn targets(&self) -> Vec<usize> {
        vec![0, 1]
    }
}

/// A primary's view of one standby.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Destination {
    pub session: bool,
    /// How much of the primary's log was sent, and acknowledged.
    pub sent: usize,
    pub acked: usize,
    /// Shipped synchronously.
    pub sync: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    // On disk.
    pub primary_role: bool,
    pub incarnation: u32,
    pub fenced: bool,
    pub log: Vec<u8>,
    pub record: PrimaryRecord,
    /// Model bookkeeping: which reign (the n-th member to open as primary) it is the primary
    /// of; 0 for a standby.
    pub reign: u8,
    // Volatile.
    pub up: bool,
    pub core: Option<Primary>,
    pub destinations: Vec<Destination>,
    /// How many of its writes it has answered (acknowledged, or given up after a crash).
    pub answered: usize,
    /// A standby: the member whose session it is in, and what that primary last said.
    pub following: Option<usize>,
    pub heard_observer: Option<String>,
    pub heard_synchronized: bool,
    pub last_heard: Time,
    pub now: Time,
    /// Per observer: when it sent its last answer on the open connection (a lease runs from
    /// it); none without an open connection.
    pub last_answer: Vec<Option<Time>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObserverActor {
    pub up: bool,
    pub disk: ObserverRecord,
    pub core: Observer,
    pub now: Time,
}

/// An acknowledgement a client received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Acked {
    pub write: u8,
    pub member: usize,
    pub reign: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub members: Vec<Member>,
    pub observers: Vec<ObserverActor>,
    /// Cut links, one way: (from, to), nodes numbered members first, then observers.
    pub cut: BTreeSet<(usize, usize)>,
    pub faults_left: u8,
    pub next_write: u8,
    pub reigns: u8,
    pub acks: Vec<Acked>,
}

impl Hash for State {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        for member in &self.members {
            (
                member.primary_role,
                member.incarnation,
                member.fenced,
                &member.log,
                &member.record,
                member.reign,
            )
                .hash(hasher);
            (
                member.up,
                &member.core,
                &member.destinations,
                member.answered,
                member.following,
                &member.heard_observer,
                member.heard_synchronized,
                member.last_heard,
                member.now,
                &member.last_answer,
            )
                .hash(hasher);
        }
        for observer in &self.observers {
            (observer.up, &observer.disk, observer.now).hash(hasher);
            observer.core.decision_state().hash(hasher);
        }
        (&self.cut, self.faults_left, self.next_write, self.reigns, &self.acks).hash(hasher);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    Write(usize),
    Acknowledge(usize),
    Hello(usize, usize),
    Send(usize, usize),
    Deliver(usize, usize),
    Ack(usize, usize),
    Synchronize(usize, usize),
    Desynchronize(usize, usize),
    Heartbeat(usize, usize),
    Ping(usize, usize),
    Step(usize),
    Cut(usize, usize),
    Heal(usize, usize),
    Crash(usize),
    Restart(usize),
    Jump(usize),
    Tick,
    Switchover(usize, usize),
}

pub struct System {
    pub config: Config,
}

fn at(position: usize) -> Position {
    Position { seq: 1, offset: position as u64 }
}

fn start() -> Time {
    Time(CLOCK_START_S * 1_000_000)
}

impl System {
    fn node_count(&self) -> usize {
        self.config.members + self.config.observers
    }

    fn observer_node(&self, observer: usize) -> usize {
        self.config.members + observer
    }

    fn link(&self, state: &State, from: usize, to: usize) -> bool {
        !state.cut.contains(&(from, to))
    }

    fn both_ways(&self, state: &State, a: usize, b: usize) -> bool {
        self.link(state, a, b) && self.link(state, b, a)
    }

    fn is_target(&self, member: usize) -> bool {
        self.config.targets().contains(&member)
    }

    /// An open primary: up, in the primary role, not fenced.
    fn open_primary(&self, member: &Member) -> bool {
        member.up && member.primary_role && !member.fenced && member.core.is_some()
    }

    fn new_core(&self, name: &str, record: PrimaryRecord, start: usize) -> Primary {
        Primary::new(self.config.settings(), name, record, at(start))
    }

    /// How far each destination of `primary` has acknowledged, as its fast-start state sees it
    /// (the old logic: as far as was sent).
    fn acknowledged(&self, primary: &Member) -> impl Fn(&str) -> Position + '_ {
        let destinations = primary.destinations.clone();
        let variant = self.config.variant;
        move |name: &str| {
            let index = MEMBERS.iter().position(|member| *member == name).unwrap_or(0);
            let destination = destinations.get(index).copied().unwrap_or_default();
            at(if variant == Variant::SynchronizedWhenSent {
                destination.sent.max(destination.acked)
            } else {
                destination.acked
            })
        }
    }

    fn refresh(&self, member: &mut Member) {
        let acknowledged = self.acknowledged(member);
        let shipping: BTreeSet<String> = member
            .destinations
            .iter()
            .enumerate()
            .filter(|(index, destination)| destination.sync && self.is_target(*index))
            .map(|(index, _)| MEMBERS[index].to_string())
            .collect();
        if let Some(core) = &mut member.core {
            core.set_shipping_sync(shipping, &acknowledged);
        }
    }

    fn member_pong(&self, member: &Member, index: usize) -> ObserverPong {
        let info = RoleInfo {
            member: MEMBERS[index].into(),
            role: if member.primary_role { WireRole::Primary } else { WireRole::Standby },
            database_id: 1,
            incarnation: member.incarnation,
            fenced_incarnation: if member.fenced { member.incarnation + 1 } else { 0 },
            primary: String::new(),
            position: WirePosition {
                current_seq: 1,
                current_offset: if member.primary_role {
                    member.answered as u64
                } else if self.config.variant == Variant::SynchronizedWhenSent {
                    // The old observer compared no positions: as if every target held all.
                    u64::MAX
                } else {
                    member.log.len() as u64
                },
                ..WirePosition::default()
            },
            durable_scn: 0,
            time_us: 0,
            history: Vec::new(),
        };
        let mut pong = ObserverPong { mode: FastStartMode::Enabled, ..ObserverPong::empty(info) };
        if let Some(core) = &member.core {
            let view = core.view(member.now);
            pong.active_observer = core.active().unwrap_or_default().to_string();
            pong.synchronized = view.all_synchronized;
            pong.wants_unsync = view.wants_unsync;
            pong.isolated = view.isolated;
            pong.targets_synchronized = view.synchronized;
        } else if !member.primary_role {
            pong.active_observer = member.heard_observer.clone().unwrap_or_default();
            pong.synchronized = member.heard_synchronized;
        }
        pong
    }

    /// A crash: everything not on disk is gone.
    fn crash_member(member: &mut Member, observers: usize, members: usize) {
        member.up = false;
        member.core = None;
        member.destinations = vec![Destination::default(); members];
        member.following = None;
        member.heard_observer = None;
        member.heard_synchronized = false;
        member.last_answer = vec![None; observers];
    }

    /// Opens `index` as the primary of a new reign.
    fn promote(&self, state: &mut State, index: usize, incarnation: u32, record: PrimaryRecord) {
        state.reigns += 1;
        let reign = state.reigns;
        let members = self.config.members;
        let member = &mut state.members[index];
        member.primary_role = true;
        member.incarnation = incarnation;
        member.fenced = false;
        member.record = record.clone();
        member.reign = reign;
        member.answered = member.log.len();
        member.following = None;
        member.destinations = vec![Destination::default(); members];
        member.core = Some(self.new_core(MEMBERS[index], record, member.log.len()));
    }

    /// The observer decides: as often as it does in the process (every few milliseconds), so
    /// after anything it learns and whenever its clock moves, until nothing changes.
    fn decide(observer: &mut ObserverActor) {
        for _ in 0..4 {
            let before = observer.core.clone();
            let mut disk = observer.disk.clone();
            observer.core.step(observer.now, &mut |record| {
                disk = record.clone();
                Ok(())
            });
            observer.disk = disk;
            if observer.core == before {
                break;
            }
        }
    }

    fn fence(member: &mut Member) {
        member.fenced = true;
        member.core = None;
    }
}
impl Model for System {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.initial()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let members = self.config.members;
        let performance = self.config.protection == Protection::MaximumPerformance;
        for (p, member) in state.members.iter().enumerate() {
            if !self.open_primary(member) {
                continue;
            }
            if state.next_write < self.config.writes {
                actions.push(Action::Write(p));
            }
            if member.answered < member.log.len() {
                actions.push(Action::Acknowledge(p));
            }
            for d in (0..members).filter(|d| *d != p) {
                let destination = member.destinations[d];
                let standby = &state.members[d];
                if !destination.session {
                    if standby.up && !standby.primary_role && self.both_ways(state, p, d) {
                        actions.push(Action::Hello(p, d));
                    }
                    continue;
                }
                if destination.sent < member.log.len() {
                    actions.push(Action::Send(p, d));
                }
                if standby.log.len() < destination.sent {
                    actions.push(Action::Deliver(p, d));
                }
                if destination.acked < standby.log.len().min(destination.sent) {
                    actions.push(Action::Ack(p, d));
                }
                if !destination.sync && destination.sent == member.log.len() && self.is_target(d) {
                    actions.push(Action::Synchronize(p, d));
                }
                // A timeout: an acknowledgement late, or the standby unreachable.
                if destination.acked < member.log.len()
                    || !self.both_ways(state, p, d)
                    || !standby.up
                {
                    actions.push(Action::Desynchronize(p, d));
                }
                if self.link(state, p, d) {
                    actions.push(Action::Heartbeat(p, d));
                }
            }
            if self.config.switchovers && state.faults_left > 0 {
                for t in self.config.targets().into_iter().filter(|t| *t != p) {
                    actions.push(Action::Switchover(p, t));
                }
            }
        }
        for (o, observer) in state.observers.iter().enumerate() {
            if !observer.up {
                continue;
            }
            for m in 0..members {
                actions.push(Action::Ping(o, m));
            }
        }
        for node in 0..self.node_count() {
            let up = if node < members {
                state.members[node].up
            } else {
                state.observers[node - members].up
            };
            if !up {
                actions.push(Action::Restart(node));
            } else if state.faults_left > 0 {
                if self.config.crashes {
                    actions.push(Action::Crash(node));
                }
                if self.config.jumps && !performance {
                    actions.push(Action::Jump(node));
                }
            }
            for other in (0..self.node_count()).filter(|other| *other != node) {
                if state.cut.contains(&(node, other)) {
                    actions.push(Action::Heal(node, other));
                } else if self.config.cuts
                    && state.faults_left > 0
                    && (node < members || other < members)
                {
                    actions.push(Action::Cut(node, other));
                }
            }
        }
        if performance && state.faults_left > 0 {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let members = self.config.members;
        let observers = self.config.observers;
        match action {
            Action::Write(p) => {
                state.members[p].log.push(state.next_write);
                state.next_write += 1;
            }
            Action::Acknowledge(p) => {
                let member = &mut state.members[p];
                let end = member.answered + 1;
                let holding: BTreeSet<String> = (0..members)
                    .filter(|d| *d != p && member.destinations[*d].acked >= end)
                    .map(|d| MEMBERS[d].to_string())
                    .collect();
                self.refresh(member);
                let now = member.now;
                let core = member.core.as_mut()?;
                if core.admit(at(end), &holding, now) != Admission::Admit {
                    return None;
                }
                member.answered = end;
                state.acks.push(Acked {
                    write: member.log[end - 1],
                    member: p,
                    reign: member.reign,
                });
            }
            Action::Hello(p, d) => {
                if !self.both_ways(&state, p, d) {
                    return None;
                }
                let (primary_incarnation, primary_log) =
                    (state.members[p].incarnation, state.members[p].log.clone());
                let standby = &mut state.members[d];
                if standby.fenced {
                    return None;
                }
                if standby.incarnation > primary_incarnation {
                    // An older primary: refused, and told (it fences itself).
                    Self::fence(&mut state.members[p]);
                    return Some(state);
                }
                if !primary_log.starts_with(&standby.log) {
                    // It holds redo this primary does not: diverged, to be reinstated.
                    if standby.incarnation < primary_incarnation {
                        standby.fenced = true;
                    }
                    return None;
                }
                standby.incarnation = primary_incarnation;
                standby.following = Some(p);
                standby.last_heard = standby.now;
                if self.config.variant != Variant::TwoObservers {
                    standby.heard_observer = None;
                    standby.heard_synchronized = false;
                }
                let held = standby.log.len();
                state.members[p].destinations[d] =
                    Destination { session: true, sent: held, acked: held, sync: false };
                self.refresh(&mut state.members[p]);
            }
            Action::Send(p, d) => {
                let len = state.members[p].log.len();
                state.members[p].destinations[d].sent = len;
            }
            Action::Deliver(p, d) => {
                if !self.link(&state, p, d) {
                    return None;
                }
                let (sent, log, incarnation) = {
                    let primary = &state.members[p];
                    (primary.destinations[d].sent, primary.log.clone(), primary.incarnation)
                };
                let standby = &mut state.members[d];
                if !standby.up
                    || standby.primary_role
                    || standby.following != Some(p)
                    || standby.incarnation != incarnation
                    || standby.fenced
                {
                    return None;
                }
                standby.log = log[..sent].to_vec();
                standby.last_heard = standby.now;
            }
            Action::Ack(p, d) => {
                if !self.link(&state, d, p) {
                    return None;
                }
                // An acknowledgement comes from the session's receiver: a standby that follows
                // this primary in its incarnation. (A member that became the primary stopped
                // receiving first, and its log then grows with its own writes: its length says
                // nothing of this primary's.)
                let incarnation = state.members[p].incarnation;
                let standby = &state.members[d];
                if standby.primary_role
                    || standby.following != Some(p)
                    || standby.incarnation != incarnation
                    || standby.fenced
                {
                    return None;
                }
                let held = standby.log.len();
                let destination = &mut state.members[p].destinations[d];
                destination.acked = destination.acked.max(held.min(destination.sent));
                self.refresh(&mut state.members[p]);
            }
            Action::Synchronize(p, d) => {
                state.members[p].destinations[d].sync = true;
                self.refresh(&mut state.members[p]);
            }
            Action::Desynchronize(p, d) => {
                let destination = &mut state.members[p].destinations[d];
                *destination = Destination { session: false, sync: false, ..*destination };
                destination.sent = destination.acked;
                self.refresh(&mut state.members[p]);
            }
            Action::Heartbeat(p, d) => {
                if !self.link(&state, p, d) {
                    return None;
                }
                let primary = &mut state.members[p];
                self.refresh(primary);
                let mut record = primary.record.clone();
                let announced = primary.core.as_mut()?.announce_to(MEMBERS[d], &mut |new| {
                    record = new.clone();
                    Ok(())
                });
                primary.record = record;
                let synchronized = primary.destinations[d].sync
                    && primary
                        .core
                        .as_ref()?
                        .view(primary.now)
                        .synchronized
                        .iter()
                        .any(|name| name == MEMBERS[d]);
                let incarnation = primary.incarnation;
                let standby = &mut state.members[d];
                if !standby.up || standby.following != Some(p) || standby.incarnation != incarnation
                {
                    return None;
                }
                standby.heard_observer = announced;
                standby.heard_synchronized = synchronized;
                standby.last_heard = standby.now;
            }
            Action::Ping(o, m) => {
                self.ping(&mut state, o, m)?;
                Self::decide(&mut state.observers[o]);
            }
            Action::Step(o) => Self::decide(&mut state.observers[o]),
            Action::Cut(a, b) => {
                state.cut.insert((a, b));
                state.faults_left -= 1;
            }
            Action::Heal(a, b) => {
                state.cut.remove(&(a, b));
            }
            Action::Crash(node) => {
                state.faults_left -= 1;
                if node < members {
                    let member = &mut state.members[node];
                    Self::crash_member(member, observers, members);
                    // Its primaries' sessions with it end.
                    for primary in &mut state.members {
                        primary.destinations[node] = Destination {
                            session: false,
                            sync: false,
                            sent: primary.destinations[node].acked,
                            ..primary.destinations[node]
                        };
                    }
                    for primary in 0..members {
                        self.refresh(&mut state.members[primary]);
                    }
                } else {
                    state.observers[node - members].up = false;
                    for member in &mut state.members {
                        member.last_answer[node - members] = None;
                    }
                }
            }
            Action::Restart(node) => {
                if node < members {
                    let forget = self.config.variant == Variant::TwoObservers;
                    let member = &mut state.members[node];
                    member.up = true;
                    if forget {
                        member.record = PrimaryRecord::default();
                    }
                    if member.primary_role && !member.fenced {
                        // What it wrote and had not answered is durable now, never acknowledged.
                        member.answered = member.log.len();
                        member.core = Some(self.new_core(
                            MEMBERS[node],
                            member.record.clone(),
                            member.log.len(),
                        ));
                    }
                    member.last_heard = member.now;
                } else {
                    let index = node - members;
                    let observer = &mut state.observers[index];
                    if self.config.variant == Variant::ObserverAmnesia {
                        observer.disk = ObserverRecord::default();
                    }
                    observer.up = true;
                    observer.core =
                        Observer::new(self.config.observer_settings(index), observer.disk.clone());
                    Self::decide(observer);
                }
            }
            Action::Jump(node) => {
                state.faults_left -= 1;
                if node < members {
                    state.members[node].now = state.members[node].now.plus(JUMP);
                } else {
                    let observer = &mut state.observers[node - members];
                    observer.now = observer.now.plus(JUMP);
                    Self::decide(observer);
                }
            }
            Action::Tick => {
                state.faults_left -= 1;
                for member in &mut state.members {
                    member.now = member.now.plus(TICK);
                }
                for observer in &mut state.observers {
                    observer.now = observer.now.plus(TICK);
                    Self::decide(observer);
                }
            }
            Action::Switchover(p, t) => {
                let (record, log_len, incarnation) = {
                    let primary = &state.members[p];
                    (primary.record.clone(), primary.log.len(), primary.incarnation)
                };
                let primary = &state.members[p];
                let target = &state.members[t];
                if primary.answered < log_len
                    || primary.destinations[t].acked < log_len
                    || !target.up
                    || target.following != Some(p)
                    || target.incarnation != incarnation
                {
                    return None;
                }
                state.faults_left -= 1;
                let primary = &mut state.members[p];
                primary.primary_role = false;
                primary.core = None;
                primary.reign = 0;
                primary.following = None;
                primary.destinations = vec![Destination::default(); members];
                let handed = if self.config.variant == Variant::TwoObservers {
                    PrimaryRecord::default()
                } else {
                    record
                };
                self.promote(&mut state, t, incarnation, handed);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![Property::<Self>::always(
            "no write acknowledged by a primary after a newer one acknowledged one",
            |_, state| state.acks.windows(2).all(|pair| pair[0].reign <= pair[1].reign),
        )];
        if self.config.protection == Protection::MaximumAvailability {
            properties.push(Property::<Self>::always(
                "every acknowledged write is held by the newest primary",
                |_, state| {
                    let Some(newest) = state
                        .members
                        .iter()
                        .filter(|member| member.primary_role)
                        .max_by_key(|member| member.reign)
                    else {
                        return true;
                    };
                    state.acks.iter().all(|ack| newest.log.contains(&ack.write))
                },
            ));
        }
        properties.push(Property::<Self>::sometimes(
            "a fast-start failover happens",
            |_, state| {
                state.members.iter().any(|member| member.incarnation > 1 && member.primary_role)
            },
        ));
        properties
    }
}
