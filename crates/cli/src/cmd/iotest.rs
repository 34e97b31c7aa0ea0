//! `redoguard iotest`: what a standby log write ("RFS write") costs on this disk.

use anyhow::Context;
use tools::iotest::{self, IoTestArgs, IoTestReport};

pub fn run(args: IoTestArgs) -> anyhow::Result<()> {
    let configs = args.configs()?;
    println!(
        "iotest in {}: sequential writes into a preallocated file, each made durable ({:?}); MB = 1,000,000 bytes",
        args.dir.display(),
        args.method
    );
    println!("{}", IoTestReport::heading());
    let mut reports = Vec::with_capacity(configs.len());
    for config in &configs {
        let report = iotest::run(config)
            .with_context(|| format!("run iotest with {}-byte writes", config.write_bytes))?;
        println!("{}", report.line());
        reports.push(report);
    }
    let mut notes: Vec<String> = reports.iter().flat_map(IoTestReport::notes).collect();
    notes.dedup();
    for note in notes {
        println!("note: {note}");
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&serde_json::json!({ "runs": reports }))?;
        std::fs::write(path, json + "\n")
            .with_context(|| format!("write the JSON report to {}", path.display()))?;
    }
    Ok(())
}
