//! A destination's sender: the control connection's thread. It connects and handshakes,
//! catches the standby up from the log files and the archive, streams ASYNC redo from the
//! in-memory queue, ships missing logs (gap resolution), sends heartbeats, opens the SYNC
//! connection and hands it to the log writer once the standby has caught up, and reconnects
//! after `reopen` when anything fails.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use proto::{AckWanted, Channel, FrameCompressor, Hello, Message, Write};
use redo::ship::{LogWrite, ShipCursor, Shipment};
use redo::types::now_unix_us;
use redo::{LogSeq, RedoAddr, Scn};

use super::*;
use crate::auto_compression::AutoCompression;
use crate::compression::{Compression, CompressionScope};
use crate::config::BufferSize;
use crate::conn::{Conn, ConnError};

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
            // What queued meanwhile is read from the files after the reconnection.
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

    pub(super) fn hello(&self, channel: Channel, destination: &Destination) -> Message {
        let identity = self.redo.identity();
        let config = self.redo.config();
        Message::Hello(Hello {
            version: proto::PROTOCOL_VERSION,
            version_min: proto::PROTOCOL_VERSION_MIN,
            database_id: identity.database_id.0,
            incarnation: identity.incarnation.0,
            thread: identity.thread.0,
            channel,
            destination: destination.name.clone(),
            block_size: config.block_size,
            log_file_size: config.log_file_size,
            groups: config.groups,
            primary_time_us: now_unix_us(),
            member: self.identity.member.clone(),
            history: self.identity.history.clone(),
        })
    }

    /// Connects a channel and returns the standby's welcome, the round-trip time (that of the
    /// TCP handshake, without TLS or the standby's own work before it welcomes) and the send
    /// buffer set. With `sized`, the socket gets the destination's `send_buffer`: `auto` is
    /// 3 × bandwidth × that round trip, set once the handshake has measured it (no probe
    /// connection first: on a long link that was one more round trip before any redo moved).
    pub(super) fn connect(
        &self,
        channel: Channel,
        destination: &Destination,
        sized: bool,
    ) -> Result<(Conn, proto::Welcome, Duration, Option<u64>), String> {
        let config = &destination.config();
        let fixed = match config.send_buffer {
            BufferSize::Bytes(bytes) if sized => Some(bytes),
            _ => None,
        };
        let started = Instant::now();
        let conn = Conn::connect(&config.address, config.net_timeout, fixed, PAYLOAD_MAX)
            .map_err(|error| format!("connecting to {}: {error}", config.address))?;
        let rtt = started.elapsed();
        let mut send_buffer = fixed;
        if sized
            && config.send_buffer == BufferSize::Auto
            && let Some(bandwidth) = destination.bandwidth_bytes_per_s()
        {
            let bytes = ((3.0 * bandwidth * rtt.as_secs_f64()) as u64).max(64 << 10);
            conn.set_send_buffer(bytes).map_err(|error| {
                format!("sizing the send buffer to {}: {error}", config.address)
            })?;
            send_buffer = Some(bytes);
        }
        let mut conn = conn
            .secure(self.identity.tls.as_deref(), &config.name, config.net_timeout)
            .map_err(|error| format!("connecting to {}: {error}", config.address))?;
        conn.send(&self.hello(channel, destination), config.net_timeout)
            .map_err(|error| format!("handshake with {}: {error}", config.address))?;
        match conn.recv(Some(config.net_timeout)) {
            Ok(Message::Welcome(welcome)) => {
                if channel == Channel::Control {
                    (self.events)(TransportEvent::Followed { destination: config.name.clone() });
                }
                Ok((conn, welcome, rtt, send_buffer))
            }
            Ok(Message::Error(error)) => {
                let reason = format!(
                    "the standby at {} refused this primary: {}",
                    config.address, error.message
                );
                self.note_refusal(&error, &reason);
                Err(reason)
            }
            Ok(other) => Err(format!(
                "the standby at {} answered the handshake with {:?}",
                config.address,
                other.kind()
            )),
            Err(error) => Err(format!("handshake with {}: {error}", config.address)),
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
            state.sent = next;
            state.acknowledged = next;
            state.applied_scn = Scn(position.applied_scn);
            state.unacked.clear();
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

    /// The compressor for a session with a standby that welcomed with `welcome`: none if the
    /// destination compresses nothing or the standby is older than protocol version 3 (it
    /// would take the codec byte for a reserved one and misread the payload).
    fn compressor_for(
        &self,
        destination: &Destination,
        welcome: &proto::Welcome,
    ) -> Option<FrameCompressor> {
        let config = &destination.config();
        let codec = config.compression.codec()?;
        if welcome.version < COMPRESSION_VERSION_MIN {
            tracing::warn!(destination = %config.name, standby_version = welcome.version, "the standby speaks a protocol version without compression: redo goes uncompressed");
            return None;
        }
        match FrameCompressor::new(codec, config.compression_level) {
            Ok(compressor) => Some(compressor),
            Err(error) => {
                tracing::error!(destination = %config.name, %error, "cannot start the compressor: redo goes uncompressed");
                None
            }
        }
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

    /// What a standby said about itself: how far its logs are durable and applied.
    pub(super) fn note_standby_status(
        &self,
        destination: &Destination,
        status: &proto::StandbyStatus,
    ) {
        let mut state = destination.state.lock();
        let durable = RedoAddr {
            seq: LogSeq(status.position.current_seq),
            offset: status.position.current_offset,
        };
        destination.acknowledge(&mut state, durable);
        state.applied_scn = Scn(status.position.applied_scn);
        state.apply_lag_us = status.apply_lag_us;
        state.last_heard = Some(Instant::now());
        drop(state);
        let _progress = self.progress.lock();
        self.progressed.notify_all();
    }

    /// Reads what the standby sends on the control connection.
    pub(super) fn incoming(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        broken: &Mutex<Option<String>>,
    ) {
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            match conn.recv(Some(Duration::from_millis(500))) {
                Ok(Message::StandbyStatus(status)) => {
                    self.note_standby_status(destination, &status)
                }
                Ok(Message::ArchiveAck(ack)) => {
                    let mut state = destination.state.lock();
                    state.last_heard = Some(Instant::now());
                    if ack.complete {
                        state.gaps.retain(|seq| seq.0 != ack.seq);
                    }
                }
                Ok(Message::GapRequest(gap)) => {
                    let mut state = destination.state.lock();
                    for seq in gap.from_seq..=gap.to_seq.min(gap.from_seq.saturating_add(1000)) {
                        if !state.gaps.contains(&LogSeq(seq)) {
                            state.gaps.push(LogSeq(seq));
                        }
                    }
                    drop(state);
                    destination.notify();
                }
                Ok(Message::Error(error)) => {
                    let reason = format!("the standby reported: {}", error.message);
                    self.note_refusal(&error, &reason);
                    *broken.lock() = Some(reason);
                    destination.notify();
                    return;
                }
                Ok(other) => {
                    *broken.lock() =
                        Some(format!("unexpected {:?} from the standby", other.kind()));
                    destination.notify();
                    return;
                }
                Err(ConnError::TimedOut(_)) => {}
                Err(error) => {
                    *broken.lock() = Some(format!("control connection: {error}"));
                    destination.notify();
                    return;
                }
            }
        }
    }

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
        let mut last_sent = Instant::now();
        let mut gap_offset = 0u64;
        // The SYNC connection, opened while catching up and handed to the log writer once
        // synchronized.
        let mut pending_sync: Option<Conn> = None;
        // When redo was last sent from the queue or the files (ASYNC batching: `linger`).
        let mut last_redo_sent: Option<Instant> = None;
        loop {
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
                last_sent = Instant::now();
            } else {
                if destination.is_sync()
                    && !synchronized
                    && self.try_synchronize(destination, *next, &mut pending_sync)?
                {
                    // Tell the standby at once that it is synchronized (fast-start failover
                    // fails over only to a standby its primary called so).
                    self.heartbeat(destination, conn)?;
                    last_sent = Instant::now();
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
                if last_sent.elapsed() >= HEARTBEAT_INTERVAL {
                    self.heartbeat(destination, conn)?;
                    last_sent = Instant::now();
                }
                let mut queue = destination.queue.lock();
                let linger_until = if streaming { linger(&queue, last_redo_sent) } else { None };
                if (queue.writes.is_empty() || linger_until.is_some())
                    && !queue.overflowed
                    && broken.lock().is_none()
                {
                    let mut wait =
                        if synchronized { HEARTBEAT_INTERVAL } else { Duration::from_millis(20) };
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

    /// Hands the gaps to the archive connections (opening them the first time); if none can
    /// be opened, the gaps stay for the control connection.
    fn hand_to_archive_connections(
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
                let frame = Write {
                    write_id,
                    seq: seq.0,
                    offset,
                    kind: wire_kind(kind),
                    ack: AckWanted::None,
                    primary_time_us: now_unix_us(),
                    last_scn: 0,
                    primary_durable_scn: self.redo.durable_scn().0,
                    bytes,
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
        let durable = self.redo.durable_scn();
        let frame = |write: &LogWrite| {
            let write_id = self.next_write_id.fetch_add(1, Ordering::Relaxed);
            frame_of(write, write_id, AckWanted::None, durable)
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
        let bytes = frame.bytes.len() as u64;
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

    pub(super) fn heartbeat(
        &self,
        destination: &Destination,
        conn: &mut Conn,
    ) -> Result<(), String> {
        let durable = self.redo.durable_addr();
        let (lag, phase) = {
            let state = destination.state.lock();
            (destination.transport_lag_us(&state), state.phase)
        };
        let beat = proto::Heartbeat {
            primary_time_us: now_unix_us(),
            current_scn: self.redo.next_scn().prev().0,
            durable_scn: self.redo.durable_scn().0,
            current_seq: durable.seq.0,
            current_offset: durable.offset,
            transport_lag_us: lag,
            caught_up: matches!(phase, Phase::Synchronized | Phase::Streaming),
            observer: self
                .fast_start
                .as_ref()
                .and_then(|fast_start| fast_start.announce_to(&destination.name))
                .unwrap_or_default(),
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

    /// A standby's refusal that says this primary has been failed over is reported at once.
    pub(super) fn note_refusal(&self, error: &proto::ErrorMessage, reason: &str) {
        if error.code == proto::ErrorCode::NewerIncarnation {
            (self.events)(TransportEvent::Fenced {
                incarnation: error.incarnation,
                primary: error.primary.clone(),
                reason: reason.to_string(),
            });
        }
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

/// A session's archive connections (`max_connections` above 1, a standby of version 4).
pub(super) struct Parallel {
    enabled: bool,
    /// Where the control connection resumes once it reaches a log handed to the archive
    /// connections.
    skip_to: Option<RedoAddr>,
    shipper: Option<archive::ArchiveShipper>,
}

/// The redo bytes a message carries (what an uncompressed frame's payload mostly is).
fn redo_len(message: &Message) -> u64 {
    match message {
        Message::Write(write) => write.bytes.len() as u64,
        Message::ArchiveChunk(chunk) => chunk.bytes.len() as u64,
        _ => 0,
    }
}
