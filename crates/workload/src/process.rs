//! A redoguard server as a child process: started from the `redoguard` binary, stopped with
//! SIGTERM, or killed with SIGKILL as a crash would.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

pub struct ServerProcess {
    child: Option<Child>,
    pub resp_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// A standby's redo listener.
    pub redo_addr: Option<SocketAddr>,
    pub log: PathBuf,
}

impl ServerProcess {
    /// Starts `binary server` with `args` (ports 0 unless given), its log in `log`; returns
    /// once it is ready for clients.
    pub fn start(binary: &Path, args: &[&str], log: &Path) -> anyhow::Result<ServerProcess> {
        ServerProcess::start_command(Command::new(binary), args, log)
    }

    /// Like [`ServerProcess::start`], with `command` running the binary (inside a network
    /// namespace through `ip netns exec`, say, which execs it: the child is the server).
    pub fn start_command(
        mut command: Command,
        args: &[&str],
        log: &Path,
    ) -> anyhow::Result<ServerProcess> {
        let shown = format!("{:?}", command.get_program());
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        command.arg("server");
        if !args.contains(&"--port") {
            command.args(["--port", "0"]);
        }
        if !args.contains(&"--admin-port") {
            command.args(["--admin-port", "0"]);
        }
        command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log_file);
        let mut child = command.spawn().with_context(|| format!("cannot start {shown}"))?;
        let stdout = child.stdout.take().expect("piped");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = sender.send(line);
            }
            // Keep draining so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match receiver.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let tail = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> =
                    tail.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev().collect();
                anyhow::bail!(
                    "the server did not become ready; its log ends with:\n{}",
                    tail.join("\n")
                );
            }
        };
        let address = |marker: &str| -> anyhow::Result<SocketAddr> {
            let start = line
                .find(marker)
                .map(|at| at + marker.len())
                .with_context(|| format!("unexpected ready line: {line}"))?;
            let text: String = line[start..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                .collect();
            text.parse().with_context(|| format!("unexpected address in: {line}"))
        };
        let redo_addr =
            if line.contains(", redo on ") { Some(address(", redo on ")?) } else { None };
        Ok(ServerProcess {
            resp_addr: address("RESP on ")?,
            // `http://` or, with `tls.admin`, `https://`.
            admin_addr: address(if line.contains("admin on https://") {
                "admin on https://"
            } else {
                "admin on http://"
            })?,
            redo_addr,
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: the server stops between two instructions, as in a crash.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("killing the server")?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERM, then waits for a clean stop (final checkpoint included).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            // SAFETY: sending a signal to our own child, by its PID.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(status) = child.try_wait()? {
                    anyhow::ensure!(
                        status.success(),
                        "the server exited with {status}; see {}",
                        self.log.display()
                    );
                    return Ok(());
                }
                if Instant::now() > deadline {
                    child.kill()?;
                    child.wait()?;
                    anyhow::bail!("the server did not stop within 60 s of SIGTERM; killed it");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// The admin API's status.
    pub fn status(&self) -> anyhow::Result<admin::ServerStatus> {
        status_at(self.admin_addr)
    }
}

/// The status of the server whose admin API is at `admin_addr`.
pub fn status_at(admin_addr: SocketAddr) -> anyhow::Result<admin::ServerStatus> {
    let body = admin::http_get(&admin_addr.to_string(), "/status", Duration::from_secs(10))?;
    serde_json::from_str(&body).with_context(|| format!("the status from {admin_addr}"))
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// The CPU time (user + system) a process has used, in seconds: /proc/PID/stat's utime and
/// stime, in clock ticks (10 ms on most kernels; a 5 s case at thousands of commits a second
/// holds hundreds of ticks).
pub(crate) fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// The CPU time (user + system, seconds) of each of process `pid`'s threads, added up by
/// thread name (the kernel keeps the first 15 bytes of a name): where the process's time
/// went. A thread that ends between the listing and the read is left out.
pub(crate) fn thread_cpu_seconds(pid: u32) -> anyhow::Result<BTreeMap<String, f64>> {
    let dir = format!("/proc/{pid}/task");
    let mut by_name = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let task = entry.with_context(|| format!("listing {dir}"))?.path();
        let (Ok(name), Ok(seconds)) = (
            std::fs::read_to_string(task.join("comm")),
            stat_cpu_seconds(&task.join("stat").display().to_string()),
        ) else {
            continue;
        };
        *by_name.entry(name.trim_end().to_string()).or_insert(0.0) += seconds;
    }
    Ok(by_name)
}

/// What each thread name gained from `before` to `after` (`thread_cpu_seconds`): a name new
/// in `after` counts whole.
pub(crate) fn threads_since(
    before: &BTreeMap<String, f64>,
    after: BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .into_iter()
        .map(|(name, seconds)| {
            let earlier = before.get(&name).copied().unwrap_or(0.0);
            (name, (seconds - earlier).max(0.0))
        })
        .collect()
}

/// The per-thread figures of several measurements added up, each name divided by `per`
/// (None if there is nothing, or nothing to divide by).
pub(crate) fn threads_summed<'a>(
    measured: impl IntoIterator<Item = &'a BTreeMap<String, f64>>,
    per: f64,
) -> Option<BTreeMap<String, f64>> {
    let mut sum = BTreeMap::<String, f64>::new();
    for threads in measured {
        for (name, value) in threads {
            *sum.entry(name.clone()).or_insert(0.0) += value;
        }
    }
    (per > 0.0 && !sum.is_empty())
        .then(|| sum.into_iter().map(|(name, value)| (name, value / per)).collect())
}

/// utime + stime of a /proc `stat` file, in seconds.
fn stat_cpu_seconds(path: &str) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    // The command name, in parentheses, may hold spaces: the fields follow its last `)`,
    // from field 3 (state) on; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| -> anyhow::Result<u64> {
        fields
            .get(index)
            .and_then(|field| field.parse().ok())
            .with_context(|| format!("no CPU time in {path}: {text:?}"))
    };
    let total = ticks(11)? + ticks(12)?;
    Ok(total as f64 / clock_ticks_per_second()?)
}

