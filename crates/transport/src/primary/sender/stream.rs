//! A session's loop: what the standby lacks, then new redo as it is written (ASYNC batching:
//! `linger`), heartbeats, and the hand-over to the SYNC connection once a SYNC standby has
//! caught up.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use proto::{Channel, Message};
use redo::types::now_unix_us;
use redo::{LogSeq, RedoAddr};

use super::Parallel;
use crate::conn::Conn;
use crate::primary::{
    ASYNC_SEND_BYTES, ASYNC_SEND_INTERVAL, Destination, HEARTBEAT_INTERVAL, Inner, Phase, Queue,
};

impl Inner {
    /// Ships what the standby lacks, then new redo as it is written, with heartbeats and
    /// gap logs in between, until the connection breaks or the primary stops.
    pub(super) fn stream(
        self: &Arc<Inner>,
        destination: &Arc<Destination>,
        conn: &mut Conn,
        next: &mut RedoAddr,
        gaps: &mut VecDeque<LogSeq>,
        broken: &Mutex<Option<String>>,
        mut parallel: Parallel,
    ) -> Result<(), String> {
        let config = &destination.config();
        let max_send = config.max_send as usize;
        // When the last heartbeat went: one goes at least every `HEARTBEAT_INTERVAL`, under
        // load too (it carries what redo does not: whether the standby is synchronized, the
        // observer, a relay's word for the targets behind it).
        let mut last_beat = Instant::now();
        let mut gap_offset = 0u64;
        // The SYNC connection, opened while catching up and handed to the log writer once
        // synchronized.
        let mut pending_sync: Option<Conn> = None;
        // When redo was last sent from the queue or the files (ASYNC batching: `linger`).
        let mut last_redo_sent: Option<Instant> = None;
        loop {
            // Read before anything below is looked at: a wake-up after this is not lost.
            let wakes_seen = destination.queue.lock().wakes;
            if self.shutdown.load(Ordering::Acquire) {
                return Ok(());
            }
            if let Some(reason) = broken.lock().take() {
                return Err(reason);
            }
            if destination.state.lock().restart {
                return Ok(());
            }
            if destination.state.lock().reconnect {
                return Err(destination
                    .state
                    .lock()
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "SYNC connection failed".into()));
            }
            // Gap requests that arrived on the other thread.
            {
                let state = destination.state.lock();
                for seq in &state.gaps {
                    if !gaps.contains(seq) && *seq < next.seq {
                        gaps.push_back(*seq);
                    }
                }
            }
            if parallel.enabled && !gaps.is_empty() {
                self.hand_to_archive_connections(destination, gaps, &mut parallel)?;
            }
            if let Some(shipper) = &parallel.shipper
                && let Some(reason) = shipper.failed()
            {
                return Err(reason);
            }
            if let Some(skip_to) = parallel.skip_to
                && next.offset == 0
                && next.seq < skip_to.seq
            {
                *next = skip_to;
            }
            let synchronized = destination.state.lock().phase == Phase::Synchronized;
            let mut progressed = false;
            // (Read before the queue is locked: the state is never locked inside it.)
            let streaming =
                !destination.is_sync() && destination.state.lock().phase == Phase::Streaming;
            let lingering =
                streaming && linger(&destination.queue.lock(), last_redo_sent).is_some();
            if !synchronized && !lingering {
                progressed = self.ship_next(destination, conn, next, max_send)?;
                if progressed {
                    last_redo_sent = Some(Instant::now());
                }
            }
            if let Some(&seq) = gaps.front() {
                if self.ship_gap_chunk(destination, conn, seq, &mut gap_offset, max_send)? {
                    gaps.pop_front();
                    gap_offset = 0;
                }
                progressed = true;
            }
            if progressed {
                // A forwarder under load never idles: with heartbeats only when idle, a target
                // behind it never heard the primary's word again after a new session (bench
                // chaos --layout far-sync, finding F1: not armed for fast-start failover while
                // clients wrote).
                if last_beat.elapsed() >= HEARTBEAT_INTERVAL {
                    self.heartbeat(destination, conn)?;
                    last_beat = Instant::now();
                }
            } else {
                if destination.is_sync()
                    && !synchronized
                    && self.try_synchronize(destination, *next, &mut pending_sync)?
                {
                    // Tell the standby at once that it is synchronized (fast-start failover
                    // fails over only to a standby its primary called so).
                    self.heartbeat(destination, conn)?;
                    last_beat = Instant::now();
                    continue;
                }
                if !synchronized {
                    let mut state = destination.state.lock();
                    if state.phase == Phase::CatchingUp
                        && destination.queue.lock().writes.is_empty()
                        && !destination.is_sync()
                    {
                        state.phase = Phase::Streaming;
                        state.failures = 0;
                        state.last_error = None;
                        tracing::info!(destination = %config.name, "standby caught up; streaming (ASYNC)");
                    }
                }
                if last_beat.elapsed() >= HEARTBEAT_INTERVAL {
                    self.heartbeat(destination, conn)?;
                    last_beat = Instant::now();
                }
                // A streaming ASYNC destination that has been sent everything written has
                // nothing to do until the log writer queues a write (which wakes this
                // thread), something wakes it, or a heartbeat is due. Redo written and not
                // sent yet without being in the queue (written while the queue had
                // overflowed, not yet durable in the files when they were read, or under way
                // when the transport started) wakes no one: then the files are read again
                // shortly. (The state is read before the queue is locked: this thread never
                // takes it inside.)
                let idle = streaming && gaps.is_empty() && {
                    let state = destination.state.lock();
                    state.offered && state.last_write_end == *next
                };
                let mut queue = destination.queue.lock();
                let linger_until = if streaming { linger(&queue, last_redo_sent) } else { None };
                if (queue.writes.is_empty() || linger_until.is_some())
                    && !queue.overflowed
                    && queue.wakes == wakes_seen
                    && broken.lock().is_none()
                {
                    let mut wait = if synchronized || idle {
                        HEARTBEAT_INTERVAL
                            .saturating_sub(last_beat.elapsed())
                            .max(Duration::from_millis(1))
                    } else {
                        Duration::from_millis(20)
                    };
                    if let Some(until) = linger_until {
                        // The log writer does not wake this thread for each write meanwhile.
                        wait = wait.min(until.saturating_duration_since(Instant::now()));
                        queue.lingering = true;
                    }
                    destination.wake.wait_for(&mut queue, wait);
                    queue.lingering = false;
                }
            }
        }
    }

    pub(super) fn heartbeat(
        &self,
        destination: &Destination,
        conn: &mut Conn,
    ) -> Result<(), String> {
        let durable = self.redo.durable_addr();
        let mut lag = destination.transport_lag_us();
        let phase = destination.state.lock().phase;
        // A forwarding standby passes on what it last heard of its primary: the primary's
        // clock and newest SCN, and what the primary confirmed durable. It says a standby is
        // synchronized, and names an observer, only as its primary's last heartbeat of its
        // current session did for that standby (a fast-start target behind this relay):
        // never more than the primary said.
        let caught_up_phase = matches!(phase, Phase::Synchronized | Phase::Streaming);
        let version_9 = conn.peer_version >= proto::RELAY_WORD_VERSION_MIN;
        let (primary_time_us, current_scn, caught_up, observer, relay) = match &self.identity.relay
        {
            Some(relay) => {
                let upstream = (relay.upstream)();
                // End to end: what this hop has not delivered (dated by the primary's clock, as
                // the writes carry it), or what this member itself lacks.
                lag = lag.max(upstream.transport_lag_us);
                let word = upstream.targets.iter().find(|word| word.member == destination.name);
                (
                    upstream.primary_time_us,
                    upstream.current_scn,
                    word.is_some_and(|word| word.caught_up),
                    word.map(|word| word.observer.clone()).unwrap_or_default(),
                    version_9.then(|| proto::RelayWord {
                        primary_silence_ms: upstream.primary_silence_ms,
                        targets: Vec::new(),
                    }),
                )
            }
            None => {
                let name = &destination.name;
                // A fast-start target shipped SYNC, or one behind a relay (shipped to directly
                // over an alternate route), is told it is synchronized only once it holds what
                // the primary acknowledged without it (`roles::fast_start::Primary`).
                let caught_up = caught_up_phase
                    && self.fast_start.as_ref().is_none_or(|fast_start| {
                        !fast_start.reach.is_target(name)
                            || !(destination.is_sync() || fast_start.reach.relay_of(name).is_some())
                            || fast_start.synchronized(name)
                    });
                // To a relay: the word for the fast-start targets behind it, which it passes on
                // (only to a version 9 relay; behind an older one they are never called
                // synchronized nor told of an observer, and so take no observer's failover).
                let targets = match &self.fast_start {
                    Some(fast_start) if version_9 => {
                        fast_start.relay_word(name, destination.is_sync(), caught_up_phase)
                    }
                    _ => Vec::new(),
                };
                (
                    now_unix_us(),
                    self.redo.next_scn().prev(),
                    caught_up,
                    self.fast_start
                        .as_ref()
                        .and_then(|fast_start| fast_start.announce_to(name))
                        .unwrap_or_default(),
                    (!targets.is_empty())
                        .then_some(proto::RelayWord { primary_silence_ms: 0, targets }),
                )
            }
        };
        let beat = proto::Heartbeat {
            primary_time_us,
            current_scn: current_scn.0,
            durable_scn: self.redo.confirmed_scn().0,
            current_seq: durable.seq.0,
            current_offset: durable.offset,
            transport_lag_us: lag,
            caught_up,
            observer,
            relay,
        };
        conn.send(&Message::Heartbeat(beat), destination.config().net_timeout)
            .map_err(|error| format!("sending a heartbeat: {error}"))
    }

    /// A SYNC destination to which everything the log writer wrote has been sent becomes
    /// synchronized: from the next write on, the log writer sends on the SYNC connection
    /// (opened beforehand, so that the switch itself is instantaneous). The standby orders a
    /// SYNC write after the control connection's bytes before it.
    pub(super) fn try_synchronize(
        &self,
        destination: &Arc<Destination>,
        next: RedoAddr,
        pending: &mut Option<Conn>,
    ) -> Result<bool, String> {
        if destination.state.lock().last_write_end != next {
            return Ok(false);
        }
        if pending.is_none() {
            let (conn, _, _, _) = self.connect(Channel::Sync, destination, false)?;
            *pending = Some(conn);
        }
        let mut state = destination.state.lock();
        let queue = destination.queue.lock();
        if state.last_write_end != next
            || !queue.writes.is_empty()
            || state.reconnect
            || state.restart
        {
            return Ok(false);
        }
        // (A reader still holding the last SYNC connection's receiving handle takes the state
        // lock to record what it reads: never wait for it here; try again shortly.)
        let (Some(mut send), Some(mut recv)) =
            (destination.sync_send.try_lock(), destination.sync_recv.try_lock())
        else {
            return Ok(false);
        };
        let conn = pending.take().expect("a SYNC connection was opened above");
        let reader = conn
            .try_clone()
            .map_err(|error| format!("cloning the SYNC connection for its reader: {error}"))?;
        state.sync_epoch += 1;
        state.sync_in_flight.clear();
        *send = Some((state.sync_epoch, conn));
        *recv = Some((state.sync_epoch, reader));
        drop((send, recv));
        state.phase = Phase::Synchronized;
        state.failures = 0;
        state.last_error = None;
        drop(queue);
        drop(state);
        tracing::info!(destination = %destination.name, "standby caught up; SYNCHRONIZED");
        self.note_synchronization();
        Ok(true)
    }
}

/// ASYNC batching: until when live writes wait in the queue for more to join them, if they
/// do. A streaming ASYNC destination sends redo at most once per `ASYNC_SEND_INTERVAL` (a
/// lone write after a quiet spell goes at once), unless `ASYNC_SEND_BYTES` are queued: at a
/// steady commit rate each send, each wake-up of this thread and each status the standby
/// sends back covers several writes instead of one. Only for a streaming ASYNC destination:
/// a SYNC one never waits here (catching up, it synchronizes as soon as it can).
fn linger(queue: &Queue, last_redo_sent: Option<Instant>) -> Option<Instant> {
    let until = last_redo_sent? + ASYNC_SEND_INTERVAL;
    if queue.overflowed || queue.bytes >= ASYNC_SEND_BYTES || until <= Instant::now() {
        return None;
    }
    Some(until)
}
