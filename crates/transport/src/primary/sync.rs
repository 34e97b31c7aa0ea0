//! SYNC transport: the log writer's side. For every log write, `ship` sends it itself on the
//! SYNC connection of each synchronized SYNC destination (and queues it for every other
//! destination's sender), and `ProtectionWait` waits after the local write for what the
//! protection mode and the SYNC quorum require.
//!
//! Several writes may be in flight on a SYNC connection (the redo engine's pipeline sends the
//! next before the last is acknowledged). The standby acknowledges in order, and an
//! acknowledgement covers every write before it on that connection; each destination keeps
//! what it sent and not yet had acknowledged (`State::sync_in_flight`). Acknowledgements are
//! read by whoever waits for one, one reader per connection at a time, and recorded in the
//! destination's state for every waiter; a waiter for several destinations waits on their
//! sockets together (`poll`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proto::Message;
use redo::ship::{LogWrite, ShipWait, Tried};
use redo::{RedoAddr, RedoError};

use super::*;
use crate::config::ProtectionMode;
use crate::conn::ConnError;

/// A write sent on a SYNC connection and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
pub(super) struct SyncSent {
    write_id: u64,
    /// Where it ends, in stream order.
    end: RedoAddr,
    sent_at: Instant,
}

/// One destination a write was sent to.
struct SentTo {
    destination: Arc<Destination>,
    sent_at: Instant,
    /// The SYNC connection's epoch when it was sent.
    epoch: u64,
}

/// What the log writer waits for after its local write.
struct ProtectionWait {
    inner: Arc<Inner>,
    write: Arc<LogWrite>,
    /// SYNC destinations the write was sent to.
    sent: Vec<SentTo>,
}

fn at_or_after(addr: RedoAddr, end: RedoAddr) -> bool {
    (addr.seq.0, addr.offset) >= (end.seq.0, end.offset)
}

impl ShipWait for ProtectionWait {
    /// Settles the write at once if the quorum's acknowledgements are in (after reading what
    /// has arrived, never waiting for more) and, with fast-start failover, every target holds
    /// the write, so that no lease or consent is needed; else gives the wait back to be waited
    /// for (`wait`). Under Maximum Protection, always gives it back.
    fn try_wait(self: Box<Self>) -> Tried {
        let inner = &self.inner;
        if inner.mode() == ProtectionMode::MaximumProtection {
            return Err(self);
        }
        let end = after(&self.write);
        let mut acknowledged_by = BTreeSet::new();
        let mut answered = 0;
        for to in &self.sent {
            if let Some(mut guard) = to.destination.sync_recv.try_lock() {
                inner.read_arrived(to, &mut guard);
            }
            let state = to.destination.state.lock();
            if state.sync_epoch != to.epoch {
                // Dropped from the synchronized set meanwhile: not waited for (as in
                // `await_quorum`).
                answered += 1;
            } else if at_or_after(state.acknowledged, end) {
                answered += 1;
                acknowledged_by.insert(to.destination.name.clone());
            }
        }
        // `await_quorum`'s first look, without its waiting.
        if acknowledged_by.len() < inner.quorum.needed(self.sent.len())
            && answered < self.sent.len()
        {
            return Err(self);
        }
        if let Some(fast_start) = &inner.fast_start {
            // `wait`'s holding set, taken once: `admit` then needs neither lease nor consent.
            let mut holding = acknowledged_by;
            for destination in &inner.destinations {
                if at_or_after(destination.state.lock().acknowledged, end) {
                    holding.insert(destination.name.clone());
                }
            }
            if !fast_start.reach.all_hold(&holding) {
                return Err(self);
            }
            // Every target holds it: `admit` returns at once (it notes that commits are
            // acknowledged again), never reaching `stop`.
            let stop = || true;
            if let Err(error) = fast_start.admit(end, &|| holding.clone(), &stop) {
                return Ok(Err(RedoError::WriterFailed(error)));
            }
        }
        if !self.sent.is_empty() {
            inner.sync_remote_write.record(Duration::ZERO);
        }
        inner.note_progress();
        Ok(Ok(()))
    }

