//! `redoguard bench …`: end-to-end benchmarks with JSON results.

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {}
}
