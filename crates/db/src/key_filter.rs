//! A filter that tells when a durable cache layer certainly does not hold a row, so that a
//! lookup skips the search of its tree.
//!
//! Why: a write looks its row up in every in-memory layer before the data files, and with a
//! few hundred thousand rows dirty and as many being checkpointed, the two tree searches of a
//! row that neither layer holds (most rows, for random keys) were ~7 % of the server's CPU
//! under a durable `SET -c 50` on a million keys: each level of a `BTreeMap` is a cache miss.
//! A miss here costs one cache line per part instead.
//!
//! A split-block Bloom filter (as Parquet's and Impala's): a row sets one bit in each of the
//! eight 32-bit words of one 256-bit block. It has no false negatives (a row inserted is
//! always "maybe here"); a false positive only costs the search it would have cost anyway.
//! Rows are never removed: a layer only grows until it is dropped whole.
//!
//! A layer's size is not known ahead (it grows until a checkpoint takes it), so the filter is
//! a chain of parts, each twice the capacity of the one before; a row goes into the newest,
//! and a lookup asks every part. Nothing is ever rehashed, so an insert never stalls.

use crate::cache::{INLINE, Key};
use crate::layout::Namespace;

/// Bits per row: about 1 % false positives for a full part.
const BITS_PER_ROW: usize = 12;

/// Rows of the first part (48 KiB); each next part holds twice as many.
const FIRST_CAPACITY: usize = 32 * 1024;

/// The odd constants that pick a bit in each word of a block (Parquet's split-block Bloom
/// filter).
pub(crate) const SALT: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

type Block = [u32; 8];

#[derive(Debug, Clone)]
struct Part {
    blocks: Box<[Block]>,
    capacity: usize,
    len: usize,
}

impl Part {
    fn new(capacity: usize) -> Part {
        let blocks = (capacity * BITS_PER_ROW).div_ceil(256).max(1);
        Part { blocks: vec![[0; 8]; blocks].into_boxed_slice(), capacity, len: 0 }
    }

    fn block(&self, hash: u64) -> usize {
        // The high half picks the block (a multiply-shift, no division), the low half the bits.
        (((hash >> 32) * self.blocks.len() as u64) >> 32) as usize
    }

    fn insert(&mut self, hash: u64) {
        let index = self.block(hash);
        let block = &mut self.blocks[index];
        for (word, salt) in block.iter_mut().zip(SALT) {
            *word |= bit(hash as u32, salt);
        }
        self.len += 1;
    }

    fn may_contain(&self, hash: u64) -> bool {
        let block = &self.blocks[self.block(hash)];
        block.iter().zip(SALT).all(|(word, salt)| word & bit(hash as u32, salt) != 0)
    }
}

pub(crate) fn bit(hash: u32, salt: u32) -> u32 {
    1 << (hash.wrapping_mul(salt) >> 27)
}

/// The rows a layer holds, as a filter: `may_contain` is false only for a row never inserted.
#[derive(Debug, Clone, Default)]
pub struct KeyFilter {
    parts: Vec<Part>,
}

impl KeyFilter {
    /// A filter whose first part holds `rows` rows (at least the usual first part's).
    pub fn with_capacity(rows: usize) -> KeyFilter {
        KeyFilter { parts: vec![Part::new(rows.max(FIRST_CAPACITY))] }
    }

    pub fn insert(&mut self, namespace: Namespace, key: &Key) {
        let hash = hash(namespace, key);
        match self.parts.last_mut() {
            Some(part) if part.len < part.capacity => part.insert(hash),
            last => {
                let capacity = last.map_or(FIRST_CAPACITY, |part| part.capacity * 2);
                let mut part = Part::new(capacity);
                part.insert(hash);
                self.parts.push(part);
            }
        }
    }

    /// False only if `key` was never inserted under `namespace`.
    pub fn may_contain(&self, namespace: Namespace, key: &Key) -> bool {
        if self.parts.is_empty() {
            return false;
        }
        let hash = hash(namespace, key);
        self.parts.iter().any(|part| part.may_contain(hash))
    }
}

/// A 64-bit hash of a row: from the key's inline prefix (the whole key, for a key of up to 31
/// bytes, read without touching the key's allocation), then the bytes past it for a longer key.
fn hash(namespace: Namespace, key: &Key) -> u64 {
    let (high, low) = key.prefix();
    let mut hash = mix(namespace.index() as u64 ^ 0x9e37_79b9_7f4a_7c15, high as u64);
    hash = mix(hash, (high >> 64) as u64);
    hash = mix(hash, low as u64);
    hash = mix(hash, (low >> 64) as u64);
    if let Some(tail) = key.bytes().get(INLINE..) {
        for chunk in tail.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            hash = mix(hash, u64::from_le_bytes(word));
        }
        hash = mix(hash, tail.len() as u64);
    }
    finish(hash)
}

pub(crate) fn mix(hash: u64, word: u64) -> u64 {
    (hash ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(31)
}

/// MurmurHash3's 64-bit finalizer: every input bit reaches every output bit.
pub(crate) fn finish(mut hash: u64) -> u64 {
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn key(text: &str) -> Key {
        Key::new(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn every_inserted_row_is_maybe_there_across_parts() {
        let mut filter = KeyFilter::default();
        assert!(!filter.may_contain(Namespace::Keys, &key("a")));
        // Past three parts (32k + 64k + 128k), short keys and long ones.
        let keys: Vec<Key> = (0..200_000)
            .map(|i| {
                if i % 3 == 0 {
                    key(&format!("a key longer than thirty-one bytes, number {i}"))
                } else {
                    key(&format!("key:{i}"))
                }
            })
            .collect();
        for key in &keys {
            filter.insert(Namespace::Keys, key);
        }
        assert_eq!(filter.parts.len(), 3);
        for key in &keys {
            assert!(filter.may_contain(Namespace::Keys, key));
        }
    }

    #[test]
    fn rows_never_inserted_are_mostly_ruled_out() {
        let mut filter = KeyFilter::default();
        for i in 0..100_000 {
            filter.insert(Namespace::Keys, &key(&format!("key:{i}")));
        }
        let probes = 100_000;
        let false_positives = (0..probes)
            .filter(|i| filter.may_contain(Namespace::Keys, &key(&format!("other:{i}"))))
            .count();
        assert!(false_positives < probes / 20, "{false_positives} of {probes}");
        // A namespace is part of the row: the same key elsewhere is another row.
        let in_elements = (0..probes)
            .filter(|i| filter.may_contain(Namespace::Elements, &key(&format!("key:{i}"))))
            .count();
        assert!(in_elements < probes / 20, "{in_elements} of {probes}");
    }

    #[test]
    fn long_keys_that_share_their_first_31_bytes_are_told_apart() {
        let mut filter = KeyFilter::default();
        let shared = "a collection id and a field name";
        for i in 0..10_000 {
            filter.insert(Namespace::Elements, &key(&format!("{shared}:{i}")));
        }
        let false_positives = (10_000..20_000)
            .filter(|i| filter.may_contain(Namespace::Elements, &key(&format!("{shared}:{i}"))))
            .count();
        assert!(false_positives < 500, "{false_positives} of 10000");
    }
}
