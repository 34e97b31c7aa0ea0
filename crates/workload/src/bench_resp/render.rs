//! `bench resp`'s table: every result, its rounds and threads, the targets and what they
//! need beside them to be read.

use super::{BenchRespReport, ClientCpu, RespResult, find, per_second};

/// What the targets need beside them to be read: the durable SET with the client sharing
/// the servers' CPUs (when the target gave it its own), and the floor of a SET at -c 1 on this
/// machine (a request's round trip, as a GET's p50 shows it, plus the fdatasync).
fn context(report: &BenchRespReport) -> Vec<String> {
    let mut lines = Vec::new();
    let durable = |client_cpu| {
        let ours = find(&report.results, "redoguard", "SET", 50, client_cpu)?;
        let redis = find(&report.results, "redis", "SET", 50, client_cpu)?;
        Some(ours.ops_per_s / redis.ops_per_s)
    };
    if report.client_cpus.is_some()
        && let Some(ratio) = durable(ClientCpu::Shared)
    {
        lines.push(format!(
            "redoguard / Redis durable SET ops/s at -c 50 with the client CPU shared: {ratio:.2}"
        ));
    }
    let judged = ClientCpu::judged(report.client_cpus.is_some());
    if let (Some(set), Some(get)) = (
        find(&report.results, "redoguard", "SET", 1, judged),
        find(&report.results, "redoguard", "GET", 1, judged),
    ) {
        let floor = get.p50_us + set.fdatasync_p50_us;
        lines.push(format!(
            "floor of a SET at -c 1: a request's round trip (GET -c 1 p50, {:.0} µs) + raw fdatasync \
             p50 ({:.0} µs) = {floor:.0} µs, {:.2} x fdatasync; redoguard's SET p50 is {:.2} x that",
            get.p50_us,
            set.fdatasync_p50_us,
            floor / set.fdatasync_p50_us,
            set.p50_us / floor
        ));
        if let Some(direct) = report.direct_p50_us {
            let floor = get.p50_us + direct;
            lines.push(format!(
                "with the log's direct writes (io_mode = \"auto\" here): the round trip + a raw \
                 direct 4 KiB write p50 ({direct:.0} µs) = {floor:.0} µs; redoguard's SET p50 is \
                 {:.2} x that",
                set.p50_us / floor
            ));
        }
    }
    lines
}

/// The runs of a result with several: each run's ops/s, with the checkpoints during it.
pub(super) fn runs(result: &RespResult) -> String {
    if result.runs_ops_per_s.len() < 2 {
        return String::new();
    }
    result
        .runs_ops_per_s
        .iter()
        .enumerate()
        .map(|(at, ops)| match result.runs_checkpoints.get(at) {
            Some(&checkpoints) if checkpoints > 0 => format!("{ops:.0} +{checkpoints} ckpt"),
            _ => format!("{ops:.0}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each result's CPU µs/op by thread of its server (threads under 0.05 left out); empty for
/// a report from before the breakdown.
fn by_thread(report: &BenchRespReport) -> String {
    let mut out = String::new();
    for result in &report.results {
        let Some(threads) = &result.cpu_us_per_op_by_thread else { continue };
        if out.is_empty() {
            out.push_str("  CPU µs/op by thread (/proc/PID/task/*/stat; redoguard-worke: the runtime's workers, serving the sessions; redo-lgwr-task: the hand-over log writer; db-ckpt: the checkpointer):\n");
        }
        let shown: Vec<String> = threads
            .iter()
            .filter(|(_, us)| **us >= 0.05)
            .map(|(name, us)| format!("{name} {us:.1}"))
            .collect();
        out.push_str(&format!(
            "    {} {} -c {} ({}): {}\n",
            result.server,
            result.test,
            result.clients,
            result.client_cpu,
            shown.join(", ")
        ));
    }
    out
}

/// The raw direct write beside the raw fdatasync, where it was measured.
pub(crate) fn direct_note(direct_p50_us: Option<f64>) -> String {
    direct_p50_us.map_or(String::new(), |direct| {
        format!(", direct (O_DIRECT|O_DSYNC, how the log writes here) p50 {direct:.0} µs")
    })
}

pub fn render(report: &BenchRespReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench resp on {}: raw 4 KiB fdatasync p50 {:.0} µs{}",
        report.dir,
        report.fdatasync_p50_us,
        direct_note(report.direct_p50_us)
    );
    if let Some(reason) = &report.redis_skipped {
        let _ = writeln!(out, "  Redis not measured: {reason}");
    }
    let _ = writeln!(
        out,
        "  {:<10} {:<5} {:>8} {:>10} {:>12} {:>9} {:>9} {:>14} {:>10}  runs (ops/s)",
        "server",
        "test",
        "clients",
        "client CPU",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "fdatasync p50",
        "CPU µs/op",
    );
    for result in &report.results {
        let _ = writeln!(
            out,
            "  {:<10} {:<5} {:>8} {:>10} {:>12.0} {:>9.0} {:>9.0} {:>14.0} {:>10}  {}",
            result.server,
            result.test,
            result.clients,
            result.client_cpu,
            result.ops_per_s,
            result.p50_us,
            result.p99_us,
            result.fdatasync_p50_us,
            result.cpu_us_per_op.map(|cpu| format!("{cpu:.1}")).unwrap_or_else(|| "-".into()),
            runs(result)
        );
    }
    if report.results.iter().any(|result| result.runs_checkpoints.len() > 1) {
        let _ = writeln!(
            out,
            "  runs: each run's ops/s; \"+N ckpt\": N of redoguard's checkpoints ran during it"
        );
    }
    for result in report.results.iter().filter(|result| !result.runs_per_second.is_empty()) {
        let seconds = per_second::steady_seconds(result);
        let mut rates: Vec<f64> = seconds.iter().map(|second| second.ops_per_s).collect();
        if rates.is_empty() {
            continue;
        }
        let middle = per_second::median(&mut rates.clone());
        let slowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let slow = rates.iter().filter(|rate| **rate < 0.8 * middle).count();
        let slow_with_checkpoint = seconds
            .iter()
            .filter(|second| second.ops_per_s < 0.8 * middle && second.checkpoints > 0)
            .count();
        rates.clear();
        let _ = writeln!(
            out,
            "  seconds of {} {} -c {} (client CPU {}): {} steady, median {middle:.0}/s, slowest {slowest:.0}/s ({:.2}), {slow} below 0.8 x median ({slow_with_checkpoint} of them with a checkpoint ending), {} with a checkpoint ending",
            result.server,
            result.test,
            result.clients,
            result.client_cpu,
            seconds.len(),
            slowest / middle,
            seconds.iter().filter(|second| second.checkpoints > 0).count(),
        );
    }
    out.push_str(&by_thread(report));
    if let (Some(client), Some(servers)) = (&report.client_cpus, &report.server_cpus) {
        let _ = writeln!(
            out,
            "  client CPU \"own\": redis-benchmark on CPU {client}, both servers on CPU {servers}; \
             \"shared\": all on any"
        );
    }
    let _ = writeln!(out, "targets:");
    for target in &report.targets {
        let _ = writeln!(
            out,
            "  {:<4} {:<75} {:>6.2} (target {})",
            if target.met { "met" } else { "MISS" },
            target.name,
            target.value,
            target.limit
        );
    }
    for line in context(report) {
        let _ = writeln!(out, "  info {line}");
    }
    out
}
