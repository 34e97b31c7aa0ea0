//! `redoguard advise`: sizing from bandwidth, RTT and peak redo rate.

use anyhow::Context;
use tools::advise::{self, AdviseArgs};

pub fn run(args: AdviseArgs) -> anyhow::Result<()> {
    let input = args.input()?;
    let advice = advise::with_current_kernel_values(advise::advise(&input));
    println!("{}", advice.text());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&advice)?;
        std::fs::write(path, json + "\n")
            .with_context(|| format!("write the JSON advice to {}", path.display()))?;
    }
    Ok(())
}
