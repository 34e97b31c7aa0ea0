//! What `bench chaos` reports: every round (its faults, what was done, how long writes stopped,
//! the violations found after it), the summary per fault kind, the table a person reads and
//! the figure beside the JSON.

use std::collections::BTreeMap;

use serde::Serialize;
use tools::bench::plot::{BarPanel, Figure, Group, Limit, LimitValue};

use super::checker::Violation;

/// Violations kept in full per round (the JSON); the rest are counted.
pub const VIOLATIONS_KEPT_MAX: usize = 20;
/// Violations the table shows per round.
const VIOLATIONS_SHOWN_MAX: usize = 3;
use super::faults::FaultKind;
use crate::bench_failover::median;

/// One round.
#[derive(Debug, Clone, Serialize)]
pub struct RoundResult {
    pub number: u32,
    /// The epoch (fresh processes and data) it ran in.
    pub epoch: u32,
    /// Its faults as planned.
    pub faults: Vec<String>,
    pub kinds: Vec<FaultKind>,
    /// Who held which role when it began.
    pub roles_at_start: String,
    /// When its fault phase began, in seconds since the campaign began.
    pub started_s: f64,
    /// From the heal to the configuration settled again.
    pub settle_s: f64,
    /// The longest stretch without an acknowledged write, from the start of the faults to the
    /// configuration settled again.
    pub without_writes_s: f64,
    /// Writes acknowledged in that time.
    pub acknowledged: u64,
    /// The primary once settled.
    pub primary_after: Option<String>,
    /// How many violations were first found after this round, per rule, and the first
    /// [`VIOLATIONS_KEPT_MAX`] of them in full.
    pub violation_count: u64,
    pub violations_by_rule: BTreeMap<String, u64>,
    pub violations: Vec<Violation>,
    /// Why the configuration did not settle (the epoch ended there).
    pub unsettled: Option<String>,
    /// What the nemesis, the heal and the settling did.
    pub notes: Vec<String>,
}

/// The rounds of one fault kind (a round of two kinds counts for both).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FaultSummary {
    pub rounds: u64,
    pub violations: u64,
    pub rounds_with_violations: u64,
    pub unsettled: u64,
    pub without_writes_p50_s: f64,
    pub without_writes_max_s: f64,
}

/// Every operation's outcome, over every epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Operations {
    pub acknowledged: u64,
    pub failed: u64,
    pub indeterminate: u64,
    /// Failed writes found on the primary all the same (see `checker`).
    pub failed_but_present: u64,
    /// NOWAIT writes acknowledged and lost as that mode allows (not by a deposed primary).
    pub nowait_lost: u64,
    /// Operations of epochs whose last round did not settle: not checked.
    pub unchecked: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ChaosReport {
    pub seed: u64,
    /// Rounds run.
    pub rounds: u64,
    pub rounds_asked: u32,
    /// Length of each round's fault phase.
    pub round_seconds: f64,
    pub threshold_s: f64,
    /// The members and their redo routes (`--layout`).
    pub layout: super::Layout,
    /// The kinds drawn from.
    pub faults: Vec<FaultKind>,
    /// A fault the campaign itself planted to show the checker catches it (`--plant`).
    pub plant: Option<String>,
    /// Violations found (each once: one broken rule on one key), and the rounds they were
    /// found after.
    pub violations: u64,
    pub rounds_with_violations: u64,
    /// Rounds after which the configuration did not settle.
    pub unsettled: u64,
    pub by_fault: BTreeMap<FaultKind, FaultSummary>,
    /// Violations per rule.
    pub by_rule: BTreeMap<String, u64>,
    pub operations: Operations,
    pub epochs: u32,
    /// The command that replays this campaign's faults.
    pub replay: String,
    pub round_results: Vec<RoundResult>,
    /// Why the campaign stopped before its last round (an epoch that could not start, a check
    /// that could not read the primary, an interrupt).
    pub failures: Vec<String>,
    pub elapsed_s: f64,
}

