//! What both model checks share: whether this is the deep run, how many checker threads, and
//! a found path written out one step a line.

use std::fmt::Debug;
use std::time::Duration;

/// Whether to run the deep check (minutes to hours) instead of the bounded one (CI).
pub fn deep() -> bool {
    std::env::var("REDOGUARD_MODEL_DEEP").is_ok_and(|value| value == "1")
}

/// How long one check may run: a bound for CI (50 s), hours for the deep run
/// (`REDOGUARD_MODEL_SECONDS`, default 6 h).
pub fn budget() -> Duration {
    let deep_seconds = std::env::var("REDOGUARD_MODEL_SECONDS")
        .ok()
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or(6 * 3600);
    Duration::from_secs(if deep() { deep_seconds } else { 50 })
}

/// Checker threads: every CPU, or `REDOGUARD_MODEL_THREADS`.
pub fn threads() -> usize {
    std::env::var("REDOGUARD_MODEL_THREADS")
        .ok()
        .and_then(|threads| threads.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |cpus| cpus.get()))
}

/// A path the checker found, one numbered step a line, each action as `describe` says it.
pub fn render<S: Clone, A: Clone + Debug>(
    path: &stateright::Path<S, A>,
    describe: impl Fn(&A) -> String,
) -> String {
    path.clone()
        .into_actions()
        .iter()
        .enumerate()
        .map(|(step, action)| format!("{step:>3}. {}", describe(action)))
        .collect::<Vec<_>>()
        .join("\n")
}
