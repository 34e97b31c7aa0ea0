//! Wait events and statistics: what a user reads to tune redoguard.
//!
//! A *wait event* is a named place where a session or background process waits ("log file
//! sync", "log file parallel write", "log buffer space", …): it keeps a count, the total and
//! maximum time waited and a latency histogram. A *statistic* is a named monotonic counter
//! ("redo size", "redo writes", …). Names follow the reference (see DESIGN.md) so that a DBA
//! can read them without a glossary.
//!
//! Components look an event or a statistic up once (`Metrics::wait`, `Metrics::stat`) and keep
//! the `Arc`; recording is then a few atomic adds and one short, uncontended-in-practice lock
//! for the histogram.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

/// A session held up by a log switch waits under the reason the switch waits for (the
/// reference's names): the next group's checkpoint, its archiving, a SYNC standby's
/// acknowledgement of the switch, or the switch's own work. Each such wait is also part of the
/// session's "log file sync"; see `docs/redo-format.md`, "Waits at a log switch".
pub const LOG_FILE_SWITCH_CHECKPOINT: &str = "log file switch (checkpoint incomplete)";
/// See `LOG_FILE_SWITCH_CHECKPOINT`.
pub const LOG_FILE_SWITCH_ARCHIVING: &str = "log file switch (archiving needed)";
/// See `LOG_FILE_SWITCH_CHECKPOINT`.
pub const LOG_FILE_SWITCH_SYNC_STANDBY: &str = "log file switch (SYNC standby)";
/// See `LOG_FILE_SWITCH_CHECKPOINT`: the part of the switch no other reason explains (closing
/// the old log, opening the new one).
pub const LOG_FILE_SWITCH_COMPLETION: &str = "log file switch completion";
/// Every reason a session waits for at a log switch, in the order a person reads them.
pub const LOG_FILE_SWITCH_WAITS: [&str; 4] = [
    LOG_FILE_SWITCH_CHECKPOINT,
    LOG_FILE_SWITCH_ARCHIVING,
    LOG_FILE_SWITCH_SYNC_STANDBY,
    LOG_FILE_SWITCH_COMPLETION,
];

/// The bucket bounds of the wait histograms in the Prometheus exposition, in microseconds:
/// every fourth power of two from 64 µs to about 17 s (ten buckets, then `+Inf`), so that
/// each is a sum of `WaitEventSnapshot::histogram`'s power-of-two buckets, and the same
/// every scrape.
const PROMETHEUS_BUCKETS_US: [u64; 10] =
    [1 << 6, 1 << 8, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24];

/// Longest wait a histogram tracks exactly; longer waits are clamped to it (one hour).
const HISTOGRAM_MAX_US: u64 = 3_600_000_000;

/// One wait event: count, total, maximum and a histogram of wait times in microseconds.
#[derive(Debug)]
pub struct WaitEvent {
    name: &'static str,
    count: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
    histogram_us: Mutex<Histogram<u64>>,
}