impl ChaosReport {
    /// Fills the totals and the summaries from `round_results`.
    pub fn summarise(&mut self) {
        self.rounds = self.round_results.len() as u64;
        self.violations = self.round_results.iter().map(|round| round.violation_count).sum();
        self.rounds_with_violations =
            self.round_results.iter().filter(|round| round.violation_count > 0).count() as u64;
        self.unsettled =
            self.round_results.iter().filter(|round| round.unsettled.is_some()).count() as u64;
        self.by_rule.clear();
        for (rule, count) in self.round_results.iter().flat_map(|round| &round.violations_by_rule) {
            *self.by_rule.entry(rule.clone()).or_default() += count;
        }
        let mut silences: BTreeMap<FaultKind, Vec<f64>> = BTreeMap::new();
        self.by_fault.clear();
        for round in &self.round_results {
            for kind in &round.kinds {
                let summary = self.by_fault.entry(*kind).or_default();
                summary.rounds += 1;
                summary.violations += round.violation_count;
                summary.rounds_with_violations += u64::from(round.violation_count > 0);
                summary.unsettled += u64::from(round.unsettled.is_some());
                if round.unsettled.is_none() {
                    silences.entry(*kind).or_default().push(round.without_writes_s);
                }
            }
        }
        for (kind, values) in silences {
            let summary = self.by_fault.entry(kind).or_default();
            summary.without_writes_p50_s = median(&values);
            summary.without_writes_max_s = values.iter().copied().fold(0.0, f64::max);
        }
    }
}

/// The table, the violations and the rounds that did not settle.
pub fn render(report: &ChaosReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench chaos: seed {}, {} round(s) of {} s of faults in {} epoch(s), fast-start threshold {} s{}{}",
        report.seed,
        report.rounds,
        report.round_seconds,
        report.epochs,
        report.threshold_s,
        match report.layout {
            super::Layout::Standard => String::new(),
            layout => format!(", layout {}", layout.name()),
        },
        report.plant.as_ref().map_or(String::new(), |plant| format!(", PLANTED FAULT: {plant}"))
    );
    let _ = writeln!(
        out,
        "  {:<28} {:>6} {:>10} {:>12} {:>9} {:>22} {:>22}",
        "fault",
        "rounds",
        "violations",
        "(in rounds)",
        "unsettled",
        "without writes p50 s",
        "without writes max s"
    );
    for (kind, summary) in &report.by_fault {
        let _ = writeln!(
            out,
            "  {:<28} {:>6} {:>10} {:>12} {:>9} {:>22.2} {:>22.2}",
            kind.name(),
            summary.rounds,
            summary.violations,
            summary.rounds_with_violations,
            summary.unsettled,
            summary.without_writes_p50_s,
            summary.without_writes_max_s
        );
    }
    let _ = writeln!(
        out,
        "  {:<28} {:>6} {:>10} {:>12} {:>9}",
        "all", report.rounds, report.violations, report.rounds_with_violations, report.unsettled
    );
    let operations = &report.operations;
    let _ = writeln!(
        out,
        "operations: {} acknowledged, {} failed, {} indeterminate; {} failed writes present anyway; {} NOWAIT writes lost as NOWAIT allows; {} not checked",
        operations.acknowledged,
        operations.failed,
        operations.indeterminate,
        operations.failed_but_present,
        operations.nowait_lost,
        operations.unchecked
    );
    let _ = writeln!(out, "replay: {}", report.replay);
    for round in &report.round_results {
        if round.violation_count > 0 {
            let rules: Vec<String> = round
                .violations_by_rule
                .iter()
                .map(|(rule, count)| format!("{count} {rule}"))
                .collect();
            let _ = writeln!(
                out,
                "VIOLATIONS after round {} ({}; roles at its start: {}): {}",
                round.number,
                round.faults.join("; "),
                round.roles_at_start,
                rules.join(", ")
            );
        }
        for violation in round.violations.iter().take(VIOLATIONS_SHOWN_MAX) {
            let _ = writeln!(
                out,
                "  {} {}: {}",
                violation.rule.name(),
                violation.key,
                violation.detail
            );
        }
        if round.violation_count > VIOLATIONS_SHOWN_MAX as u64 {
            let _ = writeln!(
                out,
                "  … and {} more (the JSON keeps {VIOLATIONS_KEPT_MAX} a round)",
                round.violation_count - VIOLATIONS_SHOWN_MAX as u64
            );
        }
        if let Some(reason) = &round.unsettled {
            let _ = writeln!(
                out,
                "UNSETTLED after round {} ({}): {reason}",
                round.number,
                round.faults.join("; ")
            );
        }
    }
    for failure in &report.failures {
        let _ = writeln!(out, "FAILED: {failure}");
    }
    out
}

