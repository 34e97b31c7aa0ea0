//! The figures of the database benchmarks (`bench commit`, `resp`, `transport`, `external`),
//! drawn with the toolkit's plotting code (`tools::bench::plot`) from their reports, each
//! beside its JSON. Where a run measured a physical limit, it is drawn as a dashed line: the
//! raw fdatasync of the same file system, the round trip plus that fdatasync (the floor of a
//! commit a standby must acknowledge), the one-way delay (the floor of a transport lag).

use tools::bench::plot::{BarPanel, Figure, Group, Limit, LimitValue};

use crate::bench_commit::BenchCommitReport;
use crate::bench_external::ExternalReport;
use crate::bench_resp::BenchRespReport;
use crate::bench_transport::{Experiment, TransportCase, TransportReport};

/// A case name as a group label: one line per part.
fn label(name: &str) -> String {
    name.replace(", ", " · ")
}

fn rtt_label(rtt_ms: u32, clients: u32) -> String {
    format!("RTT {rtt_ms} ms · {clients} client{}", if clients == 1 { "" } else { "s" })
}

/// `bench commit`: commits/s and latency of each case against the raw fdatasync of its writes.
pub fn commit(report: &BenchCommitReport) -> Figure {
    let groups = |value: &dyn Fn(&crate::bench_commit::CommitCase) -> Vec<Option<f64>>| {
        report
            .cases
            .iter()
            .map(|case| Group { label: label(&case.name), values: value(case) })
            .collect::<Vec<_>>()
    };
    let per_case = |value: &dyn Fn(&crate::bench_commit::CommitCase) -> f64| {
        LimitValue::PerGroup(report.cases.iter().map(|case| Some(value(case))).collect())
    };
    Figure {
        title: format!("bench commit: group commit on {} ({})", report.dir, report.filesystem),
        panels: vec![
            BarPanel {
                title: "Commits per second".into(),
                y_label: "commits/s (log scale)".into(),
                log_y: true,
                series: vec!["commits/s".into()],
                groups: groups(&|case| vec![Some(case.commits_per_s)]),
                limits: vec![Limit {
                    label: "one raw fdatasync per commit (1 / fdatasync p50)".into(),
                    value: per_case(&|case| 1e6 / case.raw.fdatasync_p50_us.max(1e-3)),
                }],
            },
            BarPanel {
                title: "Commit latency".into(),
                y_label: "µs (log scale)".into(),
                log_y: true,
                series: vec!["p50".into(), "p99".into()],
                groups: groups(&|case| vec![Some(case.p50_us), Some(case.p99_us)]),
                limits: vec![Limit {
                    label: "raw fdatasync p50 of the same write size".into(),
                    value: per_case(&|case| case.raw.fdatasync_p50_us),
                }],
            },
        ],
        lines: Vec::new(),
    }
}

