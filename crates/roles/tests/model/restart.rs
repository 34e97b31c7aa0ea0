//! The model of a manual failover with crashes, restarts and partitions, and of a restarted
//! primary's confirmation: members A, B and C (A the primary of incarnation 1, B and C its
//! standbys, each a destination of whichever member is primary, as in the configuration
//! form) and the DBA's broker. Every interleaving of their steps and of the faults is
//! explored, with the decisions made by `roles::confirmation::awaited` (whether a restarted
//! primary takes writes) and `roles::follow::decide` (what a standby answers a hello).
//!
//! What is modelled, and how (each from the code named):
//!
//! - **The control file** of each member (durable): role, incarnation, `followed`, the fence,
//!   and its incarnation history (who opened each incarnation after the first). A restart
//!   reads only these (`role::open_blocking`): a fenced primary opens `Fenced`; a primary with
//!   `followed` opens `Unconfirmed` (it ships to two destinations), one without it `Open`.
//! - **Volatile**: whether the process is up, a primary's gate (open or unconfirmed), the
//!   welcomes it recorded since its open (`Confirmation::welcomed`, with their incarnation),
//!   and the sessions (a welcomed hello's connection; it ends with a cut link, a crash, a
//!   fence, and the standby's failover).
//! - **A hello** from a primary that is not fenced (open or unconfirmed) to another member,
//!   over a live link, is one step with its answer (`transport::primary::sender::handshake`):
//!   - to a standby, `decide` answers (`receiver::handshake`): `Follow` or `Adopt` (the new
//!     incarnation recorded durably) is a welcome, which the primary records, writing
//!     `followed` on the first of its incarnation (`on_event`, `Followed`), and then judges
//!     its gate (`confirm`); `StalePrimary` is `NewerIncarnation`, which fences the primary
//!     (durably, `change::reinstate::fence`); `Diverged` fences the standby (it refuses the
//!     old branch from then on). Redo is not modelled: whether a standby holds redo past a
//!     new incarnation's branch point (adopts, or has diverged) is the hello's choice, both
//!     ways (a standby fenced as diverged holds it for good);
//!   - to a primary's own port (`transport::primary_port`), fenced or not: an older hello is
//!     refused with `NewerIncarnation` (the sender is fenced), a newer one fences the port's
//!     primary, one of the same incarnation changes nothing.
//! - **The DBA's `failover --to T`** (`broker::transitions::failover`, then
//!   `change::failover`): T up, a standby, not fenced, reached by the broker. The broker
//!   refuses if it reaches any primary that is not fenced, whatever its incarnation, unless
//!   `--force`, which fences them all first (`Broker::EveryPrimary`; the broker before fenced
//!   only the newest one, `Broker::NewestOnly`); T refuses while a primary of its incarnation
//!   is connected to it, unless `--force`. T then writes role primary, incarnation + 1,
//!   `followed`, its history record, and opens at once (this process made it primary): its
//!   gate is open.
//!   Which primaries the broker does not reach is the configuration's choice: only those
//!   whose process is down (`Hidden::No`: the DBA's failover is never given while a primary
//!   runs out of its sight), or also those cut off from it (`Hidden::Yes`: docs/roles.md,
//!   "Never two primaries", point 3, the DBA's call).
//! - **New standbys**: B and C start new, holding nothing (a standby's database begins with
//!   its primary's first hello or a copy). A copy (`redoguard server --from M`) from any
//!   member that holds the database and serves copies gives it M's identity, incarnation and
//!   history; a primary serving one writes `followed` first (`role::copy`): the copy can be
//!   failed over to from then on. A standby that holds nothing is not failed over to
//!   (`change::failover`).
//! - **Deferring a destination** (`edit destination M state=defer`), the DBA's word that M
//!   is not a primary, is given only where it holds for good: M is the failed old primary (its
//!   control file names it primary of an incarnation older than another member's). Then
//!   no primary ships to M, nor waits for it; gates are judged again at once.
//! - **A write** is acknowledged by a primary whose gate is open (Maximum Performance: alone).
//! - **Faults**, from a budget: a member's crash, a cut link (members and broker, both ways).
//!   A restart and a heal are free.
//!
//! - **Switchover** (`redoguard switchover --to T`): `model/switchover.rs`, each durable step
//!   of P's prepare and abort and of T's complete its own, the broker's runs (run again, two
//!   at once, lost answers). The DBA's failover waits for a member's transition lock; it is
//!   given while a switchover is under way only with `failover_amid_switchover` (an open
//!   finding: docs/roles.md, "Switchover").
//!
//! - **Redo routes** (`model/routes.rs`): a primary's hellos go to its first hops, relays
//!   forward them, and a failover target behind a relay seals it first.
//! - The failover, deferring and copies are written out in `model/failover.rs`.
//!
//! What is not: reinstate, enabling a deferred destination again or deferring any other
//! member, fast-start failover, a far sync's alternates, redo (positions, loss: "T holds P's
//! end" is T connected to P, or, for a complete run again, T holding the database), lost hello
//! answers (one whose answer is lost is one not sent, but for what the standby recorded), and
//! the time a primary takes to notice a session has ended (a session ends for both sides at
//! once; only T's refusal while connected reads it).

