//! The demo without an observer: a primary alone, or a primary and a standby in the
//! single-role form. After the load it kills the primary, checks on the standby that every
//! acknowledged commit is there, restarts the primary (crash recovery) and checks it too, lets
//! the standby catch up, and compares data and archived logs.

use std::path::Path;
use std::time::{Duration, Instant};

use super::load::{self, Target};
use super::{
    DEMO_CONFIG, DemoConfig, DemoReport, Progress, StandbyOptions, auth_section, compare,
    demo_groups, drive, make_certificates, summary, tls_section, wait_applied_all_received,
};
use crate::process::ServerProcess;

fn primary_config(standby: Option<(&StandbyOptions, std::net::SocketAddr)>) -> String {
    let mut text = DEMO_CONFIG.replace("GROUPS", &demo_groups().to_string());
    if let Some((options, redo)) = standby {
        text.push_str(&format!(
            "[replication]\nrole = \"primary\"\nprotection_mode = \"{}\"\n[[replication.destinations]]\nname = \"standby\"\naddress = \"{redo}\"\ntransport = \"{}\"\naffirm = {}\nnet_timeout = \"5s\"\nreopen = \"500ms\"\n",
            options.protection_mode, options.transport, options.affirm
        ));
    }
    text
}

fn standby_config() -> String {
    // One more standby log group than the primary has.
    DEMO_CONFIG.replace("GROUPS", &(demo_groups() + 1).to_string())
        + "[replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"127.0.0.1:0\"\n"
}

pub async fn run(
    config: &DemoConfig,
    root: &Path,
    mut progress: impl FnMut(&Progress),
) -> anyhow::Result<DemoReport> {
    let primary_dir = root.join("primary");
    let standby_dir = root.join("standby");
    std::fs::create_dir_all(&primary_dir)?;
    let certs = root.join("certs");
    let tls = config.standby.as_ref().is_some_and(|standby| standby.tls);
    if tls {
        make_certificates(&certs, &["primary", "standby"])?;
    }
    let auth = crate::client::password().as_deref().map(auth_section).unwrap_or_default();
    let with_tls = |text: String, name: &str| {
        let text = text + &auth;
        if tls { text + &tls_section(&certs, name) } else { text }
    };
    // The standby first: the primary names its redo listener.
    let mut standby = match &config.standby {
        Some(_) => {
            std::fs::create_dir_all(&standby_dir)?;
            std::fs::write(standby_dir.join("demo.toml"), with_tls(standby_config(), "standby"))?;
            let args = [
                "--config".to_string(),
                standby_dir.join("demo.toml").display().to_string(),
                "--data-dir".to_string(),
                standby_dir.display().to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Some(ServerProcess::start(&config.binary, &args, &standby_dir.join("server.log"))?)
        }
        None => None,
    };
    let redo_addr = standby.as_ref().and_then(|standby| standby.redo_addr);
    std::fs::write(
        primary_dir.join("demo.toml"),
        with_tls(primary_config(config.standby.as_ref().zip(redo_addr)), "primary"),
    )?;
    let primary_args_owned = [
        "--config".to_string(),
        primary_dir.join("demo.toml").display().to_string(),
        "--data-dir".to_string(),
        primary_dir.display().to_string(),
    ];
    let primary_args: Vec<&str> = primary_args_owned.iter().map(String::as_str).collect();
    let primary_log = primary_dir.join("server.log");
    let mut server = ServerProcess::start(&config.binary, &primary_args, &primary_log)?;
    if let Some(options) = &config.standby {
        // Start the load once the standby protects the primary as configured.
        let wanted = if options.transport == "sync" {
            transport::Phase::Synchronized
        } else {
            transport::Phase::Streaming
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = server.status()?;
            if status
                .replication
                .destinations
                .first()
                .is_some_and(|destination| destination.phase == wanted)
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the standby did not reach {wanted:?} within 30 s; see {}",
                standby_dir.join("server.log").display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    progress(&Progress::event(
        0.0,
        format!(
            "watch it live: primary http://{}/{}",
            server.admin_addr,
            standby.as_ref().map_or(String::new(), |standby| format!(
                "  standby http://{}/",
                standby.admin_addr
            ))
        ),
    ));
    let target = Target::Direct(server.resp_addr);
    let mut loaded = drive(config, &target, &server, standby.as_ref(), &mut progress).await?;
    loaded.stop().await?;
    let end_status = server.status()?;
    let elapsed = loaded.started.elapsed().as_secs_f64();
    let acknowledged = loaded.shared.snapshot();

    // A crash of the primary: SIGKILL. What the standby has is what a failover would have.
    server.kill()?;
    let zero_data_loss = match &standby {
        Some(standby) => {
            // A failover first applies all the redo the standby received.
            wait_applied_all_received(standby.admin_addr, Duration::from_secs(60)).await?;
            Some(load::verify(standby.resp_addr, &acknowledged, true, 0).await?)
        }
        None => None,
    };
    // The primary restarts (crash recovery) and its standby catches up.
    let mut server = ServerProcess::start(&config.binary, &primary_args, &primary_log)?;
    let recovered = server.status()?.database.recovered_records;
    let verification = load::verify(server.resp_addr, &acknowledged, true, recovered).await?;
    let standby_report = match (&mut standby, &config.standby) {
        (Some(standby), Some(options)) => Some(
            compare(
                &server,
                standby,
                &primary_dir,
                &standby_dir,
                options,
                zero_data_loss.expect("verified"),
            )
            .await?,
        ),
        _ => None,
    };
    server.stop()?;
    if let Some(standby) = &mut standby {
        standby.stop()?;
    }
    let (parts, stats) = summary(&loaded, elapsed, &end_status, root);
    Ok(parts.into_report(
        stats,
        verification,
        config
            .standby
            .as_ref()
            .map_or("none (no standby)".to_string(), |options| options.protection_mode.clone()),
        standby_report.clone(),
        standby_report.as_ref().map(|_| loaded.lags.report()),
        None,
        None,
        None,
    ))
}
