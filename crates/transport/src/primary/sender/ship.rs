//! Shipping redo on the control connection: the next piece from the queue or the log files,
//! compressed or not, and whole logs the standby lacks (gap resolution), sent here or handed
//! to the archive connections.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proto::{AckWanted, Message, Write};
use redo::ship::{LogWrite, ShipCursor, Shipment};
use redo::types::now_unix_us;
use redo::{LogSeq, RedoAddr};

use super::Parallel;
use crate::auto_compression::AutoCompression;
use crate::compression::{Compression, CompressionScope};
use crate::conn::{Conn, ConnError};
use crate::primary::{
    Destination, Inner, UNACKED_MAX, after, archive, continues, frame_of, trimmed, wire_kind,
};

impl Inner {
    /// Sends the next piece the standby lacks: from the queue if it starts where the standby
    /// is, else from the files. Returns whether anything was sent.
    pub(super) fn ship_next(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        next: &mut RedoAddr,
        max_send: usize,
    ) -> Result<bool, String> {
        let next_key = (next.seq.0, next.offset);
        let from_queue = {
            let mut queue = destination.queue.lock();
            if queue.overflowed {
                queue.writes.clear();
                queue.bytes = 0;
                queue.overflowed = false;
            }
            let mut found = Vec::new();
            while let Some(front) = queue.writes.front() {
                let end = after(front);
                if (end.seq.0, end.offset) <= next_key {
                    // Already shipped (from the files).
                    let dropped = queue.writes.pop_front().expect("front");
                    queue.bytes -= dropped.bytes.len();
                    continue;
                }
                if continues(front, *next) {
                    let write = queue.writes.pop_front().expect("front");
                    queue.bytes -= write.bytes.len();
                    // In the sender's hands until recorded as sent (`transport_lag_us`).
                    destination.in_hand_us.store(write.time_us.max(1), Ordering::Release);
                    found.push(write);
                }
                break;
            }
            // The writes queued behind it that follow on go in the same send (up to
            // `max_send` bytes): one system call, and one status from the standby, for all.
            if let Some(first) = found.first() {
                let mut end = after(first);
                let mut bytes = first.bytes.len();
                while let Some(front) = queue.writes.front() {
                    if !continues(front, end) || bytes + front.bytes.len() > max_send {
                        break;
                    }
                    let write = queue.writes.pop_front().expect("front");
                    queue.bytes -= write.bytes.len();
                    bytes += write.bytes.len();
                    end = after(&write);
                    found.push(write);
                }
            }
            found
        };
        if !from_queue.is_empty() {
            self.send_queued(destination, conn, &from_queue)?;
            // Recorded as sent: out of the sender's hands.
            destination.in_hand_us.store(0, Ordering::Release);
            *next = after(from_queue.last().expect("not empty"));
            return Ok(true);
        }
        let mut cursor = ShipCursor::new(*next);
        match cursor
            .next_shipment(&self.redo, max_send)
            .map_err(|error| format!("reading redo to ship: {error}"))?
        {
            Shipment::CaughtUp => Ok(false),
            Shipment::Write { seq, offset, kind, bytes } => {
                let time_us = self
                    .redo
                    .log_extent(seq)
                    .map_or_else(now_unix_us, |extent| extent.header.first_time_us);
                let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
                let (bytes, zero_tail) = trimmed(bytes, conn.peer_version);
                let frame = Write {
                    write_id,
                    seq: seq.0,
                    offset,
                    kind: wire_kind(kind),
                    ack: AckWanted::None,
                    primary_time_us: now_unix_us(),
                    last_scn: 0,
                    primary_durable_scn: self.redo.confirmed_scn().0,
                    bytes,
                    zero_tail,
                };
                self.send_write(destination, conn, frame, cursor.next, time_us, false)?;
                *next = cursor.next;
                Ok(true)
            }
        }
    }

    /// Sends writes from the queue, each following the one before: in one send if they go
    /// uncompressed, else one by one through the compressor.
    fn send_queued(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        writes: &[Arc<LogWrite>],
    ) -> Result<(), String> {
        // (On a forwarding standby: what its primary confirmed durable, never more.)
        let durable = self.redo.confirmed_scn();
        let peer_version = conn.peer_version;
        let frame = |write: &LogWrite| {
            let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
            frame_of(write, write_id, AckWanted::None, durable, peer_version)
        };
        if self.compresses(destination, true) {
            for write in writes {
                self.send_write(
                    destination,
                    conn,
                    frame(write),
                    after(write),
                    write.time_us,
                    true,
                )?;
            }
            return Ok(());
        }
        let messages: Vec<Message> =
            writes.iter().map(|write| Message::Write(frame(write))).collect();
        conn.send_all(&messages, destination.config().net_timeout)
            .map_err(|error| format!("sending redo: {error}"))?;
        let mut state = destination.state.lock();
        for write in writes {
            let end = after(write);
            state.sent = end;
            state.bytes_sent += write.bytes.len() as u64;
            if state.unacked.len() < UNACKED_MAX {
                state.unacked.push_back((end, write.time_us));
            }
        }
        Ok(())
    }

    /// Whether a redo message goes through the destination's compressor (`send_redo`).
    fn compresses(&self, destination: &Destination, live: bool) -> bool {
        let wanted = !live || destination.config().compression_for == CompressionScope::All;
        wanted && destination.compressor.lock().is_some()
    }

