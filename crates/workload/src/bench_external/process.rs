//! The processes this benchmark runs: servers it starts and stops by their PID (`Daemon`),
//! and commands run to completion within a time bound.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::STOP_TIMEOUT;

/// A server process this benchmark started; stopped by its PID when dropped.
pub(super) struct Daemon {
    what: String,
    child: Option<Child>,
    stop_signal: libc::c_int,
    log: PathBuf,
}

impl Daemon {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub(super) fn spawn(
        what: &str,
        mut command: Command,
        log: &Path,
        stop_signal: libc::c_int,
    ) -> anyhow::Result<Daemon> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        Ok(Daemon { what: what.into(), child: Some(child), stop_signal, log: log.into() })
    }

    /// Fails, quoting its log, if the process has exited.
    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(child) = &mut self.child
            && let Some(status) = child.try_wait()?
        {
            self.child = None;
            anyhow::bail!(
                "{} exited with {status}; its log ends with:\n{}",
                self.what,
                log_tail(&self.log, 15)
            );
        }
        Ok(())
    }

    /// Sends the stop signal, waits up to [`STOP_TIMEOUT`], then kills.
    pub(super) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        // SAFETY: a signal to our own child, by its PID; it has not been reaped (try_wait
        // above saw it running), so the PID is still its.
        unsafe { libc::kill(child.id() as libc::pid_t, self.stop_signal) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!(what = self.what, "did not stop within 30 s of its signal; killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of a log file.
fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs a command to completion with its output captured, killing it after `timeout`.
pub(super) fn run_bounded(mut command: Command, timeout: Duration) -> anyhow::Result<Output> {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {shown}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("{shown} did not finish within {timeout:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(Output { status, stdout, stderr })
}

/// Like [`run_bounded`], failing with its stderr unless it succeeds; returns its stdout.
pub(super) fn run_ok(command: Command, timeout: Duration) -> anyhow::Result<String> {
    let shown = format!("{command:?}");
    let output = run_bounded(command, timeout)?;
    anyhow::ensure!(
        output.status.success(),
        "{shown} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Polls `check` every 100 ms until it returns true, for at most `timeout`.
pub(super) fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        crate::interrupt::check()?;
        if check()? {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
