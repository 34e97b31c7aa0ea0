//! SYNC transport: the log writer's side. For every log write, `ship` sends it itself on the
//! SYNC connection of each synchronized SYNC destination (and queues it for every other
//! destination's sender), and `ProtectionWait` waits after the local write for what the
//! protection mode requires.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proto::Message;
use redo::ship::{LogWrite, ShipWait};
use redo::{RedoAddr, RedoError};

use super::*;
use crate::config::ProtectionMode;
use crate::conn::ConnError;

/// What the log writer waits for after its local write.
struct ProtectionWait {
    inner: Arc<Inner>,
    write: Arc<LogWrite>,
    /// SYNC destinations the write was sent to, and the id of the write.
    sent: Vec<(Arc<Destination>, u64, Instant)>,
}

impl ShipWait for ProtectionWait {
    fn wait(self: Box<Self>) -> Result<(), RedoError> {
        let started = Instant::now();
        let end = after(&self.write);
        // The fast-start targets that acknowledged this write.
        let mut acknowledged_by = std::collections::BTreeSet::new();
        for (destination, write_id, sent_at) in &self.sent {
            let deadline = *sent_at + destination.config.net_timeout;
            let outcome = (|| -> Result<(), String> {
                let mut sync = destination.sync.lock();
                let conn = sync.as_mut().ok_or("the SYNC connection is closed")?;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(format!(
                            "no acknowledgement within net_timeout ({:?})",
                            destination.config.net_timeout
                        ));
                    }
                    match conn.recv(Some(left)) {
                        Ok(Message::Ack(ack)) if ack.write_id == *write_id => return Ok(()),
                        Ok(Message::Ack(_)) => continue,
                        Ok(Message::Error(error)) => {
                            let reason =
                                format!("the standby refused the write: {}", error.message);
                            self.inner.note_refusal(&error, &reason);
                            return Err(reason);
                        }
                        Ok(other) => {
                            return Err(format!(
                                "unexpected {:?} on the SYNC connection",
                                other.kind()
                            ));
                        }
                        Err(ConnError::TimedOut(_)) => {
                            return Err(format!(
                                "no acknowledgement within net_timeout ({:?})",
                                destination.config.net_timeout
                            ));
                        }
                        Err(error) => return Err(error.to_string()),
                    }
                }
            })();
            match outcome {
                Ok(()) => {
                    let mut state = destination.state.lock();
                    destination.acknowledge(&mut state, end);
                    state.last_heard = Some(Instant::now());
                    acknowledged_by.insert(destination.config.name.clone());
                }
                Err(reason) => self.inner.desynchronize(destination, &reason),
            }
        }
        self.inner.sync_remote_write.record_since(started);
        if self.inner.mode == ProtectionMode::MaximumProtection {
            self.inner.wait_for_protection(end)?;
        }
        // Fast-start failover: redo that some target did not acknowledge is declared durable
        // only under the observer's lease (and, under Maximum Availability, its grant for
        // exactly those targets).
        if let Some(fast_start) = &self.inner.fast_start {
            let inner = &self.inner;
            let stop = || inner.shutdown.load(Ordering::Acquire) || inner.redo.is_shut_down();
            let waited = Instant::now();
            // The targets that hold this write durably: by their SYNC acknowledgement, or, for
            // one catching up meanwhile, by what its catch-up has been acknowledged up to.
            let key = (end.seq.0, end.offset);
            let holding = || {
                let mut holding = acknowledged_by.clone();
                for destination in &inner.destinations {
                    let acknowledged = destination.state.lock().acknowledged;
                    if (acknowledged.seq.0, acknowledged.offset) >= key {
                        holding.insert(destination.config.name.clone());
                    }
                }
                holding
            };
            fast_start.admit(inner.mode, &holding, &stop).map_err(RedoError::WriterFailed)?;
            if waited.elapsed() > Duration::from_millis(1) {
                inner.lease_wait.record_since(waited);
            }
        }
        {
            let _progress = self.inner.progress.lock();
            self.inner.progressed.notify_all();
        }
        Ok(())
    }
}

