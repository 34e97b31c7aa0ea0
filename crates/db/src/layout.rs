//! The layout of the key space in rows: what the cache layers and the data files hold, one
//! row per key and one per element of a collection, so that a change to one element of a
//! collection of a million is a change to one or two rows, never a rewrite of the collection.
//!
//! Rows live in four *namespaces* (a table each in the data files):
//!
//! - **keys** (`kv`): key → key row. A key row says the key's type, its deadline, and either a
//!   string's value or a collection's id and size:
//!
//!   ```text
//!   // Format: { type: u8 | expires_at_ms: u64 (0: none) | body }
//!   // string:           body = the value
//!   // hash, set, zset:  body = { id: u64 | count: u64 }
//!   // list:             body = { id: u64 | count: u64 | head: i64 }
//!   ```
//!
//! - **elements**: `{ id: u64 BE | sub }` → value. A collection's elements are keyed by its
//!   *id*, not its key, so that RENAME moves one row and DEL drops one (the elements of a dead
//!   id are garbage, removed in the background). `sub` is, per type:
//!   - hash: the field (value: the field's value);
//!   - set: the member (value: empty);
//!   - list: the position, `{ position: u64 BE }` of the i64 with its sign bit flipped (value:
//!     the element). Positions are dense: a list of `count` elements holds `head ..
//!     head + count`, so LINDEX and LSET are point reads and the ends are known;
//!   - sorted set: `{ 0 | member }` → `score: f64 LE` (the member's score), and
//!     `{ 1 | score: u64 BE (order-preserving) | member }` → empty (the order), so that a
//!     range by score or rank is a range of rows.
//! - **expires**: `{ deadline_ms: u64 BE | key }` → empty: the keys with a deadline, oldest
//!   first, for active expiry. Derived from the key rows; a stale entry (its key's deadline
//!   changed, or the key went) is ignored by whoever reads it and removed by the checkpoint.
//! - **garbage**: `{ id: u64 BE }` → empty: ids of dropped collections whose element rows the
//!   checkpoint still has to remove.
//!
//! All integers little-endian except where a row key must sort as its number (big-endian).
//! Decoders never panic on bytes from disk: a malformed row is a `LayoutError`.

use bytes::{BufMut, Bytes, BytesMut};
pub use keyspace::KeyType;

/// The namespaces, in the order of `Namespace::ALL` (an index into per-namespace arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Namespace {
    Keys = 0,
    Elements = 1,
    Expires = 2,
    Garbage = 3,
}

impl Namespace {
    pub const ALL: [Namespace; 4] =
        [Namespace::Keys, Namespace::Elements, Namespace::Expires, Namespace::Garbage];
    pub const COUNT: usize = 4;

    pub fn index(self) -> usize {
        self as usize
    }
}

/// A row that is not what its namespace holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}: {reason}")]
pub struct LayoutError {
    pub what: &'static str,
    pub reason: String,
}

fn malformed(what: &'static str, reason: impl Into<String>) -> LayoutError {
    LayoutError { what, reason: reason.into() }
}

const TYPE_STRING: u8 = 0;
const TYPE_HASH: u8 = 1;
const TYPE_LIST: u8 = 2;
const TYPE_SET: u8 = 3;
const TYPE_ZSET: u8 = 4;

/// The bytes of a key row before its body.
pub const KEY_ROW_HEADER_BYTES: usize = 9;

pub fn type_code(kind: KeyType) -> u8 {
    match kind {
        KeyType::String => TYPE_STRING,
        KeyType::Hash => TYPE_HASH,
        KeyType::List => TYPE_LIST,
        KeyType::Set => TYPE_SET,
        KeyType::ZSet => TYPE_ZSET,
    }
}

pub fn type_of_code(code: u8) -> Option<KeyType> {
    Some(match code {
        TYPE_STRING => KeyType::String,
        TYPE_HASH => KeyType::Hash,
        TYPE_LIST => KeyType::List,
        TYPE_SET => KeyType::Set,
        TYPE_ZSET => KeyType::ZSet,
        _ => return None,
    })
}

/// A collection's place in the elements namespace and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collection {
    pub id: u64,
    pub count: u64,
    /// Lists only: the position of the first element.
    pub head: i64,
}

/// A key row, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    pub kind: KeyType,
    /// Milliseconds since the Unix epoch; 0: none.
    pub expires_at: u64,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    String(Bytes),
    Collection(Collection),
}

