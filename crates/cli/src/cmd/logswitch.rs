//! `redoguard logswitch`: switch logs now on a running primary (ALTER SYSTEM SWITCH LOGFILE).

use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The primary's admin API address.
    #[arg(long, default_value = "127.0.0.1:6391")]
    pub addr: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let answer = admin::http_post(&args.addr, "/logswitch", Duration::from_secs(60))?;
    println!("log switched: {}", answer.trim());
    Ok(())
}
