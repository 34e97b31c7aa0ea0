//! Receiving on one connection: redo written into the standby logs in order (a SYNC write
//! waits for the control connection's bytes before it), acknowledgements (durable ones held
//! back to share one sync), heartbeats, whole logs, and the standby's status sent back.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proto::{ErrorCode, ErrorMessage, Hello, Message};
use redo::ship::{LogWrite, WriteKind};
use redo::types::now_unix_us;
use redo::{LogSeq, Scn};

use super::Inner;
use super::silence::SourceKey;
use crate::cascade::Cascade;
use crate::conn::{Conn, ConnError};

impl Inner {
    /// A primary has two connections to a standby; when it becomes synchronized it sends on
    /// the SYNC one right after the last bytes it sent on the control one. A write that
    /// arrives before those waits for them here (briefly: they are already in flight).
    fn wait_for_preceding(&self, write: &proto::Write, kind: WriteKind) {
        let start = match kind {
            WriteKind::OpenHeader => (write.seq, 0),
            WriteKind::Units => (write.seq, write.offset),
            WriteKind::ClosedHeader => {
                match redo::format::decode_header(&write.bytes, write.offset) {
                    Ok(redo::format::HeaderBlock::Closed(_, end)) => (write.seq, end.end_offset),
                    _ => return,
                }
            }
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut received = self.received.lock();
        loop {
            let position = self.redo.received_position();
            // Nothing received yet, a resend of what is here, or the next piece: go.
            if position.seq.0 == 0
                || (position.seq.0, position.offset) >= start
                || position.seq.0 > write.seq
            {
                return;
            }
            if Instant::now() >= deadline || self.shutdown.load(Ordering::Acquire) {
                return;
            }
            self.arrived.wait_for(&mut received, Duration::from_millis(50));
        }
    }

    pub(super) fn position(&self) -> proto::Position {
        let position = self.redo.standby_position();
        proto::Position {
            complete_through_seq: position.complete_through_seq.0,
            current_seq: position.next.seq.0,
            current_offset: position.next.offset,
            applied_scn: self.applied_scn().0,
        }
    }

    /// Makes everything received durable, then `acknowledge`s with the durable end; what
    /// this connection had written before the sync (`written`) is then durable, and a far
    /// sync counts it as done with (`received_through`, its applied SCN, which its primary's
    /// archive retention trusts: never redo that a crash of this member could lose).
    fn sync_then<T>(
        &self,
        written: Scn,
        acknowledge: impl FnOnce(redo::RedoAddr) -> T,
    ) -> redo::Result<T> {
        let acknowledged = self.redo.sync_received_then(acknowledge)?;
        self.received_through.fetch_max(written.0, Ordering::AcqRel);
        Ok(acknowledged)
    }

    fn status_message(&self) -> Message {
        let applied = self.applied_scn();
        let heard = self.heard.lock();
        Message::StandbyStatus(proto::StandbyStatus {
            position: self.position(),
            apply_lag_us: self.apply_lag_us(&heard, applied),
            standby_time_us: now_unix_us(),
        })
    }

    /// Receives until the primary goes away. On the SYNC channel the primary reads nothing
    /// but the acknowledgements of its writes, so the standby's status goes on the control
    /// channel only.
    pub(super) fn receive(&self, conn: &mut Conn, hello: &Hello) -> Result<(), String> {
        let channel = hello.channel;
        let mut unsynced = false;
        // A SYNC write wanting a durable acknowledgement, with more writes already buffered
        // behind it (the primary pipelines them): one sync and one acknowledgement for them
        // all, which covers every write before it on this connection.
        let mut pending_ack: Option<PendingAck> = None;
        // Writes received and not yet synced, for the members this one forwards to: offered
        // once the standby logs hold them durably (after each sync below).
        let mut held: Vec<Arc<LogWrite>> = Vec::new();
        // The newest SCN this connection wrote into the standby logs: durable, and a far
        // sync's "applied" (`received_through`), once a sync after it returns.
        let mut written_scn = Scn(0);
        // Whom this connection hears, and whether it has heard them lately (`silence`).
        let mut listening = Listening::join(self, SourceKey::of(hello, conn.peer));
        let mut bytes_seen = conn.received_bytes();
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                conn.refuse(ErrorMessage::new(
                    ErrorCode::ShuttingDown,
                    "the standby is shutting down or changing its role",
                ));
                return Ok(());
            }
            // Sync what was streamed (or acknowledged on receipt) once the primary pauses
            // (nothing more is buffered), and tell it how far this standby is.
            if unsynced && !conn.has_buffered_message() {
                // (Not listening while it syncs: no silence of its source counts meanwhile.)
                listening.working();
                let ack = pending_ack.take();
                self.sync_then(written_scn, |durable| {
                    ack.map_or(Ok(()), |ack| ack.send(conn, durable.offset))
                })
                .map_err(|error| format!("syncing the standby logs: {error}"))??;
                unsynced = false;
                self.forward(&mut held);
                if channel == proto::Channel::Control {
                    conn.send(&self.status_message(), Duration::from_secs(10))
                        .map_err(|error| error.to_string())?;
                }
            }
            listening.waiting();
            let wait = Duration::from_millis(if unsynced { 1 } else { 1000 });
            let waited_from = Instant::now();
            let message = match conn.recv(Some(wait)) {
                Ok(message) => message,
                Err(ConnError::TimedOut(_)) => {
                    let bytes = conn.received_bytes();
                    // A wait far longer than asked: this process was stopped or starved
                    // (SIGSTOP, a paused VM), and what the source sent meanwhile is still
                    // unread on its other connections. Not the source's silence.
                    let stalled = waited_from.elapsed() > wait + STALL_GRACE;
                    let silence = listening.silence(bytes != bytes_seen || stalled);
                    bytes_seen = bytes;
                    let limit = self.config.silence_timeout;
                    if silence > limit {
                        // A cut link (no FIN, no RST) would hold the connection, and the
                        // standby call its source connected, for as long as TCP retries.
                        conn.shutdown();
                        return Err(format!(
                            "nothing heard from '{}' for {:.1} s on any of its connections (silence_timeout {limit:?}): the link or the member is down; its {channel:?} connection is ended",
                            listening.source.sender(),
                            silence.as_secs_f64(),
                        ));
                    }
                    continue;
                }
                Err(ConnError::Closed) => return Ok(()),
                Err(ConnError::Protocol(error)) => {
                    let message = format!("malformed redo transport frame: {error}");
                    conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                    return Err(message);
                }
                Err(error) => return Err(error.to_string()),
            };
            {
                let mut heard = self.heard.lock();
                let now = Instant::now();
                heard.at = Some(now);
                if hello.relay_of.is_empty() {
                    heard.primary_at = heard.at;
                }
                listening.busy(&mut heard, now);
            }
            bytes_seen = conn.received_bytes();
            // A newer incarnation has been adopted (or learned of) since this connection's
            // hello: its primary has been failed over; nothing more of it is taken.
            let _following = self.following.read();
            // A failover target sealed this relay: what was received goes on to the members
            // it forwards to, and nothing more of this incarnation is taken.
            if let Some(refusal) = self.sealed(hello) {
                self.sync_then(written_scn, |durable| durable)
                    .map_err(|error| format!("syncing the standby logs: {error}"))?;
                self.forward(&mut held);
                conn.refuse(refusal.clone());
                return Err(refusal.message);
            }
            let newest = self.newest_known.load(Ordering::Acquire);
            if newest > hello.incarnation {
                let message = format!(
                    "this standby now follows incarnation {newest}; the primary '{}' of incarnation {} has been failed over",
                    hello.member, hello.incarnation
                );
                conn.refuse(ErrorMessage {
                    code: ErrorCode::NewerIncarnation,
                    message: message.clone(),
                    incarnation: newest,
                    primary: self.heard.lock().primary_member.clone().unwrap_or_default(),
                });
                return Err(message);
            }
            if channel == proto::Channel::Archive
                && !matches!(message, Message::ArchiveChunk(_) | Message::Error(_))
            {
                let message = format!(
                    "unexpected {:?} on an archive connection (it carries whole logs only)",
                    message.kind()
                );
                conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                return Err(message);
            }
            if let Some(ack) = &pending_ack
                && !matches!(&message, Message::Write(write) if write.ack == proto::AckWanted::Durable)
            {
                // Anything else is answered after the writes before it are acknowledged.
                self.sync_then(written_scn, |durable| ack.send(conn, durable.offset))
                    .map_err(|error| format!("syncing the standby logs: {error}"))??;
                pending_ack = None;
                self.forward(&mut held);
            }
            match message {
                Message::Write(write) => {
                    // The zero tail a version 5 primary leaves out goes back first: the
                    // standby log gets the write byte for byte as the primary wrote it.
                    let write = write.untrimmed();
                    let kind = match write.kind {
                        proto::WriteKind::Units => WriteKind::Units,
                        proto::WriteKind::OpenHeader => WriteKind::OpenHeader,
                        proto::WriteKind::ClosedHeader => WriteKind::ClosedHeader,
                    };
                    self.wait_for_preceding(&write, kind);
                    let received =
                        self.redo.receive(LogSeq(write.seq), write.offset, kind, &write.bytes);
                    {
                        let _received = self.received.lock();
                        self.arrived.notify_all();
                    }
                    let received = match received {
                        Ok(received) => received,
                        Err(error) => {
                            let message = error.to_string();
                            conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                            return Err(message);
                        }
                    };
                    self.redo.note_primary_durable(Scn(write.primary_durable_scn));
                    if self.cascade.as_ref().is_some_and(Cascade::is_forwarding) {
                        held.push(Arc::new(LogWrite {
                            seq: LogSeq(write.seq),
                            offset: write.offset,
                            kind,
                            bytes: Arc::from(write.bytes.as_slice()),
                            last_scn: Scn(write.last_scn),
                            time_us: write.primary_time_us,
                            durable_scn: Scn(write.primary_durable_scn),
                        }));
                    }
                    {
                        let mut heard = self.heard.lock();
                        heard.received_scn = heard.received_scn.max(Scn(write.last_scn));
                        heard.note(Scn(write.last_scn), write.primary_time_us);
                        heard.durable_scn = heard.durable_scn.max(Scn(write.primary_durable_scn));
                    }
                    written_scn = written_scn.max(Scn(write.last_scn));
                    // The durable acknowledgement of this write (and of `writes` in all).
                    let ack_for = |writes| PendingAck {
                        write_id: write.write_id,
                        seq: write.seq,
                        closed_end: received.closed.is_some().then_some(received.end_offset),
                        writes,
                    };
                    match write.ack {
                        proto::AckWanted::Durable
                            if conn.has_buffered_message()
                                && pending_ack
                                    .as_ref()
                                    .is_none_or(|ack| ack.writes < ACK_GROUP_MAX) =>
                        {
                            let writes = pending_ack.as_ref().map_or(0, |ack| ack.writes) + 1;
                            pending_ack = Some(ack_for(writes));
                            unsynced = true;
                        }
                        proto::AckWanted::Durable => {
                            pending_ack = None;
                            let ack = ack_for(1);
                            self.sync_then(written_scn, |durable| ack.send(conn, durable.offset))
                                .map_err(|error| format!("syncing the standby logs: {error}"))??;
                            unsynced = false;
                            self.forward(&mut held);
                        }
                        proto::AckWanted::Received => {
                            unsynced = true;
                            conn.send(
                                &Message::Ack(proto::Ack {
                                    write_id: write.write_id,
                                    seq: write.seq,
                                    end_offset: received.end_offset,
                                    durable: false,
                                }),
                                Duration::from_secs(10),
                            )
                            .map_err(|error| error.to_string())?;
                        }
                        proto::AckWanted::None => unsynced = true,
                    }
                }
                Message::Heartbeat(beat) => {
                    self.redo.note_primary_durable(Scn(beat.durable_scn));
                    {
                        let mut heard = self.heard.lock();
                        heard.primary_time_us = beat.primary_time_us;
                        heard.current_scn = Scn(beat.current_scn);
                        heard.durable_scn = Scn(beat.durable_scn);
                        heard.transport_lag_us = beat.transport_lag_us;
                        heard.caught_up = beat.caught_up;
                        heard.observer = (!beat.observer.is_empty()).then(|| beat.observer.clone());
                        // Through a relay (version 9): how long it had not heard the primary.
                        // From the primary: its word for the targets behind this member, which
                        // replaces the last (never more than its last heartbeat said).
                        let relayed = !hello.relay_of.is_empty();
                        heard.relay_silence = beat
                            .relay
                            .as_ref()
                            .filter(|_| relayed)
                            .map(|word| {
                                (Instant::now(), Duration::from_millis(word.primary_silence_ms))
                            })
                            .or(if relayed { None } else { heard.relay_silence });
                        if !relayed {
                            heard.relay_targets = beat
                                .relay
                                .as_ref()
                                .map(|word| word.targets.clone())
                                .unwrap_or_default();
                        }
                        heard.note(Scn(beat.current_scn), beat.primary_time_us);
                        heard.announce(Scn(beat.current_scn), roles::fast_start::Time::now());
                    }
                    self.sync_then(written_scn, |durable| durable)
                        .map_err(|error| format!("syncing the standby logs: {error}"))?;
                    unsynced = false;
                    self.forward(&mut held);
                    conn.send(&self.status_message(), Duration::from_secs(10))
                        .map_err(|error| error.to_string())?;
                }
                Message::ArchiveChunk(chunk) => {
                    match self.redo.receive_archive_chunk(
                        LogSeq(chunk.seq),
                        chunk.offset,
                        chunk.total_len,
                        &chunk.bytes,
                    ) {
                        Ok(complete) => {
                            if complete {
                                conn.send(
                                    &Message::ArchiveAck(proto::ArchiveAck {
                                        seq: chunk.seq,
                                        complete: true,
                                    }),
                                    Duration::from_secs(10),
                                )
                                .map_err(|error| error.to_string())?;
                            }
                        }
                        Err(error) => {
                            let message = error.to_string();
                            conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                            return Err(message);
                        }
                    }
                }
                Message::Error(error) => {
                    return Err(format!("the primary reported: {}", error.message));
                }
                other => {
                    let message = format!("unexpected {:?} from the primary", other.kind());
                    conn.refuse(ErrorMessage::new(ErrorCode::Malformed, message.clone()));
                    return Err(message);
                }
            }
        }
    }
}

