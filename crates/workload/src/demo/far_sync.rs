//! The demo through a far sync (`redoguard demo --far-sync`): three members in the
//! configuration form. `east`, created as the primary, ships SYNC AFFIRM to the far sync `fs`
//! only; `fs` keeps standby logs and archives and forwards to the terminal standby `west`
//! (Data Guard's far sync: a commit waits for the near relay, never for the distant standby).
//! After the load: SIGKILL to the primary, then a failover to `west`, as a DBA would run it
//! (`redoguard failover --to west`): `west` seals `fs` and takes the tail of redo it lacks
//! from it (docs/roles.md, "Failover through a far sync"), so every acknowledged commit is on
//! `west`. The old primary restarts fenced and is reinstated as `west`'s standby; data and
//! archived logs are compared. This is `--far-sync --no-observer`; with the observer (the
//! default), `observed` runs with the far sync and the observer fails over through it.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::load::{self, Target};
use super::members::{Member, divergent_transactions, follows, until};
use super::{
    DEMO_CONFIG, DemoConfig, DemoReport, FailoverReport, Progress, ReinstateReport, StandbyOptions,
    auth_section, compare, demo_groups, drive, loopback, make_certificates, summary, tls_section,
};
use crate::process::status_at;

const NAME: &str = "demo";
/// The far sync's route: under `east`, it forwards to `west`.
pub(super) const FAR_SYNC: &str =
    "kind = \"far_sync\"\nroutes = [{ when = \"east\", to = \"west\" }]\n";

/// What every file of the configuration shares: its name, the protection mode and the three
/// members (east and west may each be the primary: each is shipped to SYNC AFFIRM by the
/// other, the far sync too).
fn shared_text(options: &StandbyOptions, east: &Member, fs: &Member, west: &Member) -> String {
    format!("name = \"{NAME}\"\nprotection_mode = \"{}\"\n", options.protection_mode)
        + &east.entry("sync", true, "")
        + &fs.entry("sync", true, FAR_SYNC)
        + &west.entry("sync", true, "")
}

/// Whether `primary` has `fs` SYNCHRONIZED and `fs` streams to `west`.
fn relaying(primary: std::net::SocketAddr, fs: std::net::SocketAddr) -> bool {
    let phase = |admin, name: &str| {
        status_at(admin).ok().and_then(|status| {
            status
                .replication
                .destinations
                .iter()
                .find(|destination| destination.name == name)
                .map(|destination| destination.phase)
        })
    };
    phase(primary, "fs") == Some(transport::Phase::Synchronized)
        && phase(fs, "west") == Some(transport::Phase::Streaming)
}

