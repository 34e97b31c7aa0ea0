//! Memory for the rows the cache keeps: small rows are copied into chunks of 64 KiB, one per
//! thread, instead of an allocation each.
//!
//! Why: every row a transaction changes stays in the cache until a checkpoint has written it,
//! and the checkpoint then drops them all at once, on its own thread. With an allocation per
//! row (and one more per value) that drop was a quarter of the checkpointer's CPU under a
//! durable load (glibc's `free` of memory allocated by another thread, and the coalescing of
//! its chunks), on a machine whose CPUs the sessions need. A row in a chunk is a view of it
//! (`Bytes`): dropping it decrements the chunk's count, and the last one frees the chunk.
//!
//! What it costs: a chunk lives while any of its rows does. Rows live in the cache only until
//! the checkpoint that writes them (or until the row is written again), so a chunk is freed
//! within about two checkpoints of being filled; and each thread that ever kept a row holds
//! the rest of its current chunk. Rows larger than `OWN_ALLOCATION_BYTES` get an allocation of
//! their own, so that no large value is charged for a chunk or pins one.

use std::cell::RefCell;

use bytes::{BufMut, Bytes, BytesMut};

/// The size of a thread's chunk.
const CHUNK_BYTES: usize = 64 * 1024;

/// Rows larger than this are allocated alone.
const OWN_ALLOCATION_BYTES: usize = 2 * 1024;

thread_local! {
    static CHUNK: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// A copy of `bytes` that shares no memory with what it was copied from.
pub(crate) fn copy(bytes: &[u8]) -> Bytes {
    build(bytes.len(), |out| out.put_slice(bytes))
}

/// `len` bytes written by `write` (which must write exactly `len`).
pub(crate) fn build(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    if len > OWN_ALLOCATION_BYTES {
        let mut out = BytesMut::with_capacity(len);
        write(&mut out);
        debug_assert_eq!(out.len(), len);
        return out.freeze();
    }
    CHUNK.with(|chunk| {
        let mut chunk = chunk.borrow_mut();
        if chunk.capacity() < len {
            // The rows already taken keep the old chunk alive; this thread lets go of it.
            *chunk = BytesMut::with_capacity(CHUNK_BYTES);
        }
        write(&mut chunk);
        debug_assert_eq!(chunk.len(), len);
        chunk.split().freeze()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_equal_and_independent() {
        let mut source = b"row:1".to_vec();
        let first = copy(&source);
        source[0] = b'X';
        let second = copy(&source);
        assert_eq!(&first[..], b"row:1");
        assert_eq!(&second[..], b"Xow:1");
        // Neighbours in one chunk: the second starts where the first ends.
        assert_eq!(first.as_ptr().wrapping_add(first.len()), second.as_ptr());
    }

    #[test]
    fn a_full_chunk_is_replaced_and_the_old_rows_stay_valid() {
        let rows: Vec<Bytes> = (0..200u32).map(|index| copy(&[index as u8; 1000])).collect();
        for (index, row) in rows.iter().enumerate() {
            assert_eq!(&row[..], &[index as u8; 1000][..]);
        }
    }

    #[test]
    fn large_rows_are_allocated_alone() {
        let large = copy(&[7u8; OWN_ALLOCATION_BYTES + 1]);
        let small = copy(b"x");
        assert_eq!(large.len(), OWN_ALLOCATION_BYTES + 1);
        assert_ne!(large.as_ptr().wrapping_add(large.len()), small.as_ptr());
        assert_eq!(&small[..], b"x");
    }

    #[test]
    fn build_writes_in_place() {
        let row = build(9, |out| {
            out.put_u8(1);
            out.put_u64_le(42);
        });
        assert_eq!(row[0], 1);
        assert_eq!(u64::from_le_bytes(row[1..9].try_into().unwrap()), 42);
    }
}
