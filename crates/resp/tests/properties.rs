//! Property tests over the public API: encode→decode round trips for every frame type in both
//! protocol versions, split-invariance of the request decoder, and no panic on any bytes.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use resp::{Command, Frame, Limits, ProtocolError, ProtocolVersion, Request, RequestDecoder};

fn line_text() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(
        any::<u8>().prop_filter("no line end", |b| *b != b'\r' && *b != b'\n'),
        0..12,
    )
    .prop_map(Bytes::from)
}

fn blob() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        (-1e6f64..1e6f64),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    let leaf = prop_oneof![
        line_text().prop_map(Frame::Simple),
        line_text().prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        blob().prop_map(Frame::Bulk),
        Just(Frame::Null),
        Just(Frame::NullArray),
        double().prop_map(Frame::Double),
        any::<bool>().prop_map(Frame::Boolean),
        ("-?[0-9]{1,40}").prop_map(|digits| Frame::BigNumber(Bytes::from(digits))),
        (any::<[u8; 3]>(), blob()).prop_map(|(format, text)| Frame::Verbatim { format, text }),
        blob().prop_map(Frame::BulkError),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Array),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Set),
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Push),
            proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Frame::Map),
        ]
    })
}

/// Whether a frame uses only what RESP2 can express.
fn is_resp2(frame: &Frame) -> bool {
    match frame {
        Frame::Simple(_) | Frame::Error(_) | Frame::Integer(_) | Frame::Bulk(_) => true,
        Frame::Null | Frame::NullArray => true,
        Frame::Array(items) => items.iter().all(is_resp2),
        _ => false,
    }
}

fn decode_one(bytes: &[u8]) -> Frame {
    let limits = Limits::default();
    assert_eq!(Frame::check(bytes, &limits), Ok(Some(bytes.len())));
    for cut in 0..bytes.len() {
        assert_eq!(Frame::check(&bytes[..cut], &limits), Ok(None), "prefix of {cut} bytes");
    }
    Frame::parse(&Bytes::copy_from_slice(bytes), &limits).unwrap()
}

/// A request as a client library or a person would send it.
#[derive(Debug, Clone)]
enum Wire {
    Multibulk(Vec<Bytes>),
    Inline(Vec<String>),
    Garbage(Vec<u8>),
}

fn wire() -> impl Strategy<Value = Wire> {
    prop_oneof![
        6 => proptest::collection::vec(blob(), 1..5).prop_map(Wire::Multibulk),
        2 => proptest::collection::vec("[a-zA-Z0-9:_]{1,6}", 1..4).prop_map(Wire::Inline),
        1 => proptest::collection::vec(any::<u8>(), 0..12).prop_map(Wire::Garbage),
    ]
}

fn encode_wire(requests: &[Wire]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for request in requests {
        match request {
            Wire::Multibulk(args) => {
                Frame::Array(args.iter().cloned().map(Frame::Bulk).collect())
                    .encode(ProtocolVersion::Resp2, &mut bytes);
            }
            Wire::Inline(words) => {
                bytes.extend_from_slice(words.join(" ").as_bytes());
                bytes.extend_from_slice(b"\r\n");
            }
            Wire::Garbage(garbage) => bytes.extend_from_slice(garbage),
        }
    }
    bytes
}