/// `bench resp`: each server's requests/s and latency under redis-benchmark.
pub fn resp(report: &BenchRespReport) -> Figure {
    let mut servers: Vec<String> = Vec::new();
    // (test, clients, where the client ran)
    let mut tests: Vec<(String, u32, String)> = Vec::new();
    for result in &report.results {
        if !servers.contains(&result.server) {
            servers.push(result.server.clone());
        }
        let test = (result.test.clone(), result.clients, result.client_cpu.clone());
        if !tests.contains(&test) {
            tests.push(test);
        }
    }
    let find = |server: &str, test: &(String, u32, String)| {
        report.results.iter().find(|result| {
            result.server == server
                && result.test == test.0
                && result.clients == test.1
                && result.client_cpu == test.2
        })
    };
    // `per_server` values for each server in each group (`value` gives that many).
    let groups = |value: &dyn Fn(&crate::bench_resp::RespResult) -> Vec<f64>, per_server: usize| {
        tests
            .iter()
            .map(|test| Group {
                // Where the client ran, when the report placed it.
                label: match &report.client_cpus {
                    Some(_) => format!("{} · -c {} · client CPU {}", test.0, test.1, test.2),
                    None => format!("{} · -c {}", test.0, test.1),
                },
                values: servers
                    .iter()
                    .flat_map(|server| match find(server, test) {
                        Some(result) => value(result).into_iter().map(Some).collect::<Vec<_>>(),
                        None => vec![None; per_server],
                    })
                    .collect(),
            })
            .collect::<Vec<_>>()
    };
    let fdatasync = Limit {
        label: format!("raw fdatasync p50 ({:.0} µs)", report.fdatasync_p50_us),
        value: LimitValue::All(report.fdatasync_p50_us),
    };
    Figure {
        title: format!("bench resp: redis-benchmark on {}", report.dir),
        panels: vec![
            BarPanel {
                title: "Requests per second".into(),
                y_label: "requests/s (log scale)".into(),
                log_y: true,
                series: servers.clone(),
                groups: groups(&|result| vec![result.ops_per_s], 1),
                limits: Vec::new(),
            },
            BarPanel {
                title: "Latency".into(),
                y_label: "µs (log scale)".into(),
                log_y: true,
                series: servers
                    .iter()
                    .flat_map(|server| [format!("{server} p50"), format!("{server} p99")])
                    .collect(),
                groups: groups(&|result| vec![result.p50_us, result.p99_us], 2),
                limits: vec![fdatasync],
            },
        ],
        // The durable SET at -c 50 second by second, where the targets are judged.
        lines: crate::bench_resp::per_second::panel(
            &report
                .results
                .iter()
                .filter(|result| !result.runs_per_second.is_empty())
                .filter(|result| report.client_cpus.is_none() || result.client_cpu == "own")
                .collect::<Vec<_>>(),
        )
        .into_iter()
        .collect(),
    }
}

