//! The frame decoder on an arbitrary byte stream, read in arbitrary pieces the way
//! `transport`'s `Conn::recv` buffers a socket: it never panics, never allocates more than
//! the bytes it holds (a lying length costs nothing), every read pattern yields the same
//! messages and the same error as the whole stream at once, `frame_len` agrees with `decode`,
//! and every decoded frame encodes back to its own bytes, up to the two things the decoder
//! deliberately does not look at: the reserved header bytes and an unknown error code (read
//! as `Internal`). A compressed frame (byte 9 names a codec) may allocate what it claims
//! uncompressed, at most `payload_max` and `DECOMPRESSED_MAX`, and must decode to what its
//! uncompressed re-encoding and a `FrameCompressor`'s decode to. Three kinds may also allocate
//! what their decoded form takes beyond their bytes, bounded (`decoded_growth`).
#![no_main]

mod largest_alloc;

use libfuzzer_sys::fuzz_target;
use proto::{
    Codec, DECOMPRESSED_MAX, Decoder, FRAME_HEADER_LEN, FRAME_PAYLOAD_MAX_DEFAULT, FrameCompressor,
    Message, ProtoError,
};

const MAGIC: &[u8; 4] = b"RGWP";
const KIND_ERROR: u8 = 10;
const ERROR_CODE_INTERNAL: u16 = 7;
/// Room for an error's reason string, the only allocation not made for received bytes.
const SLACK: usize = 256;

/// The messages decoded (with the bytes each took) and the error that ended the stream.
type Outcome = (Vec<(Message, usize)>, Option<ProtoError>);

/// Decodes the whole stream at once, checking each step against `frame_len` and the
/// allocation bound.
fn decode_whole(decoder: &Decoder, stream: &[u8]) -> Outcome {
    let mut messages = Vec::new();
    let mut at = 0;
    loop {
        let rest = &stream[at..];
        let (result, largest) = largest_alloc::largest_during(|| decoder.decode(rest));
        let held = rest.len().min(FRAME_HEADER_LEN.saturating_add(decoder.payload_max));
        // A compressed frame may allocate its claimed uncompressed length, within the bounds.
        let claimed = proto::compressed_sizes(rest)
            .map_or(0, |(_, raw)| raw.min(decoder.payload_max).min(DECOMPRESSED_MAX));
        let grown = decoded_growth(rest.get(8).copied(), held);
        assert!(
            largest <= held.max(SLACK).max(claimed).max(grown),
            "allocated {largest} bytes decoding {} bytes (payload_max {})",
            rest.len(),
            decoder.payload_max
        );
        let frame_len = decoder.frame_len(rest);
        match (&result, &frame_len) {
            (Ok(Some((_, used))), _) => assert_eq!(frame_len, Ok(Some(*used))),
            (Ok(None), Ok(None)) => {}
            (Ok(None), Ok(Some(total))) => {
                assert!(*total > rest.len(), "a whole frame is buffered")
            }
            (Err(error), Err(early)) => assert_eq!(error, early),
            (Err(_), Ok(Some(total))) => assert!(*total <= rest.len()),
            (result, frame_len) => panic!("decode {result:?} but frame_len {frame_len:?}"),
        }
        match result {
            Ok(Some((message, used))) => {
                assert!(used >= FRAME_HEADER_LEN && used <= rest.len());
                assert!(used - FRAME_HEADER_LEN <= decoder.payload_max, "over the bound");
                messages.push((message, used));
                at += used;
            }
            Ok(None) => return (messages, None),
            Err(error) => return (messages, Some(error)),
        }
    }
}

/// What a frame of `kind` holding `held` bytes may allocate at once beyond them, by design:
/// a trimmed write's room for its zero tail; a copy chunk's entries (two vectors each, 48
/// bytes, for at least 8 bytes on the wire, at most `COPY_CHUNK_ENTRIES_MAX`); an incarnation
/// history (72 bytes a record, for at least 43 on the wire, at most `HISTORY_MAX`) in a hello,
/// a role answer or a copy's beginning.
fn decoded_growth(kind: Option<u8>, held: usize) -> usize {
    use proto::Kind;
    let is = |wanted: Kind| kind == Some(wanted as u8);
    if is(Kind::TrimmedWrite) {
        held + proto::ZERO_TAIL_MAX as usize
    } else if is(Kind::CopyChunk) {
        (held / 8).min(proto::COPY_CHUNK_ENTRIES_MAX) * size_of::<(Vec<u8>, Vec<u8>)>()
    } else if is(Kind::Hello) || is(Kind::RoleInfo) || is(Kind::CopyBegin) {
        (held / 43).min(proto::HISTORY_MAX) * size_of::<proto::IncarnationRecord>()
    } else {
        0
    }
}

