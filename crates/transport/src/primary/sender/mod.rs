//! A destination's sender: the control connection's thread. It connects and handshakes,
//! catches the standby up from the log files and the archive, streams ASYNC redo from the
//! in-memory queue, ships missing logs (gap resolution), sends heartbeats, opens the SYNC
//! connection and hands it to the log writer once the standby has caught up, and reconnects
//! after `reopen` when anything fails.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use parking_lot::Mutex;
use proto::Channel;
use redo::{LogSeq, RedoAddr, Scn};

use super::*;
use crate::auto_compression::AutoCompression;
use crate::compression::Compression;

mod handshake;
mod incoming;
mod ship;
mod stream;

impl Inner {
    /// The control thread of one destination: connect, catch up, stream, retry; idle while
    /// deferred or given up, until its settings change.
    pub(super) fn control(self: &Arc<Inner>, destination: &Arc<Destination>) {
        let name = &destination.name;
        while !self.shutdown.load(Ordering::Acquire) {
            if destination.is_deferred() {
                self.idle(destination, Phase::Deferred);
                continue;
            }
            let result = self.session(destination);
            *destination.compressor.lock() = None;
            destination.compression_active.store(false, Ordering::Relaxed);
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            destination.drop_sync();
            let (restart, give_up) = {
                let mut state = destination.state.lock();
                state.phase = Phase::Disconnected;
                state.reconnect = false;
                if std::mem::take(&mut state.restart) {
                    // Its settings changed: connect again with them, at once.
                    state.failures = 0;
                    (true, false)
                } else {
                    let reason = match &result {
                        Ok(()) => "connection closed".to_string(),
                        Err(reason) => reason.clone(),
                    };
                    tracing::warn!(destination = %name, reason, failures = state.failures + 1, "redo transport to the standby failed; retrying after reopen");
                    state.last_error = Some(reason);
                    state.failures += 1;
                    let max = destination.config().max_failure;
                    let give_up = max > 0 && state.failures >= max;
                    if give_up {
                        // Set here, under the lock a run-time change takes to retry it.
                        state.phase = Phase::GaveUp;
                    }
                    (false, give_up)
                }
            };
            self.note_synchronization();
            let mut queue = destination.queue.lock();
            // What queued meanwhile is read from the files after the reconnection. Until the
            // standby has it, the oldest of it (or of what this session held unsent) counts
            // in the transport lag: an entry with the sent ones that the standby retires once
            // it holds everything written so far. (The state inside the queue: the order
            // this thread keeps; no other takes both.)
            let in_hand = destination.in_hand_us.swap(0, Ordering::AcqRel);
            let unsent = queue
                .writes
                .front()
                .map(|write| write.time_us)
                .into_iter()
                .chain((in_hand > 0).then_some(in_hand))
                .min();
            if let Some(time_us) = unsent {
                let mut state = destination.state.lock();
                let end = state.last_write_end;
                state.note_unsent(end, time_us);
            }
            queue.writes.clear();
            queue.bytes = 0;
            queue.overflowed = true;
            if restart {
                tracing::info!(destination = %name, "destination settings changed at run time; connecting again with them");
                continue;
            }
            if give_up {
                drop(queue);
                tracing::error!(destination = %name, failures = destination.config().max_failure, "destination given up after max_failure consecutive failures; restart the primary, or change it at run time (redoguard edit destination), to retry it");
                self.idle(destination, Phase::GaveUp);
                continue;
            }
            let deadline = Instant::now() + destination.config().reopen;
            while !self.shutdown.load(Ordering::Acquire)
                && Instant::now() < deadline
                && !destination.state.lock().restart
            {
                destination.wake.wait_until(&mut queue, deadline);
            }
            // Connecting now, with whatever settings a change made meanwhile.
            destination.state.lock().restart = false;
        }
    }

    /// Waits, in `phase`, until the destination's settings change or the primary stops.
    fn idle(&self, destination: &Destination, phase: Phase) {
        destination.state.lock().phase = phase;
        self.note_synchronization();
        let mut queue = destination.queue.lock();
        loop {
            queue.writes.clear();
            queue.bytes = 0;
            queue.overflowed = true;
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            {
                let mut state = destination.state.lock();
                if std::mem::take(&mut state.restart) {
                    state.failures = 0;
                    state.phase = Phase::Connecting;
                    return;
                }
            }
            destination.wake.wait_for(&mut queue, HEARTBEAT_INTERVAL);
        }
    }

