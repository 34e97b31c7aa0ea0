//! Change vectors: what a transaction did to the key space, as the payload of its redo
//! record. The redo engine never looks inside; recovery and apply decode it, and `effects`
//! turns each change into the rows it changes (the same function on the primary, in crash
//! recovery and on a standby, so the three hold the same rows at every SCN).
//!
//! A change says what happened to one key, or one element of one collection, in absolute
//! terms: a deadline is a time, not a time to live; a list element is pushed at an end or set
//! at an index; a set member is added. Whatever the primary decided by its clock or by chance
//! (that a key expired, which member SPOP took) is in the change as its outcome.

use bytes::{BufMut, Bytes};
use keyspace::{End, KeyType};

use crate::layout;

// Format of a record payload (little-endian):
// { version: u8 | count: u32 | change × count }
// change: { op: u8 | fields of the op, in the order of the table below }
// bytes field: { len: u32 | bytes }; u64, i64, f64 fields: 8 bytes; end: u8 (0 left, 1 right).
//
// | op | name     | fields                   | version |
// |----|----------|--------------------------|---------|
// | 1  | PUT      | key, value               | 1 only  |
// | 2  | DELETE   | key                      | 1, 2    |
// | 3  | STRING   | key, row (a key row)     | 2       |
// | 4  | EXPIRE   | key, at: u64 (0: none)   | 2       |
// | 5  | CREATE   | key, type: u8, id: u64   | 2       |
// | 6  | HSET     | key, field, value        | 2       |
// | 7  | HDEL     | key, field               | 2       |
// | 8  | LPUSH    | key, end, value          | 2       |
// | 9  | LPOP     | key, end                 | 2       |
// | 10 | LSET     | key, index: u64, value   | 2       |
// | 11 | LINSERT  | key, index: u64, value   | 2       |
// | 12 | LREMOVE  | key, index: u64          | 2       |
// | 13 | SADD     | key, member              | 2       |
// | 14 | SREM     | key, member              | 2       |
// | 15 | ZADD     | key, member, score: f64  | 2       |
// | 16 | ZREM     | key, member              | 2       |
// | 17 | RENAME   | from, to                 | 2       |
// | 18 | COPY     | from, to, id: u64        | 2       |
// | 19 | FLUSHALL |                          | 2       |

/// The version this database writes. It reads every version up to it; a record of a later
/// version (from a newer primary) is refused by its number, never guessed at.
pub const VERSION: u8 = 2;

/// The names of the operations, by code (for errors, and the divergent tail a reinstate keeps).
const NAMES: [&str; 20] = [
    "", "PUT", "DELETE", "STRING", "EXPIRE", "CREATE", "HSET", "HDEL", "LPUSH", "LPOP", "LSET",
    "LINSERT", "LREMOVE", "SADD", "SREM", "ZADD", "ZREM", "RENAME", "COPY", "FLUSHALL",
];

/// One change to one key, or to one element of one collection.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The key is this string (type, deadline and value: a whole key row, `layout::KeyRow`).
    String {
        key: Bytes,
        row: Bytes,
    },
    /// The key is gone, whatever its type.
    Delete {
        key: Bytes,
    },
    /// The key's deadline (milliseconds since the Unix epoch; 0: none).
    Expire {
        key: Bytes,
        at: u64,
    },
    /// A new, empty collection at `key` (none was there), its elements under `id`.
    Create {
        key: Bytes,
        kind: KeyType,
        id: u64,
    },
    HashSet {
        key: Bytes,
        field: Bytes,
        value: Bytes,
    },
    HashDelete {
        key: Bytes,
        field: Bytes,
    },
    ListPush {
        key: Bytes,
        end: End,
        value: Bytes,
    },
    ListPop {
        key: Bytes,
        end: End,
    },
    ListSet {
        key: Bytes,
        index: u64,
        value: Bytes,
    },
    /// The value becomes element `index`; the elements from there on move up one.
    ListInsert {
        key: Bytes,
        index: u64,
        value: Bytes,
    },
    /// Element `index` goes; the elements after it move down one.
    ListRemove {
        key: Bytes,
        index: u64,
    },
    SetAdd {
        key: Bytes,
        member: Bytes,
    },
    SetRemove {
        key: Bytes,
        member: Bytes,
    },
    /// The member has this score (added, or its score replaced).
    ZAdd {
        key: Bytes,
        member: Bytes,
        score: f64,
    },
    ZRemove {
        key: Bytes,
        member: Bytes,
    },
    /// `from` is now `to` (which was free), deadline and all.
    Rename {
        from: Bytes,
        to: Bytes,
    },
    /// `to` (which was free) is a copy of `from`, a collection's elements under `id`.
    Copy {
        from: Bytes,
        to: Bytes,
        id: u64,
    },
    /// Every key is gone.
    FlushAll,
}