    pub(super) fn send_write(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        frame: Write,
        end: RedoAddr,
        time_us: u64,
        live: bool,
    ) -> Result<(), String> {
        let bytes = frame.len();
        self.send_redo(destination, conn, &Message::Write(frame), live)
            .map_err(|error| format!("sending redo: {error}"))?;
        let mut state = destination.state.lock();
        state.sent = end;
        state.bytes_sent += bytes;
        if state.unacked.len() < UNACKED_MAX {
            state.unacked.push_back((end, time_us));
        }
        Ok(())
    }

    /// Sends a redo-carrying message, compressed if the destination compresses this kind of
    /// shipping (`live`: from the log writer's queue) and the standby takes it.
    fn send_redo(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        message: &Message,
        live: bool,
    ) -> Result<(), ConnError> {
        let timeout = destination.config().net_timeout;
        let wanted = !live || destination.config().compression_for == CompressionScope::All;
        let mut compressor = destination.compressor.lock();
        let Some(compressor) = compressor.as_mut().filter(|_| wanted) else {
            return conn.send(message, timeout);
        };
        if destination.config().compression != Compression::Auto {
            return conn
                .send_compressed(message, compressor, &destination.compression, timeout)
                .map(|_| ());
        }
        let mut auto = destination.auto.lock();
        let auto = auto.get_or_insert_with(|| AutoCompression::new(Instant::now()));
        let started = Instant::now();
        let (uncompressed, wire, codec_ns) = if auto.compressing() {
            let (encoded, codec_ns) =
                conn.send_compressed(message, compressor, &destination.compression, timeout)?;
            (encoded.payload_len as u64, encoded.wire_len as u64, codec_ns)
        } else {
            conn.send(message, timeout)?;
            let len = redo_len(message);
            (len, len, 0)
        };
        let codec_cpu = Duration::from_nanos(codec_ns);
        auto.record(started.elapsed().saturating_sub(codec_cpu), codec_cpu, uncompressed, wire);
        if let Some(state) = auto.decide(Instant::now()) {
            tracing::info!(destination = %destination.name, state, "auto compression switched");
            *destination.auto_state.lock() = Some(state);
        }
        Ok(())
    }

    /// Sends the next piece of a whole archived log; returns whether the log is done.
    pub(super) fn ship_gap_chunk(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        seq: LogSeq,
        offset: &mut u64,
        max_send: usize,
    ) -> Result<bool, String> {
        let extent = self.redo.log_extent(seq).ok_or_else(|| {
            format!("the standby lacks log {seq}, which this primary no longer has")
        })?;
        let Some(end) = extent.end else {
            return Err(format!("the standby lacks log {seq}, which is still open here"));
        };
        let total = end.end_offset;
        let len = (total - *offset).min(max_send as u64);
        let bytes = self
            .redo
            .read_log_bytes(seq, *offset, len as usize)
            .map_err(|error| format!("reading log {seq} to ship: {error}"))?;
        let chunk = proto::ArchiveChunk { seq: seq.0, offset: *offset, total_len: total, bytes };
        self.send_redo(destination, conn, &Message::ArchiveChunk(chunk), false)
            .map_err(|error| format!("sending log {seq}: {error}"))?;
        destination.state.lock().bytes_sent += len;
        *offset += len;
        if *offset == total {
            tracing::info!(destination = %destination.name, %seq, bytes = total, "shipped a missing log to the standby (gap resolution)");
        }
        Ok(*offset == total)
    }

    /// Hands the gaps to the archive connections (opening them the first time); if none can
    /// be opened, the gaps stay for the control connection.
    pub(super) fn hand_to_archive_connections(
        self: &Arc<Inner>,
        destination: &Arc<Destination>,
        gaps: &mut VecDeque<LogSeq>,
        parallel: &mut Parallel,
    ) -> Result<(), String> {
        let wanted = archive::archive_connections_wanted(&destination.config());
        match parallel.shipper.as_mut() {
            None => {
                parallel.shipper = self.open_archive_connections(destination, wanted);
                if parallel.shipper.is_none() {
                    parallel.enabled = false;
                    return Ok(());
                }
            }
            // Opened early, fewer than wanted: the rest now.
            Some(shipper) if shipper.tried() < wanted => {
                let more = wanted - shipper.tried();
                self.add_archive_connections(destination, shipper, more);
            }
            Some(_) => {}
        }
        let shipper = parallel.shipper.as_ref().expect("opened");
        for seq in gaps.drain(..) {
            let extent = self.redo.log_extent(seq).ok_or_else(|| {
                format!("the standby lacks log {seq}, which this primary no longer has")
            })?;
            let Some(end) = extent.end else {
                return Err(format!("the standby lacks log {seq}, which is still open here"));
            };
            shipper.enqueue(seq, end.end_offset);
        }
        Ok(())
    }
}

/// The redo bytes a message carries: a write's whole length, zero tail included (an
/// uncompressed frame's payload is this less the zero tail, plus the fields).
fn redo_len(message: &Message) -> u64 {
    match message {
        Message::Write(write) => write.len(),
        Message::ArchiveChunk(chunk) => chunk.bytes.len() as u64,
        _ => 0,
    }
}
