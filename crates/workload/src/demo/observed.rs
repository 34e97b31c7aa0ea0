//! The demo with a fast-start failover observer: two members (east, created as the primary,
//! and west, its standby) in the configuration form, and an observer whose Sentinel front the
//! sessions find the primary through. After the load: SIGKILL to the primary; the observer
//! fails over to west and the sessions carry on there; east restarts and the observer
//! reinstates it; a switchover gives east the primary role back; then every acknowledged
//! commit is checked on both and their data and archived logs compared.
//!
//! With `--far-sync`, a third member: the far sync `fs` between them. east ships SYNC AFFIRM
//! to `fs` only, which forwards to west; the observer's failover to west first seals `fs` and
//! takes the tail it holds (docs/fast-start-failover.md, "Targets behind a far sync").

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::load::{self, Target};
use super::members::{Member, divergent_transactions, follows, until};
use super::{
    DEMO_CONFIG, DemoConfig, DemoReport, FailoverReport, Progress, ReinstateReport, StandbyOptions,
    SwitchoverReport, auth_section, compare, demo_groups, drive, free_port, loopback,
    make_certificates, summary, tls_section,
};
use crate::process::status_at;

/// The configuration's name: the Sentinel master name.
const NAME: &str = "demo";
const OBSERVER: &str = "observer";
const THRESHOLD: &str = "2s";

/// What every file of the configuration shares: its name, the protection mode, fast-start
/// failover, the observer and the members (and the far sync, if any: shipped to SYNC AFFIRM,
/// forwarding to west when east is the primary).
fn shared_text(
    options: &StandbyOptions,
    members: &[&Member],
    far_sync: Option<&Member>,
    sentinel: u16,
) -> String {
    let mut text = format!(
        "name = \"{NAME}\"\nprotection_mode = \"{}\"\n\n[replication.fast_start_failover]\nenabled = true\nthreshold = \"{THRESHOLD}\"\ntarget = [\"west\", \"east\"]\nauto_reinstate = true\n\n[[replication.observers]]\nname = \"{OBSERVER}\"\nsentinel = \"127.0.0.1:{sentinel}\"\n",
        options.protection_mode
    );
    for member in members {
        text += &member.entry(&options.transport, options.affirm, "");
    }
    if let Some(fs) = far_sync {
        text += &fs.entry("sync", true, super::far_sync::FAR_SYNC);
    }
    text
}

/// The observer process; killed when dropped.
struct Observer {
    child: Child,
}

