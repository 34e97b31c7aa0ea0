//! Which CPUs a benchmark's processes run on.
//!
//! On one machine the load generator shares the CPUs with the servers it measures, and where
//! the scheduler puts their threads becomes part of the result. In production the client runs
//! on a host of its own, so [`Cpus::split`] gives the client a CPU of its own (the last one
//! this process may use) and the servers the rest; `bench resp` runs its durable SET both
//! that way and with everything free to run anywhere, alternating the two (docs/bench/README.md
//! has what each gave). The separation is only as good as the CPUs are apart: two vCPUs may be
//! two hyperthreads of one core, and in a container with a CPU quota the affinity shows CPUs
//! the quota does not give.
//!
//! Affinity is set per thread (`sched_setaffinity`); a thread created later inherits its
//! creator's, so setting every thread of a running server moves the whole process.

use std::io;
use std::process::Command;

/// A set of CPUs, by number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cpus(pub Vec<usize>);

impl Cpus {
    /// The CPUs the calling thread may run on (those of the process, unless the thread was
    /// moved: the threads a process starts inherit their creator's).
    pub fn allowed() -> io::Result<Cpus> {
        // SAFETY: `set` is a properly sized, zeroed cpu_set_t that the kernel fills.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let result = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
        let cpus = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE, the set's size.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect();
        Ok(Cpus(cpus))
    }

    /// The client's CPU (the last) and the servers' (the others), or `None` with fewer than 2.
    pub fn split(&self) -> Option<(Cpus, Cpus)> {
        let (last, rest) = self.0.split_last()?;
        (!rest.is_empty()).then(|| (Cpus(vec![*last]), Cpus(rest.to_vec())))
    }

    fn to_set(&self) -> libc::cpu_set_t {
        // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET is given CPUs below its size.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in self.0.iter().filter(|&&cpu| cpu < libc::CPU_SETSIZE as usize) {
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        set
    }

    /// Moves every thread of process `pid` to these CPUs. Two passes over its threads: one
    /// started during the first, from a thread not yet moved, is moved by the second. Meant for
    /// servers whose threads start with them, not for a process busy starting threads.
    pub fn apply_to_process(&self, pid: u32) -> io::Result<()> {
        let set = self.to_set();
        for _ in 0..2 {
            for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
                let Some(tid) = entry?.file_name().to_str().and_then(|tid| tid.parse().ok()) else {
                    continue;
                };
                // SAFETY: `set` is a valid cpu_set_t of the size passed.
                let result =
                    unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set) };
                if result != 0 {
                    let error = io::Error::last_os_error();
                    // A thread that ended between the listing and the call.
                    if error.raw_os_error() != Some(libc::ESRCH) {
                        return Err(io::Error::new(
                            error.kind(),
                            format!("setting the CPUs of thread {tid} of process {pid}: {error}"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes `command`'s process start on these CPUs.
    pub fn apply_to_command(&self, command: &mut Command) {
        use std::os::unix::process::CommandExt as _;
        let set = self.to_set();
        // SAFETY: between fork and exec the closure allocates nothing and takes no lock: one
        // sched_setaffinity, a plain system call (glibc's wrapper only passes it on), and
        // errno read on failure.
        unsafe {
            command.pre_exec(move || {
                if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// "0", "0-2", "0,2": as taskset and /proc show CPU lists.
    pub fn list(&self) -> String {
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for &cpu in &self.0 {
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == cpu => *end = cpu,
                _ => ranges.push((cpu, cpu)),
            }
        }
        ranges
            .iter()
            .map(
                |&(start, end)| {
                    if start == end { start.to_string() } else { format!("{start}-{end}") }
                },
            )
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The CPUs process `pid`'s thread `tid` may run on, from /proc.
#[cfg(test)]
fn of_thread(pid: u32, tid: u32) -> io::Result<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .map(|list| list.trim().to_string())
        .ok_or_else(|| io::Error::other(format!("no Cpus_allowed_list in /proc/{pid}/task/{tid}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_gets_the_last_cpu_and_the_servers_the_others() {
        assert_eq!(Cpus(vec![0, 1, 2, 5]).split(), Some((Cpus(vec![5]), Cpus(vec![0, 1, 2]))));
        assert_eq!(Cpus(vec![3]).split(), None);
        assert_eq!(Cpus(vec![]).split(), None);
        assert_eq!(Cpus(vec![0, 1, 2, 5, 7, 8]).list(), "0-2,5,7-8");
        assert_eq!(Cpus(vec![1]).list(), "1");
    }

    /// A real process moved while it runs, and a process it starts afterwards inheriting its
    /// CPUs, as the kernel reports them; then back on all of them. And a command started on
    /// the client's CPU.
    #[test]
    fn every_thread_of_a_running_process_moves_and_a_command_starts_where_told() {
        let allowed = Cpus::allowed().unwrap();
        let Some((client, servers)) = allowed.split() else {
            eprintln!("one CPU: nothing to place");
            return;
        };
        // A shell with a background sleep: two processes; the shell's own thread is the one
        // moved here, and the sleep it starts afterwards inherits the shell's CPUs.
        let mut child = Command::new("sh")
            .args(["-c", "read line; sleep 5 & echo $!; wait"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        servers.apply_to_process(pid).unwrap();
        assert_eq!(of_thread(pid, pid).unwrap(), servers.list());
        use std::io::{BufRead as _, Write as _};
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let sleeper: u32 = line.trim().parse().unwrap();
        assert_eq!(of_thread(sleeper, sleeper).unwrap(), servers.list());
        allowed.apply_to_process(pid).unwrap();
        assert_eq!(of_thread(pid, pid).unwrap(), allowed.list());
        let _ = Command::new("kill").arg(sleeper.to_string()).status();
        let _ = child.kill();
        let _ = child.wait();

        let mut command = Command::new("sh");
        command.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        client.apply_to_command(&mut command);
        let output = command.output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(text.split(':').nth(1).map(str::trim), Some(client.list().as_str()), "{text}");
    }
}