impl Inner {
    /// Hands writes now durable here to the forwarder (cascading).
    fn forward(&self, held: &mut Vec<Arc<LogWrite>>) {
        if let Some(cascade) = &self.cascade {
            cascade.offer(held);
        }
        held.clear();
    }
}

/// One connection's part in its source's silence (`silence::Sources`): busy from its hello
/// until it waits for bytes, busy again with each message; gone when it ends.
struct Listening<'a> {
    inner: &'a Inner,
    source: SourceKey,
    busy: bool,
}

impl<'a> Listening<'a> {
    fn join(inner: &'a Inner, source: SourceKey) -> Listening<'a> {
        inner.heard.lock().sources.join(&source, Instant::now());
        Listening { inner, source, busy: true }
    }

    /// The connection waits for bytes (again).
    fn waiting(&mut self) {
        if self.busy {
            self.inner.heard.lock().sources.waiting(&self.source, Instant::now());
            self.busy = false;
        }
    }

    /// The connection is busy with what it received (not waiting for bytes).
    fn working(&mut self) {
        if !self.busy {
            self.inner.heard.lock().sources.busy(&self.source, Instant::now());
            self.busy = true;
        }
    }

    /// A message came (the caller holds `heard`).
    fn busy(&mut self, heard: &mut super::Heard, now: Instant) {
        if self.busy {
            heard.sources.heard(&self.source, now);
        } else {
            heard.sources.busy(&self.source, now);
            self.busy = true;
        }
    }

    /// How long its source has been silent, after noting that bytes of a message not whole
    /// yet came, or that the standby itself was not listening (`heard_now`).
    fn silence(&mut self, heard_now: bool) -> Duration {
        let now = Instant::now();
        let mut heard = self.inner.heard.lock();
        if heard_now {
            heard.sources.heard(&self.source, now);
        }
        heard.sources.silence(&self.source, now)
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.inner.heard.lock().sources.leave(&self.source, self.busy);
    }
}

/// How much longer than asked a wait for bytes may take before it counts as this standby's own
/// stall, not its source's silence.
const STALL_GRACE: Duration = Duration::from_secs(1);

/// Most SYNC writes one acknowledgement is held back for (their sync is shared).
const ACK_GROUP_MAX: u32 = 64;

/// A durable acknowledgement: sent once the standby logs are synced, at once or held back
/// while the writes behind it are received.
struct PendingAck {
    write_id: u64,
    seq: u64,
    /// Where the log ends, if the write closed it.
    closed_end: Option<u64>,
    writes: u32,
}

impl PendingAck {
    /// Sends it once the standby logs are synced through `durable_offset` of the current log.
    fn send(&self, conn: &mut Conn, durable_offset: u64) -> Result<(), String> {
        conn.send(
            &Message::Ack(proto::Ack {
                write_id: self.write_id,
                seq: self.seq,
                end_offset: self.closed_end.unwrap_or(durable_offset),
                durable: true,
            }),
            Duration::from_secs(10),
        )
        .map_err(|error| error.to_string())
    }
}
