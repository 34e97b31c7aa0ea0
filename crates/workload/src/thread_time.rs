//! A process's threads as Linux accounts for them (`/proc/PID/task/*`): the CPU time they
//! used (`stat`), and how long they were ready to run but waited for a CPU (`schedstat`). A
//! bench on a shared machine uses it to tell a thread that works from one that waits, and
//! what for: its own locks and queues (sleeping), or the other work on the machine (waiting
//! for a CPU).

use std::path::PathBuf;

/// CPU seconds (`utime + stime`) of a process's threads named `name`; `None` where `/proc`
/// cannot tell.
pub fn cpu_s(pid: u32, name: &str) -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks_per_s <= 0 {
        return None;
    }
    let mut ticks = 0u64;
    let mut found = false;
    for task in tasks(pid, name)? {
        let Ok(stat) = std::fs::read_to_string(task.join("stat")) else { continue };
        // After the `(comm)` field: state is field 3, utime 14 and stime 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |index: usize| fields.get(index)?.parse::<u64>().ok();
        ticks += field(11)? + field(12)?;
        found = true;
    }
    found.then(|| ticks as f64 / ticks_per_s as f64)
}

/// The task directories of a process's threads named `name`.
fn tasks(pid: u32, name: &str) -> Option<Vec<PathBuf>> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            found.push(task.path());
        }
    }
    Some(found)
}

/// One thread's scheduler times so far, in nanoseconds: on a CPU, and ready to run but
/// waiting for one (the first two fields of `schedstat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedTimes {
    pub on_cpu_ns: u64,
    pub waiting_ns: u64,
}

/// How a thread spent a stretch of wall-clock time, as shares of it (they sum to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub on_cpu: f64,
    /// Ready to run, but other threads had the CPUs.
    pub waiting_for_cpu: f64,
    /// Neither: blocked on a lock, a queue, a condition, I/O, or idle.
    pub sleeping: f64,
}

impl SchedTimes {
    /// The shares of `wall_s` seconds that ended with `self` and began with `before`.
    pub fn shares_since(&self, before: &SchedTimes, wall_s: f64) -> Option<Shares> {
        if wall_s <= 0.0 {
            return None;
        }
        let on_cpu = self.on_cpu_ns.saturating_sub(before.on_cpu_ns) as f64 / 1e9 / wall_s;
        let waiting = self.waiting_ns.saturating_sub(before.waiting_ns) as f64 / 1e9 / wall_s;
        // The readings are not taken at exactly the wall clock's instants: clamp the rounding.
        let (on_cpu, waiting) = (on_cpu.min(1.0), waiting.min(1.0 - on_cpu.min(1.0)));
        Some(Shares { on_cpu, waiting_for_cpu: waiting, sleeping: 1.0 - on_cpu - waiting })
    }
}

/// Reads one thread's `schedstat` again and again (its task directory found once).
#[derive(Debug, Clone)]
pub struct SchedReader {
    path: PathBuf,
}

impl SchedReader {
    /// The first thread of `pid` named `name`; `None` if there is none or `/proc` cannot tell.
    pub fn find(pid: u32, name: &str) -> Option<SchedReader> {
        let task = tasks(pid, name)?.into_iter().next()?;
        let reader = SchedReader { path: task.join("schedstat") };
        reader.read().map(|_| reader)
    }

    pub fn read(&self) -> Option<SchedTimes> {
        parse_schedstat(&std::fs::read_to_string(&self.path).ok()?)
    }
}

fn parse_schedstat(text: &str) -> Option<SchedTimes> {
    let mut fields = text.split_whitespace().map(|field| field.parse::<u64>().ok());
    Some(SchedTimes { on_cpu_ns: fields.next()??, waiting_ns: fields.next()?? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_is_read_and_split_into_shares_of_the_wall_clock() {
        assert_eq!(
            parse_schedstat("516750401 40963548 240\n"),
            Some(SchedTimes { on_cpu_ns: 516_750_401, waiting_ns: 40_963_548 })
        );
        assert_eq!(parse_schedstat("garbage"), None);
        let before = SchedTimes { on_cpu_ns: 1_000_000_000, waiting_ns: 0 };
        let after = SchedTimes { on_cpu_ns: 1_500_000_000, waiting_ns: 300_000_000 };
        let shares = after.shares_since(&before, 1.0).unwrap();
        assert!((shares.on_cpu - 0.5).abs() < 1e-9);
        assert!((shares.waiting_for_cpu - 0.3).abs() < 1e-9);
        assert!((shares.sleeping - 0.2).abs() < 1e-9);
        assert_eq!(after.shares_since(&before, 0.0), None);
    }

    #[test]
    fn this_threads_own_times_are_found_and_grow_with_work() {
        let name = "thread-time-t";
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let reader = SchedReader::find(std::process::id(), name).expect("found");
                let before = reader.read().unwrap();
                let started = std::time::Instant::now();
                let mut spin = 0u64;
                while started.elapsed() < std::time::Duration::from_millis(50) {
                    spin = spin.wrapping_add(1);
                }
                std::hint::black_box(spin);
                let after = reader.read().unwrap();
                (before, after)
            })
            .unwrap();
        let (before, after) = handle.join().unwrap();
        assert!(after.on_cpu_ns > before.on_cpu_ns, "{before:?} → {after:?}");
    }
}