/// `bench transport`: redoguard's commits by transport mode at each RTT and client count,
/// against the round trip plus fdatasync; the three systems' protected commits side by side;
/// the ASYNC transport lag at steady redo rates, against the one-way delay.
pub fn transport(report: &TransportReport) -> Figure {
    let commits: Vec<_> = report
        .cases
        .iter()
        .filter(|case| case.load == "closed_loop" && case.experiment == Experiment::Modes)
        .collect();
    let mut points: Vec<(u32, u32)> = Vec::new();
    for case in &commits {
        if !points.contains(&(case.rtt_set_ms, case.clients)) {
            points.push((case.rtt_set_ms, case.clients));
        }
    }
    let case = |system: &str, mode: &str, point: (u32, u32)| {
        commits.iter().find(|case| {
            case.system == system && case.mode == mode && (case.rtt_set_ms, case.clients) == point
        })
    };
    let floor = |rtt_set_ms: u32| {
        report.limits.iter().find(|limit| limit.rtt_set_ms == rtt_set_ms).map(|limit| {
            crate::bench_transport::protected_floor_us(
                limit.fdatasync_p50_us,
                limit.standby_fdatasync_p50_us,
                limit.rtt_ms,
            )
        })
    };
    let floor_limit = Limit {
        label: "round trip + raw fdatasync p50 (a protected commit's floor)".into(),
        value: LimitValue::PerGroup(points.iter().map(|point| floor(point.0)).collect()),
    };
    let modes = [
        ("no_standby", "no standby"),
        ("async", "ASYNC"),
        ("sync_noaffirm", "SYNC NOAFFIRM"),
        ("sync_affirm", "SYNC AFFIRM"),
    ];
    let by_mode = |value: fn(&crate::bench_transport::TransportCase) -> f64| {
        points
            .iter()
            .map(|point| Group {
                label: rtt_label(point.0, point.1),
                values: modes
                    .iter()
                    .map(|(mode, _)| case("redoguard", mode, *point).map(|case| value(case)))
                    .collect(),
            })
            .collect::<Vec<_>>()
    };
    // A commit that waits for its standby, in each system.
    let protected = [
        ("redoguard", "sync_affirm", "redoguard SYNC AFFIRM"),
        ("postgresql", "sync_commit_on", "PostgreSQL synchronous_commit = on"),
        ("redis", "wait_1", "Redis WAIT 1"),
    ];
    let protected: Vec<_> = protected
        .into_iter()
        .filter(|(system, mode, _)| points.iter().any(|point| case(system, mode, *point).is_some()))
        .collect();
    let mut panels = Vec::new();
    // Runs of the other experiments alone have no mode cases.
    panels.extend(
        (!points.is_empty())
            .then_some([
                BarPanel {
                    title: "redoguard: commits per second by transport".into(),
                    y_label: "commits/s (log scale)".into(),
                    log_y: true,
                    series: modes.iter().map(|(_, name)| name.to_string()).collect(),
                    groups: by_mode(|case| case.commits_per_s),
                    limits: Vec::new(),
                },
                BarPanel {
                    title: "redoguard: commit latency p50 by transport".into(),
                    y_label: "µs (log scale)".into(),
                    log_y: true,
                    series: modes.iter().map(|(_, name)| name.to_string()).collect(),
                    groups: by_mode(|case| case.p50_us),
                    limits: vec![floor_limit.clone()],
                },
            ])
            .into_iter()
            .flatten(),
    );
    if protected.len() > 1 {
        panels.push(BarPanel {
            title: "A commit protected by a standby: latency p50, three systems".into(),
            y_label: "µs (log scale)".into(),
            log_y: true,
            series: protected.iter().map(|(_, _, name)| name.to_string()).collect(),
            groups: points
                .iter()
                .map(|point| Group {
                    label: rtt_label(point.0, point.1),
                    values: protected
                        .iter()
                        .map(|(system, mode, _)| case(system, mode, *point).map(|case| case.p50_us))
                        .collect(),
                })
                .collect(),
            limits: vec![floor_limit],
        });
    }
    let lags: Vec<_> = report
        .cases
        .iter()
        .filter(|case| {
            case.transport_lag_p99_ms.is_some()
                && matches!(case.experiment, Experiment::Modes | Experiment::Lag)
        })
        .collect();
    if !lags.is_empty() {
        panels.push(BarPanel {
            title: "ASYNC transport lag at a steady redo rate".into(),
            y_label: "ms (log scale)".into(),
            log_y: true,
            series: vec!["p50".into(), "p99".into(), "max".into()],
            groups: lags
                .iter()
                .map(|case| Group {
                    label: format!(
                        "{} MB/s · RTT {} ms",
                        case.redo_mb_per_s_target.unwrap_or_default(),
                        case.rtt_set_ms
                    ),
                    values: vec![
                        case.transport_lag_p50_ms,
                        case.transport_lag_p99_ms,
                        case.transport_lag_max_ms,
                    ],
                })
                .collect(),
            limits: vec![Limit {
                label: "one-way delay (half the measured round trip)".into(),
                value: LimitValue::PerGroup(
                    lags.iter()
                        .map(|case| (case.rtt_ms > 0.1).then_some(case.rtt_ms / 2.0))
                        .collect(),
                ),
            }],
        });
    }
    panels.extend(quorum_panels(report));
    panels.extend(sync_rate_panels(report));
    panels.extend(commit_mode_panels(report));
    panels.extend(async_cpu_panels(report));
    panels.extend(far_sync_panels(report));
    panels.extend(fan_out_panels(report));
    Figure {
        title: format!(
            "bench transport: redo transport end to end on {} ({})",
            report.dir, report.filesystem
        ),
        panels,
        lines: Vec::new(),
    }
}

fn experiment_cases(report: &TransportReport, experiment: Experiment) -> Vec<&TransportCase> {
    report.cases.iter().filter(|case| case.experiment == experiment).collect()
}

