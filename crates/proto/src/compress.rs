//! Compressed frames: a `Write` or an `ArchiveChunk` whose payload travels compressed with LZ4
//! (block format) or zstd, flagged in the frame header's first reserved byte. The receiver
//! decompresses before decoding the message, so what it writes is the primary's exact bytes.
//!
//! Decompression is bounded: the uncompressed length the frame claims is checked against the
//! decoder's `payload_max` (and `DECOMPRESSED_MAX`) before anything is allocated for it, and the
//! codec may not produce a byte more or less than it (a lying length or a decompression bomb
//! is a `ProtoError::Compressed`, never a larger allocation).

use crate::error::ProtoError;
use crate::frame::{FRAME_HEADER_LEN, MAGIC};
use crate::message::{Kind, Message, encode_payload};

/// The most a compressed frame may decompress to, whatever the decoder's `payload_max`: a
/// redo write or an archive chunk is at most 64 MiB plus its header.
pub const DECOMPRESSED_MAX: usize = (64 << 20) + (64 << 10);
/// Bytes before the compressed data in a compressed frame's payload: the uncompressed length.
pub const COMPRESSED_PREFIX_LEN: usize = 4;

// Format of a compressed frame (little-endian):
// { magic: u32 "RGWP" | length: u32 (wire payload bytes) | kind: u8 | codec: u8 (1 lz4, 2 zstd)
// | reserved: [u8; 2] | crc32c: u32 (over bytes 8..12 and the wire payload)
// | uncompressed_len: u32 | compressed payload: [u8; length - 4] }

/// A compression algorithm on the wire (the frame header's byte 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Codec {
    /// LZ4 block format (`lz4_flex`): fast, about 2× on redo.
    Lz4 = 1,
    /// zstd (`zstd`, the reference library) at a level: slower, smaller.
    Zstd = 2,
}

impl Codec {
    pub(crate) fn from_u8(value: u8) -> Option<Codec> {
        match value {
            1 => Some(Codec::Lz4),
            2 => Some(Codec::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// Whether a message kind may travel compressed: only those that carry redo.
pub fn compressible(kind: Kind) -> bool {
    matches!(kind, Kind::Write | Kind::TrimmedWrite | Kind::ArchiveChunk)
}

/// Sizes of one frame sent by `FrameCompressor::encode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    /// The message's payload uncompressed.
    pub payload_len: usize,
    /// The payload on the wire (compressed with its length prefix, or as it was when
    /// compressing would not have made it smaller).
    pub wire_len: usize,
    /// Whether the frame went compressed.
    pub compressed: bool,
}

/// Encodes frames compressed with one codec, keeping the codec's state between frames.
pub struct FrameCompressor {
    codec: Codec,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    payload: Vec<u8>,
    packed: Vec<u8>,
}

impl std::fmt::Debug for FrameCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameCompressor").field("codec", &self.codec).finish_non_exhaustive()
    }
}

impl FrameCompressor {
    /// A compressor for `codec`; `level` is zstd's (1..=19; LZ4 has none).
    pub fn new(codec: Codec, level: i32) -> std::io::Result<FrameCompressor> {
        let zstd = match codec {
            Codec::Zstd => Some(zstd::bulk::Compressor::new(level)?),
            Codec::Lz4 => None,
        };
        Ok(FrameCompressor { codec, zstd, payload: Vec::new(), packed: Vec::new() })
    }

    pub fn codec(&self) -> Codec {
        self.codec
    }

    /// Appends the frame for `message` to `out`: compressed if its kind may be and if that
    /// makes it smaller, else exactly `Message::encode`'s frame.
    pub fn encode(&mut self, message: &Message, out: &mut Vec<u8>) -> Encoded {
        self.payload.clear();
        encode_payload(message, &mut crate::frame::Writer(&mut self.payload));
        let payload_len = self.payload.len();
        let compressed = compressible(message.kind())
            && payload_len <= DECOMPRESSED_MAX
            && self.compress_payload().is_some_and(|len| len + COMPRESSED_PREFIX_LEN < payload_len);
        let (codec_byte, wire): (u8, &[u8]) =
            if compressed { (self.codec as u8, &self.packed) } else { (0, &self.payload) };
        write_frame(message.kind(), codec_byte, wire, out);
        Encoded { payload_len, wire_len: wire.len(), compressed }
    }

