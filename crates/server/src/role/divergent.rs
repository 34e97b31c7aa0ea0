//! The divergent tail a reinstate sets aside (`db::divergent` has the files' format, the
//! listing and the replay as Redis commands): the transactions an old primary wrote past the
//! point where the new incarnation began, which no member that follows the new primary holds,
//! kept byte for byte for the DBA to look at and, if wanted, replay on the new primary:
//!
//! - `divergent.redo`: every record as the redo held it, the source of truth;
//! - `divergent.resp`: the same transactions as Redis commands (`MULTI`, a command per change,
//!   `EXEC`), binary-safe: `redis-cli -h HOST -p PORT --pipe < divergent.resp` replays them (a
//!   transaction that changes a list by position, which no command does, is left out and
//!   named in the README);
//! - `README`: what they are, how many, and what could not be read.

use std::path::Path;

use anyhow::{Context as _, anyhow};
use bytes::Bytes;
use db::divergent::{REDO_FILE, RESP_FILE};
use redo::Scn;

/// What a reinstate set aside of the records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// First and last SCN, and how many records.
    pub range: Option<(Scn, Scn, u64)>,
    /// Why (some of) the tail could not be read, if it could not.
    pub unreadable: Option<String>,
}

/// Writes the records of `db` from `first_scn` on into `dir` (synced), as the module says.
pub fn write(db: &db::Database, first_scn: Scn, dir: &Path) -> anyhow::Result<Written> {
    let mut written = Written::default();
    if first_scn.0 == 0 {
        return Ok(written);
    }
    let mut reader = match db.redo().read_from_scn(first_scn) {
        Ok(reader) => reader,
        Err(redo::RedoError::ScnNotAvailable { .. }) => {
            written.unreadable = Some(format!(
                "the redo from SCN {first_scn} on is no longer readable here (its logs were archived and removed); the logs set aside beside this file hold what remained"
            ));
            write_readme(dir, &written)?;
            return Ok(written);
        }
        Err(error) => return Err(error.into()),
    };
    let create = |name: &str| -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
        let path = dir.join(name);
        Ok(std::io::BufWriter::new(
            std::fs::File::create(&path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ))
    };
    let mut redo_out = create(REDO_FILE)?;
    let mut resp_out = create(RESP_FILE)?;
    db::divergent::write_header(&mut redo_out)?;
    loop {
        let record = match reader.next_record() {
            Ok(Some(record)) => record,
            Ok(None) => break,
            Err(error) => {
                written.unreadable = Some(format!(
                    "reading stopped after {} records: {error}",
                    written.range.map_or(0, |(_, _, count)| count)
                ));
                break;
            }
        };
        db::divergent::write_record(&mut redo_out, record.scn.0, &record.payload)?;
        match db::change::decode(&Bytes::from(record.payload)) {
            Ok(changes) => {
                if !db::divergent::write_resp(&mut resp_out, &changes)? {
                    written.unreadable.get_or_insert(format!(
                        "the transaction at SCN {} changes a list by position, which no Redis command does: it is in {REDO_FILE} (and listed), not in {RESP_FILE}",
                        record.scn
                    ));
                }
            }
            Err(error) => {
                written.unreadable.get_or_insert(format!(
                    "the record at SCN {} is not a list of changes ({error}): it is in {REDO_FILE}, not in {RESP_FILE}",
                    record.scn
                ));
            }
        }
        written.range = Some(match written.range {
            None => (record.scn, record.scn, 1),
            Some((first, _, count)) => (first, record.scn, count + 1),
        });
    }
    for (out, name) in [(redo_out, REDO_FILE), (resp_out, RESP_FILE)] {
        out.into_inner()
            .map_err(|error| anyhow!("writing {}: {error}", dir.join(name).display()))?
            .sync_all()?;
    }
    write_readme(dir, &written)?;
    Ok(written)
}

fn write_readme(dir: &Path, written: &Written) -> anyhow::Result<()> {
    let mut text = String::from(
        "Transactions this member wrote as the primary after the point where a newer incarnation\nbegan on another member: no member that follows the new primary holds them.\n\n",
    );
    match written.range {
        Some((first, last, count)) => {
            text += &format!(
                "{count} records, SCN {first} to {last}.\n- {REDO_FILE}: byte for byte as the redo held them (`redoguard reinstate --show-divergent {}` lists them).\n- {RESP_FILE}: the same as Redis commands; `redis-cli -h HOST -p PORT --pipe < {RESP_FILE}` replays them on the primary.\n",
                dir.display()
            )
        }
        None => text += "No record.\n",
    }
    if let Some(unreadable) = &written.unreadable {
        text += &format!("\nNOT EVERYTHING COULD BE READ: {unreadable}\n");
    }
    let path = dir.join("README");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}
