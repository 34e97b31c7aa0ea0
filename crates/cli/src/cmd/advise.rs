//! `redoguard advise`: sizing from bandwidth, RTT and peak redo rate; with `--from-status`,
//! the online logs' size and group count from the redo a member has seen.

use std::time::Duration;

use anyhow::Context;
use tools::advise::{self, AdviseArgs, logs};

pub fn run(args: AdviseArgs) -> anyhow::Result<()> {
    let Some(source) = &args.from_status else {
        let input = args.input(None)?;
        let advice = advise::with_current_kernel_values(advise::advise(&input));
        println!("{}", advice.text());
        if let Some(path) = &args.json {
            write_json(path, &advice)?;
        }
        return Ok(());
    };
    anyhow::ensure!(
        (logs::SWITCH_INTERVAL_MIN..=logs::SWITCH_INTERVAL_MAX).contains(&args.switch_interval),
        "--switch-interval: {:?} is outside 1s..=24h",
        args.switch_interval
    );
    let (status, history) = read_status(source)?;
    let observed = logs::observed(source, &status, history.as_deref())?;
    let rate = observed.sizing_rate(args.switch_interval).with_context(|| {
        format!("{source}: no redo generated or archived yet to size the logs by: ask again after a workload has run")
    })?;
    let log_advice = logs::size_logs(&logs::LogSizingInput {
        peak_bytes_per_s: rate.bytes_per_s,
        mean_bytes_per_s: Some(observed.mean_log_bytes_per_s()),
        switch_interval: args.switch_interval,
        archive_bytes_per_s: observed.archive_bytes_per_s,
        checkpoint_s: observed.checkpoint_s,
        current: Some((observed.log_file_size, observed.groups)),
    });
    print!("{}", observed.text());
    println!();
    println!("{}", log_advice.text(&rate));
    // The link's advice too, for the observed peak (of records: what travels), if the link is
    // known.
    let link = if args.has_link() {
        let records_per_s = rate.bytes_per_s / observed.log_bytes_per_redo_byte();
        let input = args.input(Some(records_per_s))?;
        let advice = advise::with_current_kernel_values(advise::advise(&input));
        println!();
        println!("{}", advice.text());
        Some(advice)
    } else {
        None
    };
    if let Some(path) = &args.json {
        write_json(
            path,
            &serde_json::json!({ "observed": observed, "sized_for": rate, "logs": log_advice, "link": link }),
        )?;
    }
    Ok(())
}

fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(value)?;
    std::fs::write(path, json + "\n")
        .with_context(|| format!("write the JSON advice to {}", path.display()))
}

/// The JSON of a member's `/status`, and of its `/history` when asked over HTTP: from a file
/// if `source` names one, else from the admin API at `source` (`http://HOST:PORT[/status]`,
/// `https://…` with --ca, or `HOST:PORT`).
fn read_status(source: &str) -> anyhow::Result<(String, Option<String>)> {
    let path = std::path::Path::new(source);
    if path.is_file() {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {source}"))?;
        return Ok((text, None));
    }
    let rest = source
        .strip_prefix("http://")
        .or_else(|| source.strip_prefix("https://"))
        .unwrap_or(source);
    let (addr, wanted) = rest.split_once('/').unwrap_or((rest, ""));
    anyhow::ensure!(
        addr.contains(':') && ["", "status", "status/"].contains(&wanted),
        "--from-status: '{source}' is neither a file nor a member's admin address (http://HOST:PORT/status)"
    );
    let timeout = Duration::from_secs(10);
    let status = admin::http_get(addr, "/status", timeout)
        .with_context(|| format!("reading {addr}'s /status"))?;
    let history = admin::http_get(addr, "/history", timeout)
        .with_context(|| format!("reading {addr}'s /history"))?;
    Ok((status, Some(history)))
}