impl Change {
    fn code(&self) -> u8 {
        match self {
            Change::Delete { .. } => 2,
            Change::String { .. } => 3,
            Change::Expire { .. } => 4,
            Change::Create { .. } => 5,
            Change::HashSet { .. } => 6,
            Change::HashDelete { .. } => 7,
            Change::ListPush { .. } => 8,
            Change::ListPop { .. } => 9,
            Change::ListSet { .. } => 10,
            Change::ListInsert { .. } => 11,
            Change::ListRemove { .. } => 12,
            Change::SetAdd { .. } => 13,
            Change::SetRemove { .. } => 14,
            Change::ZAdd { .. } => 15,
            Change::ZRemove { .. } => 16,
            Change::Rename { .. } => 17,
            Change::Copy { .. } => 18,
            Change::FlushAll => 19,
        }
    }

    /// The operation's name in docs/redo-format.md.
    pub fn name(&self) -> &'static str {
        NAMES[self.code() as usize]
    }

    /// The key the change is about (the source of a RENAME or COPY); none for FLUSHALL.
    pub fn key(&self) -> Option<&Bytes> {
        match self {
            Change::String { key, .. }
            | Change::Delete { key }
            | Change::Expire { key, .. }
            | Change::Create { key, .. }
            | Change::HashSet { key, .. }
            | Change::HashDelete { key, .. }
            | Change::ListPush { key, .. }
            | Change::ListPop { key, .. }
            | Change::ListSet { key, .. }
            | Change::ListInsert { key, .. }
            | Change::ListRemove { key, .. }
            | Change::SetAdd { key, .. }
            | Change::SetRemove { key, .. }
            | Change::ZAdd { key, .. }
            | Change::ZRemove { key, .. } => Some(key),
            Change::Rename { from, .. } | Change::Copy { from, .. } => Some(from),
            Change::FlushAll => None,
        }
    }

    /// Every key the change writes (both of a RENAME or COPY).
    pub fn keys(&self) -> Vec<&Bytes> {
        match self {
            Change::Rename { from, to } | Change::Copy { from, to, .. } => vec![from, to],
            other => other.key().into_iter().collect(),
        }
    }

    fn encoded_len(&self) -> usize {
        let field = |bytes: &Bytes| 4 + bytes.len();
        1 + match self {
            Change::String { key, row } => field(key) + field(row),
            Change::Delete { key } => field(key),
            Change::Expire { key, .. } => field(key) + 8,
            Change::Create { key, .. } => field(key) + 1 + 8,
            Change::HashSet { key, field: name, value } => field(key) + field(name) + field(value),
            Change::HashDelete { key, field: name } => field(key) + field(name),
            Change::ListPush { key, value, .. } => field(key) + 1 + field(value),
            Change::ListPop { key, .. } => field(key) + 1,
            Change::ListSet { key, value, .. } | Change::ListInsert { key, value, .. } => {
                field(key) + 8 + field(value)
            }
            Change::ListRemove { key, .. } => field(key) + 8,
            Change::SetAdd { key, member }
            | Change::SetRemove { key, member }
            | Change::ZRemove { key, member } => field(key) + field(member),
            Change::ZAdd { key, member, .. } => field(key) + field(member) + 8,
            Change::Rename { from, to } => field(from) + field(to),
            Change::Copy { from, to, .. } => field(from) + field(to) + 8,
            Change::FlushAll => 0,
        }
    }

    /// A copy that shares no memory with a request (keys and values of a request are slices
    /// of its whole buffer).
    pub fn detached(&self) -> Change {
        let own = |bytes: &Bytes| Bytes::copy_from_slice(bytes);
        match self {
            Change::String { key, row } => Change::String { key: own(key), row: own(row) },
            Change::Delete { key } => Change::Delete { key: own(key) },
            Change::Expire { key, at } => Change::Expire { key: own(key), at: *at },
            Change::Create { key, kind, id } => {
                Change::Create { key: own(key), kind: *kind, id: *id }
            }
            Change::HashSet { key, field, value } => {
                Change::HashSet { key: own(key), field: own(field), value: own(value) }
            }
            Change::HashDelete { key, field } => {
                Change::HashDelete { key: own(key), field: own(field) }
            }
            Change::ListPush { key, end, value } => {
                Change::ListPush { key: own(key), end: *end, value: own(value) }
            }
            Change::ListPop { key, end } => Change::ListPop { key: own(key), end: *end },
            Change::ListSet { key, index, value } => {
                Change::ListSet { key: own(key), index: *index, value: own(value) }
            }
            Change::ListInsert { key, index, value } => {
                Change::ListInsert { key: own(key), index: *index, value: own(value) }
            }
            Change::ListRemove { key, index } => {
                Change::ListRemove { key: own(key), index: *index }
            }
            Change::SetAdd { key, member } => Change::SetAdd { key: own(key), member: own(member) },
            Change::SetRemove { key, member } => {
                Change::SetRemove { key: own(key), member: own(member) }
            }
            Change::ZAdd { key, member, score } => {
                Change::ZAdd { key: own(key), member: own(member), score: *score }
            }
            Change::ZRemove { key, member } => {
                Change::ZRemove { key: own(key), member: own(member) }
            }
            Change::Rename { from, to } => Change::Rename { from: own(from), to: own(to) },
            Change::Copy { from, to, id } => Change::Copy { from: own(from), to: own(to), id: *id },
            Change::FlushAll => Change::FlushAll,
        }
    }
}

