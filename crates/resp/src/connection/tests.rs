//! Connection over an in-memory duplex stream: pipelining, limits, EOF handling, cancel-safety.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, duplex};

use super::*;

fn pair(limits: Limits) -> (Connection<DuplexStream>, DuplexStream) {
    let (server, client) = duplex(1 << 20);
    (Connection::new(server, limits), client)
}

fn words(request: &Request) -> Vec<String> {
    request.args().iter().map(|arg| String::from_utf8_lossy(arg).into_owned()).collect()
}

#[tokio::test(start_paused = true)]
async fn pipelined_requests_get_their_replies_in_one_batch() {
    let (mut connection, mut client) = pair(Limits::default());
    client
        .write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING\r\n")
        .await
        .unwrap();
    let mut replies = 0;
    while replies < 3 {
        let command = connection.read_command().await.unwrap().unwrap().unwrap();
        let reply = command.local_reply().unwrap();
        connection.write_reply(&reply, ProtocolVersion::Resp2).await.unwrap();
        replies += 1;
    }
    // Nothing was written yet: all three requests were buffered, so no read had to wait.
    assert_eq!(connection.written, 0);
    assert_eq!(connection.write_buffer, b"+PONG\r\n$2\r\nhi\r\n+PONG\r\n");
    // Waiting for the next request writes the batch out first.
    let next = tokio::time::timeout(Duration::from_secs(1), connection.read_command()).await;
    assert!(next.is_err(), "no fourth request was sent");
    let mut received = vec![0u8; 22];
    client.read_exact(&mut received).await.unwrap();
    assert_eq!(received, b"+PONG\r\n$2\r\nhi\r\n+PONG\r\n");
}

