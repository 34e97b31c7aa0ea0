//! Round trips, truncations, bit flips, torn and stale units: the format's promises.

use proptest::prelude::*;

use super::*;
use crate::types::RedoRecord;

const DB: DatabaseId = DatabaseId(0x5eed);

fn header(block_size: u32, file_size: u64, seq: u64, first_scn: u64) -> LogHeader {
    LogHeader {
        block_size,
        file_size,
        database_id: DB,
        incarnation: Incarnation(1),
        thread: RedoThread(1),
        seq: LogSeq(seq),
        first_scn: Scn(first_scn),
        first_time_us: 1_700_000_000_000_000,
    }
}

/// A log image with `writes` (each a list of record payloads) laid out as the log writer
/// would: each write from a fresh unit. Returns the image, the records, and the end offset
/// of each write.
fn build(
    header: &LogHeader,
    writes: &[Vec<Vec<u8>>],
    base: Option<Vec<u8>>,
) -> (Vec<u8>, Vec<RedoRecord>, Vec<u64>) {
    let block = header.block_size as usize;
    let mut image = base.unwrap_or_else(|| vec![0u8; header.file_size as usize]);
    encode_header(&mut image[..block], &HeaderBlock::Open(*header));
    let mut offset = first_unit_offset(header.block_size);
    let mut scn = header.first_scn;
    let mut records = Vec::new();
    let mut ends = Vec::new();
    for write in writes {
        let stream: usize = write.iter().map(|payload| RECORD_HEADER_LEN + payload.len()).sum();
        let bytes = units_for(stream, header.block_size) * block;
        let at = offset as usize;
        let mut unit_writer =
            UnitWriter::new(&mut image[at..at + bytes], header.block_size, header.seq, offset);
        for payload in write {
            unit_writer.put(scn, payload);
            records.push(RedoRecord { scn, payload: payload.clone() });
            scn = scn.next();
        }
        assert_eq!(unit_writer.finish(), bytes);
        offset += bytes as u64;
        ends.push(offset);
    }
    (image, records, ends)
}

fn close(image: &mut [u8], header: &LogHeader, end_offset: u64, next_scn: Scn) {
    let block = header.block_size as usize;
    let end = LogEnd { next_scn, next_time_us: header.first_time_us + 1, end_offset };
    encode_header(&mut image[block..2 * block], &HeaderBlock::Closed(*header, end));
}

/// Gives every unit a valid magic, sequence, offset and CRC, whatever its other bytes say.
fn forge_units(image: &mut [u8], header: &LogHeader) {
    let block = header.block_size as usize;
    for start in (first_unit_offset(header.block_size) as usize..image.len()).step_by(block) {
        let unit = &mut image[start..start + block];
        unit[..4].copy_from_slice(&UNIT_MAGIC.to_le_bytes());
        unit[8..16].copy_from_slice(&header.seq.0.to_le_bytes());
        unit[16..24].copy_from_slice(&(start as u64).to_le_bytes());
        let crc = block_crc(unit);
        unit[4..8].copy_from_slice(&crc.to_le_bytes());
    }
}

fn payloads() -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
    // Up to 6 writes of up to 6 records of up to 1.5 KiB: records span units of 512 bytes.
    prop::collection::vec(
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1500), 1..6),
        0..6,
    )
}

const FILE_SIZE: u64 = 64 * 1024;

#[test]
fn header_round_trip_and_rejections() {
    for block_size in [512u32, 4096] {
        let open = header(block_size, 64 * u64::from(block_size), 7, 100);
        let mut block = vec![0u8; block_size as usize];
        encode_header(&mut block, &HeaderBlock::Open(open));
        assert_eq!(peek_header_block_size(&block), Some(block_size));
        assert_eq!(decode_header(&block, 0), Ok(HeaderBlock::Open(open)));
        let end =
            LogEnd { next_scn: Scn(150), next_time_us: 9, end_offset: 4 * u64::from(block_size) };
        encode_header(&mut block, &HeaderBlock::Closed(open, end));
        assert_eq!(decode_header(&block, 0), Ok(HeaderBlock::Closed(open, end)));
        // Every single bit flip is caught.
        for bit in 0..block.len() * 8 {
            let mut flipped = block.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(decode_header(&flipped, 0), Ok(HeaderBlock::Closed(open, end)), "bit {bit}");
        }
    }
    let mut block = vec![0u8; 512];
    assert!(decode_header(&block, 0).unwrap_err().reason.contains("bad magic"));
    block[..4].copy_from_slice(b"RGLH");
    block[12..16].copy_from_slice(&1000u32.to_le_bytes());
    assert!(decode_header(&block, 0).unwrap_err().reason.contains("block size 1000"));
}