/// Why a payload is not a valid list of changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid change vector at byte {offset}: {reason}")]
pub struct ChangeError {
    pub offset: usize,
    pub reason: String,
}

/// Bytes `encode` will produce for `changes`.
pub fn encoded_len(changes: &[Change]) -> usize {
    5 + changes.iter().map(Change::encoded_len).sum::<usize>()
}

fn put_bytes(out: &mut impl BufMut, bytes: &[u8]) {
    out.put_u32_le(u32::try_from(bytes.len()).expect("a field shorter than 4 GiB"));
    out.put_slice(bytes);
}

fn end_code(end: End) -> u8 {
    match end {
        End::Left => 0,
        End::Right => 1,
    }
}

/// Appends the payload for `changes` to `out`, in the current version.
pub fn encode(changes: &[Change], out: &mut impl BufMut) {
    out.put_u8(VERSION);
    out.put_u32_le(u32::try_from(changes.len()).expect("fewer than 2^32 changes"));
    for change in changes {
        out.put_u8(change.code());
        match change {
            Change::String { key, row } => {
                put_bytes(out, key);
                put_bytes(out, row);
            }
            Change::Delete { key } => put_bytes(out, key),
            Change::Expire { key, at } => {
                put_bytes(out, key);
                out.put_u64_le(*at);
            }
            Change::Create { key, kind, id } => {
                put_bytes(out, key);
                out.put_u8(layout::type_code(*kind));
                out.put_u64_le(*id);
            }
            Change::HashSet { key, field, value } => {
                put_bytes(out, key);
                put_bytes(out, field);
                put_bytes(out, value);
            }
            Change::HashDelete { key, field } => {
                put_bytes(out, key);
                put_bytes(out, field);
            }
            Change::ListPush { key, end, value } => {
                put_bytes(out, key);
                out.put_u8(end_code(*end));
                put_bytes(out, value);
            }
            Change::ListPop { key, end } => {
                put_bytes(out, key);
                out.put_u8(end_code(*end));
            }
            Change::ListSet { key, index, value } | Change::ListInsert { key, index, value } => {
                put_bytes(out, key);
                out.put_u64_le(*index);
                put_bytes(out, value);
            }
            Change::ListRemove { key, index } => {
                put_bytes(out, key);
                out.put_u64_le(*index);
            }
            Change::SetAdd { key, member }
            | Change::SetRemove { key, member }
            | Change::ZRemove { key, member } => {
                put_bytes(out, key);
                put_bytes(out, member);
            }
            Change::ZAdd { key, member, score } => {
                put_bytes(out, key);
                put_bytes(out, member);
                out.put_u64_le(score.to_bits());
            }
            Change::Rename { from, to } => {
                put_bytes(out, from);
                put_bytes(out, to);
            }
            Change::Copy { from, to, id } => {
                put_bytes(out, from);
                put_bytes(out, to);
                out.put_u64_le(*id);
            }
            Change::FlushAll => {}
        }
    }
}

