//! `redoguard`: the one command. Each subcommand lives in its own module under `cmd/` and
//! calls into a library crate; nothing here knows how redo is written or shipped.

mod cmd;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "redoguard",
    version,
    about = "Data Guard-style disaster recovery: redo transport, standbys, and the tools to plan them"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs the built-in demonstration on a throwaway data directory.
    Demo(cmd::demo::Args),
    /// Benchmarks that reproduce the reference experiments (JSON out).
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("REDOGUARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => cmd::demo::run(args),
        Command::Bench(command) => cmd::bench::run(command),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("redoguard: error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