/// `quorum`: commits/s and p50 of one and two SYNC standbys (and PostgreSQL's), at each RTT
/// and client count, against the round trip plus fdatasync.
fn quorum_panels(report: &TransportReport) -> Vec<BarPanel> {
    let cases = experiment_cases(report, Experiment::Quorum);
    if cases.is_empty() {
        return Vec::new();
    }
    let series = [
        ("redoguard", "sync_affirm", "redoguard SYNC AFFIRM, 1 standby"),
        ("redoguard", "sync_affirm_2_all", "redoguard 2 standbys, all"),
        ("redoguard", "sync_affirm_2_any_1", "redoguard 2 standbys, any 1"),
        ("postgresql", "sync_commit_on_first_2", "PostgreSQL FIRST 2 (s1, s2)"),
        ("postgresql", "sync_commit_on_any_1", "PostgreSQL ANY 1 (s1, s2)"),
    ];
    let series: Vec<_> = series
        .into_iter()
        .filter(|(system, mode, _)| {
            cases.iter().any(|case| case.system == *system && case.mode == *mode)
        })
        .collect();
    let mut points: Vec<(u32, u32)> = Vec::new();
    for case in &cases {
        if !points.contains(&(case.rtt_set_ms, case.clients)) {
            points.push((case.rtt_set_ms, case.clients));
        }
    }
    let groups = |value: fn(&TransportCase) -> f64| {
        points
            .iter()
            .map(|point| Group {
                label: rtt_label(point.0, point.1),
                values: series
                    .iter()
                    .map(|(system, mode, _)| {
                        cases
                            .iter()
                            .find(|case| {
                                case.system == *system
                                    && case.mode == *mode
                                    && (case.rtt_set_ms, case.clients) == *point
                            })
                            .map(|case| value(case))
                    })
                    .collect(),
            })
            .collect::<Vec<_>>()
    };
    let floor = Limit {
        label: "round trip + raw fdatasync p50 (a protected commit's floor)".into(),
        value: LimitValue::PerGroup(
            points
                .iter()
                .map(|point| {
                    cases
                        .iter()
                        .find(|case| (case.rtt_set_ms, case.clients) == *point)
                        .map(|case| case.protected_floor_us())
                })
                .collect(),
        ),
    };
    let names: Vec<String> = series.iter().map(|(_, _, name)| name.to_string()).collect();
    vec![
        BarPanel {
            title: "Two SYNC standbys: commits per second".into(),
            y_label: "commits/s (log scale)".into(),
            log_y: true,
            series: names.clone(),
            groups: groups(|case| case.commits_per_s),
            limits: Vec::new(),
        },
        BarPanel {
            title: "Two SYNC standbys: commit latency p50".into(),
            y_label: "µs (log scale)".into(),
            log_y: true,
            series: names,
            groups: groups(|case| case.p50_us),
            limits: vec![floor],
        },
    ]
}

/// `sync_rate`: the impact of SYNC AFFIRM at a steady redo rate against no standby, by RTT.
fn sync_rate_panels(report: &TransportReport) -> Vec<BarPanel> {
    let cases: Vec<_> = experiment_cases(report, Experiment::SyncRate)
        .into_iter()
        .filter(|case| case.compared_with.is_some())
        .collect();
    if cases.is_empty() {
        return Vec::new();
    }
    let rate = cases[0].redo_mb_per_s_target.unwrap_or_default();
    let group = |case: &&TransportCase, value: Option<f64>| Group {
        label: format!("RTT {} ms", case.rtt_set_ms),
        values: vec![value],
    };
    vec![
        BarPanel {
            title: format!(
                "SYNC AFFIRM at a steady {rate} MB/s of redo: commit-rate impact against no standby (drawn from 0; a gain shows as no bar)"
            ),
            y_label: "% fewer commits/s".into(),
            log_y: false,
            series: vec!["commit-rate impact".into()],
            groups: cases
                .iter()
                .map(|case| group(case, case.commits_change_pct.map(|pct| -pct)))
                .collect(),
            limits: vec![Limit {
                label: "the reference: under 5 % at 10 ms".into(),
                value: LimitValue::All(5.0),
            }],
        },
        BarPanel {
            title: format!(
                "SYNC AFFIRM at a steady {rate} MB/s of redo: response-time (commit p50) impact against no standby"
            ),
            y_label: "% longer (log scale)".into(),
            log_y: true,
            series: vec!["commit p50 impact".into()],
            groups: cases.iter().map(|case| group(case, case.p50_change_pct)).collect(),
            limits: vec![Limit {
                label: "the reference: under 5 % at 10 ms".into(),
                value: LimitValue::All(5.0),
            }],
        },
    ]
}

