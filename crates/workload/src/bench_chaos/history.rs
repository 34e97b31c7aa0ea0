//! The history of a campaign: every operation every client invoked, of which member, when it
//! was sent, when it ended and how — acknowledged (with the reply), failed (a reply that says
//! it was not done) or indeterminate (no reply, or one that says it may or may not be done).
//! The checker (`checker`) judges this record against what the final primary holds.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

/// What a client asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "command")]
pub enum Request {
    /// `SET key value`: every key is written once, by one operation; `nowait`: on a
    /// connection in `COMMITMODE NOWAIT` (acknowledged before its redo is durable).
    Set {
        key: String,
        value: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        nowait: bool,
    },
    /// `INCR counter`: counters are shared by every client.
    Increment { counter: String },
}

impl Request {
    /// The key it writes.
    pub fn key(&self) -> &str {
        match self {
            Request::Set { key, .. } => key,
            Request::Increment { counter } => counter,
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// Acknowledged: `+OK`, or the counter's new value.
    Ok { value: Option<i64> },
    /// Not done: the member refused it before running it (`-READONLY`, `-TRYAGAIN`, writes
    /// refused), or the connection could not be made, so nothing was sent.
    Fail { reason: String },
    /// May or may not be done: no reply within the client's timeout, the connection lost
    /// after the command was sent, or an error that says so (a commit not confirmed).
    Indeterminate { reason: String },
}

/// One operation of one client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Operation {
    /// Which client (`sentinel-0`, `direct-east`).
    pub client: String,
    #[serde(flatten)]
    pub request: Request,
    /// The member it was sent to.
    pub member: String,
    /// When it was sent and when it ended, in µs since the campaign began.
    pub invoked_us: u64,
    pub completed_us: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Operation {
    pub fn acknowledged(&self) -> bool {
        matches!(self.outcome, Outcome::Ok { .. })
    }
}

/// The operations so far, as clients report them once each has ended; shared by every client.
#[derive(Debug)]
pub struct History {
    began: Instant,
    operations: Mutex<Vec<Operation>>,
}

impl History {
    pub fn new(began: Instant) -> History {
        History { began, operations: Mutex::new(Vec::new()) }
    }

    /// µs since the campaign began.
    pub fn micros_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.began).as_micros() as u64
    }

    /// µs since the campaign began, now.
    pub fn now_us(&self) -> u64 {
        self.micros_at(Instant::now())
    }

    /// The instant `micros` into the campaign.
    pub fn instant_at(&self, micros: u64) -> Instant {
        self.began + Duration::from_micros(micros)
    }

    /// Records an operation that has ended.
    pub fn record(&self, operation: Operation) {
        self.operations.lock().push(operation);
    }

    /// Every operation that ended before `micros`, in the order they were recorded.
    pub fn ended_before(&self, micros: u64) -> Vec<Operation> {
        self.operations
            .lock()
            .iter()
            .filter(|operation| operation.completed_us < micros)
            .cloned()
            .collect()
    }

    /// How many operations have ended so far.
    pub fn len(&self) -> usize {
        self.operations.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The times (µs) of every acknowledged operation that ended within `from..to`, sorted.
    pub fn acknowledged_within(&self, from: u64, to: u64) -> Vec<u64> {
        let mut times: Vec<u64> = self
            .operations
            .lock()
            .iter()
            .filter(|operation| operation.acknowledged())
            .map(|operation| operation.completed_us)
            .filter(|at| (from..to).contains(at))
            .collect();
        times.sort_unstable();
        times
    }
}

/// The longest stretch within `from..to` (µs) with no acknowledgement at `times` (sorted), in
/// seconds: the edges of the window count as its ends.
pub fn longest_silence_s(times: &[u64], from: u64, to: u64) -> f64 {
    let mut previous = from;
    let mut longest = 0;
    for &at in times.iter().filter(|at| (from..to).contains(*at)) {
        longest = longest.max(at - previous);
        previous = at;
    }
    longest = longest.max(to.saturating_sub(previous));
    longest as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(
        client: &str,
        key: &str,
        invoked_us: u64,
        completed_us: u64,
        outcome: Outcome,
    ) -> Operation {
        Operation {
            client: client.into(),
            request: Request::Set { key: key.into(), value: key.into(), nowait: false },
            member: "east".into(),
            invoked_us,
            completed_us,
            outcome,
        }
    }

    #[test]
    fn the_history_answers_what_ended_before_a_time() {
        let history = History::new(Instant::now());
        assert!(history.is_empty());
        history.record(set("a", "k1", 10, 20, Outcome::Ok { value: None }));
        history.record(set("a", "k2", 25, 40, Outcome::Fail { reason: "READONLY".into() }));
        history.record(set("b", "k3", 15, 30, Outcome::Ok { value: None }));
        assert_eq!(history.len(), 3);
        let before: Vec<String> =
            history.ended_before(35).iter().map(|op| op.request.key().to_string()).collect();
        assert_eq!(before, ["k1", "k3"]);
        assert_eq!(history.acknowledged_within(0, 100), [20, 30]);
        assert_eq!(history.acknowledged_within(25, 100), [30]);
    }

    #[test]
    fn the_longest_silence_counts_the_window_edges() {
        assert_eq!(longest_silence_s(&[], 1_000_000, 3_000_000), 2.0);
        // Acks at 1.5 s and 1.7 s in a window of 1 s to 4 s: the end is the longest silence.
        assert!(
            (longest_silence_s(&[1_500_000, 1_700_000], 1_000_000, 4_000_000) - 2.3).abs() < 1e-9
        );
        // Before the window: left out.
        assert!(
            (longest_silence_s(&[500_000, 3_500_000], 1_000_000, 4_000_000) - 2.5).abs() < 1e-9
        );
    }

    #[test]
    fn operations_serialise_with_their_command_and_outcome() {
        let json =
            serde_json::to_value(set("a", "k", 1, 2, Outcome::Ok { value: Some(3) })).unwrap();
        assert_eq!(json["command"], "set");
        assert_eq!(json["outcome"], "ok");
        assert_eq!(json["value"], 3);
    }
}