    fn wait(self: Box<Self>) -> Result<(), RedoError> {
        let started = Instant::now();
        let end = after(&self.write);
        // The fast-start targets that acknowledged this write (none: the server is stopping,
        // and the wait gave up).
        let Some(acknowledged_by) = self.inner.await_quorum(&self.sent, end) else {
            return Err(RedoError::WriterFailed(
                "the server is stopping, and its standbys did not acknowledge this write in time"
                    .into(),
            ));
        };
        if !self.sent.is_empty() {
            self.inner.sync_remote_write.record_since(started);
        }
        if self.inner.mode() == ProtectionMode::MaximumProtection {
            self.inner.wait_for_protection(end)?;
        }
        // Fast-start failover: redo that some target did not acknowledge is declared durable
        // only under the observer's lease (and, under Maximum Availability, its grant for
        // exactly those targets).
        if let Some(fast_start) = &self.inner.fast_start {
            let inner = &self.inner;
            let stop = || {
                inner.shutdown.load(Ordering::Acquire)
                    || inner.redo.is_shut_down()
                    || inner.given_up()
            };
            let waited = Instant::now();
            // The targets that hold this write durably: by their SYNC acknowledgement, or, for
            // one catching up meanwhile, by what its catch-up has been acknowledged up to.
            let holding = || {
                let mut holding = acknowledged_by.clone();
                for destination in &inner.destinations {
                    if at_or_after(destination.state.lock().acknowledged, end) {
                        holding.insert(destination.name.clone());
                    }
                }
                holding
            };
            fast_start.admit(end, &holding, &stop).map_err(RedoError::WriterFailed)?;
            if waited.elapsed() > Duration::from_millis(1) {
                inner.lease_wait.record_since(waited);
            }
        }
        self.inner.note_progress();
        Ok(())
    }
}

impl Inner {
    pub(super) fn ship(self: &Arc<Inner>, write: &Arc<LogWrite>) -> Option<Box<dyn ShipWait>> {
        let mut sent = Vec::new();
        let end = after(write);
        for destination in &self.destinations {
            let mut state = destination.state.lock();
            if destination.is_sync()
                && state.phase == Phase::Synchronized
                && let Some(oldest) = state.sync_in_flight.front()
                && oldest.sent_at.elapsed() > destination.config().net_timeout
            {
                // Under "any k" no wait may be waiting for this one: it is dropped here.
                let epoch = state.sync_epoch;
                drop(state);
                let net_timeout = destination.config().net_timeout;
                self.desynchronize(
                    destination,
                    epoch,
                    &format!("no acknowledgement within net_timeout ({net_timeout:?})"),
                );
                state = destination.state.lock();
            }
            state.last_write_end = end;
            state.offered = true;
            if destination.is_deferred() {
                // Nothing is kept for it: once enabled, it catches up from the files. Its
                // transport lag is the age of the oldest redo it misses.
                state.note_unsent(end, write.time_us);
                continue;
            }
            if destination.is_sync() && state.phase == Phase::Synchronized {
                // The log writer sends it itself, before its own write. It is recorded as in
                // flight first, so that its acknowledgement finds it whoever reads it.
                let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
                let epoch = state.sync_epoch;
                state.sync_in_flight.push_back(SyncSent { write_id, end, sent_at: Instant::now() });
                state.sent = end;
                state.bytes_sent += write.bytes.len() as u64;
                if state.unacked.len() < UNACKED_MAX {
                    state.unacked.push_back((end, write.time_us));
                }
                drop(state);
                let ack = destination.ack_wanted();
                let durable = self.redo.confirmed_scn();
                let sent_at = Instant::now();
                let result = match destination.sync_send.lock().as_mut() {
                    Some((installed, conn)) if *installed == epoch => {
                        let frame = frame_of(write, write_id, ack, durable, conn.peer_version);
                        conn.send(&Message::Write(frame), destination.config().net_timeout)
                            .map_err(|error| error.to_string())
                    }
                    _ => Err("the SYNC connection is closed".to_string()),
                };
                match result {
                    Ok(()) => {
                        sent.push(SentTo { destination: destination.clone(), sent_at, epoch })
                    }
                    Err(reason) => self.desynchronize(
                        destination,
                        epoch,
                        &format!("sending a SYNC write: {reason}"),
                    ),
                }
                continue;
            }
            drop(state);
            let mut queue = destination.queue.lock();
            // The time of the oldest write the standby lacks that is not left in the queue.
            let mut unqueued = Some(write.time_us);
            if !queue.overflowed {
                if queue.bytes + write.bytes.len() > QUEUE_BYTES_MAX {
                    // The sender is behind by more than the queue holds: it reads the online
                    // log files from where it is instead (durable by then), then comes back.
                    unqueued = queue.writes.front().map_or(unqueued, |front| Some(front.time_us));
                    queue.overflowed = true;
                    queue.writes.clear();
                    queue.bytes = 0;
                } else {
                    queue.bytes += write.bytes.len();
                    queue.writes.push_back(write.clone());
                    unqueued = None;
                }
            }
            if !queue.lingering || queue.overflowed || queue.bytes >= ASYNC_SEND_BYTES {
                destination.wake.notify_all();
            }
            drop(queue);
            if let Some(time_us) = unqueued {
                // Not queued (disconnected, or the queue overflowed and dropped what it held):
                // it will be read from the files.
                destination.state.lock().note_unsent(end, time_us);
            }
        }
        if sent.is_empty()
            && self.mode() != ProtectionMode::MaximumProtection
            && self.fast_start.is_none()
        {
            return None;
        }
        Some(Box::new(ProtectionWait { inner: self.clone(), write: write.clone(), sent }))
    }

