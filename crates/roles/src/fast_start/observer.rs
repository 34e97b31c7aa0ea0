//! The observer's side of fast-start failover: what it does with what the members answer.
//!
//! - **who is primary**: the open primary of the newest incarnation that answered (of two in
//!   the same incarnation, after a switchover, the one that answered last), kept on disk;
//! - **lease**: every ping to that primary renews its lease, until the observer decides to
//!   fail over from it;
//! - **grant**: a primary that asks to go on without some targets (Maximum Availability) is
//!   granted it by its active observer, which records on disk, *before the ping leaves*, that
//!   it will not fail over to those targets until the primary calls them synchronized again;
//! - **hand-over**: the observer tells the primary which targets name it as their observer
//!   (`following`), so that the primary can make it the active one;
//! - **failover**: the active observer (the one the primary last named) decides the primary is
//!   lost once it has not answered for 1.2 × `threshold` (after the primary's own lease ran
//!   out), or, under Maximum Availability, at once if nothing listens on its redo port; it
//!   records the decision on disk, then asks the first ready target, and asks again until that
//!   target answers as the new primary or refuses. Until then it leases the old primary
//!   nothing and fails over from it to no other target: a target that did not answer may still
//!   be taking over. Under Maximum Availability a target is ready only if the primary's last
//!   answer called it synchronized, no grant was given for it since, and its own answer shows
//!   it holds the primary's durable end as of that answer (for a target behind a relay under
//!   the primary's routes, the relay's answer: the target takes the relay's tail before it
//!   opens);
//! - **news**: an old primary that answers again is told of the newer incarnation (it fences
//!   itself), and (with `auto_reinstate`) reinstated as a standby of the new primary.
//!
//! An observer restarted with its record knows the primary, a failover it decided, and its
//! grants. It does not know what the primary last said of its targets: until the primary
//! answers it again, it fails over to no one.

use std::collections::BTreeMap;
use std::time::Duration;

use proto::{ObserverPing, ObserverPong, WireRole};

use super::record::{ObserverRecord, PendingFailover};
use super::{Position, Protection, Settings, Time};

/// How often a failover request is asked again while its target neither answers as the new
/// primary nor refuses.
pub const REQUEST_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// What an observer runs with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObserverSettings {
    /// Which observer this is.
    pub me: String,
    /// Every member of the configuration.
    pub members: Vec<String>,
    pub fast_start: Settings,
    /// Fast-start failover enabled in the observer's file (else it only watches and reinstates
    /// nothing).
    pub enabled: bool,
    pub auto_reinstate: bool,
}

/// One member, as the observer sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct MemberView {
    pub pong: Option<ObserverPong>,
    pub answered_at: Option<Time>,
    /// Connections refused in a row since the last answer.
    pub refused_in_a_row: u32,
    pub error: Option<String>,
}

/// What a ping to a member came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Its answer; `to_failover`: the ping asked it to fail over.
    Answered {
        pong: Box<ObserverPong>,
        to_failover: bool,
    },
    Unreachable {
        refused: bool,
        error: String,
    },
}

/// What the observer's process does after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Tell Sentinel subscribers the primary moved (`+switch-master`).
    SwitchMaster { old: String, new: String },
    /// Reinstate the fenced `old` as a standby of `primary` (through `primary`'s admin API).
    Reinstate { old: String, primary: String },
}

/// A failover this observer made.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct FailoverMade {
    pub from: String,
    pub to: String,
    pub incarnation: u32,
    /// Milliseconds from the primary's last answer to the new primary's first answer as such.
    pub after_last_answer_ms: u64,
    pub fast_path: bool,
}

/// The request of a pending failover, as this process has sent it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Request {
    /// Sent and not answered yet.
    outstanding: bool,
    last_sent: Option<Time>,
    fast_path: bool,
}

/// The observer's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Observer {
    settings: ObserverSettings,
    /// What is on disk.
    record: ObserverRecord,
    views: BTreeMap<String, MemberView>,
    /// The observer the primary last named active (from its answers).
    active: Option<String>,
    request: Option<Request>,
    failovers: Vec<FailoverMade>,
    reinstating: bool,
    last_event: Option<String>,
}

type Persist<'a> = &'a mut dyn FnMut(&ObserverRecord) -> Result<(), String>;

