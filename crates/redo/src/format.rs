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

use crate::types::{DatabaseId, Incarnation, LogSeq, RedoRecord, RedoThread, Scn};

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

/// Why a unit ends the redo of a log (it is not redo of this log at this place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitDefect {
    /// Not a unit at all: zeroes from preallocation, or garbage.
    Magic,
    /// The checksum does not match: a torn or partial write, or a flipped bit.
    Checksum,
    /// A unit of another log sequence: stale, from an earlier use of this file.
    Sequence(LogSeq),
    /// A unit written for another place in the file.
    Offset(u64),
}

impl std::fmt::Display for UnitDefect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnitDefect::Magic => f.write_str("no redo unit here"),
            UnitDefect::Checksum => f.write_str("checksum mismatch (torn write or corruption)"),
            UnitDefect::Sequence(seq) => write!(f, "stale unit of log sequence {seq}"),
            UnitDefect::Offset(offset) => write!(f, "unit written for offset {offset}"),
        }
    }
}

/// A unit that passed its checks.
#[derive(Debug, Clone, Copy)]
pub struct UnitView<'a> {
    pub used: usize,
    pub first_record: Option<usize>,
    pub payload: &'a [u8],
}

/// Checks one unit read from `offset` of log `seq`.
pub fn check_unit(
    unit: &[u8],
    seq: LogSeq,
    offset: u64,
) -> Result<Result<UnitView<'_>, UnitDefect>, FormatError> {
    if unit.len() < BLOCK_SIZE_MIN as usize || get_u32(unit, 0) != UNIT_MAGIC {
        return Ok(Err(UnitDefect::Magic));
    }
    if get_u32(unit, 4) != block_crc(unit) {
        return Ok(Err(UnitDefect::Checksum));
    }
    let unit_seq = LogSeq(get_u64(unit, 8));
    if unit_seq != seq {
        return Ok(Err(UnitDefect::Sequence(unit_seq)));
    }
    let unit_offset = get_u64(unit, 16);
    if unit_offset != offset {
        return Ok(Err(UnitDefect::Offset(unit_offset)));
    }
    // From here on the unit is intact and ours: any inconsistency is not a torn write but a
    // bug or a forged file, and is reported as corruption.
    let capacity = unit.len() - UNIT_HEADER_LEN;
    let used = get_u32(unit, 24) as usize;
    if used == 0 || used > capacity {
        return Err(FormatError::new(
            offset,
            format!("unit claims {used} used bytes of {capacity}"),
        ));
    }
    let first_record = match get_u32(unit, 28) {
        NO_RECORD => None,
        first if (first as usize) < used => Some(first as usize),
        first => {
            return Err(FormatError::new(
                offset,
                format!("unit's first record at {first} is past its {used} used bytes"),
            ));
        }
    };
    Ok(Ok(UnitView { used, first_record, payload: &unit[UNIT_HEADER_LEN..UNIT_HEADER_LEN + used] }))
}

/// A record being assembled across units.
#[derive(Debug)]
struct Partial {
    header: [u8; RECORD_HEADER_LEN],
    header_have: usize,
    scn: Scn,
    len: usize,
    payload: Vec<u8>,
}

/// What feeding one unit to a `RedoScanner` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanStep {
    /// The unit is redo; the scanner moved past it.
    Unit,
    /// The unit is not redo of this log: the redo ends before it.
    End(UnitDefect),
}

/// Reads the record stream of one log, unit by unit (sans-IO).
///
/// Records are released only at a unit boundary that is also a record boundary (the end of a
/// write, or a record that happens to end exactly at the end of a unit). When the redo ends
/// (a unit fails its checks), records of the unfinished run are dropped: they belong to a
/// write that was never completely made durable, so none of them was acknowledged.
#[derive(Debug)]
pub struct RedoScanner {
    seq: LogSeq,
    block_size: u32,
    file_size: u64,
    max_record_len: usize,
    next_offset: u64,
    end_offset: u64,
    expect_scn: Scn,
    end_scn: Scn,
    partial: Option<Partial>,
    staged: Vec<RedoRecord>,
    ended: Option<UnitDefect>,
}

