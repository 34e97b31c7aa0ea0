//! `redoguard linkemu up|down|set|status`: a WAN link between two network namespaces.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use linkemu::LinkConfig;
use linkemu::daemon::{self, LinkChange, LinkInfo, Request};
use tools::units::{ByteSize, Rate, parse_duration, parse_rate, parse_ratio};

#[derive(Debug, clap::Subcommand)]
pub enum LinkemuCommand {
    /// Creates the two namespaces and starts the forwarder (in the background).
    Up(UpArgs),
    /// Stops the forwarder and removes everything `up` made.
    Down(NameArg),
    /// Changes a running link (or cuts and restores it).
    Set(SetArgs),
    /// Shows a running link's settings and counters (all links without --name).
    Status(StatusArgs),
}

#[derive(Debug, clap::Args)]
pub struct NameArg {
    /// The link's name: its namespaces are NAME-a and NAME-b.
    #[arg(long, default_value = daemon::DEFAULT_NAME)]
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub name: NameArg,
    /// Round-trip time (each direction delays by half).
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    pub rtt: Duration,
    /// Line rate (1gbit, 100mbit, 20MB/s); none = uncapped.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<Rate>,
    /// Packet loss per direction (0.1%, 0.001).
    #[arg(long, default_value = "0", value_parser = parse_ratio)]
    pub loss: f64,
    /// Drop-tail queue in front of the rate cap (default: rate x max(RTT, 10ms)).
    #[arg(long)]
    pub queue: Option<ByteSize>,
    /// One-way delay varies within +/- this (never reordering).
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    pub jitter: Duration,
    /// MTU of the TUN devices.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// Forward packet by packet instead of as 64 KiB TSO super-packets (slower, exact loss).
    #[arg(long)]
    pub no_offload: bool,
    /// Run in the foreground until Ctrl-C instead of in the background.
    #[arg(long)]
    pub foreground: bool,
}

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    #[command(flatten)]
    pub name: NameArg,
    #[arg(long, value_parser = parse_duration)]
    pub rtt: Option<Duration>,
    #[arg(long, value_parser = parse_rate, conflicts_with = "no_rate")]
    pub rate: Option<Rate>,
    /// Remove the rate cap.
    #[arg(long)]
    pub no_rate: bool,
    #[arg(long, value_parser = parse_ratio)]
    pub loss: Option<f64>,
    #[arg(long, value_parser = parse_duration)]
    pub jitter: Option<Duration>,
    #[arg(long)]
    pub queue: Option<ByteSize>,
    /// Drop every packet until --restore.
    #[arg(long, conflicts_with = "restore")]
    pub cut: bool,
    /// End a cut.
    #[arg(long)]
    pub restore: bool,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub name: Option<String>,
}

fn rate_bits(rate: Rate) -> anyhow::Result<u64> {
    let bits = rate.bits_per_s.round();
    anyhow::ensure!(bits >= 1.0 && bits < u64::MAX as f64, "--rate {rate} is out of range");
    Ok(bits as u64)
}

fn config(args: &UpArgs) -> anyhow::Result<LinkConfig> {
    let config = LinkConfig {
        rtt: args.rtt,
        rate_bits_per_s: args.rate.map(rate_bits).transpose()?,
        loss_ratio: args.loss,
        queue_bytes: args.queue.map(ByteSize::bytes),
        jitter: args.jitter,
        mtu: args.mtu,
        offload: !args.no_offload,
        ..LinkConfig::default()
    };
    config.validate()?;
    Ok(config)
}

fn describe(info: &LinkInfo) -> String {
    let config = &info.config;
    let rate = config
        .rate_bits_per_s
        .map_or("uncapped".to_string(), |bits| Rate { bits_per_s: bits as f64 }.to_string());
    format!(
        "link '{}' is up (pid {}): rtt {:?}, rate {rate}, loss {}%, jitter {:?}, queue {} bytes\n  side A: namespace {} address {}\n  side B: namespace {} address {}\n  run a program on a side: ip netns exec {} COMMAND …\n  take it down: redoguard linkemu down --name {}",
        info.name,
        info.pid,
        config.rtt,
        config.loss_ratio * 100.0,
        config.jitter,
        config.effective_queue_bytes(),
        info.namespace_a,
        info.address_a,
        info.namespace_b,
        info.address_b,
        info.namespace_a,
        info.name
    )
}