impl WaitEvent {
    fn new(name: &'static str) -> WaitEvent {
        WaitEvent {
            name,
            count: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            // Two significant digits: 1 % resolution is plenty for a wait histogram.
            histogram_us: Mutex::new(
                Histogram::new_with_bounds(1, HISTOGRAM_MAX_US, 2).expect("valid histogram bounds"),
            ),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Records one wait of `waited`.
    pub fn record(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
        let us = (ns / 1_000).clamp(1, HISTOGRAM_MAX_US);
        self.histogram_us.lock().saturating_record(us);
    }

    /// Records the time elapsed since `started`.
    pub fn record_since(&self, started: Instant) {
        self.record(started.elapsed());
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// A copy of the histogram of every wait so far, in microseconds: a sampler subtracts the
    /// previous copy to get the latencies of one interval.
    pub fn histogram_us(&self) -> Histogram<u64> {
        self.histogram_us.lock().clone()
    }

    pub fn snapshot(&self) -> WaitEventSnapshot {
        let histogram = self.histogram_us.lock();
        let count = self.count.load(Ordering::Relaxed);
        let total_us = self.total_ns.load(Ordering::Relaxed) / 1_000;
        // Power-of-two buckets as a DBA knows them from an event histogram: "waits that took
        // less than or equal to `le_us`".
        let mut buckets = Vec::new();
        if !histogram.is_empty() {
            let mut le_us = 1u64;
            let mut below = 0u64;
            loop {
                let upto = histogram.count_between(0, le_us);
                if upto > below {
                    buckets.push(HistogramBucket { le_us, count: upto - below });
                    below = upto;
                }
                if upto >= histogram.len() || le_us >= HISTOGRAM_MAX_US {
                    break;
                }
                le_us = le_us.saturating_mul(2);
            }
        }
        let (p50_us, p99_us) = if histogram.is_empty() {
            (0, 0)
        } else {
            (histogram.value_at_quantile(0.50), histogram.value_at_quantile(0.99))
        };
        WaitEventSnapshot {
            name: self.name.to_string(),
            count,
            total_us,
            avg_us: if count == 0 { 0.0 } else { total_us as f64 / count as f64 },
            max_us: self.max_ns.load(Ordering::Relaxed) / 1_000,
            p50_us,
            p99_us,
            histogram: buckets,
        }
    }
}

/// One named counter.
#[derive(Debug)]
pub struct Statistic {
    name: &'static str,
    value: AtomicU64,
}

impl Statistic {
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn add(&self, amount: u64) {
        self.value.fetch_add(amount, Ordering::Relaxed);
    }

    pub fn incr(&self) {
        self.add(1);
    }

    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// The registry of one database's wait events and statistics.
#[derive(Debug, Default)]
pub struct Metrics {
    waits: RwLock<BTreeMap<&'static str, Arc<WaitEvent>>>,
    stats: RwLock<BTreeMap<&'static str, Arc<Statistic>>>,
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// The wait event called `name`, created on first use.
    pub fn wait(&self, name: &'static str) -> Arc<WaitEvent> {
        if let Some(event) = self.waits.read().get(name) {
            return event.clone();
        }
        self.waits.write().entry(name).or_insert_with(|| Arc::new(WaitEvent::new(name))).clone()
    }

    /// The statistic called `name`, created on first use.
    pub fn stat(&self, name: &'static str) -> Arc<Statistic> {
        if let Some(stat) = self.stats.read().get(name) {
            return stat.clone();
        }
        self.stats
            .write()
            .entry(name)
            .or_insert_with(|| Arc::new(Statistic { name, value: AtomicU64::new(0) }))
            .clone()
    }

    /// Every wait event and statistic as it is now. Events never waited on are left out.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut waits: Vec<WaitEventSnapshot> = self
            .waits
            .read()
            .values()
            .filter(|event| event.count() > 0)
            .map(|event| event.snapshot())
            .collect();
        waits.sort_by(|a, b| b.total_us.cmp(&a.total_us).then_with(|| a.name.cmp(&b.name)));
        let stats =
            self.stats.read().values().map(|stat| (stat.name.to_string(), stat.get())).collect();
        MetricsSnapshot { waits, stats }
    }
}

/// A wait event as it was when the snapshot was taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitEventSnapshot {
    pub name: String,
    pub count: u64,
    pub total_us: u64,
    pub avg_us: f64,
    pub max_us: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// Power-of-two buckets; only non-empty ones are listed.
    pub histogram: Vec<HistogramBucket>,
}

/// Waits that took more than the previous bucket's bound and at most `le_us` microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramBucket {
    pub le_us: u64,
    pub count: u64,
}

/// Every wait event (largest total first) and statistic (by name).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    pub waits: Vec<WaitEventSnapshot>,
    pub stats: BTreeMap<String, u64>,
}

impl MetricsSnapshot {
    pub fn stat(&self, name: &str) -> u64 {
        self.stats.get(name).copied().unwrap_or(0)
    }

    pub fn wait(&self, name: &str) -> Option<&WaitEventSnapshot> {
        self.waits.iter().find(|event| event.name == name)
    }

    /// The waits of sessions held up by log switches, one per reason
    /// (`LOG_FILE_SWITCH_WAITS`, in that order), a reason never waited for as zeros.
    pub fn log_switch_waits(&self) -> Vec<WaitEventSnapshot> {
        LOG_FILE_SWITCH_WAITS
            .iter()
            .map(|name| {
                self.wait(name).cloned().unwrap_or_else(|| WaitEventSnapshot {
                    name: name.to_string(),
                    count: 0,
                    total_us: 0,
                    avg_us: 0.0,
                    max_us: 0,
                    p50_us: 0,
                    p99_us: 0,
                    histogram: Vec::new(),
                })
            })
            .collect()
    }

