//! A destination's archive connections: whole logs (gap resolution, and the logs a catching-up
//! standby lacks that this primary has already closed) shipped in pieces over
//! `max_connections` connections at once, while live redo keeps the control connection.
//!
//! Each connection has a sender thread that claims the next piece (at most `max_send` bytes)
//! of the oldest log not fully handed out, reads it from the online log or the archive and
//! sends it as an `ArchiveChunk`, and a reader thread that takes the standby's `ArchiveAck`s
//! (sent on whichever connection ended the log's check there). The standby writes each piece at
//! its offset, the connections in parallel, checks the log from its start as it arrives, and
//! archives it once every byte is in and the whole log passed (`RedoLog::receive_archive_chunk`).
//! A piece lost with its connection is never acknowledged, so any failure ends the session:
//! the destination reconnects after `reopen` and ships every unacknowledged log again (the
//! standby keeps what it has and takes repeats).
//!
//! Limits: at most `ARCHIVE_CONNECTIONS_MAX` connections (a standby admits 8 per peer; control
//! and SYNC hold two), at most `LOGS_IN_FLIGHT_MAX` logs handed out and not acknowledged (the
//! standby assembles at most 64).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use proto::{Channel, FrameCompressor, Message};
use redo::LogSeq;

use super::{Destination, Inner};
use crate::admission::ESTABLISHED_PER_PEER;
use crate::auto_compression::AutoCompression;
use crate::compression::Compression;
use crate::conn::{Conn, ConnError};

/// The oldest protocol version of a standby that takes archive connections and pieces of a
/// log in any order.
pub(super) const ARCHIVE_VERSION_MIN: u16 = 4;
/// Most archive connections of one destination: what a standby admits of one peer, less the
/// control and SYNC connections.
pub(crate) const ARCHIVE_CONNECTIONS_MAX: usize = ESTABLISHED_PER_PEER - 2;
/// Logs handed out and not yet acknowledged.
const LOGS_IN_FLIGHT_MAX: usize = 8;
/// The smallest piece cut to share a log among connections (`max_send` is the largest).
const PIECE_MIN: u64 = 256 << 10;
/// Most bytes an archive connection leaves unsent in its socket before it claims its next
/// piece (about 35 ms of a gigabit link): pieces go to the connections whose windows drain
/// them, and a slow one holds a piece, not a send buffer of 3 × BDP, when the log's end nears.
const UNSENT_LIMIT: u32 = 4 << 20;
/// Handshakes a primary runs at once with one standby: a standby's listener lets one source
/// address hold `handshakes_per_address` (by default 4) and ends the oldest beyond that.
pub(super) const HANDSHAKES_AT_ONCE: usize = 4;

/// Archive connections a destination asks for: `max_connections`, at most
/// `ARCHIVE_CONNECTIONS_MAX`.
pub(super) fn archive_connections_wanted(config: &crate::config::DestinationConfig) -> usize {
    (config.max_connections as usize).min(ARCHIVE_CONNECTIONS_MAX)
}

/// One log being shipped.
#[derive(Debug)]
struct Job {
    seq: LogSeq,
    total: u64,
    /// The next byte not yet handed to a connection.
    next: u64,
}

#[derive(Debug, Default)]
struct WorkState {
    jobs: VecDeque<Job>,
    /// Logs the standby acknowledged in this session.
    done: BTreeSet<LogSeq>,
    failed: Option<String>,
    stop: bool,
    /// Connections sharing the work (pieces are cut so that each gets several of a log).
    connections: u64,
}

#[derive(Debug, Default)]
struct Work {
    state: Mutex<WorkState>,
    changed: Condvar,
}

/// A piece claimed by a connection.
struct Piece {
    seq: LogSeq,
    offset: u64,
    len: u64,
    total: u64,
}

impl Work {
    /// The next piece to send, waiting up to `wait` for one; `None` when stopping or nothing
    /// came.
    fn claim(&self, max_send: u64, wait: Duration) -> Option<Piece> {
        let mut state = self.state.lock();
        loop {
            if state.stop || state.failed.is_some() {
                return None;
            }
            let state_connections = state.connections;
            if let Some(job) =
                state.jobs.iter_mut().take(LOGS_IN_FLIGHT_MAX).find(|job| job.next < job.total)
            {
                // Pieces of at most `max_send`, and small enough that every connection gets
                // a few of a log (a log cut in fewer pieces than connections leaves some idle).
                let share = job.total.div_ceil(4 * state_connections.max(1)).max(PIECE_MIN);
                let len = (job.total - job.next).min(max_send).min(share);
                let piece = Piece { seq: job.seq, offset: job.next, len, total: job.total };
                job.next += len;
                return Some(piece);
            }
            if self.changed.wait_for(&mut state, wait).timed_out() {
                return None;
            }
        }
    }