/// Decodes the stream as it arrives in reads of the given sizes (cycled), keeping a buffer
/// and a start offset as `Conn::recv` does.
fn decode_in_reads(decoder: &Decoder, stream: &[u8], reads: &[usize]) -> Outcome {
    let mut buffer = Vec::new();
    let mut start = 0;
    let mut fed = 0;
    let mut messages = Vec::new();
    for &read in reads.iter().cycle() {
        loop {
            match decoder.decode(&buffer[start..]) {
                Ok(Some((message, used))) => {
                    start += used;
                    messages.push((message, used));
                    if start == buffer.len() {
                        buffer.clear();
                        start = 0;
                    }
                }
                Ok(None) => break,
                Err(error) => return (messages, Some(error)),
            }
        }
        if fed == stream.len() {
            break;
        }
        buffer.drain(..start);
        start = 0;
        let read = read.min(stream.len() - fed);
        buffer.extend_from_slice(&stream[fed..fed + read]);
        fed += read;
    }
    (messages, None)
}

/// The frame our encoder writes for the message these bytes decoded to: reserved bytes
/// zero and an unknown error code as `Internal`, checksum recomputed.
fn canonical(frame: &[u8]) -> Vec<u8> {
    let mut frame = frame.to_vec();
    frame[9..12].fill(0);
    if frame[8] == KIND_ERROR {
        let code = u16::from_le_bytes([frame[16], frame[17]]);
        if !(1..=11).contains(&code) {
            frame[16..18].copy_from_slice(&ERROR_CODE_INTERNAL.to_le_bytes());
        }
    }
    fix_checksum(&mut frame);
    frame
}

fn fix_checksum(frame: &mut [u8]) {
    let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[8..12]), &frame[FRAME_HEADER_LEN..]);
    frame[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Forges the magic and the checksum of every whole frame, so that the payload decoders see
/// the fuzzer's bytes instead of a checksum mismatch.
fn forge(stream: &mut [u8], payload_max: usize) {
    let mut at = 0;
    while stream.len() - at >= FRAME_HEADER_LEN {
        stream[at..at + 4].copy_from_slice(MAGIC);
        let length = u32::from_le_bytes(stream[at + 4..at + 8].try_into().unwrap()) as usize;
        if length > payload_max || stream.len() - at - FRAME_HEADER_LEN < length {
            return;
        }
        let end = at + FRAME_HEADER_LEN + length;
        fix_checksum(&mut stream[at..end]);
        at = end;
    }
}

fuzz_target!(|input: &[u8]| {
    // Byte 0 picks the payload bound and whether frames are forged; bytes 1..5 the read sizes.
    if input.len() < 5 {
        return;
    }
    let (config, rest) = input.split_at(5);
    let payload_max =
        [0, 1, 16, 100, 4096, FRAME_PAYLOAD_MAX_DEFAULT, u32::MAX as usize, usize::MAX]
            [usize::from(config[0] & 7)];
    let decoder = Decoder { payload_max };
    let mut stream = rest.to_vec();
    if config[0] & 8 != 0 {
        forge(&mut stream, payload_max);
    }
    let reads: Vec<usize> = config[1..5].iter().map(|&size| 1 + usize::from(size)).collect();

    let whole = decode_whole(&decoder, &stream);
    assert_eq!(decode_in_reads(&decoder, &stream, &reads), whole, "reads of {reads:?}");

    let mut at = 0;
    for (message, used) in &whole.0 {
        let original = &stream[at..at + used];
        at += used;
        let encoded = message.to_frame();
        if original[9] == 0 {
            assert_eq!(encoded, canonical(original), "{message:?} re-encodes to its frame");
        } else {
            // Compressed: other compressors may produce other bytes for the same payload; ours
            // must decode to the same message.
            for codec in [Codec::Lz4, Codec::Zstd] {
                let mut frame = Vec::new();
                FrameCompressor::new(codec, 1).unwrap().encode(message, &mut frame);
                let again = Decoder::default().decode(&frame).expect("our compressed frame");
                assert_eq!(again, Some((message.clone(), frame.len())));
            }
        }
        let again = Decoder::default().decode(&encoded).expect("our own frame decodes");
        assert_eq!(again, Some((message.clone(), encoded.len())));
    }
});
