//! `redoguard edit destination NAME key=value…` (or `--reset`) and `redoguard edit
//! protection-mode MODE`, `redoguard edit fast-start observe-only|enabled`: run-time changes,
//! made on every member (`broker::edit`).

use broker::edit::{DestinationEdit, ProtectionMode};

use super::roles::Target;

#[derive(Debug, clap::Subcommand)]
pub enum EditCommand {
    /// Changes a destination (a member, as the primary ships to it) at run time: `state=defer`
    /// or `state=enable`, `transport=sync|async`, `affirm=true|false`, `net_timeout=2s`,
    /// `reopen=5s`, `max_failure=N`, `compression=none|lz4|zstd|auto`, `compression_level=N`,
    /// `compression_for=gap|all`, `max_connections=1..20`. Kept across restarts; refused, with
    /// nothing changed, where the protection mode forbids it.
    Destination {
        /// The destination (member) to change.
        name: String,
        /// `key=value` pairs.
        pairs: Vec<String>,
        /// Drop every run-time change of this destination: it is as the configuration files
        /// say again.
        #[arg(long, conflicts_with = "pairs")]
        reset: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Changes the protection mode at run time (`maximum_performance`, `maximum_availability`,
    /// `maximum_protection`). Raising it to maximum_protection needs a SYNC AFFIRM standby
    /// synchronized at that moment.
    ProtectionMode {
        mode: String,
        #[command(flatten)]
        target: Target,
    },
    /// Fast-start failover for planned maintenance: `observe-only` (the observers watch and
    /// report, but no failover happens: set on the standbys first, then the primary, which then
    /// goes on without its targets as plain Maximum Availability does), or `enabled` (the
    /// primary first). Kept across restarts.
    FastStart {
        #[arg(value_parser = ["observe-only", "enabled"])]
        mode: String,
        #[command(flatten)]
        target: Target,
    },
}

pub fn run(command: EditCommand) -> anyhow::Result<()> {
    let (request, target) = match command {
        EditCommand::Destination { name, pairs, reset, target } => {
            let request = if reset {
                broker::edit::EditRequest::Reset { name }
            } else {
                let edit = DestinationEdit::parse_pairs(&pairs).map_err(anyhow::Error::msg)?;
                broker::edit::EditRequest::Destination { name, edit }
            };
            (request, target)
        }
        EditCommand::ProtectionMode { mode, target } => {
            let mode: ProtectionMode = serde_json::from_value(serde_json::Value::from(
                mode.replace('-', "_").to_lowercase(),
            ))
            .map_err(|_| {
                anyhow::anyhow!(
                    "'{mode}' is not a protection mode: maximum_performance, maximum_availability or maximum_protection"
                )
            })?;
            (broker::edit::EditRequest::ProtectionMode(mode), target)
        }
        EditCommand::FastStart { mode, target } => {
            (broker::edit::EditRequest::FastStartObserveOnly(mode == "observe-only"), target)
        }
    };
    let report = broker::edit::edit(&target.addr, &request)?;
    if target.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", broker::edit::render(&report));
    }
    Ok(())
}
