//! What the observer and a primary keep on disk, and their file format.
//!
//! Each is a small file replaced durably as a whole on every change (the caller writes it with
//! `redo::storage::replace_durably`), *before* the act the change allows:
//!
//! ```text
//! // Format: one line, then JSON:
//! // "redoguard <kind> record v1 crc32c=<8 hex digits over the JSON>\n" | JSON
//! ```
//!
//! A person can read it (`cat`); a file that does not match its checksum, or is not the kind
//! expected, is refused with the reason and the path, never taken as empty: an observer that
//! forgot a failover it made could lease the old primary again.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

const VERSION: u32 = 1;
/// Largest record file read (a record holds a few names).
pub const RECORD_BYTES_MAX: usize = 64 * 1024;

/// What the observer keeps on disk: the primary it knows, a failover it decided and has not
/// seen end, and the targets it let the primary go on without.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserverRecord {
    /// The database the configuration's members hold (0: none seen yet): a member of another
    /// database (a configuration rebuilt under the same names) is not taken for one of these.
    #[serde(default)]
    pub database_id: u64,
    /// The primary it knows, and its incarnation (0: none yet).
    pub primary: Option<String>,
    pub incarnation: u32,
    /// A failover it decided: from then on, no lease to `from` in `incarnation`, and no
    /// failover from it to any other target, until `to` refuses or a newer incarnation opens.
    pub failover: Option<PendingFailover>,
    /// Targets it granted the primary to go on without: no failover to them until the primary
    /// calls them synchronized again.
    pub ineligible: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingFailover {
    pub from: String,
    pub incarnation: u32,
    pub to: String,
}

/// What a primary keeps on disk of fast-start failover: the observer whose decisions it
/// takes, and the targets it has named an observer to (a new observer becomes active only once
/// every one of them follows it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrimaryRecord {
    pub active: Option<String>,
    pub announced_to: BTreeSet<String>,
}

/// A record file that cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("not a redoguard {expected} record (its first line is {found:?})")]
    WrongKind { expected: &'static str, found: String },
    #[error("record version {0} is not one this build reads (1)")]
    Version(u32),
    #[error("corrupt: the checksum does not match its contents (torn or damaged)")]
    Checksum,
    #[error("corrupt: {0}")]
    Malformed(String),
    #[error("{0} bytes: larger than a record can be ({RECORD_BYTES_MAX})")]
    TooLarge(usize),
}

trait Kind: Serialize + for<'de> Deserialize<'de> {
    const KIND: &'static str;
}

impl Kind for ObserverRecord {
    const KIND: &'static str = "observer";
}

impl Kind for PrimaryRecord {
    const KIND: &'static str = "primary";
}

fn encode<T: Kind>(record: &T) -> Vec<u8> {
    let body = serde_json::to_vec_pretty(record).expect("a record serializes");
    let mut bytes =
        format!("redoguard {} record v{VERSION} crc32c={:08x}\n", T::KIND, crc32c::crc32c(&body))
            .into_bytes();
    bytes.extend_from_slice(&body);
    bytes.push(b'\n');
    bytes
}

fn decode<T: Kind>(bytes: &[u8]) -> Result<T, RecordError> {
    if bytes.len() > RECORD_BYTES_MAX {
        return Err(RecordError::TooLarge(bytes.len()));
    }
    let newline = bytes.iter().position(|&byte| byte == b'\n').unwrap_or(bytes.len());
    let first = String::from_utf8_lossy(&bytes[..newline]).into_owned();
    let wrong = || RecordError::WrongKind { expected: T::KIND, found: first.clone() };
    let rest = first.strip_prefix(&format!("redoguard {} record v", T::KIND)).ok_or_else(wrong)?;
    let (version, crc) = rest.split_once(" crc32c=").ok_or_else(wrong)?;
    let version: u32 = version.parse().map_err(|_| wrong())?;
    if version != VERSION {
        return Err(RecordError::Version(version));
    }
    let crc_text = crc;
    let crc = u32::from_str_radix(crc_text, 16).map_err(|_| wrong())?;
    if format!("{crc:08x}") != crc_text {
        return Err(wrong());
    }
    let body = bytes.get(newline + 1..).unwrap_or_default();
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    if crc32c::crc32c(body) != crc {
        return Err(RecordError::Checksum);
    }
    serde_json::from_slice(body).map_err(|error| RecordError::Malformed(error.to_string()))
}

impl ObserverRecord {
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<ObserverRecord, RecordError> {
        decode(bytes)
    }
}

impl PrimaryRecord {
    pub fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    pub fn decode(bytes: &[u8]) -> Result<PrimaryRecord, RecordError> {
        decode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn record() -> ObserverRecord {
        ObserverRecord {
            database_id: 7,
            primary: Some("west".into()),
            incarnation: 2,
            failover: Some(PendingFailover {
                from: "east".into(),
                incarnation: 1,
                to: "west".into(),
            }),
            ineligible: ["far".to_string()].into(),
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let bytes = record().encode();
        assert!(bytes.starts_with(b"redoguard observer record v1 crc32c="));
        assert_eq!(ObserverRecord::decode(&bytes).unwrap(), record());
        let primary =
            PrimaryRecord { active: Some("o1".into()), announced_to: ["west".to_string()].into() };
        assert_eq!(PrimaryRecord::decode(&primary.encode()).unwrap(), primary);
    }

    #[test]
    fn a_damaged_or_foreign_record_is_refused_by_name() {
        let mut bytes = record().encode();
        let last = bytes.len() - 3;
        bytes[last] ^= 1;
        assert_eq!(ObserverRecord::decode(&bytes), Err(RecordError::Checksum));
        assert!(matches!(
            PrimaryRecord::decode(&record().encode()),
            Err(RecordError::WrongKind { expected: "primary", .. })
        ));
        assert!(matches!(ObserverRecord::decode(b""), Err(RecordError::WrongKind { .. })));
        let truncated = record().encode();
        assert!(ObserverRecord::decode(&truncated[..truncated.len() / 2]).is_err());
    }

    proptest! {
        #[test]
        fn no_bytes_make_decode_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = ObserverRecord::decode(&bytes);
            let _ = PrimaryRecord::decode(&bytes);
        }

        #[test]
        fn any_flipped_byte_is_refused(at in 0usize..10_000, bit in 0u8..8) {
            let mut bytes = record().encode();
            let at = at % bytes.len();
            bytes[at] ^= 1 << bit;
            prop_assert!(ObserverRecord::decode(&bytes) != Ok(record()));
        }
    }
}
