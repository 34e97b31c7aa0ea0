//! A consistent copy of a primary's data files for a new standby (as `pg_basebackup`, or
//! Data Guard's duplicate from active database): the standby asks with `CopyRequest`; the
//! primary answers `CopyBegin` (the copy's checkpoint SCN and the first log the standby will
//! need), the key-value pairs of one snapshot in `CopyChunk`s, and `CopyEnd`.

use crate::error::ProtoError;
use crate::frame::{Reader, Writer};
use crate::roles::{self, IncarnationRecord};

/// The most entries one `CopyChunk` may carry: 48 MiB of them decoded (two vectors each). A
/// sender's read of 1 MiB of pairs holds far fewer (keys are distinct: at most about 370 000
/// of them fit in 1 MiB, most three bytes long); it still sends whatever it reads in chunks of
/// at most this many.
pub const COPY_CHUNK_ENTRIES_MAX: usize = 1 << 20;

/// The first frame of a connection that asks a primary for a copy of its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyRequest {
    /// The new standby's member name.
    pub member: String,
    pub time_us: u64,
}

/// What the copy is.
// Format: { database_id: u64 | incarnation: u32 | checkpoint_scn: u64 | first_seq: u64
// | keys: u64 | bytes: u64 | block_size: u32 | log_file_size: u64 | member: text | history }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyBegin {
    pub database_id: u64,
    pub incarnation: u32,
    /// The data is the database at this SCN: redo after it brings it forward.
    pub checkpoint_scn: u64,
    /// The log holding `checkpoint_scn + 1`: the first log the standby needs.
    pub first_seq: u64,
    /// What is coming (from the snapshot's own counts), for progress.
    pub keys: u64,
    pub bytes: u64,
    pub block_size: u32,
    pub log_file_size: u64,
    /// The primary's member name.
    pub member: String,
    pub history: Vec<IncarnationRecord>,
}

/// Key-value pairs of the snapshot, in key order.
// Format: { count: u32 | (key_len: u32 | key | value_len: u32 | value) * count }
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyChunk {
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The end of a copy: what was sent, for the receiver to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyEnd {
    pub keys: u64,
    /// Bytes of keys and values.
    pub bytes: u64,
}

impl CopyRequest {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.text(&self.member);
        w.u64(self.time_us);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<CopyRequest, ProtoError> {
        Ok(CopyRequest { member: r.text()?, time_us: r.u64()? })
    }
}

impl CopyBegin {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.u64(self.database_id);
        w.u32(self.incarnation);
        w.u64(self.checkpoint_scn);
        w.u64(self.first_seq);
        w.u64(self.keys);
        w.u64(self.bytes);
        w.u32(self.block_size);
        w.u64(self.log_file_size);
        w.text(&self.member);
        roles::encode_history(&self.history, w);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<CopyBegin, ProtoError> {
        Ok(CopyBegin {
            database_id: r.u64()?,
            incarnation: r.u32()?,
            checkpoint_scn: r.u64()?,
            first_seq: r.u64()?,
            keys: r.u64()?,
            bytes: r.u64()?,
            block_size: r.u32()?,
            log_file_size: r.u64()?,
            member: r.text()?,
            history: roles::decode_history(r)?,
        })
    }
}

impl CopyChunk {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.u32(self.entries.len() as u32);
        for (key, value) in &self.entries {
            w.u32(key.len() as u32);
            w.bytes(key);
            w.u32(value.len() as u32);
            w.bytes(value);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<CopyChunk, ProtoError> {
        let count = r.u32()? as usize;
        // Decoded, an entry takes 48 bytes (two vectors) however short it was on the wire (8
        // bytes for two empty ones): the count is bounded so that a chunk's entries take at
        // most 48 MiB whatever the frame's size.
        if count > COPY_CHUNK_ENTRIES_MAX {
            return Err(r.bad(format!(
                "{count} entries in one copy chunk, more than {COPY_CHUNK_ENTRIES_MAX}"
            )));
        }
        // Every entry takes at least its two lengths: a count the payload cannot hold is a
        // lie, refused before anything is allocated for it.
        if count > r.remaining() / 8 {
            return Err(r.bad(format!("{count} entries cannot fit in {} bytes", r.remaining())));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let key_len = r.u32()? as usize;
            let key = r.take(key_len)?.to_vec();
            let value_len = r.u32()? as usize;
            let value = r.take(value_len)?.to_vec();
            entries.push((key, value));
        }
        Ok(CopyChunk { entries })
    }
}

impl CopyEnd {
    pub(crate) fn encode(&self, w: &mut Writer<'_>) {
        w.u64(self.keys);
        w.u64(self.bytes);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<CopyEnd, ProtoError> {
        Ok(CopyEnd { keys: r.u64()?, bytes: r.u64()? })
    }
}