/// Reads fields of one payload; every length is checked against what is left.
struct Reader<'a> {
    payload: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    fn error(&self, offset: usize, reason: impl Into<String>) -> ChangeError {
        ChangeError { offset, reason: reason.into() }
    }

    fn take(&mut self, len: usize) -> Result<Bytes, ChangeError> {
        let left = self.payload.len() - self.at;
        if left < len {
            return Err(self.error(self.at, format!("needs {len} bytes, {left} left")));
        }
        let bytes = self.payload.slice(self.at..self.at + len);
        self.at += len;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, ChangeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<usize, ChangeError> {
        Ok(u32::from_le_bytes(self.take(4)?[..].try_into().expect("4 bytes")) as usize)
    }

    fn u64(&mut self) -> Result<u64, ChangeError> {
        Ok(u64::from_le_bytes(self.take(8)?[..].try_into().expect("8 bytes")))
    }

    fn bytes(&mut self) -> Result<Bytes, ChangeError> {
        let len = self.u32()?;
        self.take(len)
    }

    fn end(&mut self) -> Result<End, ChangeError> {
        let at = self.at;
        match self.u8()? {
            0 => Ok(End::Left),
            1 => Ok(End::Right),
            other => Err(self.error(at, format!("list end {other} is neither 0 nor 1"))),
        }
    }
}