/// The unit of /proc's CPU times: clock ticks a second.
fn clock_ticks_per_second() -> anyhow::Result<f64> {
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    anyhow::ensure!(per_second > 0, "sysconf(_SC_CLK_TCK) gave {per_second}");
    Ok(per_second as f64)
}

/// The whole machine's CPU time so far, from /proc/stat's first line: every process's and the
/// kernel's, in clock ticks summed over all CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MachineCpu {
    /// Ticks in use: all but idle and iowait.
    pub busy: u64,
    /// All ticks, idle included.
    pub total: u64,
    /// The CPUs the ticks are summed over (its `cpuN` lines).
    pub cpus: u32,
}

impl MachineCpu {
    pub(crate) fn now() -> anyhow::Result<MachineCpu> {
        let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        MachineCpu::parse(&text)
    }

    /// The first line: `cpu  user nice system idle iowait irq softirq steal guest
    /// guest_nice`. Busy is user through softirq; steal (the hypervisor ran someone else)
    /// counts in all the time but not as busy; guest time is already inside user and nice.
    pub(crate) fn parse(text: &str) -> anyhow::Result<MachineCpu> {
        let line = text.lines().next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        anyhow::ensure!(fields.next() == Some("cpu"), "/proc/stat begins {line:?}, not \"cpu\"");
        let ticks: Vec<u64> = fields
            .take(8)
            .map(|field| field.parse().with_context(|| format!("/proc/stat: {line:?}")))
            .collect::<anyhow::Result<_>>()?;
        anyhow::ensure!(ticks.len() >= 5, "/proc/stat: too few fields in {line:?}");
        let total: u64 = ticks.iter().sum();
        let idle = ticks[3] + ticks[4] + ticks.get(7).copied().unwrap_or(0);
        let cpus = text
            .lines()
            .filter(|line| {
                line.strip_prefix("cpu")
                    .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count() as u32;
        anyhow::ensure!(cpus > 0, "/proc/stat lists no cpuN line");
        Ok(MachineCpu { busy: total - idle, total, cpus })
    }

    /// What was used from `before` to this reading: the busy CPU seconds, and their share of
    /// all the CPUs' time (0..=1).
    pub(crate) fn since(&self, before: &MachineCpu) -> anyhow::Result<(f64, f64)> {
        let busy = self.busy.saturating_sub(before.busy);
        let total = self.total.saturating_sub(before.total);
        Ok((busy as f64 / clock_ticks_per_second()?, busy as f64 / total.max(1) as f64))
    }
}

/// Whether every thread of `pid` is stopped (`T`, `t`, from `/proc/PID/task/TID/stat`) or is
/// exiting (`Z`, `X`: a runtime's idle thread may end meanwhile): a SIGSTOP has taken hold.
pub fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    let mut any = false;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // The state follows the command name, which is in parentheses and may hold any byte.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        if !matches!(state, Some('T' | 't' | 'Z' | 'X')) {
            return false;
        }
        any = true;
    }
    any
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{MachineCpu, thread_cpu_seconds, threads_since, threads_summed};

    #[test]
    fn thread_figures_subtract_and_add_up_by_name() {
        let map = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(name, value)| (name.to_string(), *value)).collect()
        };
        // A thread new since `before` counts whole; one gone is left out.
        let gained = threads_since(
            &map(&[("worker", 1.0), ("gone", 5.0)]),
            map(&[("worker", 1.5), ("new", 0.25)]),
        );
        assert_eq!(gained, map(&[("worker", 0.5), ("new", 0.25)]));
        let summed =
            threads_summed([&gained, &map(&[("worker", 0.5)])], 0.5).expect("something to sum");
        assert_eq!(summed, map(&[("worker", 2.0), ("new", 0.5)]));
        assert_eq!(threads_summed([&gained], 0.0), None);
        assert_eq!(threads_summed([], 1.0), None);
    }

    #[test]
    fn a_busy_thread_shows_under_its_name_and_an_idle_one_does_not_gain() {
        let pid = std::process::id();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spawn = |name: &str, busy: bool| {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if !busy {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                    }
                })
                .unwrap()
        };
        // Longer than 15 bytes: the kernel keeps the first 15.
        let threads = [spawn("cpu-test-busy-thread", true), spawn("cpu-test-idle", false)];
        // Each thread names itself once it runs: on a loaded machine that took longer than the
        // 50 ms this waited (CI, 2026-11-30: "no entry found for key").
        let started = std::time::Instant::now();
        let named = |cpu: &std::collections::BTreeMap<String, f64>| {
            cpu.contains_key("cpu-test-busy-t") && cpu.contains_key("cpu-test-idle")
        };
        let mut before = thread_cpu_seconds(pid).unwrap();
        while !named(&before) {
            assert!(started.elapsed().as_secs() < 60, "the threads never named themselves");
            std::thread::sleep(std::time::Duration::from_millis(10));
            before = thread_cpu_seconds(pid).unwrap();
        }
        let started = std::time::Instant::now();
        // At least 0.3 s of the busy thread's CPU: 30 ticks at 100 a second.
        let mut after = before.clone();
        while after.get("cpu-test-busy-t").copied().unwrap_or(0.0)
            - before.get("cpu-test-busy-t").copied().unwrap_or(0.0)
            < 0.3
        {
            assert!(started.elapsed().as_secs() < 60, "the busy thread got no CPU: {after:?}");
            std::thread::sleep(std::time::Duration::from_millis(50));
            after = thread_cpu_seconds(pid).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in threads {
            thread.join().unwrap();
        }
        let gained = |name: &str| after[name] - before[name];
        assert!(gained("cpu-test-idle") < 0.1, "{before:?} then {after:?}");
        // The threads' sum is the process's (both from the same ticks).
        let total: f64 = after.values().sum();
        let process = super::cpu_seconds(pid).unwrap();
        assert!(total <= process + 0.05, "threads {total} s, process {process} s");
        assert!(thread_cpu_seconds(u32::MAX).is_err());
    }

    #[test]
    fn machine_cpu_reads_proc_stat() {
        let text = "cpu  100 5 50 760 40 3 2 40 7 0\ncpu0 50 0 25 400 20 1 1 0 0 0\ncpu1 50 5 25 400 20 2 1 0 0 0\nintr 1\n";
        let cpu = MachineCpu::parse(text).unwrap();
        assert_eq!(cpu, MachineCpu { busy: 160, total: 1000, cpus: 2 });
        let later = MachineCpu { busy: 260, total: 1400, cpus: 2 };
        let (_, share) = later.since(&cpu).unwrap();
        assert!((share - 0.25).abs() < 1e-9, "{share}");
        assert!(MachineCpu::parse("intr 1\n").is_err());
        assert!(MachineCpu::parse("cpu 1 2 x 4 5\ncpu0 1 2 3 4 5\n").is_err());
        // The real file parses, and time only goes forward.
        let now = MachineCpu::now().unwrap();
        assert!(now.cpus >= 1 && now.total >= now.busy);
    }
}