use std::collections::BTreeSet;

use redo::{Incarnation, LogSeq, RedoAddr, Scn};
use roles::confirmation::{self, Awaited, Destination, Shipping};
use roles::history::{Branch, IncarnationHistory};
use roles::{StandbyView, Verdict, decide};
use stateright::{Model, Property};

use crate::routes::Routes;
use crate::switchover::{Change, Run};

/// The logic checked: today's, or an older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Current,
    /// The rule before 563ca20: the first welcome in its incarnation opens the gate.
    FirstWelcome,
    /// Before 405bf61: a failover's new primary does not write `followed` with its role.
    FailoverNotFollowed,
    /// Main before this model (1): a primary serving a copy for a new standby does not write
    /// `followed`.
    CopyNotFollowed,
    /// Main before this model (2): a standby that holds no database (it received nothing
    /// yet) may be failed over to.
    EmptyFailover,
    /// A switchover's target that does not read `switchover.refused` before it completes.
    CompleteIgnoresRefused,
    /// A switchover's old primary that keeps its gate as it is while it prepares, and
    /// answers the broker once its pending record is written, before its control file says
    /// standby (written as its next step).
    LateStandby,
    /// Main before this model (3): an old primary's abort writes its role back with
    /// `followed` as its prepare left it (cleared): it opens at once, and restarts open.
    AbortNotFollowed,
    /// Main before this model (4): an abort names no switchover: the old primary takes its
    /// role back whichever switchover it has pending (a later one than the broker's).
    AbortAnyId,
    /// Main before this model (5): a primary whose gate is unconfirmed may prepare a
    /// switchover, and a prepare that gives up sets the gate open.
    PrepareUnconfirmed,
    /// Main before this model (6): a target keeps no record of the switchovers it completed:
    /// a stale call of one (a second broker's, late; or an old primary's record that it never
    /// saw completed) is completed again once the target is a standby again, or refused, and
    /// its old primary given its role back; and the broker completes a pending record even
    /// while there is a primary.
    CompleteTwice,
    /// Main before this model (7): a pending record keeps no incarnation: the broker completes
    /// it with its old primary's incarnation *now* (adopted from a failover's primary since,
    /// perhaps), and an abort gives the role back in whatever incarnation the member follows.
    PendingIncarnationNow,
    /// Main before this model (8): a switchover's target opens at once (`promoted_here`), as
    /// a failover's does: a failover given while the switchover was half done (its old
    /// primary a standby, no primary open) leaves it open beside the failover's primary until
    /// a hello between them fences it. (Every other variant here is older, and its target
    /// opens at once too: with its confirmation, the checker finds none of their holes.)
    TargetOpensAtOnce,
    /// Main before the routes rule (e05ad50): a switchover is prepared and completed whatever
    /// the routes, though its target would reach a first hop of its old primary only through
    /// a relay (and not wait for it).
    NoRouteRule,
    /// Main before e05ad50 too: a switchover's target that a failover sealed (its relay) takes
    /// over all the same.
    SealedTargetCompletes,
    /// Main before this model's routes (9): an old primary's abort does not read the seal a
    /// failover put on it (as its target's relay), and checks its incarnation only before its
    /// database closes (a hello may make it adopt a newer one before the close).
    AbortBeforeSeals,
    /// The seal and the incarnation checked, but only before the database closes, not again
    /// in the step that writes the role.
    AbortChecksEarly,
}