/// Feeds `bytes` to a decoder in the given chunks, as reads would deliver them; returns every
/// request and the error that ended the stream, if one did.
fn decode_in_chunks(
    bytes: &[u8],
    cuts: &[usize],
    limits: &Limits,
) -> (Vec<Request>, Option<ProtocolError>) {
    let mut decoder = RequestDecoder::new(limits.clone());
    let mut buffer = BytesMut::new();
    let mut requests = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
    ends.push(bytes.len());
    ends.sort_unstable();
    for end in ends {
        buffer.extend_from_slice(&bytes[start..end]);
        start = end;
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(request)) => requests.push(request),
                Ok(None) => break,
                Err(error) => return (requests, Some(error)),
            }
        }
    }
    (requests, None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn resp3_round_trips_every_frame(frame in frame()) {
        let bytes = frame.to_bytes(ProtocolVersion::Resp3);
        let decoded = decode_one(&bytes);
        // Compared through their encodings so that NaN equals NaN.
        prop_assert_eq!(decoded.to_bytes(ProtocolVersion::Resp3), bytes);
    }

    #[test]
    fn resp2_round_trips_into_resp2_types(frame in frame()) {
        let bytes = frame.to_bytes(ProtocolVersion::Resp2);
        let decoded = decode_one(&bytes);
        prop_assert!(is_resp2(&decoded), "{:?}", decoded);
        prop_assert_eq!(decoded.to_bytes(ProtocolVersion::Resp2), bytes);
    }

    #[test]
    fn resp2_frames_are_their_own_downgrade(frame in frame().prop_filter("RESP2 only", is_resp2)) {
        let bytes = frame.to_bytes(ProtocolVersion::Resp2);
        prop_assert_eq!(decode_one(&bytes), frame);
    }

    #[test]
    fn requests_round_trip(args in proptest::collection::vec(blob(), 1..8)) {
        let bytes = encode_wire(&[Wire::Multibulk(args.clone())]);
        let (requests, error) = decode_in_chunks(&bytes, &[], &Limits::default());
        prop_assert_eq!(error, None);
        prop_assert_eq!(requests, vec![Request::new(args)]);
    }

    #[test]
    fn any_split_of_a_stream_decodes_the_same(
        stream in proptest::collection::vec(wire(), 1..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        inline_bytes_max in 16usize..40,
    ) {
        let bytes = encode_wire(&stream);
        let limits = Limits { inline_bytes_max, ..Limits::default() };
        let whole = decode_in_chunks(&bytes, &[], &limits);
        let split = decode_in_chunks(&bytes, &cuts, &limits);
        prop_assert_eq!(&split, &whole);
        let byte_by_byte: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(decode_in_chunks(&bytes, &byte_by_byte, &limits), whole);
    }

    #[test]
    fn arbitrary_bytes_never_panic_any_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let limits = Limits { depth_max: 4, ..Limits::default() };
        let _ = decode_in_chunks(&bytes, &[bytes.len() / 2], &limits);
        if let Ok(Some(length)) = Frame::check(&bytes, &limits) {
            prop_assert!(Frame::parse(&Bytes::copy_from_slice(&bytes[..length]), &limits).is_ok());
        }
        let _ = Frame::parse(&Bytes::copy_from_slice(&bytes), &limits);
    }

    #[test]
    fn arbitrary_bytes_after_a_prefix_of_resp_never_panic(
        frame in frame(),
        tail in proptest::collection::vec(any::<u8>(), 0..32),
        keep in any::<usize>(),
    ) {
        let mut bytes = frame.to_bytes(ProtocolVersion::Resp3);
        bytes.truncate(keep % (bytes.len() + 1));
        bytes.extend_from_slice(&tail);
        let limits = Limits::default();
        if let Ok(Some(length)) = Frame::check(&bytes, &limits) {
            prop_assert!(Frame::parse(&Bytes::copy_from_slice(&bytes[..length]), &limits).is_ok());
        }
        let _ = decode_in_chunks(&bytes, &[keep], &limits);
    }

    #[test]
    fn command_parsing_never_panics(
        name in prop::sample::select(vec![
            "PING", "ECHO", "SET", "GET", "DEL", "EXISTS", "INCR", "INCRBY", "MSET", "MGET",
            "DBSIZE", "KEYS", "SCAN", "MULTI", "EXEC", "DISCARD", "INFO", "SHUTDOWN", "QUIT",
            "HELLO", "COMMAND", "CLIENT", "SELECT", "CONFIG", "COMMITMODE", "AUTH", "NOPE",
        ]),
        args in proptest::collection::vec(prop_oneof![
            blob(),
            prop::sample::select(vec![
                "NX", "XX", "EX", "GET", "MATCH", "COUNT", "0", "1", "-1", "3", "AUTH", "SETNAME",
                "SETINFO", "LIB-NAME", "GETNAME", "DOCS", "INFO", "WAIT", "NOWAIT", "BATCH",
                "IMMEDIATE", "SAVE", "NOSAVE",
            ]).prop_map(|word| Bytes::from_static(word.as_bytes())),
        ], 0..6),
    ) {
        let mut request = vec![Bytes::from_static(name.as_bytes())];
        request.extend(args);
        match Command::parse(Request::new(request)) {
            Ok(command) => prop_assert!(!command.name().is_empty()),
            Err(error) => prop_assert!(error.to_string().split(' ').next().unwrap().chars().all(|c| c.is_ascii_uppercase())),
        }
    }
}