    fn fail(&self, reason: String) {
        let mut state = self.state.lock();
        state.failed.get_or_insert(reason);
        self.changed.notify_all();
    }
}

/// The archive connections of one destination for one session.
pub(super) struct ArchiveShipper {
    work: Arc<Work>,
    /// Handles on the sockets, to end them from the control thread.
    sockets: Vec<Conn>,
    /// Connections that could not be opened (they are not tried again in this session).
    refused: usize,
    threads: Vec<JoinHandle<()>>,
}

impl Inner {
    /// Opens `count` archive connections (at most what `max_connections` and
    /// `ARCHIVE_CONNECTIONS_MAX` allow); `None` if none could be opened.
    pub(super) fn open_archive_connections(
        self: &Arc<Inner>,
        destination: &Arc<Destination>,
        count: usize,
    ) -> Option<ArchiveShipper> {
        let work = Arc::new(Work::default());
        let mut shipper =
            ArchiveShipper { work, sockets: Vec::new(), refused: 0, threads: Vec::new() };
        self.add_archive_connections(destination, &mut shipper, count);
        (!shipper.sockets.is_empty()).then_some(shipper)
    }

    /// Opens more archive connections for `shipper`, up to `count` more and at most what the
    /// destination wants in all, each with the destination's send buffer (`auto`: from its
    /// own handshake's round trip) and an unsent limit of `UNSENT_LIMIT`. They are opened
    /// `HANDSHAKES_AT_ONCE` at a time, not one after the other: each costs two round trips
    /// (TCP, then hello and welcome), which on a long link is most of a small gap's time. A
    /// connection the standby refuses (it is busy: its limits are full) is done without.
    pub(super) fn add_archive_connections(
        self: &Arc<Inner>,
        destination: &Arc<Destination>,
        shipper: &mut ArchiveShipper,
        count: usize,
    ) {
        let config = &destination.config();
        let count = count.min(archive_connections_wanted(config).saturating_sub(shipper.tried()));
        if count == 0 {
            return;
        }
        let first = shipper.sockets.len() + shipper.refused;
        let mut opened = Vec::new();
        for wave in (0..count).collect::<Vec<_>>().chunks(HANDSHAKES_AT_ONCE) {
            opened.extend(std::thread::scope(|scope| {
                let handles: Vec<_> = wave
                    .iter()
                    .map(|_| scope.spawn(|| self.connect(Channel::Archive, destination, true)))
                    .collect();
                handles.into_iter().map(|handle| handle.join()).collect::<Vec<_>>()
            }));
        }
        let work = shipper.work.clone();
        for (index, opened) in opened.into_iter().enumerate() {
            let index = first + index;
            let (conn, welcome) = match opened {
                Ok(Ok((conn, welcome, _, _))) => (conn, welcome),
                Ok(Err(reason)) => {
                    shipper.refused += 1;
                    tracing::warn!(destination = %config.name, connection = index, reason, "archive connection not opened; shipping on fewer");
                    continue;
                }
                Err(_) => {
                    shipper.refused += 1;
                    continue;
                }
            };
            if let Err(error) = conn.set_unsent_limit(UNSENT_LIMIT) {
                tracing::warn!(destination = %config.name, connection = index, %error, "cannot limit an archive connection's unsent bytes; it may queue more than its share");
            }
            let compressor = config
                .compression
                .codec()
                .filter(|_| welcome.version >= super::COMPRESSION_VERSION_MIN)
                .and_then(|codec| FrameCompressor::new(codec, config.compression_level).ok());
            let (Ok(incoming), Ok(handle)) = (conn.try_clone(), conn.try_clone()) else {
                continue;
            };
            shipper.sockets.push(handle);
            // `auto`: each connection decides for itself, from how long its own sends block.
            // Its state is in status from before its thread starts (status counts the
            // connection once this loop is done), and leaves it when the thread ends.
            let auto = (config.compression == Compression::Auto && compressor.is_some())
                .then(|| AutoCompression::new(Instant::now()));
            let listed = auto.as_ref().map(|auto| {
                destination.archive_auto.lock().insert(index, auto.describe());
                Listed(destination.clone(), index)
            });
            let spawned = {
                let inner = self.clone();
                let destination = destination.clone();
                let work = work.clone();
                std::thread::Builder::new()
                    .name(format!("redo-arch-{}-{index}", config.name))
                    .spawn(move || {
                        let _listed = listed;
                        inner.archive_sender(&destination, conn, compressor, auto, &work, index)
                    })
            };
            let received = {
                let inner = self.clone();
                let destination = destination.clone();
                let work = work.clone();
                std::thread::Builder::new()
                    .name(format!("redo-arack-{}-{index}", config.name))
                    .spawn(move || inner.archive_acks(&destination, incoming, &work))
            };
            match (spawned, received) {
                (Ok(sender), Ok(reader)) => shipper.threads.extend([sender, reader]),
                (sender, reader) => {
                    work.fail("cannot start an archive connection's threads".into());
                    shipper.threads.extend(sender.into_iter().chain(reader));
                    break;
                }
            }
        }
        work.state.lock().connections = shipper.sockets.len() as u64;
        work.changed.notify_all();
        if !shipper.sockets.is_empty() {
            destination.archive_connections.store(shipper.sockets.len() as u32, Ordering::Relaxed);
            tracing::info!(destination = %config.name, connections = shipper.sockets.len(), "archive connections open: whole logs ship in parallel");
        }
    }

