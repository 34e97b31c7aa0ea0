//! Any bytes as the units of a log whose header is valid and whose units all pass the
//! torn-write checks (magic, sequence, offset, checksum forged): the structural checks of the
//! record stream (used bytes, first-record offsets, record headers, SCN order) see arbitrary
//! values and must report corruption, never panic or return records out of order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redo::format::{HeaderBlock, LogHeader, encode_header, first_unit_offset, scan_image};
use redo::{DatabaseId, Incarnation, LogSeq, RedoThread, Scn};

const BLOCK: usize = 512;

fuzz_target!(|data: &[u8]| {
    let units = data.len().div_ceil(BLOCK).clamp(1, 64);
    let file_size = (2 + units) * BLOCK;
    let header = LogHeader {
        block_size: BLOCK as u32,
        file_size: file_size as u64,
        database_id: DatabaseId(1),
        incarnation: Incarnation(1),
        thread: RedoThread(1),
        seq: LogSeq(3),
        first_scn: Scn(10),
        first_time_us: 0,
    };
    let mut image = vec![0u8; file_size];
    encode_header(&mut image[..BLOCK], &HeaderBlock::Open(header));
    let first = first_unit_offset(BLOCK as u32) as usize;
    let len = data.len().min(file_size - first);
    image[first..first + len].copy_from_slice(&data[..len]);
    for start in (first..file_size).step_by(BLOCK) {
        let unit = &mut image[start..start + BLOCK];
        unit[..4].copy_from_slice(b"RGRU");
        unit[8..16].copy_from_slice(&3u64.to_le_bytes());
        unit[16..24].copy_from_slice(&(start as u64).to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&unit[..4]), &unit[8..]);
        unit[4..8].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(scan) = scan_image(&image) {
        for (index, record) in scan.records.iter().enumerate() {
            assert_eq!(record.scn.0, 10 + index as u64);
        }
    }
});
