//! `redoguard demo`: the main job on an embedded default setup.

use std::path::PathBuf;

use anyhow::Context as _;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long the workload runs (e.g. 20s).
    #[arg(long, default_value = "20s", value_parser = tools::units::parse_duration)]
    pub duration: std::time::Duration,
    /// Sessions committing small transactions.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Sessions loading large transactions in the batch phase.
    #[arg(long, default_value_t = 4)]
    pub batch_clients: usize,
    /// Data directory (default: a throwaway one, deleted at the end).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Keep the throwaway data directory.
    #[arg(long)]
    pub keep: bool,
    /// Also write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// How redo reaches the standby: sync or async.
    #[arg(long, default_value = "sync", value_parser = ["sync", "async"])]
    pub transport: String,
    /// Acknowledge a write once it is received, not once it is on the standby's disk.
    #[arg(long)]
    pub noaffirm: bool,
    /// maximum_performance, maximum_availability or maximum_protection [default:
    /// maximum_availability with --transport sync, maximum_performance with async].
    #[arg(long, value_parser = ["maximum_performance", "maximum_availability", "maximum_protection"])]
    pub protection: Option<String>,
    /// Run the primary alone, without a standby.
    #[arg(long)]
    pub no_standby: bool,
    /// No fast-start failover observer: after the load the primary is killed and restarted
    /// (crash recovery), without a failover. (Maximum Protection always runs without one.)
    #[arg(long)]
    pub no_observer: bool,
    /// Put a far sync between the primary and its standby: the primary ships SYNC AFFIRM to
    /// the far sync, which forwards to the standby. After the load the primary is killed and
    /// the observer fails over to the standby, which first takes the tail the far sync holds;
    /// the old primary is then reinstated. With `--no-observer`, the failover is the DBA's
    /// (`redoguard failover --to west`) and the reinstate `redoguard reinstate`.
    #[arg(long, conflicts_with_all = ["no_standby"])]
    pub far_sync: bool,
    /// Run the servers open, as a quick look on a laptop might: redo over plain TCP and no
    /// passwords (by default the demo makes a test CA and certificates, as `redoguard certs`
    /// does, runs redo transport over mutual TLS, and gives its servers and the Sentinel front a
    /// throwaway password that its sessions use).
    #[arg(long, alias = "no-tls")]
    pub insecure: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let protection = args.protection.clone().unwrap_or_else(|| {
        if args.transport == "sync" { "maximum_availability" } else { "maximum_performance" }
            .to_string()
    });
    anyhow::ensure!(args.duration.as_secs_f64() >= 2.0, "--duration must be at least 2s");
    anyhow::ensure!(args.clients > 0, "--clients must be at least 1");
    let config = workload::demo::DemoConfig {
        binary: std::env::current_exe().context("locating the redoguard binary")?,
        duration: args.duration,
        oltp_clients: args.clients,
        batch_clients: args.batch_clients,
        data_dir: args.data_dir,
        keep: args.keep,
        standby: (!args.no_standby).then(|| workload::demo::StandbyOptions {
            transport: args.transport.clone(),
            affirm: !args.noaffirm,
            protection_mode: protection.clone(),
            tls: !args.insecure,
        }),
        observer: !args.no_observer && protection != "maximum_protection",
        far_sync: args.far_sync,
        insecure: args.insecure,
    };
    anyhow::ensure!(
        args.no_standby || args.transport == "sync" || protection == "maximum_performance",
        "--protection {protection} needs --transport sync (an ASYNC standby protects no commit)"
    );
    anyhow::ensure!(
        !args.far_sync
            || (args.transport == "sync" && !args.noaffirm && protection != "maximum_performance"),
        "--far-sync ships SYNC AFFIRM to the far sync under maximum_availability or maximum_protection (its point: zero data loss while commits wait only for the near relay)"
    );
    match &config.standby {
        Some(standby) if config.far_sync && config.observer => println!(
            "redoguard demo: a primary, a far sync ({} under {}), a standby behind it and a fast-start failover observer on a throwaway directory; {} OLTP sessions through Sentinel, then a batch load, for {:?}; then the primary is killed, the observer fails over to the standby, which takes the far sync's tail, the old primary is reinstated and a switchover returns the roles",
            workload::demo::transport_label(&standby.transport, standby.affirm),
            standby.protection_mode,
            config.oltp_clients,
            config.duration
        ),
        Some(standby) if config.far_sync => println!(
            "redoguard demo: a primary, a far sync ({} under {}) and a standby behind it on a throwaway directory; {} OLTP sessions, then a batch load, for {:?}; then the primary is killed, a failover to the standby takes the far sync's tail, and the old primary is reinstated",
            workload::demo::transport_label(&standby.transport, standby.affirm),
            standby.protection_mode,
            config.oltp_clients,
            config.duration
        ),
        Some(standby) if config.observer => println!(
            "redoguard demo: a primary, a standby ({} under {}) and a fast-start failover observer on a throwaway directory; {} OLTP sessions through Sentinel, then a batch load, for {:?}; then the primary is killed, the observer fails over, the old primary is reinstated and a switchover returns the roles",
            workload::demo::transport_label(&standby.transport, standby.affirm),
            standby.protection_mode,
            config.oltp_clients,
            config.duration
        ),
        Some(standby) => println!(
            "redoguard demo: a primary and a standby ({} under {}) on a throwaway directory, {} OLTP sessions, then a batch load; {:?}",
            workload::demo::transport_label(&standby.transport, standby.affirm),
            standby.protection_mode,
            config.oltp_clients,
            config.duration
        ),
        None => println!(
            "redoguard demo: a primary database alone on a throwaway directory, {} OLTP sessions, then a batch load; {:?}",
            config.oltp_clients, config.duration
        ),
    }
    println!("  {}", workload::demo::log_size_note());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut first = true;
    let report = runtime.block_on(workload::demo::run(config, |line| {
        if let Some(event) = &line.event {
            println!("  {:>5.0}s {event}", line.elapsed_s);
            return;
        }
        if first {
            first = false;
            println!(
                "  {:>6} {:<6} {:>10} {:>10} {:>9} {:>9} {:>19}  top waits (last second)",
                "time",
                "phase",
                "commits/s",
                "redo MB/s",
                "p50 µs",
                "p99 µs",
                "lag ms (xport/apply)"
            );
        }
        let mut waits: Vec<String> =
            line.top_waits.iter().map(|(name, ms)| format!("{name} {ms:.0} ms")).collect();
        // Sessions held up at a log switch, by reason, even when it is not a top wait.
        for (name, ms) in &line.switch_waits {
            if !line.top_waits.iter().any(|(top, _)| top == name) {
                waits.push(format!("{name} {ms:.0} ms"));
            }
        }
        let lags = match line.lags_ms {
            Some((transport, apply)) => format!("{transport:.1} / {apply:.1}"),
            None => "-".to_string(),
        };
        println!(
            "  {:>5.0}s {:<6} {:>10.0} {:>10.2} {:>9} {:>9} {:>19}  {}",
            line.elapsed_s,
            line.phase,
            line.commits_per_s,
            line.redo_mb_per_s,
            line.commit_p50_us,
            line.commit_p99_us,
            lags,
            waits.join(", ")
        );
    }))?;
    print!("{}", workload::demo::render(&report));
    if let Some(path) = &args.json {
        workload::demo::write_json(&report, path)?;
        println!("  report: {}", path.display());
    }
    anyhow::ensure!(report.passed(), "a check failed: see the report above");
    Ok(())
}