/// `commit_mode`: commits/s and p50/p99 of each COMMITMODE under SYNC AFFIRM.
fn commit_mode_panels(report: &TransportReport) -> Vec<BarPanel> {
    let cases = experiment_cases(report, Experiment::CommitMode);
    if cases.is_empty() {
        return Vec::new();
    }
    let label = |case: &&TransportCase| {
        format!(
            "{} · {}",
            case.commit_mode.as_deref().unwrap_or("-"),
            rtt_label(case.rtt_set_ms, case.clients)
        )
    };
    vec![
        BarPanel {
            title: "COMMITMODE under SYNC AFFIRM: commits per second".into(),
            y_label: "commits/s (log scale)".into(),
            log_y: true,
            series: vec!["commits/s".into()],
            groups: cases
                .iter()
                .map(|case| Group { label: label(case), values: vec![Some(case.commits_per_s)] })
                .collect(),
            limits: Vec::new(),
        },
        BarPanel {
            title: "COMMITMODE under SYNC AFFIRM: commit latency".into(),
            y_label: "µs (log scale)".into(),
            log_y: true,
            series: vec!["p50".into(), "p99".into()],
            groups: cases
                .iter()
                .map(|case| Group {
                    label: label(case),
                    values: vec![Some(case.p50_us), Some(case.p99_us)],
                })
                .collect(),
            limits: vec![Limit {
                label: "round trip + raw fdatasync p50 (a WAIT commit's floor)".into(),
                value: LimitValue::PerGroup(
                    cases.iter().map(|case| Some(case.protected_floor_us())).collect(),
                ),
            }],
        },
    ]
}

/// `async_cpu`: the primary's CPU per commit with and without an ASYNC standby: each mode's
/// sum over its rounds, and each round beside it (the spread the alternation evens out).
fn async_cpu_panels(report: &TransportReport) -> Vec<BarPanel> {
    let cases = experiment_cases(report, Experiment::AsyncCpu);
    if cases.is_empty() {
        return Vec::new();
    }
    let alone = cases.iter().find(|case| case.mode == "no_standby");
    let rounds =
        cases.iter().map(|case| case.cpu_rounds.as_ref().map_or(0, Vec::len)).max().unwrap_or(0);
    let mut series = vec!["sum of the rounds".to_string()];
    series.extend((1..=rounds).map(|round| format!("round {round} of the mode")));
    vec![BarPanel {
        title: "The primary's CPU time per commit (user + system), steady load".into(),
        y_label: "µs per commit".into(),
        log_y: false,
        series,
        groups: cases
            .iter()
            .map(|case| {
                let mut values = vec![case.cpu_us_per_commit];
                let of_case = case.cpu_rounds.as_deref().unwrap_or_default();
                values.extend(
                    (0..rounds)
                        .map(|index| of_case.get(index).map(|round| round.cpu_us_per_commit)),
                );
                Group {
                    label: format!(
                        "{} · RTT {} ms · {:.0} commits/s · {} commits per log write",
                        label(&case.mode),
                        case.rtt_set_ms,
                        case.commits_per_s,
                        case.commits_per_log_write
                            .map_or_else(|| "-".into(), |per| format!("{per:.2}"))
                    ),
                    values,
                }
            })
            .collect(),
        limits: alone
            .and_then(|case| case.cpu_us_per_commit)
            .map(|us| Limit {
                label: "1.05 x the primary alone's (the target)".into(),
                value: LimitValue::All(us * 1.05),
            })
            .into_iter()
            .collect(),
    }]
}

