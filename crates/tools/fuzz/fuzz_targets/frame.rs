//! Fuzzes the nettest frame parser: no input may panic it, read past the buffer, or
//! decode to something that does not encode back to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tools::nettest::frame::{self, Hello, Summary, Welcome};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the maximum message length, as a server's setting would.
    let Some((&selector, bytes)) = data.split_first() else { return };
    let message_bytes_max = [0u32, 1, 9400, 1 << 20, u32::MAX][selector as usize % 5];
    let mut rest = bytes;
    while let Ok(Some((decoded, used))) = frame::decode(rest, message_bytes_max) {
        assert!(used >= frame::HEADER_BYTES && used <= rest.len());
        let mut again = Vec::new();
        frame::encode(&mut again, decoded.header.kind, decoded.header.flags, decoded.header.seq, decoded.body);
        assert_eq!(&again[..], &rest[..used], "a decoded frame encodes back to its bytes");
        match decoded.header.kind {
            frame::Kind::Hello => {
                if let Ok(hello) = Hello::decode(decoded.body) {
                    assert_eq!(&hello.encode()[..], decoded.body);
                }
            }
            frame::Kind::Welcome => {
                if let Ok(welcome) = Welcome::decode(decoded.body) {
                    assert_eq!(Welcome::decode(&welcome.encode()), Ok(welcome));
                }
            }
            frame::Kind::Summary => {
                if let Ok(summary) = Summary::decode(decoded.body) {
                    assert_eq!(&summary.encode()[..], decoded.body);
                }
            }
            _ => {}
        }
        rest = &rest[used..];
    }
});
