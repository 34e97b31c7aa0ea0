//! The tokio side: moves bytes between a socket and the sans-IO decoder and encoder, with a
//! bounded read buffer and a write buffer flushed in batches for pipelined clients.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::budget::{Budget, FREE_BYTES};

use crate::cmd::{Command, CommandError};
use crate::error::ProtocolError;
use crate::frame::{Frame, ProtocolVersion};
use crate::limits::Limits;
use crate::request::{Request, RequestDecoder};

/// Bytes the read buffer has room for before each read: large enough that a big bulk arrives in
/// few reads, small enough that 10 000 idle connections cost little.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Buffered reply bytes above which [`Connection::read_request`] (and
/// [`Connection::write_reply`]) writes them out before it goes on, so a pipeline of large
/// replies cannot pile up in memory.
const WRITE_BUFFER_FLUSH_BYTES: usize = 64 * 1024;

/// How long [`Connection::close`] waits for its last reply to reach a peer: one that does not
/// read is not waited for longer.
const CLOSE_WITHIN: Duration = Duration::from_secs(2);

/// Why a connection cannot go on. After any of these the server closes it; after a
/// [`ConnectionError::Protocol`] it first sends [`ProtocolError::to_frame`].
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The peer closed its side with part of a request buffered.
    #[error("connection reset by peer mid-frame ({buffered} bytes of an incomplete request)")]
    ResetMidFrame { buffered: usize },
    #[error("connection I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// The server's shared budget of buffered request bytes is spent: this request cannot be
    /// buffered now. The text is the reply to send before closing.
    #[error(
        "ERR the server's request buffers are full ({used} bytes of incomplete requests held by all clients; the limit is {limit}): try again later"
    )]
    BudgetExhausted { used: usize, limit: usize },
}