    /// Compresses `self.payload` into `self.packed` (with its length prefix); the compressed
    /// length, or none if the codec failed (the frame then goes uncompressed).
    fn compress_payload(&mut self) -> Option<usize> {
        let raw = &self.payload;
        self.packed.clear();
        self.packed.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        match self.codec {
            Codec::Lz4 => {
                let bound = lz4_flex::block::get_maximum_output_size(raw.len());
                self.packed.resize(COMPRESSED_PREFIX_LEN + bound, 0);
                let len =
                    lz4_flex::block::compress_into(raw, &mut self.packed[COMPRESSED_PREFIX_LEN..])
                        .ok()?;
                self.packed.truncate(COMPRESSED_PREFIX_LEN + len);
                Some(len)
            }
            Codec::Zstd => {
                let compressor = self.zstd.as_mut()?;
                let bound = zstd::zstd_safe::compress_bound(raw.len());
                self.packed.resize(COMPRESSED_PREFIX_LEN + bound, 0);
                let len = compressor
                    .compress_to_buffer(raw, &mut self.packed[COMPRESSED_PREFIX_LEN..])
                    .ok()?;
                self.packed.truncate(COMPRESSED_PREFIX_LEN + len);
                Some(len)
            }
        }
    }
}

/// Writes a frame header for `kind` with `codec_byte` in byte 9, then `payload`.
fn write_frame(kind: Kind, codec_byte: u8, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[kind as u8, codec_byte, 0, 0]);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out[start + 8..start + 12]), payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    debug_assert_eq!(out.len() - start, FRAME_HEADER_LEN + payload.len());
}

/// A compressed frame's sizes, from its header and the first bytes of its payload: (wire
/// payload, uncompressed payload). None for an uncompressed frame or too few bytes.
pub fn compressed_sizes(frame: &[u8]) -> Option<(usize, usize)> {
    if frame.len() < FRAME_HEADER_LEN + COMPRESSED_PREFIX_LEN || frame[9] == 0 {
        return None;
    }
    let wire = u32::from_le_bytes(frame[4..8].try_into().expect("4 bytes")) as usize;
    let raw = u32::from_le_bytes(
        frame[FRAME_HEADER_LEN..FRAME_HEADER_LEN + 4].try_into().expect("4 bytes"),
    ) as usize;
    Some((wire, raw))
}

/// The uncompressed payload of a compressed frame of `kind` (`codec_byte` from its header),
/// at most `limit` bytes: the claimed length is checked before anything is allocated, and the
/// codec must produce exactly that many bytes.
pub(crate) fn decompress(
    kind: Kind,
    codec_byte: u8,
    wire: &[u8],
    limit: usize,
) -> Result<Vec<u8>, ProtoError> {
    let refuse = |reason: String| Err(ProtoError::Compressed { kind, reason });
    let Some(codec) = Codec::from_u8(codec_byte) else {
        return refuse(format!("unknown compression {codec_byte}"));
    };
    if !compressible(kind) {
        return refuse("this message kind is never compressed".into());
    }
    if wire.len() < COMPRESSED_PREFIX_LEN {
        return refuse(format!("{} bytes cannot hold the uncompressed length", wire.len()));
    }
    let claimed = u32::from_le_bytes(wire[..4].try_into().expect("4 bytes")) as usize;
    let limit = limit.min(DECOMPRESSED_MAX);
    if claimed == 0 || claimed > limit {
        return refuse(format!("claims {claimed} bytes uncompressed; the limit is 1..={limit}"));
    }
    let data = &wire[COMPRESSED_PREFIX_LEN..];
    let produced = match codec {
        Codec::Lz4 => {
            let mut out = vec![0u8; claimed];
            match lz4_flex::block::decompress_into(data, &mut out) {
                Ok(len) => {
                    out.truncate(len);
                    out
                }
                Err(error) => {
                    return refuse(format!("{} does not decompress: {error}", codec.name()));
                }
            }
        }
        Codec::Zstd => {
            let mut out = vec![0u8; claimed];
            match zstd::bulk::decompress_to_buffer(data, &mut out) {
                Ok(len) => {
                    out.truncate(len);
                    out
                }
                Err(error) => {
                    return refuse(format!(
                        "{} does not decompress into the {claimed} bytes claimed: {error}",
                        codec.name()
                    ));
                }
            }
        }
    };
    if produced.len() != claimed {
        return refuse(format!(
            "decompressed to {} bytes, not the {claimed} the frame claims",
            produced.len()
        ));
    }
    Ok(produced)
}
