//! The on-disk format of a log file: header blocks, redo units and records (sans-IO).
//!
//! `docs/redo-format.md` is the byte-exact description; this module is its only
//! implementation. Everything here works on byte slices: no file, no clock.
//!
//! A log file is a whole number of blocks of `block_size` bytes:
//!
//! ```text
//! block 0        block 1          block 2 ..                                    block n-1
//! +------------+----------------+-------+-------+-------+-----+-------+--------+
//! | open hdr   | closed hdr     | unit  | unit  | unit  | ... | unit  | (stale)|
//! +------------+----------------+-------+-------+-------+-----+-------+--------+
//! ```
//!
//! Each write of the log writer starts at a fresh unit and ends with a partly used unit whose
//! tail is zero padding, so bytes once made durable are never rewritten while the file is in
//! use. Records form a byte stream across the units of a write; a record never spans two
//! writes and never spans two files.

use crate::types::{DatabaseId, Incarnation, LogSeq, RedoThread, Scn};

/// Size of a unit's header; the rest of the unit is payload.
pub const UNIT_HEADER_LEN: usize = 32;
/// Size of a record's header in the payload stream.
pub const RECORD_HEADER_LEN: usize = 16;
/// Blocks at the start of every log file that hold headers, not redo.
pub const HEADER_BLOCKS: u64 = 2;
/// Smallest block size: a disk sector.
pub const BLOCK_SIZE_MIN: u32 = 512;
/// Largest block size.
pub const BLOCK_SIZE_MAX: u32 = 65536;
/// Format version written in every header; readers refuse other versions.
pub const FORMAT_VERSION: u16 = 1;

const HEADER_MAGIC: u32 = u32::from_le_bytes(*b"RGLH");
const UNIT_MAGIC: u32 = u32::from_le_bytes(*b"RGRU");
/// `first_record` value of a unit in which no record begins.
const NO_RECORD: u32 = u32::MAX;
const HEADER_KIND_OPEN: u16 = 1;
const HEADER_KIND_CLOSED: u16 = 2;

/// A defect found while decoding: where and what. Callers turn it into
/// `RedoError::Corrupt` with the file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    pub offset: u64,
    pub reason: String,
}

impl FormatError {
    fn new(offset: u64, reason: impl Into<String>) -> FormatError {
        FormatError { offset, reason: reason.into() }
    }
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.reason)
    }
}

/// Whether `block_size` is one we read and write.
pub fn block_size_is_valid(block_size: u32) -> bool {
    block_size.is_power_of_two() && (BLOCK_SIZE_MIN..=BLOCK_SIZE_MAX).contains(&block_size)
}

/// Payload bytes per unit.
pub fn unit_capacity(block_size: u32) -> usize {
    block_size as usize - UNIT_HEADER_LEN
}

/// Offset of the first unit in a log file.
pub fn first_unit_offset(block_size: u32) -> u64 {
    HEADER_BLOCKS * u64::from(block_size)
}

/// Number of whole units that `stream_bytes` of record stream occupy.
pub fn units_for(stream_bytes: usize, block_size: u32) -> usize {
    stream_bytes.div_ceil(unit_capacity(block_size))
}

/// The largest record payload a log file of `file_size` can hold.
pub fn max_record_len(file_size: u64, block_size: u32) -> usize {
    let units = (file_size / u64::from(block_size)).saturating_sub(HEADER_BLOCKS);
    let stream = units.saturating_mul(unit_capacity(block_size) as u64);
    usize::try_from(stream.saturating_sub(RECORD_HEADER_LEN as u64)).unwrap_or(usize::MAX)
}

/// What a log file says about itself when it becomes the current log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogHeader {
    pub block_size: u32,
    pub file_size: u64,
    pub database_id: DatabaseId,
    pub incarnation: Incarnation,
    pub thread: RedoThread,
    pub seq: LogSeq,
    /// SCN of the first record in this log (the next SCN when the log was opened).
    pub first_scn: Scn,
    pub first_time_us: u64,
}

/// What a log file says about itself once it has been switched away from: where its redo ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEnd {
    /// One past the SCN of the last record: the first SCN of the next log.
    pub next_scn: Scn,
    pub next_time_us: u64,
    /// Byte offset just after the last unit of redo.
    pub end_offset: u64,
}

/// A decoded header block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderBlock {
    Open(LogHeader),
    Closed(LogHeader, LogEnd),
}

impl HeaderBlock {
    pub fn header(&self) -> &LogHeader {
        match self {
            HeaderBlock::Open(header) | HeaderBlock::Closed(header, _) => header,
        }
    }
}