pub async fn run(
    config: &DemoConfig,
    options: &StandbyOptions,
    root: &Path,
    mut progress: impl FnMut(&Progress),
) -> anyhow::Result<DemoReport> {
    let east = Member::new("east", root)?;
    let fs = Member::new("fs", root)?;
    let west = Member::new("west", root)?;
    let shared = shared_text(options, &east, &fs, &west);
    let certs = root.join("certs");
    if options.tls {
        make_certificates(&certs, &[east.name, fs.name, west.name])?;
    }
    let auth = crate::client::password().as_deref().map(auth_section).unwrap_or_default();
    for (member, role) in [(&east, "primary"), (&fs, "standby"), (&west, "standby")] {
        std::fs::create_dir_all(&member.dir)?;
        let text = format!(
            "{}{}{auth}\n[replication]\nmember = \"{}\"\nrole = \"{role}\"\n{shared}",
            DEMO_CONFIG.replace("GROUPS", &demo_groups().to_string()),
            if options.tls { tls_section(&certs, member.name) } else { String::new() },
            member.name
        );
        std::fs::write(member.dir.join("demo.toml"), text)?;
    }
    let mut west_server = west.start(&config.binary)?;
    let mut fs_server = fs.start(&config.binary)?;
    let mut east_server = east.start(&config.binary)?;
    let (east_admin, fs_admin, west_admin) =
        (loopback(east.admin), loopback(fs.admin), loopback(west.admin));
    until(
        Duration::from_secs(60),
        "east SYNC AFFIRM to the far sync fs, and fs forwarding to west",
        || relaying(east_admin, fs_admin),
    )
    .await
    .with_context(|| format!("see {}", root.display()))?;
    let shown = tokio::task::spawn_blocking(move || {
        broker::report::gather(&east_admin.to_string()).map(|shown| broker::report::render(&shown))
    })
    .await??;
    let tree: Vec<&str> = shown
        .lines()
        .skip_while(|line| !line.contains("Redo routes"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim_end)
        .collect();
    progress(&Progress::event(
        0.0,
        format!(
            "east is the primary; its redo routes: {}; {}; watch it live: http://{east_admin}/  http://{fs_admin}/  http://{west_admin}/",
            tree.iter().map(|line| line.trim()).collect::<Vec<_>>().join("  "),
            if options.tls { "redo over mutual TLS" } else { "redo in clear" }
        ),
    ));

    let target = Target::Direct(loopback(east.resp));
    let mut loaded =
        drive(config, &target, &east_server, Some(&west_server), &mut progress).await?;
    let end_status = east_server.status()?;
    let elapsed = loaded.started.elapsed().as_secs_f64();
    let lags = loaded.lags.report();
    loaded.stop().await?;
    let acknowledged = loaded.shared.snapshot();

    // The primary is lost; the DBA fails over to the terminal standby, through the far sync.
    let killed = Instant::now();
    east_server.kill()?;
    progress(&Progress::event(
        loaded.started.elapsed().as_secs_f64(),
        "SIGKILL to the primary (east); `redoguard failover --to west` at once".into(),
    ));
    let failed_over = tokio::task::spawn_blocking(move || {
        broker::transitions::failover(&west_admin.to_string(), "west", false, false)
    })
    .await?
    .with_context(|| format!("the failover to west; see {}", root.display()))?;
    let tail =
        failed_over.promoted.relay_tail.clone().unwrap_or_else(|| "no relay tail was taken".into());
    // The time without writes: until the new primary acknowledges one.
    let mut client = crate::client::Client::connect(loopback(west.resp)).await?;
    client.ok(&[b"SET", b"demo:after-failover", b"1"]).await?;
    let without_writes = killed.elapsed();
    let zero_data_loss = load::verify(loopback(west.resp), &acknowledged, true, 0).await?;
    let failover = FailoverReport {
        seconds_without_writes: without_writes.as_secs_f64(),
        acknowledged_lost: zero_data_loss.acknowledged_lost(),
        target: west.name.to_string(),
        how: "failover through the far sync fs".into(),
    };
    progress(&Progress::event(
        loaded.started.elapsed().as_secs_f64(),
        format!(
            "failed over to west in {} ms ({tail}); {:.2} s from the kill to west's first write; {} acknowledged commits lost",
            failed_over.elapsed_ms, failover.seconds_without_writes, failover.acknowledged_lost
        ),
    ));

    // The old primary restarts fenced and is reinstated as west's standby.
    let restarted = Instant::now();
    east_server = east.start(&config.binary)?;
    let recovered_records = east_server.status()?.database.recovered_records;
    // It learns of the failover from west, which ships to it (its hello fences east).
    until(Duration::from_secs(60), "east fenced by west", || {
        status_at(east_admin)
            .ok()
            .and_then(|status| status.roles)
            .is_some_and(|roles| roles.fenced.is_some())
    })
    .await
    .with_context(|| format!("see {}", root.display()))?;
    let reinstated = tokio::task::spawn_blocking(move || {
        broker::transitions::reinstate(&west_admin.to_string(), "east")
    })
    .await?;
    let followed = match &reinstated {
        Ok(_) => {
            until(Duration::from_secs(90), "east following west", || follows(east_admin, west.name))
                .await
        }
        Err(error) => Err(anyhow::anyhow!("{error:#}")),
    };
    let reinstate = ReinstateReport {
        ok: followed.is_ok(),
        divergent_transactions: divergent_transactions(&east.dir),
        recovered_records,
        seconds: restarted.elapsed().as_secs_f64(),
        by: "`redoguard reinstate`".into(),
    };
    followed.with_context(|| format!("reinstating east; see {}", root.display()))?;
    progress(&Progress::event(
        loaded.started.elapsed().as_secs_f64(),
        reinstate.event(east.name, west.name),
    ));

    // West (the primary now) and east hold the same data and archived logs.
    let standby_report =
        compare(&west_server, &east_server, &west.dir, &east.dir, options, zero_data_loss).await?;
    let verification = load::verify(loopback(west.resp), &acknowledged, true, 0).await?;
    east_server.stop()?;
    fs_server.stop()?;
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
        None,
    ))
}
