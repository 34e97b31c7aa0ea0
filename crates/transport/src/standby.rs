//! The standby's side of redo transport: the receiver (RFS).
//!
//! It listens for its primary; each connection is served by its own thread. A primary of
//! another database, of an incompatible protocol version or with another log layout is refused
//! with a message saying which (and the primary logs it). Redo writes are checked unit by unit
//! and written into the standby logs at the primary's offsets; a write that asks for it is
//! acknowledged once received, or once durable. Heartbeats carry the primary's clock and SCNs,
//! from which the standby knows its lags even while the primary is idle.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use proto::{ErrorCode, ErrorMessage, LocalIdentity, Message};
use redo::ship::WriteKind;
use redo::types::now_unix_us;
use redo::{DatabaseId, Incarnation, LogSeq, RedoAddr, RedoLog, Scn};
use serde::{Deserialize, Serialize};

use crate::config::{BufferSize, StandbyConfig};
use crate::conn::{Conn, ConnError};
use crate::primary::PAYLOAD_MAX;

/// Redo connections a standby serves at once (a primary uses two).
const CONNECTIONS_MAX: usize = 16;
/// TCP keepalive of redo connections: a peer silent for 10 s is probed every 5 s, and the
/// connection ends after 3 unanswered probes (about 25 s).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// (SCN, primary time) points kept to compute the apply lag.
const HISTORY_MAX: usize = 100_000;

/// The standby's replication state for a person or a monitoring system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StandbyReplicationStatus {
    pub listen: String,
    /// The primary as configured (its client address).
    pub primary: Option<String>,
    /// The address the primary's redo comes from, while connected.
    pub primary_peer: Option<String>,
    pub connected: bool,
    /// Seconds since the primary was last heard from.
    pub last_heard_s: Option<f64>,
    /// The standby holds every log up to this sequence, with no gap.
    pub complete_through_seq: LogSeq,
    /// The standby holds redo durably up to here.
    pub received: RedoAddr,
    /// The last SCN in the redo received from the primary since this standby started.
    pub received_scn: Scn,
    pub applied_scn: Scn,
    /// What the primary last said: its newest and its durable SCN.
    pub primary_current_scn: Scn,
    pub primary_durable_scn: Scn,
    /// How far, in seconds of primary time, the redo received here trails what the primary
    /// generated (as the primary measures it, from its last heartbeat).
    pub transport_lag_s: f64,
    /// How far, in seconds of primary time, apply trails the redo received.
    pub apply_lag_s: f64,
    /// Primaries refused, and the last reason.
    pub refused: u64,
    pub last_error: Option<String>,
}

#[derive(Debug, Default)]
struct Heard {
    /// The peers of the connections that passed the handshake and are still served, oldest
    /// first: a peer that leaves is forgotten, so the status never names a connection that
    /// is gone (one that was refused after its hello, say) while the primary's remain.
    peers: Vec<SocketAddr>,
    at: Option<Instant>,
    primary_time_us: u64,
    current_scn: Scn,
    durable_scn: Scn,
    transport_lag_us: u64,
    received_scn: Scn,
    /// (last SCN, primary time) of redo received: when the primary generated which SCN.
    history: VecDeque<(Scn, u64)>,
    refused: u64,
    last_error: Option<String>,
}

impl Heard {
    fn primary_now_us(&self) -> u64 {
        match self.at {
            Some(at) => self.primary_time_us + at.elapsed().as_micros() as u64,
            None => now_unix_us(),
        }
    }

    fn note(&mut self, scn: Scn, primary_time_us: u64) {
        if scn.0 > 0 && self.history.back().is_none_or(|&(last, _)| scn > last) {
            if self.history.len() >= HISTORY_MAX {
                self.history.pop_front();
            }
            self.history.push_back((scn, primary_time_us));
        }
    }
}

/// What the receiver needs from the database: how far apply has come.
pub type AppliedScn = Arc<dyn Fn() -> Scn + Send + Sync>;