// Format of a header block (little-endian; the rest of the block is zero and covered by the CRC):
// { magic: u32 "RGLH" | crc32c: u32 | version: u16 | kind: u16 (1 open, 2 closed) | block_size: u32
// | file_size: u64 | database_id: u64 | incarnation: u32 | thread: u16 | reserved: u16 | seq: u64
// | first_scn: u64 | first_time_us: u64 | next_scn: u64 | next_time_us: u64 | end_offset: u64
// | reserved: [u8; 24] }
// The CRC covers bytes [0, 4) and [8, block_size).

/// Writes a header block (`block.len()` must be the header's block size).
pub fn encode_header(block: &mut [u8], header_block: &HeaderBlock) {
    let header = header_block.header();
    assert_eq!(block.len(), header.block_size as usize, "header block has the log's block size");
    block.fill(0);
    let (kind, end) = match header_block {
        HeaderBlock::Open(_) => {
            (HEADER_KIND_OPEN, LogEnd { next_scn: Scn(0), next_time_us: 0, end_offset: 0 })
        }
        HeaderBlock::Closed(_, end) => (HEADER_KIND_CLOSED, *end),
    };
    put_u32(block, 0, HEADER_MAGIC);
    put_u16(block, 8, FORMAT_VERSION);
    put_u16(block, 10, kind);
    put_u32(block, 12, header.block_size);
    put_u64(block, 16, header.file_size);
    put_u64(block, 24, header.database_id.0);
    put_u32(block, 32, header.incarnation.0);
    put_u16(block, 36, header.thread.0);
    put_u64(block, 40, header.seq.0);
    put_u64(block, 48, header.first_scn.0);
    put_u64(block, 56, header.first_time_us);
    put_u64(block, 64, end.next_scn.0);
    put_u64(block, 72, end.next_time_us);
    put_u64(block, 80, end.end_offset);
    let crc = block_crc(block);
    put_u32(block, 4, crc);
}

/// The block size a header block claims, read before its CRC can be checked (the CRC covers
/// the whole block). `None` if the bytes are not a header at all.
pub fn peek_header_block_size(bytes: &[u8]) -> Option<u32> {
    if bytes.len() < 16 || get_u32(bytes, 0) != HEADER_MAGIC {
        return None;
    }
    let block_size = get_u32(bytes, 12);
    block_size_is_valid(block_size).then_some(block_size)
}

/// Decodes a header block. `offset` is only used in error messages.
pub fn decode_header(block: &[u8], offset: u64) -> Result<HeaderBlock, FormatError> {
    if block.len() < BLOCK_SIZE_MIN as usize {
        return Err(FormatError::new(offset, "header block shorter than 512 bytes"));
    }
    if get_u32(block, 0) != HEADER_MAGIC {
        return Err(FormatError::new(offset, "not a redoguard log header (bad magic)"));
    }
    let block_size = get_u32(block, 12);
    if !block_size_is_valid(block_size) || block.len() != block_size as usize {
        return Err(FormatError::new(offset, format!("header claims block size {block_size}")));
    }
    if get_u32(block, 4) != block_crc(block) {
        return Err(FormatError::new(offset, "header checksum mismatch"));
    }
    let version = get_u16(block, 8);
    if version != FORMAT_VERSION {
        return Err(FormatError::new(
            offset,
            format!("log format version {version}; this build reads version {FORMAT_VERSION}"),
        ));
    }
    let file_size = get_u64(block, 16);
    let header = LogHeader {
        block_size,
        file_size,
        database_id: DatabaseId(get_u64(block, 24)),
        incarnation: Incarnation(get_u32(block, 32)),
        thread: RedoThread(get_u16(block, 36)),
        seq: LogSeq(get_u64(block, 40)),
        first_scn: Scn(get_u64(block, 48)),
        first_time_us: get_u64(block, 56),
    };
    let first_unit = first_unit_offset(block_size);
    if !file_size.is_multiple_of(u64::from(block_size)) || file_size <= first_unit {
        return Err(FormatError::new(offset, format!("header claims file size {file_size}")));
    }
    match get_u16(block, 10) {
        HEADER_KIND_OPEN => Ok(HeaderBlock::Open(header)),
        HEADER_KIND_CLOSED => {
            let end = LogEnd {
                next_scn: Scn(get_u64(block, 64)),
                next_time_us: get_u64(block, 72),
                end_offset: get_u64(block, 80),
            };
            if end.end_offset < first_unit
                || end.end_offset > file_size
                || !end.end_offset.is_multiple_of(u64::from(block_size))
                || end.next_scn < header.first_scn
            {
                return Err(FormatError::new(offset, "closed header has an impossible end"));
            }
            Ok(HeaderBlock::Closed(header, end))
        }
        kind => Err(FormatError::new(offset, format!("unknown header kind {kind}"))),
    }
}

