//! The history checker of `bench chaos`: judges every client operation of a history against
//! what the final primary holds. Pure: the campaign reads the keys (`keys_to_read`) from the
//! primary of a settled configuration and hands them over with the history.
//!
//! # Rules (each broken rule on one key is one violation)
//!
//! - **lost_write**: a `SET` that was acknowledged is on the final primary with its value.
//! - **deposed_write**: the same rule, for a write acknowledged by a member *after* another
//!   member had acknowledged a write that survived: the last surviving write acknowledged
//!   before it was acknowledged came from someone else, so two databases acknowledged writes
//!   at once and the deposed one's were lost. (A lost write is one or the other, never both.)
//! - **counter_below_acknowledged**: a counter on the final primary is at least the largest
//!   value any `INCR` of it was acknowledged with.
//! - **counter_went_back**: an `INCR` that began after another `INCR` of the same counter was
//!   acknowledged returns a larger value (real-time order: increments are never undone). One
//!   violation per run of consecutive offenders, in the order they were sent.
//!
//! Failed operations (refused: not done) and indeterminate ones (may or may not be done) are
//! not judged, but a failed `SET` found on the primary is counted (`failed_but_present`): a
//! refusal that was in fact done is worth a look, though no rule above covers it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::history::{Operation, Outcome, Request};

/// Which rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    LostWrite,
    DeposedWrite,
    CounterBelowAcknowledged,
    CounterWentBack,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::LostWrite => "lost_write",
            Rule::DeposedWrite => "deposed_write",
            Rule::CounterBelowAcknowledged => "counter_below_acknowledged",
            Rule::CounterWentBack => "counter_went_back",
        }
    }
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub rule: Rule,
    /// The key or counter.
    pub key: String,
    /// The member that acknowledged the offending operation, and when (µs since the campaign
    /// began): the lost write, the counter's highest value, or the answer a counter went back
    /// from.
    pub member: String,
    pub acknowledged_us: u64,
    /// What happened, for a person.
    pub detail: String,
}

impl Violation {
    /// What makes two reports of one violation the same (a later check of a longer history
    /// finds the earlier ones again).
    pub fn identity(&self) -> (Rule, String, u64) {
        (self.rule, self.key.clone(), self.acknowledged_us)
    }
}

/// What the final primary holds of the keys a history wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinalState {
    /// The member read.
    pub primary: String,
    /// Each key `SET` in the history, and its value there (`None`: absent).
    pub values: BTreeMap<String, Option<String>>,
    /// Each counter, as an integer (absent: 0).
    pub counters: BTreeMap<String, i64>,
}

/// The checker's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    pub acknowledged: u64,
    pub failed: u64,
    pub indeterminate: u64,
    /// Failed `SET`s whose value is on the final primary anyway.
    pub failed_but_present: u64,
    /// `NOWAIT` writes acknowledged and lost, not by a deposed primary: what that mode allows.
    pub nowait_lost: u64,
}

/// The keys the final state must hold values for: every key of a `SET` that was acknowledged
/// or failed, and every counter.
pub fn keys_to_read(operations: &[Operation]) -> (Vec<String>, Vec<String>) {
    let mut keys = Vec::new();
    let mut counters = Vec::new();
    for operation in operations {
        match (&operation.request, &operation.outcome) {
            (Request::Set { key, .. }, Outcome::Ok { .. } | Outcome::Fail { .. }) => {
                keys.push(key.clone())
            }
            (Request::Increment { counter }, _) => counters.push(counter.clone()),
            _ => {}
        }
    }
    keys.sort();
    keys.dedup();
    counters.sort();
    counters.dedup();
    (keys, counters)
}

