//! A steady load: connections committing SETs on a fixed schedule (a late one is sent at
//! once, so the rate holds while the server keeps up), and meanwhile, for ASYNC, the
//! primary's transport lag sampled from its status.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use linkemu::Side;
use resp::Frame;

use crate::bench_external::latency_histogram;
use crate::client::Client;
use crate::network::Network;

/// Connections of an ASYNC lag case.
pub(super) const LAG_CONNECTIONS: u32 = 8;
/// Commits a second of an ASYNC lag case (and of a `sync_rate` case), over all connections.
pub(super) const LAG_COMMITS_PER_S: f64 = 200.0;
/// Keys each steady-rate connection cycles through (keeps the data small).
const STEADY_KEYS: u64 = 16;
/// How often the primary's transport lag is sampled.
pub(super) const LAG_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// Histogram bound of transport lag samples, in microseconds (1 h).
const LAG_US_MAX: u64 = 3_600_000_000;

/// What a steady load sends.
#[derive(Debug, Clone, Copy)]
pub(super) struct SteadyLoad {
    pub(super) connections: u32,
    /// Over all connections.
    pub(super) commits_per_s: f64,
    pub(super) value_bytes: usize,
    /// Sample the first destination's transport lag meanwhile (ASYNC: it must stay
    /// STREAMING).
    pub(super) sample_lag: bool,
}

impl SteadyLoad {
    /// `rate_mb_per_s` of redo from `connections`, 200 commits a second.
    pub(super) fn redo_rate(connections: u32, rate_mb_per_s: f64, sample_lag: bool) -> SteadyLoad {
        SteadyLoad {
            connections,
            commits_per_s: LAG_COMMITS_PER_S,
            value_bytes: ((rate_mb_per_s * 1e6 / LAG_COMMITS_PER_S) as usize).max(1),
            sample_lag,
        }
    }
}

/// The outcome of a steady-rate load.
pub(super) struct Steady {
    pub(super) commits: u64,
    pub(super) seconds: f64,
    pub(super) value_bytes: usize,
    pub(super) latency_us: Histogram<u64>,
    /// Empty unless the load sampled the lag.
    pub(super) lag_us: Histogram<u64>,
    /// Samples that could not be read, or saw the destination out of STREAMING.
    pub(super) problems: Vec<String>,
}

fn lag_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LAG_US_MAX, 3).expect("valid bounds")
}

/// Commits `load` to the primary at `resp` on a fixed schedule for `duration`, from side A,
/// while (if `load.sample_lag`) a thread there samples the transport lag from `admin`.
pub(super) fn steady_load(
    network: &Network,
    resp: SocketAddr,
    admin: SocketAddr,
    load: SteadyLoad,
    duration: Duration,
) -> anyhow::Result<Steady> {
    let SteadyLoad { connections: count, commits_per_s, value_bytes, sample_lag: sampled } = load;
    network.run_in(Side::A, move || -> anyhow::Result<Steady> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let mut connections = Vec::with_capacity(count as usize);
        runtime.block_on(async {
            for _ in 0..count {
                let connect = tokio::time::timeout(Duration::from_secs(10), Client::connect(resp));
                connections.push(connect.await.context("connecting within 10 s")??);
            }
            anyhow::Ok(())
        })?;
        // Started from this thread, the sampler is on the same side.
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = sampled
            .then(|| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name("lag-sampler".into())
                    .spawn(move || sample_lag(admin, &stop))
            })
            .transpose()?;
        let started = Instant::now();
        let deadline = started + duration;
        let interval = Duration::from_secs_f64(f64::from(count) / commits_per_s);
        let value = Arc::new(vec![b's'; value_bytes]);
        let load = runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for (index, client) in connections.into_iter().enumerate() {
                // Spread the connections evenly over one interval.
                let first = started + interval.mul_f64(index as f64 / f64::from(count));
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
        let (lag_us, problems) = match sampler {
            Some(sampler) => {
                sampler.join().map_err(|_| anyhow::anyhow!("the lag sampler panicked"))?
            }
            None => (lag_histogram(), Vec::new()),
        };
        let (commits, latency_us) = load?;
        Ok(Steady { commits, seconds, value_bytes, latency_us, lag_us, problems })
    })?
}

/// One connection's share of a steady load: a SET every `interval` from `first` until
/// `deadline`; late ones are sent at once, so the rate holds as long as the server keeps up.
async fn steady_client(
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
fn sample_lag(admin: SocketAddr, stop: &AtomicBool) -> (Histogram<u64>, Vec<String>) {
    let mut lag_us = lag_histogram();
    let mut problems = Vec::new();
    let address = admin.to_string();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let sample = admin::http_get(&address, "/status", Duration::from_secs(5))
            .and_then(|body| Ok(serde_json::from_str::<admin::ServerStatus>(&body)?));
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