// Format of a redo unit (block_size bytes, little-endian):
// { magic: u32 "RGRU" | crc32c: u32 | seq: u64 | offset: u64 | used: u32 | first_record: u32
// | payload: [u8; block_size - 32] }
// `offset` is the unit's own byte offset in the file; `used` the payload bytes that belong to
// the record stream (the rest is zero padding); `first_record` the payload offset of the first
// record header that begins in this unit, or u32::MAX if none does. The CRC covers bytes
// [0, 4) and [8, block_size), padding included.

// Format of a record in the payload stream:
// { len: u32 | flags: u32 (0) | scn: u64 | payload: [u8; len] }

/// Lays records out as units into a caller-provided buffer (`UnitWriter::new`, then `put`
/// each record, then `finish`). The buffer must hold `units_for(stream_bytes) * block_size`.
pub struct UnitWriter<'a> {
    out: &'a mut [u8],
    block_size: usize,
    seq: LogSeq,
    start_offset: u64,
    unit: usize,
    used: usize,
    first_record: u32,
}

impl<'a> UnitWriter<'a> {
    /// Units will be written for log `seq` starting at file offset `start_offset`.
    pub fn new(
        out: &'a mut [u8],
        block_size: u32,
        seq: LogSeq,
        start_offset: u64,
    ) -> UnitWriter<'a> {
        debug_assert!(block_size_is_valid(block_size));
        debug_assert_eq!(start_offset % u64::from(block_size), 0);
        UnitWriter {
            out,
            block_size: block_size as usize,
            seq,
            start_offset,
            unit: 0,
            used: 0,
            first_record: NO_RECORD,
        }
    }

    fn capacity(&self) -> usize {
        self.block_size - UNIT_HEADER_LEN
    }

    /// Appends one record to the stream.
    pub fn put(&mut self, scn: Scn, payload: &[u8]) {
        if self.used == self.capacity() {
            self.seal();
        }
        if self.first_record == NO_RECORD {
            self.first_record = self.used as u32;
        }
        let mut header = [0u8; RECORD_HEADER_LEN];
        put_u32(&mut header, 0, u32::try_from(payload.len()).expect("record length fits u32"));
        put_u64(&mut header, 8, scn.0);
        self.extend(&header);
        self.extend(payload);
    }

    fn extend(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.used == self.capacity() {
                self.seal();
            }
            let take = (self.capacity() - self.used).min(bytes.len());
            let at = self.unit * self.block_size + UNIT_HEADER_LEN + self.used;
            self.out[at..at + take].copy_from_slice(&bytes[..take]);
            self.used += take;
            bytes = &bytes[take..];
        }
    }

    fn seal(&mut self) {
        let start = self.unit * self.block_size;
        let unit = &mut self.out[start..start + self.block_size];
        unit[UNIT_HEADER_LEN + self.used..].fill(0);
        put_u32(unit, 0, UNIT_MAGIC);
        put_u64(unit, 8, self.seq.0);
        put_u64(unit, 16, self.start_offset + start as u64);
        put_u32(unit, 24, self.used as u32);
        put_u32(unit, 28, self.first_record);
        let crc = block_crc(unit);
        put_u32(unit, 4, crc);
        self.unit += 1;
        self.used = 0;
        self.first_record = NO_RECORD;
    }

    /// Seals the last unit (zero padding after the stream) and returns the bytes written.
    pub fn finish(mut self) -> usize {
        if self.used > 0 {
            self.seal();
        }
        self.unit * self.block_size
    }
}

fn block_crc(block: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&block[..4]), &block[8..])
}

fn put_u16(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_le_bytes());
}

fn put_u32(buf: &mut [u8], at: usize, value: u32) {
    buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_u64(buf: &mut [u8], at: usize, value: u64) {
    buf[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(buf[at..at + 2].try_into().expect("two bytes"))
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("four bytes"))
}

fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("eight bytes"))
}

mod gather;
pub use gather::{Gathered, UnitGather};

mod scan;
pub use scan::{
    ImageCheck, ImageScan, RedoScanner, ScanStep, UnitDefect, UnitView, check_unit, scan_image,
};

#[cfg(test)]
mod tests;
