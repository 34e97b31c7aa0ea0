//! Units laid out as pieces for a vectored write (`UnitGather`): the same bytes as
//! `UnitWriter` (docs/redo-format.md), large payloads borrowed where they already are.

use super::{
    NO_RECORD, RECORD_HEADER_LEN, UNIT_HEADER_LEN, UNIT_MAGIC, block_size_is_valid, put_u32,
    put_u64,
};
use crate::types::{LogSeq, Scn};

/// Payload pieces shorter than this are copied into the gather's own bytes rather than
/// borrowed: a piece of its own costs the kernel an iovec (and `IOV_MAX` bounds a call), which
/// is worth it only when it saves a copy of some size.
const GATHER_BORROW_MIN: usize = 512;

/// Lays records out as units exactly as `UnitWriter` does (same bytes), without copying large
/// payloads: the result is a list of pieces, unit and record headers, small payloads and zero
/// padding in bytes of its own, and every payload piece of `GATHER_BORROW_MIN` bytes or more
/// borrowed from where the record already is (the log buffer). Each unit's CRC is computed
/// over its pieces. The log writer hands the pieces to a vectored write (`pwritev`), so a
/// large record is copied once, by the kernel, instead of into a write buffer first.
pub struct UnitGather<'a> {
    block_size: usize,
    seq: LogSeq,
    start_offset: u64,
    own: Vec<u8>,
    pieces: Vec<Piece<'a>>,
    units: usize,
    used: usize,
    first_record: u32,
    /// Index in `pieces` of the current unit's first piece, which begins with its header.
    unit_first_piece: usize,
}

#[derive(Debug, Clone, Copy)]
enum Piece<'a> {
    /// `own[start..end]`.
    Own {
        start: usize,
        end: usize,
    },
    Borrowed(&'a [u8]),
}

/// The units `UnitGather` laid out: their bytes are the concatenation of `pieces()`.
pub struct Gathered<'a> {
    own: Vec<u8>,
    pieces: Vec<Piece<'a>>,
    len: usize,
}