/// Decodes a payload of any version up to `VERSION`. Keys and values are slices of `payload`
/// (no copy), except a version 1 PUT's key row, which is built.
pub fn decode(payload: &Bytes) -> Result<Vec<Change>, ChangeError> {
    let mut reader = Reader { payload, at: 0 };
    let version = reader.u8()?;
    if version == 0 || version > VERSION {
        return Err(reader.error(
            0,
            format!(
                "change-vector version {version}; this database reads versions 1 to {VERSION} \
                 (a record from a newer primary: upgrade this database before it applies it)"
            ),
        ));
    }
    let count = reader.u32()?;
    // Each change takes at least one byte (FLUSHALL): a lying count cannot make us allocate.
    if count > payload.len() - reader.at {
        return Err(reader
            .error(1, format!("claims {count} changes in {} bytes", payload.len() - reader.at)));
    }
    let mut changes = Vec::with_capacity(count);
    for _ in 0..count {
        let op_at = reader.at;
        let op = reader.u8()?;
        if version == 1 && op > 2 {
            return Err(
                reader.error(op_at, format!("unknown operation {op} in a version 1 record"))
            );
        }
        changes.push(match op {
            1 if version == 1 => {
                let key = reader.bytes()?;
                let value = reader.bytes()?;
                Change::String { key, row: layout::encode_string_row(&value, 0) }
            }
            2 => Change::Delete { key: reader.bytes()? },
            3 => {
                let key = reader.bytes()?;
                let row_at = reader.at;
                let row = reader.bytes()?;
                match layout::decode_header(&row) {
                    Ok((KeyType::String, _)) => {}
                    _ => return Err(reader.error(row_at, "a STRING whose row is not a string's")),
                }
                Change::String { key, row }
            }
            4 => Change::Expire { key: reader.bytes()?, at: reader.u64()? },
            5 => {
                let key = reader.bytes()?;
                let kind_at = reader.at;
                let code = reader.u8()?;
                let kind = match layout::type_of_code(code) {
                    Some(KeyType::String) | None => {
                        return Err(reader.error(kind_at, format!("CREATE of type {code}")));
                    }
                    Some(kind) => kind,
                };
                Change::Create { key, kind, id: reader.u64()? }
            }
            6 => Change::HashSet {
                key: reader.bytes()?,
                field: reader.bytes()?,
                value: reader.bytes()?,
            },
            7 => Change::HashDelete { key: reader.bytes()?, field: reader.bytes()? },
            8 => Change::ListPush {
                key: reader.bytes()?,
                end: reader.end()?,
                value: reader.bytes()?,
            },
            9 => Change::ListPop { key: reader.bytes()?, end: reader.end()? },
            10 => Change::ListSet {
                key: reader.bytes()?,
                index: reader.u64()?,
                value: reader.bytes()?,
            },
            11 => Change::ListInsert {
                key: reader.bytes()?,
                index: reader.u64()?,
                value: reader.bytes()?,
            },
            12 => Change::ListRemove { key: reader.bytes()?, index: reader.u64()? },
            13 => Change::SetAdd { key: reader.bytes()?, member: reader.bytes()? },
            14 => Change::SetRemove { key: reader.bytes()?, member: reader.bytes()? },
            15 => {
                let key = reader.bytes()?;
                let member = reader.bytes()?;
                let score_at = reader.at;
                let score = f64::from_bits(reader.u64()?);
                if score.is_nan() {
                    return Err(reader.error(score_at, "a ZADD score that is not a number"));
                }
                Change::ZAdd { key, member, score }
            }
            16 => Change::ZRemove { key: reader.bytes()?, member: reader.bytes()? },
            17 => Change::Rename { from: reader.bytes()?, to: reader.bytes()? },
            18 => Change::Copy { from: reader.bytes()?, to: reader.bytes()?, id: reader.u64()? },
            19 => Change::FlushAll,
            other => {
                return Err(reader.error(
                    op_at,
                    format!("unknown operation {other} in a version {version} record"),
                ));
            }
        });
    }
    if reader.at != payload.len() {
        return Err(reader.error(
            reader.at,
            format!("{} bytes after the last change", payload.len() - reader.at),
        ));
    }
    Ok(changes)
}

