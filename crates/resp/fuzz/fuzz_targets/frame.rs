//! The generic frame decoder on arbitrary bytes: check and parse never panic and agree, and a
//! parsed frame encodes back to bytes that decode to the same frame.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use resp::{Frame, Limits, ProtocolVersion};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        depth_max: 8,
        bulk_bytes_max: 4096,
        request_bytes_max: 65536,
        ..Limits::default()
    };
    let Ok(Some(length)) = Frame::check(data, &limits) else {
        let _ = Frame::parse(&Bytes::copy_from_slice(data), &limits);
        return;
    };
    assert!(length <= data.len());
    let frame = Frame::parse(&Bytes::copy_from_slice(&data[..length]), &limits)
        .expect("parse accepts what check measured");
    for version in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
        let encoded = frame.to_bytes(version);
        let encoded_limits = Limits { request_bytes_max: usize::MAX, ..limits.clone() };
        let checked = Frame::check(&encoded, &encoded_limits).expect("our encoding is valid");
        assert_eq!(checked, Some(encoded.len()));
        let again = Frame::parse(&Bytes::from(encoded.clone()), &encoded_limits).unwrap();
        assert_eq!(again.to_bytes(version), encoded, "encoding is stable");
    }
});