    /// Waits until as many of the destinations `sent` was sent to as the quorum needs hold
    /// everything before `end`, or until those that do not have been dropped from the
    /// synchronized set (late past `net_timeout`, or past `sync_latency` behind the others,
    /// or failed). Returns the names of those that acknowledged.
    fn await_quorum(&self, sent: &[SentTo], end: RedoAddr) -> Option<BTreeSet<String>> {
        let needed = self.quorum.needed(sent.len());
        let mut acknowledged = vec![false; sent.len()];
        let mut dropped = vec![false; sent.len()];
        let mut first_ack: Option<Instant> = None;
        loop {
            let now = Instant::now();
            for (index, to) in sent.iter().enumerate() {
                if acknowledged[index] || dropped[index] {
                    continue;
                }
                let state = to.destination.state.lock();
                if state.sync_epoch != to.epoch {
                    dropped[index] = true;
                } else if at_or_after(state.acknowledged, end) {
                    acknowledged[index] = true;
                    first_ack.get_or_insert(now);
                }
            }
            let count = acknowledged.iter().filter(|acknowledged| **acknowledged).count();
            let mut waiting: Vec<usize> =
                (0..sent.len()).filter(|&index| !acknowledged[index] && !dropped[index]).collect();
            if count >= needed || waiting.is_empty() {
                break;
            }
            if self.given_up() {
                return None;
            }
            // Deadlines: net_timeout from the send, and sync_latency from the first answer.
            let mut next_deadline = None::<Instant>;
            waiting.retain(|&index| {
                let to = &sent[index];
                let net_timeout = to.destination.config().net_timeout;
                let mut deadline = to.sent_at + net_timeout;
                let mut why = format!("no acknowledgement within net_timeout ({net_timeout:?})");
                if let Some(first) = first_ack
                    && !self.sync_latency.is_zero()
                    && first + self.sync_latency < deadline
                {
                    deadline = first + self.sync_latency;
                    why = format!(
                        "no acknowledgement within sync_latency ({:?}) of the other SYNC standbys'",
                        self.sync_latency
                    );
                }
                if now >= deadline {
                    self.desynchronize(&to.destination, to.epoch, &why);
                    dropped[index] = true;
                    return false;
                }
                next_deadline = Some(next_deadline.map_or(deadline, |next| next.min(deadline)));
                true
            });
            let Some(deadline) = next_deadline else { continue };
            // (Looked at again at least every quarter second: a stop may begin meanwhile.)
            let deadline = self
                .give_up_at()
                .map_or(deadline, |at| deadline.min(at))
                .min(Instant::now() + Duration::from_millis(250));
            let waiting: Vec<&SentTo> = waiting.iter().map(|&index| &sent[index]).collect();
            self.read_acknowledgements(&waiting, deadline);
        }
        Some(
            sent.iter()
                .zip(&acknowledged)
                .filter(|(_, acknowledged)| **acknowledged)
                .map(|(to, _)| to.destination.name.clone())
                .collect(),
        )
    }

