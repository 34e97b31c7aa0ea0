//! A framed, blocking connection: whole messages in and out, every wait bounded; over plain TCP
//! or mutual TLS (`secure`, `accept_tls`).
//!
//! Over TLS the rustls state is shared by the handles of one connection (`try_clone`: the
//! primary's control connection has a thread that reads and one that writes), under a lock
//! held only to encrypt or decrypt, never across a socket wait: the reader waits on the socket
//! by itself and takes the lock to decrypt what came; the writer encrypts under the lock and
//! sends outside it, in order, under a second lock of its own.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use proto::{Decoder, ErrorMessage, FrameCompressor, Message, ProtoError};
use rustls::pki_types::CertificateDer;

use crate::compression::{CompressionCounters, thread_cpu_ns};

/// Why a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    #[error("the peer closed the connection")]
    Closed,
    #[error("the peer sent something that is not redo transport: {0}")]
    Protocol(#[from] ProtoError),
    #[error("the peer refused: {}: {}", .0.code, .0.message)]
    Refused(ErrorMessage),
    #[error("unexpected {0} message")]
    Unexpected(&'static str),
    /// The TLS handshake or a TLS record failed: the sentence says which certificate was
    /// refused and why, when that was the cause.
    #[error("{0}")]
    Tls(String),
}

/// The TLS state of one connection, shared by its handles.
struct TlsShared {
    state: Mutex<rustls::Connection>,
    /// Held across encrypting and sending, so that records reach the socket in order.
    sending: Mutex<()>,
    /// The peer's certificate (verified against the CA in the handshake).
    peer_certificate: Option<CertificateDer<'static>>,
    /// What the peer was expected to be (for error messages).
    peer_name: String,
}

enum Stream {
    Plain(TcpStream),
    Tls { socket: TcpStream, shared: Arc<TlsShared> },
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Stream::Plain(socket) | Stream::Tls { socket, .. } => socket,
        }
    }
}

/// One side of a connection: reads and writes whole messages.
pub struct Conn {
    stream: Stream,
    /// Bytes received and not yet decoded are `buffer[start..end]`; `buffer[end..]` is room
    /// already allocated and initialised, so that a read does not clear it again (a 256 KiB
    /// memset per message read was a tenth of the primary's transport CPU).
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    decoder: Decoder,
    scratch: Vec<u8>,
    /// Where compressed frames received are counted (bytes, CPU time decompressing).
    decompression: Option<Arc<CompressionCounters>>,
    /// Where the bytes of the frames sent are counted (`count_sent`), with every handle of
    /// this connection and every other connection counting there.
    sent: Option<Arc<AtomicU64>>,
    /// Bytes read from the socket by this handle (raw: TLS records count as they come), whole
    /// messages or not: a large frame on a slow link is the peer talking too.
    received_bytes: u64,
    timeouts: Arc<Timeouts>,
    pub peer: SocketAddr,
    /// The protocol version the peer's handshake said it speaks (0 until known): what may be
    /// sent to it (a version 5 `TrimmedWrite`, say).
    pub peer_version: u16,
}

/// The socket's receive and send timeouts (`SO_RCVTIMEO`, `SO_SNDTIMEO`) as last set, shared
/// by the handles of one socket (`try_clone`: the options belong to the socket): a send or a
/// receive with the timeout already set makes no `setsockopt`, which was one system call more
/// for every message an ASYNC sender and its status reader handle. Each is
/// [`TIMEOUT_UNKNOWN`], 0 (none: wait for ever), or nanoseconds.
#[derive(Debug)]
struct Timeouts {
    read: AtomicU64,
    write: AtomicU64,
}

const TIMEOUT_UNKNOWN: u64 = u64::MAX;

impl Timeouts {
    fn unknown() -> Arc<Timeouts> {
        Arc::new(Timeouts {
            read: AtomicU64::new(TIMEOUT_UNKNOWN),
            write: AtomicU64::new(TIMEOUT_UNKNOWN),
        })
    }
}