impl Variant {
    /// The older logics, whose switchover target opened at once (`promoted_here`); the later
    /// ones keep its confirmation and lack a check of their own.
    pub fn target_opens_at_once(self) -> bool {
        !matches!(
            self,
            Variant::Current
                | Variant::NoRouteRule
                | Variant::SealedTargetCompletes
                | Variant::AbortBeforeSeals
                | Variant::AbortChecksEarly
        )
    }
}

/// Which running primaries the broker may fail over past.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hidden {
    /// Only those whose process is down: the broker reaches every running member.
    No,
    /// Also those a cut link hides from the broker (the DBA's call).
    Yes,
}

/// Which primaries the broker's `failover --force` fences before the target is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Broker {
    /// The broker before this model: the one it takes for the primary, of the newest
    /// incarnation among those it reaches; one of an older incarnation is left as "failed
    /// over already".
    NewestOnly,
    /// Today's (`broker::transitions::failover`): it refuses while it reaches any primary that
    /// is not fenced, whatever its incarnation, and `--force` fences them all.
    EveryPrimary,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Crashes and cuts, in all.
    pub faults: u8,
    /// Failovers the DBA gives, in all.
    pub failovers: u8,
    /// Whether the DBA may use `--force`.
    pub force: bool,
    pub hidden: Hidden,
    pub broker: Broker,
    /// Whether the DBA may defer a destination (only a member failed over: see `defer`).
    pub defer: bool,
    /// `redoguard switchover --to T` runs, in all (each a run of the broker, first or again).
    pub switchovers: u8,
    /// Broker runs at once (an operator running the switchover again while one still runs).
    pub brokers: u8,
    /// Whether the DBA may fail over while a switchover is under way: a broker run not ended,
    /// or a member with a switchover pending.
    pub failover_amid_switchover: bool,
    /// The redo routes every member runs with (`model/routes.rs`).
    pub routes: Routes,
    pub variant: Variant,
}

