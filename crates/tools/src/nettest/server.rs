//! The nettest server: accepts many clients at once, one thread per connection up to a
//! bound, plays the standby (receive, optionally write + fdatasync, acknowledge), and keeps
//! serving everyone else whatever one client sends.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::NettestError;
use super::frame::{
    self, FrameError, HEADER_BYTES, Header, Hello, Kind, Mode, Status, Summary, Welcome,
};

/// Connections a server can be configured to serve at once.
pub const CONNECTIONS_LIMIT: u32 = 4096;
/// In ASYNC mode, the server acknowledges when nothing more is buffered, and otherwise at
/// least every this many messages, this many bytes, or this often: a busy stream must not
/// starve the client of acknowledgements (its throughput and latency figures come from
/// them).
const ACK_EVERY_MESSAGES_MAX: u64 = 256;
const ACK_EVERY_BYTES_MAX: u64 = 1 << 20;
const ACK_EVERY_MAX: Duration = Duration::from_millis(5);
/// Read buffer per connection.
const READ_BUFFER_BYTES: usize = 256 * 1024;

/// How a server runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address and port to listen on. Default: `0.0.0.0:5400`.
    pub bind: SocketAddr,
    /// With a path, clients may ask for `--write`: connection slot N writes its messages to
    /// `<path>.<N>`, preallocated to `file_bytes` and overwritten in place (circularly), with
    /// fdatasync before each acknowledgement. Default: none (writing refused).
    pub file: Option<PathBuf>,
    /// Size of each connection's file. Default: 64 MiB. Bounds: at least the largest
    /// message, at most 64 GiB.
    pub file_bytes: u64,
    /// Longest message accepted; a longer length field closes the connection.
    /// Default: 64 MiB. Bounds: 1..=1 GiB.
    pub message_bytes_max: u32,
    /// Clients served at once; more are told "busy" and closed. Default: 64.
    /// Bounds: 1..=4096.
    pub connections_max: u32,
    /// A client must complete its HELLO within this. Default: 10 s.
    pub handshake_timeout: Duration,
    /// A client silent for this long is disconnected. Default: 120 s.
    pub idle_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            bind: SocketAddr::from(([0, 0, 0, 0], super::DEFAULT_PORT)),
            file: None,
            file_bytes: 64 << 20,
            message_bytes_max: 64 << 20,
            connections_max: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

impl ServerConfig {
    pub fn validate(&self) -> Result<(), NettestError> {
        let invalid = |field, reason: String| Err(NettestError::Config { field, reason });
        if !(1..=frame::MESSAGE_BYTES_LIMIT).contains(&self.message_bytes_max) {
            return invalid(
                "max-message",
                format!("{} is outside 1..={}", self.message_bytes_max, frame::MESSAGE_BYTES_LIMIT),
            );
        }
        if self.file.is_some()
            && !(self.message_bytes_max as u64..=64 << 30).contains(&self.file_bytes)
        {
            return invalid(
                "file-size",
                format!(
                    "{} bytes: it must hold the largest message ({} bytes) and be at most 64 GiB",
                    self.file_bytes, self.message_bytes_max
                ),
            );
        }
        if !(1..=CONNECTIONS_LIMIT).contains(&self.connections_max) {
            return invalid(
                "max-connections",
                format!("{} is outside 1..={CONNECTIONS_LIMIT}", self.connections_max),
            );
        }
        if self.handshake_timeout.is_zero() || self.idle_timeout.is_zero() {
            return invalid("timeout", "timeouts must be longer than zero".into());
        }
        Ok(())
    }
}

/// What the server has seen, by outcome. Every connection ends in exactly one bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ServerStats {
    pub connections_accepted: u64,
    /// Tests that ran to their FINISH.
    pub tests_completed: u64,
    /// Turned away because every slot was taken.
    pub refused_busy: u64,
    /// Not our protocol (bad first frame, magic, version or request).
    pub refused_protocol: u64,
    /// A length field above the maximum.
    pub refused_too_long: u64,
    /// Connected and closed (or timed out) without a word: port scanners, health checks.
    pub closed_silent: u64,
    /// Went away in the middle of a frame or without FINISH.
    pub aborted: u64,
    /// Ended by an I/O error on our side (a failed write or fdatasync).
    pub failed: u64,
    pub messages: u64,
    pub bytes: u64,
}

