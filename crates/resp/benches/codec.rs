//! The hot path of a pipelined SET workload: decode requests, parse commands, encode replies.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use resp::{Command, Frame, Limits, ProtocolVersion, RequestDecoder};

const REQUESTS: usize = 1000;

/// 1000 `SET key:NNNNNNNNNN <100 bytes>` requests, as redis-benchmark -P would send them.
fn pipeline() -> Vec<u8> {
    let mut bytes = Vec::new();
    let value = Frame::bulk(vec![b'v'; 100]);
    for n in 0..REQUESTS {
        Frame::Array(vec![Frame::bulk("SET"), Frame::bulk(format!("key:{n:010}")), value.clone()])
            .encode(ProtocolVersion::Resp2, &mut bytes);
    }
    bytes
}

fn decode_and_parse(criterion: &mut Criterion) {
    let bytes = pipeline();
    let mut group = criterion.benchmark_group("requests");
    group.throughput(Throughput::Elements(REQUESTS as u64));
    group.bench_function("decode 1000 SET", |bench| {
        bench.iter(|| {
            let mut decoder = RequestDecoder::new(Limits::default());
            let mut buffer = BytesMut::from(&bytes[..]);
            let mut count = 0;
            while let Some(request) = decoder.decode(&mut buffer).unwrap() {
                black_box(&request);
                count += 1;
            }
            assert_eq!(count, REQUESTS);
        })
    });
    group.bench_function("decode and parse 1000 SET", |bench| {
        bench.iter(|| {
            let mut decoder = RequestDecoder::new(Limits::default());
            let mut buffer = BytesMut::from(&bytes[..]);
            while let Some(request) = decoder.decode(&mut buffer).unwrap() {
                black_box(Command::parse(request).unwrap());
            }
        })
    });
    group.finish();
}

fn encode(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("replies");
    group.throughput(Throughput::Elements(REQUESTS as u64));
    let ok = Frame::ok();
    let value = Frame::bulk(vec![b'v'; 100]);
    let mut out = Vec::with_capacity(1 << 20);
    group.bench_function("encode 1000 +OK", |bench| {
        bench.iter(|| {
            out.clear();
            for _ in 0..REQUESTS {
                ok.encode(ProtocolVersion::Resp2, &mut out);
            }
            black_box(&out);
        })
    });
    group.bench_function("encode 1000 100-byte bulks", |bench| {
        bench.iter(|| {
            out.clear();
            for _ in 0..REQUESTS {
                value.encode(ProtocolVersion::Resp2, &mut out);
            }
            black_box(&out);
        })
    });
    group.finish();
}

criterion_group!(benches, decode_and_parse, encode);
criterion_main!(benches);