#[test]
fn an_empty_log_scans_to_nothing() {
    let header = header(512, FILE_SIZE, 1, 1);
    let (image, _, _) = build(&header, &[], None);
    let scan = scan_image(&image).unwrap();
    assert!(scan.records.is_empty());
    assert_eq!(scan.end_offset, 1024);
    assert_eq!(scan.end_scn, Scn(1));
    assert_eq!(scan.stopped_by, Some(UnitDefect::Magic));
}

#[test]
fn a_record_exactly_filling_a_unit_ends_a_run() {
    let header = header(512, FILE_SIZE, 3, 10);
    let exact = vec![7u8; 512 - UNIT_HEADER_LEN - RECORD_HEADER_LEN];
    let (image, records, ends) = build(&header, &[vec![exact.clone(), exact]], None);
    assert_eq!(ends, vec![1024 + 1024]);
    let scan = scan_image(&image).unwrap();
    assert_eq!(scan.records, records);
}

#[test]
fn a_zero_length_record_round_trips() {
    let header = header(512, FILE_SIZE, 3, 10);
    let (image, records, _) = build(&header, &[vec![vec![], vec![1], vec![]]], None);
    assert_eq!(scan_image(&image).unwrap().records, records);
}

#[test]
fn a_forged_unit_is_corruption_not_the_end() {
    let header = header(512, FILE_SIZE, 3, 10);
    let (mut image, _, _) = build(&header, &[vec![vec![1; 100]]], None);
    // Claim 600 used bytes in a 480-byte payload and fix the CRC: it passes the torn-write
    // checks, so it must be reported, not silently treated as the end.
    image[1024 + 24..1024 + 28].copy_from_slice(&600u32.to_le_bytes());
    let crc = block_crc(&image[1024..1536]);
    image[1024 + 4..1024 + 8].copy_from_slice(&crc.to_le_bytes());
    let error = scan_image(&image).unwrap_err();
    assert_eq!(error.offset, 1024);
    assert!(error.reason.contains("used bytes"), "{error}");
}

#[test]
fn a_wrong_scn_is_corruption() {
    let header = header(512, FILE_SIZE, 3, 10);
    let (image, _, _) = build(&header, &[vec![vec![1; 10]]], None);
    let mut other = header;
    other.first_scn = Scn(11);
    let mut scanner = RedoScanner::new(&other);
    let error = scanner.push_unit(&image[1024..1536], &mut Vec::new()).unwrap_err();
    assert!(error.reason.contains("expected 11"), "{error}");
}

/// What a standby's archiving asks of a whole log read into memory: it scans, is closed, and
/// ends where the image does.
fn whole_image_is_sound(image: &[u8]) -> bool {
    scan_image(image)
        .is_ok_and(|scan| scan.end.is_some_and(|end| end.end_offset == image.len() as u64))
}

