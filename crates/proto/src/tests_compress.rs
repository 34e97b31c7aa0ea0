//! Compressed frames: round trips of every message under both codecs, and the refusal of
//! lying lengths, decompression bombs and flags where none belongs.

use proptest::prelude::*;

use super::*;
use crate::tests::message;

fn codec() -> impl Strategy<Value = Codec> {
    prop_oneof![Just(Codec::Lz4), Just(Codec::Zstd)]
}

/// Redo-like bytes: runs of a few repeated values among random ones, so that frames both
/// compress and (sometimes) do not.
fn redo_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((any::<u8>(), 1usize..64, any::<bool>()), 1..64).prop_map(|runs| {
        let mut bytes = Vec::new();
        for (value, len, repeat) in runs {
            if repeat {
                bytes.extend(std::iter::repeat_n(value, len));
            } else {
                bytes
                    .extend((0..len).map(|index| value.wrapping_mul(31).wrapping_add(index as u8)));
            }
        }
        bytes
    })
}

fn write_with(bytes: Vec<u8>) -> Message {
    Message::Write(Write {
        write_id: 9,
        seq: 4,
        offset: 8192,
        kind: WriteKind::Units,
        ack: AckWanted::None,
        primary_time_us: 1,
        last_scn: 2,
        primary_durable_scn: 3,
        bytes,
        zero_tail: 0,
    })
}

/// A compressed frame of `kind` whose payload is `prefix` + `data`, with a valid checksum.
fn forged(kind: u8, codec: u8, prefix: u32, data: &[u8]) -> Vec<u8> {
    let mut payload = prefix.to_le_bytes().to_vec();
    payload.extend_from_slice(data);
    let mut frame = b"RGWP".to_vec();
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(&[kind, codec, 0, 0]);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[8..12]), &payload);
    frame.extend_from_slice(&crc.to_le_bytes());
    frame.extend_from_slice(&payload);
    frame
}

proptest! {
    #[test]
    fn every_message_round_trips_through_a_compressor(
        message in message(),
        codec in codec(),
        level in 1i32..=6,
    ) {
        let mut compressor = FrameCompressor::new(codec, level).unwrap();
        let mut frame = Vec::new();
        let encoded = compressor.encode(&message, &mut frame);
        prop_assert_eq!(frame.len(), FRAME_HEADER_LEN + encoded.wire_len);
        prop_assert!(!encoded.compressed || compressible(message.kind()));
        prop_assert!(encoded.wire_len <= encoded.payload_len, "never larger than uncompressed");
        if !encoded.compressed {
            prop_assert_eq!(&frame, &message.to_frame(), "uncompressed is the version 2 frame");
        }
        let (decoded, used) = Decoder::default().decode(&frame).unwrap().unwrap();
        prop_assert_eq!(used, frame.len());
        prop_assert_eq!(decoded, message);
        for cut in 0..frame.len() {
            prop_assert_eq!(Decoder::default().decode(&frame[..cut]).unwrap(), None);
        }
    }

    #[test]
    fn redo_compresses_and_comes_back_byte_for_byte(bytes in redo_bytes(), codec in codec()) {
        let message = write_with(bytes);
        let mut compressor = FrameCompressor::new(codec, 3).unwrap();
        let mut stream = Vec::new();
        // The same compressor over several frames keeps no state that leaks between them.
        for _ in 0..3 {
            compressor.encode(&message, &mut stream);
        }
        let mut at = 0;
        for _ in 0..3 {
            let (decoded, used) = Decoder::default().decode(&stream[at..]).unwrap().unwrap();
            prop_assert_eq!(&decoded, &message);
            at += used;
        }
        prop_assert_eq!(at, stream.len());
    }

    #[test]
    fn any_flipped_bit_of_a_compressed_frame_is_refused(
        bytes in redo_bytes(),
        codec in codec(),
        position in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let mut frame = Vec::new();
        FrameCompressor::new(codec, 1).unwrap().encode(&write_with(bytes), &mut frame);
        let at = position.index(frame.len());
        frame[at] ^= 1 << bit;
        match Decoder::default().decode(&frame) {
            Ok(Some((decoded, _))) => prop_assert!(false, "a damaged frame decoded as {decoded:?}"),
            Ok(None) => prop_assert!((4..8).contains(&at)),
            Err(_) => {}
        }
    }

    #[test]
    fn arbitrary_compressed_payloads_never_panic(
        data in prop::collection::vec(any::<u8>(), 0..300),
        claimed in prop_oneof![0u32..2000, any::<u32>()],
        codec in 0u8..4,
        kind in 1u8..=19,
    ) {
        let _ = Decoder::default().decode(&forged(kind, codec, claimed, &data));
    }
}

