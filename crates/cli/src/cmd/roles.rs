//! The broker's commands: `show configuration`, `show database NAME`, `validate NAME`,
//! `switchover --to NAME`, `failover --to NAME`, `reinstate NAME`. Each takes `--addr` of any
//! member's admin API and `--json`.

use broker::transitions;

#[derive(Debug, clap::Args)]
pub struct Target {
    /// The admin API of any member of the configuration.
    #[arg(long, default_value = "127.0.0.1:6391")]
    pub addr: String,
    /// Print JSON instead.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum ShowCommand {
    /// Every member: role, incarnation, transport, state, lags, last error, and warnings.
    Configuration(Target),
    /// One member in detail.
    Database {
        /// The member.
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The standby to check.
    pub name: String,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, clap::Args)]
pub struct SwitchoverArgs {
    /// The standby that becomes the primary.
    #[arg(long)]
    pub to: String,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, clap::Args)]
pub struct FailoverArgs {
    /// The standby that becomes the primary (of a new incarnation).
    #[arg(long)]
    pub to: String,
    /// Do not wait for real-time apply to finish: the standby opens at once (the redo it
    /// received and had not applied is replayed as it opens).
    #[arg(long)]
    pub immediate: bool,
    /// Fail over even though the primary is reachable (it is fenced first).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug, clap::Args)]
pub struct ReinstateArgs {
    /// The failed-over primary (or diverged standby) to make a standby of the current primary.
    #[arg(required_unless_present = "show_divergent")]
    pub name: Option<String>,
    /// Instead: list the divergent transactions a reinstate set aside in DIR (the `dir` its
    /// answer gave, `<data dir>/diverged/...`), byte for byte, values quoted as redis-cli does.
    /// `redis-cli --pipe < DIR/divergent.resp` replays them.
    #[arg(long, value_name = "DIR", conflicts_with = "name")]
    pub show_divergent: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub target: Target,
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

pub fn show(command: ShowCommand) -> anyhow::Result<()> {
    match command {
        ShowCommand::Configuration(target) => {
            let configuration = broker::gather(&target.addr)?;
            if target.json {
                return print_json(&configuration);
            }
            print!("{}", broker::report::render(&configuration));
            Ok(())
        }
        ShowCommand::Database { name, target } => {
            let configuration = broker::gather(&target.addr)?;
            let Some(member) = configuration.member(&name) else {
                anyhow::bail!("'{name}' is not a member of this configuration");
            };
            if target.json {
                return print_json(member);
            }
            print!("{}", broker::report::render_member(&configuration, &name).unwrap_or_default());
            Ok(())
        }
    }
}

pub fn validate(args: ValidateArgs) -> anyhow::Result<()> {
    let configuration = broker::gather(&args.target.addr)?;
    let validation = broker::validate(&configuration, &args.name);
    if args.target.json {
        return print_json(&validation);
    }
    print!("{}", broker::validate::render(&validation));
    Ok(())
}

pub fn switchover(args: SwitchoverArgs) -> anyhow::Result<()> {
    let done = transitions::switchover(&args.target.addr, &args.to)?;
    if args.target.json {
        return print_json(&done);
    }
    println!(
        "Switchover complete: '{}' is the primary, '{}' its standby (redo of '{}' ended at {}, SCN {}; {} ms)",
        done.to, done.from, done.from, done.prepared.end, done.prepared.last_scn, done.elapsed_ms
    );
    if !done.promoted.awaiting.is_empty() {
        println!(
            "'{}' takes writes once every member it ships to has welcomed it (a failover may have come after the prepare); it still waits for: {}",
            done.to,
            done.promoted.awaiting.join("; ")
        );
    }
    Ok(())
}

pub fn failover(args: FailoverArgs) -> anyhow::Result<()> {
    let done = transitions::failover(&args.target.addr, &args.to, args.immediate, args.force)?;
    if args.target.json {
        return print_json(&done);
    }
    let promoted = &done.promoted;
    println!(
        "Failover complete: '{}' is the primary of incarnation {} ({} ms); it begins at SCN {}.",
        done.to, promoted.incarnation, done.elapsed_ms, promoted.first_scn
    );
    match (promoted.old_primary_scn, promoted.lost_scns_at_most) {
        (Some(last), Some(0)) => println!(
            "Nothing was lost: the old primary's last known SCN ({last}) is in the new primary."
        ),
        (Some(last), Some(lost)) => println!(
            "The old primary had handed out SCNs up to {last} (durable up to {}): up to {lost} SCNs past the new primary's end may be lost (0 if they were never committed).",
            promoted.old_primary_durable_scn.map_or("?".to_string(), |scn| scn.to_string())
        ),
        _ => println!("The old primary's last SCN is not known (it was never heard from)."),
    }
    if let Some(tail) = &promoted.relay_tail {
        println!("'{}' {tail}.", done.to);
    }
    if let Some(delay) = promoted.delay_released_s {
        println!(
            "'{}' had an apply delay of {delay} s: it applied the redo the delay held back ({} SCNs received and not yet applied) before opening as the primary.",
            done.to, promoted.unapplied_scns
        );
    }
    if let Some(old) = &done.old_primary {
        println!(
            "'{old}' {}: start it (if it is down) and run `redoguard reinstate {old}` to make it a standby.",
            if done.fenced.contains(old) {
                "was fenced"
            } else {
                "is fenced as soon as it reaches any member"
            }
        );
    }
    // An older primary not told yet, fenced too (`--force`).
    for other in done.fenced.iter().filter(|name| Some(*name) != done.old_primary.as_ref()) {
        println!(
            "'{other}', a primary of an older incarnation, was fenced too: run `redoguard reinstate {other}` to make it a standby."
        );
    }
    Ok(())
}

pub fn reinstate(args: ReinstateArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.show_divergent {
        print!("{}", db::divergent::show(dir)?);
        return Ok(());
    }
    let name = args.name.as_deref().expect("clap requires a name without --show-divergent");
    let done = transitions::reinstate(&args.target.addr, name)?;
    if args.target.json {
        return print_json(&done);
    }
    println!(
        "Reinstated: '{}' is a standby of '{}' (incarnation {}; {} ms){}.",
        done.member,
        done.primary,
        done.incarnation,
        done.elapsed_ms,
        if done.rebuilt { ", rebuilt from a copy of the primary's data" } else { "" }
    );
    let aside = &done.set_aside;
    let logs: Vec<u64> = aside.logs.iter().map(|seq| seq.0).collect();
    match (aside.first_scn, aside.last_scn) {
        (Some(first), Some(last)) => println!(
            "Its redo past the failover point, SCN {first} to {last} ({} records, in logs {logs:?}), was set aside in {dir}; it was never applied on the new primary. `redoguard reinstate --show-divergent {dir}` lists them; `redis-cli --pipe < {dir}/divergent.resp` replays them.",
            aside.records,
            dir = aside.dir
        ),
        _ if logs.is_empty() => println!("It held no redo past the failover point."),
        _ => println!(
            "It held no record past the failover point; logs {logs:?}, which it had closed itself, were set aside in {} and are received again from the primary.",
            aside.dir
        ),
    }
    if let Some(unreadable) = &aside.unreadable {
        println!("NOT ALL OF IT COULD BE READ: {unreadable}");
    }
    Ok(())
}