/// `far_sync`: commits/s and latency through a far sync and direct, against ASYNC direct's
/// commits/s (the 0.9 target) and clients / RTT (SYNC direct's bound), and the two RTTs.
fn far_sync_panels(report: &TransportReport) -> Vec<BarPanel> {
    let cases = experiment_cases(report, Experiment::FarSync);
    if cases.is_empty() {
        return Vec::new();
    }
    let label = |case: &&TransportCase| {
        format!(
            "{} · {} clients · far RTT {:.1} ms{}",
            case.mode,
            case.clients,
            case.rtt_ms,
            case.near_rtt_ms.map_or_else(String::new, |near| format!(" · near RTT {near:.1} ms"))
        )
    };
    let async_direct = cases.iter().find(|case| case.mode == "async_direct");
    let mut rate_limits: Vec<Limit> = async_direct
        .map(|case| Limit {
            label: "0.9 x ASYNC direct's commits/s (the far sync's target)".into(),
            value: LimitValue::All(case.commits_per_s * 0.9),
        })
        .into_iter()
        .collect();
    rate_limits.push(Limit {
        label: "clients / far RTT (SYNC direct's bound)".into(),
        value: LimitValue::PerGroup(
            cases
                .iter()
                .map(|case| {
                    (case.mode == "sync_affirm_direct" && case.rtt_ms > 0.0)
                        .then(|| f64::from(case.clients) * 1000.0 / case.rtt_ms)
                })
                .collect(),
        ),
    });
    vec![
        BarPanel {
            title: "Far sync: commits per second, SYNC AFFIRM through a far sync near the primary and direct to the far terminal".into(),
            y_label: "commits/s (log scale)".into(),
            log_y: true,
            series: vec!["commits/s".into()],
            groups: cases
                .iter()
                .map(|case| Group { label: label(case), values: vec![Some(case.commits_per_s)] })
                .collect(),
            limits: rate_limits,
        },
        BarPanel {
            title: "Far sync: commit latency".into(),
            y_label: "µs (log scale)".into(),
            log_y: true,
            series: vec!["p50".into(), "p99".into()],
            groups: cases
                .iter()
                .map(|case| Group {
                    label: label(case),
                    values: vec![Some(case.p50_us), Some(case.p99_us)],
                })
                .collect(),
            limits: vec![Limit {
                label: "the RTT a SYNC commit waits for (near through the far sync, far direct)"
                    .into(),
                value: LimitValue::PerGroup(
                    cases
                        .iter()
                        .map(|case| match case.mode.as_str() {
                            "sync_affirm_far_sync" => case.near_rtt_ms.map(|rtt| rtt * 1000.0),
                            "sync_affirm_direct" => Some(case.rtt_ms * 1000.0),
                            _ => None,
                        })
                        .collect(),
                ),
            }],
        },
    ]
}

/// `fan_out`: the primary's CPU and bytes sent per commit with four standbys, direct or
/// through a cascade, against one standby's (1.1 x it: the cascade's target).
fn fan_out_panels(report: &TransportReport) -> Vec<BarPanel> {
    let cases = experiment_cases(report, Experiment::FanOut);
    if cases.is_empty() {
        return Vec::new();
    }
    let one = cases.iter().find(|case| case.mode == "async_one_standby");
    let label = |case: &&TransportCase| {
        format!(
            "{} · the primary ships to {} · {:.0} commits/s · {} commits per log write",
            case.mode,
            case.standbys.unwrap_or_default(),
            case.commits_per_s,
            case.commits_per_log_write.map_or_else(|| "-".into(), |per| format!("{per:.2}"))
        )
    };
    let target = |value: Option<f64>| -> Vec<Limit> {
        value
            .map(|value| Limit {
                label: "1.1 x one standby's (the cascade's target)".into(),
                value: LimitValue::All(value * 1.1),
            })
            .into_iter()
            .collect()
    };
    vec![
        BarPanel {
            title: "Fan-out: the primary's CPU time per commit (user + system), steady load".into(),
            y_label: "µs per commit".into(),
            log_y: false,
            series: vec!["CPU µs per commit".into()],
            groups: cases
                .iter()
                .map(|case| Group { label: label(case), values: vec![case.cpu_us_per_commit] })
                .collect(),
            limits: target(one.and_then(|case| case.cpu_us_per_commit)),
        },
        BarPanel {
            title: "Fan-out: bytes the primary sent its destinations per commit".into(),
            y_label: "bytes per commit".into(),
            log_y: false,
            series: vec!["on the wire (frames)".into(), "redo (as in the log files)".into()],
            groups: cases
                .iter()
                .map(|case| Group {
                    label: label(case),
                    values: vec![case.wire_bytes_per_commit, case.redo_bytes_sent_per_commit],
                })
                .collect(),
            limits: target(one.and_then(|case| case.wire_bytes_per_commit)),
        },
    ]
}