/// One client connection: a stream (a `TcpStream`, or anything `AsyncRead + AsyncWrite`, such
/// as `tokio::io::duplex` in tests), a read buffer and a write buffer.
///
/// Memory: the read buffer holds at most one incomplete request, which [`Limits`] bounds by
/// `request_bytes_max` (or `inline_bytes_max`), plus one read of 16 KiB; its capacity can be up
/// to twice that while it grows. The write buffer is written out once it passes 64 KiB.
///
/// Time: a peer that sends requests and never reads their replies holds the connection only
/// where the server bounds it in time. Replies are buffered ([`Connection::buffer_reply`]) and
/// written out by [`Connection::read_request`], which a server runs under its idle timeout
/// (cancel-safe: nothing is lost), and [`Connection::close`] waits at most 2 s for its last
/// reply. [`Connection::write_reply`] and [`Connection::flush`] wait for the peer as long as it
/// takes.
///
/// A typical server loop, which batches the replies of pipelined requests into one write:
///
/// ```no_run
/// # async fn serve(stream: tokio::net::TcpStream, facts: resp::ServerFacts) -> Result<(), resp::ConnectionError> {
/// use resp::{Action, Connection, Limits, Session};
/// let limits = Limits::default();
/// let mut connection = Connection::new(stream, limits.clone());
/// let mut session = Session::new(1, &limits);
/// loop {
///     let parsed = match connection.read_command().await {
///         Ok(Some(parsed)) => parsed,
///         Ok(None) => break, // clean end of stream
///         Err(resp::ConnectionError::Protocol(error)) => {
///             connection.close(Some(&error.to_frame()), session.protocol()).await;
///             return Ok(());
///         }
///         Err(error) => return Err(error),
///     };
///     match session.handle(parsed, &facts) {
///         Action::Reply(reply) | Action::UnwatchAndReply(reply) => {
///             connection.buffer_reply(&reply, session.protocol())
///         }
///         Action::ReplyAndClose(reply) => {
///             connection.close(Some(&reply), session.protocol()).await;
///             return Ok(());
///         }
///         Action::Close => break, // an HTTP request: no reply
///         Action::Authenticate { .. } => { /* check the password, then session.authenticated */ }
///         Action::Execute(_command) => { /* run it, then buffer_reply its result */ }
///         Action::ExecuteTransaction(_commands) => { /* run them atomically, reply an array */ }
///     }
/// }
/// connection.close(None, session.protocol()).await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Connection<S> {
    stream: S,
    read_buffer: BytesMut,
    decoder: RequestDecoder,
    write_buffer: Vec<u8>,
    /// How much of `write_buffer` is already on the stream; kept here, not in a future, so that
    /// a cancelled flush resumes where it stopped.
    written: usize,
    /// Bytes were handed to the stream and its own flush has not completed since: a TLS
    /// stream takes a reply into its records at once and writes them out in its flush, so a
    /// cancelled flush must be finished even with nothing left in `write_buffer`.
    unflushed: bool,
    /// When the peer last took part of a batch of replies that did not go out in one write: a
    /// client reading a long reply slowly is active, not idle (`Connection::last_taken`).
    last_taken: Option<tokio::time::Instant>,
    /// The server's shared budget of buffered request bytes, and what this connection holds of
    /// it.
    held: Held,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    pub fn new(stream: S, limits: Limits) -> Connection<S> {
        Connection {
            stream,
            read_buffer: BytesMut::new(),
            decoder: RequestDecoder::new(limits),
            write_buffer: Vec::new(),
            written: 0,
            unflushed: false,
            last_taken: None,
            held: Held::default(),
        }
    }

    /// Takes the bytes it buffers beyond 16 KiB from `budget`, shared with other connections.
    pub fn with_budget(mut self, budget: Arc<Budget>) -> Connection<S> {
        self.held.budget = Some(budget);
        self
    }

    /// Decodes with `limits` from the next request on (an authenticated client gets larger
    /// ones than a connection that has not said who it is).
    pub fn set_limits(&mut self, limits: Limits) {
        self.decoder = RequestDecoder::new(limits);
    }

    /// Holds what the read buffer needs of the budget now: more as it grows, less once
    /// requests are taken out of it.
    fn account(&mut self) -> Result<(), ConnectionError> {
        let Some(budget) = &self.held.budget else { return Ok(()) };
        let needed = self.read_buffer.len().saturating_sub(FREE_BYTES);
        if needed > self.held.bytes {
            if !budget.take(needed - self.held.bytes) {
                return Err(ConnectionError::BudgetExhausted {
                    used: budget.used(),
                    limit: budget.limit(),
                });
            }
        } else {
            budget.give(self.held.bytes - needed);
        }
        self.held.bytes = needed;
        Ok(())
    }

    /// Reads the next request. `Ok(None)` at a clean end of stream (nothing buffered).
    ///
    /// Before it waits for the peer it writes out any buffered replies, so pipelined requests
    /// get their replies in one write and nothing waits on a reply still in our buffer; and
    /// before it takes the next request it writes them out once they pass 64 KiB, so the
    /// replies of a pipeline are bounded in memory and a peer that does not read them is
    /// waited for here, where the caller's timeout runs.
    ///
    /// Cancel-safe: dropping the future (for example when `tokio::time::timeout` for the idle
    /// timeout fires) loses nothing; bytes read so far stay buffered, the decoder keeps its
    /// progress, and a partly written reply resumes at the next call or [`Connection::flush`].
    pub async fn read_request(&mut self) -> Result<Option<Request>, ConnectionError> {
        loop {
            if self.write_buffer.len() - self.written >= WRITE_BUFFER_FLUSH_BYTES {
                self.flush().await?;
            }
            if let Some(request) = self.decoder.decode(&mut self.read_buffer)? {
                self.account()?;
                return Ok(Some(request));
            }
            self.flush().await?;
            if self.read_buffer.is_empty() && self.read_buffer.capacity() > 2 * READ_CHUNK_BYTES {
                // A large request grew the buffer; an idle connection should not keep that.
                self.read_buffer = BytesMut::new();
            }
            if self.read_buffer.capacity() - self.read_buffer.len() < READ_CHUNK_BYTES / 4 {
                self.read_buffer.reserve(READ_CHUNK_BYTES);
            }
            if self.stream.read_buf(&mut self.read_buffer).await? == 0 {
                if self.read_buffer.is_empty() {
                    return Ok(None);
                }
                return Err(ConnectionError::ResetMidFrame { buffered: self.read_buffer.len() });
            }
            self.account()?;
        }
    }

    /// Reads the next request and parses it as a command. The inner `Err` is a command error
    /// (unknown command, wrong arity, …) to reply to; the connection stays usable. Cancel-safe
    /// as [`Connection::read_request`].
    pub async fn read_command(
        &mut self,
    ) -> Result<Option<Result<Command, CommandError>>, ConnectionError> {
        Ok(self.read_request().await?.map(Command::parse))
    }

    /// Appends a reply to the write buffer without writing it.
    pub fn buffer_reply(&mut self, reply: &Frame, version: ProtocolVersion) {
        reply.encode(version, &mut self.write_buffer);
    }

    /// Appends a reply to the write buffer and writes the buffer out once it passes 64 KiB,
    /// waiting for the peer as long as that takes (a server loop uses
    /// [`Connection::buffer_reply`], and lets [`Connection::read_request`] write). Small
    /// replies stay buffered until [`Connection::flush`] or the next
    /// [`Connection::read_request`] that has to wait for the peer.
    pub async fn write_reply(
        &mut self,
        reply: &Frame,
        version: ProtocolVersion,
    ) -> Result<(), ConnectionError> {
        self.buffer_reply(reply, version);
        if self.write_buffer.len() - self.written >= WRITE_BUFFER_FLUSH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes out every buffered reply. Cancel-safe: what was written stays written, and the
    /// next call goes on from there.
    pub async fn flush(&mut self) -> Result<(), ConnectionError> {
        if self.written == self.write_buffer.len() && !self.unflushed {
            return Ok(());
        }
        let mut first = true;
        while self.written < self.write_buffer.len() {
            let count = self.stream.write(&self.write_buffer[self.written..]).await?;
            if count == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
            }
            self.written += count;
            self.unflushed = true;
            if !first || self.written < self.write_buffer.len() {
                // The peer takes the replies bit by bit. (A batch that goes out in one write,
                // nearly every one, reads no clock.)
                self.last_taken = Some(tokio::time::Instant::now());
            }
            first = false;
        }
        self.write_buffer.clear();
        self.written = 0;
        // A large reply may have grown the buffer; do not keep megabytes per idle connection.
        if self.write_buffer.capacity() > 4 * WRITE_BUFFER_FLUSH_BYTES {
            self.write_buffer = Vec::new();
        }
        self.stream.flush().await?;
        self.unflushed = false;
        Ok(())
    }

    /// When the peer last took part of a batch of replies that needed more than one write
    /// (`None`: none did). A server's idle timeout runs from the later of this and the last
    /// request, as Redis's `timeout` does, so that a client reading a long reply over a slow
    /// link is not cut off, while one that stopped reading is.
    pub fn last_taken(&self) -> Option<tokio::time::Instant> {
        self.last_taken
    }

    /// Ends the connection: writes `last` (a reply or an error saying why) and what is still
    /// buffered, and shuts the write side down, waiting at most 2 s for a peer that does not
    /// read; dropping the connection then closes it whatever is left unsent.
    pub async fn close(&mut self, last: Option<&Frame>, version: ProtocolVersion) {
        if let Some(last) = last {
            self.buffer_reply(last, version);
        }
        let _ = tokio::time::timeout(CLOSE_WITHIN, self.shutdown()).await;
    }

    /// Flushes, then shuts the write side down so the peer sees the end of the stream.
    pub async fn shutdown(&mut self) -> Result<(), ConnectionError> {
        self.flush().await?;
        self.stream.shutdown().await?;
        Ok(())
    }

    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    pub fn into_inner(self) -> S {
        let Connection { stream, .. } = self;
        stream
    }
}

/// Turns away a connection beyond the server's limit of connections, as Redis does: tells it
/// `-ERR max number of clients reached` (waiting at most 1 s for a peer that does not read),
/// then closes it; on a task of its own, so that the accepting loop goes on at once.
pub fn turn_away<S: AsyncWrite + Unpin + Send + 'static>(mut stream: S) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            stream.write_all(b"-ERR max number of clients reached\r\n"),
        )
        .await;
    });
}

/// What a connection holds of the shared budget, given back when it is dropped.
#[derive(Debug, Default)]
struct Held {
    budget: Option<Arc<Budget>>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.give(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests;
