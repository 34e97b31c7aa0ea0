//! What every trial of `bench failover` does with processes and time: where they run (loopback
//! or a site of the mesh), a child process killed when its guard drops, polling with a bound,
//! and the event itself with the writers' measures around it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::writers::{self, Ack};
use super::{AFTER, SITE_CLIENTS, Sample, WARM};

/// Where a trial's processes run: all on this host's loopback, or each in its site of the
/// mesh (this thread then runs in the clients' site).
#[derive(Clone, Copy)]
pub(crate) enum Place<'a> {
    Loopback,
    Mesh(&'a linkemu::Mesh),
}

impl<'a> Place<'a> {
    /// The address a process in `site` listens on.
    pub(super) fn host(self, site: usize) -> Ipv4Addr {
        match self {
            Place::Loopback => Ipv4Addr::LOCALHOST,
            Place::Mesh(mesh) => mesh.address(site),
        }
    }

    /// A command that runs `program` in `site`.
    pub(super) fn command(self, site: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match self {
            Place::Loopback => Command::new(program),
            Place::Mesh(mesh) => mesh.command(site, program),
        }
    }

    /// The namespace the writers run in.
    pub(super) fn clients_namespace(self) -> Option<String> {
        match self {
            Place::Loopback => None,
            Place::Mesh(mesh) => Some(mesh.namespace(SITE_CLIENTS).to_string()),
        }
    }

    /// Cuts `site` from `others` until the guard drops.
    pub(super) fn cut(self, site: usize, others: &[usize]) -> Cut<'a> {
        let Place::Mesh(mesh) = self else { panic!("a cut needs the mesh") };
        mesh.cut_from(site, others);
        Cut(mesh)
    }
}

/// Restores every link of the mesh when dropped.
pub(super) struct Cut<'a>(&'a linkemu::Mesh);

impl Drop for Cut<'_> {
    fn drop(&mut self) {
        self.0.restore_all();
    }
}

/// A process this benchmark started (the observer, a Sentinel); killed by its PID when
/// dropped.
pub(crate) struct Spawned {
    what: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Spawned {
    /// Starts `command`, its output appended to `log`; with `ready`, returns once a line of
    /// its standard output contains it (120 s at most).
    pub(super) fn start(
        what: &str,
        mut command: Command,
        log: &Path,
        ready: Option<&str>,
    ) -> anyhow::Result<Spawned> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let stdout = if ready.is_some() { Stdio::piped() } else { Stdio::from(file.try_clone()?) };
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let mut spawned = Spawned { what: what.into(), child: Some(child), log: log.into() };
        if let Some(marker) = ready {
            let stdout = spawned.child.as_mut().and_then(|child| child.stdout.take());
            let (sender, receiver) = std::sync::mpsc::channel();
            let (marker, log) = (marker.to_string(), log.to_path_buf());
            std::thread::spawn(move || {
                use std::io::{BufRead as _, Write as _};
                let Some(stdout) = stdout else { return };
                let mut file = std::fs::OpenOptions::new().append(true).open(log).ok();
                // Keeps draining, so that the process never blocks on a full pipe.
                for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(file) = &mut file {
                        let _ = writeln!(file, "{line}");
                    }
                    if line.contains(&marker) {
                        let _ = sender.send(());
                    }
                }
            });
            if receiver.recv_timeout(Duration::from_secs(120)).is_err() {
                spawned.kill();
                anyhow::bail!(
                    "{what} did not become ready; its log ends with:\n{}",
                    spawned.tail()
                );
            }
        }
        Ok(spawned)
    }

    /// SIGKILL, and waits for it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The end of its log.
    pub(super) fn tail(&self) -> String {
        log_tail(&self.log, 15)
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.child.is_some() {
            tracing::debug!(what = self.what, "stopping");
        }
        self.kill();
    }
}

/// The last `lines` lines of a log file.
pub(super) fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Polls `condition` every 20 ms until it holds or `limit` passes (or a stop is asked for).
pub(super) fn wait_until(
    what: &str,
    limit: Duration,
    mut condition: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    let mut last_error = None;
    loop {
        crate::interrupt::check()?;
        match condition() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => last_error = Some(error),
        }
        if Instant::now() > deadline {
            return Err(match last_error {
                Some(error) => error.context(format!("{what}: not within {limit:?}")),
                None => anyhow::anyhow!("{what}: not within {limit:?}"),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The writers' part of a trial once the system is ready: a steady load, the event, the new
/// primary's first acknowledged write, a little more, then the measures. `event` does the
/// kill, cut or command and returns when it started, its guard (a cut lasts while it lives)
/// and how long a command took.
pub(super) fn measure_event<G>(
    writers: writers::Writers,
    new_primary: SocketAddr,
    limit: Duration,
    event: impl FnOnce() -> anyhow::Result<(Instant, G, Option<f64>)>,
) -> anyhow::Result<Sample> {
    anyhow::ensure!(
        writers.warm(100, WARM, Duration::from_secs(30)),
        "the writers did not get 100 writes acknowledged within 30 s ({} errors)",
        writers.errors()
    );
    let (started, guard, command_s) = event()?;
    wait_until("the new primary acknowledging a write", limit, || {
        Ok(writers.first_ack_by(new_primary).is_some())
    })?;
    std::thread::sleep(AFTER);
    let errors = writers.errors();
    let acks = writers.stop()?;
    drop(guard);
    let (without, to_new) = outage(&acks, new_primary, started)
        .context("the new primary acknowledged nothing after the event")?;
    let lost = writers::missing(new_primary, &acks)?;
    Ok(Sample {
        without_writes_s: without,
        to_new_primary_s: to_new,
        command_s,
        acknowledged: acks.len() as u64,
        lost,
        errors,
        note: None,
    })
}

/// From the writers' records: (the longest the writers went without an acknowledged write
/// before the new primary's first, the time from `event` to that first one), in seconds.
/// `None` if the new primary acknowledged nothing after `event`.
pub(crate) fn outage(acks: &[Ack], new_primary: SocketAddr, event: Instant) -> Option<(f64, f64)> {
    let first_new = acks
        .iter()
        .filter(|ack| ack.server == new_primary && ack.at >= event)
        .map(|ack| ack.at)
        .min()?;
    let last_before = acks
        .iter()
        .filter(|ack| ack.server != new_primary && ack.at < first_new)
        .map(|ack| ack.at)
        .max()
        .unwrap_or(event);
    Some((
        first_new.duration_since(last_before).as_secs_f64(),
        first_new.duration_since(event).as_secs_f64(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(server: SocketAddr, at: Instant) -> Ack {
        Ack { key: String::new(), server, at }
    }

    #[test]
    fn outage_runs_from_the_last_write_before_the_new_primary_took_one() {
        let (old, new): (SocketAddr, SocketAddr) =
            ("127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Old writes until 100 ms, the event at 150 ms, the new primary from 900 ms.
        let acks = vec![ack(old, at(50)), ack(old, at(100)), ack(new, at(900)), ack(new, at(950))];
        let (without, to_new) = outage(&acks, new, at(150)).unwrap();
        assert!((without - 0.8).abs() < 1e-9 && (to_new - 0.75).abs() < 1e-9);
        // An old primary that goes on acknowledging (a cut Redis): no pause at all.
        let acks = vec![ack(old, at(100)), ack(old, at(899)), ack(new, at(900))];
        let (without, to_new) = outage(&acks, new, at(150)).unwrap();
        assert!((without - 0.001).abs() < 1e-9 && (to_new - 0.75).abs() < 1e-9);
        assert!(outage(&acks[..2], new, at(150)).is_none());
    }
}
