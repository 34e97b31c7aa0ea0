//! The request decoder on arbitrary bytes: never panics, and any split of the input into reads
//! gives the same requests and the same error as the whole input at once.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use resp::{Limits, ProtocolError, Request, RequestDecoder};

fn decode(data: &[u8], cuts: &[usize], limits: &Limits) -> (Vec<Request>, Option<ProtocolError>) {
    let mut decoder = RequestDecoder::new(limits.clone());
    let mut buffer = BytesMut::new();
    let mut requests = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&data.len())) {
        buffer.extend_from_slice(&data[start..end]);
        start = end;
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(request)) => {
                    assert!(!request.args().is_empty(), "empty requests are skipped");
                    requests.push(request);
                }
                Ok(None) => break,
                Err(error) => return (requests, Some(error)),
            }
        }
    }
    (requests, None)
}

fuzz_target!(|input: &[u8]| {
    // The first byte picks the split points and small limits, so the fuzzer reaches every limit.
    let Some((&seed, data)) = input.split_first() else { return };
    let limits = Limits {
        bulk_bytes_max: 1024,
        request_bytes_max: 2048,
        arguments_max: 3 + usize::from(seed % 8),
        inline_bytes_max: 16 + usize::from(seed % 32),
        ..Limits::default()
    };
    let whole = decode(data, &[], &limits);
    let step = 1 + usize::from(seed % 7);
    let cuts: Vec<usize> = (step..data.len()).step_by(step).collect();
    let split = decode(data, &cuts, &limits);
    assert_eq!(whole, split);
});
