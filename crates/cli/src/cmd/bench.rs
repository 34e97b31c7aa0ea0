//! `redoguard bench …`: end-to-end benchmarks with JSON results and a figure (SVG) beside.

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// nettest vs iperf3 and a minimal ping-pong, linkemu's ceiling and accuracy, and the
    /// reference's socket-buffer experiment at 1 Gbit/s, 25 and 100 ms (table, JSON, SVG).
    Net(tools::bench::net::BenchNetArgs),
    /// Commit latency and group commit against raw fdatasync, on one file system: 1/8/64
    /// committers, 1 KiB and 9400-byte records, sequential 1 MiB records.
    Commit(CommitArgs),
    /// redoguard vs Redis (appendfsync always) under redis-benchmark: SET and GET at -c 1 and
    /// -c 50, with the raw fdatasync of the same file system. redis-benchmark runs on a CPU of
    /// its own and the servers on the others, as on hosts of their own; the durable SET at
    /// -c 50 also runs, alternating with that, with all of them free to run on any CPU.
    Resp(RespArgs),
    /// PostgreSQL 15 with a streaming standby (pgbench, synchronous_commit off/local/
    /// remote_write/on) and Redis with a replica (SET, with and without WAIT 1), on loopback
    /// and through linkemu: commits/s, p50/p99, the measured RTT and raw fdatasync.
    External(ExternalArgs),
    /// Redo transport, end to end: commits/s and commit latency p50/p99 for no standby, ASYNC,
    /// SYNC NOAFFIRM and SYNC AFFIRM at each RTT (loopback and linkemu) and client count, the
    /// ASYNC transport lag at steady redo rates, the raw fdatasync and RTT of the run, the
    /// targets met or missed; PostgreSQL and Redis with a standby beside (unless
    /// --no-external). Then two SYNC standbys (all, any 1), SYNC at a steady redo rate as
    /// the RTT grows, COMMITMODE NOWAIT/BATCH against WAIT under SYNC, and the primary's CPU
    /// per commit with and without an ASYNC standby (see --experiments).
    Transport(TransportArgs),
    /// Seconds without writes after kill -9 of the primary and after a network cut (fast-start
    /// failover), switchover and manual failover times, over several trials (p50 and max),
    /// with no acknowledged write lost; Redis Sentinel failing over Redis beside.
    Failover(FailoverArgs),
    /// A nemesis campaign on real processes: three members and two observers in namespaces of
    /// a linkemu mesh, clients through Sentinel and direct, seeded faults each round
    /// (partitions full and one-way, kill -9, SIGSTOP, observer restarts, a primary restarted
    /// while cut off, a full disk, switchover and failover commands), then a history checker:
    /// no acknowledged write lost, none acknowledged by a deposed primary, counters never
    /// behind. Per fault kind: rounds, violations, seconds without writes (table, JSON, SVG).
    Chaos(ChaosArgs),
    /// Time to ship a large log to a standby that lacks it (a gap) over linkemu at 1 Gbit/s,
    /// per RTT, connection count (max_connections) and compression, against the line-rate
    /// time of the same link measured in the same run.
    Ship(ShipArgs),
    /// The reference's batch scenario at reduced scale over linkemu at 100 Mbit/s: OLTP
    /// sessions plus a batch load faster than the link; ASYNC without and with compression
    /// (transport lag over time, MB on the wire), and transport deferred during the batch
    /// (`state = "defer"`) then enabled again (gap-resolution time, OLTP throughput).
    Batch(BatchArgs),
    /// A standby's real-time apply against its primary's redo generation, with the demo's
    /// workloads (small OLTP commits; the batch phase's large transactions): the redo is
    /// generated with the standby's apply held back (delayed apply), then the standby is
    /// restarted without the delay and applies it from its logs; apply MB/s and records/s
    /// against the primary's peak redo rate, Data Guard's published apply rates beside.
    Apply(ApplyArgs),
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// How long each workload generates redo on the primary.
    #[arg(long, default_value = "20s", value_parser = tools::units::parse_duration)]
    pub duration: std::time::Duration,
    /// The workloads: oltp (the demo's OLTP sessions), batch (the demo's batch phase).
    #[arg(long, value_delimiter = ',', default_value = "oltp,batch")]
    pub workloads: Vec<workload::bench_apply::Workload>,
    /// Sessions of the oltp workload (the demo's default).
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Batch sessions of the batch workload (the demo's default).
    #[arg(long, default_value_t = 4)]
    pub batch_clients: usize,
    /// Size of each online and standby log file.
    #[arg(long, default_value = "64MiB", value_parser = tools::units::parse_size)]
    pub log_file_size: u64,
    /// Directory on the file system for the servers' data (a temporary directory is created
    /// inside it and removed).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// How long the batch runs.
    #[arg(long, default_value = "20s", value_parser = tools::units::parse_duration)]
    pub duration: std::time::Duration,
    /// The batch's redo rate, MB/s (the link carries 12.5).
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Round-trip time of the link, ms.
    #[arg(long, default_value_t = 10)]
    pub rtt: u32,
    /// The codec of the compressed cases: lz4 or zstd.
    #[arg(long, default_value = "zstd")]
    pub compression: String,
    /// Directory on the file system for the servers' data (a temporary directory is created
    /// inside it and removed).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ShipArgs {
    /// Round-trip times of the link, in ms.
    #[arg(long, value_delimiter = ',', default_value = "0,25,50,100")]
    pub rtts: Vec<u32>,
    /// Connection counts (the destination's max_connections), 1..=20.
    #[arg(long, value_delimiter = ',', default_value = "1,5")]
    pub connections: Vec<u32>,
    /// Compressions: none, lz4, zstd.
    #[arg(long, value_delimiter = ',', default_value = "none,lz4")]
    pub compression: Vec<String>,
    /// Size of the log shipped (the reference's is 1 GB: `--size 1GiB`, or `--full`).
    #[arg(long, default_value = "128MiB", value_parser = tools::units::parse_size)]
    pub size: u64,
    /// The reference's size: a 1 GiB log.
    #[arg(long)]
    pub full: bool,
    /// Directory on the file system for the servers' data (a temporary directory is created
    /// inside it and removed).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct FailoverArgs {
    /// Trials per case and system, each on fresh servers.
    #[arg(long, default_value_t = 5)]
    pub trials: u32,
    /// redoguard's fast-start failover threshold.
    #[arg(long, default_value = "2s", value_parser = tools::units::parse_duration)]
    pub threshold: std::time::Duration,
    /// The cases: kill (kill -9 of the primary), cut (the primary cut from the standby and
    /// the observer, with linkemu), switchover, failover (manual, after kill -9).
    #[arg(long, value_delimiter = ',', default_value = "kill,cut,switchover,failover")]
    pub cases: Vec<workload::bench_failover::Case>,
    /// Leave out Redis Sentinel.
    #[arg(long)]
    pub no_sentinel: bool,
    /// Directory on the file system for the servers' data (a temporary directory is created
    /// inside it and removed).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Where to write the results as JSON.
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// Rounds of faults (each followed by a heal, the configuration settling, and the check).
    #[arg(long, default_value_t = 20)]
    pub rounds: u32,
    /// The seed of the faults (default: from the clock; printed, to replay a campaign with
    /// the same --rounds, --round-seconds and --faults).
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long each round's faults last.
    #[arg(long, default_value = "8s", value_parser = tools::units::parse_duration)]
    pub round_seconds: std::time::Duration,
    /// The fast-start failover threshold.
    #[arg(long, default_value = "2s", value_parser = tools::units::parse_duration)]
    pub threshold: std::time::Duration,
    /// The round-trip time of every link between the sites (linkemu).
    #[arg(long, default_value = "1ms", value_parser = tools::units::parse_duration)]
    pub rtt: std::time::Duration,
    /// The fault kinds rounds draw from: partition, one_way, kill, pause, observer_restart,
    /// primary_restart_partitioned, disk_full, switchover, failover (and quiet: none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "partition,one_way,kill,pause,observer_restart,primary_restart_partitioned,disk_full,switchover,failover"
    )]
    pub faults: Vec<workload::bench_chaos::FaultKind>,
    /// The members: standard (east and west SYNC AFFIRM, south ASYNC) or far-sync (east ships
    /// SYNC AFFIRM to the far sync fs, which forwards to west; south ASYNC), docs/bench/chaos.md.
    #[arg(long, default_value = "standard")]
    pub layout: workload::bench_chaos::Layout,
    /// Rounds run on one set of processes and data before fresh ones start.
    #[arg(long, default_value_t = 10)]
    pub rounds_per_epoch: u32,
    /// How long the configuration may take to settle after a round before the round counts
    /// as unsettled.
    #[arg(long, default_value = "90s", value_parser = tools::units::parse_duration)]
    pub settle_limit: std::time::Duration,
    /// Plant a fault in the harness (never in the servers) to show the checker catches it:
    /// lost-write (an acknowledged key deleted on the primary after every round) or
    /// counter-rollback (a counter set back to 0 on the primary).
    #[arg(long)]
    pub plant: Option<workload::bench_chaos::Plant>,
    /// Copy the processes' logs of every round that broke a rule or did not settle into this
    /// directory (round-N/NAME.log), for a look at what happened.
    #[arg(long)]
    pub keep_logs: Option<std::path::PathBuf>,
    /// Directory for the work files (a temporary directory is created inside it and removed;
    /// each member's data is on a tmpfs mounted inside it).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct TransportArgs {
    /// How long each case runs.
    #[arg(long, default_value = "5s", value_parser = tools::units::parse_duration)]
    pub duration: std::time::Duration,
    /// Round-trip times in ms: 0 = plain loopback, above 0 = through linkemu at 1 Gbit/s.
    #[arg(long, value_delimiter = ',', default_value = "0,10,25")]
    pub rtts: Vec<u32>,
    /// Client counts of the commit cases.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub clients: Vec<u32>,
    /// Steady redo rates of the ASYNC transport-lag cases, in MB/s.
    #[arg(long, value_delimiter = ',', default_value = "2,20")]
    pub lag_rates: Vec<f64>,
    /// Leave out the ASYNC transport-lag cases.
    #[arg(long)]
    pub no_lag: bool,
    /// The experiments to run: modes (no standby, ASYNC, SYNC NOAFFIRM, SYNC AFFIRM at
    /// --rtts, with PostgreSQL and Redis), lag (ASYNC at --lag-rates), quorum (two SYNC
    /// AFFIRM standbys, all and any 1, at --quorum-rtts), sync-rate (SYNC AFFIRM against no
    /// standby at a steady --sync-rate, at --sync-rate-rtts), commit-mode (COMMITMODE
    /// WAIT/NOWAIT × IMMEDIATE/BATCH under SYNC AFFIRM at --commit-mode-rtt), async-cpu (the
    /// primary's CPU per commit with and without an ASYNC standby at --async-cpu-rtt);
    /// and, not by default, far-sync (SYNC AFFIRM through a far sync at --far-sync-near-rtt
    /// against SYNC AFFIRM and ASYNC direct at --far-sync-rtt) and fan-out (the primary's CPU
    /// and bytes per commit with four standbys, direct or through a cascading standby, against
    /// one, at --fan-out-rate).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "modes,lag,quorum,sync-rate,commit-mode,async-cpu"
    )]
    pub experiments: Vec<workload::bench_transport::Experiment>,
    /// RTTs of the two-standby cases, in ms.
    #[arg(long, value_delimiter = ',', default_value = "25,50")]
    pub quorum_rtts: Vec<u32>,
    /// RTTs of the SYNC-at-a-steady-rate cases, in ms.
    #[arg(long, value_delimiter = ',', default_value = "0,2,5,10,20,25")]
    pub sync_rate_rtts: Vec<u32>,
    /// Redo rate of the SYNC-at-a-steady-rate cases, in MB/s.
    #[arg(long, default_value_t = 4.0)]
    pub sync_rate: f64,
    /// RTT of the COMMITMODE cases, in ms.
    #[arg(long, default_value_t = 25)]
    pub commit_mode_rtt: u32,
    /// RTT of the CPU cases, in ms (0: the standby on loopback, sharing the primary's CPUs).
    #[arg(long, default_value_t = 0)]
    pub async_cpu_rtt: u32,
    /// Steady commits a second of the CPU cases.
    #[arg(long, default_value_t = 2000.0)]
    pub async_cpu_rate: f64,
    /// RTT from the primary to the far sync, in ms (far-sync).
    #[arg(long, default_value_t = 1)]
    pub far_sync_near_rtt: u32,
    /// RTT from the far sync and from the primary to the terminal standby, in ms (far-sync).
    #[arg(long, default_value_t = 50)]
    pub far_sync_rtt: u32,
    /// Clients of the far-sync cases.
    #[arg(long, default_value_t = 16)]
    pub far_sync_clients: u32,
    /// RTT between each two sites of the fan-out cases, in ms.
    #[arg(long, default_value_t = 1)]
    pub fan_out_rtt: u32,
    /// Steady commits a second of the fan-out cases.
    #[arg(long, default_value_t = 2000.0)]
    pub fan_out_rate: f64,
    /// Size of each online and standby log file of redoguard's servers. The default keeps
    /// log switches (and the archiving they start on both servers' one disk) out of 5-second
    /// cases; a smaller size brings them in.
    #[arg(long, default_value = "256MiB", value_parser = tools::units::parse_size)]
    pub log_file_size: u64,
    /// Leave out PostgreSQL and Redis (the cases of `bench external`).
    #[arg(long)]
    pub no_external: bool,
    /// Redo transport over mutual TLS (certificates from a test CA made for the run), to
    /// measure what TLS costs against a run without.
    #[arg(long)]
    pub tls: bool,
    /// The TCP congestion control of redoguard's redo connections (the destinations'
    /// `tcp_congestion`: `cubic`, `bbr`, `reno`, …); default: the host's
    #[arg(long)]
    pub tcp_congestion: Option<String>,
    /// Directory on the file system for the servers' data (a temporary directory is created
    /// inside it and removed).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Directory for redoguard's standbys' data instead, on another disk: its fdatasync then
    /// does not queue behind the primary's on one device, as on a standby host (a temporary
    /// directory is created inside it and removed). PostgreSQL's and Redis's standbys stay in
    /// --dir
    #[arg(long)]
    pub standby_dir: Option<std::path::PathBuf>,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ExternalArgs {
    /// How long each case runs (rounded up to whole seconds).
    #[arg(long, default_value = "5s", value_parser = tools::units::parse_duration)]
    pub duration: std::time::Duration,
    /// Round-trip times in ms: 0 = plain loopback, above 0 = through linkemu at 1 Gbit/s.
    #[arg(long, value_delimiter = ',', default_value = "0,10,25")]
    pub rtts: Vec<u32>,
    /// Client counts.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub clients: Vec<u32>,
    /// Directory on the file system for the servers' data (a temporary directory is created
    /// inside it and removed).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct RespArgs {
    /// Requests per redis-benchmark run.
    #[arg(long, default_value_t = 200_000)]
    pub requests: u64,
    /// Runs of each durable write at -c 50 (SET, HSET, LPUSH, SADD, ZADD, SET EX) per server,
    /// alternating between the servers so that a drifting disk weighs on both alike.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Directory on the file system both servers use.
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct CommitArgs {
    /// How long each case runs.
    #[arg(long, default_value = "5s", value_parser = tools::units::parse_duration)]
    pub duration: std::time::Duration,
    /// Directory on the file system to measure (logs and test files are created in a
    /// temporary directory inside it and removed).
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Runs only the cases whose names contain one of these (comma-separated; "1 MiB" for the
    /// sequential large records). Default: every case.
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Where to write the results as JSON; the figure goes beside it (same name, .svg).
    #[arg(long)]
    pub json: std::path::PathBuf,
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Net(args) => {
            tools::bench::net::check_dir(&args.dir)?;
            let report = tools::bench::net::run(&args, |step| eprintln!("bench net: {step}"))?;
            println!("{}", report.text());
            println!("json: {}", args.json.display());
            println!("plot: {}", report.plot.display());
            Ok(())
        }
        BenchCommand::Resp(args) => {
            let config = workload::bench_resp::BenchRespConfig {
                binary: std::env::current_exe()?,
                dir: args.dir,
                requests: args.requests,
                rounds: args.rounds,
            };
            let report =
                workload::bench_resp::run(&config, |step| eprintln!("bench resp: {step}"))?;
            write_report(
                &workload::bench_resp::render(&report),
                &report,
                &args.json,
                &workload::bench_figures::resp(&report),
            )
        }
        BenchCommand::External(args) => {
            workload::interrupt::install()?;
            let config = workload::bench_external::ExternalConfig {
                dir: args.dir,
                duration: args.duration,
                rtts_ms: args.rtts,
                clients: args.clients,
            };
            let report =
                workload::bench_external::run(&config, |step| eprintln!("bench external: {step}"))?;
            write_report(
                &workload::bench_external::render(&report),
                &report,
                &args.json,
                &workload::bench_figures::external(&report),
            )
        }
        BenchCommand::Transport(args) => {
            // Ctrl-C stops the servers and takes the link down on the way out.
            workload::interrupt::install()?;
            let config = workload::bench_transport::TransportConfig {
                binary: std::env::current_exe()?,
                dir: args.dir,
                duration: args.duration,
                rtts_ms: args.rtts,
                clients: args.clients,
                lag_rates_mb_per_s: if args.no_lag { Vec::new() } else { args.lag_rates },
                log_file_size: args.log_file_size,
                experiments: args.experiments,
                quorum_rtts_ms: args.quorum_rtts,
                sync_rate_rtts_ms: args.sync_rate_rtts,
                sync_rate_mb_per_s: args.sync_rate,
                commit_mode_rtt_ms: args.commit_mode_rtt,
                async_cpu_rtt_ms: args.async_cpu_rtt,
                async_cpu_commits_per_s: args.async_cpu_rate,
                far_sync_near_rtt_ms: args.far_sync_near_rtt,
                far_sync_far_rtt_ms: args.far_sync_rtt,
                far_sync_clients: args.far_sync_clients,
                fan_out_rtt_ms: args.fan_out_rtt,
                fan_out_commits_per_s: args.fan_out_rate,
                external: !args.no_external,
                tls: args.tls,
                tcp_congestion: args.tcp_congestion,
                standby_dir: args.standby_dir,
            };
            let report = workload::bench_transport::run(&config, timed_progress("transport"))?;
            write_report(
                &workload::bench_transport::render(&report),
                &report,
                &args.json,
                &workload::bench_figures::transport(&report),
            )?;
            none_failed(
                report.failures.len(),
                "redoguard case(s) failed or are not valid (see FAILED above)",
            )
        }
        BenchCommand::Failover(args) => {
            // Ctrl-C stops the servers and takes the mesh down on the way out.
            workload::interrupt::install()?;
            let config = workload::bench_failover::FailoverConfig {
                binary: std::env::current_exe()?,
                dir: args.dir,
                trials: args.trials,
                threshold: args.threshold,
                cases: args.cases,
                sentinel: !args.no_sentinel,
            };
            let report = workload::bench_failover::run(&config, timed_progress("failover"))?;
            write_report(
                &workload::bench_failover::render(&report),
                &report,
                &args.json,
                &workload::bench_figures::failover(&report),
            )?;
            none_failed(
                report.failures.len(),
                "redoguard trial(s) failed or lost an acknowledged write (see FAILED above)",
            )
        }
        BenchCommand::Chaos(args) => {
            // Ctrl-C stops the processes, unmounts and takes the mesh down on the way out.
            workload::interrupt::install()?;
            let seed = args.seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_nanos() as u64)
            });
            let config = workload::bench_chaos::ChaosConfig {
                binary: std::env::current_exe()?,
                dir: args.dir,
                rounds: args.rounds,
                seed,
                round: args.round_seconds,
                threshold: args.threshold,
                rtt: args.rtt,
                faults: args.faults,
                layout: args.layout,
                rounds_per_epoch: args.rounds_per_epoch,
                settle_limit: args.settle_limit,
                plant: args.plant,
                keep_logs: args.keep_logs,
            };
            let report = workload::bench_chaos::run(&config, timed_progress("chaos"))?;
            write_report(
                &workload::bench_chaos::render(&report),
                &report,
                &args.json,
                &workload::bench_chaos::figure(&report),
            )?;
            anyhow::ensure!(
                report.violations == 0 && report.unsettled == 0 && report.failures.is_empty(),
                "{} violation(s), {} round(s) that did not settle and {} failure(s) (see VIOLATIONS, UNSETTLED and FAILED above); replay: {}",
                report.violations,
                report.unsettled,
                report.failures.len(),
                report.replay
            );
            Ok(())
        }
        BenchCommand::Ship(args) => {
            workload::interrupt::install()?;
            for &connections in &args.connections {
                within("--connections", connections, 1..=20, "1..=20")?;
            }
            for compression in &args.compression {
                anyhow::ensure!(
                    ["none", "lz4", "zstd"].contains(&compression.as_str()),
                    "--compression: '{compression}' is not none, lz4 or zstd"
                );
            }
            let log_bytes = if args.full { 1 << 30 } else { args.size };
            within("--size", log_bytes, 1 << 20..=4 << 30, "1 MiB..=4 GiB")?;
            let config = workload::bench_ship::ShipConfig {
                binary: std::env::current_exe()?,
                dir: args.dir,
                rtts_ms: args.rtts,
                connections: args.connections,
                compressions: args.compression,
                log_bytes,
            };
            let report = workload::bench_ship::run(&config, timed_progress("ship"))?;
            write_report(
                &workload::bench_ship::render(&report),
                &report,
                &args.json,
                &workload::bench_ship::figure(&report),
            )?;
            none_failed(report.failures.len(), "case(s) failed (see FAILED above)")
        }
        BenchCommand::Batch(args) => {
            workload::interrupt::install()?;
            anyhow::ensure!(
                ["lz4", "zstd"].contains(&args.compression.as_str()),
                "--compression: '{}' is not lz4 or zstd",
                args.compression
            );
            within("--rate", args.rate, 1.0..=200.0, "1..=200 MB/s")?;
            let config = workload::bench_batch::BatchConfig {
                binary: std::env::current_exe()?,
                dir: args.dir,
                rtt_ms: args.rtt,
                batch: args.duration,
                batch_mb_per_s: args.rate,
                compression: args.compression,
            };
            let report = workload::bench_batch::run(&config, timed_progress("batch"))?;
            write_report(
                &workload::bench_batch::render(&report),
                &report,
                &args.json,
                &workload::bench_batch::figure(&report),
            )?;
            none_failed(report.failures.len(), "case(s) failed (see FAILED above)")
        }
        BenchCommand::Apply(args) => {
            workload::interrupt::install()?;
            within("--clients", args.clients, 1..=256, "1..=256")?;
            within("--batch-clients", args.batch_clients, 1..=64, "1..=64")?;
            within("--log-file-size", args.log_file_size, 1 << 20..=1 << 30, "1 MiB..=1 GiB")?;
            anyhow::ensure!(!args.workloads.is_empty(), "--workloads: name at least one");
            let config = workload::bench_apply::ApplyConfig {
                binary: std::env::current_exe()?,
                dir: args.dir,
                duration: args.duration,
                workloads: args.workloads,
                oltp_clients: args.clients,
                batch_clients: args.batch_clients,
                log_file_size: args.log_file_size,
            };
            let report = workload::bench_apply::run(&config, timed_progress("apply"))?;
            write_report(
                &workload::bench_apply::render(&report),
                &report,
                &args.json,
                &workload::bench_apply::figure(&report),
            )?;
            none_failed(report.failures.len(), "case(s) failed (see FAILED above)")
        }
        BenchCommand::Commit(args) => {
            let config = workload::bench_commit::BenchCommitConfig {
                dir: args.dir,
                duration: args.duration,
                cases: args.cases,
            };
            let report =
                workload::bench_commit::run(&config, |step| eprintln!("bench commit: {step}"))?;
            write_report(
                &workload::bench_commit::render(&report),
                &report,
                &args.json,
                &workload::bench_figures::commit(&report),
            )
        }
    }
}

/// Prints a benchmark's table, writes its report as JSON to `json` and its figure as SVG
/// beside it, and says where.
fn write_report(
    text: &str,
    report: &impl serde::Serialize,
    json: &std::path::Path,
    figure: &tools::bench::plot::Figure,
) -> anyhow::Result<()> {
    tools::bench::report::write(text, report, json, figure)
}

/// A long benchmark's progress line: its name and the seconds since it began.
fn timed_progress(name: &'static str) -> impl Fn(&str) {
    let started = std::time::Instant::now();
    move |step| eprintln!("bench {name} [{:>4.0} s]: {step}", started.elapsed().as_secs_f64())
}

/// The run's verdict once its report is written: an error if `failed` of its cases failed.
fn none_failed(failed: usize, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(failed == 0, "{failed} {what}");
    Ok(())
}

/// A flag's value, refused (naming the flag and the range) outside `range`.
fn within<T: PartialOrd + std::fmt::Display>(
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
    range_text: &str,
) -> anyhow::Result<()> {
    anyhow::ensure!(range.contains(&value), "{flag}: {value} is outside {range_text}");
    Ok(())
}
