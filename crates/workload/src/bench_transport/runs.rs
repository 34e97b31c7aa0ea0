//! The redoguard runs: a fresh setup per mode, and on it the closed-loop cases (each client
//! commits again once acknowledged) or the steady-rate ones (a fixed redo rate, the transport
//! lag sampled meanwhile).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use linkemu::Side;
use resp::Frame;

use super::limits::raw_fdatasync;
use super::setup::{Load, Mode, Setup};
use super::{PathLimits, TransportCase, TransportConfig, TransportReport};
use crate::bench_external::{self, latency_histogram};
use crate::client::Client;
use crate::network::Network;

/// Connections of a steady-rate case.
const STEADY_CONNECTIONS: u32 = 8;
/// Commits a second of a steady-rate case, over all its connections.
const STEADY_COMMITS_PER_S: f64 = 200.0;
/// Keys each steady-rate connection cycles through (keeps the data small).
const STEADY_KEYS: u64 = 16;
/// How long the raw fdatasync is measured just before and just after each case (half the
/// case's duration if that is shorter).
const RAW_CASE_DURATION: Duration = Duration::from_secs(1);
/// How often the primary's transport lag is sampled.
pub(super) const LAG_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// Histogram bound of transport lag samples, in microseconds (1 h).
const LAG_US_MAX: u64 = 3_600_000_000;

/// What one RTT's cases share.
pub(super) struct Bench<'a> {
    pub(super) config: &'a TransportConfig,
    pub(super) network: &'a Network,
    pub(super) limits: &'a PathLimits,
    pub(super) work: &'a Path,
}

/// What a case changed in the primary's counters.
pub(super) struct Deltas {
    redo_bytes: u64,
    /// The primary's own log writes ("log file parallel write"): count and total time.
    log_writes: u64,
    log_write_us: u64,
    redo_writes: u64,
    user_commits: u64,
    remote_waits: u64,
    remote_wait_us: u64,
}

pub(super) fn deltas(before: &server::ServerStatus, after: &server::ServerStatus) -> Deltas {
    let stat = |name: &str| after.metrics.stat(name).saturating_sub(before.metrics.stat(name));
    let wait = |status: &server::ServerStatus| {
        status.metrics.wait("SYNC remote write").map_or((0, 0), |wait| (wait.count, wait.total_us))
    };
    let (count_before, us_before) = wait(before);
    let (count_after, us_after) = wait(after);
    let writes = |status: &server::ServerStatus| {
        status
            .metrics
            .wait("log file parallel write")
            .map_or((0, 0), |wait| (wait.count, wait.total_us))
    };
    let (writes_before, write_us_before) = writes(before);
    let (writes_after, write_us_after) = writes(after);
    Deltas {
        redo_bytes: stat("redo size"),
        log_writes: writes_after.saturating_sub(writes_before),
        log_write_us: write_us_after.saturating_sub(write_us_before),
        redo_writes: stat("redo writes"),
        user_commits: stat("user commits"),
        remote_waits: count_after.saturating_sub(count_before),
        remote_wait_us: us_after.saturating_sub(us_before),
    }
}

impl Bench<'_> {
    pub(super) fn rtt(&self) -> u32 {
        self.limits.rtt_set_ms
    }

    /// The raw fdatasync p50 now, in µs. Each case measures it just before and just after
    /// and keeps the lower: a disk made slower for a while by other work on the machine is
    /// compared with itself (as `bench commit` does), and a reading spoiled by that work can
    /// only make a latency target stricter.
    pub(super) fn raw_p50_us(&self) -> anyhow::Result<f64> {
        let duration = RAW_CASE_DURATION.min(self.config.duration / 2);
        Ok(raw_fdatasync(self.work, 1, duration)?.lat_p50_us)
    }
}

