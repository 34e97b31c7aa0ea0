//! A framed, blocking connection: whole messages in and out, every wait bounded.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use proto::{Decoder, ErrorMessage, Message, ProtoError};

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
}

/// One side of a connection: reads and writes whole messages.
pub struct Conn {
    stream: TcpStream,
    buffer: Vec<u8>,
    start: usize,
    decoder: Decoder,
    scratch: Vec<u8>,
    pub peer: SocketAddr,
}

const READ_CHUNK: usize = 256 << 10;

impl Conn {
    pub fn new(stream: TcpStream, payload_max: usize) -> std::io::Result<Conn> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        Ok(Conn {
            stream,
            buffer: Vec::new(),
            start: 0,
            decoder: Decoder { payload_max },
            scratch: Vec::new(),
            peer,
        })
    }

    /// Connects to `address` within `timeout`, with the send buffer given (or the kernel's).
    pub fn connect(
        address: &str,
        timeout: Duration,
        send_buffer: Option<u64>,
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
        socket.connect_timeout(&target.into(), timeout)?;
        Ok(Conn::new(socket.into(), payload_max)?)
    }

    /// A second handle on the same socket, for a thread that only reads (or only writes).
    pub fn try_clone(&self) -> std::io::Result<Conn> {
        Ok(Conn {
            stream: self.stream.try_clone()?,
            buffer: Vec::new(),
            start: 0,
            decoder: self.decoder,
            scratch: Vec::new(),
            peer: self.peer,
        })
    }

    /// Sends one message, giving up after `timeout`.
    pub fn send(&mut self, message: &Message, timeout: Duration) -> Result<(), ConnError> {
        self.scratch.clear();
        message.encode(&mut self.scratch);
        self.stream.set_write_timeout(Some(timeout))?;
        match self.stream.write_all(&self.scratch) {
            Ok(()) => Ok(()),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(ConnError::TimedOut(timeout))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Whether a whole message is already buffered (reading it will not block).
    pub fn has_buffered_message(&self) -> bool {
        matches!(self.decoder.frame_len(&self.buffer[self.start..]), Ok(Some(total)) if total <= self.buffer.len() - self.start)
    }

    /// Receives one message, giving up after `timeout` (`None`: wait forever).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Message, ConnError> {
        let deadline = timeout.map(|timeout| Instant::now() + timeout);
        loop {
            if let Some((message, used)) = self.decoder.decode(&self.buffer[self.start..])? {
                self.start += used;
                if self.start == self.buffer.len() {
                    self.buffer.clear();
                    self.start = 0;
                }
                return Ok(message);
            }
            let wait = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(ConnError::TimedOut(timeout.expect("deadline from timeout")));
                    }
                    Some(left)
                }
                None => None,
            };
            self.stream.set_read_timeout(wait)?;
            if self.start > 0 {
                self.buffer.drain(..self.start);
                self.start = 0;
            }
            let have = self.buffer.len();
            self.buffer.resize(have + READ_CHUNK, 0);
            match self.stream.read(&mut self.buffer[have..]) {
                Ok(0) => {
                    self.buffer.truncate(have);
                    return Err(ConnError::Closed);
                }
                Ok(read) => self.buffer.truncate(have + read),
                Err(error)
                    if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
                {
                    self.buffer.truncate(have);
                    return Err(ConnError::TimedOut(timeout.unwrap_or_default()));
                }
                // A signal (SIGSTOP then SIGCONT, say) is no fault of the peer: read again.
                Err(error) if error.kind() == ErrorKind::Interrupted => self.buffer.truncate(have),
                Err(error) => {
                    self.buffer.truncate(have);
                    return Err(error.into());
                }
            }
        }
    }

    /// Tells the peer why, then closes.
    pub fn refuse(&mut self, error: ErrorMessage) {
        let _ = self.send(&Message::Error(error), Duration::from_secs(1));
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Round-trip time seen by a TCP connect to `address` (SYN to SYN-ACK): what a sender sizes
/// `send_buffer = "auto"` with.
pub fn probe_rtt(address: &str, timeout: Duration) -> Option<Duration> {
    let target = address.to_socket_addrs().ok()?.next()?;
    let started = Instant::now();
    let stream = TcpStream::connect_timeout(&target, timeout).ok()?;
    let rtt = started.elapsed();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Some(rtt)
}
