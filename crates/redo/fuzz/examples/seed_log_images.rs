//! Writes seed inputs for the `log_image` target into `corpus/log_image/`: small, valid log
//! images made by the redo crate's own header and unit writers (open and closed headers, 512
//! and 4096-byte blocks, records that fit a unit, span units and fill the file). Without them
//! the fuzzer never gets past the header's magic and CRC; from them it mutates real logs.
//!
//! `cargo run --example seed_log_images` (from `crates/redo/fuzz`), then
//! `RUSTC_BOOTSTRAP=1 cargo fuzz run log_image`.

use std::path::Path;

use redo::format::{
    HeaderBlock, LogEnd, LogHeader, UnitWriter, encode_header, first_unit_offset, scan_image,
    units_for,
};
use redo::{DatabaseId, Incarnation, LogSeq, RedoThread, Scn};

/// One log image of `records` (payload lengths), closed or open, in a file of `spare` more
/// units than the redo takes.
fn image(block_size: u32, records: &[usize], closed: bool, spare: usize) -> Vec<u8> {
    let block = block_size as usize;
    let stream: usize = records.iter().map(|len| len + 16).sum();
    let units = units_for(stream, block_size);
    let first = first_unit_offset(block_size) as usize;
    let file_size = first + (units + spare) * block;
    let header = LogHeader {
        block_size,
        file_size: file_size as u64,
        database_id: DatabaseId(0x5eed),
        incarnation: Incarnation(1),
        thread: RedoThread(1),
        seq: LogSeq(7),
        first_scn: Scn(100),
        first_time_us: 1_700_000_000_000_000,
    };
    let mut image = vec![0u8; file_size];
    let written = {
        let mut writer = UnitWriter::new(&mut image[first..], block_size, header.seq, first as u64);
        for (index, &len) in records.iter().enumerate() {
            let payload: Vec<u8> = (0..len).map(|at| (at * 31 + index) as u8).collect();
            writer.put(Scn(100 + index as u64), &payload);
        }
        writer.finish()
    };
    encode_header(&mut image[..block], &HeaderBlock::Open(header));
    if closed {
        let end = LogEnd {
            next_scn: Scn(100 + records.len() as u64),
            next_time_us: header.first_time_us + 1_000,
            end_offset: (first + written) as u64,
        };
        encode_header(&mut image[block..2 * block], &HeaderBlock::Closed(header, end));
    }
    image
}

fn main() {
    let dir = Path::new("corpus/log_image");
    std::fs::create_dir_all(dir).expect("create corpus/log_image");
    let cases: [(&str, u32, &[usize], bool, usize); 7] = [
        ("empty-open-512", 512, &[], false, 1),
        ("one-record-open-512", 512, &[20], false, 1),
        ("small-records-closed-512", 512, &[0, 1, 7, 33, 100], true, 0),
        ("spanning-record-closed-512", 512, &[1500], true, 1),
        ("many-records-open-512", 512, &[48; 40], false, 2),
        ("mixed-closed-4096", 4096, &[10, 5000, 3, 300], true, 0),
        ("full-file-closed-4096", 4096, &[4000, 4000], true, 0),
    ];
    for (name, block_size, records, closed, spare) in cases {
        let bytes = image(block_size, records, closed, spare);
        // A seed the scan does not take whole would teach the fuzzer nothing of the records.
        let scan = scan_image(&bytes).unwrap_or_else(|error| panic!("seed {name}: {error}"));
        assert_eq!(scan.records.len(), records.len(), "seed {name}: {scan:?}");
        std::fs::write(dir.join(name), &bytes).expect("write a seed");
        println!("{name}: {} bytes, {} records", bytes.len(), records.len());
    }
}
