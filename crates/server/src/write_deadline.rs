//! A stream whose writes fail once the peer has taken nothing for a while: what bounds a
//! client that asks and never reads its answer where the server does not (hyper, serving the
//! admin API, has a deadline for a request's headers and none for writing the response).
//!
//! Reads pass through untouched: an admin request may wait long for its answer (a role change,
//! up to `REQUEST_TIME_MAX`) with nothing to read meanwhile.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

#[derive(Debug)]
pub(crate) struct WriteDeadline<S> {
    inner: S,
    /// How long a write may wait for the peer to take anything.
    within: Duration,
    /// Running while a write waits for the peer; gone once anything is written.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub(crate) fn new(inner: S, within: Duration) -> WriteDeadline<S> {
        WriteDeadline { inner, within, stalled: None }
    }

    /// What a write, flush or shutdown of the inner stream gave: progress ends the stall;
    /// `Pending` starts (or goes on with) the stall's clock, and fails once it has run out.
    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let within = self.within;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(within)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer took nothing of the answer for {within:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.progress(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progress(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.progress(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.progress(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_fails_once_the_peer_takes_nothing_for_the_deadline() {
        let (server, _client) = tokio::io::duplex(1024);
        let mut stream = WriteDeadline::new(server, Duration::from_secs(5));
        let started = tokio::time::Instant::now();
        let error = stream.write_all(&[b'x'; 10_000]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_taking_is_served_to_the_end() {
        let (server, mut client) = tokio::io::duplex(1024);
        let mut stream = WriteDeadline::new(server, Duration::from_secs(5));
        let reader = tokio::spawn(async move {
            let mut received = Vec::new();
            let mut chunk = [0u8; 512];
            loop {
                // Slower than the deadline in all, never for one stall.
                tokio::time::sleep(Duration::from_secs(1)).await;
                match client.read(&mut chunk).await.unwrap() {
                    0 => return received,
                    read => received.extend_from_slice(&chunk[..read]),
                }
            }
        });
        stream.write_all(&[b'x'; 20_000]).await.unwrap();
        stream.shutdown().await.unwrap();
        drop(stream);
        assert_eq!(reader.await.unwrap().len(), 20_000);
    }

    /// The admin API's own serving (hyper, axum) over it: a client that asks for a large
    /// answer and reads none of it is let go after the deadline, not the 75 minutes a request
    /// may take.
    #[tokio::test(start_paused = true)]
    async fn hyper_lets_go_of_a_client_that_never_reads_the_answer() {
        let app = axum::Router::new()
            .route("/large", axum::routing::get(|| async { vec![b'x'; 1 << 20] }));
        let (server, mut client) = tokio::io::duplex(4096);
        client.write_all(b"GET /large HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
        let started = tokio::time::Instant::now();
        let served = crate::admin::serve_connection(
            WriteDeadline::new(server, Duration::from_secs(10)),
            app,
            Duration::from_secs(10),
        );
        tokio::time::timeout(Duration::from_secs(60), served)
            .await
            .expect("the connection was held past its write deadline");
        assert!(started.elapsed() >= Duration::from_secs(10), "{:?}", started.elapsed());
        drop(client);
    }
}