impl Observer {
    /// An observer that starts from its record (`ObserverRecord::default()` the first time).
    pub fn new(settings: ObserverSettings, record: ObserverRecord) -> Observer {
        let views =
            settings.members.iter().map(|name| (name.clone(), MemberView::default())).collect();
        let request = record.failover.as_ref().map(|_| Request {
            outstanding: false,
            last_sent: None,
            fast_path: false,
        });
        Observer {
            settings,
            record,
            views,
            active: None,
            request,
            failovers: Vec::new(),
            reinstating: false,
            last_event: None,
        }
    }

    pub fn settings(&self) -> &ObserverSettings {
        &self.settings
    }

    pub fn record(&self) -> &ObserverRecord {
        &self.record
    }

    pub fn views(&self) -> &BTreeMap<String, MemberView> {
        &self.views
    }

    /// The primary as this observer knows it.
    pub fn primary(&self) -> Option<&str> {
        self.record.primary.as_deref()
    }

    pub fn incarnation(&self) -> u32 {
        self.record.incarnation
    }

    pub fn active(&self) -> Option<&str> {
        self.active.as_deref()
    }

    pub fn failovers(&self) -> &[FailoverMade] {
        &self.failovers
    }

    pub fn last_event(&self) -> Option<&str> {
        self.last_event.as_deref()
    }

    /// Whether fast-start failover runs on the primary, as its last answer said (observe-only
    /// for planned maintenance: no failover).
    pub fn primary_mode(&self) -> Option<proto::FastStartMode> {
        let primary = self.record.primary.as_deref()?;
        self.views.get(primary)?.pong.as_ref().map(|pong| pong.mode)
    }

