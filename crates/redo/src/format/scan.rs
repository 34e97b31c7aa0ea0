//! Reading written redo back: one unit's checks (`check_unit`), the record stream of a log
//! unit by unit (`RedoScanner`), and a whole log image scanned (`scan_image`) or checked as
//! its bytes arrive (`ImageCheck`). Sans-IO, like the rest of the format.

use super::{
    BLOCK_SIZE_MIN, FormatError, HeaderBlock, LogEnd, LogHeader, NO_RECORD, RECORD_HEADER_LEN,
    UNIT_HEADER_LEN, UNIT_MAGIC, block_crc, decode_header, first_unit_offset, get_u32, get_u64,
    max_record_len, peek_header_block_size, unit_capacity,
};
use crate::types::{LogSeq, RedoRecord, Scn};

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
