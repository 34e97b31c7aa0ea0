//! `redoguard nettest server|client`: redo transport without the database.

use anyhow::Context;
use tools::nettest::{self, ClientReport};

#[derive(Debug, clap::Subcommand)]
pub enum NettestCommand {
    /// Plays the standby: receives, optionally writes and fdatasyncs, acknowledges.
    Server(nettest::ServerArgs),
    /// Plays the primary's redo sender and reports throughput and latency.
    Client(nettest::ClientArgs),
}

pub fn run(command: NettestCommand) -> anyhow::Result<()> {
    match command {
        NettestCommand::Server(args) => {
            let config = args.config()?;
            eprintln!(
                "nettest server on {} ({}); Ctrl-C stops it",
                config.bind,
                match &config.file {
                    Some(path) => format!("--write allowed: files {}.N", path.display()),
                    None => "no --file: clients cannot --write".into(),
                }
            );
            nettest::serve(config)?;
            Ok(())
        }
        NettestCommand::Client(args) => {
            let config = args.config()?;
            println!("{}", ClientReport::describe(&config));
            println!();
            println!("{}", ClientReport::interval_heading(config.mode));
            let report = nettest::run_client_with(&config, |interval| {
                println!("{}", ClientReport::interval_line(config.mode, interval));
            })?;
            println!();
            println!("{}", report.summary_text());
            if let Some(path) = &args.json {
                let json = serde_json::to_string_pretty(&report)?;
                std::fs::write(path, json + "\n")
                    .with_context(|| format!("write the JSON report to {}", path.display()))?;
            }
            Ok(())
        }
    }
}
