//! How the redo engine's threads (the log writers, the acknowledgement waiter, the archivers)
//! are scheduled against the sessions (`[redo] thread_scheduling`).
//!
//! When the server has fewer CPUs than busy threads (pinned to one CPU, or a busy host), every
//! wake-up of a log writer thread preempts the worker serving the sessions: the hand-over
//! writer is woken by each commit's hand-over and two or three times inside each `fdatasync`.
//! So it starts a write as soon as the first commit of a group arrives, and the worker loses
//! its CPU twice per wake-up. Measured under a durable `SADD` at 50 clients with the server on
//! one CPU (docs/bench/README.md, "The log writer yields to the sessions"): 25 commits per
//! `fdatasync`.
//!
//! With `batch` (`SCHED_BATCH`) a woken thread does not preempt a running one; it runs when
//! the worker has served every request it had ready and sleeps, or at the end of the running
//! thread's time slice, as Redis's event loop syncs its append-only file once it has served
//! what its sockets hold. Each sync then carries the whole group (50 commits per `fdatasync`,
//! +20 % SADD/s in the same measurement). The same share of a busy CPU, only later; with an
//! idle CPU beside the worker's, nothing changes.
//!
//! Why it is not the default: while a CPU-bound thread holds the CPU, a `SCHED_BATCH` thread
//! waits for that thread's time slice to end, which the kernel checks at its tick (4 ms here,
//! `HZ=250`), at each of a commit's wake-ups; and a checkpoint is such a thread for about a
//! second. The SET rounds a checkpoint ran in had a p99 of 10 ms against 2–6 ms, and half
//! seconds at 0.08–0.23 of the median. Two ways around it failed (the bench README has them):
//! the checkpointer offering the CPU (`sched_yield`, which on this kernel pushes a thread
//! that never sleeps further back each time: the demo's checkpoints fell behind its log
//! switches), and a checkpointer at `SCHED_IDLE` while routine (better until its checkpoint is
//! due, then as before).
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
    Batch,
    /// The kernel's default policy (`SCHED_OTHER`): a woken log writer thread may preempt the
    /// sessions' worker at once.
    #[default]
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
    use super::*;

    #[test]
    fn each_policy_is_the_one_the_thread_gets() {
        let policy = |scheduling: Scheduling| {
            std::thread::spawn(move || {
                scheduling.apply_to_this_thread();
                // SAFETY: a plain system call; 0 is the calling thread.
                unsafe { libc::sched_getscheduler(0) }
            })
            .join()
            .unwrap()
        };
        assert_eq!(policy(Scheduling::Batch), libc::SCHED_BATCH);
        assert_eq!(policy(Scheduling::Normal), libc::SCHED_OTHER);
        assert_eq!(Scheduling::default(), Scheduling::Normal);
    }
}
