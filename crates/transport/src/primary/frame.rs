//! A log write as the message a standby gets: its kind on the wire, and without the zero tail
//! of its last unit for a standby that takes that.

use proto::{AckWanted, Write};
use redo::Scn;
use redo::ship::{LogWrite, WriteKind};

use super::TRIM_VERSION_MIN;

pub(super) fn wire_kind(kind: WriteKind) -> proto::WriteKind {
    match kind {
        WriteKind::Units => proto::WriteKind::Units,
        WriteKind::OpenHeader => proto::WriteKind::OpenHeader,
        WriteKind::ClosedHeader => proto::WriteKind::ClosedHeader,
    }
}

/// The message of a log write to a standby whose handshake said `peer_version`. A standby of
/// version 5 or later gets it without the zero padding of its last unit (`TrimmedWrite`): a
/// small commit's write is one 4 KiB unit mostly padding, which was most of the bytes copied,
/// checksummed and sent.
pub(super) fn frame_of(
    write: &LogWrite,
    write_id: u64,
    ack: AckWanted,
    durable: Scn,
    peer_version: u16,
) -> Write {
    let tail = zero_tail_for(&write.bytes, peer_version);
    Write {
        write_id,
        seq: write.seq.0,
        offset: write.offset,
        kind: wire_kind(write.kind),
        ack,
        primary_time_us: write.time_us,
        last_scn: write.last_scn.0,
        primary_durable_scn: durable.0.max(write.durable_scn.0),
        bytes: write.bytes[..write.bytes.len() - tail].to_vec(),
        zero_tail: tail as u32,
    }
}

/// `bytes` read back from the log files for a standby whose handshake said `peer_version`,
/// without their zero tail if it takes that: the bytes left and the tail's length.
pub(super) fn trimmed(mut bytes: Vec<u8>, peer_version: u16) -> (Vec<u8>, u32) {
    let tail = zero_tail_for(&bytes, peer_version);
    bytes.truncate(bytes.len() - tail);
    (bytes, tail as u32)
}

/// The zero tail `bytes` go without to a standby whose handshake said `peer_version`: none
/// before version 5.
pub(super) fn zero_tail_for(bytes: &[u8], peer_version: u16) -> usize {
    if peer_version >= TRIM_VERSION_MIN { proto::zero_tail(bytes) } else { 0 }
}