    /// One connection's life.
    pub(super) fn session(self: &Arc<Inner>, destination: &Arc<Destination>) -> Result<(), String> {
        let config = &destination.config();
        destination.state.lock().phase = Phase::Connecting;
        // With archive connections and closed logs here that the standby may lack (first
        // contact, or its last known position is in an older log than the one open here),
        // some are opened at once with the control connection: on a long link that saves the
        // two round trips of opening them once the standby has said what it lacks. As many
        // as the standby takes handshakes of one source at once beside the control
        // connection's; the rest once gaps are handed over. If it lacks nothing whole, they
        // are closed again.
        let newest_open = self.redo.durable_addr().seq;
        let early = config.max_connections > 1
            && newest_open.0 > destination.state.lock().acknowledged.seq.0.max(1);
        let (connected, early_shipper) = std::thread::scope(|scope| {
            let archive = early.then(|| {
                scope.spawn(|| {
                    self.open_archive_connections(destination, archive::HANDSHAKES_AT_ONCE - 1)
                })
            });
            let connected = self.connect(Channel::Control, destination, true);
            (connected, archive.and_then(|opening| opening.join().ok().flatten()))
        });
        let (mut conn, welcome, rtt, send_buffer) = connected?;
        let compressor = self.compressor_for(destination, &welcome);
        destination.compression_active.store(compressor.is_some(), Ordering::Relaxed);
        if compressor.is_some() && config.compression == Compression::Auto {
            let auto = AutoCompression::new(Instant::now());
            *destination.auto_state.lock() = Some(auto.describe());
            *destination.auto.lock() = Some(auto);
        }
        *destination.compressor.lock() = compressor;
        let newest = newest_open;
        let position = welcome.position;
        if position.current_seq > newest.0 + 1 {
            return Err(format!(
                "the standby holds log {} but this primary's newest log is {newest}: it belongs to another history; recreate the standby",
                position.current_seq
            ));
        }
        let mut next =
            RedoAddr { seq: LogSeq(position.current_seq.max(1)), offset: position.current_offset };
        let mut gaps: VecDeque<LogSeq> =
            (position.complete_through_seq.saturating_add(1)..next.seq.0).map(LogSeq).collect();
        // With archive connections, the logs this primary has closed that the standby lacks
        // whole go over them in parallel, as gaps; the control connection goes on from the
        // first log still open here (`skip_to`), so live redo flows at once.
        let parallel =
            config.max_connections > 1 && welcome.version >= archive::ARCHIVE_VERSION_MIN;
        if config.max_connections > 1 && !parallel {
            tracing::warn!(destination = %config.name, standby_version = welcome.version, "the standby speaks a protocol version without archive connections: logs ship on one connection");
        }
        let mut skip_to = None;
        if parallel {
            let first_whole = if next.offset == 0 { next.seq } else { next.seq.next() };
            let mut seq = first_whole;
            while seq < newest
                && self.redo.log_extent(seq).is_some_and(|extent| extent.end.is_some())
            {
                gaps.push_back(seq);
                seq = seq.next();
            }
            if seq > first_whole {
                skip_to = Some(RedoAddr { seq, offset: 0 });
            }
        }
        {
            let mut state = destination.state.lock();
            state.phase = Phase::CatchingUp;
            state.rtt_us = Some(rtt.as_micros() as u64);
            state.send_buffer_bytes = send_buffer;
            state.tcp_congestion = conn.congestion();
            state.sent = next;
            state.acknowledged = next;
            state.applied_scn = Scn(position.applied_scn);
            // What the standby holds is retired; what it lacks keeps counting in the lag.
            state.unacked.retain(|&(end, _)| end > next);
            destination.in_hand_us.store(0, Ordering::Release);
            state.last_heard = Some(Instant::now());
            state.gaps = gaps.iter().copied().collect();
        }
        tracing::info!(destination = %config.name, next = %next, gaps = gaps.len(), rtt_us = rtt.as_micros() as u64, "connected to the standby; catching up");
        // Incoming: the standby's status and gap requests.
        let broken = Arc::new(Mutex::new(None::<String>));
        let reader = {
            let mut incoming = conn.try_clone().map_err(|error| error.to_string())?;
            let inner = self.clone();
            let destination = destination.clone();
            let broken = broken.clone();
            std::thread::Builder::new()
                .name(format!("redo-recv-{}", config.name))
                .spawn(move || inner.incoming(&destination, &mut incoming, &broken))
                .map_err(|error| error.to_string())?
        };
        // Opened early and not needed (no log to ship whole, or a standby without archive
        // connections): closed now rather than held for the session.
        let shipper = early_shipper.filter(|_| parallel && !gaps.is_empty());
        if shipper.is_none() {
            destination.archive_connections.store(0, Ordering::Relaxed);
        }
        let parallel = Parallel { enabled: parallel, skip_to, shipper };
        let result = self.stream(destination, &mut conn, &mut next, &mut gaps, &broken, parallel);
        destination.archive_connections.store(0, Ordering::Relaxed);
        conn.shutdown();
        let _ = reader.join();
        result
    }
}

/// A session's archive connections (`max_connections` above 1, a standby of version 4).
pub(super) struct Parallel {
    enabled: bool,
    /// Where the control connection resumes once it reaches a log handed to the archive
    /// connections.
    skip_to: Option<RedoAddr>,
    shipper: Option<archive::ArchiveShipper>,
}
