//! What the model checks share: whether this is the deep run, how many checker threads, a
//! breadth-first run and what it found, and a found path written out one step a line. (Each
//! check uses some of it.)
#![allow(dead_code)]

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

/// A path the checker found to a state of `M`.
pub type Trace<M> =
    stateright::Path<<M as stateright::Model>::State, <M as stateright::Model>::Action>;

/// A checker run breadth first, and what it found.
pub struct Run<M: stateright::Model> {
    pub unique: usize,
    pub generated: usize,
    pub depth: usize,
    pub seconds: f64,
    /// Every state within its bounds was checked (not stopped by the budget).
    pub exhausted: bool,
    pub discoveries: Vec<(&'static str, Trace<M>)>,
}

/// Runs `checker` breadth first to the end of its space (or its budget), keeping the
/// discoveries of the properties `names`.
pub fn explore<M>(checker: stateright::CheckerBuilder<M>, names: &[&'static str]) -> Run<M>
where
    M: stateright::Model + Send + Sync + 'static,
    M::State: std::hash::Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    use stateright::Checker;
    let started = std::time::Instant::now();
    let checker = checker.spawn_bfs().join();
    let discoveries =
        names.iter().filter_map(|name| checker.discovery(name).map(|path| (*name, path))).collect();
    Run {
        unique: checker.unique_state_count(),
        generated: checker.state_count(),
        depth: checker.max_depth(),
        seconds: started.elapsed().as_secs_f64(),
        exhausted: checker.is_done() && started.elapsed() < budget(),
        discoveries,
    }
}

impl<M: stateright::Model> Run<M> {
    pub fn found(&self, name: &str) -> Option<&Trace<M>> {
        self.discoveries.iter().find(|(found, _)| *found == name).map(|(_, path)| path)
    }

    pub fn summary(&self, what: &str) -> String {
        format!(
            "{what}: {} unique states ({} generated), paths up to {} steps, {}in {:.1} s",
            self.unique,
            self.generated,
            self.depth,
            if self.exhausted { "every reachable state, " } else { "NOT exhausted, " },
            self.seconds
        )
    }
}