impl RedoScanner {
    /// A scanner at the first unit of the log that `header` describes.
    pub fn new(header: &LogHeader) -> RedoScanner {
        RedoScanner::resume(header, first_unit_offset(header.block_size), header.first_scn)
    }

    /// A scanner at a known record boundary `offset` (a unit boundary) whose next record has
    /// SCN `next_scn`.
    pub fn resume(header: &LogHeader, offset: u64, next_scn: Scn) -> RedoScanner {
        RedoScanner {
            seq: header.seq,
            block_size: header.block_size,
            file_size: header.file_size,
            max_record_len: max_record_len(header.file_size, header.block_size),
            next_offset: offset,
            end_offset: offset,
            expect_scn: next_scn,
            end_scn: next_scn,
            partial: None,
            staged: Vec::new(),
            ended: None,
        }
    }

    /// Offset of the next unit to feed.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Offset just after the last unit that ended a run of whole records: the end of redo
    /// found so far.
    pub fn end_offset(&self) -> u64 {
        self.end_offset
    }

    /// SCN of the first record after `end_offset`.
    pub fn end_scn(&self) -> Scn {
        self.end_scn
    }

    /// Whether every unit of the file has been fed.
    pub fn at_end_of_file(&self) -> bool {
        self.next_offset + u64::from(self.block_size) > self.file_size
    }

    /// Why the redo ended, once it has.
    pub fn ended(&self) -> Option<UnitDefect> {
        self.ended
    }

    /// Feeds the unit at `next_offset()`. Records completed by it (and released) are pushed to
    /// `out`.
    pub fn push_unit(
        &mut self,
        unit: &[u8],
        out: &mut Vec<RedoRecord>,
    ) -> Result<ScanStep, FormatError> {
        if let Some(defect) = self.ended {
            return Ok(ScanStep::End(defect));
        }
        if unit.len() != self.block_size as usize {
            return Err(FormatError::new(
                self.next_offset,
                "unit of the wrong size fed to the scanner",
            ));
        }
        let offset = self.next_offset;
        let view = match check_unit(unit, self.seq, offset)? {
            Ok(view) => view,
            Err(defect) => {
                self.ended = Some(defect);
                self.partial = None;
                self.staged.clear();
                return Ok(ScanStep::End(defect));
            }
        };
        let mut at = 0usize;
        // Where the first record header that begins in this unit was found; it must be where
        // the unit says (the bytes before it continue the pending record).
        let mut first_found = None;
        while at < view.used {
            let partial = match &mut self.partial {
                Some(partial) => partial,
                None => {
                    first_found.get_or_insert(at);
                    self.partial.insert(Partial {
                        header: [0; RECORD_HEADER_LEN],
                        header_have: 0,
                        scn: Scn(0),
                        len: 0,
                        payload: Vec::new(),
                    })
                }
            };
            if partial.header_have < RECORD_HEADER_LEN {
                let take = (RECORD_HEADER_LEN - partial.header_have).min(view.used - at);
                partial.header[partial.header_have..partial.header_have + take]
                    .copy_from_slice(&view.payload[at..at + take]);
                partial.header_have += take;
                at += take;
                if partial.header_have < RECORD_HEADER_LEN {
                    break;
                }
                let len = get_u32(&partial.header, 0) as usize;
                let flags = get_u32(&partial.header, 4);
                let scn = Scn(get_u64(&partial.header, 8));
                if flags != 0 {
                    return Err(FormatError::new(
                        offset,
                        format!("record with unknown flags {flags:#x}"),
                    ));
                }
                if len > self.max_record_len {
                    return Err(FormatError::new(
                        offset,
                        format!(
                            "record claims {len} bytes; a log of this size holds at most {}",
                            self.max_record_len
                        ),
                    ));
                }
                if scn != self.expect_scn {
                    return Err(FormatError::new(
                        offset,
                        format!("record has SCN {scn}, expected {}", self.expect_scn),
                    ));
                }
                self.expect_scn = scn.next();
                partial.scn = scn;
                partial.len = len;
            }
            let take = (partial.len - partial.payload.len()).min(view.used - at);
            partial.payload.extend_from_slice(&view.payload[at..at + take]);
            at += take;
            if partial.payload.len() == partial.len {
                let done = self.partial.take().expect("partial record present");
                self.staged.push(RedoRecord { scn: done.scn, payload: done.payload });
            }
        }
        if first_found != view.first_record {
            return Err(FormatError::new(
                offset,
                format!(
                    "unit says its first record begins at {:?}, but the stream has one at {first_found:?}",
                    view.first_record
                ),
            ));
        }
        let capacity = unit_capacity(self.block_size);
        if self.partial.is_some() && view.used < capacity {
            return Err(FormatError::new(offset, "a write ends in the middle of a record"));
        }
        self.next_offset += u64::from(self.block_size);
        if self.partial.is_none() {
            out.append(&mut self.staged);
            self.end_offset = self.next_offset;
            self.end_scn = self.expect_scn;
        }
        Ok(ScanStep::Unit)
    }
}