pub fn run(command: LinkemuCommand) -> anyhow::Result<()> {
    match command {
        LinkemuCommand::Up(args) => up(args),
        LinkemuCommand::Down(args) => {
            daemon::down(&args.name)?;
            println!(
                "link '{}' is down: namespaces removed, socket buffer limits restored if no other link holds them",
                args.name
            );
            Ok(())
        }
        LinkemuCommand::Set(args) => {
            let name = &args.name.name;
            let change = LinkChange {
                rtt: args.rtt,
                rate_bits_per_s: if args.no_rate {
                    Some(None)
                } else {
                    args.rate.map(rate_bits).transpose()?.map(Some)
                },
                loss_ratio: args.loss,
                jitter: args.jitter,
                queue_bytes: args.queue.map(|queue| Some(queue.bytes())),
            };
            let mut response = daemon::request(name, &Request::Set { change })?;
            if args.cut {
                response = daemon::request(name, &Request::Cut)?;
            }
            if args.restore {
                response = daemon::request(name, &Request::Restore)?;
            }
            println!("{}", serde_json::to_string_pretty(&response)?);
            Ok(())
        }
        LinkemuCommand::Status(args) => {
            let links = daemon::list();
            let links: Vec<_> = links
                .iter()
                .filter(|info| args.name.as_ref().is_none_or(|name| *name == info.name))
                .collect();
            if links.is_empty() {
                bail!(
                    "no link is up{}",
                    args.name.map(|name| format!(" under the name '{name}'")).unwrap_or_default()
                );
            }
            for info in links {
                match daemon::request(&info.name, &Request::Status) {
                    Ok(response) => {
                        let live = LinkInfo { config: response.config.clone(), ..info.clone() };
                        let cut = if response.cut { "\n  CUT: dropping every packet" } else { "" };
                        println!("{}{cut}", describe(&live));
                        println!("{}", serde_json::to_string_pretty(&response.stats)?);
                    }
                    Err(error) => println!("{}\n  (not answering: {error})", describe(info)),
                }
            }
            Ok(())
        }
    }
}

fn up(args: UpArgs) -> anyhow::Result<()> {
    let config = config(&args)?;
    let name = args.name.name.clone();
    if args.foreground {
        return daemon::run_foreground(&name, config, |info| {
            // The first stdout line is what a parent `linkemu up` waits for.
            println!("{}", serde_json::to_string(info).expect("LinkInfo serialises"));
        })
        .context("run the link");
    }
    daemon::refuse_if_running(&name)?;
    std::fs::create_dir_all(daemon::links_dir()).context("create the linkemu state directory")?;
    let log_path = daemon::log_path(&name);
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("create {}", log_path.display()))?;
    let mut command = Command::new(std::env::current_exe().context("find this program")?);
    command.args(std::env::args_os().skip(1)).arg("--foreground");
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
    command.env("REDOGUARD_LOG", std::env::var("REDOGUARD_LOG").unwrap_or_else(|_| "info".into()));
    // A session of its own: the terminal's Ctrl-C and hang-up must not reach it.
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = command.spawn().context("start the background forwarder")?;
    let mut first_line = String::new();
    let stdout = child.stdout.take().expect("piped");
    BufReader::new(stdout.take(64 * 1024))
        .read_line(&mut first_line)
        .context("wait for the link")?;
    let Ok(info) = serde_json::from_str::<LinkInfo>(first_line.trim()) else {
        let _ = child.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        bail!("the link did not come up:\n{}", log.trim());
    };
    println!("{}", describe(&info));
    Ok(())
}