    /// An archive connection's sender: pieces, until the session ends.
    fn archive_sender(
        &self,
        destination: &Destination,
        mut conn: Conn,
        mut compressor: Option<FrameCompressor>,
        mut auto: Option<AutoCompression>,
        work: &Work,
        index: usize,
    ) {
        let config = &destination.config();
        while !self.shutdown.load(Ordering::Acquire) {
            let Some(piece) = work.claim(config.max_send, Duration::from_millis(200)) else {
                let state = work.state.lock();
                if state.stop || state.failed.is_some() {
                    return;
                }
                continue;
            };
            let bytes = match self.redo.read_log_bytes(piece.seq, piece.offset, piece.len as usize)
            {
                Ok(bytes) => bytes,
                Err(error) => {
                    work.fail(format!("reading log {} to ship: {error}", piece.seq));
                    destination.notify();
                    return;
                }
            };
            let message = Message::ArchiveChunk(proto::ArchiveChunk {
                seq: piece.seq.0,
                offset: piece.offset,
                total_len: piece.total,
                bytes,
            });
            let sent = match (compressor.as_mut(), auto.as_mut()) {
                (Some(compressor), Some(auto)) => {
                    send_auto(&mut conn, &message, compressor, auto, destination, index)
                }
                (Some(compressor), None) if config.compression != Compression::None => conn
                    .send_compressed(
                        &message,
                        compressor,
                        &destination.compression,
                        config.net_timeout,
                    )
                    .map(|_| ()),
                _ => conn.send(&message, config.net_timeout),
            };
            if let Err(error) = sent {
                work.fail(format!("sending log {} on an archive connection: {error}", piece.seq));
                destination.notify();
                return;
            }
            destination.state.lock().bytes_sent += piece.len;
        }
    }

    /// An archive connection's reader: the standby's `ArchiveAck`s (or why it ended it).
    fn archive_acks(&self, destination: &Destination, mut conn: Conn, work: &Work) {
        loop {
            if self.shutdown.load(Ordering::Acquire) || work.state.lock().stop {
                return;
            }
            let failure = match conn.recv(Some(Duration::from_millis(500))) {
                Ok(Message::ArchiveAck(ack)) => {
                    if ack.complete {
                        let seq = LogSeq(ack.seq);
                        // Out of the destination's gaps first, then out of the work: the
                        // control thread never sees the log in neither and ships it again.
                        destination.state.lock().gaps.retain(|gap| *gap != seq);
                        let mut state = work.state.lock();
                        state.jobs.retain(|job| job.seq != seq);
                        state.done.insert(seq);
                        work.changed.notify_all();
                        tracing::info!(destination = %destination.name, %seq, "shipped a log over the archive connections");
                    }
                    continue;
                }
                Ok(Message::Error(error)) => {
                    let reason =
                        format!("the standby reported on an archive connection: {}", error.message);
                    self.note_refusal(&error, &reason);
                    reason
                }
                Ok(other) => format!(
                    "unexpected {:?} from the standby on an archive connection",
                    other.kind()
                ),
                Err(ConnError::TimedOut(_)) => continue,
                Err(error) => format!("archive connection: {error}"),
            };
            if !work.state.lock().stop {
                work.fail(failure);
                destination.notify();
            }
            return;
        }
    }
}

