//! The processes and file systems a campaign makes, each behind a guard that undoes it however
//! the campaign ends: a child process (a member or an observer, started in its site) killed by
//! its PID, paused and resumed; and a tmpfs (a member's data directory) unmounted.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::process::all_threads_stopped;

/// How long a process may take to say it is ready.
const READY_LIMIT: Duration = Duration::from_secs(60);
/// How long SIGSTOP may take to stop every thread of a process.
const STOP_LIMIT: Duration = Duration::from_secs(5);

/// A child process of this one; SIGKILL by its PID when dropped.
pub(crate) struct Process {
    what: String,
    child: Option<Child>,
    paused: bool,
}

impl Process {
    /// Starts `command`, its standard output and error appended to `log`, and returns once a
    /// line of its standard output contains `ready` (or fails if it exits first, or takes
    /// longer than a minute).
    pub(crate) fn start(
        what: &str,
        mut command: Command,
        log: &Path,
        ready: &str,
    ) -> anyhow::Result<Process> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let mut process = Process { what: what.into(), child: Some(child), paused: false };
        let stdout = process.child.as_mut().and_then(|child| child.stdout.take());
        let (sender, receiver) = std::sync::mpsc::channel();
        let (marker, log_path) = (ready.to_string(), log.to_path_buf());
        std::thread::spawn(move || {
            let Some(stdout) = stdout else { return };
            let mut file = std::fs::OpenOptions::new().append(true).open(log_path).ok();
            // Keeps draining, so that the process never blocks on a full pipe.
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(file) = &mut file {
                    let _ = writeln!(file, "{line}");
                }
                if line.contains(&marker) {
                    let _ = sender.send(true);
                }
            }
            let _ = sender.send(false);
        });
        match receiver.recv_timeout(READY_LIMIT) {
            Ok(true) => Ok(process),
            Ok(false) => {
                process.kill();
                anyhow::bail!(
                    "{what} exited before it was ready; its log ends with:\n{}",
                    tail(log, 10)
                )
            }
            Err(_) => {
                process.kill();
                anyhow::bail!(
                    "{what} did not become ready within {READY_LIMIT:?}; its log ends with:\n{}",
                    tail(log, 10)
                )
            }
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it has exited by itself (not killed by this guard).
    pub(crate) fn exited(&mut self) -> bool {
        self.child.as_mut().is_none_or(|child| child.try_wait().ok().flatten().is_some())
    }

    /// SIGKILL, and waits for it.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            tracing::debug!(what = self.what, "killed");
        }
        self.paused = false;
    }

    /// SIGSTOP, and waits until every thread has stopped (the kernel stops them one by one as
    /// each runs: until then a stopped standby could still acknowledge redo).
    pub(crate) fn pause(&mut self) -> anyhow::Result<()> {
        let pid = self.pid().with_context(|| format!("{} is not running", self.what))?;
        signal(pid, libc::SIGSTOP);
        self.paused = true;
        let deadline = Instant::now() + STOP_LIMIT;
        while !all_threads_stopped(pid) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} did not stop within {STOP_LIMIT:?} of SIGSTOP",
                self.what
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// SIGCONT, if paused.
    pub(crate) fn resume(&mut self) {
        if self.paused
            && let Some(pid) = self.pid()
        {
            signal(pid, libc::SIGCONT);
        }
        self.paused = false;
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a log.
pub(crate) fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: a signal to a child this process started and has not reaped (its PID is ours).
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

/// A tmpfs mounted by this process; unmounted when dropped (lazily if still busy).
pub(crate) struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `path` (created if missing). Needs root.
    pub(crate) fn mount(path: &Path, bytes: u64) -> anyhow::Result<Tmpfs> {
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .output()
            .context("cannot run mount")?;
        anyhow::ensure!(
            output.status.success(),
            "cannot mount a tmpfs on {} (root is needed): {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(Tmpfs { path: path.to_path_buf() })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Fills the file system to the last byte with `name` (returns the bytes written).
    pub(crate) fn fill(&self, name: &str) -> anyhow::Result<u64> {
        let path = self.path.join(name);
        let mut file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let chunk = vec![0xa5u8; 1 << 20];
        let mut written = 0u64;
        let mut size = chunk.len();
        // Whole chunks until one does not fit, then smaller ones down to a page.
        while size >= 4096 {
            match file.write(&chunk[..size]) {
                Ok(0) => break,
                Ok(wrote) => written += wrote as u64,
                Err(error) if error.raw_os_error() == Some(libc::ENOSPC) => size /= 2,
                Err(error) => {
                    return Err(error).with_context(|| format!("filling {}", path.display()));
                }
            }
        }
        Ok(written)
    }

    /// Removes what [`Tmpfs::fill`] wrote.
    pub(crate) fn free(&self, name: &str) {
        let _ = std::fs::remove_file(self.path.join(name));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted =
            Command::new("umount").arg(&self.path).status().is_ok_and(|status| status.success());
        if !unmounted {
            // Still busy (a process not quite gone): detach it now, freed once idle.
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_pauses_resumes_and_is_killed_by_its_guard() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sleep.log");
        let mut command = Command::new("sh");
        command.args(["-c", "echo now ready; exec sleep 60"]);
        let mut process = Process::start("a shell", command, &log, "ready").unwrap();
        let pid = process.pid().unwrap();
        assert!(!process.exited());
        process.pause().unwrap();
        assert!(process.paused && all_threads_stopped(pid));
        process.resume();
        assert!(!process.paused);
        drop(process);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "killed and reaped");
        assert!(std::fs::read_to_string(&log).unwrap().contains("now ready"));

        let mut command = Command::new("sh");
        command.args(["-c", "echo nothing; exit 3"]);
        let error = Process::start("a shell", command, &log, "ready").err().unwrap();
        assert!(error.to_string().contains("exited before it was ready"), "{error}");
    }
}
