//! `keyspace::number::parse_integer` on arbitrary bytes: INCR/INCRBY read a stored value (a
//! client's bytes, kept on disk and in redo) as an integer with Redis's rules. It never panics,
//! and it accepts exactly the canonical decimal form of an i64: the bytes `n.to_string()`
//! writes.
#![no_main]

use keyspace::number::parse_integer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_integer(data) {
        Some(value) => assert_eq!(value.to_string().as_bytes(), data),
        None => {
            if let Some(value) =
                std::str::from_utf8(data).ok().and_then(|text| text.parse::<i64>().ok())
            {
                assert_ne!(value.to_string().as_bytes(), data, "canonical {value} refused");
            }
        }
    }
});
