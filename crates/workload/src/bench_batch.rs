//! `redoguard bench batch`: the reference's batch scenario at reduced scale, over a linkemu
//! link at 100 Mbit/s. OLTP sessions (small SETs, as fast as they go) run throughout; a batch
//! session loads compressible values at a redo rate above what the link carries.
//!
//! - `async_*`: ASYNC transport during the batch, without and with compression (`all`): the
//!   transport lag over time, and the MB on the wire.
//! - `deferred_*`: transport deferred during the batch (`state = "defer"` through the
//!   primary's admin API, as `redoguard edit destination standby state=defer` does), then
//!   enabled again. The gap-resolution time runs from the enable to the standby holding
//!   everything the primary had written by then; OLTP throughput is measured during it and
//!   before the batch.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use linkemu::Side;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tools::bench::plot::{BarPanel, Event, Figure, Group, Line, LinePanel};

use crate::network::Network;
use crate::process::ServerProcess;

/// The link's rate: the reference's under-sized link.
pub const BATCH_LINK_BITS_PER_S: u64 = 100_000_000;
const OLTP_SESSIONS: usize = 4;
const BATCH_VALUE_BYTES: usize = 32 << 10;
const SAMPLE_INTERVAL: Duration = Duration::from_millis(500);
/// OLTP alone before the batch starts.
const WARMUP: Duration = Duration::from_secs(2);
/// Longest a gap resolution (or the drain after an ASYNC batch) may take.
const RESOLUTION_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone)]
pub struct BatchConfig {
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub rtt_ms: u32,
    /// How long the batch runs.
    pub batch: Duration,
    /// The batch's redo rate target, MB/s (the link carries 12.5).
    pub batch_mb_per_s: f64,
    /// The codec of the compressed cases: lz4 or zstd.
    pub compression: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchCase {
    pub name: String,
    pub compression: String,
    pub deferred: bool,
    /// Redo the primary generated during the case (the "redo size" statistic: records), MB.
    pub redo_mb: f64,
    /// Log bytes the primary shipped to this destination (whole redo units, padding
    /// included: small OLTP commits fill little of their unit), MB.
    pub mb_shipped: f64,
    /// What went on the wire, MB: the frames the primary handed to the destination's
    /// connections (`wire_bytes_sent`: without writes' zero tails, compressed).
    pub mb_on_wire: f64,
    /// (seconds since the batch started, the destination's transport lag in seconds).
    pub lag: Vec<(f64, f64)>,
    pub lag_max_s: f64,
    /// The lag when the batch ended (ASYNC cases).
    pub lag_at_batch_end_s: f64,
    /// Deferred cases: from the link's restore to the standby holding everything.
    pub gap_resolution_s: Option<f64>,
    pub oltp_ops_per_s_before: f64,
    pub oltp_ops_per_s_during_batch: f64,
    pub oltp_ops_per_s_during_resolution: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchReport {
    pub link_rate_bits_per_s: u64,
    pub rtt_ms: u32,
    pub batch_s: f64,
    pub batch_mb_per_s: f64,
    pub deferral: String,
    pub cases: Vec<BatchCase>,
    pub failures: Vec<String>,
    pub reference: String,
}

/// Protected mode off in a benchmark's server file: the benchmarks measure plain TCP between
/// namespaces of this host, which nothing else reaches.
pub(crate) const INSECURE: &str = "# Protected mode off: the benchmark measures plain TCP between namespaces of this host, which\n# nothing else reaches.\n[server]\ninsecure = true\n";

pub fn run(config: &BatchConfig, mut progress: impl FnMut(&str)) -> anyhow::Result<BatchReport> {
    if let Some(reason) = linkemu::unavailable_reason() {
        anyhow::bail!("bench batch needs linkemu: {reason}");
    }
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-batch-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("creating a directory in {}", config.dir.display()))?;
    progress("linkemu: link up, 100 Mbit/s");
    let link = linkemu::Link::up(linkemu::LinkConfig {
        rtt: Duration::from_millis(u64::from(config.rtt_ms)),
        rate_bits_per_s: Some(BATCH_LINK_BITS_PER_S),
        ..linkemu::LinkConfig::default()
    })
    .context("bringing the link up")?;
    let network = Network::Link(Box::new(link));
    let mut cases = Vec::new();
    let mut failures = Vec::new();
    for (deferred, compression) in [
        (false, "none".to_string()),
        (false, config.compression.clone()),
        (true, "none".to_string()),
        (true, config.compression.clone()),
    ] {
        crate::interrupt::check()?;
        let name = format!("{}_{compression}", if deferred { "deferred" } else { "async" });
        progress(&format!("{name}: running"));
        let dir = work.path().join(&name);
        match run_case(config, &network, &dir, &name, deferred, &compression) {
            Ok(case) => {
                progress(&format!(
                    "{name}: lag max {:.1} s, {:.1} MB redo, {:.1} MB on the wire{}",
                    case.lag_max_s,
                    case.redo_mb,
                    case.mb_on_wire,
                    case.gap_resolution_s
                        .map(|s| format!(", gap resolved in {s:.1} s"))
                        .unwrap_or_default()
                ));
                cases.push(case);
            }
            Err(error) => {
                progress(&format!("{name}: FAILED: {error:#}"));
                failures.push(format!("{name}: {error:#}"));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(BatchReport {
        link_rate_bits_per_s: BATCH_LINK_BITS_PER_S,
        rtt_ms: config.rtt_ms,
        batch_s: config.batch.as_secs_f64(),
        batch_mb_per_s: config.batch_mb_per_s,
        deferral: "state = \"defer\" through the primary's admin API for the batch's duration (redoguard edit destination standby state=defer), then \"enable\"".into(),
        cases,
        failures,
        reference: "100 Mbit/s link, batch load: compression more than halved the volume shipped and removed the transport lag; gap resolution after deferral took half the time with compression".into(),
    })
}

fn status(network: &Network, side: Side, admin: SocketAddr) -> anyhow::Result<admin::ServerStatus> {
    let body = network.run_in(side, move || {
        admin::http_get(&admin.to_string(), "/status", Duration::from_secs(10))
    })??;
    serde_json::from_str(&body).context("parsing a server's status")
}

fn start(
    config: &BatchConfig,
    network: &Network,
    dir: &Path,
    name: &str,
    side: Side,
    text: &str,
) -> anyhow::Result<ServerProcess> {
    std::fs::create_dir_all(dir)?;
    let config_path = dir.join(format!("{name}.toml"));
    std::fs::write(&config_path, text)?;
    let data = dir.join(name);
    std::fs::create_dir_all(&data)?;
    let (config_path, data) = (config_path.display().to_string(), data.display().to_string());
    ServerProcess::start_command(
        network.command(side, &config.binary),
        &["--config", &config_path, "--data-dir", &data],
        &dir.join(format!("{name}.log")),
    )
    .with_context(|| format!("starting the {name}"))
}

/// Counters the load threads share with the sampler.
#[derive(Default)]
struct Load {
    oltp_ops: AtomicU64,
    batch_on: AtomicBool,
    stop: AtomicBool,
}

/// OLTP sessions until `stop`; a batch session while `batch_on`, at `batch_mb_per_s`.
async fn drive(resp: SocketAddr, load: Arc<Load>, batch_mb_per_s: f64) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for session in 0..OLTP_SESSIONS {
        let load = load.clone();
        tasks.spawn(async move {
            let mut client = crate::client::Client::connect(resp).await?;
            let mut n = 0u64;
            while !load.stop.load(Ordering::Acquire) {
                let key = format!("oltp:{session}:{}", n % 10_000);
                client.command(&[b"SET", key.as_bytes(), &[b'o'; 100]]).await?;
                load.oltp_ops.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            anyhow::Ok(())
        });
    }
    let batch = load.clone();
    tasks.spawn(async move {
        let mut client = crate::client::Client::connect(resp).await?;
        let mut rng = StdRng::seed_from_u64(7);
        let words: Vec<String> = (0..512)
            .map(|_| {
                (0..rng.random_range(3..9)).map(|_| rng.random_range(b'a'..=b'z') as char).collect()
            })
            .collect();
        let mut sent = 0u64;
        let mut started: Option<Instant> = None;
        while !batch.stop.load(Ordering::Acquire) {
            if !batch.batch_on.load(Ordering::Acquire) {
                started = None;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let began = *started.get_or_insert_with(Instant::now);
            // Paced: at most batch_mb_per_s since the batch began.
            let allowed = began.elapsed().as_secs_f64() * batch_mb_per_s * 1e6;
            if sent as f64 > allowed {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            let mut value = Vec::with_capacity(BATCH_VALUE_BYTES);
            while value.len() < BATCH_VALUE_BYTES {
                value.extend_from_slice(words[rng.random_range(0..words.len())].as_bytes());
                value.push(b' ');
            }
            value.truncate(BATCH_VALUE_BYTES);
            let key = format!("batch:{}", sent / BATCH_VALUE_BYTES as u64);
            client.command(&[b"SET", key.as_bytes(), &value]).await?;
            sent += BATCH_VALUE_BYTES as u64;
        }
        anyhow::Ok(())
    });
    while let Some(result) = tasks.join_next().await {
        result??;
    }
    Ok(())
}

fn run_case(
    config: &BatchConfig,
    network: &Network,
    dir: &Path,
    name: &str,
    deferred: bool,
    compression: &str,
) -> anyhow::Result<BatchCase> {
    let listen = network.address(Side::B);
    let standby_text = format!(
        "# Written by `redoguard bench batch`.\n[redo]\nlog_file_size = \"32MiB\"\ngroups = 4\n\
         [replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"{listen}:0\"\n{INSECURE}"
    );
    let mut standby = start(config, network, dir, "standby", Side::B, &standby_text)?;
    let redo = standby.redo_addr.context("the standby names no redo port")?;
    let primary_text = format!(
        "# Written by `redoguard bench batch`.\n[redo]\nlog_file_size = \"32MiB\"\ngroups = 3\n\
         [replication]\nrole = \"primary\"\nprotection_mode = \"maximum_performance\"\n\
         [[replication.destinations]]\nname = \"standby\"\naddress = \"{redo}\"\n\
         transport = \"async\"\nnet_timeout = \"3s\"\nreopen = \"200ms\"\n\
         send_buffer = \"auto\"\nbandwidth = \"100mbit\"\ncompression = \"{compression}\"\n\
         compression_for = \"all\"\n"
    );
    let mut primary = match start(config, network, dir, "primary", Side::A, &primary_text) {
        Ok(primary) => primary,
        Err(error) => {
            let _ = standby.stop();
            return Err(error);
        }
    };
    let result = measure(config, network, &primary, name, deferred, compression);
    let stopped = primary.stop().context("stopping the primary");
    let standby_stopped = standby.stop().context("stopping the standby");
    let case = result?;
    stopped?;
    standby_stopped?;
    Ok(case)
}

fn measure(
    config: &BatchConfig,
    network: &Network,
    primary: &ServerProcess,
    name: &str,
    deferred: bool,
    compression: &str,
) -> anyhow::Result<BatchCase> {
    let admin = primary.admin_addr;
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(network, Side::A, admin)?
        .replication
        .destinations
        .first()
        .is_none_or(|destination| destination.phase != transport::Phase::Streaming)
    {
        anyhow::ensure!(Instant::now() < deadline, "the standby did not reach STREAMING");
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = status(network, Side::A, admin)?;
    let load = Arc::new(Load::default());
    let resp = primary.resp_addr;
    std::thread::scope(|scope| -> anyhow::Result<BatchCase> {
        let driver = {
            let load = load.clone();
            let rate = config.batch_mb_per_s;
            scope.spawn(move || {
                network.run_in(Side::A, move || -> anyhow::Result<()> {
                    let runtime =
                        tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                    runtime.block_on(drive(resp, load, rate))
                })?
            })
        };
        let outcome = (|| -> anyhow::Result<BatchCase> {
            std::thread::sleep(WARMUP);
            let ops_before = load.oltp_ops.load(Ordering::Relaxed) as f64 / WARMUP.as_secs_f64();
            if deferred {
                network.set_destination_state(admin, "standby", "defer")?;
            }
            let batch_started = Instant::now();
            let ops_at_batch = load.oltp_ops.load(Ordering::Relaxed);
            load.batch_on.store(true, Ordering::Release);
            let mut lag = Vec::new();
            let sample = |lag: &mut Vec<(f64, f64)>| -> anyhow::Result<admin::ServerStatus> {
                let now = status(network, Side::A, admin)?;
                let destination = now.replication.destinations.first().context("a destination")?;
                lag.push((batch_started.elapsed().as_secs_f64(), destination.transport_lag_s));
                Ok(now)
            };
            while batch_started.elapsed() < config.batch {
                crate::interrupt::check()?;
                sample(&mut lag)?;
                std::thread::sleep(SAMPLE_INTERVAL);
            }
            load.batch_on.store(false, Ordering::Release);
            let batch_took = batch_started.elapsed().as_secs_f64();
            let ops_during_batch =
                (load.oltp_ops.load(Ordering::Relaxed) - ops_at_batch) as f64 / batch_took;
            let lag_at_batch_end = lag.last().map_or(0.0, |&(_, lag)| lag);
            if deferred {
                network.set_destination_state(admin, "standby", "enable")?;
            }
            // Until the standby holds what the primary had written at this point.
            let target = status(network, Side::A, admin)?.database.redo.durable_addr;
            let restored = Instant::now();
            let ops_at_restore = load.oltp_ops.load(Ordering::Relaxed);
            loop {
                crate::interrupt::check()?;
                let now = sample(&mut lag)?;
                let destination = now.replication.destinations.first().context("a destination")?;
                if (destination.acknowledged.seq, destination.acknowledged.offset)
                    >= (target.seq, target.offset)
                {
                    break;
                }
                anyhow::ensure!(
                    restored.elapsed() < RESOLUTION_MAX,
                    "not caught up within {RESOLUTION_MAX:?}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            let resolution = restored.elapsed().as_secs_f64();
            let ops_during_resolution = (load.oltp_ops.load(Ordering::Relaxed) - ops_at_restore)
                as f64
                / resolution.max(1e-3);
            let after = status(network, Side::A, admin)?;
            let destination = after.replication.destinations.first().context("a destination")?;
            // Measured by the primary (frames handed to the connections), not estimated from
            // the compression counts: writes also travel without their zero tails.
            let wire = destination.wire_bytes_sent;
            let redo = after.metrics.stat("redo size") - before.metrics.stat("redo size");
            Ok(BatchCase {
                name: name.to_string(),
                compression: compression.to_string(),
                deferred,
                redo_mb: redo as f64 / 1e6,
                mb_shipped: destination.bytes_sent as f64 / 1e6,
                mb_on_wire: wire as f64 / 1e6,
                lag_max_s: lag.iter().map(|&(_, lag)| lag).fold(0.0, f64::max),
                lag,
                lag_at_batch_end_s: lag_at_batch_end,
                gap_resolution_s: deferred.then_some(resolution),
                oltp_ops_per_s_before: ops_before,
                oltp_ops_per_s_during_batch: ops_during_batch,
                oltp_ops_per_s_during_resolution: deferred.then_some(ops_during_resolution),
            })
        })();
        load.stop.store(true, Ordering::Release);
        let driven = driver.join().map_err(|_| anyhow::anyhow!("the load panicked"))?;
        let case = outcome?;
        driven.context("the load")?;
        Ok(case)
    })
}

pub fn render(report: &BatchReport) -> String {
    let mut text = format!(
        "bench batch: OLTP ({OLTP_SESSIONS} sessions) + a batch at {} MB/s for {:.0} s over linkemu at 100 Mbit/s, RTT {} ms\n\
         deferral: {}\n{:<18} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10} {:>9} {:>10} {:>10}\n",
        report.batch_mb_per_s,
        report.batch_s,
        report.rtt_ms,
        report.deferral,
        "case",
        "redo_MB",
        "sent_MB",
        "wire_MB",
        "lag_max",
        "lag_end_b",
        "gap_res_s",
        "oltp/s",
        "oltp/s_b",
        "oltp/s_res"
    );
    for case in &report.cases {
        text.push_str(&format!(
            "{:<18} {:>8.1} {:>8.1} {:>8.1} {:>9.1} {:>10.1} {:>10} {:>9.0} {:>10.0} {:>10}\n",
            case.name,
            case.redo_mb,
            case.mb_shipped,
            case.mb_on_wire,
            case.lag_max_s,
            case.lag_at_batch_end_s,
            case.gap_resolution_s.map_or("-".into(), |s| format!("{s:.1}")),
            case.oltp_ops_per_s_before,
            case.oltp_ops_per_s_during_batch,
            case.oltp_ops_per_s_during_resolution.map_or("-".into(), |ops| format!("{ops:.0}"))
        ));
    }
    for failure in &report.failures {
        text.push_str(&format!("FAILED {failure}\n"));
    }
    let find = |deferred: bool, compressed: bool| {
        report
            .cases
            .iter()
            .find(|case| case.deferred == deferred && (case.compression != "none") == compressed)
    };
    if let (Some(plain), Some(packed)) = (find(false, false), find(false, true)) {
        text.push_str(&format!(
            "target: with compression the lag stays bounded: lag at the batch's end {:.1} s without, {:.1} s with ({})\n",
            plain.lag_at_batch_end_s,
            packed.lag_at_batch_end_s,
            if packed.lag_at_batch_end_s < 2.0 && packed.lag_at_batch_end_s < plain.lag_at_batch_end_s { "met" } else { "missed" }
        ));
    }
    if let (Some(plain), Some(packed)) = (find(true, false), find(true, true))
        && let (Some(slow), Some(fast)) = (plain.gap_resolution_s, packed.gap_resolution_s)
    {
        text.push_str(&format!(
            "target: gap resolution >= 2 x faster with compression: {slow:.1} s / {fast:.1} s = {:.2} x ({})\n",
            slow / fast,
            if slow / fast >= 2.0 { "met" } else { "missed" }
        ));
    }
    text.push_str(&format!("reference: {}\n", report.reference));
    text
}

/// Transport lag over time: one line per case, the ASYNC cases and the deferred ones in panels
/// of their own (a deferred case's lag grows for the whole batch and would flatten the ASYNC
/// lines), the batch's end marked; then the bar panels of each case's samples.
pub fn figure(report: &BatchReport) -> Figure {
    let line_panel = |deferred: bool| {
        let series: Vec<Line> = report
            .cases
            .iter()
            .filter(|case| case.deferred == deferred)
            .map(|case| Line { name: case.name.clone(), points: case.lag.clone() })
            .collect();
        (!series.is_empty()).then(|| LinePanel {
            title: if deferred {
                "Transport lag over time, transport deferred during the batch, then enabled".into()
            } else {
                "Transport lag over time, ASYNC during the batch".into()
            },
            x_label: "seconds since the batch began".into(),
            y_label: "transport lag, s".into(),
            series,
            events: vec![Event {
                label: if deferred { "batch ends, transport enabled" } else { "batch ends" }.into(),
                x: report.batch_s,
            }],
        })
    };
    Figure {
        title: "Transport lag during a batch load at 100 Mbit/s".into(),
        lines: [false, true].into_iter().filter_map(line_panel).collect(),
        panels: report
            .cases
            .iter()
            .map(|case| BarPanel {
                title: format!(
                    "{}: lag (s) over time (s since the batch began){}",
                    case.name,
                    if case.deferred { "; transport deferred during the batch" } else { "" }
                ),
                y_label: "transport lag, s".into(),
                log_y: false,
                series: vec!["lag".into()],
                groups: case
                    .lag
                    .iter()
                    .step_by((case.lag.len() / 40).max(1))
                    .map(|&(at, lag)| Group { label: format!("{at:.0}"), values: vec![Some(lag)] })
                    .collect(),
                limits: Vec::new(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, deferred: bool, lag: Vec<(f64, f64)>) -> BatchCase {
        BatchCase {
            name: name.into(),
            compression: if name.ends_with("none") { "none" } else { "zstd" }.into(),
            deferred,
            redo_mb: 100.0,
            mb_shipped: 100.0,
            mb_on_wire: 50.0,
            lag_max_s: lag.iter().map(|&(_, lag)| lag).fold(0.0, f64::max),
            lag,
            lag_at_batch_end_s: 0.0,
            gap_resolution_s: deferred.then_some(3.0),
            oltp_ops_per_s_before: 1000.0,
            oltp_ops_per_s_during_batch: 900.0,
            oltp_ops_per_s_during_resolution: deferred.then_some(800.0),
        }
    }

    /// Lag over time as lines, one per case, ASYNC and deferred cases apart, the batch's end
    /// marked, above the bars each case had before.
    #[test]
    fn the_figure_plots_lag_over_time_one_line_per_case() {
        let report = BatchReport {
            link_rate_bits_per_s: BATCH_LINK_BITS_PER_S,
            rtt_ms: 10,
            batch_s: 4.0,
            batch_mb_per_s: 20.0,
            deferral: "state = defer".into(),
            cases: vec![
                case("async_none", false, vec![(0.0, 0.1), (2.0, 1.5), (4.0, 3.0), (5.0, 0.2)]),
                case("async_zstd", false, vec![(0.0, 0.1), (2.0, 0.2), (4.0, 0.1)]),
                case("deferred_none", true, vec![(0.0, 0.0), (4.0, 4.0), (9.0, 0.0)]),
                case("deferred_zstd", true, vec![(0.0, 0.0), (4.0, 4.0), (6.0, 0.0)]),
            ],
            failures: Vec::new(),
            reference: "reference".into(),
        };
        let figure = figure(&report);
        let names = |panel: &LinePanel| -> Vec<String> {
            panel.series.iter().map(|line| line.name.clone()).collect()
        };
        assert_eq!(figure.lines.len(), 2);
        assert_eq!(names(&figure.lines[0]), ["async_none", "async_zstd"]);
        assert_eq!(names(&figure.lines[1]), ["deferred_none", "deferred_zstd"]);
        assert_eq!(figure.lines[0].series[0].points, report.cases[0].lag);
        assert!(figure.lines.iter().all(|panel| panel.events[0].x == 4.0));
        assert_eq!(figure.panels.len(), 4, "the bars of each case stay");
        let svg = figure.to_svg().unwrap();
        assert!(svg.contains("Transport lag over time, ASYNC during the batch"), "{svg:.300}");
        assert!(svg.contains("deferred_zstd") && svg.contains("batch ends"));
        // Without deferred cases (a failed run), only the ASYNC panel.
        let mut async_only = report.clone();
        async_only.cases.retain(|case| !case.deferred);
        assert_eq!(figure_lines(&async_only), 1);
    }

    fn figure_lines(report: &BatchReport) -> usize {
        figure(report).lines.len()
    }
}
