//! The hook redo transport plugs into: every write the log writer makes to the online log
//! (redo units and header blocks) is offered to a `Shipper` before it is written locally,
//! and the writer waits for what the shipper returns after its local write is durable.
//!
//! This is how SYNC transport overlaps the local and the remote write: the shipper sends the
//! bytes to SYNC destinations, the log writer writes and syncs locally, then waits for their
//! acknowledgements (the protection mode decides for how long). ASYNC destinations only queue
//! the write; the shipper returns nothing to wait for on their account.
//!
//! *Architecture Invariant*: the redo engine knows nothing of sockets or destinations; it
//! hands out the exact bytes at their exact place, and durability is published only after the
//! shipper's wait returned.

use std::sync::Arc;

use crate::error::Result;
use crate::types::{LogSeq, RedoAddr, Scn};

/// What the bytes of a log write are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Redo units.
    Units,
    /// The open header block (offset 0): a new log begins.
    OpenHeader,
    /// The closed header block (offset `block_size`): the log ends.
    ClosedHeader,
}

/// One write of the log writer, as it is made to every member of the current group.
#[derive(Debug, Clone)]
pub struct LogWrite {
    pub seq: LogSeq,
    pub offset: u64,
    pub kind: WriteKind,
    pub bytes: Arc<[u8]>,
    /// The last SCN the bytes hold (for headers: the last SCN before the log).
    pub last_scn: Scn,
    /// When the log writer made the write (microseconds since the Unix epoch).
    pub time_us: u64,
    /// Every SCN at or below this was durable when the write was made.
    pub durable_scn: Scn,
}

impl LogWrite {
    /// Where the write ends.
    pub fn end(&self) -> RedoAddr {
        RedoAddr { seq: self.seq, offset: self.offset + self.bytes.len() as u64 }
    }
}

/// What the log writer waits for after its local write: remote acknowledgements.
pub trait ShipWait: Send {
    /// Blocks until the write may be declared durable (per protection mode), or fails.
    fn wait(self: Box<Self>) -> Result<()>;

    /// Settles the write now if that takes no waiting for a standby: `Ok` with what `wait`
    /// would return, when what it waits for has already arrived (it may read what has arrived,
    /// never wait for more); otherwise `Err` with the wait given back untouched, to be waited
    /// for elsewhere. A leader that must not block (a tokio task) settles the write itself so,
    /// instead of handing the wait to another thread: the commit skips two wake-ups.
    fn try_wait(self: Box<Self>) -> Tried;
}

/// What `ShipWait::try_wait` gives: the wait's outcome, or the wait itself, not settled.
pub type Tried = std::result::Result<Result<()>, Box<dyn ShipWait>>;

/// Redo transport, as the log writer sees it.
pub trait Shipper: Send + Sync {
    /// Called with every log write before it is made locally. Must not block for long: it
    /// starts sending and returns what to wait for.
    fn ship(&self, write: &Arc<LogWrite>) -> Option<Box<dyn ShipWait>>;

    /// Whether shipping a write of `bytes` could block (a SYNC connection whose socket has no
    /// room for it): a tokio task then leaves the write to a thread rather than hold its
    /// runtime worker until the standby reads.
    fn may_block(&self, _bytes: usize) -> bool {
        false
    }
}

/// The next piece of redo to ship to a standby that is behind, read from the online logs
/// and the archive, in the order the log writer wrote it: a log's open header, its units,
/// its closed header, then the next log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShipCursor {
    /// The next byte the standby needs.
    pub next: RedoAddr,
}

/// What `ShipCursor::next_shipment` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shipment {
    Write {
        seq: LogSeq,
        offset: u64,
        kind: WriteKind,
        bytes: Vec<u8>,
    },
    /// Everything durable has been shipped.
    CaughtUp,
}

impl ShipCursor {
    pub fn new(next: RedoAddr) -> ShipCursor {
        ShipCursor { next }
    }

    /// Reads the next piece (units at most `max_bytes`, rounded down to whole units).
    pub fn next_shipment(&mut self, log: &crate::RedoLog, max_bytes: usize) -> Result<Shipment> {
        let block = u64::from(log.config().block_size);
        let first_unit = crate::format::first_unit_offset(log.config().block_size);
        // The writer's position is read before the log is looked up, once: at a switch the
        // next log is in the group table before the position moves into it, and a position
        // read after the lookup could already be in the log the lookup did not yet see
        // written ("not available" for a log that is only being opened).
        let written = log.written_addr();
        let Some(extent) = log.log_extent(self.next.seq) else {
            if self.next.seq > written.seq {
                return Ok(Shipment::CaughtUp);
            }
            return Err(crate::RedoError::LogNotAvailable { seq: self.next.seq });
        };
        let seq = self.next.seq;
        if self.next.offset < first_unit {
            let bytes = log.read_log_bytes(seq, 0, block as usize)?;
            self.next.offset = first_unit;
            return Ok(Shipment::Write { seq, offset: 0, kind: WriteKind::OpenHeader, bytes });
        }
        if self.next.offset < extent.readable_end {
            let max = (max_bytes as u64 / block).max(1) * block;
            let len = (extent.readable_end - self.next.offset).min(max);
            let offset = self.next.offset;
            let bytes = log.read_log_bytes(seq, offset, len as usize)?;
            self.next.offset += len;
            return Ok(Shipment::Write { seq, offset, kind: WriteKind::Units, bytes });
        }
        if extent.end.is_some() {
            // (Also when the standby holds more of this log than the primary ended it with:
            // the closed header tells it where the log ends.)
            let bytes = log.read_log_bytes(seq, block, block as usize)?;
            self.next = RedoAddr { seq: seq.next(), offset: 0 };
            return Ok(Shipment::Write {
                seq,
                offset: block,
                kind: WriteKind::ClosedHeader,
                bytes,
            });
        }
        Ok(Shipment::CaughtUp)
    }
}