fn seconds(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// Judges `operations` against `state`; see the module documentation.
pub fn check(operations: &[Operation], state: &FinalState) -> Verdict {
    let mut verdict = Verdict::default();
    for operation in operations {
        match operation.outcome {
            Outcome::Ok { .. } => verdict.acknowledged += 1,
            Outcome::Fail { .. } => verdict.failed += 1,
            Outcome::Indeterminate { .. } => verdict.indeterminate += 1,
        }
    }
    let present = |operation: &Operation| match &operation.request {
        Request::Set { key, value, .. } => {
            state.values.get(key).is_some_and(|held| held.as_deref() == Some(value.as_str()))
        }
        Request::Increment { .. } => false,
    };
    let sets =
        operations.iter().filter(|operation| matches!(operation.request, Request::Set { .. }));
    verdict.failed_but_present = sets
        .clone()
        .filter(|operation| matches!(operation.outcome, Outcome::Fail { .. }) && present(operation))
        .count() as u64;
    // Surviving acknowledged writes, by when they were acknowledged.
    let mut survivors: Vec<&Operation> =
        sets.clone().filter(|operation| operation.acknowledged() && present(operation)).collect();
    survivors.sort_by_key(|operation| operation.completed_us);
    for lost in sets.filter(|operation| operation.acknowledged() && !present(operation)) {
        let after = survivors.partition_point(|survivor| survivor.completed_us < lost.completed_us);
        let last_survivor = after.checked_sub(1).map(|index| survivors[index]);
        let next_survivor = survivors.get(after);
        let deposed = last_survivor.is_some_and(|survivor| survivor.member != lost.member)
            && next_survivor.is_none_or(|survivor| survivor.member != lost.member);
        let nowait = matches!(lost.request, Request::Set { nowait: true, .. });
        if nowait && !deposed {
            verdict.nowait_lost += 1;
            continue;
        }
        let held = state.values.get(lost.request.key()).cloned().flatten();
        let found = match held {
            Some(value) => format!("holds '{value}'"),
            None => "lacks it".to_string(),
        };
        let violation = match last_survivor.filter(|_| deposed) {
            Some(survivor) => Violation {
                rule: Rule::DeposedWrite,
                key: lost.request.key().to_string(),
                member: lost.member.clone(),
                acknowledged_us: lost.completed_us,
                detail: format!(
                    "{} acknowledged it{} to {} at {:.3} s, after {} had acknowledged {} (which survived) at {:.3} s; the final primary {} {found}",
                    lost.member,
                    if nowait { " (NOWAIT)" } else { "" },
                    lost.client,
                    seconds(lost.completed_us),
                    survivor.member,
                    survivor.request.key(),
                    seconds(survivor.completed_us),
                    state.primary
                ),
            },
            _ => Violation {
                rule: Rule::LostWrite,
                key: lost.request.key().to_string(),
                member: lost.member.clone(),
                acknowledged_us: lost.completed_us,
                detail: format!(
                    "{} acknowledged it to {} at {:.3} s (sent at {:.3} s); the final primary {} {found}",
                    lost.member,
                    lost.client,
                    seconds(lost.completed_us),
                    seconds(lost.invoked_us),
                    state.primary
                ),
            },
        };
        verdict.violations.push(violation);
    }
    check_counters(operations, state, &mut verdict);
    verdict
}

fn check_counters(operations: &[Operation], state: &FinalState, verdict: &mut Verdict) {
    // Each counter's acknowledged increments: (operation, value returned).
    let mut by_counter: BTreeMap<&str, Vec<(&Operation, i64)>> = BTreeMap::new();
    for operation in operations {
        if let (Request::Increment { counter }, Outcome::Ok { value: Some(value) }) =
            (&operation.request, &operation.outcome)
        {
            by_counter.entry(counter).or_default().push((operation, *value));
        }
    }
    for (counter, mut increments) in by_counter {
        let final_value = state.counters.get(counter).copied().unwrap_or(0);
        if let Some(&(highest, value)) = increments.iter().max_by_key(|(_, value)| *value)
            && final_value < value
        {
            verdict.violations.push(Violation {
                rule: Rule::CounterBelowAcknowledged,
                key: counter.to_string(),
                member: highest.member.clone(),
                acknowledged_us: highest.completed_us,
                detail: format!(
                    "{} acknowledged {value} to {} at {:.3} s; the final primary {} holds {final_value}",
                    highest.member,
                    highest.client,
                    seconds(highest.completed_us),
                    state.primary
                ),
            });
        }
        // Real-time order: sweep by invocation, with the largest value of every increment
        // acknowledged before the current one was sent.
        increments.sort_by_key(|(operation, _)| operation.invoked_us);
        let mut by_completion: Vec<(u64, i64, &Operation)> = increments
            .iter()
            .map(|(operation, value)| (operation.completed_us, *value, *operation))
            .collect();
        by_completion.sort_by_key(|(completed, _, _)| *completed);
        let mut next = 0;
        let mut earlier: Option<(i64, &Operation)> = None;
        let mut offending = false;
        for (operation, value) in &increments {
            while next < by_completion.len() && by_completion[next].0 < operation.invoked_us {
                let (_, done, done_by) = by_completion[next];
                if earlier.is_none_or(|(largest, _)| done > largest) {
                    earlier = Some((done, done_by));
                }
                next += 1;
            }
            let went_back = earlier.is_some_and(|(largest, _)| *value <= largest);
            if went_back && !offending {
                let (largest, by) = earlier.expect("went back from something");
                // The culprit is the earlier answer, which the counter no longer includes.
                verdict.violations.push(Violation {
                    rule: Rule::CounterWentBack,
                    key: counter.to_string(),
                    member: by.member.clone(),
                    acknowledged_us: by.completed_us,
                    detail: format!(
                        "{} answered {value} to {} at {:.3} s for an INCR sent at {:.3} s, after {} had answered {largest} to {} at {:.3} s",
                        operation.member,
                        operation.client,
                        seconds(operation.completed_us),
                        seconds(operation.invoked_us),
                        by.member,
                        by.client,
                        seconds(by.completed_us)
                    ),
                });
            }
            offending = went_back;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made history: operations in the order written.
    struct Made(Vec<Operation>);

    const OK: Outcome = Outcome::Ok { value: None };

    impl Made {
        fn set(mut self, key: &str, member: &str, at: (u64, u64), outcome: Outcome) -> Made {
            self.0.push(Operation {
                client: "c".into(),
                request: Request::Set { key: key.into(), value: key.into(), nowait: false },
                member: member.into(),
                invoked_us: at.0,
                completed_us: at.1,
                outcome,
            });
            self
        }

        fn incr(mut self, member: &str, at: (u64, u64), value: Option<i64>) -> Made {
            let outcome = match value {
                Some(value) => Outcome::Ok { value: Some(value) },
                None => Outcome::Indeterminate { reason: "timeout".into() },
            };
            self.0.push(Operation {
                client: "c".into(),
                request: Request::Increment { counter: "n".into() },
                member: member.into(),
                invoked_us: at.0,
                completed_us: at.1,
                outcome,
            });
            self
        }
    }

    /// The state holding `keys` (each with itself as its value) and counter `n` at `counter`.
    fn state(keys: &[&str], counter: i64) -> FinalState {
        FinalState {
            primary: "west".into(),
            values: keys.iter().map(|key| (key.to_string(), Some(key.to_string()))).collect(),
            counters: [("n".to_string(), counter)].into(),
        }
    }

    fn rules(verdict: &Verdict) -> Vec<(Rule, &str)> {
        verdict.violations.iter().map(|v| (v.rule, v.key.as_str())).collect()
    }

    #[test]
    fn a_clean_history_passes_and_is_counted() {
        let history = Made(Vec::new())
            .set("a", "east", (0, 10), OK)
            .set("b", "east", (20, 30), Outcome::Fail { reason: "READONLY".into() })
            .set("c", "east", (40, 50), Outcome::Indeterminate { reason: "timeout".into() })
            .set("d", "west", (60, 70), OK)
            .incr("east", (0, 5), Some(1))
            .incr("west", (80, 90), Some(2));
        let verdict = check(&history.0, &state(&["a", "d"], 2));
        assert!(verdict.violations.is_empty(), "{verdict:?}");
        assert_eq!((verdict.acknowledged, verdict.failed, verdict.indeterminate), (4, 1, 1));
        assert_eq!(verdict.failed_but_present, 0);
        let (keys, counters) = keys_to_read(&history.0);
        assert_eq!(keys, ["a", "b", "d"], "an indeterminate write need not be read");
        assert_eq!(counters, ["n"]);
    }

    #[test]
    fn an_acknowledged_write_missing_from_the_final_primary_is_lost() {
        let history = Made(Vec::new())
            .set("a", "east", (0, 10), OK)
            .set("b", "east", (20, 30), OK)
            .set("c", "west", (100, 110), OK);
        // b was acknowledged by east while east was the only one acknowledging: a lost write.
        let verdict = check(&history.0, &state(&["a", "c"], 0));
        assert_eq!(rules(&verdict), [(Rule::LostWrite, "b")]);
        assert!(verdict.violations[0].detail.contains("the final primary west lacks it"));
        // Another value in its place is no better.
        let mut other = state(&["a", "c"], 0);
        other.values.insert("b".into(), Some("x".into()));
        assert_eq!(rules(&check(&history.0, &other)), [(Rule::LostWrite, "b")]);
    }

    #[test]
    fn a_write_acknowledged_by_a_deposed_primary_after_the_new_ones_is_told_apart() {
        // West took over and acknowledged c at 100 µs; east, cut off but reachable by a
        // client, acknowledged d at 150 µs: two primaries at once, d lost.
        let history = Made(Vec::new())
            .set("a", "east", (0, 10), OK)
            .set("c", "west", (90, 100), OK)
            .set("d", "east", (95, 150), OK)
            .set("e", "west", (160, 170), OK);
        let verdict = check(&history.0, &state(&["a", "c", "e"], 0));
        assert_eq!(rules(&verdict), [(Rule::DeposedWrite, "d")]);
        assert!(verdict.violations[0].detail.contains("after west had acknowledged c"));
    }

    #[test]
    fn a_nowait_write_lost_breaks_only_the_deposed_rule() {
        let nowait = |mut made: Made| {
            if let Some(Operation { request: Request::Set { nowait, .. }, .. }) = made.0.last_mut()
            {
                *nowait = true;
            }
            made
        };
        // Lost with its primary (a crash before it was durable): what NOWAIT allows.
        let crash =
            nowait(Made(Vec::new()).set("a", "east", (0, 10), OK).set("b", "east", (20, 30), OK))
                .set("c", "west", (100, 110), OK);
        let verdict = check(&crash.0, &state(&["a", "c"], 0));
        assert!(verdict.violations.is_empty(), "{verdict:?}");
        assert_eq!(verdict.nowait_lost, 1);
        // Acknowledged by east while west was acknowledging: never allowed.
        let split = Made(Vec::new()).set("a", "east", (0, 10), OK).set("c", "west", (90, 100), OK);
        let split = nowait(split.set("d", "east", (95, 150), OK)).set("e", "west", (160, 170), OK);
        let verdict = check(&split.0, &state(&["a", "c", "e"], 0));
        assert_eq!(rules(&verdict), [(Rule::DeposedWrite, "d")]);
        assert!(verdict.violations[0].detail.contains("(NOWAIT)"));
    }

    #[test]
    fn a_primary_back_after_a_switchover_that_loses_its_first_write_lost_it_itself() {
        // east, then west (switchover), then east again, whose first write is lost with it.
        let history = Made(Vec::new())
            .set("a", "east", (0, 10), OK)
            .set("b", "west", (20, 30), OK)
            .set("c", "east", (40, 50), OK)
            .set("d", "east", (60, 70), OK);
        let verdict = check(&history.0, &state(&["a", "b", "d"], 0));
        assert_eq!(rules(&verdict), [(Rule::LostWrite, "c")]);
    }

    #[test]
    fn a_failed_write_found_anyway_is_counted_not_judged() {
        let history =
            Made(Vec::new()).set("a", "east", (0, 10), Outcome::Fail { reason: "TRYAGAIN".into() });
        let verdict = check(&history.0, &state(&["a"], 0));
        assert!(verdict.violations.is_empty());
        assert_eq!(verdict.failed_but_present, 1);
    }

    #[test]
    fn a_counter_below_its_acknowledged_value_is_caught() {
        let history = Made(Vec::new())
            .incr("east", (0, 10), Some(1))
            .incr("east", (20, 30), Some(2))
            .incr("east", (40, 50), Some(3))
            .incr("east", (60, 70), None);
        assert!(check(&history.0, &state(&[], 3)).violations.is_empty());
        assert!(check(&history.0, &state(&[], 4)).violations.is_empty(), "the indeterminate one");
        let verdict = check(&history.0, &state(&[], 2));
        assert_eq!(rules(&verdict), [(Rule::CounterBelowAcknowledged, "n")]);
        assert!(verdict.violations[0].detail.contains("acknowledged 3"));
    }

    #[test]
    fn a_counter_that_goes_back_in_real_time_is_caught_once_per_run() {
        // West took over without east's last increments: its next answers go back to 2, 3.
        let history = Made(Vec::new())
            .incr("east", (0, 10), Some(1))
            .incr("east", (20, 30), Some(2))
            .incr("east", (40, 50), Some(3))
            .incr("east", (60, 70), Some(4))
            .incr("west", (100, 110), Some(3))
            .incr("west", (120, 130), Some(4))
            .incr("west", (140, 150), Some(5));
        let verdict = check(&history.0, &state(&[], 5));
        assert_eq!(rules(&verdict), [(Rule::CounterWentBack, "n")]);
        assert!(verdict.violations[0].detail.contains("west answered 3"));
        // Concurrent increments may complete in any order: no violation.
        let concurrent = Made(Vec::new())
            .incr("east", (0, 50), Some(2))
            .incr("east", (10, 20), Some(1))
            .incr("east", (60, 70), Some(3));
        assert!(check(&concurrent.0, &state(&[], 3)).violations.is_empty());
    }

    #[test]
    fn violations_have_an_identity_that_a_longer_history_keeps() {
        let history = Made(Vec::new()).set("a", "east", (0, 10), OK);
        let first = check(&history.0, &state(&[], 0));
        let longer = history.set("b", "east", (20, 30), OK);
        let second = check(&longer.0, &state(&["b"], 0));
        assert_eq!(first.violations[0].identity(), second.violations[0].identity());
    }
}