impl<'a> UnitGather<'a> {
    /// Units will be written for log `seq` starting at file offset `start_offset`.
    pub fn new(block_size: u32, seq: LogSeq, start_offset: u64) -> UnitGather<'a> {
        debug_assert!(block_size_is_valid(block_size));
        debug_assert_eq!(start_offset % u64::from(block_size), 0);
        let mut gather = UnitGather {
            block_size: block_size as usize,
            seq,
            start_offset,
            own: Vec::new(),
            pieces: Vec::new(),
            units: 0,
            used: 0,
            first_record: NO_RECORD,
            unit_first_piece: 0,
        };
        gather.begin_unit();
        gather
    }

    fn capacity(&self) -> usize {
        self.block_size - UNIT_HEADER_LEN
    }

    /// Appends one record to the stream (as `UnitWriter::put`).
    pub fn put(&mut self, scn: Scn, payload: &'a [u8]) {
        if self.used == self.capacity() {
            self.seal();
            self.begin_unit();
        }
        if self.first_record == NO_RECORD {
            self.first_record = self.used as u32;
        }
        let mut header = [0u8; RECORD_HEADER_LEN];
        put_u32(&mut header, 0, u32::try_from(payload.len()).expect("record length fits u32"));
        put_u64(&mut header, 8, scn.0);
        self.extend_own(&header);
        self.extend_borrowing(payload);
    }

    /// Appends `bytes` to the stream as copies of their own.
    fn extend_own(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = self.room().min(bytes.len());
            self.push_own(&bytes[..take]);
            self.used += take;
            bytes = &bytes[take..];
        }
    }

    /// Appends `bytes` to the stream, borrowing every piece large enough.
    fn extend_borrowing(&mut self, mut bytes: &'a [u8]) {
        while !bytes.is_empty() {
            let take = self.room().min(bytes.len());
            if take >= GATHER_BORROW_MIN {
                self.pieces.push(Piece::Borrowed(&bytes[..take]));
            } else {
                self.push_own(&bytes[..take]);
            }
            self.used += take;
            bytes = &bytes[take..];
        }
    }

    /// The room left in the current unit, after starting a new one if it is full.
    fn room(&mut self) -> usize {
        if self.used == self.capacity() {
            self.seal();
            self.begin_unit();
        }
        self.capacity() - self.used
    }

    /// Appends to the gather's own bytes, extending the last piece if it ends there.
    fn push_own(&mut self, bytes: &[u8]) {
        let start = self.own.len();
        self.own.extend_from_slice(bytes);
        let end = self.own.len();
        match self.pieces.last_mut() {
            Some(Piece::Own { end: last_end, .. }) if *last_end == start => *last_end = end,
            _ => self.pieces.push(Piece::Own { start, end }),
        }
    }

    /// Starts a unit: a header to be filled in by `seal`, in a piece of its own.
    fn begin_unit(&mut self) {
        self.unit_first_piece = self.pieces.len();
        let start = self.own.len();
        self.own.resize(start + UNIT_HEADER_LEN, 0);
        self.pieces.push(Piece::Own { start, end: start + UNIT_HEADER_LEN });
    }

    fn seal(&mut self) {
        let padding = self.capacity() - self.used;
        if padding > 0 {
            let start = self.own.len();
            self.own.resize(start + padding, 0);
            let end = self.own.len();
            match self.pieces.last_mut() {
                Some(Piece::Own { end: last_end, .. }) if *last_end == start => *last_end = end,
                _ => self.pieces.push(Piece::Own { start, end }),
            }
        }
        let Piece::Own { start: at, end: first_end } = self.pieces[self.unit_first_piece] else {
            unreachable!("a unit begins with its header, in the gather's own bytes")
        };
        let offset = self.start_offset + (self.units * self.block_size) as u64;
        {
            let unit_header = &mut self.own[at..at + UNIT_HEADER_LEN];
            put_u32(unit_header, 0, UNIT_MAGIC);
            put_u64(unit_header, 8, self.seq.0);
            put_u64(unit_header, 16, offset);
            put_u32(unit_header, 24, self.used as u32);
            put_u32(unit_header, 28, self.first_record);
        }
        // The CRC covers [0, 4) and [8, block_size), as `block_crc`.
        let mut crc = crc32c::crc32c(&self.own[at..at + 4]);
        crc = crc32c::crc32c_append(crc, &self.own[at + 8..first_end]);
        for piece in &self.pieces[self.unit_first_piece + 1..] {
            crc = crc32c::crc32c_append(crc, piece_bytes(&self.own, piece));
        }
        put_u32(&mut self.own[at..at + UNIT_HEADER_LEN], 4, crc);
        self.units += 1;
        self.used = 0;
        self.first_record = NO_RECORD;
    }

    /// Seals the last unit (zero padding after the stream).
    pub fn finish(mut self) -> Gathered<'a> {
        if self.used > 0 {
            self.seal();
        } else {
            // Nothing was put: drop the unit begun for it.
            self.pieces.truncate(self.unit_first_piece);
            self.own.truncate(self.own.len() - UNIT_HEADER_LEN);
        }
        Gathered { own: self.own, pieces: self.pieces, len: self.units * self.block_size }
    }
}

fn piece_bytes<'p>(own: &'p [u8], piece: &Piece<'p>) -> &'p [u8] {
    match *piece {
        Piece::Own { start, end } => &own[start..end],
        Piece::Borrowed(bytes) => bytes,
    }
}

impl Gathered<'_> {
    /// The bytes of the units, in order.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.pieces.iter().map(|piece| piece_bytes(&self.own, piece))
    }

    /// How many pieces there are.
    pub fn piece_count(&self) -> usize {
        self.pieces.len()
    }

    /// The length of the units (a whole number of blocks).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The units as one contiguous copy.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.len);
        for piece in self.pieces() {
            bytes.extend_from_slice(piece);
        }
        bytes
    }
}