/// The standby's receiver.
pub struct StandbyService {
    inner: Arc<Inner>,
    local_addr: SocketAddr,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct Inner {
    redo: RedoLog,
    config: StandbyConfig,
    applied: AppliedScn,
    heard: Mutex<Heard>,
    shutdown: AtomicBool,
    /// Signalled after every write received, for a write that must wait for the bytes before
    /// it (a SYNC write overtaking the control connection's last ones).
    received: Mutex<()>,
    arrived: parking_lot::Condvar,
}

impl StandbyService {
    /// Binds the listener and starts accepting the primary.
    pub fn start(
        redo: RedoLog,
        config: StandbyConfig,
        applied: AppliedScn,
    ) -> std::io::Result<StandbyService> {
        let address: SocketAddr = config.listen.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("replication.standby.listen: '{}' is not ip:port", config.listen),
            )
        })?;
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        if let BufferSize::Bytes(bytes) = config.receive_buffer {
            // Set before listening, so that accepted connections get the window scale for it.
            socket.set_recv_buffer_size(bytes as usize)?;
        }
        socket.bind(&address.into())?;
        socket.listen(16)?;
        let listener: TcpListener = socket.into();
        let local_addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            redo,
            config,
            applied,
            heard: Mutex::new(Heard::default()),
            shutdown: AtomicBool::new(false),
            received: Mutex::new(()),
            arrived: parking_lot::Condvar::new(),
        });
        let accept = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("redo-rfs-listen".into())
                .spawn(move || inner.accept(listener))?
        };
        let status = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("redo-gap-watch".into())
                .spawn(move || inner.watch_gaps())?
        };
        tracing::info!(listen = %local_addr, "standby: waiting for the primary's redo");
        Ok(StandbyService { inner, local_addr, threads: Mutex::new(vec![accept, status]) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn status(&self) -> StandbyReplicationStatus {
        let inner = &self.inner;
        let position = inner.redo.standby_position();
        let applied = (inner.applied)();
        let heard = inner.heard.lock();
        StandbyReplicationStatus {
            listen: self.local_addr.to_string(),
            primary: inner.config.primary.clone(),
            primary_peer: heard.peers.last().map(SocketAddr::to_string),
            connected: !heard.peers.is_empty(),
            last_heard_s: heard.at.map(|at| at.elapsed().as_secs_f64()),
            complete_through_seq: position.complete_through_seq,
            received: position.next,
            received_scn: heard.received_scn,
            applied_scn: applied,
            primary_current_scn: heard.current_scn,
            primary_durable_scn: heard.durable_scn,
            transport_lag_s: heard.transport_lag_us as f64 / 1e6,
            apply_lag_s: inner.apply_lag_us(&heard, applied) as f64 / 1e6,
            refused: heard.refused,
            last_error: heard.last_error.clone(),
        }
    }

    pub fn stop(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        // Unblock accept().
        let _ = std::net::TcpStream::connect_timeout(&self.local_addr, Duration::from_millis(200));
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for StandbyService {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inner {
    fn apply_lag_us(&self, heard: &Heard, applied: Scn) -> u64 {
        // The oldest redo received and not applied: when did the primary generate it?
        match heard.history.iter().find(|&&(scn, _)| scn > applied) {
            Some(&(_, time_us)) => heard.primary_now_us().saturating_sub(time_us),
            None => 0,
        }
    }

    fn accept(self: Arc<Inner>, listener: TcpListener) {
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        for stream in listener.incoming() {
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            let stream = match stream {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::warn!(%error, "standby: accept failed");
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            // A primary that vanished without a FIN (a power cut, a long partition) must not
            // hold its receiver for ever: the kernel probes an idle connection and ends it.
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(KEEPALIVE_IDLE)
                .with_interval(KEEPALIVE_INTERVAL)
                .with_retries(KEEPALIVE_RETRIES);
            if let Err(error) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
                tracing::warn!(%error, "standby: cannot enable TCP keepalive on a redo connection");
            }
            let open = {
                let mut connections = connections.lock();
                connections.retain(|handle| !handle.is_finished());
                connections.len()
            };
            if open >= CONNECTIONS_MAX {
                // A primary needs two per destination; anything beyond is a reconnect storm
                // or someone else's: refused, and no thread started for it.
                if let Ok(mut conn) = Conn::new(stream, PAYLOAD_MAX) {
                    self.refuse(
                        &mut conn,
                        ErrorMessage {
                            code: ErrorCode::Busy,
                            message: format!(
                                "this standby already serves {open} redo connections, its limit"
                            ),
                        },
                    );
                }
                continue;
            }
            let inner = self.clone();
            let handle = std::thread::Builder::new().name("redo-rfs".into()).spawn(move || {
                let peer = stream.peer_addr().ok();
                match Conn::new(stream, PAYLOAD_MAX) {
                    Ok(conn) => inner.serve(conn),
                    Err(error) => {
                        tracing::debug!(?peer, %error, "standby: connection lost at once")
                    }
                }
            });
            match handle {
                Ok(handle) => connections.lock().push(handle),
                Err(error) => tracing::error!(%error, "standby: cannot start a receiver thread"),
            }
        }
        for handle in connections.lock().drain(..) {
            let _ = handle.join();
        }
    }

    fn refuse(&self, conn: &mut Conn, error: ErrorMessage) {
        tracing::error!(peer = %conn.peer, code = %error.code, message = %error.message, "standby: refused a primary");
        {
            let mut heard = self.heard.lock();
            heard.refused += 1;
            heard.last_error = Some(format!("refused {}: {}", conn.peer, error.message));
        }
        conn.refuse(error);
    }

    /// One connection from the primary.
    fn serve(&self, mut conn: Conn) {
        let hello = match conn.recv(Some(HELLO_TIMEOUT)) {
            Ok(Message::Hello(hello)) => hello,
            Ok(other) => {
                self.refuse(
                    &mut conn,
                    ErrorMessage {
                        code: ErrorCode::Malformed,
                        message: format!("expected a hello, got {:?}", other.kind()),
                    },
                );
                return;
            }
            Err(ConnError::Protocol(error)) => {
                self.refuse(
                    &mut conn,
                    ErrorMessage { code: ErrorCode::Malformed, message: error.to_string() },
                );
                return;
            }
            Err(error) => {
                tracing::debug!(peer = %conn.peer, %error, "standby: connection closed before its hello");
                return;
            }
        };
        let config = self.redo.config();
        let local = LocalIdentity {
            database_id: self.redo.identity().database_id.0,
            block_size: config.block_size,
            log_file_size: config.log_file_size,
        };
        if let Err(error) = proto::check_hello(&hello, &local) {
            self.refuse(&mut conn, error);
            return;
        }
        if let Err(error) =
            self.redo.adopt_identity(DatabaseId(hello.database_id), Incarnation(hello.incarnation))
        {
            self.refuse(
                &mut conn,
                ErrorMessage { code: ErrorCode::WrongDatabase, message: error.to_string() },
            );
            return;
        }
        if hello.channel == proto::Channel::Control
            && self.redo.config().groups < hello.groups.saturating_add(1)
        {
            tracing::warn!(
                standby_groups = self.redo.config().groups,
                primary_groups = hello.groups,
                "standby: fewer standby log groups than the primary's groups + 1; receiving may wait for the archiver"
            );
        }
        let welcome = Message::Welcome(proto::Welcome {
            version: proto::PROTOCOL_VERSION,
            database_id: hello.database_id,
            position: self.position(),
            standby_time_us: now_unix_us(),
        });
        if conn.send(&welcome, HELLO_TIMEOUT).is_err() {
            return;
        }
        tracing::info!(peer = %conn.peer, destination = %hello.destination, channel = ?hello.channel, "standby: primary connected");
        {
            let mut heard = self.heard.lock();
            heard.peers.push(conn.peer);
            heard.at = Some(Instant::now());
            heard.primary_time_us = hello.primary_time_us;
        }
        let result = self.receive(&mut conn, hello.channel);
        {
            let mut heard = self.heard.lock();
            if let Some(at) = heard.peers.iter().position(|peer| *peer == conn.peer) {
                heard.peers.remove(at);
            }
            if let Err(reason) = &result {
                heard.last_error = Some(reason.clone());
            }
        }
        match result {
            Ok(()) => tracing::info!(peer = %conn.peer, "standby: primary disconnected"),
            Err(reason) => {
                tracing::warn!(peer = %conn.peer, reason, "standby: connection from the primary ended")
            }
        }
    }

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

    fn position(&self) -> proto::Position {
        let position = self.redo.standby_position();
        proto::Position {
            complete_through_seq: position.complete_through_seq.0,
            current_seq: position.next.seq.0,
            current_offset: position.next.offset,
            applied_scn: (self.applied)().0,
        }
    }

    fn status_message(&self) -> Message {
        let applied = (self.applied)();
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
    fn receive(&self, conn: &mut Conn, channel: proto::Channel) -> Result<(), String> {
        let mut unsynced = false;
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                conn.refuse(ErrorMessage {
                    code: ErrorCode::ShuttingDown,
                    message: "the standby is shutting down".into(),
                });
                return Ok(());
            }
            // Sync what was streamed (or acknowledged on receipt) once the primary pauses
            // (nothing more is buffered), and tell it how far this standby is.
            if unsynced && !conn.has_buffered_message() {
                self.redo
                    .sync_received()
                    .map_err(|error| format!("syncing the standby logs: {error}"))?;
                unsynced = false;
                if channel == proto::Channel::Control {
                    conn.send(&self.status_message(), Duration::from_secs(10))
                        .map_err(|error| error.to_string())?;
                }
            }
            let message =
                match conn.recv(Some(Duration::from_millis(if unsynced { 1 } else { 1000 }))) {
                    Ok(message) => message,
                    Err(ConnError::TimedOut(_)) => continue,
                    Err(ConnError::Closed) => return Ok(()),
                    Err(ConnError::Protocol(error)) => {
                        let message = format!("malformed redo transport frame: {error}");
                        conn.refuse(ErrorMessage {
                            code: ErrorCode::Malformed,
                            message: message.clone(),
                        });
                        return Err(message);
                    }
                    Err(error) => return Err(error.to_string()),
                };
            self.heard.lock().at = Some(Instant::now());
            match message {
                Message::Write(write) => {
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
                            conn.refuse(ErrorMessage {
                                code: ErrorCode::Malformed,
                                message: message.clone(),
                            });
                            return Err(message);
                        }
                    };
                    self.redo.note_primary_durable(Scn(write.primary_durable_scn));
                    {
                        let mut heard = self.heard.lock();
                        heard.received_scn = heard.received_scn.max(Scn(write.last_scn));
                        heard.note(Scn(write.last_scn), write.primary_time_us);
                        heard.durable_scn = heard.durable_scn.max(Scn(write.primary_durable_scn));
                    }
                    match write.ack {
                        proto::AckWanted::Durable => {
                            let durable = self
                                .redo
                                .sync_received()
                                .map_err(|error| format!("syncing the standby logs: {error}"))?;
                            unsynced = false;
                            let end = if received.closed.is_some() {
                                received.end_offset
                            } else {
                                durable.offset
                            };
                            conn.send(
                                &Message::Ack(proto::Ack {
                                    write_id: write.write_id,
                                    seq: write.seq,
                                    end_offset: end,
                                    durable: true,
                                }),
                                Duration::from_secs(10),
                            )
                            .map_err(|error| error.to_string())?;
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
                        heard.note(Scn(beat.current_scn), beat.primary_time_us);
                    }
                    self.redo
                        .sync_received()
                        .map_err(|error| format!("syncing the standby logs: {error}"))?;
                    unsynced = false;
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
                            conn.refuse(ErrorMessage {
                                code: ErrorCode::Malformed,
                                message: message.clone(),
                            });
                            return Err(message);
                        }
                    }
                }
                Message::Error(error) => {
                    return Err(format!("the primary reported: {}", error.message));
                }
                other => {
                    let message = format!("unexpected {:?} from the primary", other.kind());
                    conn.refuse(ErrorMessage {
                        code: ErrorCode::Malformed,
                        message: message.clone(),
                    });
                    return Err(message);
                }
            }
        }
    }

    /// Keeps the lags' history short, and notices a gap apply waits on (logs between what is
    /// complete and what is being received); the primary ships those when it reconnects, and
    /// this logs them meanwhile.
    fn watch_gaps(self: Arc<Inner>) {
        let mut reported: Option<(LogSeq, LogSeq)> = None;
        while !self.shutdown.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(200));
            let applied = (self.applied)();
            {
                let mut heard = self.heard.lock();
                while heard.history.len() > 1
                    && heard.history.get(1).is_some_and(|&(scn, _)| scn <= applied)
                {
                    heard.history.pop_front();
                }
            }
            let position = self.redo.standby_position();
            let gap = (position.complete_through_seq.next(), position.next.seq.prev_seq());
            if gap.0 <= gap.1 && reported != Some(gap) {
                tracing::warn!(from = %gap.0, to = %gap.1, "standby: logs missing (a gap); they are fetched from the primary's archive");
                reported = Some(gap);
            }
        }
    }
}