impl KeyRow {
    pub fn string(value: Bytes, expires_at: u64) -> KeyRow {
        KeyRow { kind: KeyType::String, expires_at, body: Body::String(value) }
    }

    pub fn collection(kind: KeyType, collection: Collection, expires_at: u64) -> KeyRow {
        debug_assert_ne!(kind, KeyType::String);
        KeyRow { kind, expires_at, body: Body::Collection(collection) }
    }

    /// Whether the key is past its deadline at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_at != 0 && self.expires_at <= now_ms
    }

    pub fn collection_info(&self) -> Option<Collection> {
        match &self.body {
            Body::Collection(collection) => Some(*collection),
            Body::String(_) => None,
        }
    }

    pub fn encode(&self) -> Bytes {
        match &self.body {
            Body::String(value) => encode_string_row(value, self.expires_at),
            Body::Collection(collection) => {
                let mut out = BytesMut::with_capacity(KEY_ROW_HEADER_BYTES + 24);
                out.put_u8(type_code(self.kind));
                out.put_u64_le(self.expires_at);
                out.put_u64_le(collection.id);
                out.put_u64_le(collection.count);
                if self.kind == KeyType::List {
                    out.put_i64_le(collection.head);
                }
                out.freeze()
            }
        }
    }

    /// Decodes a key row; a string's value is a slice of `row` (no copy).
    pub fn decode(row: &Bytes) -> Result<KeyRow, LayoutError> {
        let (kind, expires_at) = decode_header(row)?;
        let body = row.slice(KEY_ROW_HEADER_BYTES..);
        let body = match kind {
            KeyType::String => Body::String(body),
            kind => {
                let expected = if kind == KeyType::List { 24 } else { 16 };
                if body.len() != expected {
                    return Err(malformed(
                        "key row",
                        format!("a {} body of {} bytes, not {expected}", kind.name(), body.len()),
                    ));
                }
                let word = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8"));
                Body::Collection(Collection {
                    id: word(0),
                    count: word(8),
                    head: if kind == KeyType::List { word(16) as i64 } else { 0 },
                })
            }
        };
        Ok(KeyRow { kind, expires_at, body })
    }
}

/// The type and deadline of a key row, without decoding its body.
pub fn decode_header(row: &[u8]) -> Result<(KeyType, u64), LayoutError> {
    if row.len() < KEY_ROW_HEADER_BYTES {
        return Err(malformed("key row", format!("{} bytes, less than a header", row.len())));
    }
    let kind = type_of_code(row[0])
        .ok_or_else(|| malformed("key row", format!("unknown type {}", row[0])))?;
    let expires_at = u64::from_le_bytes(row[1..9].try_into().expect("8 bytes"));
    Ok((kind, expires_at))
}

/// A string's key row: `{ 0 | expires_at | value }`.
pub fn encode_string_row(value: &[u8], expires_at: u64) -> Bytes {
    let mut out = BytesMut::with_capacity(KEY_ROW_HEADER_BYTES + value.len());
    out.put_u8(TYPE_STRING);
    out.put_u64_le(expires_at);
    out.put_slice(value);
    out.freeze()
}

/// The id of a collection's elements, as the first bytes of their rows.
pub fn id_prefix(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// The row of element `sub` of collection `id`.
pub fn element_row(id: u64, sub: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + sub.len());
    out.put_slice(&id_prefix(id));
    out.put_slice(sub);
    out.freeze()
}

/// The id an element row belongs to, and its `sub`.
pub fn split_element_row(row: &Bytes) -> Result<(u64, Bytes), LayoutError> {
    if row.len() < 8 {
        return Err(malformed("element row", format!("{} bytes, less than an id", row.len())));
    }
    Ok((u64::from_be_bytes(row[..8].try_into().expect("8 bytes")), row.slice(8..)))
}

/// The bounds of every element row of collection `id`: `[id, id + 1)`.
pub fn id_range(id: u64) -> (Bytes, Bytes) {
    (Bytes::copy_from_slice(&id_prefix(id)), Bytes::copy_from_slice(&id_prefix(id + 1)))
}