    /// Reads what the SYNC connections of `waiting` have to say, until something came or
    /// `deadline`. A connection another waiter is reading is left to it (its reader records
    /// what it reads; this waiter looks again shortly).
    fn read_acknowledgements(&self, waiting: &[&SentTo], deadline: Instant) {
        let wait = deadline.saturating_duration_since(Instant::now());
        let mut held = Vec::new();
        for to in waiting {
            if let Some(guard) = to.destination.sync_recv.try_lock() {
                held.push((to, guard));
            }
        }
        if held.is_empty() {
            // Someone else reads: wait for what they record.
            let mut progress = self.progress.lock();
            self.progressed.wait_for(&mut progress, wait.min(Duration::from_millis(1)));
            return;
        }
        // A waiter that reads only some of what it waits for comes back soon for the others.
        let wait =
            if held.len() < waiting.len() { wait.min(Duration::from_millis(1)) } else { wait };
        // What is already buffered first (decrypted, or whole frames read with earlier ones).
        let mut heard = false;
        for (to, guard) in &mut held {
            heard |= self.read_one(to, guard, Duration::ZERO);
        }
        if heard {
            return;
        }
        if let [(to, guard)] = held.as_mut_slice() {
            self.read_one(to, guard, wait);
            return;
        }
        let mut fds: Vec<libc::pollfd> = held
            .iter()
            .map(|(_, guard)| libc::pollfd {
                fd: guard.as_ref().map_or(-1, |(_, conn)| conn.raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let millis = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures for the call's
        // duration; the descriptors stay open while their guards are held.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis) };
        if ready <= 0 {
            return;
        }
        for ((to, guard), fd) in held.iter_mut().zip(&fds) {
            if fd.revents != 0 {
                // Readable: a whole acknowledgement is normally there; what is not comes
                // within the rest of the wait.
                let left = deadline.saturating_duration_since(Instant::now());
                self.read_one(to, guard, left.max(Duration::from_millis(1)));
            }
        }
    }

    /// Reads what has arrived on a destination's SYNC connection. It waits for no standby: at
    /// most for the rest of a message whose first bytes are in, for one read timeout (1 ms,
    /// which the kernel rounds up to its tick).
    fn read_arrived(&self, to: &SentTo, guard: &mut Option<(u64, Conn)>) {
        let Some((_, conn)) = guard.as_ref() else { return };
        if conn.has_buffered_message() {
            self.read_one(to, guard, Duration::ZERO);
            return;
        }
        let mut fd = libc::pollfd { fd: conn.raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the call's duration; the descriptor stays open while
        // the guard is held.
        if unsafe { libc::poll(&mut fd, 1, 0) } > 0 {
            self.read_one(to, guard, Duration::from_millis(1));
        }
    }

    /// Reads one message from a destination's SYNC connection (waiting up to `wait`) and
    /// every whole one buffered after it, and records them. Whether anything was read.
    fn read_one(&self, to: &SentTo, guard: &mut Option<(u64, Conn)>, wait: Duration) -> bool {
        let destination = &to.destination;
        let Some((epoch, conn)) = guard.as_mut() else {
            // Dropped meanwhile.
            return false;
        };
        let epoch = *epoch;
        let mut wait = wait;
        let mut heard = false;
        loop {
            match conn.recv(Some(wait)) {
                Ok(Message::Ack(ack)) => {
                    heard = true;
                    let mut state = destination.state.lock();
                    if state.sync_epoch == epoch {
                        let mut covered = None;
                        while state
                            .sync_in_flight
                            .front()
                            .is_some_and(|sent| sent.write_id <= ack.write_id)
                        {
                            covered = state.sync_in_flight.pop_front().map(|sent| sent.end);
                        }
                        if let Some(end) = covered {
                            destination.acknowledge(&mut state, end);
                        }
                        state.last_heard = Some(Instant::now());
                    }
                }
                Ok(Message::Error(error)) => {
                    let reason = format!("the standby refused the write: {}", error.message);
                    self.note_refusal(&error, &reason);
                    guard.take();
                    self.desynchronize(destination, epoch, &reason);
                    return true;
                }
                Ok(other) => {
                    guard.take();
                    self.desynchronize(
                        destination,
                        epoch,
                        &format!("unexpected {:?} on the SYNC connection", other.kind()),
                    );
                    return true;
                }
                Err(ConnError::TimedOut(_)) => break,
                Err(error) => {
                    guard.take();
                    self.desynchronize(
                        destination,
                        epoch,
                        &format!("reading the SYNC connection: {error}"),
                    );
                    return true;
                }
            }
            if !conn.has_buffered_message() {
                break;
            }
            wait = Duration::ZERO;
        }
        if heard {
            self.note_progress();
        }
        heard
    }

    /// Wakes whoever waits for a destination's acknowledged position to move.
    fn note_progress(&self) {
        let _progress = self.progress.lock();
        self.progressed.notify_all();
    }

    /// A SYNC destination failed: out of the synchronized set, and reconnect it. Only the
    /// connection of `epoch`: a later one installed meanwhile is not touched.
    pub(super) fn desynchronize(&self, destination: &Destination, epoch: u64, reason: &str) {
        {
            let mut state = destination.state.lock();
            if state.sync_epoch != epoch {
                return;
            }
            state.sync_epoch += 1;
            state.sync_in_flight.clear();
            if state.phase == Phase::Synchronized {
                state.phase = Phase::Disconnected;
            }
            state.last_error = Some(reason.to_string());
            state.reconnect = true;
        }
        destination.drop_sync();
        tracing::warn!(destination = %destination.name, reason, "SYNC destination dropped from the synchronized set; it reconnects and catches up");
        self.note_synchronization();
        self.note_progress();
        destination.notify();
    }

    /// Maximum Protection: returns only once as many SYNC AFFIRM destinations as the quorum
    /// says (one for `all`, k for `any k`) hold `end` durably.
    pub(super) fn wait_for_protection(&self, end: RedoAddr) -> Result<(), RedoError> {
        let needed = self.quorum.protected_by();
        let started = Instant::now();
        let mut waited = false;
        let mut progress = self.progress.lock();
        loop {
            let protected = self
                .destinations
                .iter()
                .filter(|destination| {
                    destination.is_sync()
                        && destination.config().affirm
                        && at_or_after(destination.state.lock().acknowledged, end)
                })
                .count()
                >= needed;
            if protected {
                if waited {
                    self.protection_wait.record_since(started);
                }
                return Ok(());
            }
            if self.shutdown.load(Ordering::Acquire) || self.redo.is_shut_down() || self.given_up()
            {
                return Err(RedoError::Shutdown);
            }
            if self.mode() != ProtectionMode::MaximumProtection {
                // The mode was lowered at run time: what it asks for is the new mode's.
                return Ok(());
            }
            waited = true;
            self.progressed.wait_for(&mut progress, Duration::from_millis(200));
        }
    }
}
