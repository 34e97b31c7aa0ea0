//! Ratio and single-core speed of the redo codecs on real redo: every file named on the
//! command line (archived logs, say) is cut into `max_send`-sized pieces (1 MiB), and each
//! piece is put through `FrameCompressor` as an `ArchiveChunk` and decoded back, as gap
//! shipping does. Prints, per codec, the ratio and the MB/s of uncompressed redo per core.
//!
//! `cargo run --release -p proto --example codec_speed -- DATA_DIR/archive/*.arc`

use std::time::Instant;

use proto::{ArchiveChunk, Codec, Decoder, FrameCompressor, Message};

const PIECE: usize = 1 << 20;

fn main() {
    let mut pieces = Vec::new();
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
        for (index, piece) in bytes.chunks(PIECE).enumerate() {
            pieces.push(Message::ArchiveChunk(ArchiveChunk {
                seq: 1,
                offset: (index * PIECE) as u64,
                total_len: bytes.len() as u64,
                bytes: piece.to_vec(),
            }));
        }
    }
    if pieces.is_empty() {
        eprintln!("usage: codec_speed FILE...");
        std::process::exit(2);
    }
    let decoder = Decoder { payload_max: PIECE + 4096 };
    for (codec, level) in [(Codec::Lz4, 0), (Codec::Zstd, 1), (Codec::Zstd, 3), (Codec::Zstd, 6)] {
        let mut compressor = FrameCompressor::new(codec, level.max(1)).unwrap();
        let (mut payload, mut wire) = (0usize, 0usize);
        let mut frames = Vec::with_capacity(pieces.len());
        let started = Instant::now();
        for piece in &pieces {
            let mut frame = Vec::new();
            let encoded = compressor.encode(piece, &mut frame);
            payload += encoded.payload_len;
            wire += encoded.wire_len;
            frames.push(frame);
        }
        let compress_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        for (frame, piece) in frames.iter().zip(&pieces) {
            let (decoded, _) = decoder.decode(frame).unwrap().unwrap();
            assert!(&decoded == piece, "a piece did not come back as it was");
        }
        let decompress_s = started.elapsed().as_secs_f64();
        let megabytes = payload as f64 / 1e6;
        println!(
            "{:>4} {level}: {megabytes:.0} MB, ratio {:.2}, compress {:.0} MB/s, decompress {:.0} MB/s (uncompressed redo, one core)",
            codec.name(),
            payload as f64 / wire as f64,
            megabytes / compress_s,
            megabytes / decompress_s
        );
    }
}