/// `bench external`: PostgreSQL and Redis with a standby, each mode at each RTT and client
/// count, against the round trip plus fdatasync.
pub fn external(report: &ExternalReport) -> Figure {
    let mut points: Vec<(u32, u32)> = Vec::new();
    let mut series: Vec<(String, String)> = Vec::new();
    for case in &report.cases {
        if !points.contains(&(case.rtt_set_ms, case.clients)) {
            points.push((case.rtt_set_ms, case.clients));
        }
        if !series.contains(&(case.system.clone(), case.mode.clone())) {
            series.push((case.system.clone(), case.mode.clone()));
        }
    }
    let groups = |value: fn(&crate::bench_external::ExternalCase) -> f64| {
        points
            .iter()
            .map(|point| Group {
                label: rtt_label(point.0, point.1),
                values: series
                    .iter()
                    .map(|(system, mode)| {
                        report
                            .cases
                            .iter()
                            .find(|case| {
                                &case.system == system
                                    && &case.mode == mode
                                    && (case.rtt_set_ms, case.clients) == *point
                            })
                            .map(value)
                    })
                    .collect(),
            })
            .collect::<Vec<_>>()
    };
    let floor = points
        .iter()
        .map(|point| {
            report
                .cases
                .iter()
                .find(|case| case.rtt_set_ms == point.0)
                .map(|case| case.rtt_ms * 1000.0 + case.fdatasync_p50_us)
        })
        .collect();
    let names: Vec<String> =
        series.iter().map(|(system, mode)| format!("{system} {mode}")).collect();
    Figure {
        title: "bench external: PostgreSQL and Redis with a standby".into(),
        panels: vec![
            BarPanel {
                title: "Commits per second".into(),
                y_label: "commits/s (log scale)".into(),
                log_y: true,
                series: names.clone(),
                groups: groups(|case| case.commits_per_s),
                limits: Vec::new(),
            },
            BarPanel {
                title: "Commit latency p50".into(),
                y_label: "µs (log scale)".into(),
                log_y: true,
                series: names,
                groups: groups(|case| case.p50_us),
                limits: vec![Limit {
                    label: "round trip + raw fdatasync p50".into(),
                    value: LimitValue::PerGroup(floor),
                }],
            },
        ],
        lines: Vec::new(),
    }
}

/// `bench failover`: seconds without writes (p50 and max over the trials) per case, redoguard
/// beside Redis Sentinel, with the fast-start threshold drawn (the observer waits 1.2 × it
/// after a network cut; kill -9 is detected without waiting for it).
pub fn failover(report: &crate::bench_failover::FailoverReport) -> Figure {
    let mut cases: Vec<String> = Vec::new();
    let mut systems: Vec<String> = Vec::new();
    for row in &report.results {
        if !cases.contains(&row.case) {
            cases.push(row.case.clone());
        }
        if !systems.contains(&row.system) {
            systems.push(row.system.clone());
        }
    }
    let groups = |value: &dyn Fn(&crate::bench_failover::FailoverResult) -> f64| {
        cases
            .iter()
            .map(|case| Group {
                label: label(&case.replace('_', " ")),
                values: systems
                    .iter()
                    .map(|system| {
                        report
                            .results
                            .iter()
                            .find(|row| row.case == *case && row.system == *system)
                            .map(value)
                    })
                    .collect(),
            })
            .collect::<Vec<_>>()
    };
    let threshold = Limit {
        label: format!("fast-start threshold ({} s)", report.threshold_s),
        value: LimitValue::All(report.threshold_s),
    };
    Figure {
        title: format!("bench failover: {} trial(s) per case", report.trials),
        panels: vec![
            BarPanel {
                title: "Seconds without writes (or the command's time), median".into(),
                y_label: "seconds".into(),
                log_y: false,
                series: systems.clone(),
                groups: groups(&|row| row.seconds_p50),
                limits: vec![threshold.clone()],
            },
            BarPanel {
                title: "Worst trial".into(),
                y_label: "seconds".into(),
                log_y: false,
                series: systems.clone(),
                groups: groups(&|row| row.seconds_max),
                limits: vec![threshold],
            },
        ],
        lines: Vec::new(),
    }
}

#[cfg(test)]
mod tests;
