//! The frame around every message, the decoder that finds frames in a byte stream, and the
//! little-endian field writer and reader the messages are encoded with.

use crate::error::ProtoError;
use crate::message::{Kind, Message, Position};
use crate::{NAMES_MAX, TEXT_MAX, message};

/// Bytes of a frame header.
pub const FRAME_HEADER_LEN: usize = 16;
/// Default bound on a frame's payload: a redo write is at most the log buffer (plus unit
/// headers), an archive chunk or a copy chunk is chosen by the sender.
pub const FRAME_PAYLOAD_MAX_DEFAULT: usize = 64 << 20;

pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"RGWP");

// Format of a frame (little-endian):
// { magic: u32 "RGWP" | length: u32 (payload bytes) | kind: u8 | codec: u8 (0: none)
// | reserved: [u8; 2] | crc32c: u32 (over bytes 8..12 and the payload) | payload: [u8; length] }
// A compressed frame (codec 1 or 2) is described in `compress`.

impl Message {
    /// Appends the whole frame for this message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
        message::encode_payload(self, &mut Writer(out));
        let length = out.len() - start - FRAME_HEADER_LEN;
        let header = &mut out[start..start + FRAME_HEADER_LEN];
        header[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        header[4..8].copy_from_slice(&(length as u32).to_le_bytes());
        header[8] = self.kind() as u8;
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&out[start + 8..start + 12]),
            &out[start + FRAME_HEADER_LEN..],
        );
        out[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
    }

    /// The frame for this message.
    pub fn to_frame(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// Decodes frames from a byte stream, refusing any frame longer than `payload_max` before
/// reading its payload.
#[derive(Debug, Clone, Copy)]
pub struct Decoder {
    pub payload_max: usize,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder { payload_max: FRAME_PAYLOAD_MAX_DEFAULT }
    }
}

impl Decoder {
    /// If `buffer` starts with a frame header, the total length of its frame (header +
    /// payload): how many bytes to have before `decode` can succeed. Checks the magic and the
    /// length bound first, so a lying length is refused before anything is read for it.
    pub fn frame_len(&self, buffer: &[u8]) -> Result<Option<usize>, ProtoError> {
        if buffer.len() < FRAME_HEADER_LEN {
            // Refuse garbage as early as the magic is readable.
            if buffer.len() >= 4 {
                let magic = u32::from_le_bytes(buffer[0..4].try_into().expect("4 bytes"));
                if magic != MAGIC {
                    return Err(ProtoError::Magic(magic));
                }
            }
            return Ok(None);
        }
        let magic = u32::from_le_bytes(buffer[0..4].try_into().expect("4 bytes"));
        if magic != MAGIC {
            return Err(ProtoError::Magic(magic));
        }
        let length = u32::from_le_bytes(buffer[4..8].try_into().expect("4 bytes")) as usize;
        if length > self.payload_max {
            return Err(ProtoError::TooLong { length, max: self.payload_max });
        }
        Ok(Some(FRAME_HEADER_LEN + length))
    }

    /// Decodes the frame at the start of `buffer`: `Ok(None)` if it is not all there yet,
    /// else the message and the bytes it took.
    pub fn decode(&self, buffer: &[u8]) -> Result<Option<(Message, usize)>, ProtoError> {
        let Some(total) = self.frame_len(buffer)? else { return Ok(None) };
        if buffer.len() < total {
            return Ok(None);
        }
        let crc = u32::from_le_bytes(buffer[12..16].try_into().expect("4 bytes"));
        let payload = &buffer[FRAME_HEADER_LEN..total];
        if crc32c::crc32c_append(crc32c::crc32c(&buffer[8..12]), payload) != crc {
            return Err(ProtoError::Checksum);
        }
        let kind = Kind::from_u8(buffer[8]).ok_or(ProtoError::UnknownKind(buffer[8]))?;
        // Byte 9 names the codec of a compressed payload (version 3); 0: not compressed.
        let decompressed;
        let payload = if buffer[9] == 0 {
            payload
        } else {
            decompressed = crate::compress::decompress(kind, buffer[9], payload, self.payload_max)?;
            &decompressed[..]
        };
        let mut reader = Reader { bytes: payload, at: 0, kind };
        let message = message::decode_payload(kind, &mut reader)?;
        if reader.at != payload.len() {
            return Err(
                reader.bad(format!("{} bytes after the message", payload.len() - reader.at))
            );
        }
        Ok(Some((message, total)))
    }
}

