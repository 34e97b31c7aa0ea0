//! A redo record's payload, as crash recovery and a standby's apply decode it (from the log
//! on disk, or from bytes the primary sent): arbitrary bytes never panic the decoder, a
//! claimed count or length never allocates beyond what the bytes can hold, and a payload of
//! the current version that decodes encodes back to exactly the same bytes (the format has
//! one encoding; a version 1 record decodes to the changes version 2 writes differently).
#![no_main]

mod largest_alloc;

use bytes::Bytes;
use db::change::{Change, VERSION, decode, encode, encoded_len};
use libfuzzer_sys::fuzz_target;

/// Room for an error's reason string.
const SLACK: usize = 256;

fuzz_target!(|data: &[u8]| {
    let payload = Bytes::copy_from_slice(data);
    let (result, largest) = largest_alloc::largest_during(|| decode(&payload));
    // The only allocation sized by the input is the list of changes: at most one per byte (a
    // FLUSHALL is one byte).
    let bound = data.len() * size_of::<Change>();
    assert!(largest <= bound.max(SLACK), "allocated {largest} bytes for {} bytes", data.len());
    let Ok(changes) = result else { return };
    if data.first() != Some(&VERSION) {
        return;
    }
    assert_eq!(encoded_len(&changes), data.len());
    let mut again = Vec::new();
    encode(&changes, &mut again);
    assert_eq!(again, data, "{changes:?} re-encodes to its payload");
});
