//! How the redo engine's threads (the log writers, the acknowledgement waiter, the archivers)
//! are scheduled against the sessions (`[redo] thread_scheduling`).
//!
//! When the server has fewer CPUs than busy threads (pinned to one CPU, or a busy host), every
//! wake-up of a log writer thread used to preempt the worker serving the sessions: the
//! hand-over writer is woken by each commit's hand-over and two or three times inside each
//! `fdatasync` (the data's write, the cache flush). So it started a write as soon as the first
//! commit of a group arrived, and the worker lost its CPU twice per wake-up. Measured under a
//! durable `SADD` at 50 clients with the server on one CPU (docs/bench/README.md, "The log
//! writer yields to the sessions"): 25 commits per `fdatasync`, 0.24 preemptions of the worker
//! per request.
//!
//! With `SCHED_BATCH` a woken log writer thread does not preempt a running thread; it runs
//! when the worker has served every request it has ready and sleeps, or at the end of the
//! worker's time slice, as Redis's event loop syncs its append-only file once it has served
//! what its sockets hold. Each sync then carries the whole group (50 commits per `fdatasync`
//! in the same measurement). `SCHED_BATCH` has the same weight as the default policy: the
//! threads get the same share of a busy CPU, only later. With an idle CPU beside the
//! worker's, nothing changes: the woken thread runs there at once.
//!
//! The cost: while a CPU-bound thread holds the CPU (a checkpoint, a long command), a commit's
//! sync waits up to that thread's time slice at each of its wake-ups. `normal` keeps the
//! kernel's default for a server whose commit latency matters more than its throughput on a
//! saturated CPU.
//!
//! Linux only (`sched_setscheduler` applies to the calling thread there); elsewhere nothing
//! changes. Leaving `SCHED_OTHER` for `SCHED_BATCH` needs no privilege.

use serde::{Deserialize, Serialize};

/// The scheduling policy of the redo engine's threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduling {
    /// `SCHED_BATCH`: a woken log writer thread waits for the running thread to sleep or use
    /// up its time slice instead of preempting it.
    #[default]
    Batch,
    /// The kernel's default policy (`SCHED_OTHER`): a woken log writer thread may preempt the
    /// sessions' worker at once.
    Normal,
}

impl Scheduling {
    /// Applies the policy to the calling thread. A refusal (a sandbox that forbids the call) is
    /// logged and otherwise ignored: the thread works the same, only scheduled by default.
    pub(crate) fn apply_to_this_thread(self) {
        if self == Scheduling::Normal {
            return;
        }
        if let Err(error) = set_batch() {
            tracing::warn!(
                %error,
                thread = std::thread::current().name().unwrap_or("?"),
                "could not set SCHED_BATCH on a redo thread; it keeps the default policy"
            );
        }
    }
}

#[cfg(target_os = "linux")]
fn set_batch() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if result == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(not(target_os = "linux"))]
fn set_batch() -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use stats::Metrics;

    use super::*;
    use crate::{OsStorage, RedoConfig, RedoLog};

    /// The policy of thread `tid` of this process (`SCHED_OTHER` 0, `SCHED_BATCH` 3).
    fn policy_of(tid: i32) -> i32 {
        // SAFETY: a plain system call on a thread id.
        unsafe { libc::sched_getscheduler(tid) }
    }

    /// The ids of this process's threads named `name`.
    fn threads_named(name: &str) -> Vec<i32> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|entry| {
                let tid = entry.ok()?.file_name().to_str()?.parse().ok()?;
                let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
                (comm.trim_end() == name).then_some(tid)
            })
            .collect()
    }

    #[test]
    fn each_policy_is_the_one_the_thread_gets() {
        let policy = |scheduling: Scheduling| {
            std::thread::spawn(move || {
                scheduling.apply_to_this_thread();
                policy_of(0)
            })
            .join()
            .unwrap()
        };
        assert_eq!(policy(Scheduling::Batch), libc::SCHED_BATCH);
        assert_eq!(policy(Scheduling::Normal), libc::SCHED_OTHER);
    }

    /// The default configuration's log writers are `SCHED_BATCH` from their start (every test
    /// of this binary opens its logs with the default policy).
    #[test]
    fn a_primary_starts_its_log_writers_batch_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let config = RedoConfig { log_file_size: 1 << 20, ..RedoConfig::default() };
        assert_eq!(config.thread_scheduling, Scheduling::Batch);
        let log = RedoLog::open(
            config.resolve(dir.path()),
            Arc::new(OsStorage::default()),
            Metrics::new(),
        )
        .unwrap();
        // Another test's thread may have its name and not yet its policy: looked at again
        // until a deadline rather than at once.
        let deadline = Instant::now() + Duration::from_secs(5);
        for name in ["redo-lgwr", "redo-lgwr-task", "redo-ackwait", "redo-arc0"] {
            loop {
                let threads = threads_named(name);
                assert!(!threads.is_empty(), "a thread named {name} runs");
                let other: Vec<i32> = threads
                    .into_iter()
                    .filter(|&tid| policy_of(tid) != libc::SCHED_BATCH)
                    .filter(|&tid| Path::new(&format!("/proc/self/task/{tid}")).exists())
                    .collect();
                if other.is_empty() {
                    break;
                }
                assert!(Instant::now() < deadline, "{name} threads {other:?} are not SCHED_BATCH");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        log.shutdown().unwrap();
    }
}