/// A list position as a row suffix that sorts as the number.
pub fn position_sub(position: i64) -> [u8; 8] {
    ((position as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn position_of_sub(sub: &[u8]) -> Result<i64, LayoutError> {
    let bytes: [u8; 8] = sub
        .try_into()
        .map_err(|_| malformed("list element row", format!("a position of {} bytes", sub.len())))?;
    Ok((u64::from_be_bytes(bytes) ^ (1 << 63)) as i64)
}

/// Sorted-set rows: by member, and in order.
pub const ZSET_BY_MEMBER: u8 = 0;
pub const ZSET_BY_SCORE: u8 = 1;

/// A score as 8 bytes that sort as the score (NaN never reaches here: Redis refuses it).
pub fn score_key(score: f64) -> [u8; 8] {
    // -0.0 and 0.0 are one score.
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let ordered = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
    ordered.to_be_bytes()
}

pub fn score_of_key(key: &[u8]) -> Result<f64, LayoutError> {
    let bytes: [u8; 8] = key
        .get(..8)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| malformed("sorted-set row", "a score of less than 8 bytes"))?;
    let ordered = u64::from_be_bytes(bytes);
    let bits = if ordered >> 63 == 1 { ordered & !(1 << 63) } else { !ordered };
    Ok(f64::from_bits(bits))
}

/// `{ 0 | member }`
pub fn zset_member_sub(member: &[u8]) -> Vec<u8> {
    let mut sub = Vec::with_capacity(1 + member.len());
    sub.push(ZSET_BY_MEMBER);
    sub.extend_from_slice(member);
    sub
}

/// `{ 1 | score | member }`
pub fn zset_order_sub(score: f64, member: &[u8]) -> Vec<u8> {
    let mut sub = Vec::with_capacity(9 + member.len());
    sub.push(ZSET_BY_SCORE);
    sub.extend_from_slice(&score_key(score));
    sub.extend_from_slice(member);
    sub
}

pub fn encode_score(score: f64) -> Bytes {
    Bytes::copy_from_slice(&score.to_le_bytes())
}

pub fn decode_score(value: &[u8]) -> Result<f64, LayoutError> {
    let bytes: [u8; 8] = value
        .try_into()
        .map_err(|_| malformed("sorted-set score", format!("{} bytes, not 8", value.len())))?;
    Ok(f64::from_le_bytes(bytes))
}

/// The expires row of `key` with deadline `at`.
pub fn expires_row(at: u64, key: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + key.len());
    out.put_u64(at);
    out.put_slice(key);
    out.freeze()
}

pub fn split_expires_row(row: &Bytes) -> Result<(u64, Bytes), LayoutError> {
    if row.len() < 8 {
        return Err(malformed("expires row", format!("{} bytes, less than a deadline", row.len())));
    }
    Ok((u64::from_be_bytes(row[..8].try_into().expect("8 bytes")), row.slice(8..)))
}

pub fn garbage_row(id: u64) -> Bytes {
    Bytes::copy_from_slice(&id.to_be_bytes())
}

pub fn garbage_id(row: &[u8]) -> Result<u64, LayoutError> {
    let bytes: [u8; 8] = row
        .try_into()
        .map_err(|_| malformed("garbage row", format!("{} bytes, not 8", row.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn scores_sort_as_their_keys(a in any::<f64>(), b in any::<f64>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let ordering = a.partial_cmp(&b).unwrap();
            prop_assert_eq!(score_key(a).cmp(&score_key(b)), ordering);
            let back = score_of_key(&score_key(a)).unwrap();
            prop_assert!(back == a);
        }

        #[test]
        fn positions_sort_as_their_keys(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(position_sub(a).cmp(&position_sub(b)), a.cmp(&b));
            prop_assert_eq!(position_of_sub(&position_sub(a)).unwrap(), a);
        }

        #[test]
        fn key_rows_round_trip_and_garbage_never_panics(
            value in proptest::collection::vec(any::<u8>(), 0..40),
            expires_at in any::<u64>(),
            id in any::<u64>(), count in any::<u64>(), head in any::<i64>(),
            garbage in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let string = KeyRow::string(Bytes::from(value), expires_at);
            prop_assert_eq!(KeyRow::decode(&string.encode()).unwrap(), string);
            for kind in [KeyType::Hash, KeyType::List, KeyType::Set, KeyType::ZSet] {
                let head = if kind == KeyType::List { head } else { 0 };
                let row = KeyRow::collection(kind, Collection { id, count, head }, expires_at);
                prop_assert_eq!(KeyRow::decode(&row.encode()).unwrap(), row);
            }
            let _ = KeyRow::decode(&Bytes::from(garbage));
        }
    }

    #[test]
    fn negative_zero_is_zero() {
        assert_eq!(score_key(-0.0), score_key(0.0));
    }
}