fn timeout_code(timeout: Option<Duration>) -> u64 {
    timeout.map_or(0, |timeout| {
        u64::try_from(timeout.as_nanos())
            .unwrap_or(TIMEOUT_UNKNOWN - 1)
            .clamp(1, TIMEOUT_UNKNOWN - 1)
    })
}

const READ_CHUNK: usize = 256 << 10;
/// Plaintext encrypted per lock hold when sending over TLS.
const TLS_SEND_CHUNK: usize = 256 << 10;

impl Conn {
    pub fn new(stream: TcpStream, payload_max: usize) -> std::io::Result<Conn> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        Ok(Conn {
            stream: Stream::Plain(stream),
            buffer: Vec::new(),
            start: 0,
            end: 0,
            decoder: Decoder { payload_max },
            scratch: Vec::new(),
            decompression: None,
            sent: None,
            received_bytes: 0,
            timeouts: Timeouts::unknown(),
            peer,
            peer_version: 0,
        })
    }

    /// Connects to `address` within `timeout`, with the send buffer given (or the kernel's).
    pub fn connect(
        address: &str,
        timeout: Duration,
        send_buffer: Option<u64>,
        payload_max: usize,
    ) -> Result<Conn, ConnError> {
        Conn::connect_with(address, timeout, send_buffer, None, payload_max)
    }

    /// As `connect`, with the TCP congestion control given (or the host's), set before the
    /// handshake: the kernel sets a connection up for its congestion control when it is made
    /// (BBR turns on pacing; ECN is negotiated then), and a name it lacks then fails before
    /// any packet is sent.
    pub fn connect_with(
        address: &str,
        timeout: Duration,
        send_buffer: Option<u64>,
        congestion: Option<&str>,
        payload_max: usize,
    ) -> Result<Conn, ConnError> {
        let target = address.to_socket_addrs()?.next().ok_or_else(|| {
            std::io::Error::new(ErrorKind::NotFound, format!("{address} resolves to no address"))
        })?;
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(target),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        if let Some(bytes) = send_buffer {
            socket.set_send_buffer_size(bytes as usize)?;
        }
        if let Some(name) = congestion {
            set_congestion(&socket, name).map_err(std::io::Error::other)?;
        }
        socket.connect_timeout(&target.into(), timeout)?;
        Ok(Conn::new(socket.into(), payload_max)?)
    }

    /// This connection over mutual TLS if `tls` is given (the peer's certificate must be for
    /// `peer_name`), within `timeout`; as it is otherwise.
    pub fn secure(
        self,
        tls: Option<&tls::RedoTls>,
        peer_name: &str,
        timeout: Duration,
    ) -> Result<Conn, ConnError> {
        let Some(tls) = tls else { return Ok(self) };
        let connection = tls.client(peer_name).map_err(ConnError::Tls)?;
        self.handshake(rustls::Connection::Client(connection), peer_name, timeout)
    }

    /// A connection a peer opened to this process, over mutual TLS: the handshake, within
    /// `timeout`. The peer's name is not known yet: `proves` checks what it claims later.
    pub fn accept_tls(self, tls: &tls::RedoTls, timeout: Duration) -> Result<Conn, ConnError> {
        let connection = tls.server().map_err(ConnError::Tls)?;
        self.handshake(rustls::Connection::Server(connection), "the peer", timeout)
    }

    fn handshake(
        mut self,
        mut connection: rustls::Connection,
        peer_name: &str,
        timeout: Duration,
    ) -> Result<Conn, ConnError> {
        let Stream::Plain(mut socket) = self.stream else {
            return Err(ConnError::Tls("the connection is already over TLS".into()));
        };
        let deadline = Instant::now() + timeout;
        let who = format!("{peer_name} at {}", self.peer);
        while connection.is_handshaking() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnError::TimedOut(timeout));
            }
            socket.set_read_timeout(Some(left))?;
            socket.set_write_timeout(Some(left))?;
            self.timeouts.read.store(timeout_code(Some(left)), Ordering::Relaxed);
            self.timeouts.write.store(timeout_code(Some(left)), Ordering::Relaxed);
            if let Err(error) = connection.complete_io(&mut socket) {
                return Err(tls_io_error(error, &who, peer_name, timeout));
            }
        }
        // What the peer's last handshake flight carried beyond it stays in rustls's buffers:
        // `recv` drains them before it waits on the socket.
        let peer_certificate = connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| c.clone().into_owned());
        self.stream = Stream::Tls {
            socket,
            shared: Arc::new(TlsShared {
                state: Mutex::new(connection),
                sending: Mutex::new(()),
                peer_certificate,
                peer_name: peer_name.to_string(),
            }),
        };
        Ok(self)
    }

    /// Waits until the peer has sent something (or closed), within `timeout`; before any
    /// byte is read.
    pub fn wait_for_bytes(&self, timeout: Duration) -> Result<(), ConnError> {
        self.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let socket = self.stream.socket();
        match socket.peek(&mut [0u8; 1]) {
            Ok(0) => Err(ConnError::Closed),
            Ok(_) => Ok(()),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(ConnError::TimedOut(timeout))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The socket's file descriptor (to wait on several connections at once with `poll`).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.stream.socket().as_raw_fd()
    }

    /// Sets the socket's send buffer (after the connection is made: a send buffer, unlike a
    /// receive buffer, takes no part in the handshake's window scaling).
    pub fn set_send_buffer(&self, bytes: u64) -> std::io::Result<()> {
        let socket = socket2::SockRef::from(self.stream.socket());
        socket.set_send_buffer_size(usize::try_from(bytes).unwrap_or(usize::MAX))
    }

    /// The socket's TCP congestion control, if the kernel says.
    pub fn congestion(&self) -> Option<String> {
        let socket = socket2::SockRef::from(self.stream.socket());
        let name = socket.tcp_congestion().ok()?;
        let end = name.iter().position(|&byte| byte == 0).unwrap_or(name.len());
        Some(String::from_utf8_lossy(&name[..end]).into_owned()).filter(|name| !name.is_empty())
    }

    /// Lets a blocking send return (and `poll` say writable) only once fewer than `bytes` of
    /// what was sent are still unsent in the socket (`TCP_NOTSENT_LOWAT`); what is in flight
    /// on the link does not count. A connection that shares work with others then takes its
    /// next piece when it can send it, instead of queueing a send buffer's worth behind a
    /// slow window.
    pub fn set_unsent_limit(&self, bytes: u32) -> std::io::Result<()> {
        let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: TCP_NOTSENT_LOWAT reads one int from the pointer, which outlives the call.
        let result = unsafe {
            libc::setsockopt(
                self.raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if result == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    }

    /// Whether the socket's send buffer has room for a message carrying `bytes` (with framing
    /// and TLS records' overhead) now, so that sending it will not block.
    pub fn has_send_room(&self, bytes: usize) -> bool {
        let socket = socket2::SockRef::from(self.stream.socket());
        let Ok(capacity) = socket.send_buffer_size() else { return false };
        let mut queued: libc::c_int = 0;
        // SAFETY: SIOCOUTQ writes one int: the bytes in the socket's send queue.
        let result = unsafe { libc::ioctl(self.raw_fd(), libc::TIOCOUTQ, &mut queued) };
        if result != 0 {
            return false;
        }
        // (Linux reports twice the buffer it allots for data; half of it is usable.)
        let usable = capacity / 2;
        queued as usize + bytes + bytes / 16 + 1024 <= usable
    }

    /// Whether the connection runs over TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.stream, Stream::Tls { .. })
    }

    /// Whether the peer's certificate (verified in the TLS handshake) is for `name`. False on a
    /// plain connection.
    pub fn peer_proves(&self, name: &str) -> bool {
        match &self.stream {
            Stream::Tls { shared, .. } => shared
                .peer_certificate
                .as_ref()
                .is_some_and(|certificate| tls::proves(certificate, name)),
            Stream::Plain(_) => false,
        }
    }

    /// The largest frame payload accepted from now on.
    pub fn set_payload_max(&mut self, payload_max: usize) {
        self.decoder.payload_max = payload_max;
    }

    /// A second handle on the same socket, for a thread that only reads (or only writes).
    pub fn try_clone(&self) -> std::io::Result<Conn> {
        let stream = match &self.stream {
            Stream::Plain(socket) => Stream::Plain(socket.try_clone()?),
            Stream::Tls { socket, shared } => {
                Stream::Tls { socket: socket.try_clone()?, shared: shared.clone() }
            }
        };
        Ok(Conn {
            stream,
            buffer: Vec::new(),
            start: 0,
            end: 0,
            decoder: self.decoder,
            scratch: Vec::new(),
            decompression: self.decompression.clone(),
            sent: self.sent.clone(),
            received_bytes: 0,
            timeouts: self.timeouts.clone(),
            peer: self.peer,
            peer_version: self.peer_version,
        })
    }

    /// Counts the compressed frames received from now on in `counters`.
    pub fn count_decompression(&mut self, counters: Arc<CompressionCounters>) {
        self.decompression = Some(counters);
    }

    /// Counts the bytes of the frames sent from now on in `counter` (frame headers included,
    /// payloads as sent: trimmed, compressed; before TLS).
    pub fn count_sent(&mut self, counter: Arc<AtomicU64>) {
        self.sent = Some(counter);
    }

    /// Sends one message, giving up after `timeout`.
    pub fn send(&mut self, message: &Message, timeout: Duration) -> Result<(), ConnError> {
        self.scratch.clear();
        message.encode(&mut self.scratch);
        self.send_scratch(timeout)
    }

    /// Sends several messages in one go (one system call on a plain connection), giving up
    /// after `timeout`: the peer reads them in order as if sent one by one.
    pub fn send_all(&mut self, messages: &[Message], timeout: Duration) -> Result<(), ConnError> {
        self.scratch.clear();
        for message in messages {
            message.encode(&mut self.scratch);
        }
        self.send_scratch(timeout)
    }

    /// Sends one message through `compressor` (compressed if its kind carries redo and that
    /// makes it smaller), counting it in `counters`; giving up after `timeout`. Only for a
    /// peer whose welcome said protocol version 3 or later. Returns the frame's sizes and the
    /// thread CPU time the codec took, in nanoseconds.
    pub fn send_compressed(
        &mut self,
        message: &Message,
        compressor: &mut FrameCompressor,
        counters: &CompressionCounters,
        timeout: Duration,
    ) -> Result<(proto::Encoded, u64), ConnError> {
        self.scratch.clear();
        let started = thread_cpu_ns();
        let encoded = compressor.encode(message, &mut self.scratch);
        let cpu_ns = thread_cpu_ns().saturating_sub(started);
        counters.add(encoded.payload_len, encoded.wire_len, cpu_ns);
        self.send_scratch(timeout)?;
        Ok((encoded, cpu_ns))
    }

    /// Sets the socket's receive timeout, unless it is set so already.
    fn set_read_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        let code = timeout_code(timeout);
        if self.timeouts.read.load(Ordering::Relaxed) != code {
            // Unknown while it changes, so that no other handle takes it as set meanwhile.
            self.timeouts.read.store(TIMEOUT_UNKNOWN, Ordering::Relaxed);
            self.stream.socket().set_read_timeout(timeout)?;
            self.timeouts.read.store(code, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sets the socket's send timeout, unless it is set so already.
    fn set_write_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        let code = timeout_code(Some(timeout));
        if self.timeouts.write.load(Ordering::Relaxed) != code {
            self.timeouts.write.store(TIMEOUT_UNKNOWN, Ordering::Relaxed);
            self.stream.socket().set_write_timeout(Some(timeout))?;
            self.timeouts.write.store(code, Ordering::Relaxed);
        }
        Ok(())
    }

    fn send_scratch(&mut self, timeout: Duration) -> Result<(), ConnError> {
        self.write_scratch(timeout)?;
        if let Some(sent) = &self.sent {
            sent.fetch_add(self.scratch.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    fn write_scratch(&mut self, timeout: Duration) -> Result<(), ConnError> {
        self.set_write_timeout(timeout)?;
        let timed_out = |error: std::io::Error| {
            if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
                ConnError::TimedOut(timeout)
            } else {
                error.into()
            }
        };
        match &self.stream {
            Stream::Plain(socket) => {
                let mut socket = socket;
                socket.write_all(&self.scratch).map_err(timed_out)
            }
            Stream::Tls { socket, shared } => {
                let _sending = shared.sending.lock();
                let mut records = Vec::new();
                for chunk in self.scratch.chunks(TLS_SEND_CHUNK) {
                    records.clear();
                    {
                        let mut state = shared.state.lock();
                        let mut written = 0;
                        while written < chunk.len() {
                            written += state.writer().write(&chunk[written..])?;
                            while state.wants_write() {
                                state.write_tls(&mut records)?;
                            }
                        }
                    }
                    let mut socket = socket;
                    socket.write_all(&records).map_err(timed_out)?;
                }
                Ok(())
            }
        }
    }

    /// Bytes this handle has read from the socket so far, parts of messages included.
    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    /// Whether a whole message is already buffered (reading it will not block).
    pub fn has_buffered_message(&self) -> bool {
        matches!(self.decoder.frame_len(&self.buffer[self.start..self.end]), Ok(Some(total)) if total <= self.end - self.start)
    }

    /// Receives one message, giving up after `timeout` (`None`: wait forever).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Message, ConnError> {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        // The first wait on the socket takes the whole timeout (most often set so already:
        // no system call), later ones what is left of it.
        let mut first_wait = true;
        loop {
            let compressed = match &self.decompression {
                Some(_) => proto::compressed_sizes(&self.buffer[self.start..self.end]),
                None => None,
            };
            let started = if compressed.is_some() { thread_cpu_ns() } else { 0 };
            if let Some((message, used)) =
                self.decoder.decode(&self.buffer[self.start..self.end])?
            {
                if let (Some(counters), Some((wire, uncompressed))) =
                    (&self.decompression, compressed)
                {
                    counters.add(uncompressed, wire, thread_cpu_ns().saturating_sub(started));
                }
                self.start += used;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                return Ok(message);
            }
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            // Plaintext rustls already decrypted (what came with the handshake, or with the
            // last record read) is taken before waiting on the socket.
            if self.take_plaintext()? {
                continue;
            }
            let wait = match deadline {
                Some(_) if first_wait && !timeout.is_some_and(|timeout| timeout.is_zero()) => {
                    timeout
                }
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ConnError::TimedOut(timeout.expect("deadline from timeout")));
                    }
                    Some(left)
                }
                None => None,
            };
            first_wait = false;
            self.set_read_timeout(wait)?;
            match self.read_socket() {
                Ok(true) => {}
                Ok(false) => return Err(ConnError::Closed),
                Err(ConnError::Io(error))
                    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    return Err(ConnError::TimedOut(timeout.unwrap_or_default()));
                }
                // A signal (SIGSTOP then SIGCONT, say) is no fault of the peer: read again.
                Err(ConnError::Io(error)) if error.kind() == ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// One read from the socket into the buffer (decrypted, over TLS). False at the end of
    /// the stream.
    fn read_socket(&mut self) -> Result<bool, ConnError> {
        match &self.stream {
            Stream::Plain(socket) => {
                let mut socket = socket;
                // Room is zeroed only when the buffer grows (a frame larger than any before).
                if self.buffer.len() < self.end + READ_CHUNK {
                    self.buffer.resize(self.end + READ_CHUNK, 0);
                }
                let read = socket.read(&mut self.buffer[self.end..])?;
                self.end += read;
                self.received_bytes += read as u64;
                Ok(read > 0)
            }
            Stream::Tls { socket, shared } => {
                let mut records = vec![0u8; 64 << 10];
                let mut socket = socket;
                let read = socket.read(&mut records)?;
                if read == 0 {
                    return Ok(false);
                }
                self.received_bytes += read as u64;
                let mut pending = &records[..read];
                let mut state = shared.state.lock();
                self.buffer.truncate(self.end);
                while !pending.is_empty() {
                    state.read_tls(&mut pending)?;
                    if let Err(error) = state.process_new_packets() {
                        // Tell the peer why (an alert), as far as the socket takes it at once.
                        let mut alert = Vec::new();
                        while state.wants_write() && state.write_tls(&mut alert).is_ok() {}
                        self.timeouts.write.store(TIMEOUT_UNKNOWN, Ordering::Relaxed);
                        let _ = socket.set_write_timeout(Some(Duration::from_millis(200)));
                        let _ = socket.write_all(&alert);
                        let who = format!("{} at {}", shared.peer_name, self.peer);
                        return Err(ConnError::Tls(tls::describe(&error, &who, &shared.peer_name)));
                    }
                    let drained = drain_plaintext(&mut state, &mut self.buffer);
                    self.end = self.buffer.len();
                    drained?;
                }
                Ok(true)
            }
        }
    }

    /// Moves decrypted bytes rustls holds into the buffer; whether there were any.
    fn take_plaintext(&mut self) -> Result<bool, ConnError> {
        let Stream::Tls { shared, .. } = &self.stream else { return Ok(false) };
        let have = self.end;
        let mut state = shared.state.lock();
        self.buffer.truncate(self.end);
        let drained = drain_plaintext(&mut state, &mut self.buffer);
        self.end = self.buffer.len();
        if drained? && self.end == have {
            return Err(ConnError::Closed);
        }
        Ok(self.end > have)
    }

    /// Tells the peer why, then closes.
    pub fn refuse(&mut self, error: ErrorMessage) {
        let _ = self.send(&Message::Error(error), Duration::from_secs(1));
        self.shutdown();
    }

    pub fn shutdown(&self) {
        if let Stream::Tls { socket, shared } = &self.stream {
            // A close_notify, as far as the socket takes it at once: the peer reads a clean
            // end rather than a truncation.
            let mut records = Vec::new();
            if let Some(mut state) = shared.state.try_lock() {
                state.send_close_notify();
                while state.wants_write() && state.write_tls(&mut records).is_ok() {}
            }
            let mut socket = socket;
            self.timeouts.write.store(TIMEOUT_UNKNOWN, Ordering::Relaxed);
            let _ = socket.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = socket.write_all(&records);
        }
        let _ = self.stream.socket().shutdown(std::net::Shutdown::Both);
    }
}

/// Moves the plaintext `state` holds into `buffer`. True if the peer has closed the TLS
/// stream (close_notify) and nothing more will come.
fn drain_plaintext(
    state: &mut rustls::Connection,
    buffer: &mut Vec<u8>,
) -> Result<bool, ConnError> {
    let mut chunk = [0u8; 16 << 10];
    loop {
        match state.reader().read(&mut chunk) {
            Ok(0) => return Ok(true),
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == ErrorKind::WouldBlock => return Ok(false),
            // The peer closed the socket without a close_notify: the end of the stream.
            Err(error) if error.kind() == ErrorKind::UnexpectedEof => return Ok(true),
            Err(error) => return Err(error.into()),
        }
    }
}

/// An I/O error of a TLS handshake, as a sentence: a rustls error (a certificate refused, by
/// either side) says which certificate and why.
fn tls_io_error(error: std::io::Error, who: &str, expected: &str, timeout: Duration) -> ConnError {
    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) {
        return ConnError::TimedOut(timeout);
    }
    if let Some(tls_error) = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        return ConnError::Tls(tls::describe(tls_error, who, expected));
    }
    if error.kind() == ErrorKind::UnexpectedEof || error.kind() == ErrorKind::ConnectionReset {
        return ConnError::Tls(format!(
            "TLS: {who} closed the connection during the handshake (is it configured for TLS, and does it trust this process's certificate?)"
        ));
    }
    ConnError::Io(error)
}