/// Per fault kind: seconds without writes (p50, max), and rounds with violations and rounds
/// that did not settle.
pub fn figure(report: &ChaosReport) -> Figure {
    let groups = |value: &dyn Fn(&FaultSummary) -> Vec<Option<f64>>| {
        report
            .by_fault
            .iter()
            .map(|(kind, summary)| Group {
                label: kind.name().replace('_', " "),
                values: value(summary),
            })
            .collect::<Vec<_>>()
    };
    Figure {
        title: format!(
            "bench chaos: seed {}, {} rounds, {} violations",
            report.seed, report.rounds, report.violations
        ),
        panels: vec![
            BarPanel {
                title: "Seconds without writes, from the faults to the configuration settled again"
                    .into(),
                y_label: "seconds".into(),
                log_y: false,
                series: vec!["p50".into(), "max".into()],
                groups: groups(&|summary| {
                    vec![Some(summary.without_writes_p50_s), Some(summary.without_writes_max_s)]
                }),
                limits: vec![Limit {
                    label: format!("fast-start threshold ({} s)", report.threshold_s),
                    value: LimitValue::All(report.threshold_s),
                }],
            },
            BarPanel {
                title: "Rounds, rounds with violations and rounds that did not settle".into(),
                y_label: "count".into(),
                log_y: false,
                series: vec!["rounds".into(), "rounds with violations".into(), "unsettled".into()],
                groups: groups(&|summary| {
                    vec![
                        Some(summary.rounds as f64),
                        Some(summary.rounds_with_violations as f64),
                        Some(summary.unsettled as f64),
                    ]
                }),
                limits: Vec::new(),
            },
        ],
        lines: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_chaos::checker::Rule;

    fn round(
        number: u32,
        kinds: Vec<FaultKind>,
        silence: f64,
        violations: usize,
        unsettled: bool,
    ) -> RoundResult {
        RoundResult {
            number,
            epoch: 1,
            faults: kinds.iter().map(|kind| kind.name().to_string()).collect(),
            kinds,
            roles_at_start: String::new(),
            started_s: 0.0,
            settle_s: 1.0,
            without_writes_s: silence,
            acknowledged: 10,
            primary_after: None,
            violation_count: violations as u64,
            violations_by_rule: if violations > 0 {
                [("lost_write".to_string(), violations as u64)].into()
            } else {
                BTreeMap::new()
            },
            violations: (0..violations)
                .map(|index| Violation {
                    rule: Rule::LostWrite,
                    key: format!("k{index}"),
                    member: "east".into(),
                    acknowledged_us: 0,
                    detail: "lost".into(),
                })
                .collect(),
            unsettled: unsettled.then(|| "no open primary".into()),
            notes: Vec::new(),
        }
    }

    #[test]
    fn summaries_count_each_kind_of_a_round_and_take_p50_and_max() {
        let mut report = ChaosReport {
            seed: 9,
            round_results: vec![
                round(1, vec![FaultKind::Kill], 1.0, 0, false),
                round(2, vec![FaultKind::Kill, FaultKind::Partition], 3.0, 2, false),
                round(3, vec![FaultKind::Partition], 9.0, 0, true),
                round(4, vec![FaultKind::Kill], 2.0, 0, false),
            ],
            ..ChaosReport::default()
        };
        report.summarise();
        assert_eq!((report.rounds, report.violations, report.unsettled), (4, 2, 1));
        let kill = &report.by_fault[&FaultKind::Kill];
        assert_eq!((kill.rounds, kill.violations, kill.unsettled), (3, 2, 0));
        assert_eq!((kill.rounds_with_violations, report.rounds_with_violations), (1, 1));
        assert_eq!((kill.without_writes_p50_s, kill.without_writes_max_s), (2.0, 3.0));
        let partition = &report.by_fault[&FaultKind::Partition];
        assert_eq!((partition.rounds, partition.unsettled), (2, 1));
        assert_eq!(partition.without_writes_max_s, 3.0, "an unsettled round has no measure");
        assert_eq!(report.by_rule["lost_write"], 2);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["by_fault"]["kill"]["rounds"], 3);
        assert_eq!(json["violations"], 2);
        let text = render(&report);
        assert!(
            text.contains("VIOLATIONS after round 2") && text.contains("UNSETTLED after round 3"),
            "{text}"
        );
        assert!(figure(&report).to_svg().unwrap().contains("<svg"));
    }
}