    /// The Prometheus text exposition of this snapshot. Names become
    /// `redoguard_wait_*{event="log file sync"}` and `redoguard_stat{name="redo size"}`; each
    /// wait event's histogram is `redoguard_wait_duration_seconds` (`PROMETHEUS_BUCKETS_US`).
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP redoguard_wait_count Number of waits per wait event.\n");
        out.push_str("# TYPE redoguard_wait_count counter\n");
        for event in &self.waits {
            let _ =
                writeln!(out, "redoguard_wait_count{{event=\"{}\"}} {}", event.name, event.count);
        }
        out.push_str("# HELP redoguard_wait_seconds_total Total time waited per wait event.\n");
        out.push_str("# TYPE redoguard_wait_seconds_total counter\n");
        for event in &self.waits {
            let _ = writeln!(
                out,
                "redoguard_wait_seconds_total{{event=\"{}\"}} {}",
                event.name,
                event.total_us as f64 / 1e6
            );
        }
        out.push_str("# HELP redoguard_wait_duration_seconds Time of each wait, per wait event.\n");
        out.push_str("# TYPE redoguard_wait_duration_seconds histogram\n");
        for event in &self.waits {
            for bound_us in PROMETHEUS_BUCKETS_US {
                let below: u64 = event
                    .histogram
                    .iter()
                    .filter(|bucket| bucket.le_us <= bound_us)
                    .map(|bucket| bucket.count)
                    .sum();
                let _ = writeln!(
                    out,
                    "redoguard_wait_duration_seconds_bucket{{event=\"{}\",le=\"{}\"}} {below}",
                    event.name,
                    bound_us as f64 / 1e6
                );
            }
            let _ = writeln!(
                out,
                "redoguard_wait_duration_seconds_bucket{{event=\"{}\",le=\"+Inf\"}} {}",
                event.name, event.count
            );
            let _ = writeln!(
                out,
                "redoguard_wait_duration_seconds_sum{{event=\"{}\"}} {}",
                event.name,
                event.total_us as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "redoguard_wait_duration_seconds_count{{event=\"{}\"}} {}",
                event.name, event.count
            );
        }
        out.push_str("# HELP redoguard_stat Database statistics (counters).\n");
        out.push_str("# TYPE redoguard_stat counter\n");
        for (name, value) in &self.stats {
            let _ = writeln!(out, "redoguard_stat{{name=\"{name}\"}} {value}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_counted_timed_and_bucketed() {
        let metrics = Metrics::new();
        let sync = metrics.wait("log file sync");
        sync.record(Duration::from_micros(150));
        sync.record(Duration::from_micros(170));
        sync.record(Duration::from_millis(3));
        // The same name is the same event.
        assert_eq!(metrics.wait("log file sync").count(), 3);
        let snapshot = metrics.snapshot();
        let event = snapshot.wait("log file sync").expect("event present");
        assert_eq!(event.count, 3);
        assert_eq!(event.total_us, 3_320);
        assert_eq!(event.max_us, 3_000);
        assert!((169..=171).contains(&event.p50_us), "median of 150, 170, 3000: {}", event.p50_us);
        assert_eq!(event.histogram.iter().map(|bucket| bucket.count).sum::<u64>(), 3);
        assert_eq!(event.histogram[0], HistogramBucket { le_us: 256, count: 2 });
        assert_eq!(event.histogram[1].le_us, 4_096);
        // Prometheus: cumulative buckets at fixed bounds, with the count and the sum.
        let text = snapshot.to_prometheus();
        for (le, below) in [("0.000064", 0), ("0.000256", 2), ("0.001024", 2), ("0.004096", 3)] {
            let line = format!(
                "redoguard_wait_duration_seconds_bucket{{event=\"log file sync\",le=\"{le}\"}} {below}\n"
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(text.contains(
            "redoguard_wait_duration_seconds_bucket{event=\"log file sync\",le=\"+Inf\"} 3\n"
        ));
        assert!(
            text.contains("redoguard_wait_duration_seconds_sum{event=\"log file sync\"} 0.00332\n")
        );
        assert!(
            text.contains("redoguard_wait_duration_seconds_count{event=\"log file sync\"} 3\n")
        );
    }

    #[test]
    fn statistics_add_up_and_unwaited_events_are_left_out() {
        let metrics = Metrics::new();
        metrics.stat("redo size").add(100);
        metrics.stat("redo size").add(28);
        let _unused = metrics.wait("log buffer space");
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.stat("redo size"), 128);
        assert!(snapshot.wait("log buffer space").is_none());
        let text = snapshot.to_prometheus();
        assert!(text.contains("redoguard_stat{name=\"redo size\"} 128"), "{text}");
        let reasons = snapshot.log_switch_waits();
        assert_eq!(reasons.len(), 4);
        assert_eq!(reasons[0].name, LOG_FILE_SWITCH_CHECKPOINT);
        assert!(reasons.iter().all(|event| event.count == 0));
        let json = serde_json::to_string(&snapshot).expect("serialises");
        let back: MetricsSnapshot = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, snapshot);
    }
}