#[tokio::test]
async fn a_clean_end_of_stream_is_none_and_half_a_frame_is_an_error() {
    let (mut connection, mut client) = pair(Limits::default());
    client.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
    client.shutdown().await.unwrap();
    assert!(connection.read_request().await.unwrap().is_some());
    assert!(connection.read_request().await.unwrap().is_none());

    let (mut connection, mut client) = pair(Limits::default());
    client.write_all(b"*2\r\n$3\r\nGET\r\n$5\r\nab").await.unwrap();
    drop(client);
    let error = connection.read_request().await.unwrap_err();
    assert!(matches!(error, ConnectionError::ResetMidFrame { buffered: 19 }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "connection reset by peer mid-frame (19 bytes of an incomplete request)"
    );
}

#[tokio::test(start_paused = true)]
async fn a_4_gb_length_field_is_refused_without_waiting_for_it() {
    let (mut connection, mut client) = pair(Limits::default());
    client.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4294967296\r\n").await.unwrap();
    // The client keeps the connection open and sends nothing more: with the clock paused, a
    // decoder that waited for the payload would let this timeout fire.
    let result = tokio::time::timeout(Duration::from_secs(5), connection.read_request())
        .await
        .expect("refused at once");
    let ConnectionError::Protocol(error) = result.unwrap_err() else { panic!() };
    assert_eq!(
        error.to_frame().to_bytes(ProtocolVersion::Resp2),
        b"-ERR Protocol error: invalid bulk length (4294967296 bytes is more than the maximum of 536870912)\r\n"
    );
    assert!(connection.read_buffer.capacity() < 1 << 20, "nothing was allocated for the bulk");
}

#[tokio::test(start_paused = true)]
async fn reading_is_cancel_safe() {
    let (mut connection, mut client) = pair(Limits::default());
    client.write_all(b"*2\r\n$4\r\nECHO\r\n$10\r\n01234").await.unwrap();
    let cancelled = tokio::time::timeout(Duration::from_secs(1), connection.read_request()).await;
    assert!(cancelled.is_err());
    client.write_all(b"56789\r\n").await.unwrap();
    let request = connection.read_request().await.unwrap().unwrap();
    assert_eq!(words(&request), ["ECHO", "0123456789"]);
}

#[tokio::test]
async fn the_read_buffer_is_bounded_by_the_request_limit() {
    let limits =
        Limits { bulk_bytes_max: 64 * 1024, request_bytes_max: 100 * 1024, ..Limits::default() };
    let (mut connection, mut client) = pair(limits);
    let writer = tokio::spawn(async move {
        // Two 60 KiB bulks: each is allowed, together they pass request_bytes_max.
        let mut request = b"*3\r\n$3\r\nSET\r\n$61440\r\n".to_vec();
        request.extend(std::iter::repeat_n(b'k', 61_440));
        request.extend_from_slice(b"\r\n$61440\r\n");
        for chunk in request.chunks(1000) {
            if client.write_all(chunk).await.is_err() {
                break;
            }
        }
        client
    });
    let error = connection.read_request().await.unwrap_err();
    assert!(
        matches!(
            error,
            ConnectionError::Protocol(ProtocolError::RequestTooBig { max: 102_400, .. })
        ),
        "{error:?}"
    );
    assert!(connection.read_buffer.len() <= 102_400);
    drop(writer.await.unwrap());
}

#[tokio::test]
async fn a_large_reply_is_written_while_it_is_produced() {
    let (server, mut client) = duplex(1024);
    let mut connection = Connection::new(server, Limits::default());
    let reader = tokio::spawn(async move {
        let mut received = Vec::new();
        client.read_to_end(&mut received).await.unwrap();
        received
    });
    let value = Frame::bulk(vec![b'v'; 100_000]);
    // With a 1 KiB pipe this would block forever if write_reply only buffered.
    connection.write_reply(&value, ProtocolVersion::Resp3).await.unwrap();
    assert_eq!(connection.write_buffer.len(), 0, "written out past 64 KiB");
    connection.write_reply(&Frame::ok(), ProtocolVersion::Resp3).await.unwrap();
    connection.shutdown().await.unwrap();
    drop(connection);
    let received = reader.await.unwrap();
    assert_eq!(received.len(), "$100000\r\n".len() + 100_002 + 5);
    assert!(received.ends_with(b"\r\n+OK\r\n"));
}

/// A peer that pipelines requests and never reads: a server loop of `read_request` under a
/// deadline and `buffer_reply` is held only by the read, so its deadline ends it; the replies
/// buffered stay under 64 KiB plus one; and `close` gives up on it after 2 s.
#[tokio::test(start_paused = true)]
async fn a_peer_that_never_reads_is_held_only_within_the_deadline() {
    let (server, mut client) = duplex(4096);
    let mut connection = Connection::new(server, Limits::default());
    let sender = tokio::spawn(async move {
        // Far more requests than the pipe and the write buffer hold; the peer reads nothing.
        for _ in 0..100_000 {
            if client.write_all(b"*2\r\n$4\r\nECHO\r\n$100\r\n").await.is_err()
                || client.write_all(&[b'e'; 100]).await.is_err()
                || client.write_all(b"\r\n").await.is_err()
            {
                break;
            }
        }
        client
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut replies = 0;
    let ended = loop {
        match tokio::time::timeout_at(deadline, connection.read_request()).await {
            Ok(request) => {
                let request = request.unwrap().unwrap();
                connection
                    .buffer_reply(&Frame::bulk(request.args()[1].clone()), ProtocolVersion::Resp2);
                replies += 1;
                assert!(connection.write_buffer.len() - connection.written < 64 * 1024 + 200);
            }
            Err(_) => break tokio::time::Instant::now(),
        }
    };
    assert_eq!(ended, deadline, "only the deadline ended it");
    assert!(replies > 0 && replies < 100_000, "{replies} replies");
    let closing = tokio::time::Instant::now();
    connection.close(Some(&Frame::error("ERR bye")), ProtocolVersion::Resp2).await;
    assert_eq!(closing.elapsed(), Duration::from_secs(2));
    drop(connection);
    drop(sender.await.unwrap());
}

/// A stream that takes every write at once and sends it on only in its flush, as a TLS
/// stream does with its records.
struct Records {
    inner: DuplexStream,
    pending: Vec<u8>,
}

impl tokio::io::AsyncRead for Records {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Records {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.pending.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        while !this.pending.is_empty() {
            match std::pin::Pin::new(&mut this.inner).poll_write(cx, &this.pending) {
                std::task::Poll::Ready(Ok(written)) => {
                    this.pending.drain(..written);
                }
                other => return other.map(|result| result.map(|_| ())),
            }
        }
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// Over such a stream (TLS), a flush cancelled after the stream took the reply but before
/// its own flush sent it on is finished by the next read: the reply reaches the client. It
/// stayed in the stream until the client sent something else (found by a review: the server's
/// idle timer cancels the read, and with it the flush, at `auth_timeout`).
#[tokio::test(start_paused = true)]
async fn a_reply_taken_by_the_stream_is_sent_on_after_a_cancelled_flush() {
    let (server, mut client) = duplex(1024);
    let mut connection =
        Connection::new(Records { inner: server, pending: Vec::new() }, Limits::default());
    connection.buffer_reply(&Frame::bulk(vec![b'r'; 10_000]), ProtocolVersion::Resp2);
    let cancelled = tokio::time::timeout(Duration::from_secs(1), connection.read_request()).await;
    assert!(cancelled.is_err(), "the client reads nothing yet");
    let reader = tokio::spawn(async move {
        let mut received = vec![0u8; 10_010];
        client.read_exact(&mut received).await.unwrap();
        (client, received)
    });
    let idle = tokio::time::timeout(Duration::from_secs(5), connection.read_request()).await;
    assert!(idle.is_err(), "no request was sent");
    let (_client, received) = tokio::time::timeout(Duration::from_secs(1), reader)
        .await
        .expect("the reply never came")
        .unwrap();
    assert!(received.ends_with(b"rr\r\n"));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_flush_resumes_where_it_stopped() {
    let (server, mut client) = duplex(64);
    let mut connection = Connection::new(server, Limits::default());
    connection.buffer_reply(&Frame::bulk(vec![b'x'; 200]), ProtocolVersion::Resp2);
    let cancelled = tokio::time::timeout(Duration::from_secs(1), connection.flush()).await;
    assert!(cancelled.is_err(), "the pipe holds only 64 bytes");
    assert_eq!(connection.written, 64);
    let reader = tokio::spawn(async move {
        let mut received = vec![0u8; 206];
        client.read_exact(&mut received).await.unwrap();
        received
    });
    connection.flush().await.unwrap();
    let received = reader.await.unwrap();
    assert_eq!(&received[..6], b"$200\r\n");
    assert!(received[6..].iter().all(|&byte| byte == b'x'));
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_gives_back_a_large_read_buffer() {
    let (mut connection, mut client) = pair(Limits::default());
    let mut request = b"*2\r\n$4\r\nECHO\r\n$200000\r\n".to_vec();
    request.extend(std::iter::repeat_n(b'x', 200_000));
    request.extend_from_slice(b"\r\n");
    let writer = tokio::spawn(async move {
        client.write_all(&request).await.unwrap();
        client
    });
    let echoed = connection.read_request().await.unwrap().unwrap();
    assert_eq!(echoed.args()[1].len(), 200_000);
    let _client = writer.await.unwrap();
    assert!(connection.read_buffer.capacity() > 64 * 1024 || connection.read_buffer.is_empty());
    let idle = tokio::time::timeout(Duration::from_secs(1), connection.read_request()).await;
    assert!(idle.is_err());
    assert!(
        connection.read_buffer.capacity() <= 2 * READ_CHUNK_BYTES,
        "{}",
        connection.read_buffer.capacity()
    );
}