/// The result of scanning a whole log image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageScan {
    pub header: LogHeader,
    pub end: Option<LogEnd>,
    pub records: Vec<RedoRecord>,
    pub end_offset: u64,
    pub end_scn: Scn,
    /// Why the scan stopped before the end of the file (None: the closed header's end, or
    /// the end of the file, was reached).
    pub stopped_by: Option<UnitDefect>,
}

/// Scans a complete log image (a log file or an archived log, read into memory): the header,
/// then every record up to the end of redo. For a closed log, redo must reach the end the
/// closed header records; for an open one, the scan stops at the first unit that is not redo.
pub fn scan_image(image: &[u8]) -> Result<ImageScan, FormatError> {
    let block_size = peek_header_block_size(image)
        .ok_or_else(|| FormatError::new(0, "not a redoguard log (no valid header at offset 0)"))?;
    let block = block_size as usize;
    if image.len() < 2 * block {
        return Err(FormatError::new(0, "log image shorter than its two header blocks"));
    }
    let open = decode_header(&image[..block], 0)?;
    let HeaderBlock::Open(header) = open else {
        return Err(FormatError::new(0, "block 0 is not an open header"));
    };
    let end = match decode_header(&image[block..2 * block], u64::from(block_size)) {
        Ok(HeaderBlock::Closed(closed, end)) if closed == header => Some(end),
        _ => None,
    };
    let limit = end.map_or(header.file_size, |end| end.end_offset).min(image.len() as u64);
    let mut scanner = RedoScanner::new(&header);
    let mut records = Vec::new();
    let mut stopped_by = None;
    while scanner.next_offset() + u64::from(block_size) <= limit {
        let at = scanner.next_offset() as usize;
        if let ScanStep::End(defect) = scanner.push_unit(&image[at..at + block], &mut records)? {
            stopped_by = Some(defect);
            break;
        }
    }
    if let Some(end) = end {
        if scanner.end_offset() != end.end_offset || scanner.end_scn() != end.next_scn {
            return Err(FormatError::new(
                scanner.end_offset(),
                format!(
                    "closed log claims redo up to offset {} (next SCN {}), but it ends at {} (next SCN {})",
                    end.end_offset,
                    end.next_scn,
                    scanner.end_offset(),
                    scanner.end_scn()
                ),
            ));
        }
        stopped_by = None;
    }
    Ok(ImageScan {
        header,
        end,
        records,
        end_offset: scanner.end_offset(),
        end_scn: scanner.end_scn(),
        stopped_by,
    })
}