/// An archive connection's `auto` state listed in status; dropping it (when the connection's
/// sender ends, however it ends, or with its closure if the thread could not start) takes it
/// out.
struct Listed(Arc<Destination>, usize);

impl Drop for Listed {
    fn drop(&mut self) {
        self.0.archive_auto.lock().remove(&self.1);
    }
}

/// Sends a piece under `compression = "auto"`: compressed only while `auto` says the link is
/// the bottleneck (its sends block), not the CPU; each switch is logged with its reason.
fn send_auto(
    conn: &mut Conn,
    message: &Message,
    compressor: &mut FrameCompressor,
    auto: &mut AutoCompression,
    destination: &Destination,
    connection: usize,
) -> Result<(), ConnError> {
    let timeout = destination.config().net_timeout;
    let started = Instant::now();
    let (uncompressed, wire, codec_ns) = if auto.compressing() {
        let (encoded, codec_ns) =
            conn.send_compressed(message, compressor, &destination.compression, timeout)?;
        (encoded.payload_len as u64, encoded.wire_len as u64, codec_ns)
    } else {
        conn.send(message, timeout)?;
        let len = match message {
            Message::ArchiveChunk(chunk) => chunk.bytes.len() as u64,
            _ => 0,
        };
        (len, len, 0)
    };
    let codec_cpu = Duration::from_nanos(codec_ns);
    auto.record(started.elapsed().saturating_sub(codec_cpu), codec_cpu, uncompressed, wire);
    if let Some(state) = auto.decide(Instant::now()) {
        tracing::info!(destination = %destination.name, connection, state, "auto compression switched on an archive connection");
        destination.archive_auto.lock().insert(connection, state);
    }
    Ok(())
}

impl ArchiveShipper {
    /// Hands log `seq` (closed on this primary, `total` bytes) to the connections, unless it
    /// is already theirs or done.
    pub(super) fn enqueue(&self, seq: LogSeq, total: u64) {
        let mut state = self.work.state.lock();
        if state.done.contains(&seq) || state.jobs.iter().any(|job| job.seq == seq) {
            return;
        }
        let at = state.jobs.partition_point(|job| job.seq < seq);
        state.jobs.insert(at, Job { seq, total, next: 0 });
        self.work.changed.notify_all();
    }

    /// Connections open, and those that could not be opened.
    pub(super) fn tried(&self) -> usize {
        self.sockets.len() + self.refused
    }

    /// Why a connection failed, if one did.
    pub(super) fn failed(&self) -> Option<String> {
        self.work.state.lock().failed.clone()
    }
}

impl Drop for ArchiveShipper {
    fn drop(&mut self) {
        {
            let mut state = self.work.state.lock();
            state.stop = true;
            self.work.changed.notify_all();
        }
        for socket in &self.sockets {
            socket.shutdown();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_claimed_in_order_from_the_oldest_logs_in_flight() {
        let work = Work::default();
        {
            let mut state = work.state.lock();
            for seq in 1..=10 {
                state.jobs.push_back(Job { seq: LogSeq(seq), total: 250, next: 0 });
            }
        }
        let mut claimed = Vec::new();
        while let Some(piece) = work.claim(100, Duration::from_millis(1)) {
            claimed.push((piece.seq.0, piece.offset, piece.len));
        }
        // Three pieces of each of the first LOGS_IN_FLIGHT_MAX logs, then nothing until one
        // is acknowledged.
        assert_eq!(claimed.len(), 3 * LOGS_IN_FLIGHT_MAX);
        assert_eq!(&claimed[..3], &[(1, 0, 100), (1, 100, 100), (1, 200, 50)]);
        work.state.lock().jobs.pop_front();
        assert_eq!(
            work.claim(100, Duration::from_millis(1)).map(|piece| piece.seq),
            Some(LogSeq(9))
        );
        work.fail("gone".into());
        assert!(work.claim(100, Duration::from_millis(1)).is_none(), "a failure stops every claim");
    }

    #[test]
    fn a_destination_never_holds_more_connections_than_a_standby_admits_of_a_peer() {
        // Control + SYNC + archive connections.
        assert_eq!(2 + ARCHIVE_CONNECTIONS_MAX, ESTABLISHED_PER_PEER);
        assert!(crate::config::MAX_CONNECTIONS.end() >= &(ARCHIVE_CONNECTIONS_MAX as u32));
    }
}