impl Bench<'_> {
    /// A fresh setup of `mode`, and its cases: closed-loop ones, or steady-rate ones.
    pub(super) fn setup_cases(
        &self,
        mode: Mode,
        load: Load,
        report: &mut TransportReport,
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        progress(&format!("redoguard {} at RTT {} ms: starting", mode.name(), self.rtt()));
        let setup = self.start(mode, load)?;
        let client_counts: &[u32] =
            if load == Load::ClosedLoop { &self.config.clients } else { &[] };
        for &clients in client_counts {
            crate::interrupt::check()?;
            progress(&format!(
                "redoguard {}, RTT {} ms (measured {:.3}), {clients} clients",
                mode.name(),
                self.rtt(),
                self.limits.rtt_ms
            ));
            let case = self.closed_loop(&setup, mode, clients);
            match case {
                Ok((case, problems)) => {
                    report.failures.extend(problems.into_iter().map(|problem| {
                        format!(
                            "redoguard {} at RTT {} ms, {clients} clients: {problem}",
                            mode.name(),
                            self.rtt()
                        )
                    }));
                    report.cases.push(case);
                }
                Err(error) => {
                    crate::interrupt::check()?;
                    report.failures.push(format!(
                        "redoguard {} at RTT {} ms, {clients} clients: {error:#}",
                        mode.name(),
                        self.rtt()
                    ));
                }
            }
        }
        if load == Load::SteadyRate {
            for &rate in &self.config.lag_rates_mb_per_s {
                crate::interrupt::check()?;
                progress(&format!(
                    "redoguard async, RTT {} ms (measured {:.3}), steady {rate} MB/s of redo",
                    self.rtt(),
                    self.limits.rtt_ms
                ));
                match self.steady(&setup, rate) {
                    Ok((case, problems)) => {
                        report.failures.extend(problems.into_iter().map(|problem| {
                            format!(
                                "redoguard async at RTT {} ms, {rate} MB/s: {problem}",
                                self.rtt()
                            )
                        }));
                        report.cases.push(case);
                    }
                    Err(error) => {
                        crate::interrupt::check()?;
                        report.failures.push(format!(
                            "redoguard async at RTT {} ms, {rate} MB/s: {error:#}",
                            self.rtt()
                        ));
                    }
                }
            }
        }
        setup.stop()
    }

    /// Checks that the destination stayed as `mode` wants it through a case; returns what
    /// went wrong.
    pub(super) fn check_destination(
        mode: Mode,
        before: &server::ServerStatus,
        after: &server::ServerStatus,
        deltas: &Deltas,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let Some(wanted) = mode.phase() else { return problems };
        let (Some(first), Some(last)) =
            (before.replication.destinations.first(), after.replication.destinations.first())
        else {
            problems.push("the primary reports no destination".into());
            return problems;
        };
        if last.phase != wanted || last.failures != first.failures {
            problems.push(format!(
                "the destination left {wanted:?} during the case: now {:?}, last error {:?}",
                last.phase, last.last_error
            ));
        }
        let synchronous = matches!(mode, Mode::SyncAffirm | Mode::SyncNoAffirm);
        if synchronous && deltas.remote_waits == 0 {
            problems.push("no log write waited for the standby (SYNC remote write)".into());
        }
        if last.bytes_sent <= first.bytes_sent {
            problems.push("no redo was sent to the standby".into());
        }
        problems
    }

    pub(super) fn closed_loop(
        &self,
        setup: &Setup<'_>,
        mode: Mode,
        clients: u32,
    ) -> anyhow::Result<(TransportCase, Vec<String>)> {
        let fdatasync_before = self.raw_p50_us()?;
        let before = setup.primary_status()?;
        let measured = bench_external::set_load(
            self.network,
            setup.primary.resp_addr.port(),
            clients,
            self.config.duration,
            false,
        )?;
        crate::interrupt::check()?;
        let after = setup.primary_status()?;
        let fdatasync_p50_us = fdatasync_before.min(self.raw_p50_us()?);
        let deltas = deltas(&before, &after);
        let problems = Bench::check_destination(mode, &before, &after, &deltas);
        let mut notes = format!(
            "{clients} connections from the primary's side, each looping SET key:<random of 10^6> <100 bytes>, latency from the write to the reply; {}; {} commits, {:.1} commits per log write",
            mode.describe(),
            measured.commits,
            deltas.user_commits as f64 / deltas.redo_writes.max(1) as f64
        );
        if deltas.remote_waits > 0 {
            notes.push_str(&format!(
                "; SYNC remote write (after the local write) {} waits, avg {:.0} µs",
                deltas.remote_waits,
                deltas.remote_wait_us as f64 / deltas.remote_waits as f64
            ));
        }
        if !problems.is_empty() {
            notes.push_str(&format!("; NOT VALID: {}", problems.join("; ")));
        }
        let case = TransportCase {
            system: "redoguard".into(),
            mode: mode.name().into(),
            load: "closed_loop".into(),
            rtt_ms: self.limits.rtt_ms,
            rtt_set_ms: self.rtt(),
            clients,
            commits_per_s: measured.commits_per_s,
            p50_us: quantile(&measured.latency_us, 0.5),
            p99_us: quantile(&measured.latency_us, 0.99),
            fdatasync_p50_us,
            log_write_avg_us: Some(deltas.log_write_us as f64 / deltas.log_writes.max(1) as f64),
            redo_mb_per_s: None,
            redo_mb_per_s_target: None,
            transport_lag_p50_ms: None,
            transport_lag_p99_ms: None,
            transport_lag_max_ms: None,
            transport_lag_samples: None,
            target: None,
            notes,
        };
        Ok((case, problems))
    }

    pub(super) fn steady(
        &self,
        setup: &Setup<'_>,
        rate_mb_per_s: f64,
    ) -> anyhow::Result<(TransportCase, Vec<String>)> {
        let fdatasync_before = self.raw_p50_us()?;
        let before = setup.primary_status()?;
        let started = Instant::now();
        let steady = steady_load(
            self.network,
            setup.primary.resp_addr,
            setup.primary.admin_addr,
            rate_mb_per_s,
            self.config.duration,
        )?;
        let seconds = started.elapsed().as_secs_f64();
        crate::interrupt::check()?;
        let after = setup.primary_status()?;
        let fdatasync_p50_us = fdatasync_before.min(self.raw_p50_us()?);
        let deltas = deltas(&before, &after);
        let mut problems = Bench::check_destination(Mode::Async, &before, &after, &deltas);
        problems.extend(steady.problems.iter().cloned());
        let redo_mb_per_s = deltas.redo_bytes as f64 / 1e6 / seconds;
        let lag_ms = |quantile: f64| {
            if steady.lag_us.is_empty() {
                0.0
            } else {
                steady.lag_us.value_at_quantile(quantile) as f64 / 1000.0
            }
        };
        let mut notes = format!(
            "{} connections from the primary's side committing {} SETs a second in all, on a fixed schedule, of {}-byte values; {}; transport lag = the primary's destination status (age of the oldest redo not yet durable on the standby) read every {} ms; {} commits, {:.1} commits per log write",
            STEADY_CONNECTIONS,
            STEADY_COMMITS_PER_S,
            steady.value_bytes,
            Mode::Async.describe(),
            LAG_SAMPLE_INTERVAL.as_millis(),
            steady.commits,
            deltas.user_commits as f64 / deltas.redo_writes.max(1) as f64
        );
        if redo_mb_per_s < 0.9 * rate_mb_per_s {
            notes.push_str(&format!(
                "; the primary did not sustain the rate asked ({redo_mb_per_s:.2} of {rate_mb_per_s} MB/s)"
            ));
        }
        if !problems.is_empty() {
            notes.push_str(&format!("; NOT VALID: {}", problems.join("; ")));
        }
        let case = TransportCase {
            system: "redoguard".into(),
            mode: Mode::Async.name().into(),
            load: "steady_rate".into(),
            rtt_ms: self.limits.rtt_ms,
            rtt_set_ms: self.rtt(),
            clients: STEADY_CONNECTIONS,
            commits_per_s: steady.commits as f64 / steady.seconds,
            p50_us: quantile(&steady.latency_us, 0.5),
            p99_us: quantile(&steady.latency_us, 0.99),
            fdatasync_p50_us,
            log_write_avg_us: Some(deltas.log_write_us as f64 / deltas.log_writes.max(1) as f64),
            redo_mb_per_s: Some(redo_mb_per_s),
            redo_mb_per_s_target: Some(rate_mb_per_s),
            transport_lag_p50_ms: Some(lag_ms(0.5)),
            transport_lag_p99_ms: Some(lag_ms(0.99)),
            transport_lag_max_ms: Some(steady.lag_us.max() as f64 / 1000.0),
            transport_lag_samples: Some(steady.lag_us.len()),
            target: None,
            notes,
        };
        Ok((case, problems))
    }
}

