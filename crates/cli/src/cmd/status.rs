//! `redoguard status`: what a running server is doing, for a person or as JSON.

use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server's admin API address.
    #[arg(long, default_value = "127.0.0.1:6391")]
    pub addr: String,
    /// Print the raw JSON instead.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let body = admin::http_get(&args.addr, "/status", Duration::from_secs(10))?;
    if args.json {
        println!("{body}");
        return Ok(());
    }
    let status: admin::ServerStatus = serde_json::from_str(&body).map_err(|error| {
        anyhow::anyhow!("{} answered something that is not a redoguard status: {error}", args.addr)
    })?;
    print!("{}", admin::status::render(&status));
    Ok(())
}