/// The check `scan_image` makes of a closed log, made as its bytes arrive in order (an
/// archived log received in pieces is checked while the rest is still on its way) and keeping
/// no records: the same verdict as `scan_image` on the whole image, plus that the log is
/// exactly `total` bytes long (sans-IO: the caller feeds the bytes).
#[derive(Debug)]
pub struct ImageCheck {
    header: LogHeader,
    end: LogEnd,
    /// Units are checked up to here: the closed header's end.
    limit: u64,
    scanner: RedoScanner,
    records: Vec<RedoRecord>,
}

impl ImageCheck {
    /// Bytes `begin` needs: the two header blocks of a log of that block size (`None`: the
    /// first 16 bytes are no header).
    pub fn head_len(first: &[u8]) -> Option<usize> {
        peek_header_block_size(first).map(|block| 2 * block as usize)
    }

    /// A check from a log's first `head_len` bytes. `Ok(None)`: the log is not closed (no
    /// closed header matching its open one).
    pub fn begin(head: &[u8]) -> Result<Option<ImageCheck>, FormatError> {
        let block_size = peek_header_block_size(head).ok_or_else(|| {
            FormatError::new(0, "not a redoguard log (no valid header at offset 0)")
        })?;
        let block = block_size as usize;
        if head.len() < 2 * block {
            return Err(FormatError::new(0, "log image shorter than its two header blocks"));
        }
        let HeaderBlock::Open(header) = decode_header(&head[..block], 0)? else {
            return Err(FormatError::new(0, "block 0 is not an open header"));
        };
        let end = match decode_header(&head[block..2 * block], u64::from(block_size)) {
            Ok(HeaderBlock::Closed(closed, end)) if closed == header => end,
            _ => return Ok(None),
        };
        Ok(Some(ImageCheck {
            header,
            end,
            limit: end.end_offset,
            scanner: RedoScanner::new(&header),
            records: Vec::new(),
        }))
    }

    pub fn header(&self) -> &LogHeader {
        &self.header
    }

    pub fn end(&self) -> &LogEnd {
        &self.end
    }

    /// Where the next bytes fed must begin.
    pub fn next_offset(&self) -> u64 {
        self.scanner.next_offset()
    }

    /// Whether nothing more needs feeding: every unit up to the closed header's end, or the
    /// redo ended before it (then `finish` says why).
    pub fn is_done(&self) -> bool {
        self.scanner.ended().is_some()
            || self.scanner.next_offset() + u64::from(self.header.block_size) > self.limit
    }

    /// Feeds `bytes` found at `next_offset()`: whole units (a shorter tail is not taken).
    /// Returns the bytes taken. An error is final (the log is not sound).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<usize, FormatError> {
        let block = self.header.block_size as usize;
        let mut taken = 0;
        for unit in bytes.chunks_exact(block) {
            if self.is_done() {
                break;
            }
            self.scanner.push_unit(unit, &mut self.records)?;
            self.records.clear();
            taken += block;
        }
        if self.scanner.ended().is_some() {
            self.verdict()?;
        }
        Ok(taken)
    }

    fn verdict(&self) -> Result<(), FormatError> {
        let (end, scanner) = (&self.end, &self.scanner);
        if scanner.end_offset() != end.end_offset || scanner.end_scn() != end.next_scn {
            return Err(FormatError::new(
                scanner.end_offset(),
                format!(
                    "closed log claims redo up to offset {} (next SCN {}), but it ends at {} (next SCN {})",
                    end.end_offset,
                    end.next_scn,
                    scanner.end_offset(),
                    scanner.end_scn()
                ),
            ));
        }
        Ok(())
    }

    /// The verdict, once `is_done`: the redo reaches the closed header's end.
    pub fn finish(self) -> Result<(LogHeader, LogEnd), FormatError> {
        if !self.is_done() {
            return Err(FormatError::new(self.next_offset(), "log checked only up to here"));
        }
        self.verdict()?;
        Ok((self.header, self.end))
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

#[cfg(test)]
mod tests;
