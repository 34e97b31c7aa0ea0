//! The divergent tail a reinstate sets aside, as files: the transactions an old primary wrote
//! past the point where the new incarnation began (`server::role::divergent` writes them), kept
//! byte for byte for the DBA to list (`show`, `redoguard reinstate --show-divergent DIR`) and
//! replay (each transaction as Redis commands, `replay_of` and `write_resp`).
//!
//! ```text
//! // Format of divergent.redo (little-endian):
//! // { magic: u32 "RGDV" | version: u16 (1) | records: { scn: u64 | len: u32
//! //   | crc32c: u32 (over payload) | payload: [u8; len] } … }
//! ```

use std::path::Path;

use bytes::Bytes;

use crate::change::Change;

const MAGIC: u32 = u32::from_le_bytes(*b"RGDV");
const VERSION: u16 = 1;
/// Largest record payload read back (a redo record is at most this large).
const PAYLOAD_MAX: usize = 1 << 30;
/// The records byte for byte.
pub const REDO_FILE: &str = "divergent.redo";
/// The records as Redis commands, for `redis-cli --pipe`.
pub const RESP_FILE: &str = "divergent.resp";

/// A divergent tail that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum DivergentError {
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: corrupt at byte {at}: {reason}")]
    Corrupt { path: String, at: usize, reason: String },
    #[error("{path}: version {version}, not one this build reads (1)")]
    Version { path: String, version: u16 },
}

/// The start of a `divergent.redo`.
pub fn write_header(out: &mut impl std::io::Write) -> std::io::Result<()> {
    out.write_all(&MAGIC.to_le_bytes())?;
    out.write_all(&VERSION.to_le_bytes())
}

/// One record of a `divergent.redo`.
pub fn write_record(
    out: &mut impl std::io::Write,
    scn: u64,
    payload: &[u8],
) -> std::io::Result<()> {
    out.write_all(&scn.to_le_bytes())?;
    out.write_all(&(payload.len() as u32).to_le_bytes())?;
    out.write_all(&crc32c::crc32c(payload).to_le_bytes())?;
    out.write_all(payload)
}

/// How a change is replayed as a Redis command.
pub enum Replay {
    Command(Vec<Vec<u8>>),
    /// Nothing to send (an empty collection made for the elements that follow).
    Nothing,
    /// A change by position (an element inserted or removed at an index of a list) that no
    /// Redis command does: the transaction is listed, not replayed.
    Impossible,
}

pub fn replay_of(change: &Change) -> Replay {
    let args = |parts: &[&[u8]]| Replay::Command(parts.iter().map(|part| part.to_vec()).collect());
    let end = |end: &keyspace::End, left: &'static [u8], right: &'static [u8]| match end {
        keyspace::End::Left => left,
        keyspace::End::Right => right,
    };
    match change {
        Change::String { key, row } => match crate::layout::KeyRow::decode(row) {
            Ok(crate::layout::KeyRow {
                body: crate::layout::Body::String(value),
                expires_at,
                ..
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
pub fn write_resp(out: &mut impl std::io::Write, changes: &[Change]) -> std::io::Result<bool> {
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

/// How many records `dir`'s `divergent.redo` holds (0 if there is none).
pub fn records(dir: &Path) -> Result<u64, DivergentError> {
    if !dir.join(REDO_FILE).exists() {
        return Ok(0);
    }
    let listing = show(dir)?;
    Ok(listing.lines().filter(|line| line.starts_with("SCN ")).count() as u64)
}

/// The records of a `divergent.redo`, for a person: one line per change, values quoted as
/// `redis-cli` quotes them (`\xNN` for bytes that are not printable).
pub fn show(dir: &Path) -> Result<String, DivergentError> {
    let path = dir.join(REDO_FILE);
    let bytes = std::fs::read(&path)
        .map_err(|source| DivergentError::Io { path: path.display().to_string(), source })?;
    let corrupt = |at: usize, what: &str| DivergentError::Corrupt {
        path: path.display().to_string(),
        at,
        reason: what.to_string(),
    };
    if bytes.len() < 6 || bytes[0..4] != MAGIC.to_le_bytes() {
        return Err(corrupt(0, "not a divergent tail (bad magic)"));
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(DivergentError::Version { path: path.display().to_string(), version });
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
        match crate::change::decode(&Bytes::copy_from_slice(payload)) {
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