impl Observer {
    fn start(binary: &Path, config: &Path, log: &Path) -> anyhow::Result<Observer> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let mut child = Command::new(binary)
            .args(["observer", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .context("starting the observer")?;
        let stdout = child.stdout.take().expect("piped");
        let (ready, readied) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            for line in lines.by_ref().map_while(Result::ok) {
                if line.contains("ready") {
                    let _ = ready.send(());
                    break;
                }
            }
            for _ in lines {}
        });
        let mut observer = Observer { child };
        if readied.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = observer.child.kill();
            anyhow::bail!("the observer did not start; see {}", log.display());
        }
        Ok(observer)
    }

    fn stop(&mut self) {
        // SAFETY: a signal to the child this process started and has not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether fast-start failover is armed: the primary has the observer's lease, the standby
/// is synchronized and names the observer, and the observer would fail over to it.
fn armed(primary: SocketAddr, standby: SocketAddr, sentinel: SocketAddr) -> bool {
    let primary_ready =
        status_at(primary).ok().and_then(|status| status.roles).is_some_and(|roles| {
            roles.fast_start.is_some_and(|fast_start| {
                fast_start.observer.as_deref() == Some(OBSERVER)
                    && fast_start.isolated == Some(false)
            })
        });
    primary_ready
        && status_at(standby).ok().and_then(|status| status.replication.standby).is_some_and(
            |standby| standby.caught_up && standby.active_observer.as_deref() == Some(OBSERVER),
        )
        && crate::bench_failover::writers::failover_ready(sentinel)
            .is_ok_and(|ready| ready.iter().any(|name| name == "west"))
}

/// What a member's log says of the tail its failover took from its relay
/// (`server::role::relay_tail`), or that it says nothing of one.
fn relay_tail_note(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .find_map(|line| {
            ["failover: took the tail", "failover: WITHOUT the tail"]
                .iter()
                .find_map(|said| line.find(said))
                .map(|at| line[at + "failover: ".len()..].trim_end())
        })
        .map_or_else(|| "its log says no tail was taken from a relay".to_string(), str::to_string)
}

/// `far_sync`: with the far sync `fs` between east and west.
pub async fn run(
    config: &DemoConfig,
    options: &StandbyOptions,
    far_sync: bool,
    root: &Path,
    mut progress: impl FnMut(&Progress),
) -> anyhow::Result<DemoReport> {
    let east = Member::new("east", root)?;
    let west = Member::new("west", root)?;
    let fs = far_sync.then(|| Member::new("fs", root)).transpose()?;
    let sentinel_port = free_port()?;
    let sentinel = loopback(sentinel_port);
    let shared = shared_text(options, &[&east, &west], fs.as_ref(), sentinel_port);
    let certs = root.join("certs");
    if options.tls {
        let mut names = vec![east.name, west.name, OBSERVER];
        names.extend(fs.as_ref().map(|fs| fs.name));
        make_certificates(&certs, &names)?;
    }
    let tls = |name: &str| if options.tls { tls_section(&certs, name) } else { String::new() };
    let password = crate::client::password();
    let auth = password.as_deref().map(auth_section).unwrap_or_default();
    for (member, role) in [(&east, "primary"), (&west, "standby")]
        .into_iter()
        .chain(fs.as_ref().map(|fs| (fs, "standby")))
    {
        std::fs::create_dir_all(&member.dir)?;
        // The same number of groups on both: either may be the standby.
        let text = format!(
            "{}{}{}\n[replication]\nmember = \"{}\"\nrole = \"{role}\"\n{shared}",
            DEMO_CONFIG.replace("GROUPS", &demo_groups().to_string()),
            tls(member.name),
            auth,
            member.name
        );
        std::fs::write(member.dir.join("demo.toml"), text)?;
    }
    let observer_dir = root.join(OBSERVER);
    std::fs::create_dir_all(&observer_dir)?;
    std::fs::write(
        observer_dir.join("observer.toml"),
        format!(
            "[observer]\nname = \"{OBSERVER}\"\ndata_dir = \"{}\"\n{}\n{}\n[replication]\n{shared}",
            observer_dir.join("data").display(),
            password
                .as_deref()
                .map(|password| format!("requirepass = \"{password}\"\n"))
                .unwrap_or_default(),
            tls(OBSERVER)
        ),
    )?;
    let mut west_server = west.start(&config.binary)?;
    let mut fs_server = fs.as_ref().map(|fs| fs.start(&config.binary)).transpose()?;
    let mut east_server = east.start(&config.binary)?;
    let mut observer = Observer::start(
        &config.binary,
        &observer_dir.join("observer.toml"),
        &observer_dir.join("observer.log"),
    )?;
    let (east_admin, west_admin) = (loopback(east.admin), loopback(west.admin));
    until(
        Duration::from_secs(60),
        "fast-start failover armed (the observer's lease, the standby synchronized, the observer ready to fail over to it)",
        || armed(east_admin, west_admin, sentinel),
    )
    .await
    .with_context(|| format!("see {}", root.display()))?;
    let through = if far_sync {
        " behind the far sync fs (east ships SYNC AFFIRM to fs, fs forwards to west)"
    } else {
        ""
    };
    progress(&Progress::event(
        0.0,
        format!(
            "east is the primary, west its standby{through}; the observer answers Sentinel on {sentinel} (master '{NAME}'); {}{}; watch it live: http://{east_admin}/  http://{west_admin}/",
            match &password {
                Some(password) => format!("clients and Sentinel take the password {password}"),
                None => "NO PASSWORDS (--insecure)".to_string(),
            },
            if options.tls { ", redo runs over mutual TLS" } else { ", redo in clear" }
        ),
    ));

    // The load, through Sentinel.
    let target = Target::Sentinel { sentinel, name: NAME.to_string() };
    let mut loaded =
        drive(config, &target, &east_server, Some(&west_server), &mut progress).await?;
    let end_status = east_server.status()?;
    let elapsed = loaded.started.elapsed().as_secs_f64();
    let lags = loaded.lags.report();

    // The primary is lost under load: the observer fails over, the sessions follow.
    let before = loaded.shared.snapshot();
    loaded.shared.watch_for(loopback(west.resp));
    let killed = Instant::now();
    east_server.kill()?;
    progress(&Progress::event(
        loaded.started.elapsed().as_secs_f64(),
        "SIGKILL to the primary (east); the sessions keep writing through Sentinel".into(),
    ));
    until(Duration::from_secs(60), "a failover to west with writes taken there", || {
        loaded.shared.watched_acknowledged()
    })
    .await
    .with_context(|| format!("see {}", root.display()))?;
    // When the first write was acknowledged on west (not when the check below ends: reading
    // every order back from west takes seconds of its own).
    let writes_again_after = killed.elapsed();
    let outage = loaded.shared.outage().unwrap_or_default();
    let zero_data_loss = load::verify(loopback(west.resp), &before, false, 0).await?;
    // Through the far sync: what west says, in its log, of the tail it took from it.
    let tail = fs.as_ref().map(|_| relay_tail_note(&west.dir.join("server.log")));
    let failover = FailoverReport {
        seconds_without_writes: outage.as_secs_f64(),
        acknowledged_lost: zero_data_loss.acknowledged_lost(),
        target: west.name.to_string(),
        how: if far_sync {
            "fast-start failover through the far sync fs".into()
        } else {
            "fast-start failover".into()
        },
    };
    progress(&Progress::event(
        loaded.started.elapsed().as_secs_f64(),
        format!(
            "the observer failed over to west{}: {:.2} s without writes (writes taken on west {:.2} s after the kill); {} acknowledged commits lost",
            tail.as_ref().map_or(String::new(), |tail| format!(" ({tail})")),
            failover.seconds_without_writes,
            writes_again_after.as_secs_f64(),
            failover.acknowledged_lost
        ),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The old primary comes back: fenced, then reinstated by the observer.
    let restarted = Instant::now();
    east_server = east.start(&config.binary)?;
    let recovered_records = east_server.status()?.database.recovered_records;
    let reinstated = until(Duration::from_secs(90), "east reinstated as west's standby", || {
        follows(east_admin, west.name)
    })
    .await;
    let reinstate = ReinstateReport {
        ok: reinstated.is_ok(),
        divergent_transactions: divergent_transactions(&east.dir),
        recovered_records,
        seconds: restarted.elapsed().as_secs_f64(),
        by: "the observer".into(),
    };
    reinstated.with_context(|| format!("see {}", root.display()))?;
    progress(&Progress::event(
        loaded.started.elapsed().as_secs_f64(),
        reinstate.event(east.name, west.name),
    ));

    // A switchover gives east the role back, the sessions following.
    until(Duration::from_secs(60), "east synchronized with west", || {
        status_at(west_admin).ok().is_some_and(|status| {
            status.replication.destinations.iter().any(|destination| {
                destination.name == "east"
                    && matches!(
                        destination.phase,
                        transport::Phase::Synchronized | transport::Phase::Streaming
                    )
            })
        })
    })
    .await?;
    loaded.shared.watch_for(loopback(east.resp));
    let switching = Instant::now();
    let switched = tokio::task::spawn_blocking(move || {
        broker::transitions::switchover(&west_admin.to_string(), "east")
    })
    .await?;
    let command_seconds = switching.elapsed().as_secs_f64();
    let switched_ok = switched.is_ok();
    if let Err(error) = &switched {
        progress(&Progress::event(
            loaded.started.elapsed().as_secs_f64(),
            format!("the switchover failed: {error:#}"),
        ));
    }
    if switched_ok {
        until(Duration::from_secs(60), "writes on east after the switchover", || {
            loaded.shared.watched_acknowledged()
        })
        .await?;
    }
    let switchover = SwitchoverReport {
        ok: switched_ok,
        seconds: command_seconds,
        seconds_without_writes: loaded.shared.outage().map_or(0.0, |outage| outage.as_secs_f64()),
    };
    progress(&Progress::event(
        loaded.started.elapsed().as_secs_f64(),
        format!(
            "switchover to east: {} in {:.2} s ({:.2} s without writes); west is its standby again",
            if switchover.ok { "done" } else { "FAILED" },
            switchover.seconds,
            switchover.seconds_without_writes
        ),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    loaded.stop().await?;

    // Every acknowledged commit, on both; the same data; the same archived logs.
    let acknowledged = loaded.shared.snapshot();
    let (primary, standby) =
        if switched_ok { (&east_server, &west_server) } else { (&west_server, &east_server) };
    let (primary_dir, standby_dir) =
        if switched_ok { (&east.dir, &west.dir) } else { (&west.dir, &east.dir) };
    let standby_report =
        compare(primary, standby, primary_dir, standby_dir, options, zero_data_loss).await?;
    let verification =
        load::verify(primary.resp_addr, &acknowledged, true, recovered_records).await?;
    observer.stop();
    east_server.stop()?;
    if let Some(fs_server) = fs_server.as_mut() {
        fs_server.stop()?;
    }
    west_server.stop()?;
    let (parts, stats) = summary(&loaded, elapsed, &end_status, root);
    Ok(parts.into_report(
        stats,
        verification,
        options.protection_mode.clone(),
        Some(standby_report),
        Some(lags),
        Some(failover),
        Some(reinstate),
        Some(switchover),
    ))
}
