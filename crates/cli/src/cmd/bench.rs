//! `redoguard bench …`: end-to-end benchmarks with JSON results.

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// nettest vs iperf3 and a minimal ping-pong, linkemu's ceiling and accuracy, and the
    /// reference's socket-buffer experiment at 1 Gbit/s, 25 and 100 ms (table, JSON, SVG).
    Net(tools::bench::net::BenchNetArgs),
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Net(args) => {
            tools::bench::net::check_dir(&args.dir)?;
            let report = tools::bench::net::run(&args, |step| eprintln!("bench net: {step}"))?;
            println!("{}", report.text());
            println!("json: {}", args.json.display());
            Ok(())
        }
    }
}
