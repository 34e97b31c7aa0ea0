//! `redoguard demo`: the main job on an embedded default setup.

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long the workload runs (e.g. 20s).
    #[arg(long, default_value = "20s", value_parser = tools::units::parse_duration)]
    pub duration: std::time::Duration,
}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("the demo is being built (issue 2)")
}