/// The same asked of `ImageCheck`, fed `chunk_units` units at a time.
fn checked_in_order_is_sound(image: &[u8], chunk_units: usize) -> bool {
    let Some(head_len) = ImageCheck::head_len(image).filter(|&len| len <= image.len()) else {
        return false;
    };
    let Ok(Some(mut check)) = ImageCheck::begin(&image[..head_len]) else {
        return false;
    };
    if check.end().end_offset != image.len() as u64 {
        return false;
    }
    let block = check.header().block_size as usize;
    while !check.is_done() {
        let from = check.next_offset() as usize;
        let to = (from + chunk_units * block).min(image.len() / block * block);
        if to <= from {
            break;
        }
        if check.feed(&image[from..to]).is_err() {
            return false;
        }
    }
    check.finish().is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Checked in order as it arrives, a closed log gets the verdict a scan of the whole image
    /// gives, damaged anywhere or not.
    #[test]
    fn a_check_in_order_agrees_with_a_whole_scan(
        writes in payloads(),
        chunk_units in 1usize..6,
        flip in proptest::option::of((any::<prop::sample::Index>(), 0u8..8)),
    ) {
        let header = header(512, FILE_SIZE, 9, 1);
        let (mut image, records, ends) = build(&header, &writes, None);
        let end = ends.last().copied().unwrap_or(1024);
        close(&mut image, &header, end, Scn(1 + records.len() as u64));
        image.truncate(end as usize);
        if let Some((index, bit)) = flip {
            let at = index.index(image.len());
            image[at] ^= 1 << bit;
        }
        let whole = whole_image_is_sound(&image);
        prop_assert_eq!(checked_in_order_is_sound(&image, chunk_units), whole);
        if flip.is_none() {
            prop_assert!(whole, "a sound log");
        }
    }

    #[test]
    fn round_trip(writes in payloads(), block_size in prop::sample::select(vec![512u32, 1024, 4096]), closed: bool) {
        let header = header(block_size, 128 * u64::from(block_size), 9, 1000);
        let stream: usize = writes.iter().map(|write| {
            let bytes: usize = write.iter().map(|p| p.len() + RECORD_HEADER_LEN).sum();
            units_for(bytes, block_size) * block_size as usize
        }).sum();
        prop_assume!(first_unit_offset(block_size) as usize + stream <= header.file_size as usize);
        let (mut image, records, ends) = build(&header, &writes, None);
        let end_offset = ends.last().copied().unwrap_or(first_unit_offset(block_size));
        let next_scn = Scn(1000 + records.len() as u64);
        if closed {
            close(&mut image, &header, end_offset, next_scn);
        }
        let scan = scan_image(&image).unwrap();
        prop_assert_eq!(&scan.records, &records);
        prop_assert_eq!(scan.end_offset, end_offset);
        prop_assert_eq!(scan.end_scn, next_scn);
        // An archived copy holds only the redo: the image cut at the end scans the same.
        if closed {
            let archived = scan_image(&image[..end_offset as usize]).unwrap();
            prop_assert_eq!(archived.records, records);
        }
    }

    #[test]
    fn truncation_yields_whole_writes_only(writes in payloads(), cut_fraction in 0.0f64..1.0) {
        let header = header(512, FILE_SIZE, 9, 1);
        let (image, records, ends) = build(&header, &writes, None);
        let end = ends.last().copied().unwrap_or(1024) as usize;
        let cut = ((end as f64) * cut_fraction) as usize;
        match scan_image(&image[..cut]) {
            Err(_) => prop_assert!(cut < 1024, "only a cut header may fail"),
            Ok(scan) => {
                // What survives is exactly the writes (or record runs) that fit whole.
                prop_assert!(records.starts_with(&scan.records));
                prop_assert!(scan.end_offset as usize <= cut);
                let whole_writes = ends.iter().filter(|&&write_end| write_end as usize <= cut).count();
                let at_least: usize = writes[..whole_writes].iter().map(Vec::len).sum();
                prop_assert!(scan.records.len() >= at_least);
            }
        }
    }

    #[test]
    fn a_flipped_bit_is_never_read_as_redo(writes in payloads(), position in 0.0f64..1.0, bit in 0u8..8, closed: bool) {
        let header = header(512, FILE_SIZE, 9, 1);
        let (mut image, records, ends) = build(&header, &writes, None);
        let end = ends.last().copied().unwrap_or(1024);
        if closed {
            close(&mut image, &header, end, Scn(1 + records.len() as u64));
        }
        let at = ((end as f64) * position) as usize;
        image[at] ^= 1 << bit;
        match scan_image(&image) {
            Err(_) => {}
            Ok(scan) => {
                prop_assert!(records.starts_with(&scan.records), "a flip produced records that were never written");
                if at >= 1024 {
                    prop_assert!(scan.records.len() < records.len(), "a flip inside the redo went unnoticed");
                    prop_assert!(!closed, "a closed log that lost redo must be an error");
                }
            }
        }
    }

    #[test]
    fn torn_last_write_drops_only_that_write(writes in payloads(), keep in prop::collection::vec(any::<bool>(), 64), half_unit: bool) {
        prop_assume!(!writes.is_empty());
        let header = header(512, FILE_SIZE, 9, 1);
        let (complete, records, ends) = build(&header, &writes, None);
        let last_start = if ends.len() >= 2 { ends[ends.len() - 2] } else { 1024 } as usize;
        let last_end = *ends.last().unwrap() as usize;
        // Before the last write, those units were zero: tear it by keeping an arbitrary subset
        // of its 512-byte sectors (and maybe half of one).
        let mut torn = complete.clone();
        for (index, sector_start) in (last_start..last_end).step_by(512).enumerate() {
            if !keep[index % keep.len()] {
                let from = if half_unit && index == 0 { sector_start + 256 } else { sector_start };
                torn[from..sector_start + 512].fill(0);
            }
        }
        let scan = scan_image(&torn).unwrap();
        let before_last: usize = writes[..writes.len() - 1].iter().map(Vec::len).sum();
        prop_assert!(records.starts_with(&scan.records));
        prop_assert!(scan.records.len() >= before_last, "a tear of the last write lost earlier writes");
    }

    #[test]
    fn stale_units_of_an_earlier_use_are_not_redo(old in payloads(), new in payloads()) {
        let old_header = header(512, FILE_SIZE, 4, 1);
        let (old_image, _, _) = build(&old_header, &old, None);
        // The file is reused for sequence 7: only the new header and new units are written.
        let new_header = header(512, FILE_SIZE, 7, 500);
        let (image, records, _) = build(&new_header, &new, Some(old_image));
        let scan = scan_image(&image).unwrap();
        prop_assert_eq!(scan.records, records);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096), block_size in prop::sample::select(vec![512u32, 1024])) {
        let _ = scan_image(&bytes);
        // Also as units behind a valid header.
        let header = header(block_size, 16 * u64::from(block_size), 2, 2);
        let mut image = vec![0u8; header.file_size as usize];
        encode_header(&mut image[..block_size as usize], &HeaderBlock::Open(header));
        let first = first_unit_offset(block_size) as usize;
        let len = bytes.len().min(image.len() - first);
        image[first..first + len].copy_from_slice(&bytes[..len]);
        let _ = scan_image(&image);
        // And with every unit forged to pass the torn-write checks, so that the structural
        // checks (used, first_record, record headers) see arbitrary values.
        forge_units(&mut image, &header);
        let _ = scan_image(&image);
    }
}