    /// What the observer's next decisions depend on, for a model checker to tell two states
    /// apart (everything but the log of failovers made and the last event's text).
    pub fn decision_state(&self) -> impl std::hash::Hash + '_ {
        (
            &self.record,
            &self.views,
            &self.active,
            self.request.as_ref().map(|request| (request.outstanding, request.last_sent)),
            self.reinstating,
        )
    }

    /// The target of a failover decided and not ended yet.
    pub fn failing_over_to(&self) -> Option<&str> {
        self.record.failover.as_ref().map(|failover| failover.to.as_str())
    }

    fn event(&mut self, event: String, events: &mut Vec<String>) {
        events.push(event.clone());
        self.last_event = Some(event);
    }

    /// Changes the record: on disk first; on failure nothing changes.
    fn change(
        &mut self,
        persist: Persist<'_>,
        change: impl FnOnce(&mut ObserverRecord),
    ) -> Result<(), String> {
        let mut record = self.record.clone();
        change(&mut record);
        if record != self.record {
            persist(&record)?;
            self.record = record;
        }
        Ok(())
    }

    /// The ping member `name` gets now. A grant in it is on disk before it is returned; if that
    /// fails, the ping grants nothing.
    pub fn ping_for(&mut self, name: &str, now: Time, persist: Persist<'_>) -> ObserverPing {
        let mut ping = ObserverPing {
            observer: self.settings.me.clone(),
            threshold_ms: self.settings.fast_start.agreement().threshold_ms,
            lag_limit_ms: self.settings.fast_start.agreement().lag_limit_ms,
            protection: self.settings.fast_start.agreement().protection,
            ..ObserverPing::default()
        };
        // The failover request, to its target, until it answers.
        if let (Some(failover), Some(request)) = (&self.record.failover, &mut self.request)
            && failover.to == name
            && !request.outstanding
            && request.last_sent.is_none_or(|at| now.since(at) >= REQUEST_AGAIN_AFTER)
        {
            request.outstanding = true;
            request.last_sent = Some(now);
            ping.failover = true;
            ping.failover_from = failover.from.clone();
            ping.failover_incarnation = failover.incarnation;
        }
        let view = self.views.get(name).cloned().unwrap_or_default();
        let is_primary = self.record.primary.as_deref() == Some(name);
        ping.lease = is_primary && self.record.failover.is_none();
        if let Some(pong) = &view.pong {
            // An old primary (a member that says primary in an older incarnation) hears the news.
            if pong.info.role == WireRole::Primary
                && pong.info.fenced_incarnation == 0
                && pong.info.incarnation < self.record.incarnation
            {
                ping.newer_incarnation = self.record.incarnation;
                ping.new_primary = self.record.primary.clone().unwrap_or_default();
            }
            // A grant goes from the active observer, or to a primary that names none yet (which
            // makes this one active with the same ping if it may, and otherwise ignores it:
            // recording it was only cautious).
            if ping.lease && self.active.as_deref().is_none_or(|active| active == self.settings.me)
            {
                let grant: Vec<String> = pong
                    .wants_unsync
                    .iter()
                    .filter(|target| self.settings.fast_start.targets.contains(*target))
                    .cloned()
                    .collect();
                let new: Vec<String> = grant
                    .iter()
                    .filter(|target| !self.record.ineligible.contains(*target))
                    .cloned()
                    .collect();
                let recorded = self.change(persist, |record| {
                    record.ineligible.extend(new.iter().cloned());
                });
                match recorded {
                    Ok(()) => {
                        for target in &new {
                            self.last_event = Some(format!(
                                "'{name}' lost its target '{target}': it may go on without it; no fast-start failover to '{target}' until it is synchronized again"
                            ));
                        }
                        ping.grant_unsync = grant;
                    }
                    Err(error) => {
                        self.last_event = Some(format!(
                            "cannot record a grant for '{name}', so none is given: {error}"
                        ));
                    }
                }
            }
        }
        if is_primary {
            let threshold = self.settings.fast_start.threshold;
            ping.following = self
                .settings
                .fast_start
                .targets
                .iter()
                .filter(|target| target.as_str() != name)
                .filter(|target| {
                    self.views.get(*target).is_some_and(|view| {
                        view.answered_at.is_some_and(|at| now.since(at) < threshold)
                            && view.pong.as_ref().is_some_and(|pong| {
                                pong.info.role == WireRole::Standby
                                    && pong.active_observer == self.settings.me
                            })
                    })
                })
                .cloned()
                .collect();
        }
        ping
    }

    /// Records what a ping to `name` came to. A refusal of the failover request ends it (on
    /// disk first: the old primary is leased again only after).
    pub fn note(
        &mut self,
        name: &str,
        outcome: Outcome,
        now: Time,
        persist: Persist<'_>,
    ) -> Vec<String> {
        let mut events = Vec::new();
        let pending_to = self.record.failover.as_ref().map(|failover| failover.to.clone());
        let Some(view) = self.views.get_mut(name) else { return events };
        let database = self.record.database_id;
        let outcome = match outcome {
            Outcome::Answered { pong, .. }
                if database != 0
                    && pong.info.database_id != 0
                    && pong.info.database_id != database =>
            {
                Outcome::Unreachable {
                    refused: false,
                    error: format!(
                        "'{name}' holds database {:016x}, but this observer's record is of database {database:016x} (if the configuration was rebuilt, remove the observer's record)",
                        pong.info.database_id
                    ),
                }
            }
            outcome => outcome,
        };
        match outcome {
            Outcome::Answered { pong, to_failover } => {
                view.answered_at = Some(now);
                view.refused_in_a_row = 0;
                view.error = None;
                let refused = to_failover
                    && pending_to.as_deref() == Some(name)
                    && pong.refusal_final
                    && !pong.refusal.is_empty()
                    && pong.info.role == WireRole::Standby;
                let refusal = pong.refusal.clone();
                view.pong = Some(*pong);
                if to_failover
                    && pending_to.as_deref() == Some(name)
                    && let Some(request) = &mut self.request
                {
                    request.outstanding = false;
                }
                if refused {
                    match self.change(persist, |record| record.failover = None) {
                        Ok(()) => {
                            self.request = None;
                            self.event(format!("fast-start failover to '{name}' refused: {refusal}"), &mut events);
                        }
                        Err(error) => self.event(
                            format!("fast-start failover to '{name}' refused ({refusal}), but that cannot be recorded, so the old primary gets no lease: {error}"),
                            &mut events,
                        ),
                    }
                }
            }
            Outcome::Unreachable { refused, error } => {
                view.refused_in_a_row = if refused { view.refused_in_a_row + 1 } else { 0 };
                view.error = Some(error);
                if pending_to.as_deref() == Some(name)
                    && let Some(request) = &mut self.request
                {
                    request.outstanding = false;
                }
            }
        }
        events
    }

    /// One decision step at `now`: what to do, and the events to log.
    pub fn step(&mut self, now: Time, persist: Persist<'_>) -> (Vec<Effect>, Vec<String>) {
        let mut effects = Vec::new();
        let mut events = Vec::new();
        if self.record.failover.is_some() {
            self.follow_failover(now, persist, &mut effects, &mut events);
            return (effects, events);
        }
        if self.learn_primary(persist, &mut effects, &mut events).is_err() {
            return (effects, events);
        }
        if let Some(reinstate) = self.reinstate(now) {
            effects.push(reinstate);
        }
        if !self.settings.enabled {
            return (effects, events);
        }
        self.maybe_fail_over(now, persist, &mut events);
        (effects, events)
    }

    /// A failover under way: has its target (or another member) become the primary of a newer
    /// incarnation, or of the same one by a switchover from the old primary? (A member other
    /// than the old primary answers as the open primary of the old primary's incarnation only
    /// once a switchover handed it the role: the old primary recorded itself a standby before.
    /// The failover is moot then; without this, a switchover while the target refused to fail
    /// over left the observer naming the old primary, a standby, for good.)
    fn follow_failover(
        &mut self,
        now: Time,
        persist: Persist<'_>,
        effects: &mut Vec<Effect>,
        events: &mut Vec<String>,
    ) {
        let Some(failover) = self.record.failover.clone() else { return };
        let newer = self
            .open_primaries()
            .into_iter()
            .filter(|(name, pong, _)| {
                pong.info.incarnation > failover.incarnation
                    || (pong.info.incarnation == failover.incarnation && **name != failover.from)
            })
            .max_by_key(|(name, pong, _)| (pong.info.incarnation, **name == failover.to))
            .map(|(name, pong, _)| (name.clone(), pong.info.incarnation));
        let Some((primary, incarnation)) = newer else { return };
        let recorded = self.change(persist, |record| {
            record.primary = Some(primary.clone());
            record.incarnation = incarnation;
            record.failover = None;
            record.ineligible.clear();
        });
        if let Err(error) = recorded {
            self.event(format!("'{primary}' is the primary of incarnation {incarnation}, but that cannot be recorded: {error}"), events);
            return;
        }
        let fast_path = self.request.take().is_some_and(|request| request.fast_path);
        let after = self
            .views
            .get(&failover.from)
            .and_then(|view| view.answered_at)
            .map_or(0, |at| now.since(at).as_millis() as u64);
        if incarnation == failover.incarnation {
            self.event(
                format!("'{primary}' is the primary of incarnation {incarnation} by a switchover from '{}': the failover to '{}' is moot", failover.from, failover.to),
                events,
            );
        } else if primary == failover.to {
            self.failovers.push(FailoverMade {
                from: failover.from.clone(),
                to: primary.clone(),
                incarnation,
                after_last_answer_ms: after,
                fast_path,
            });
            self.event(
                format!("fast-start failover: '{primary}' is the primary of incarnation {incarnation} ({after} ms after '{}' last answered)", failover.from),
                events,
            );
        } else {
            self.event(
                format!("'{primary}' is the primary of incarnation {incarnation} (not by this observer's failover to '{}')", failover.to),
                events,
            );
        }
        effects.push(Effect::SwitchMaster { old: failover.from, new: primary });
    }

    /// Members that answer as open primaries: (name, answer, when).
    fn open_primaries(&self) -> Vec<(&String, &ObserverPong, Time)> {
        self.views
            .iter()
            .filter_map(|(name, view)| Some((name, view.pong.as_ref()?, view.answered_at?)))
            .filter(|(_, pong, _)| {
                pong.info.role == WireRole::Primary && pong.info.fenced_incarnation == 0
            })
            .collect()
    }

    /// Who is primary: the open primary of the newest incarnation that answered (the latest
    /// to answer of two in one incarnation); what it says of its active observer and targets.
    fn learn_primary(
        &mut self,
        persist: Persist<'_>,
        effects: &mut Vec<Effect>,
        events: &mut Vec<String>,
    ) -> Result<(), String> {
        let newest = self
            .open_primaries()
            .into_iter()
            .max_by_key(|(_, pong, at)| (pong.info.incarnation, *at))
            .map(|(name, pong, _)| (name.clone(), pong.clone()));
        let Some((name, pong)) = newest else { return Ok(()) };
        let incarnation = pong.info.incarnation;
        if incarnation < self.record.incarnation {
            return Ok(());
        }
        let old = self.record.primary.clone();
        if old.as_deref() != Some(name.as_str()) || self.record.incarnation != incarnation {
            // A new primary, new grants: it says which targets are synchronized.
            let recorded = self.change(persist, |record| {
                record.primary = Some(name.clone());
                record.incarnation = incarnation;
                record.ineligible.clear();
                if record.database_id == 0 {
                    record.database_id = pong.info.database_id;
                }
            });
            if let Err(error) = recorded {
                self.event(
                    format!("'{name}' is the primary, but that cannot be recorded: {error}"),
                    events,
                );
                return Err(error);
            }
            self.event(format!("the primary is '{name}' (incarnation {incarnation})"), events);
            // A switchover (or a failover another observer made): Sentinel clients hear of it
            // as of a failover.
            if let Some(old) = old.filter(|old| *old != name) {
                effects.push(Effect::SwitchMaster { old, new: name.clone() });
            }
        }
        // The primary names its active observer: this one, another, or none yet.
        self.active = (!pong.active_observer.is_empty()).then(|| pong.active_observer.clone());
        // A target the primary calls synchronized again (in an answer after the grant: the
        // view holds the newest answer) may be failed over to again.
        let again: Vec<String> = self
            .record
            .ineligible
            .iter()
            .filter(|target| pong.targets_synchronized.contains(*target))
            .cloned()
            .collect();
        if !again.is_empty() {
            self.change(persist, |record| {
                for target in &again {
                    record.ineligible.remove(target);
                }
            })?;
            for target in again {
                self.event(
                    format!("'{name}': its target '{target}' is synchronized again"),
                    events,
                );
            }
        }
        Ok(())
    }

    /// A fenced member that answers, and a primary to reinstate it under.
    fn reinstate(&mut self, now: Time) -> Option<Effect> {
        if !self.settings.auto_reinstate || self.reinstating {
            return None;
        }
        let primary = self.record.primary.clone()?;
        let threshold = self.settings.fast_start.threshold;
        let old = self.views.iter().find_map(|(name, view)| {
            let pong = view.pong.as_ref()?;
            (*name != primary
                && pong.info.fenced_incarnation != 0
                && pong.info.fenced_incarnation <= self.record.incarnation
                && view.answered_at.is_some_and(|at| now.since(at) < threshold))
            .then(|| name.clone())
        })?;
        // Only under a primary that answers as such now.
        let current = self.views.get(&primary)?;
        let open = current.pong.as_ref().is_some_and(|pong| {
            pong.info.role == WireRole::Primary
                && pong.info.fenced_incarnation == 0
                && pong.info.incarnation == self.record.incarnation
        }) && current.answered_at.is_some_and(|at| now.since(at) < threshold);
        if !open {
            return None;
        }
        self.reinstating = true;
        self.last_event = Some(format!("reinstating '{old}' as a standby of '{primary}'"));
        Some(Effect::Reinstate { old, primary })
    }

    /// A reinstate this observer started has ended.
    pub fn reinstate_done(&mut self, event: String) {
        self.reinstating = false;
        self.last_event = Some(event);
    }

    fn maybe_fail_over(&mut self, now: Time, persist: Persist<'_>, events: &mut Vec<String>) {
        let Some(primary) = self.record.primary.clone() else { return };
        if self.active.as_deref() != Some(self.settings.me.as_str()) {
            return;
        }
        let Some(view) = self.views.get(&primary).cloned() else { return };
        let Some(primary_pong) = view.pong.as_ref() else { return };
        if primary_pong.mode != proto::FastStartMode::Enabled {
            return;
        }
        let silent = view.answered_at.map_or(Duration::MAX, |at| now.since(at));
        let maximum_availability =
            self.settings.fast_start.protection == Protection::MaximumAvailability;
        // A refused connection means no process listens on the primary's redo port. Under
        // Maximum Availability that is enough (the primary acknowledges nothing a ready target
        // lacks without this observer's grant); under Maximum Performance its lease must run
        // out.
        let fast_path = maximum_availability && view.refused_in_a_row >= 2;
        if !fast_path && silent < self.settings.fast_start.lost_after() {
            return;
        }
        let primary_end = position_of(primary_pong);
        let ready = self.ready_targets(now, silent);
        // Under Maximum Availability it must also show it holds the primary's durable end as of
        // the primary's last answer (its own answers come every ping). A target behind a relay
        // under this primary's routes: its relay must (the target takes the relay's tail before
        // it opens), by the relay's own answer.
        let held_by = |target: &String| -> Option<Position> {
            let holder = self.settings.fast_start.relay_of(&primary, target).unwrap_or(target);
            self.views.get(holder)?.pong.as_ref().map(position_of)
        };
        let holds_end = |target: &String| {
            !maximum_availability || held_by(target).is_some_and(|held| held >= primary_end)
        };
        let target = ready.iter().find(|target| holds_end(target)).cloned();
        let Some(target) = target else {
            let behind: Vec<String> = ready
                .iter()
                .filter(|target| !holds_end(target))
                .map(|target| {
                    let held = held_by(target).unwrap_or_default();
                    let through = self
                        .settings
                        .fast_start
                        .relay_of(&primary, target)
                        .map_or(String::new(), |relay| format!(" (through '{relay}')"));
                    format!(
                        "'{target}'{through} holds {held}, the primary's durable end was {primary_end}"
                    )
                })
                .collect();
            let event = format!(
                "the primary is lost ('{primary}'), but no target is ready (synchronized, holding its end, reachable){}: no failover",
                if behind.is_empty() { String::new() } else { format!(": {}", behind.join("; ")) }
            );
            let said = self.last_event.as_deref().is_some_and(|last| {
                last.starts_with("the primary is lost") && (behind.is_empty() || last == event)
            });
            if !said {
                self.event(event, events);
            }
            return;
        };
        let failover = PendingFailover {
            from: primary.clone(),
            incarnation: self.record.incarnation,
            to: target.clone(),
        };
        if let Err(error) = self.change(persist, |record| record.failover = Some(failover)) {
            self.event(format!("the primary '{primary}' is lost, but the decision to fail over cannot be recorded, so none is made: {error}"), events);
            return;
        }
        self.request = Some(Request { outstanding: false, last_sent: None, fast_path });
        self.event(
            format!(
                "fast-start failover: '{primary}' is lost ({}), failing over to '{target}'",
                if fast_path {
                    "its redo port refuses connections".to_string()
                } else {
                    format!("silent {:.1} s", silent.as_secs_f64())
                }
            ),
            events,
        );
    }

    /// The targets this observer would fail over to now, first choice first, if the primary
    /// were lost: nothing unless fast-start failover is enabled and this observer is the
    /// active one. What an operator checks to know that fast-start failover is armed.
    pub fn ready(&self, now: Time) -> Vec<String> {
        if !self.settings.enabled || self.active.as_deref() != Some(&self.settings.me) {
            return Vec::new();
        }
        if self.primary_mode() != Some(proto::FastStartMode::Enabled) {
            return Vec::new();
        }
        self.ready_targets(now, self.settings.fast_start.lost_after())
    }

    /// The targets it would fail over to if the primary it knows were lost now after `silent`
    /// without an answer: members that answered within the threshold, standbys of the
    /// primary's incarnation that name this observer as theirs, and ready. Under Maximum
    /// Availability ready means synchronized, as the standby and the primary's last answer both
    /// say, with no grant given for it since; otherwise synchronized with both lags under
    /// `lag_limit` (or under the primary's silence + 1 s).
    fn ready_targets(&self, now: Time, silent: Duration) -> Vec<String> {
        let fast_start = &self.settings.fast_start;
        let threshold = fast_start.threshold;
        let Some(primary) = self.record.primary.as_deref() else { return Vec::new() };
        let Some(primary_pong) = self.views.get(primary).and_then(|view| view.pong.as_ref()) else {
            return Vec::new();
        };
        let lag_allowed_ms = (fast_start.lag_limit.as_millis() as u64)
            .max((silent.as_millis() as u64).saturating_add(1000));
        fast_start
            .targets
            .iter()
            .filter(|name| name.as_str() != primary)
            .filter(|name| {
                let Some(view) = self.views.get(*name) else { return false };
                let Some(pong) = &view.pong else { return false };
                let recent = view.answered_at.is_some_and(|at| now.since(at) < threshold);
                let standby = pong.info.role == WireRole::Standby
                    && pong.info.fenced_incarnation == 0
                    && pong.info.incarnation == self.record.incarnation
                    && pong.active_observer == self.settings.me;
                let ready = match fast_start.protection {
                    Protection::MaximumAvailability => {
                        pong.synchronized
                            && primary_pong.targets_synchronized.contains(*name)
                            && !self.record.ineligible.contains(*name)
                    }
                    Protection::MaximumPerformance => {
                        pong.synchronized
                            && pong.transport_lag_ms <= lag_allowed_ms
                            && pong.apply_lag_ms <= lag_allowed_ms
                    }
                };
                recent && standby && ready
            })
            .cloned()
            .collect()
    }
}

/// A member's durable end (a primary) or what it holds durably (a standby).
fn position_of(pong: &ObserverPong) -> Position {
    Position { seq: pong.info.position.current_seq, offset: pong.info.position.current_offset }
}

#[cfg(test)]
mod tests;
