//! The divergent tail a reinstate sets aside: the transactions an old primary wrote past the
//! point where the new incarnation began, which no member that follows the new primary holds.
//! They are kept byte for byte, for the DBA to look at and, if wanted, replay on the new
//! primary:
//!
//! - `divergent.redo`: every record as the redo held it (`{ scn | len | crc32c | payload }`,
//!   below), the source of truth;
//! - `divergent.resp`: the same transactions as Redis commands (`MULTI`, a command per change,
//!   `EXEC`), binary-safe: `redis-cli -h HOST -p PORT --pipe < divergent.resp` replays them (a
//!   transaction that changes a list by position, which no command does, is left out and
//!   named in the README);
//! - `README`: what they are, how many, and what could not be read.
//!
//! `redoguard reinstate --show-divergent DIR` lists `divergent.redo` for a person (`show`).
//!
//! ```text
//! // Format of divergent.redo (little-endian):
//! // { magic: u32 "RGDV" | version: u16 (1) | records: { scn: u64 | len: u32
//! //   | crc32c: u32 (over payload) | payload: [u8; len] } … }
//! ```

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, anyhow};
use bytes::Bytes;
use db::change::Change;
use redo::Scn;

const MAGIC: u32 = u32::from_le_bytes(*b"RGDV");
const VERSION: u16 = 1;
/// Largest record payload read back (a redo record is at most this large).
const PAYLOAD_MAX: usize = 1 << 30;
pub const REDO_FILE: &str = "divergent.redo";
pub const RESP_FILE: &str = "divergent.resp";

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
    redo_out.write_all(&MAGIC.to_le_bytes())?;
    redo_out.write_all(&VERSION.to_le_bytes())?;
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
        redo_out.write_all(&record.scn.0.to_le_bytes())?;
        redo_out.write_all(&(record.payload.len() as u32).to_le_bytes())?;
        redo_out.write_all(&crc32c::crc32c(&record.payload).to_le_bytes())?;
        redo_out.write_all(&record.payload)?;
        match db::change::decode(&Bytes::from(record.payload)) {
            Ok(changes) => {
                if !write_resp(&mut resp_out, &changes)? {
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

/// How a change is replayed as a Redis command.
enum Replay {
    Command(Vec<Vec<u8>>),
    /// Nothing to send (an empty collection made for the elements that follow).
    Nothing,
    /// A change by position (an element inserted or removed at an index of a list) that no
    /// Redis command does: the transaction is listed, not replayed.
    Impossible,
}

fn replay_of(change: &Change) -> Replay {
    let args = |parts: &[&[u8]]| Replay::Command(parts.iter().map(|part| part.to_vec()).collect());
    let end = |end: &keyspace::End, left: &'static [u8], right: &'static [u8]| match end {
        keyspace::End::Left => left,
        keyspace::End::Right => right,
    };
    match change {
        Change::String { key, row } => match db::layout::KeyRow::decode(row) {
            Ok(db::layout::KeyRow {
                body: db::layout::Body::String(value), expires_at, ..
            }) => {
                if expires_at == 0 {
                    args(&[b"SET", key, &value])
                } else {
                    args(&[b"SET", key, &value, b"PXAT", expires_at.to_string().as_bytes()])
                }
            }
            _ => Replay::Impossible,
        },
        Change::Delete { key } => args(&[b"DEL", key]),
        Change::Expire { key, at: 0 } => args(&[b"PERSIST", key]),
        Change::Expire { key, at } => args(&[b"PEXPIREAT", key, at.to_string().as_bytes()]),
        Change::Create { .. } => Replay::Nothing,
        Change::HashSet { key, field, value } => args(&[b"HSET", key, field, value]),
        Change::HashDelete { key, field } => args(&[b"HDEL", key, field]),
        Change::ListPush { key, end: side, value } => {
            args(&[end(side, b"LPUSH", b"RPUSH"), key, value])
        }
        Change::ListPop { key, end: side } => args(&[end(side, b"LPOP", b"RPOP"), key]),
        Change::ListSet { key, index, value } => {
            args(&[b"LSET", key, index.to_string().as_bytes(), value])
        }
        Change::ListInsert { .. } | Change::ListRemove { .. } => Replay::Impossible,
        Change::SetAdd { key, member } => args(&[b"SADD", key, member]),
        Change::SetRemove { key, member } => args(&[b"SREM", key, member]),
        Change::ZAdd { key, member, score } => {
            args(&[b"ZADD", key, keyspace::number::format_score(*score).as_bytes(), member])
        }
        Change::ZRemove { key, member } => args(&[b"ZREM", key, member]),
        Change::Rename { from, to } => args(&[b"RENAME", from, to]),
        Change::Copy { from, to, .. } => args(&[b"COPY", from, to]),
        Change::FlushAll => args(&[b"FLUSHALL"]),
    }
}

/// One transaction as RESP commands (`MULTI`, a command per change, `EXEC`); false, and
/// nothing written, if one of its changes has no Redis command.
fn write_resp(out: &mut impl std::io::Write, changes: &[Change]) -> std::io::Result<bool> {
    let mut commands = Vec::new();
    for change in changes {
        match replay_of(change) {
            Replay::Command(command) => commands.push(command),
            Replay::Nothing => {}
            Replay::Impossible => return Ok(false),
        }
    }
    let mut command = |args: &[Vec<u8>]| -> std::io::Result<()> {
        write!(out, "*{}\r\n", args.len())?;
        for arg in args {
            write!(out, "${}\r\n", arg.len())?;
            out.write_all(arg)?;
            out.write_all(b"\r\n")?;
        }
        Ok(())
    };
    command(&[b"MULTI".to_vec()])?;
    for args in &commands {
        command(args)?;
    }
    command(&[b"EXEC".to_vec()])?;
    Ok(true)
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

/// How many records `dir`'s `divergent.redo` holds (0 if there is none).
pub fn records(dir: &Path) -> anyhow::Result<u64> {
    if !dir.join(REDO_FILE).exists() {
        return Ok(0);
    }
    let listing = show(dir)?;
    Ok(listing.lines().filter(|line| line.starts_with("SCN ")).count() as u64)
}

/// The records of a `divergent.redo`, for a person: one line per change, values quoted as
/// `redis-cli` quotes them (`\xNN` for bytes that are not printable).
pub fn show(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join(REDO_FILE);
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let corrupt =
        |at: usize, what: &str| anyhow!("{}: corrupt at byte {at}: {what}", path.display());
    if bytes.len() < 6 || bytes[0..4] != MAGIC.to_le_bytes() {
        return Err(corrupt(0, "not a divergent tail (bad magic)"));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(anyhow!("{}: version {version}, not one this build reads (1)", path.display()));
    }
    let mut out = String::new();
    let mut at = 6;
    let mut count = 0u64;
    while at < bytes.len() {
        let header =
            bytes.get(at..at + 16).ok_or_else(|| corrupt(at, "a truncated record header"))?;
        let scn = u64::from_le_bytes(header[0..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        if len > PAYLOAD_MAX {
            return Err(corrupt(at, &format!("a record of {len} bytes")));
        }
        let payload =
            bytes.get(at + 16..at + 16 + len).ok_or_else(|| corrupt(at, "a truncated record"))?;
        if crc32c::crc32c(payload) != crc {
            return Err(corrupt(at, &format!("the record at SCN {scn} fails its checksum")));
        }
        out += &format!("SCN {scn}:\n");
        match db::change::decode(&Bytes::copy_from_slice(payload)) {
            Ok(changes) => {
                for change in changes {
                    out += &match replay_of(&change) {
                        Replay::Command(args) => format!(
                            "  {}\n",
                            args.iter()
                                .enumerate()
                                .map(|(index, arg)| if index == 0 {
                                    String::from_utf8_lossy(arg).into_owned()
                                } else {
                                    quote(arg)
                                })
                                .collect::<Vec<_>>()
                                .join(" ")
                        ),
                        Replay::Nothing => continue,
                        Replay::Impossible => format!("  ({} {change:?})\n", change.name()),
                    };
                }
            }
            Err(error) => out += &format!("  (not a list of changes: {error})\n"),
        }
        at += 16 + len;
        count += 1;
    }
    out += &format!("{count} records\n");
    Ok(out)
}

/// `bytes` quoted as redis-cli shows a string.
fn quote(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    for &byte in bytes {
        match byte {
            b'"' => out += "\\\"",
            b'\\' => out += "\\\\",
            b'\n' => out += "\\n",
            b'\r' => out += "\\r",
            b'\t' => out += "\\t",
            0x20..=0x7e => out.push(byte as char),
            _ => out += &format!("\\x{byte:02x}"),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_values_are_quoted_as_redis_cli_does() {
        assert_eq!(quote(b"a\"b\\\x00\xff\n"), "\"a\\\"b\\\\\\x00\\xff\\n\"");
    }

    #[test]
    fn a_transaction_becomes_a_multi_exec_block_byte_for_byte() {
        let mut out = Vec::new();
        let written = write_resp(
            &mut out,
            &[
                Change::HashSet {
                    key: Bytes::from_static(b"k\x00"),
                    field: Bytes::from_static(b"f"),
                    value: Bytes::from_static(b"\xff\r\n"),
                },
                Change::Delete { key: Bytes::from_static(b"gone") },
            ],
        )
        .unwrap();
        assert!(written);
        assert_eq!(
            out,
            b"*1\r\n$5\r\nMULTI\r\n*4\r\n$4\r\nHSET\r\n$2\r\nk\x00\r\n$1\r\nf\r\n$3\r\n\xff\r\n\r\n*2\r\n$3\r\nDEL\r\n$4\r\ngone\r\n*1\r\n$4\r\nEXEC\r\n"
        );
        let mut out = Vec::new();
        let by_position = [Change::ListRemove { key: Bytes::from_static(b"l"), index: 2 }];
        assert!(!write_resp(&mut out, &by_position).unwrap());
        assert!(out.is_empty());
    }
}