pub(super) fn quantile(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    if histogram.is_empty() { 0.0 } else { histogram.value_at_quantile(quantile) as f64 }
}

/// The outcome of a steady-rate load.
pub(super) struct Steady {
    commits: u64,
    seconds: f64,
    value_bytes: usize,
    latency_us: Histogram<u64>,
    lag_us: Histogram<u64>,
    /// Samples that could not be read, or saw the destination out of STREAMING.
    problems: Vec<String>,
}

/// Commits `rate_mb_per_s` of values to the primary at `resp` on a fixed schedule for
/// `duration`, from side A, while a thread there samples the transport lag from `admin`.
pub(super) fn steady_load(
    network: &Network,
    resp: SocketAddr,
    admin: SocketAddr,
    rate_mb_per_s: f64,
    duration: Duration,
) -> anyhow::Result<Steady> {
    let value_bytes = ((rate_mb_per_s * 1e6 / STEADY_COMMITS_PER_S) as usize).max(1);
    network.run_in(Side::A, move || -> anyhow::Result<Steady> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let mut connections = Vec::with_capacity(STEADY_CONNECTIONS as usize);
        runtime.block_on(async {
            for _ in 0..STEADY_CONNECTIONS {
                let connect = tokio::time::timeout(Duration::from_secs(10), Client::connect(resp));
                connections.push(connect.await.context("connecting within 10 s")??);
            }
            anyhow::Ok(())
        })?;
        // Started from this thread, the sampler is on the same side.
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("lag-sampler".into())
                .spawn(move || sample_lag(admin, &stop))?
        };
        let started = Instant::now();
        let deadline = started + duration;
        let interval =
            Duration::from_secs_f64(f64::from(STEADY_CONNECTIONS) / STEADY_COMMITS_PER_S);
        let value = Arc::new(vec![b's'; value_bytes]);
        let load = runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for (index, client) in connections.into_iter().enumerate() {
                // Spread the connections evenly over one interval.
                let first =
                    started + interval.mul_f64(index as f64 / f64::from(STEADY_CONNECTIONS));
                tasks.spawn(steady_client(client, index, first, interval, deadline, value.clone()));
            }
            let mut latency_us = latency_histogram();
            let mut commits = 0;
            while let Some(joined) = tasks.join_next().await {
                let (count, histogram) = joined??;
                commits += count;
                latency_us.add(&histogram)?;
            }
            anyhow::Ok((commits, latency_us))
        });
        let seconds = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let (lag_us, problems) =
            sampler.join().map_err(|_| anyhow::anyhow!("the lag sampler panicked"))?;
        let (commits, latency_us) = load?;
        Ok(Steady { commits, seconds, value_bytes, latency_us, lag_us, problems })
    })?
}