/// Payloads of every size class the gather treats apart: empty, smaller than a borrowed piece,
/// around a unit, and spanning many units.
fn gather_payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let len = prop_oneof![0usize..600, 3000usize..5000, 8000usize..40_000];
    prop::collection::vec((len, any::<u8>()), 1..12).prop_map(|specs| {
        specs
            .into_iter()
            .map(|(len, seed)| (0..len).map(|index| seed.wrapping_add(index as u8)).collect())
            .collect()
    })
}

#[test]
fn a_gather_of_nothing_is_empty() {
    let gathered = UnitGather::new(4096, LogSeq(3), 8192).finish();
    assert!(gathered.is_empty());
    assert_eq!(gathered.piece_count(), 0);
    assert!(gathered.to_vec().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The gather lays out exactly the bytes the unit writer does, CRCs included, and
    /// borrows only pieces worth an iovec.
    #[test]
    fn a_gather_writes_the_unit_writers_bytes(
        payloads in gather_payloads(),
        block_size in prop::sample::select(vec![512u32, 1024, 4096, 65536]),
        seq in 1u64..1000,
        start_unit in 2u64..100,
        first_scn in 1u64..1_000_000,
    ) {
        let start_offset = start_unit * u64::from(block_size);
        let stream: usize = payloads.iter().map(|payload| RECORD_HEADER_LEN + payload.len()).sum();
        let bytes = units_for(stream, block_size) * block_size as usize;
        let mut expected = vec![0xeeu8; bytes];
        let mut unit_writer = UnitWriter::new(&mut expected, block_size, LogSeq(seq), start_offset);
        let mut gather = UnitGather::new(block_size, LogSeq(seq), start_offset);
        for (index, payload) in payloads.iter().enumerate() {
            unit_writer.put(Scn(first_scn + index as u64), payload);
            gather.put(Scn(first_scn + index as u64), payload);
        }
        prop_assert_eq!(unit_writer.finish(), bytes);
        let gathered = gather.finish();
        prop_assert_eq!(gathered.len(), bytes);
        let got = gathered.to_vec();
        prop_assert_eq!(got.len(), bytes);
        prop_assert!(got == expected, "the gathered units differ from the unit writer's");
        prop_assert!(gathered.pieces().all(|piece| !piece.is_empty()));
        // Every unit passes the reader's check.
        for (index, unit) in got.chunks(block_size as usize).enumerate() {
            let offset = start_offset + (index * block_size as usize) as u64;
            prop_assert!(matches!(check_unit(unit, LogSeq(seq), offset), Ok(Ok(_))));
        }
    }
}
