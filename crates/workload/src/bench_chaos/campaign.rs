//! The campaign: a mesh for the whole run, then epochs — fresh processes and data, clients
//! writing all along — of rounds: the round's faults, the heal, the configuration settled
//! again, the history so far checked against the primary. An epoch ends after
//! `rounds_per_epoch` rounds, or early when the configuration does not settle (the rest of its
//! rounds go on in the next epoch).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use resp::Frame;

use super::checker::{self, FinalState, Rule, Verdict};
use super::clients::{Clients, Targets};
use super::cluster::{self, Cluster, ClusterSettings, NAME, OBSERVERS};
use super::faults::{self, RoundPlan};
use super::history::{self, History, Request};
use super::report::{ChaosReport, RoundResult, VIOLATIONS_KEPT_MAX};
use super::settle::{Settled, settle};
use super::{ChaosConfig, Plant, nemesis};
use crate::bench_failover::writers;

/// The SYNC standby's `net_timeout`: short, so that a cut or paused standby is let go (with
/// the observer's grant) within the round.
const NET_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a new epoch's configuration may take to start and settle.
const START_LIMIT: Duration = Duration::from_secs(120);
/// Acknowledged writes the clients must have before the first round.
const WARM_WRITES: usize = 20;
/// Violations a round's progress lines show.
const VIOLATIONS_PRINTED_MAX: usize = 5;
/// Keys per `MGET` when reading the final state.
const READ_BATCH_MAX: usize = 500;

/// Runs the campaign (the configuration is valid).
pub(super) fn run(
    config: &ChaosConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<ChaosReport> {
    if let Some(reason) = linkemu::unavailable_reason() {
        anyhow::bail!(
            "bench chaos needs linkemu's namespaces, which cannot be made here: {reason}"
        );
    }
    let began = Instant::now();
    progress(&format!("seed {} (replay: {})", config.seed, config.replay()));
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("cannot create {}", config.dir.display()))?;
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-chaos-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("cannot create a directory in {}", config.dir.display()))?;
    let layout = config.layout;
    let sites = cluster::sites(layout);
    progress(&format!(
        "linkemu: a mesh of {sites} sites ({}); layout {}",
        layout.site_names(&OBSERVERS).join(", "),
        layout.name()
    ));
    let mesh =
        linkemu::Mesh::up(sites, linkemu::LinkConfig { rtt: config.rtt, ..Default::default() })
            .context("bringing the mesh up")?;
    // This thread reaches every site from the clients' one, which is never cut.
    let inside = linkemu::namespace::enter(mesh.namespace(cluster::site_clients(layout)))
        .context("entering the clients' site")?;
    let mut report = ChaosReport {
        seed: config.seed,
        rounds_asked: config.rounds,
        round_seconds: config.round.as_secs_f64(),
        threshold_s: config.threshold.as_secs_f64(),
        layout: config.layout,
        faults: config.faults.clone(),
        plant: config.plant.map(|plant| plant.name().to_string()),
        replay: config.replay(),
        ..ChaosReport::default()
    };
    let phase_ms = config.round.as_millis() as u64;
    let mut plans: VecDeque<RoundPlan> =
        faults::plan(config.seed, config.rounds, &config.faults, phase_ms, layout.roles()).into();
    let campaign = Campaign { config, mesh: &mesh, work: work.path(), began };
    while !plans.is_empty() {
        report.epochs += 1;
        let take = plans.len().min(config.rounds_per_epoch as usize);
        let mut epoch_plans: VecDeque<RoundPlan> = plans.drain(..take).collect();
        if let Err(error) =
            campaign.epoch(report.epochs, &mut epoch_plans, &mut report, &mut progress)
        {
            // What ran so far is still reported (an interrupt too).
            let failure = format!("epoch {}: {error:#}", report.epochs);
            progress(&format!("FAILED: {failure}"));
            report.failures.push(failure);
            break;
        }
        // Rounds an unsettled epoch did not run go first in the next one.
        while let Some(plan) = epoch_plans.pop_back() {
            plans.push_front(plan);
        }
    }
    report.summarise();
    report.elapsed_s = began.elapsed().as_secs_f64();
    drop(inside);
    drop(mesh);
    drop(work);
    Ok(report)
}

struct Campaign<'a> {
    config: &'a ChaosConfig,
    mesh: &'a linkemu::Mesh,
    work: &'a std::path::Path,
    began: Instant,
}