/// One connection's share of a steady load: a SET every `interval` from `first` until
/// `deadline`; late ones are sent at once, so the rate holds as long as the server keeps up.
pub(super) async fn steady_client(
    mut client: Client,
    index: usize,
    first: Instant,
    interval: Duration,
    deadline: Instant,
    value: Arc<Vec<u8>>,
) -> anyhow::Result<(u64, Histogram<u64>)> {
    let mut latency_us = latency_histogram();
    let mut due = first;
    let mut commits = 0u64;
    while due < deadline && !crate::interrupt::requested() {
        tokio::time::sleep_until(due.into()).await;
        let key = format!("steady:{index}:{}", commits % STEADY_KEYS);
        let started = Instant::now();
        let reply = tokio::time::timeout(
            Duration::from_secs(30),
            client.command(&[b"SET", key.as_bytes(), &value]),
        )
        .await
        .context("no reply within 30 s")??;
        anyhow::ensure!(
            matches!(&reply, Frame::Simple(ok) if &ok[..] == b"OK"),
            "SET answered {reply:?}"
        );
        latency_us.record((started.elapsed().as_micros() as u64).clamp(1, 600_000_000))?;
        commits += 1;
        due += interval;
    }
    Ok((commits, latency_us))
}

/// Reads the primary's first destination's transport lag every [`LAG_SAMPLE_INTERVAL`]
/// until `stop`.
pub(super) fn sample_lag(admin: SocketAddr, stop: &AtomicBool) -> (Histogram<u64>, Vec<String>) {
    let mut lag_us = Histogram::new_with_bounds(1, LAG_US_MAX, 3).expect("valid bounds");
    let mut problems = Vec::new();
    let address = admin.to_string();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let sample = server::status::http_get(&address, "/status", Duration::from_secs(5))
            .and_then(|body| Ok(serde_json::from_str::<server::ServerStatus>(&body)?));
        match sample {
            Ok(status) => match status.replication.destinations.first() {
                Some(destination) => {
                    if destination.phase != transport::Phase::Streaming && problems.len() < 5 {
                        problems.push(format!(
                            "a lag sample saw the destination {:?}",
                            destination.phase
                        ));
                    }
                    let us = (destination.transport_lag_s * 1e6) as u64;
                    let _ = lag_us.record(us.clamp(1, LAG_US_MAX));
                }
                None if problems.len() < 5 => {
                    problems.push("the primary reports no destination".into())
                }
                None => {}
            },
            Err(error) if problems.len() < 5 => {
                problems.push(format!("reading the primary's status: {error:#}"))
            }
            Err(_) => {}
        }
        next += LAG_SAMPLE_INTERVAL;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    (lag_us, problems)
}