/// A lone STRING change's key and row as views of its own encoded payload (no copy): what the
/// cache keeps of a plain SET.
pub fn lone_string_views(payload: &Bytes) -> Option<(Bytes, Bytes)> {
    // { version | count | op | key_len | key | row_len | row }
    if payload.len() < 14
        || payload[0] != VERSION
        || payload[1..5] != 1u32.to_le_bytes()
        || payload[5] != 3
    {
        return None;
    }
    let key_len = u32::from_le_bytes(payload[6..10].try_into().expect("4")) as usize;
    let row_at = 10 + key_len + 4;
    if payload.len() < row_at {
        return None;
    }
    let row_len = u32::from_le_bytes(payload[10 + key_len..row_at].try_into().expect("4")) as usize;
    (payload.len() == row_at + row_len)
        .then(|| (payload.slice(10..10 + key_len), payload.slice(row_at..)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn bytes() -> impl Strategy<Value = Bytes> {
        prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
    }

    fn end() -> impl Strategy<Value = End> {
        prop_oneof![Just(End::Left), Just(End::Right)]
    }

    pub(crate) fn change() -> impl Strategy<Value = Change> {
        let kind = prop_oneof![
            Just(KeyType::Hash),
            Just(KeyType::List),
            Just(KeyType::Set),
            Just(KeyType::ZSet)
        ];
        prop_oneof![
            (bytes(), bytes(), any::<u64>()).prop_map(|(key, value, at)| Change::String {
                key,
                row: layout::encode_string_row(&value, at)
            }),
            bytes().prop_map(|key| Change::Delete { key }),
            (bytes(), any::<u64>()).prop_map(|(key, at)| Change::Expire { key, at }),
            (bytes(), kind, any::<u64>()).prop_map(|(key, kind, id)| Change::Create {
                key,
                kind,
                id
            }),
            (bytes(), bytes(), bytes()).prop_map(|(key, field, value)| Change::HashSet {
                key,
                field,
                value
            }),
            (bytes(), bytes()).prop_map(|(key, field)| Change::HashDelete { key, field }),
            (bytes(), end(), bytes()).prop_map(|(key, end, value)| Change::ListPush {
                key,
                end,
                value
            }),
            (bytes(), end()).prop_map(|(key, end)| Change::ListPop { key, end }),
            (bytes(), any::<u64>(), bytes()).prop_map(|(key, index, value)| Change::ListSet {
                key,
                index,
                value
            }),
            (bytes(), any::<u64>(), bytes()).prop_map(|(key, index, value)| Change::ListInsert {
                key,
                index,
                value
            }),
            (bytes(), any::<u64>()).prop_map(|(key, index)| Change::ListRemove { key, index }),
            (bytes(), bytes()).prop_map(|(key, member)| Change::SetAdd { key, member }),
            (bytes(), bytes()).prop_map(|(key, member)| Change::SetRemove { key, member }),
            (bytes(), bytes(), -1e9f64..1e9).prop_map(|(key, member, score)| Change::ZAdd {
                key,
                member,
                score
            }),
            (bytes(), bytes()).prop_map(|(key, member)| Change::ZRemove { key, member }),
            (bytes(), bytes()).prop_map(|(from, to)| Change::Rename { from, to }),
            (bytes(), bytes(), any::<u64>()).prop_map(|(from, to, id)| Change::Copy {
                from,
                to,
                id
            }),
            Just(Change::FlushAll),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(changes in prop::collection::vec(change(), 0..20)) {
            let mut payload = Vec::new();
            encode(&changes, &mut payload);
            prop_assert_eq!(payload.len(), encoded_len(&changes));
            prop_assert_eq!(decode(&Bytes::from(payload)).unwrap(), changes);
        }

        #[test]
        fn truncation_and_garbage_are_errors_not_panics(changes in prop::collection::vec(change(), 1..10), cut in 0usize..1000, garbage in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut payload = Vec::new();
            encode(&changes, &mut payload);
            let cut = cut % payload.len();
            prop_assert!(decode(&Bytes::copy_from_slice(&payload[..cut])).is_err());
            let _ = decode(&Bytes::from(garbage));
        }

        #[test]
        fn a_lone_string_is_kept_as_views_of_its_payload(key in bytes(), value in bytes()) {
            let change = Change::String { key: key.clone(), row: layout::encode_string_row(&value, 7) };
            let mut payload = Vec::new();
            encode(std::slice::from_ref(&change), &mut payload);
            let payload = Bytes::from(payload);
            let (kept_key, row) = lone_string_views(&payload).unwrap();
            prop_assert_eq!(&kept_key, &key);
            prop_assert_eq!(Change::String { key: kept_key, row }, change);
        }
    }

    #[test]
    fn version_1_records_still_decode() {
        // { 1 | count 2 | PUT "k" "v" | DELETE "d" }
        let mut payload = vec![1u8];
        payload.extend_from_slice(&2u32.to_le_bytes());
        payload.push(1);
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.push(b'k');
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.push(b'v');
        payload.push(2);
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.push(b'd');
        let changes = decode(&Bytes::from(payload)).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::String { key: Bytes::from("k"), row: layout::encode_string_row(b"v", 0) },
                Change::Delete { key: Bytes::from("d") },
            ]
        );
    }

    #[test]
    fn a_newer_version_is_refused_by_its_number() {
        let mut payload = vec![VERSION + 1];
        payload.extend_from_slice(&0u32.to_le_bytes());
        let error = decode(&Bytes::from(payload)).unwrap_err();
        assert!(
            error.reason.contains(&format!("change-vector version {}", VERSION + 1)),
            "{error}"
        );
        assert!(error.reason.contains("upgrade"), "{error}");
    }

    #[test]
    fn a_lying_count_is_refused_before_allocating() {
        let mut payload = vec![VERSION];
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        let error = decode(&Bytes::from(payload)).unwrap_err();
        assert!(error.reason.contains("claims"), "{error}");
    }
}
