//! The recent past, for the web page: one sample a second of what a DBA watches (commits/s,
//! redo rate, commit latency, each standby's lags, the top wait events, log switches), kept in
//! a bounded ring so that a page opened now shows the last minutes at once.
//!
//! The ring's memory is bounded whatever the uptime: at most `capacity` samples, each with at
//! most `MAX_LAGS` lags and `MAX_WAITS` wait events, whose names are bounded by the
//! configuration (destination names) or the code (wait event names).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use stats::{Metrics, MetricsSnapshot, WaitEvent};

use crate::ServerState;
use crate::status::ReplicationStatus;

/// Samples kept: five minutes at one a second. Default of `History::new`.
pub const CAPACITY: usize = 300;
/// How often a sample is taken.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Lags kept per sample: the most destinations a primary may have (9), or a standby's one.
pub const MAX_LAGS: usize = 9;
/// Wait events kept per sample: those that took the most time in the interval.
pub const MAX_WAITS: usize = 6;
/// Longest name kept (a destination or wait event name); longer ones are cut.
pub const MAX_NAME_BYTES: usize = 64;

/// One second of the member's life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When the interval ended, in milliseconds since the Unix epoch.
    pub t_ms: u64,
    /// `primary` or `standby`; `null` while the role is changing (then every figure is 0).
    pub role: Option<String>,
    /// Commits in the interval, per second ("user commits").
    pub commits_per_s: f64,
    /// Redo generated in the interval, bytes per second ("redo size").
    pub redo_bytes_per_s: f64,
    /// Redo records applied in the interval, per second (a standby's apply).
    pub applied_per_s: f64,
    /// Commit latency in the interval ("log file sync": the wait of a committing session until
    /// its redo is durable, here and on a synchronized SYNC standby); `null` without commits.
    pub commit_p50_us: Option<u64>,
    pub commit_p99_us: Option<u64>,
    /// On a primary: whether a SYNC standby protects commits (`null` without standbys).
    pub synchronized: Option<bool>,
    /// Each standby's lags: a primary's destinations, or a standby's own.
    pub lags: Vec<LagSample>,
    /// The wait events that took the most time in the interval, most first.
    pub waits: Vec<WaitSample>,
    /// The log sequence being written (a primary) or received (a standby) at the end.
    pub log_seq: Option<u64>,
    /// Log switches in the interval (the sequence moved on this many logs).
    pub log_switches: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LagSample {
    /// The destination's name (on a standby: its primary, or `primary`).
    pub name: String,
    pub transport_lag_s: f64,
    pub apply_lag_s: f64,
    /// SYNCHRONIZED, STREAMING, CATCHING_UP, ... as the primary sees it; on a standby,
    /// CONNECTED or DISCONNECTED.
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitSample {
    pub name: String,
    /// Time waited in the interval, in milliseconds per second (summed over sessions).
    pub waited_ms_per_s: f64,
    pub waits_per_s: f64,
}

/// The ring of samples, oldest first.
#[derive(Debug)]
pub struct History {
    capacity: usize,
    samples: VecDeque<Sample>,
}

impl History {
    pub fn new(capacity: usize) -> History {
        assert!(capacity > 0, "a history holds at least one sample");
        History { capacity, samples: VecDeque::with_capacity(capacity) }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Adds a sample, dropping the oldest when full, and bounding what the sample holds.
    pub fn push(&mut self, mut sample: Sample) {
        sample.lags.truncate(MAX_LAGS);
        sample.lags.shrink_to_fit();
        sample.waits.truncate(MAX_WAITS);
        sample.waits.shrink_to_fit();
        for lag in &mut sample.lags {
            cut(&mut lag.name);
            cut(&mut lag.state);
        }
        for wait in &mut sample.waits {
            cut(&mut wait.name);
        }
        if let Some(role) = &mut sample.role {
            cut(role);
        }
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        debug_assert!(self.samples.len() <= self.capacity);
    }

    /// The samples taken after `since_ms` (all with 0), oldest first.
    pub fn since(&self, since_ms: u64) -> Vec<Sample> {
        let first = self.samples.partition_point(|sample| sample.t_ms <= since_ms);
        self.samples.range(first..).cloned().collect()
    }

    /// An upper bound of the bytes the ring holds now, names included: what the memory bound
    /// is checked against.
    pub fn heap_bytes(&self) -> usize {
        let sample = std::mem::size_of::<Sample>();
        self.samples.capacity() * sample
            + self
                .samples
                .iter()
                .map(|sample| {
                    sample.role.as_ref().map_or(0, String::capacity)
                        + sample.lags.capacity() * std::mem::size_of::<LagSample>()
                        + sample
                            .lags
                            .iter()
                            .map(|lag| lag.name.capacity() + lag.state.capacity())
                            .sum::<usize>()
                        + sample.waits.capacity() * std::mem::size_of::<WaitSample>()
                        + sample.waits.iter().map(|wait| wait.name.capacity()).sum::<usize>()
                })
                .sum::<usize>()
    }
}

/// Cuts `text` to `MAX_NAME_BYTES` (on a character boundary) and drops spare capacity.
fn cut(text: &mut String) {
    if text.len() > MAX_NAME_BYTES {
        let mut end = MAX_NAME_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text.shrink_to_fit();
}

/// The history a server keeps, shared by its sampler and the admin API.
pub type HistorySlot = Arc<Mutex<History>>;

/// Turns two readings of the counters into a sample: what changed between them.
pub struct Sampler {
    log_file_sync: Arc<WaitEvent>,
    previous: Option<Reading>,
}

/// The counters at one instant.
struct Reading {
    at: std::time::Instant,
    metrics: MetricsSnapshot,
    commit_latency: Histogram<u64>,
    log_seq: Option<u64>,
}

impl Sampler {
    pub fn new(metrics: &Metrics) -> Sampler {
        Sampler { log_file_sync: metrics.wait("log file sync"), previous: None }
    }

    /// Reads the counters now and returns what happened since the last call (`None` the
    /// first time: there is no interval yet).
    pub fn sample(
        &mut self,
        metrics: &Metrics,
        role: Option<&str>,
        replication: Option<&ReplicationStatus>,
        log_seq: Option<u64>,
    ) -> Option<Sample> {
        let now = Reading {
            at: std::time::Instant::now(),
            metrics: metrics.snapshot(),
            commit_latency: self.log_file_sync.histogram_us(),
            log_seq,
        };
        let previous = self.previous.replace(now);
        let (previous, now) = (previous?, self.previous.as_ref().expect("just set"));
        let seconds = now.at.duration_since(previous.at).as_secs_f64().max(1e-3);
        let rate = |name: &str| {
            now.metrics.stat(name).saturating_sub(previous.metrics.stat(name)) as f64 / seconds
        };
        let mut interval = now.commit_latency.clone();
        let latency = match interval.subtract(&previous.commit_latency) {
            Ok(()) if !interval.is_empty() => {
                Some((interval.value_at_quantile(0.5), interval.value_at_quantile(0.99)))
            }
            _ => None,
        };
        let mut waits: Vec<WaitSample> = now
            .metrics
            .waits
            .iter()
            .filter_map(|event| {
                let before = previous.metrics.wait(&event.name);
                let waited_us =
                    event.total_us.saturating_sub(before.map_or(0, |before| before.total_us));
                let count = event.count.saturating_sub(before.map_or(0, |before| before.count));
                (count > 0).then(|| WaitSample {
                    name: event.name.clone(),
                    waited_ms_per_s: waited_us as f64 / 1000.0 / seconds,
                    waits_per_s: count as f64 / seconds,
                })
            })
            .collect();
        waits.sort_by(|a, b| b.waited_ms_per_s.total_cmp(&a.waited_ms_per_s));
        waits.truncate(MAX_WAITS);
        Some(Sample {
            t_ms: redo::types::now_unix_us() / 1000,
            role: role.map(str::to_string),
            commits_per_s: rate("user commits"),
            redo_bytes_per_s: rate("redo size"),
            applied_per_s: rate("apply redo records applied"),
            commit_p50_us: latency.map(|(p50, _)| p50),
            commit_p99_us: latency.map(|(_, p99)| p99),
            synchronized: replication.and_then(|replication| replication.synchronized),
            lags: replication.map(lags_of).unwrap_or_default(),
            waits,
            log_seq: now.log_seq,
            log_switches: match (previous.log_seq, now.log_seq) {
                (Some(before), Some(after)) => after.saturating_sub(before),
                _ => 0,
            },
        })
    }
}

fn lags_of(replication: &ReplicationStatus) -> Vec<LagSample> {
    if let Some(standby) = &replication.standby {
        return vec![LagSample {
            name: standby
                .primary_member
                .clone()
                .or_else(|| standby.primary.clone())
                .unwrap_or_else(|| "primary".to_string()),
            transport_lag_s: standby.transport_lag_s,
            apply_lag_s: standby.apply_lag_s,
            state: if standby.connected { "CONNECTED" } else { "DISCONNECTED" }.to_string(),
        }];
    }
    replication
        .destinations
        .iter()
        .take(MAX_LAGS)
        .map(|destination| LagSample {
            name: destination.name.clone(),
            transport_lag_s: destination.transport_lag_s,
            apply_lag_s: destination.apply_lag_s,
            state: serde_json::to_value(destination.phase)
                .ok()
                .and_then(|value| value.as_str().map(str::to_string))
                .unwrap_or_else(|| format!("{:?}", destination.phase)),
        })
        .collect()
}

/// Takes a sample every `INTERVAL` into the server's history, until the server stops.
pub(crate) async fn run(state: Arc<ServerState>) {
    let mut sampler = Sampler::new(&state.metrics);
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let reading = {
            let state = state.clone();
            // Status calls take the transport's and the receiver's locks: not on a worker.
            tokio::task::spawn_blocking(move || {
                let sample = match state.roles.current() {
                    Some(running) => {
                        let replication = state.replication_of(&running);
                        let log_seq = current_log_seq(&running, &replication);
                        sampler.sample(
                            &state.metrics,
                            Some(crate::role_name(running.role())),
                            Some(&replication),
                            log_seq,
                        )
                    }
                    None => sampler.sample(&state.metrics, None, None, None),
                };
                if let Some(sample) = sample {
                    state.history.lock().push(sample);
                }
                sampler
            })
            .await
        };
        match reading {
            Ok(kept) => sampler = kept,
            Err(error) => {
                tracing::error!(%error, "the history sampler failed; the page's history stops");
                return;
            }
        }
    }
}

/// The log being written (a primary's current group) or received (a standby).
fn current_log_seq(running: &crate::Running, replication: &ReplicationStatus) -> Option<u64> {
    if let Some(standby) = &replication.standby {
        return Some(standby.received.seq.0);
    }
    Some(running.db.redo().written_addr().seq.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: u64, names: usize) -> Sample {
        let long = "x".repeat(500);
        Sample {
            t_ms,
            role: Some(format!("primary{long}")),
            commits_per_s: 1.0,
            redo_bytes_per_s: 2.0,
            applied_per_s: 0.0,
            commit_p50_us: Some(100),
            commit_p99_us: Some(900),
            synchronized: Some(true),
            lags: (0..names)
                .map(|index| LagSample {
                    name: format!("standby{index}{long}"),
                    transport_lag_s: 0.5,
                    apply_lag_s: 0.7,
                    state: format!("SYNCHRONIZED{long}"),
                })
                .collect(),
            waits: (0..names)
                .map(|index| WaitSample {
                    name: format!("wait {index}{long}"),
                    waited_ms_per_s: 3.0,
                    waits_per_s: 4.0,
                })
                .collect(),
            log_seq: Some(t_ms / 10),
            log_switches: 0,
        }
    }

    /// The ring's memory has a bound that does not grow with uptime: after days' worth of
    /// samples (each as large as a sampler could make it, and larger) it holds `capacity`
    /// samples and no more bytes than after the first `capacity`.
    #[test]
    fn the_ring_is_bounded_whatever_the_uptime() {
        let mut history = History::new(CAPACITY);
        for t in 0..CAPACITY as u64 {
            history.push(sample(t * 1000, 12));
        }
        let full = history.heap_bytes();
        let per_sample = std::mem::size_of::<Sample>()
            + MAX_LAGS * (std::mem::size_of::<LagSample>() + 2 * MAX_NAME_BYTES)
            + MAX_WAITS * (std::mem::size_of::<WaitSample>() + MAX_NAME_BYTES)
            + MAX_NAME_BYTES;
        // Three days at one sample a second.
        for t in CAPACITY as u64..3 * 86_400 {
            history.push(sample(t * 1000, 12));
        }
        assert_eq!(history.len(), CAPACITY);
        assert!(history.heap_bytes() <= full, "{} > {full}", history.heap_bytes());
        assert!(
            history.heap_bytes() <= CAPACITY * per_sample,
            "{} bytes for {CAPACITY} samples: more than {per_sample} each",
            history.heap_bytes()
        );
        let newest = history.since(0);
        assert_eq!(newest.len(), CAPACITY);
        assert_eq!(newest.last().unwrap().t_ms, (3 * 86_400 - 1) * 1000);
        assert!(newest.iter().all(|sample| sample.lags.len() == MAX_LAGS
            && sample.waits.len() == MAX_WAITS
            && sample.lags.iter().all(|lag| lag.name.len() <= MAX_NAME_BYTES)));
    }

    #[test]
    fn since_returns_only_newer_samples_in_order() {
        let mut history = History::new(4);
        for t in [1000, 2000, 3000, 4000, 5000] {
            history.push(sample(t, 1));
        }
        let times = |samples: Vec<Sample>| samples.iter().map(|s| s.t_ms).collect::<Vec<_>>();
        assert_eq!(times(history.since(0)), [2000, 3000, 4000, 5000]);
        assert_eq!(times(history.since(3000)), [4000, 5000]);
        assert_eq!(times(history.since(3500)), [4000, 5000]);
        assert!(history.since(5000).is_empty());
    }

    #[test]
    fn a_name_is_cut_on_a_character_boundary() {
        let mut name = "é".repeat(MAX_NAME_BYTES);
        cut(&mut name);
        assert!(name.len() <= MAX_NAME_BYTES && name.len() >= MAX_NAME_BYTES - 1);
        assert!(name.chars().all(|c| c == 'é'));
    }

    /// The sampler turns counters into rates and interval percentiles, not totals.
    #[test]
    fn the_sampler_reports_what_happened_in_the_interval() {
        let metrics = Metrics::new();
        let mut sampler = Sampler::new(&metrics);
        let sync = metrics.wait("log file sync");
        // Before the first reading: slow commits that must not show in the interval.
        for _ in 0..100 {
            sync.record(Duration::from_millis(50));
        }
        metrics.stat("user commits").add(100);
        assert!(sampler.sample(&metrics, Some("primary"), None, Some(7)).is_none());
        for _ in 0..200 {
            sync.record(Duration::from_micros(300));
        }
        metrics.stat("user commits").add(200);
        metrics.stat("redo size").add(1_000_000);
        metrics.wait("log file parallel write").record(Duration::from_micros(250));
        std::thread::sleep(Duration::from_millis(100));
        let sample = sampler.sample(&metrics, Some("primary"), None, Some(9)).unwrap();
        let p99 = sample.commit_p99_us.unwrap();
        assert!((295..=305).contains(&p99), "p99 {p99} µs: the earlier 50 ms waits leaked in");
        assert!(sample.commits_per_s > 200.0 && sample.commits_per_s <= 2000.0, "{sample:?}");
        assert!(sample.redo_bytes_per_s > 1e6, "{sample:?}");
        assert_eq!(sample.log_switches, 2);
        assert_eq!(sample.waits[0].name, "log file sync");
        assert_eq!(sample.waits.len(), 2);
        // A quiet interval: no latency, no waits.
        let quiet = sampler.sample(&metrics, Some("primary"), None, Some(9)).unwrap();
        assert_eq!(quiet.commit_p99_us, None);
        assert!(quiet.waits.is_empty());
        assert_eq!(quiet.commits_per_s, 0.0);
    }
}
