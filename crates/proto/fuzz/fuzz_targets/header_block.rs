//! The bytes of a `Write` of kind `OpenHeader` or `ClosedHeader`, as they arrive from the
//! network: the primary's and the standby's transport hand them to
//! `redo::format::decode_header` whatever their length (the redo fuzz targets only reach it
//! with block-sized slices of a log image behind a real checksum). With the magic, block size
//! and checksum optionally forged so that every field is reached: decoding never panics,
//! what it accepts is self-consistent, and it encodes to a block that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::{AckWanted, Decoder, Message, Write, WriteKind, zero_tail};
use redo::format::{
    HeaderBlock, block_size_is_valid, decode_header, encode_header, first_unit_offset,
};

fuzz_target!(|input: &[u8]| {
    let Some((&selector, data)) = input.split_first() else { return };
    // Bit 3 keeps the fuzzer's length (any length can arrive); else a valid block size.
    let mut block = data.to_vec();
    if selector & 8 == 0 {
        block.resize(512 << ((selector >> 4) & 7), 0);
    }
    if selector & 1 != 0 && block.len() >= 4 {
        block[0..4].copy_from_slice(b"RGLH");
    }
    if selector & 2 != 0 && block.len() >= 16 {
        let size = block.len() as u32;
        block[12..16].copy_from_slice(&size.to_le_bytes());
    }
    if selector & 4 != 0 && block.len() >= 8 {
        let crc = crc32c::crc32c_append(crc32c::crc32c(&block[..4]), &block[8..]);
        block[4..8].copy_from_slice(&crc.to_le_bytes());
    }
    // Through the wire first, as the transport receives it: its zero tail left out, as a
    // version 5 primary sends it, and put back.
    let tail = zero_tail(&block);
    block.truncate(block.len() - tail);
    let write = Message::Write(Write {
        write_id: 1,
        seq: 1,
        offset: 0,
        kind: WriteKind::OpenHeader,
        ack: AckWanted::Durable,
        primary_time_us: 0,
        last_scn: 0,
        primary_durable_scn: 0,
        bytes: block,
        zero_tail: tail as u32,
    });
    let frame = write.to_frame();
    let Some((Message::Write(received), _)) = Decoder::default().decode(&frame).ok().flatten()
    else {
        // Only an empty write is refused.
        assert!(data.is_empty() && selector & 8 != 0);
        return;
    };
    let received = received.untrimmed();
    let offset = u64::from(selector & 0x80) * 32;
    let Ok(header) = decode_header(&received.bytes, offset) else { return };
    let fields = header.header();
    let block_size = fields.block_size;
    assert!(block_size_is_valid(block_size));
    assert_eq!(block_size as usize, received.bytes.len());
    assert!(fields.file_size.is_multiple_of(u64::from(block_size)));
    assert!(fields.file_size > first_unit_offset(block_size));
    if let HeaderBlock::Closed(_, end) = &header {
        assert!(end.end_offset >= first_unit_offset(block_size));
        assert!(end.end_offset <= fields.file_size);
        assert!(end.next_scn >= fields.first_scn);
    }
    let mut again = vec![0u8; received.bytes.len()];
    encode_header(&mut again, &header);
    assert_eq!(decode_header(&again, offset), Ok(header));
});