impl Campaign<'_> {
    /// One epoch: its rounds are taken from the front of `plans` as they run.
    fn epoch(
        &self,
        number: u32,
        plans: &mut VecDeque<RoundPlan>,
        report: &mut ChaosReport,
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        let layout = self.config.layout;
        let processes: Vec<&str> = layout.member_names().chain(OBSERVERS).collect();
        progress(&format!("epoch {number}: starting {}", processes.join(", ")));
        let settings = ClusterSettings {
            binary: self.config.binary.clone(),
            layout,
            threshold: self.config.threshold,
            net_timeout: NET_TIMEOUT,
        };
        let mut cluster = Cluster::start(self.mesh, settings, self.work, number)?;
        let mut notes = Vec::new();
        let mut settled = settle(&mut cluster, START_LIMIT, &mut notes)
            .map_err(|error| error.context(logs(&cluster)))
            .context("the new configuration did not settle")?;
        let history = Arc::new(History::new(self.began));
        let targets = Targets {
            sentinels: cluster.observers.iter().map(|observer| observer.sentinel).collect(),
            master: NAME.into(),
            // Applications write to the databases: a far sync has none.
            members: layout
                .members()
                .iter()
                .filter(|member| !member.far_sync)
                .map(|member| (member.name.to_string(), cluster.resp_addr(member.name)))
                .collect(),
            prefix: format!("e{number}"),
        };
        let clients = Clients::start(
            targets.clone(),
            history.clone(),
            self.mesh.namespace(cluster.site_clients()).to_string(),
        )?;
        let warm_until = Instant::now() + Duration::from_secs(30);
        while history.acknowledged_within(0, u64::MAX).len() < WARM_WRITES {
            crate::interrupt::check()?;
            anyhow::ensure!(
                Instant::now() < warm_until,
                "the clients got no write acknowledged within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut seen: BTreeSet<(Rule, String, u64)> = BTreeSet::new();
        let mut last: Option<Verdict> = None;
        let mut ended_unsettled = false;
        while let Some(plan) = plans.pop_front() {
            crate::interrupt::check()?;
            progress(&format!("{plan} [epoch {number}]"));
            let result = self.round(
                &mut cluster,
                &plan,
                &mut settled,
                &history,
                &targets,
                &mut seen,
                number,
                &mut last,
            )?;
            let mut result = result;
            for (earlier, count) in attribute(&mut report.round_results, &mut result, number) {
                progress(&format!(
                    "round {}: {count} violation(s) found now were acknowledged in round {earlier}",
                    plan.number
                ));
            }
            let line = match &result.unsettled {
                Some(reason) => format!("round {}: NOT SETTLED: {reason}", plan.number),
                None => format!(
                    "round {}: settled on {} in {:.1} s; {:.2} s without writes; {} violation(s)",
                    plan.number,
                    result.primary_after.as_deref().unwrap_or("?"),
                    result.settle_s,
                    result.without_writes_s,
                    result.violation_count
                ),
            };
            progress(&line);
            for note in &result.notes {
                progress(&format!("round {}:   {note}", plan.number));
            }
            for violation in result.violations.iter().take(VIOLATIONS_PRINTED_MAX) {
                progress(&format!(
                    "round {}: VIOLATION {} {}: {}",
                    plan.number,
                    violation.rule.name(),
                    violation.key,
                    violation.detail
                ));
            }
            if result.violation_count > VIOLATIONS_PRINTED_MAX as u64 {
                progress(&format!(
                    "round {}: … and {} more violation(s) ({:?})",
                    plan.number,
                    result.violation_count - VIOLATIONS_PRINTED_MAX as u64,
                    result.violations_by_rule
                ));
            }
            let unsettled = result.unsettled.is_some();
            if let Some(keep) = &self.config.keep_logs
                && (unsettled || result.violation_count > 0)
            {
                match keep_logs(&cluster, keep, plan.number) {
                    Ok(to) => {
                        progress(&format!("round {}: logs kept in {}", plan.number, to.display()))
                    }
                    Err(error) => progress(&format!(
                        "round {}: keeping the logs failed: {error:#}",
                        plan.number
                    )),
                }
            }
            report.round_results.push(result);
            if unsettled {
                ended_unsettled = true;
                progress(&format!(
                    "epoch {number} ends: the configuration did not settle\n{}",
                    logs(&cluster)
                ));
                break;
            }
        }
        clients.stop()?;
        // What the last check judged is the epoch's record; what ended after it was not checked.
        let operations = &mut report.operations;
        let checked = match &last {
            Some(verdict) => {
                operations.acknowledged += verdict.acknowledged;
                operations.failed += verdict.failed;
                operations.indeterminate += verdict.indeterminate;
                operations.failed_but_present += verdict.failed_but_present;
                operations.nowait_lost += verdict.nowait_lost;
                verdict.acknowledged + verdict.failed + verdict.indeterminate
            }
            None => 0,
        };
        if ended_unsettled {
            operations.unchecked += (history.len() as u64).saturating_sub(checked);
        }
        Ok(())
    }

    /// One round: faults, heal, settle, check.
    #[allow(clippy::too_many_arguments)]
    fn round(
        &self,
        cluster: &mut Cluster<'_>,
        plan: &RoundPlan,
        settled: &mut Settled,
        history: &History,
        targets: &Targets,
        seen: &mut BTreeSet<(Rule, String, u64)>,
        epoch: u32,
        last: &mut Option<Verdict>,
    ) -> anyhow::Result<RoundResult> {
        let names = nemesis::names(settled);
        let roles_at_start = format!(
            "primary {}, sync standby {}, async standby {}, active observer {}, standby observer {}{}",
            settled.primary,
            settled.sync_standby,
            settled.async_standby,
            settled.active_observer,
            settled.standby_observer,
            settled.far_sync.map_or(String::new(), |far_sync| format!(", far sync {far_sync}"))
        );
        let actions = nemesis::timeline(plan, &names);
        let phase_started = Instant::now();
        let started_us = history.micros_at(phase_started);
        let mut commands = Vec::new();
        let mut notes = nemesis::run(cluster, &actions, phase_started, &mut commands)?;
        if let Some(rest) =
            (phase_started + self.config.round).checked_duration_since(Instant::now())
        {
            std::thread::sleep(rest);
        }
        nemesis::heal(cluster, commands, &mut notes);
        let healed = Instant::now();
        let mut result = RoundResult {
            number: plan.number,
            epoch,
            faults: plan.faults.iter().map(ToString::to_string).collect(),
            kinds: plan.kinds(),
            roles_at_start,
            started_s: phase_started.duration_since(self.began).as_secs_f64(),
            settle_s: 0.0,
            without_writes_s: 0.0,
            acknowledged: 0,
            primary_after: None,
            violation_count: 0,
            violations_by_rule: BTreeMap::new(),
            violations: Vec::new(),
            unsettled: None,
            notes: Vec::new(),
        };
        match settle(cluster, self.config.settle_limit, &mut notes) {
            Ok(now) => *settled = now,
            Err(error) => {
                // A liveness failure. As a DBA would, every member that does not answer is
                // killed and started again; if the configuration then settles, what the clients
                // saw is still checked (the epoch ends after this round all the same).
                result.unsettled = Some(format!("{error:#}"));
                let restarted = restart_silent(cluster);
                match settle(cluster, self.config.settle_limit, &mut notes) {
                    Ok(now) => {
                        notes.push(format!("settled after restarting {restarted:?}"));
                        *settled = now;
                    }
                    Err(error) => {
                        notes.push(format!(
                            "not settled either after restarting {restarted:?}: {error:#}"
                        ));
                        result.notes = notes;
                        return Ok(result);
                    }
                }
            }
        }
        result.settle_s = settled.at.duration_since(healed).as_secs_f64();
        result.primary_after = Some(settled.primary.to_string());
        let settled_us = history.micros_at(settled.at);
        let acknowledged = history.acknowledged_within(started_us, settled_us);
        result.acknowledged = acknowledged.len() as u64;
        result.without_writes_s = history::longest_silence_s(&acknowledged, started_us, settled_us);
        if let Some(plant) = self.config.plant {
            notes.push(plant_fault(cluster, settled.primary, history, targets, plant)?);
        }
        let checked_before = history.now_us();
        let operations = history.ended_before(checked_before);
        let state = read_state(cluster, settled.primary, &operations)
            .with_context(|| format!("reading the history's keys on {}", settled.primary))?;
        let verdict = checker::check(&operations, &state);
        for violation in &verdict.violations {
            if seen.insert(violation.identity()) {
                result.violation_count += 1;
                let rule = violation.rule.name().to_string();
                *result.violations_by_rule.entry(rule).or_default() += 1;
                // All of them for now: `attribute` may move some to an earlier round.
                result.violations.push(violation.clone());
            }
        }
        *last = Some(verdict);
        result.notes = notes;
        Ok(result)
    }
}

/// Moves each of `result`'s violations whose offending acknowledgement came before `result`'s
/// round began to the round of the same epoch it came in (a check finds some only after a
/// later round: a counter goes back when the new primary next answers), then keeps the first
/// [`VIOLATIONS_KEPT_MAX`] in full; returns how many went to which round.
fn attribute(
    earlier: &mut [RoundResult],
    result: &mut RoundResult,
    epoch: u32,
) -> BTreeMap<u32, u64> {
    let began_us = |round: &RoundResult| (round.started_s * 1e6) as u64;
    let start = began_us(result);
    let (mut kept, mut moved) = (Vec::new(), BTreeMap::new());
    for violation in std::mem::take(&mut result.violations) {
        let home = earlier
            .iter_mut()
            .rev()
            .take_while(|round| round.epoch == epoch)
            .find(|round| began_us(round) <= violation.acknowledged_us);
        match home.filter(|_| violation.acknowledged_us < start) {
            Some(round) => {
                round.violation_count += 1;
                *round.violations_by_rule.entry(violation.rule.name().to_string()).or_default() +=
                    1;
                if round.violations.len() < VIOLATIONS_KEPT_MAX {
                    round.violations.push(violation.clone());
                }
                *moved.entry(round.number).or_default() += 1;
                if let Some(count) = result.violations_by_rule.get_mut(violation.rule.name()) {
                    *count -= 1;
                }
            }
            None => kept.push(violation),
        }
    }
    result.violations_by_rule.retain(|_, count| *count > 0);
    result.violation_count -= moved.values().sum::<u64>();
    kept.truncate(VIOLATIONS_KEPT_MAX);
    result.violations = kept;
    moved
}

/// Kills and starts again every member whose admin API does not answer; their names.
fn restart_silent(cluster: &mut Cluster<'_>) -> Vec<&'static str> {
    let silent: Vec<&'static str> =
        cluster.layout().member_names().filter(|name| cluster.status(name).is_err()).collect();
    for name in &silent {
        cluster.kill(name);
        // A start that fails now is tried again while settling.
        let _ = cluster.start_process(name);
    }
    silent
}

/// What the primary holds of every key and counter the history wrote.
fn read_state(
    cluster: &Cluster<'_>,
    primary: &str,
    operations: &[history::Operation],
) -> anyhow::Result<FinalState> {
    let addr = cluster.resp_addr(primary);
    let (keys, counters) = checker::keys_to_read(operations);
    let mut state = FinalState { primary: primary.to_string(), ..FinalState::default() };
    for chunk in keys.chunks(READ_BATCH_MAX) {
        for (key, value) in chunk.iter().zip(mget(addr, chunk)?) {
            state.values.insert(key.clone(), value);
        }
    }
    for (counter, value) in counters.iter().zip(mget(addr, &counters)?) {
        let parsed = value
            .as_deref()
            .map(str::parse::<i64>)
            .transpose()
            .with_context(|| format!("counter {counter} holds {value:?}"))?;
        state.counters.insert(counter.clone(), parsed.unwrap_or(0));
    }
    Ok(state)
}

fn mget(addr: std::net::SocketAddr, keys: &[String]) -> anyhow::Result<Vec<Option<String>>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(|key| key.as_bytes()));
    let reply = writers::ask(addr, &args, Duration::from_secs(10))?;
    let Frame::Array(values) = reply else { anyhow::bail!("MGET on {addr} answered {reply:?}") };
    anyhow::ensure!(
        values.len() == keys.len(),
        "MGET on {addr}: {} values for {} keys",
        values.len(),
        keys.len()
    );
    Ok(values
        .into_iter()
        .map(|value| match value {
            Frame::Bulk(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            _ => None,
        })
        .collect())
}

/// The planted fault: done on the primary behind the clients' backs, in the harness only.
fn plant_fault(
    cluster: &Cluster<'_>,
    primary: &str,
    history: &History,
    targets: &Targets,
    plant: Plant,
) -> anyhow::Result<String> {
    let addr = cluster.resp_addr(primary);
    let (args, what): (Vec<Vec<u8>>, String) = match plant {
        Plant::LostWrite => {
            let newest = history
                .ended_before(u64::MAX)
                .into_iter()
                // A durable write (a NOWAIT one may be lost, and its loss is no violation).
                .filter(|operation| {
                    operation.acknowledged()
                        && matches!(operation.request, Request::Set { nowait: false, .. })
                })
                .max_by_key(|operation| operation.completed_us)
                .context("no acknowledged write to delete")?;
            let key = newest.request.key().to_string();
            (
                vec![b"DEL".to_vec(), key.clone().into_bytes()],
                format!("deleted acknowledged key {key}"),
            )
        }
        Plant::CounterRollback => {
            let counter = targets.counter(0);
            (
                vec![b"SET".to_vec(), counter.clone().into_bytes(), b"0".to_vec()],
                format!("set counter {counter} back to 0"),
            )
        }
    };
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let reply = writers::ask(addr, &args, Duration::from_secs(10))?;
    anyhow::ensure!(!matches!(reply, Frame::Error(_)), "the planted fault was refused: {reply:?}");
    Ok(format!("PLANTED on {primary}: {what}"))
}

/// Copies every process's log to `<keep>/round-<number>/`; returns that directory.
fn keep_logs(
    cluster: &Cluster<'_>,
    keep: &std::path::Path,
    round: u32,
) -> anyhow::Result<std::path::PathBuf> {
    let to = keep.join(format!("round-{round}"));
    std::fs::create_dir_all(&to).with_context(|| format!("cannot create {}", to.display()))?;
    for name in cluster.process_names() {
        let from = cluster.log_path(name);
        std::fs::copy(&from, to.join(format!("{name}.log")))
            .with_context(|| format!("copying {}", from.display()))?;
    }
    Ok(to)
}

/// The end of every process's log.
fn logs(cluster: &Cluster<'_>) -> String {
    cluster
        .process_names()
        .into_iter()
        .map(|name| format!("--- {name}:\n{}\n", cluster.log_tail(name, 12)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_chaos::checker::Violation;

    fn round(number: u32, epoch: u32, started_s: f64) -> RoundResult {
        RoundResult {
            number,
            epoch,
            faults: Vec::new(),
            kinds: Vec::new(),
            roles_at_start: String::new(),
            started_s,
            settle_s: 0.0,
            without_writes_s: 0.0,
            acknowledged: 0,
            primary_after: None,
            violation_count: 0,
            violations_by_rule: BTreeMap::new(),
            violations: Vec::new(),
            unsettled: None,
            notes: Vec::new(),
        }
    }

    fn violation(rule: Rule, at_s: f64) -> Violation {
        Violation {
            rule,
            key: "k".into(),
            member: "east".into(),
            acknowledged_us: (at_s * 1e6) as u64,
            detail: String::new(),
        }
    }

    #[test]
    fn a_violation_goes_to_the_round_of_its_acknowledgement_in_the_same_epoch() {
        let mut earlier = vec![round(1, 1, 5.0), round(2, 2, 10.0), round(3, 2, 20.0)];
        let mut result = round(4, 2, 30.0);
        result.violations = vec![
            violation(Rule::CounterWentBack, 25.0),
            violation(Rule::LostWrite, 31.0),
            violation(Rule::LostWrite, 12.0),
            // Before the epoch's first round: stays where it was found.
            violation(Rule::LostWrite, 6.0),
        ];
        result.violation_count = 4;
        result.violations_by_rule =
            [("counter_went_back".to_string(), 1), ("lost_write".to_string(), 3)].into();
        let moved = attribute(&mut earlier, &mut result, 2);
        assert_eq!(moved, [(2, 1), (3, 1)].into());
        assert_eq!(result.violation_count, 2);
        assert_eq!(result.violations_by_rule, [("lost_write".to_string(), 2)].into());
        assert_eq!(result.violations.len(), 2);
        assert_eq!((earlier[1].violation_count, earlier[2].violation_count), (1, 1));
        assert_eq!(earlier[2].violations_by_rule["counter_went_back"], 1);
        assert_eq!(earlier[0].violation_count, 0, "another epoch");
    }
}
