//! Change vectors: what a transaction did to the key space, as the payload of its redo
//! record. The redo engine never looks inside; recovery and apply decode it.

use bytes::{BufMut, Bytes};

// Format of a record payload (little-endian):
// { version: u8 (1) | count: u32 | change × count }
// change: { op: u8 (1 put, 2 delete) | key_len: u32 | key: [u8; key_len]
//         | (put only) value_len: u32 | value: [u8; value_len] }

const VERSION: u8 = 1;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;

/// One change to one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put { key: Bytes, value: Bytes },
    Delete { key: Bytes },
}

impl Change {
    pub fn key(&self) -> &Bytes {
        match self {
            Change::Put { key, .. } | Change::Delete { key } => key,
        }
    }

    /// The key's value after this change.
    pub fn value(&self) -> Option<&Bytes> {
        match self {
            Change::Put { value, .. } => Some(value),
            Change::Delete { .. } => None,
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Change::Put { key, value } => 1 + 4 + key.len() + 4 + value.len(),
            Change::Delete { key } => 1 + 4 + key.len(),
        }
    }
}

/// What the cache keeps of a transaction's `changes`, whose keys and values may be the
/// request's own bytes (parts of a larger buffer), once `payload` holds their encoding: a
/// lone change (a SET, a DEL of one key) becomes two views of the payload, which it then owns
/// alone, so that its keep costs no allocation; several get each their own copy, so that each
/// can be freed as soon as the key is written again.
pub fn keep(changes: Vec<Change>, payload: &Bytes) -> Vec<Change> {
    if let [change] = changes.as_slice() {
        debug_assert_eq!(payload.len(), encoded_len(&changes));
        // { version | count | op | key_len | key | (put) value_len | value }
        let key = 1 + 4 + 1 + 4;
        let key_end = key + change.key().len();
        let view = match change {
            Change::Put { value, .. } => Change::Put {
                key: payload.slice(key..key_end),
                value: payload.slice(key_end + 4..key_end + 4 + value.len()),
            },
            Change::Delete { .. } => Change::Delete { key: payload.slice(key..key_end) },
        };
        debug_assert_eq!(&view, change);
        let mut changes = changes;
        changes[0] = view;
        return changes;
    }
    changes
        .into_iter()
        .map(|change| match change {
            Change::Put { key, value } => Change::Put {
                key: Bytes::copy_from_slice(&key),
                value: Bytes::copy_from_slice(&value),
            },
            Change::Delete { key } => Change::Delete { key: Bytes::copy_from_slice(&key) },
        })
        .collect()
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

/// Appends the payload for `changes` to `out`.
pub fn encode(changes: &[Change], out: &mut Vec<u8>) {
    out.reserve(encoded_len(changes));
    out.put_u8(VERSION);
    out.put_u32_le(u32::try_from(changes.len()).expect("fewer than 2^32 changes"));
    for change in changes {
        match change {
            Change::Put { key, value } => {
                out.put_u8(OP_PUT);
                out.put_u32_le(key.len() as u32);
                out.put_slice(key);
                out.put_u32_le(value.len() as u32);
                out.put_slice(value);
            }
            Change::Delete { key } => {
                out.put_u8(OP_DELETE);
                out.put_u32_le(key.len() as u32);
                out.put_slice(key);
            }
        }
    }
}

/// Decodes a payload. Keys and values are slices of `payload` (no copy).
pub fn decode(payload: &Bytes) -> Result<Vec<Change>, ChangeError> {
    let error = |offset: usize, reason: &str| ChangeError { offset, reason: reason.to_string() };
    let mut at = 0usize;
    let take = |at: &mut usize, len: usize| -> Result<Bytes, ChangeError> {
        if payload.len() - *at < len {
            return Err(error(*at, &format!("needs {len} bytes, {} left", payload.len() - *at)));
        }
        let bytes = payload.slice(*at..*at + len);
        *at += len;
        Ok(bytes)
    };
    let u32_at = |at: &mut usize| -> Result<usize, ChangeError> {
        let bytes = take(at, 4)?;
        Ok(u32::from_le_bytes(bytes[..].try_into().expect("4 bytes")) as usize)
    };
    let version = take(&mut at, 1)?[0];
    if version != VERSION {
        return Err(error(0, &format!("unknown version {version}")));
    }
    let count = u32_at(&mut at)?;
    // Each change takes at least 5 bytes: a lying count cannot make us allocate.
    if count > (payload.len() - at) / 5 {
        return Err(error(1, &format!("claims {count} changes in {} bytes", payload.len() - at)));
    }
    let mut changes = Vec::with_capacity(count);
    for _ in 0..count {
        let op_at = at;
        let op = take(&mut at, 1)?[0];
        let key_len = u32_at(&mut at)?;
        let key = take(&mut at, key_len)?;
        changes.push(match op {
            OP_PUT => {
                let value_len = u32_at(&mut at)?;
                Change::Put { key, value: take(&mut at, value_len)? }
            }
            OP_DELETE => Change::Delete { key },
            other => return Err(error(op_at, &format!("unknown operation {other}"))),
        });
    }
    if at != payload.len() {
        return Err(error(at, &format!("{} bytes after the last change", payload.len() - at)));
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn change() -> impl Strategy<Value = Change> {
        let bytes = || prop::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from);
        prop_oneof![
            (bytes(), bytes()).prop_map(|(key, value)| Change::Put { key, value }),
            bytes().prop_map(|key| Change::Delete { key }),
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

        /// What the cache keeps is the same changes; a lone change's key and value are views
        /// of the payload (no copy), several changes' their own copies (no view of it).
        #[test]
        fn kept_changes_are_the_changes(changes in prop::collection::vec(change(), 0..5)) {
            let mut payload = Vec::new();
            encode(&changes, &mut payload);
            let payload = Bytes::from(payload);
            let range = payload.as_ptr_range();
            let kept = keep(changes.clone(), &payload);
            prop_assert_eq!(&kept, &changes);
            for change in &kept {
                for part in [Some(change.key()), change.value()].into_iter().flatten() {
                    if !part.is_empty() {
                        prop_assert_eq!(range.contains(&part.as_ptr()), changes.len() == 1);
                    }
                }
            }
        }

        #[test]
        fn truncation_and_garbage_are_errors_not_panics(changes in prop::collection::vec(change(), 1..10), cut in 0usize..1000, garbage in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut payload = Vec::new();
            encode(&changes, &mut payload);
            let cut = cut % payload.len();
            prop_assert!(decode(&Bytes::copy_from_slice(&payload[..cut])).is_err());
            let _ = decode(&Bytes::from(garbage));
        }
    }

    #[test]
    fn a_lying_count_is_refused_before_allocating() {
        let mut payload = vec![VERSION];
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        let error = decode(&Bytes::from(payload)).unwrap_err();
        assert!(error.reason.contains("claims"), "{error}");
    }
}