#[test]
fn redo_frames_shrink_and_others_are_never_compressed() {
    let message = write_with(b"SET key value ".repeat(1000));
    for codec in [Codec::Lz4, Codec::Zstd] {
        let mut frame = Vec::new();
        let encoded = FrameCompressor::new(codec, 1).unwrap().encode(&message, &mut frame);
        assert!(encoded.compressed && encoded.wire_len * 10 < encoded.payload_len, "{encoded:?}");
        assert_eq!(frame[9], codec as u8);
        assert_eq!(compressed_sizes(&frame), Some((encoded.wire_len, encoded.payload_len)));
        let beat = Message::GapRequest(GapRequest { from_seq: 1, to_seq: 1 });
        let mut plain = Vec::new();
        let encoded = FrameCompressor::new(codec, 1).unwrap().encode(&beat, &mut plain);
        assert!(!encoded.compressed);
        assert_eq!(plain, beat.to_frame());
    }
}

#[test]
fn a_lying_uncompressed_length_is_refused_before_allocating() {
    let payload = match write_with(vec![7; 5000]) {
        message @ Message::Write(_) => {
            let frame = message.to_frame();
            frame[FRAME_HEADER_LEN..].to_vec()
        }
        _ => unreachable!(),
    };
    let lz4 = lz4_flex::block::compress(&payload);
    let zstd = zstd::bulk::compress(&payload, 1).unwrap();
    let decoder = Decoder { payload_max: 1 << 20 };
    for (codec, data) in [(Codec::Lz4, &lz4), (Codec::Zstd, &zstd)] {
        let right = payload.len() as u32;
        assert!(decoder.decode(&forged(3, codec as u8, right, data)).unwrap().is_some());
        for claimed in [right - 1, right + 1, 1] {
            let error = decoder.decode(&forged(3, codec as u8, claimed, data)).unwrap_err();
            assert!(matches!(error, ProtoError::Compressed { .. }), "{codec:?} {claimed}: {error}");
        }
        // Over the decoder's bound: refused by the claim alone.
        let error = decoder.decode(&forged(3, codec as u8, (1 << 20) + 1, data)).unwrap_err();
        assert!(error.to_string().contains("the limit is"), "{error}");
        let error = decoder.decode(&forged(3, codec as u8, 0, data)).unwrap_err();
        assert!(error.to_string().contains("the limit is"), "{error}");
    }
}

#[test]
fn a_decompression_bomb_is_refused_at_the_frame_bound() {
    // 64 MiB of zeros compresses to a few KiB; a decoder bounded at 1 MiB must not expand it.
    let zeros = vec![0u8; 64 << 20];
    let bomb = zstd::bulk::compress(&zeros, 3).unwrap();
    assert!(bomb.len() < 64 << 10);
    let decoder = Decoder { payload_max: 1 << 20 };
    // Claiming the truth is refused by the bound; claiming a small length, by the codec.
    let error = decoder.decode(&forged(3, Codec::Zstd as u8, 64 << 20, &bomb)).unwrap_err();
    assert!(error.to_string().contains("the limit is"), "{error}");
    let error = decoder.decode(&forged(3, Codec::Zstd as u8, 1 << 20, &bomb)).unwrap_err();
    assert!(matches!(error, ProtoError::Compressed { .. }), "{error}");
    let lz4_bomb = lz4_flex::block::compress(&zeros[..8 << 20]);
    let error = decoder.decode(&forged(3, Codec::Lz4 as u8, 1 << 20, &lz4_bomb)).unwrap_err();
    assert!(matches!(error, ProtoError::Compressed { .. }), "{error}");
}

#[test]
fn a_flag_on_a_message_that_is_never_compressed_or_an_unknown_codec_is_refused() {
    let beat = Message::GapRequest(GapRequest { from_seq: 1, to_seq: 2 }).to_frame();
    let payload = &beat[FRAME_HEADER_LEN..];
    let data = lz4_flex::block::compress(payload);
    let error = Decoder::default()
        .decode(&forged(9, Codec::Lz4 as u8, payload.len() as u32, &data))
        .unwrap_err();
    assert!(error.to_string().contains("never compressed"), "{error}");
    let error = Decoder::default().decode(&forged(3, 3, payload.len() as u32, &data)).unwrap_err();
    assert!(error.to_string().contains("unknown compression 3"), "{error}");
}