/// Sets a socket's TCP congestion control (`TCP_CONGESTION`). The error says what the kernel
/// has, or what may be keeping this process from using it.
fn set_congestion(socket: &socket2::Socket, name: &str) -> Result<(), String> {
    socket.set_tcp_congestion(name.as_bytes()).map_err(|error| {
        let listed = |what: &str| {
            std::fs::read_to_string(format!("/proc/sys/net/ipv4/tcp_{what}_congestion_control"))
                .map_or_else(|_| "unknown".to_string(), |list| list.trim().to_string())
        };
        match error.raw_os_error() {
            Some(libc::ENOENT) => format!(
                "the kernel has no TCP congestion control {name:?} (it has: {}; a module, \
                 tcp_{name}, may add it)",
                listed("available")
            ),
            Some(libc::EPERM) => format!(
                "TCP congestion control {name:?} is not permitted to this process: without \
                 CAP_NET_ADMIN it may use only what net.ipv4.tcp_allowed_congestion_control \
                 lists ({}), and a route's `congctl lock` forbids any other",
                listed("allowed")
            ),
            _ => format!("setting TCP congestion control {name:?}: {error}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    fn write(write_id: u64, len: usize) -> Message {
        Message::Write(proto::Write {
            write_id,
            seq: 1,
            offset: write_id * 4096,
            kind: proto::WriteKind::Units,
            ack: proto::AckWanted::None,
            primary_time_us: 1,
            last_scn: write_id,
            primary_durable_scn: 0,
            bytes: vec![write_id as u8; len],
            zero_tail: 0,
        })
    }

    /// Messages sent together (`send_all`) or alone, small and larger than a read, split
    /// across reads at any place, come out whole and in order; the receive buffer is reused
    /// rather than cleared between reads.
    #[test]
    fn messages_batched_or_alone_arrive_whole_and_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let timeout = Duration::from_secs(10);
        let sender = std::thread::spawn(move || {
            let mut conn = Conn::connect(&address, timeout, None, 4 << 20).unwrap();
            let batch: Vec<Message> = (1..=20).map(|id| write(id, 100 + id as usize)).collect();
            conn.send_all(&batch, timeout).unwrap();
            // Larger than one read: the buffer grows.
            conn.send_all(&[write(21, READ_CHUNK * 2 + 7), write(22, 10)], timeout).unwrap();
            conn.send(&write(23, 5000), timeout).unwrap();
            // A frame dribbled in pieces.
            let mut frame = Vec::new();
            write(24, 3000).encode(&mut frame);
            let Stream::Plain(socket) = &conn.stream else { unreachable!() };
            let mut socket = socket;
            for piece in frame.chunks(700) {
                socket.write_all(piece).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let (socket, _) = listener.accept().unwrap();
        let mut conn = Conn::new(socket, 4 << 20).unwrap();
        let mut lengths = Vec::new();
        for expected in 1..=24u64 {
            match conn.recv(Some(timeout)).unwrap() {
                Message::Write(write) => {
                    assert_eq!(write.write_id, expected);
                    assert!(write.bytes.iter().all(|byte| *byte == expected as u8));
                    lengths.push(write.bytes.len());
                }
                other => panic!("unexpected {:?}", other.kind()),
            }
        }
        assert_eq!(lengths[20], READ_CHUNK * 2 + 7);
        assert_eq!((lengths[21], lengths[22], lengths[23]), (10, 5000, 3000));
        assert!(!conn.has_buffered_message());
        sender.join().unwrap();
        assert!(matches!(conn.recv(Some(timeout)), Err(ConnError::Closed)));
    }
}
