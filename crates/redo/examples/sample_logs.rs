//! Writes a few small archived logs into a directory: seeds for the fuzz targets, and sample
//! files to look at with a hex dump next to `docs/redo-format.md`.
//!
//! `cargo run -p redo --example sample_logs -- DIR`

use std::path::PathBuf;
use std::sync::Arc;

use redo::{CommitOptions, OsStorage, RedoConfig, RedoLog};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or("usage: sample_logs DIR")?);
    let work = tempfile_dir()?;
    let config = RedoConfig {
        log_file_size: 64 << 10,
        block_size: 4096,
        archive_dests: vec![dir.clone()],
        ..RedoConfig::default()
    }
    .resolve(&work);
    let log = RedoLog::open(config, Arc::new(OsStorage::default()), stats::Metrics::new())?;
    for round in 0..4u64 {
        for n in 0..(round + 1) * 3 {
            let payload: Vec<u8> = (0..(n * 397 % 9000)).map(|byte| (byte ^ n) as u8).collect();
            log.commit(&payload, CommitOptions::default())?;
        }
        // No data files here: the checkpoint is immediate, so every group may be reused.
        log.advance_checkpoint(log.durable_scn())?;
        log.switch_logfile()?;
    }
    while log.archived_logs().len() < 4 {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    log.shutdown()?;
    std::fs::remove_dir_all(&work)?;
    println!("wrote {} archived logs to {}", 4, dir.display());
    Ok(())
}

fn tempfile_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("redoguard-sample-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