impl Inner {
    pub(super) fn ship(self: &Arc<Inner>, write: &Arc<LogWrite>) -> Option<Box<dyn ShipWait>> {
        let mut sent = Vec::new();
        let end = after(write);
        for destination in &self.destinations {
            let mut state = destination.state.lock();
            state.last_write_end = end;
            if destination.is_sync() && state.phase == Phase::Synchronized {
                // The log writer sends it itself, before its own write.
                let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
                let message = Message::Write(frame_of(
                    write,
                    write_id,
                    destination.ack_wanted(),
                    self.redo.durable_scn(),
                ));
                let sent_at = Instant::now();
                let result = match destination.sync.lock().as_mut() {
                    Some(conn) => conn
                        .send(&message, destination.config.net_timeout)
                        .map_err(|error| error.to_string()),
                    None => Err("the SYNC connection is closed".to_string()),
                };
                match result {
                    Ok(()) => {
                        state.sent = end;
                        state.bytes_sent += write.bytes.len() as u64;
                        if state.unacked.len() < UNACKED_MAX {
                            state.unacked.push_back((end, write.time_us));
                        }
                        drop(state);
                        sent.push((destination.clone(), write_id, sent_at));
                    }
                    Err(reason) => {
                        drop(state);
                        self.desynchronize(destination, &format!("sending a SYNC write: {reason}"));
                    }
                }
                continue;
            }
            drop(state);
            let mut queue = destination.queue.lock();
            if !queue.overflowed {
                if queue.bytes + write.bytes.len() > QUEUE_BYTES_MAX {
                    // The sender is behind by more than the queue holds: it reads the online
                    // log files from where it is instead (durable by then), then comes back.
                    queue.overflowed = true;
                    queue.writes.clear();
                    queue.bytes = 0;
                } else {
                    queue.bytes += write.bytes.len();
                    queue.writes.push_back(write.clone());
                }
            }
            destination.wake.notify_all();
        }
        if sent.is_empty()
            && self.mode != ProtectionMode::MaximumProtection
            && self.fast_start.is_none()
        {
            return None;
        }
        Some(Box::new(ProtectionWait { inner: self.clone(), write: write.clone(), sent }))
    }

    /// A SYNC destination failed: out of the synchronized set, and reconnect it.
    pub(super) fn desynchronize(&self, destination: &Destination, reason: &str) {
        {
            let mut state = destination.state.lock();
            if state.phase == Phase::Synchronized {
                state.phase = Phase::Disconnected;
            }
            state.last_error = Some(reason.to_string());
            state.reconnect = true;
        }
        if let Some(conn) = destination.sync.lock().take() {
            conn.shutdown();
        }
        tracing::warn!(destination = %destination.config.name, reason, "SYNC destination dropped from the synchronized set; it reconnects and catches up");
        self.note_synchronization();
        destination.notify();
    }

    /// Maximum Protection: returns only once a SYNC AFFIRM destination holds `end` durably.
    pub(super) fn wait_for_protection(&self, end: RedoAddr) -> Result<(), RedoError> {
        let key = (end.seq.0, end.offset);
        let started = Instant::now();
        let mut waited = false;
        let mut progress = self.progress.lock();
        loop {
            let protected = self.destinations.iter().any(|destination| {
                destination.is_sync() && destination.config.affirm && {
                    let acknowledged = destination.state.lock().acknowledged;
                    (acknowledged.seq.0, acknowledged.offset) >= key
                }
            });
            if protected {
                if waited {
                    self.protection_wait.record_since(started);
                }
                return Ok(());
            }
            if self.shutdown.load(Ordering::Acquire) || self.redo.is_shut_down() {
                return Err(RedoError::Shutdown);
            }
            waited = true;
            self.progressed.wait_for(&mut progress, Duration::from_millis(200));
        }
    }
}
