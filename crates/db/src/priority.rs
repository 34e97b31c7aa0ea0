//! The checkpointer thread's CPU priority: lower than the sessions' while nobody waits for its
//! checkpoint, its own again as soon as somebody does.
//!
//! Why: a checkpoint of a few hundred thousand random keys takes about a second of CPU
//! (redb rewrites nearly every leaf), and on a host whose cores the sessions keep busy it took
//! half of them while it ran: the rate of a durable SET at 50 clients fell to 0.46 of its
//! median for a second at every checkpoint. A routine checkpoint has time (it starts at a log
//! switch, and its group is needed only after the next ones fill), so it yields the CPU to
//! the sessions; with cores to spare the priority changes nothing.
//!
//! Why this cannot starve what waits for it: whoever waits for a checkpoint (the log writer
//! at a log switch, writers at `dirty_bytes_max`, a role change) marks it urgent, and the
//! checkpointer then takes its own priority back within a few hundred rows; so it does as soon
//! as the next checkpoint is due (a log switch, or `checkpoint_dirty_bytes` of changes, since
//! it began), before anybody has to wait: at a high redo rate (the demo's batch, a switch
//! every 336 ms) a lowered checkpoint had otherwise made the switches wait for it (10 waits,
//! up to 116 ms, where there were none). Taking it back
//! (lowering the nice value) needs `CAP_SYS_NICE` or a `RLIMIT_NICE` that allows it
//! (systemd's `LimitNICE=`); without either it stays at the lower priority, which costs only
//! when the CPU is busy with work other than the sessions that wait (they use no CPU while
//! they wait). The server warns once if so.
//!
//! Linux applies `setpriority(PRIO_PROCESS, tid)` to one thread; elsewhere this does nothing.

use std::sync::atomic::{AtomicBool, Ordering};

/// Said once per process: an urgent checkpoint could not take its priority back.
static WARNED: AtomicBool = AtomicBool::new(false);

/// The calling thread's nice value: its own at creation, and the lower priority it takes
/// while its checkpoints are routine.
#[derive(Debug)]
pub(crate) struct Priority {
    /// The thread's nice value when it started (the process's).
    base: i32,
    /// Added to `base` while nobody waits (`[db] checkpoint_nice`); 0: never changed.
    lower_by: i32,
    /// Whether the thread is at the lower priority now.
    lowered: bool,
    /// Taking the priority back was refused: it stays lowered, and is not tried again.
    stuck: bool,
}

impl Priority {
    /// For the calling thread, with `lower_by` (0..=19) added to its nice value while it is
    /// in the background.
    pub(crate) fn of_this_thread(lower_by: i32) -> Priority {
        Priority { base: current().unwrap_or(0), lower_by, lowered: false, stuck: false }
    }

    /// The priority for a checkpoint nobody waits for yet.
    pub(crate) fn background(&mut self) {
        if self.lowered || self.lower_by == 0 {
            return;
        }
        if set((self.base + self.lower_by).min(19)) {
            self.lowered = true;
        }
    }

    /// The thread's own priority: somebody waits for its checkpoint.
    pub(crate) fn foreground(&mut self) {
        if !self.lowered || self.stuck {
            return;
        }
        if set(self.base) {
            self.lowered = false;
        } else {
            // Not permitted: stay where it is (and do not try again for every row).
            self.stuck = true;
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the checkpointer could not take its CPU priority back for a checkpoint somebody waits for (needs CAP_SYS_NICE or RLIMIT_NICE, systemd's LimitNICE=); it runs at nice {} until the server restarts; set [db] checkpoint_nice = 0 to keep it at the server's own",
                    (self.base + self.lower_by).min(19)
                );
            }
        }
    }

    /// Whether the thread runs at the lower priority now (and may take its own back).
    pub(crate) fn lowered(&self) -> bool {
        self.lowered && !self.stuck
    }
}

#[cfg(target_os = "linux")]
fn tid() -> libc::id_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as libc::id_t }
}

/// The calling thread's nice value.
#[cfg(target_os = "linux")]
fn current() -> Option<i32> {
    // getpriority returns -1 both for nice -1 and for an error: errno tells them apart.
    // SAFETY: errno is this thread's; getpriority reads no memory of ours.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid());
        if nice == -1 && *libc::__errno_location() != 0 { None } else { Some(nice) }
    }
}

/// Sets the calling thread's nice value; false if refused.
#[cfg(target_os = "linux")]
fn set(nice: i32) -> bool {
    // SAFETY: setpriority on this thread's id reads no memory of ours.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid(), nice) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn current() -> Option<i32> {
    None
}

#[cfg(not(target_os = "linux"))]
fn set(_nice: i32) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A thread lowers its own priority, and only its own; as root (CI) it takes it back.
    #[test]
    fn a_thread_lowers_its_own_priority_and_takes_it_back_when_permitted() {
        let before = current().expect("nice value");
        let (lowered, after) = std::thread::spawn(move || {
            let mut priority = Priority::of_this_thread(10);
            priority.background();
            let lowered = current().expect("nice value");
            priority.foreground();
            (lowered, current().expect("nice value"))
        })
        .join()
        .expect("thread");
        assert_eq!(lowered, (before + 10).min(19), "the checkpointer's thread is lowered");
        assert_eq!(current(), Some(before), "the thread that started it is not");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(after, before, "root takes the priority back");
        }
    }

    #[test]
    fn nothing_changes_when_the_setting_is_zero() {
        std::thread::spawn(|| {
            let before = current();
            let mut priority = Priority::of_this_thread(0);
            priority.background();
            assert!(!priority.lowered());
            assert_eq!(current(), before);
        })
        .join()
        .expect("thread");
    }
}