pub const MEMBERS: usize = 3;
/// The broker's node, for links.
pub const BROKER: usize = 3;
pub const NAMES: [&str; 4] = ["A", "B", "C", "broker"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Primary,
    Standby,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Member {
    // The control file and the incarnation history (durable).
    pub role: Role,
    pub incarnation: u8,
    pub followed: bool,
    /// The incarnation this member is fenced by.
    pub fenced: Option<u8>,
    /// Who opened incarnations 2, 3, …
    pub history: Vec<u8>,
    /// It holds the database (its identity): created as its primary, or a standby that took
    /// a copy or welcomed a primary. A new standby holds nothing.
    pub holds: bool,
    /// A failover target sealed it (as its relay): it takes no redo of an older incarnation
    /// (0: never sealed).
    pub sealed_below: u8,
    // The process (volatile).
    pub up: bool,
    /// A primary's gate, not fenced: open, or unconfirmed.
    pub open: bool,
    /// Welcomes recorded since its open: (member, incarnation).
    pub welcomed: BTreeSet<(u8, u8)>,
    /// A standby: the primary of the last hello it welcomed (direct or forwarded) since its
    /// receiver started.
    pub heard: Option<u8>,
    /// A standby: the primary whose redo it forwards (the relay's `Cascade::follow`: from a
    /// hello of that primary, or a seal, until its receiver stops), in its own incarnation.
    pub forwarding: Option<u8>,
    /// Ghost: a primary running out of the broker's sight when a failover happened
    /// (docs/roles.md, "Never two primaries", point 3's window), until its process ends.
    pub hidden: bool,
    // A switchover's files (durable).
    /// `switchover.pending`: the target and id of a switchover this member began.
    pub pending: Option<(u8, u8, u8)>,
    /// `switchover.refused`: the ids it refused.
    pub refused: BTreeSet<u8>,
    /// `switchover.completed`: the ids it completed.
    pub completed: BTreeSet<u8>,
    // Under the transition lock (volatile).
    /// The role change it runs (one at a time).
    pub change: Option<Change>,
    /// News of a newer incarnation that waits for the lock (`fence` takes it).
    pub fence_waiting: Option<u8>,
}

impl Member {
    pub fn primary(&self) -> bool {
        self.up && self.role == Role::Primary && self.fenced.is_none()
    }

    pub fn takes_writes(&self) -> bool {
        self.primary() && self.open
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub members: Vec<Member>,
    /// Cut links, both ways: (lower, higher) node.
    pub cut: BTreeSet<(u8, u8)>,
    /// Sessions: (primary, standby) whose hello was welcomed, not ended since.
    pub sessions: BTreeSet<(u8, u8)>,
    pub faults_left: u8,
    pub failovers: u8,
    /// Deferred destinations (the configuration every member runs with).
    pub deferred: BTreeSet<u8>,
    // Ghosts.
    /// The newest incarnation that acknowledged a write, outside point 3's window.
    pub newest_write: Option<u8>,
    /// A write acknowledged by a primary of an older incarnation after that.
    pub late_write: bool,
    /// A restarted primary's gate went from unconfirmed to open, in an incarnation (by
    /// A in 1, by B or C in a newer one).
    pub reopened: BTreeSet<u8>,
    /// The broker's switchover runs under way (`broker::transitions::switchover`).
    pub runs: Vec<Run>,
    /// Switchover runs started, in all.
    pub switchovers: u8,
    /// The next switchover id a prepare draws (distinct: drawn at random from 2^64).
    pub next_id: u8,
    // Ghosts.
    /// Switchover ids whose old primary crashed while its pending record named them.
    pub crashed_pending: BTreeSet<u8>,
    /// A target took over; one took over a switchover whose old primary crashed mid-way; an
    /// old primary took its role back.
    pub took_over: bool,
    pub took_over_after_crash: bool,
    pub aborted: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// A new standby is built from a member's copy (`redoguard server --from`).
    Copy {
        from: usize,
        to: usize,
    },
    /// A primary's hello to a member, and its answer (`beyond`: the standby holds redo past
    /// the new incarnation's branch point).
    Hello {
        from: usize,
        to: usize,
        beyond: bool,
    },
    /// A relay forwards its primary's hello (`model/routes.rs`).
    Forward {
        primary: usize,
        relay: usize,
        to: usize,
        beyond: bool,
    },
    Failover {
        to: usize,
        force: bool,
    },
    /// The DBA defers a destination (`redoguard edit destination M state=defer`).
    Defer(usize),
    Write(usize),
    Crash(usize),
    Restart(usize),
    Cut(usize, usize),
    Heal(usize, usize),
    /// The DBA: `switchover --to T` (the broker's checks, then its first call arrives).
    Switchover {
        to: usize,
    },
    /// The old primary's next step in its prepare (T acknowledged: its pending record; then
    /// its control file says standby).
    Prepare(usize),
    /// Its prepare gives up before its pending record (a wait ran out): the gate reopens.
    Undo(usize),
    /// A broker run's call arrives at the member it asks (`complete` at T, `abort` at P).
    Call(usize),
    /// T has received and applied the old primary's end: it becomes the primary.
    TakeOver(usize),
    /// T's wait ran out: it records the id as refused and refuses.
    Refuse(usize),
    /// The old primary's abort, its pending record removed: its control file says primary.
    TakeBack(usize),
    /// A broker run ends without its answer (killed, or the answer lost).
    Lost(usize),
}

pub struct RestartSystem {
    pub config: Config,
}

/// The record of incarnation `incarnation`, opened by `member`: each incarnation begins a
/// log, and a standby holds redo up to the start of that log or (`beyond`) past it.
fn record(incarnation: u8, member: u8) -> Branch {
    Branch {
        incarnation: Incarnation(u32::from(incarnation)),
        first_seq: LogSeq(u64::from(incarnation)),
        first_scn: Scn(10 * u64::from(incarnation)),
        prev_end_offset: 0,
        prev_closed_here: false,
        created_us: 0,
        member: NAMES[usize::from(member)].into(),
    }
}

fn history_of(member: &Member) -> IncarnationHistory {
    let mut history = IncarnationHistory::default();
    for (index, opener) in member.history.iter().enumerate() {
        history.push(record(index as u8 + 2, *opener)).expect("consecutive incarnations");
    }
    history
}

pub(crate) fn link(a: usize, b: usize) -> (u8, u8) {
    (a.min(b) as u8, a.max(b) as u8)
}

impl RestartSystem {
    pub(crate) fn live(&self, state: &State, a: usize, b: usize) -> bool {
        !state.cut.contains(&link(a, b))
    }

    /// What a primary waits for: `roles::confirmation::awaited` over its two destinations
    /// (or, `FirstWelcome`, the rule before: one welcome in its incarnation).
    pub(crate) fn confirmed(&self, state: &State, node: usize) -> bool {
        let member = &state.members[node];
        let welcomes = member
            .welcomed
            .iter()
            .map(|(who, incarnation)| (NAMES[usize::from(*who)], u32::from(*incarnation)));
        if self.config.variant == Variant::FirstWelcome {
            return welcomes.clone().any(|(_, at)| at == u32::from(member.incarnation));
        }
        let destinations: Vec<Destination<'_>> = self
            .first_hops(node)
            .into_iter()
            .map(|other| Destination {
                member: NAMES[other],
                shipping: if state.deferred.contains(&(other as u8)) {
                    Shipping::Deferred
                } else {
                    Shipping::Enabled
                },
            })
            .collect();
        confirmation::awaited(&destinations, welcomes, u32::from(member.incarnation))
            == Awaited::Confirmed
    }

    /// The process opens its database (`role::open_blocking`, then `confirm`), from its
    /// control file alone.
    pub(crate) fn open(&self, state: &mut State, node: usize) {
        let member = &mut state.members[node];
        member.welcomed.clear();
        member.open = member.role == Role::Primary && member.fenced.is_none() && !member.followed;
    }

    /// `confirm`: an unconfirmed primary's gate opens once it is confirmed.
    pub(crate) fn confirm(&self, state: &mut State, node: usize) {
        // (A gate quiesced by a switchover's prepare is not unconfirmed: left as it is.)
        let member = &state.members[node];
        if member.primary()
            && !member.open
            && member.change.is_none()
            && self.confirmed(state, node)
        {
            let member = &mut state.members[node];
            member.open = true;
            state.reopened.insert(member.incarnation);
            self.note_switched_open(state, node);
        }
    }

    /// A primary learns of incarnation `incarnation` (`on_event`, `Fenced`, then `fence`).
    pub(crate) fn fence(&self, state: &mut State, node: usize, incarnation: u8) {
        let member = &mut state.members[node];
        if member.role != Role::Primary
            || incarnation <= member.incarnation
            || member.fenced.is_some_and(|known| known >= incarnation)
        {
            return;
        }
        if member.change.is_some() {
            // `fence` waits for the transition lock: the prepare decides first.
            member.fence_waiting = member.fence_waiting.max(Some(incarnation));
            return;
        }
        member.fenced = Some(incarnation);
        member.open = false;
        state.sessions.retain(|(primary, _)| usize::from(*primary) != node);
    }

    pub(crate) fn end_sessions(&self, state: &mut State, node: usize) {
        state.sessions.retain(|(a, b)| usize::from(*a) != node && usize::from(*b) != node);
    }

    pub(crate) fn hello(&self, state: &mut State, from: usize, to: usize, beyond: bool) {
        self.greet(state, from, from, to, beyond);
    }

    /// Whether a hello of `incarnation` may make `receiver` adopt it (the `beyond` choice).
    pub(crate) fn adopts(&self, incarnation: u8, receiver: &Member) -> bool {
        receiver.role == Role::Standby
            && receiver.holds
            && receiver.fenced.is_none()
            && incarnation > receiver.incarnation
    }

    /// `primary`'s hello reaches `to`, sent by `via`: the primary itself, or a relay that
    /// forwards it (in the primary's incarnation; its answers are only logged there).
    pub(crate) fn greet(
        &self,
        state: &mut State,
        primary: usize,
        via: usize,
        to: usize,
        beyond: bool,
    ) {
        let from = primary;
        let forwarded = via != primary;
        let sender = state.members[via].clone();
        let receiver = state.members[to].clone();
        // (An abort's files are written while its database is closed, in one step: until
        // then it is a standby that takes hellos.)
        if receiver.role == Role::Primary {
            // `primary_port`, fenced or not.
            if sender.incarnation < receiver.incarnation {
                if !forwarded {
                    self.fence(state, from, receiver.incarnation);
                }
            } else if sender.incarnation > receiver.incarnation {
                self.fence(state, to, sender.incarnation);
            }
            return;
        }
        // A sealed relay takes nothing of the incarnations it was sealed against
        // (`ShuttingDown`: the sender changes nothing).
        if Self::sealed_against(receiver.sealed_below, sender.incarnation) {
            return;
        }
        let history = history_of(&receiver);
        let theirs: Vec<Branch> = sender
            .history
            .iter()
            .enumerate()
            .map(|(index, opener)| record(index as u8 + 2, *opener))
            .collect();
        // Its redo ends where its incarnation's successor begins, or past it.
        let beyond = beyond || receiver.fenced.is_some();
        let view = StandbyView {
            incarnation: Incarnation(u32::from(receiver.incarnation)),
            history: &history,
            next: RedoAddr {
                seq: LogSeq(u64::from(receiver.incarnation) + 1),
                offset: u64::from(beyond),
            },
            fenced_by: receiver.fenced.map(|fence| Incarnation(u32::from(fence))),
            data_through: Scn(0),
        };
        match decide(&view, Incarnation(u32::from(sender.incarnation)), &theirs) {
            Verdict::Follow => {}
            Verdict::Adopt(_) => {
                let standby = &mut state.members[to];
                standby.incarnation = sender.incarnation;
                standby.history = sender.history.clone();
                // (Its sessions with primaries of the incarnation before end.)
                state.sessions.retain(|(_, standby)| usize::from(*standby) != to);
            }
            Verdict::StalePrimary { newest } => {
                if !forwarded {
                    self.fence(state, from, newest.0 as u8);
                }
                return;
            }
            Verdict::Diverged(_) => {
                let standby = &mut state.members[to];
                if standby.fenced.is_none_or(|known| known <= sender.incarnation) {
                    standby.fenced = Some(sender.incarnation);
                }
                return;
            }
        }
        // The welcome: recorded, `followed` written on the first, the gate judged.
        state.members[to].holds = true;
        // (Tracked only where routes make it matter, `seal_relay`: without them it would
        // only multiply the states.)
        if self.config.routes != Routes::DIRECT {
            // (Any welcome, forwarded or not: `cascade.follow` at each hello it takes.)
            state.members[to].heard = Some(from as u8);
            state.members[to].forwarding = Some(from as u8);
        }
        // A switchover it began is complete once it follows its target
        // (`note_switchover_complete`).
        if state.members[to].pending.is_some_and(|(target, _, _)| usize::from(target) == from) {
            state.members[to].pending = None;
        }
        if forwarded {
            return;
        }
        state.sessions.insert((from as u8, to as u8));
        let primary = &mut state.members[from];
        primary.welcomed.insert((to as u8, sender.incarnation));
        primary.followed = true;
        self.confirm(state, from);
    }

    fn write(&self, state: &mut State, node: usize) -> Option<()> {
        let member = &state.members[node];
        if member.hidden {
            return None;
        }
        // (Two failovers from the same incarnation, each while the other's primary was
        // down, give two primaries of one number one after the other: the later loses what
        // the earlier acknowledged, as any failover to a standby that did not have it.)
        let incarnation = member.incarnation;
        match state.newest_write {
            Some(newest) if newest == incarnation => return None,
            Some(newest) if newest > incarnation => state.late_write = true,
            _ => state.newest_write = Some(incarnation),
        }
        Some(())
    }
}

impl Model for RestartSystem {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let member = |role| Member {
            role,
            incarnation: 1,
            followed: false,
            fenced: None,
            history: Vec::new(),
            holds: role == Role::Primary,
            sealed_below: 0,
            up: true,
            open: role == Role::Primary,
            welcomed: BTreeSet::new(),
            heard: None,
            forwarding: None,
            hidden: false,
            pending: None,
            refused: BTreeSet::new(),
            completed: BTreeSet::new(),
            change: None,
            fence_waiting: None,
        };
        vec![State {
            members: vec![member(Role::Primary), member(Role::Standby), member(Role::Standby)],
            cut: BTreeSet::new(),
            sessions: BTreeSet::new(),
            faults_left: self.config.faults,
            failovers: 0,
            deferred: BTreeSet::new(),
            newest_write: None,
            late_write: false,
            reopened: BTreeSet::new(),
            runs: Vec::new(),
            switchovers: 0,
            next_id: 1,
            crashed_pending: BTreeSet::new(),
            took_over: false,
            took_over_after_crash: false,
            aborted: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (from, sender) in state.members.iter().enumerate() {
            if !sender.primary() {
                continue;
            }
            for to in self.first_hops(from) {
                let receiver = &state.members[to];
                let deferred = state.deferred.contains(&(to as u8));
                if deferred || !receiver.up || !self.live(state, from, to) {
                    continue;
                }
                actions.push(Action::Hello { from, to, beyond: false });
                if self.adopts(sender.incarnation, receiver) {
                    actions.push(Action::Hello { from, to, beyond: true });
                }
            }
        }
        self.forward_actions(state, actions);
        for (to, member) in state.members.iter().enumerate() {
            if member.up && !member.holds {
                for from in (0..MEMBERS).filter(|from| *from != to) {
                    actions.push(Action::Copy { from, to });
                }
            }
        }
        if state.failovers < self.config.failovers {
            for to in 0..MEMBERS {
                actions.push(Action::Failover { to, force: false });
                if self.config.force {
                    actions.push(Action::Failover { to, force: true });
                }
            }
        }
        for (node, member) in state.members.iter().enumerate() {
            if self.config.defer && member.role == Role::Primary {
                actions.push(Action::Defer(node));
            }
            if member.takes_writes() {
                actions.push(Action::Write(node));
            }
            if member.up && state.faults_left > 0 {
                actions.push(Action::Crash(node));
            }
            if !member.up {
                actions.push(Action::Restart(node));
            }
        }
        self.switchover_actions(state, actions);
        let nodes = match self.config.hidden {
            Hidden::No => MEMBERS,
            Hidden::Yes => MEMBERS + 1,
        };
        for a in 0..nodes {
            for b in a + 1..nodes {
                if !self.live(state, a, b) {
                    actions.push(Action::Heal(a, b));
                } else if state.faults_left > 0 {
                    actions.push(Action::Cut(a, b));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Hello { from, to, beyond } => self.hello(&mut state, from, to, beyond),
            Action::Forward { primary, relay, to, beyond } => {
                self.forward(&mut state, primary, relay, to, beyond)?
            }
            Action::Copy { from, to } => self.copy(&mut state, from, to)?,
            Action::Failover { to, force } => self.failover(&mut state, to, force)?,
            Action::Write(node) => self.write(&mut state, node)?,
            Action::Defer(node) => self.defer(&mut state, node)?,
            Action::Crash(node) => {
                state.faults_left -= 1;
                self.crash_changes(&mut state, node);
                let member = &mut state.members[node];
                member.up = false;
                member.open = false;
                member.welcomed.clear();
                Self::receiver_stops(member);
                member.hidden = false;
                self.end_sessions(&mut state, node);
            }
            Action::Restart(node) => {
                state.members[node].up = true;
                self.open(&mut state, node);
            }
            Action::Cut(a, b) => {
                state.faults_left -= 1;
                state.cut.insert(link(a, b));
                state
                    .sessions
                    .retain(|session| link(session.0.into(), session.1.into()) != link(a, b));
            }
            Action::Heal(a, b) => {
                state.cut.remove(&link(a, b));
            }
            Action::Switchover { to } => self.switchover(&mut state, to)?,
            Action::Prepare(node) => self.prepare(&mut state, node)?,
            Action::Undo(node) => self.undo(&mut state, node)?,
            Action::Call(run) => self.call(&mut state, run)?,
            Action::TakeOver(node) => self.take_over(&mut state, node)?,
            Action::Refuse(node) => self.refuse(&mut state, node)?,
            Action::TakeBack(node) => self.take_back(&mut state, node)?,
            Action::Lost(run) => {
                state.faults_left -= 1;
                state.runs.remove(run);
            }
        }
        (state != *last).then_some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::<Self>::always(ONE_OPEN, |_, state| {
                state.members.iter().filter(|m| m.takes_writes() && !m.hidden).count() <= 1
            }),
            Property::<Self>::always(ONE_OPEN_PER_INCARNATION, |_, state| {
                let open = state.members.iter().filter(|m| m.takes_writes() && !m.hidden);
                let incarnations: BTreeSet<u8> = open.clone().map(|m| m.incarnation).collect();
                incarnations.len() == open.count()
            }),
            Property::<Self>::always(NO_LATE_WRITE, |_, state| !state.late_write),
            Property::<Self>::sometimes(REOPENS, |_, state| {
                state.failovers == 0 && state.reopened.contains(&1)
            }),
            Property::<Self>::sometimes(FAILS_OVER, |_, state| state.failovers > 0),
            Property::<Self>::sometimes(REOPENS_AFTER_FAILOVER, |_, state| {
                state.reopened.iter().any(|incarnation| *incarnation > 1)
            }),
        ];
        // (Only where switchovers run: a check stops once each property has its discovery.)
        if self.config.switchovers > 0 {
            properties.extend([
                Property::<Self>::sometimes(SWITCHES_OVER, |_, state| state.took_over),
                Property::<Self>::sometimes(SWITCHES_OVER_AFTER_CRASH, |_, state| {
                    state.took_over_after_crash
                }),
                Property::<Self>::sometimes(TAKES_BACK, |_, state| state.aborted),
            ]);
        }
        properties
    }
}

/// Never two primaries taking writes at once (but an old one in point 3's window).
pub const ONE_OPEN: &str = "never two primaries with an open gate at once";
/// Never two primaries of one incarnation taking writes at once: what no hello between them
/// fences (weaker than `ONE_OPEN`; checked apart where that one is an open finding).
pub const ONE_OPEN_PER_INCARNATION: &str =
    "never two primaries of one incarnation with an open gate at once";
/// No write acknowledged by a primary after one of a newer (or another) incarnation's.
pub const NO_LATE_WRITE: &str = "no write by an older primary after a newer one's";
/// Not vacuous: a restarted primary opens again, no failover having happened.
pub const REOPENS: &str = "a restarted primary takes writes again (no failover)";
pub const FAILS_OVER: &str = "a failover happens";
/// A failover's new primary, restarted, takes writes again.
pub const REOPENS_AFTER_FAILOVER: &str = "a failover's new primary, restarted, opens again";
/// A switchover's target becomes the primary.
pub const SWITCHES_OVER: &str = "a switchover completes: its target takes writes";
/// ... one whose old primary crashed with the switchover pending (run again, or answered).
pub const SWITCHES_OVER_AFTER_CRASH: &str = "a switchover completes after its old primary crashed";
/// A refused switchover's old primary takes its role back.
pub const TAKES_BACK: &str = "an old primary takes its role back after a refusal";