pub(crate) struct Writer<'a>(pub &'a mut Vec<u8>);

impl Writer<'_> {
    pub fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    pub fn bool(&mut self, value: bool) {
        self.0.push(u8::from(value));
    }
    pub fn u16(&mut self, value: u16) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    pub fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }
    /// A u16 length and UTF-8, cut at a character boundary at or below `TEXT_MAX` bytes.
    pub fn text(&mut self, text: &str) {
        let mut end = text.len().min(TEXT_MAX);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let bytes = &text.as_bytes()[..end];
        self.u16(bytes.len() as u16);
        self.0.extend_from_slice(bytes);
    }
    /// A u8 count (at most `NAMES_MAX`; more are cut) and that many texts.
    pub fn names(&mut self, names: &[String]) {
        let names = &names[..names.len().min(NAMES_MAX)];
        self.u8(names.len() as u8);
        for name in names {
            self.text(name);
        }
    }
    pub fn position(&mut self, position: &Position) {
        for value in [
            position.complete_through_seq,
            position.current_seq,
            position.current_offset,
            position.applied_scn,
        ] {
            self.u64(value);
        }
    }
}

pub(crate) struct Reader<'a> {
    pub bytes: &'a [u8],
    pub at: usize,
    pub kind: Kind,
}

impl Reader<'_> {
    pub fn bad(&self, reason: String) -> ProtoError {
        ProtoError::Malformed { kind: self.kind, reason }
    }
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }
    pub fn take(&mut self, len: usize) -> Result<&[u8], ProtoError> {
        if self.remaining() < len {
            return Err(self.bad(format!("truncated at byte {}", self.at)));
        }
        let slice = &self.bytes[self.at..self.at + len];
        self.at += len;
        Ok(slice)
    }
    pub fn u8(&mut self) -> Result<u8, ProtoError> {
        Ok(self.take(1)?[0])
    }
    pub fn bool(&mut self) -> Result<bool, ProtoError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.bad(format!("{other} is not a boolean"))),
        }
    }
    pub fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    pub fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    pub fn u64(&mut self) -> Result<u64, ProtoError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    pub fn text(&mut self) -> Result<String, ProtoError> {
        let len = self.u16()? as usize;
        if len > TEXT_MAX {
            return Err(self.bad(format!("text of {len} bytes is over {TEXT_MAX}")));
        }
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.bad("text is not UTF-8".to_string()))
    }
    pub fn names(&mut self) -> Result<Vec<String>, ProtoError> {
        let count = self.u8()? as usize;
        if count > NAMES_MAX {
            return Err(self.bad(format!("{count} names; at most {NAMES_MAX}")));
        }
        (0..count).map(|_| self.text()).collect()
    }
    pub fn position(&mut self) -> Result<Position, ProtoError> {
        Ok(Position {
            complete_through_seq: self.u64()?,
            current_seq: self.u64()?,
            current_offset: self.u64()?,
            applied_scn: self.u64()?,
        })
    }
    pub fn rest(&mut self) -> Vec<u8> {
        self.rest_with_room(0)
    }

    /// The rest, in a vector with room for `room` more bytes (a trimmed write's zero tail,
    /// bounded by the caller): putting them back then copies nothing.
    pub fn rest_with_room(&mut self, room: usize) -> Vec<u8> {
        let mut rest = Vec::with_capacity(self.bytes.len() - self.at + room);
        rest.extend_from_slice(&self.bytes[self.at..]);
        self.at = self.bytes.len();
        rest
    }
}