#[derive(Default)]
struct Counters {
    connections_accepted: AtomicU64,
    tests_completed: AtomicU64,
    refused_busy: AtomicU64,
    refused_protocol: AtomicU64,
    refused_too_long: AtomicU64,
    closed_silent: AtomicU64,
    aborted: AtomicU64,
    failed: AtomicU64,
    messages: AtomicU64,
    bytes: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A live connection: a clone of its socket (to shut it down) and its thread.
type Slot = (TcpStream, Option<JoinHandle<()>>);

struct Shared {
    config: ServerConfig,
    counters: Counters,
    stopping: AtomicBool,
    /// Slot number → the live connection (a clone, to shut it down) and its thread.
    slots: Mutex<HashMap<u32, Slot>>,
}

/// A running server. Dropping it (or [`Server::shutdown`]) stops accepting, closes every
/// connection and joins every thread.
pub struct Server {
    local_addr: SocketAddr,
    listener: TcpListener,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds and starts serving on background threads.
    pub fn start(config: ServerConfig) -> Result<Server, NettestError> {
        config.validate()?;
        let listener = TcpListener::bind(config.bind).map_err(|source| NettestError::Io {
            what: format!("listen on {}", config.bind),
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| NettestError::Io {
            what: "read the listening address".into(),
            source,
        })?;
        let shared = Arc::new(Shared {
            config,
            counters: Counters::default(),
            stopping: AtomicBool::new(false),
            slots: Mutex::new(HashMap::new()),
        });
        let wake = listener
            .try_clone()
            .map_err(|source| NettestError::Io { what: "clone the listener".into(), source })?;
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("nettest-accept".into())
                .spawn(move || accept_loop(&listener, &shared))
                .map_err(|source| NettestError::Io { what: "spawn a thread".into(), source })?
        };
        tracing::info!(%local_addr, file = ?shared.config.file, "nettest server listening");
        Ok(Server { local_addr, listener: wake, shared, acceptor: Some(acceptor) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn stats(&self) -> ServerStats {
        let c = &self.shared.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ServerStats {
            connections_accepted: get(&c.connections_accepted),
            tests_completed: get(&c.tests_completed),
            refused_busy: get(&c.refused_busy),
            refused_protocol: get(&c.refused_protocol),
            refused_too_long: get(&c.refused_too_long),
            closed_silent: get(&c.closed_silent),
            aborted: get(&c.aborted),
            failed: get(&c.failed),
            messages: get(&c.messages),
            bytes: get(&c.bytes),
        }
    }

    /// Connections being served right now.
    pub fn connections(&self) -> usize {
        lock(&self.shared.slots).len()
    }

    /// Blocks until the acceptor ends (it only ends on shutdown or a listener failure).
    pub fn wait(mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }

    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the acceptor: on Linux, shutting a listening socket down fails a blocked
        // accept() with EINVAL. (Connecting to ourselves would not do: a server started
        // inside another network namespace is not reachable from this thread's.)
        // SAFETY: shutdown on a descriptor we own (a clone of the listener).
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let handles: Vec<JoinHandle<()>> = {
            let mut slots = lock(&self.shared.slots);
            slots
                .values_mut()
                .filter_map(|(stream, handle)| {
                    let _ = stream.shutdown(Shutdown::Both);
                    handle.take()
                })
                .collect()
        };
        for handle in handles {
            let _ = handle.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs a server in the foreground until the process ends.
pub fn serve(config: ServerConfig) -> Result<(), NettestError> {
    let server = Server::start(config)?;
    server.wait();
    Err(NettestError::Io {
        what: "go on accepting connections".into(),
        source: io::Error::other("the listener failed (see the log)"),
    })
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for accepted in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match accepted {
            Ok(stream) => stream,
            Err(error) => {
                // Out of descriptors or memory, a connection reset before accept: keep going,
                // but do not spin.
                tracing::warn!(%error, "nettest: accept failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        bump(&shared.counters.connections_accepted);
        let peer = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
        let mut slots = lock(&shared.slots);
        let slot = (0..shared.config.connections_max).find(|slot| !slots.contains_key(slot));
        let Some(slot) = slot else {
            drop(slots);
            bump(&shared.counters.refused_busy);
            tracing::warn!(
                %peer,
                max = shared.config.connections_max,
                "nettest: refusing a connection: all connection slots are busy"
            );
            refuse_busy(stream, shared.config.connections_max);
            continue;
        };
        let clone = match stream.try_clone() {
            Ok(clone) => clone,
            Err(error) => {
                tracing::warn!(%peer, %error, "nettest: cannot track a connection; closing it");
                continue;
            }
        };
        slots.insert(slot, (clone, None));
        let thread_shared = shared.clone();
        let spawned =
            std::thread::Builder::new().name(format!("nettest-conn-{slot}")).spawn(move || {
                serve_connection(stream, slot, &peer, &thread_shared);
                // Free the slot; our JoinHandle is dropped with it (the thread is ending).
                lock(&thread_shared.slots).remove(&slot);
            });
        match spawned {
            Ok(handle) => {
                if let Some(entry) = slots.get_mut(&slot) {
                    entry.1 = Some(handle);
                }
            }
            Err(error) => {
                slots.remove(&slot);
                tracing::warn!(%error, "nettest: cannot spawn a connection thread");
            }
        }
    }
}

fn refuse_busy(mut stream: TcpStream, connections_max: u32) {
    let welcome = Welcome {
        version: frame::VERSION,
        status: Status::Busy,
        message_bytes_max: 0,
        rcvbuf_bytes: 0,
        sndbuf_bytes: 0,
        reason: format!("all {connections_max} connection slots are busy; try again later"),
    };
    let mut out = Vec::new();
    frame::encode(&mut out, Kind::Welcome, 0, 0, &welcome.encode());
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let _ = stream.write_all(&out);
}

/// How a connection ended, for the log and the counters.
enum End {
    Completed,
    Silent(&'static str),
    Protocol(String),
    TooLong(String),
    Aborted(String),
    Failed(String),
}

fn serve_connection(stream: TcpStream, slot: u32, peer: &str, shared: &Shared) {
    let mut connection = match Connection::new(stream, slot, shared) {
        Ok(connection) => connection,
        Err(error) => {
            tracing::warn!(%peer, %error, "nettest: cannot set up a connection");
            bump(&shared.counters.failed);
            return;
        }
    };
    let end = connection.run();
    let counters = &shared.counters;
    match &end {
        End::Completed => {
            bump(&counters.tests_completed);
            tracing::info!(%peer, messages = connection.summary.messages, bytes = connection.summary.bytes, "nettest: test completed");
        }
        End::Silent(how) => {
            bump(&counters.closed_silent);
            tracing::info!(%peer, "nettest: connection {how} without a word (a port scanner?)");
        }
        End::Protocol(reason) => {
            bump(&counters.refused_protocol);
            tracing::warn!(%peer, "nettest: refusing a client that does not speak nettest: {reason}; closing the connection");
        }
        End::TooLong(reason) => {
            bump(&counters.refused_too_long);
            tracing::warn!(%peer, "nettest: refusing {reason}; closing the connection");
        }
        End::Aborted(reason) => {
            bump(&counters.aborted);
            tracing::info!(%peer, "nettest: client went away {reason}");
        }
        End::Failed(reason) => {
            bump(&counters.failed);
            tracing::warn!(%peer, "nettest: connection failed: {reason}");
        }
    }
    let reason = match end {
        End::Protocol(reason) | End::TooLong(reason) | End::Failed(reason) => reason,
        _ => return,
    };
    connection.send_error(&reason);
}

struct Connection<'a> {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    slot: u32,
    shared: &'a Shared,
    out: Vec<u8>,
    body: Vec<u8>,
    file: Option<File>,
    file_offset: u64,
    summary: Summary,
    sync_ns: Histogram<u64>,
}

/// The outcome of reading exactly `n` bytes.
enum Filled {
    All,
    /// End of stream after this many bytes.
    Eof(usize),
}

impl<'a> Connection<'a> {
    fn new(stream: TcpStream, slot: u32, shared: &'a Shared) -> io::Result<Connection<'a>> {
        stream.set_nodelay(true)?;
        let writer = stream.try_clone()?;
        writer.set_write_timeout(Some(shared.config.idle_timeout))?;
        Ok(Connection {
            reader: BufReader::with_capacity(READ_BUFFER_BYTES, stream),
            writer,
            slot,
            shared,
            out: Vec::with_capacity(64),
            body: Vec::new(),
            file: None,
            file_offset: 0,
            summary: Summary::default(),
            sync_ns: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
        })
    }

    fn fill(&mut self, length: usize) -> io::Result<Filled> {
        if self.body.len() < length {
            self.body.resize(length, 0);
        }
        let mut filled = 0;
        while filled < length {
            match self.reader.read(&mut self.body[filled..length]) {
                Ok(0) => return Ok(Filled::Eof(filled)),
                Ok(n) => filled += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(Filled::All)
    }

    fn send(&mut self, kind: Kind, seq: u64, body: &[u8]) -> io::Result<()> {
        self.out.clear();
        frame::encode(&mut self.out, kind, 0, seq, body);
        self.writer.write_all(&self.out)
    }

    fn send_error(&mut self, reason: &str) {
        let text = frame::truncate_utf8(reason, frame::CONTROL_BODY_BYTES_MAX as usize).to_string();
        let _ = self.writer.set_write_timeout(Some(Duration::from_millis(500)));
        let _ = self.send(Kind::Error, 0, text.as_bytes());
        let _ = self.writer.shutdown(Shutdown::Both);
    }

    fn run(&mut self) -> End {
        let config = &self.shared.config;
        let _ = self.reader.get_ref().set_read_timeout(Some(config.handshake_timeout));
        let hello = match self.handshake() {
            Ok(hello) => hello,
            Err(end) => return end,
        };
        let _ = self.reader.get_ref().set_read_timeout(Some(config.idle_timeout));
        match self.exchange(hello) {
            Ok(end) => end,
            Err(error) if is_timeout(&error) => {
                End::Aborted(format!("silent for {:?} (idle timeout)", config.idle_timeout))
            }
            // A client that closes with our acknowledgements unread resets the connection.
            Err(error) if is_reset(&error) => End::Aborted(format!("abruptly ({error})")),
            Err(error) => End::Failed(error.to_string()),
        }
    }

    fn handshake(&mut self) -> Result<Hello, End> {
        let config = &self.shared.config;
        let header = match self.fill(HEADER_BYTES) {
            Ok(Filled::All) => {
                <[u8; HEADER_BYTES]>::try_from(&self.body[..HEADER_BYTES]).expect("16 bytes")
            }
            Ok(Filled::Eof(0)) => return Err(End::Silent("closed")),
            Ok(Filled::Eof(n)) => {
                return Err(End::Protocol(format!(
                    "closed after {n} bytes, before a whole HELLO: {}",
                    printable(&self.body[..n])
                )));
            }
            Err(error) if is_timeout(&error) => {
                return Err(End::Silent("idle past the handshake timeout"));
            }
            Err(error) => return Err(End::Aborted(format!("during the handshake ({error})"))),
        };
        let first_bytes = printable(&header);
        let header = Header::decode(&header, config.message_bytes_max)
            .map_err(|error| End::Protocol(format!("{error}; first bytes {first_bytes}")))?;
        if header.kind != Kind::Hello {
            return Err(End::Protocol(format!("the first frame is {:?}, not Hello", header.kind)));
        }
        match self.fill(header.body_bytes as usize) {
            Ok(Filled::All) => {}
            Ok(Filled::Eof(_)) => return Err(End::Aborted("in the middle of its HELLO".into())),
            Err(error) => return Err(End::Aborted(format!("during the handshake ({error})"))),
        }
        let hello = Hello::decode(&self.body[..header.body_bytes as usize])
            .map_err(|error| End::Protocol(error.to_string()))?;
        let refusal = if hello.version != frame::VERSION {
            Some((
                Status::Version,
                format!(
                    "this server speaks nettest version {}, the client {}",
                    frame::VERSION,
                    hello.version
                ),
            ))
        } else if hello.message_bytes > config.message_bytes_max {
            Some((
                Status::Refused,
                format!(
                    "messages of {} bytes exceed this server's maximum of {} bytes (--max-message)",
                    hello.message_bytes, config.message_bytes_max
                ),
            ))
        } else if hello.write && config.file.is_none() {
            Some((
                Status::Refused,
                "this server was started without --file, so it cannot write".into(),
            ))
        } else {
            None
        };
        let (rcvbuf_bytes, sndbuf_bytes) = self.apply_buffers(hello.sockbuf_bytes);
        if refusal.is_none()
            && hello.write
            && let Err(error) = self.open_file()
        {
            return Err(End::Failed(error));
        }
        let (status, reason) = refusal.clone().unwrap_or((Status::Ok, String::new()));
        let welcome = Welcome {
            version: frame::VERSION,
            status,
            message_bytes_max: config.message_bytes_max,
            rcvbuf_bytes,
            sndbuf_bytes,
            reason: reason.clone(),
        };
        if let Err(error) = self.send(Kind::Welcome, 0, &welcome.encode()) {
            return Err(End::Aborted(format!("before our WELCOME ({error})")));
        }
        match refusal {
            Some(_) => Err(End::Protocol(reason)),
            None => Ok(hello),
        }
    }

    fn apply_buffers(&mut self, sockbuf_bytes: u32) -> (u32, u32) {
        let socket = socket2::SockRef::from(self.reader.get_ref());
        if sockbuf_bytes > 0 {
            let _ = socket.set_recv_buffer_size(sockbuf_bytes as usize);
            let _ = socket.set_send_buffer_size(sockbuf_bytes as usize);
        }
        let clamp =
            |size: io::Result<usize>| size.map(|s| s.min(u32::MAX as usize) as u32).unwrap_or(0);
        (clamp(socket.recv_buffer_size()), clamp(socket.send_buffer_size()))
    }

    fn open_file(&mut self) -> Result<(), String> {
        let config = &self.shared.config;
        let base = config.file.as_ref().expect("checked by the caller");
        let mut name = base.as_os_str().to_owned();
        name.push(format!(".{}", self.slot));
        let path = PathBuf::from(name);
        let file = crate::fileio::preallocate(&path, config.file_bytes, 0)
            .map_err(|error| format!("cannot prepare {}: {error}", path.display()))?;
        self.file = Some(file);
        Ok(())
    }

    /// Reads frames until FINISH (or the end), acknowledging as the mode requires.
    fn exchange(&mut self, hello: Hello) -> io::Result<End> {
        let message_bytes_max = self.shared.config.message_bytes_max;
        let mut unacked_seq: Option<u64> = None;
        let mut unacked_messages = 0u64;
        let mut unacked_bytes = 0u64;
        let mut last_ack = Instant::now();
        loop {
            let header = match self.fill(HEADER_BYTES)? {
                Filled::All => {
                    <[u8; HEADER_BYTES]>::try_from(&self.body[..HEADER_BYTES]).expect("16 bytes")
                }
                Filled::Eof(0) => return Ok(End::Aborted("without FINISH".into())),
                Filled::Eof(n) => {
                    return Ok(End::Aborted(format!(
                        "in the middle of a frame header ({n} of 16 bytes)"
                    )));
                }
            };
            let header = match Header::decode(&header, message_bytes_max) {
                Ok(header) => header,
                Err(error @ FrameError::TooLong { .. }) => {
                    return Ok(End::TooLong(error.to_string()));
                }
                Err(error) => return Ok(End::Protocol(error.to_string())),
            };
            let length = header.body_bytes as usize;
            match self.fill(length)? {
                Filled::All => {}
                Filled::Eof(n) => {
                    return Ok(End::Aborted(format!(
                        "in the middle of a {:?} message ({n} of {length} bytes)",
                        header.kind
                    )));
                }
            }
            match header.kind {
                Kind::Data if hello.mode != Mode::Rtt => {
                    self.store(length)
                        .map_err(|error| io::Error::other(format!("write to the file: {error}")))?;
                    self.summary.messages += 1;
                    self.summary.bytes += length as u64;
                    self.shared.counters.messages.fetch_add(1, Ordering::Relaxed);
                    self.shared.counters.bytes.fetch_add(length as u64, Ordering::Relaxed);
                    unacked_seq = Some(header.seq);
                    unacked_messages += 1;
                    unacked_bytes += length as u64;
                    let sync = header.flags & frame::FLAG_SYNC != 0 || hello.mode == Mode::Sync;
                    if sync
                        || self.reader.buffer().is_empty()
                        || unacked_messages >= ACK_EVERY_MESSAGES_MAX
                        || unacked_bytes >= ACK_EVERY_BYTES_MAX
                        || last_ack.elapsed() >= ACK_EVERY_MAX
                    {
                        self.acknowledge(header.seq)?;
                        unacked_seq = None;
                        unacked_messages = 0;
                        unacked_bytes = 0;
                        last_ack = Instant::now();
                    }
                }
                Kind::Ping if hello.mode == Mode::Rtt => self.send(Kind::Pong, header.seq, &[])?,
                Kind::Finish => {
                    if let Some(seq) = unacked_seq {
                        self.acknowledge(seq)?;
                    }
                    self.summary.syncs = self.sync_ns.len();
                    if self.summary.syncs > 0 {
                        self.summary.sync_ns_p50 = self.sync_ns.value_at_quantile(0.5);
                        self.summary.sync_ns_p99 = self.sync_ns.value_at_quantile(0.99);
                        self.summary.sync_ns_max = self.sync_ns.max();
                    }
                    let summary = self.summary.encode();
                    self.send(Kind::Summary, header.seq, &summary)?;
                    return Ok(End::Completed);
                }
                other => {
                    return Ok(End::Protocol(format!(
                        "a {other:?} frame is not expected from a {:?} client",
                        hello.mode
                    )));
                }
            }
        }
    }

    /// Writes the message just read to the file (if writing) at the next offset.
    fn store(&mut self, length: usize) -> io::Result<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let file_bytes = self.shared.config.file_bytes;
        if self.file_offset + length as u64 > file_bytes {
            self.file_offset = 0;
        }
        file.write_all_at(&self.body[..length], self.file_offset)?;
        self.file_offset += length as u64;
        Ok(())
    }

    /// Makes what was written durable (if writing) and acknowledges up to `seq`.
    fn acknowledge(&mut self, seq: u64) -> io::Result<()> {
        if let Some(file) = &self.file {
            let start = Instant::now();
            file.sync_data().map_err(|error| io::Error::other(format!("fdatasync: {error}")))?;
            let _ = self.sync_ns.record((start.elapsed().as_nanos() as u64).max(1));
        }
        self.send(Kind::Ack, seq, &[])
    }
}

fn is_reset(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

fn is_timeout(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// The first bytes a stranger sent, for a log line: printable ASCII as is, the rest escaped.
fn printable(bytes: &[u8]) -> String {
    let shown: String = bytes
        .iter()
        .take(16)
        .flat_map(|&byte| std::ascii::escape_default(byte))
        .map(char::from)
        .collect();
    format!("\"{shown}\"")
}
