//! A small async Redis-protocol client: what the demo and the benchmarks drive servers with.

use std::net::SocketAddr;

use anyhow::Context as _;
use bytes::{BufMut, BytesMut};
use resp::{Frame, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The password every connection of this process authenticates with (`AUTH password`), if the
/// servers it drives require one (the demo's do).
static PASSWORD: std::sync::RwLock<Option<String>> = std::sync::RwLock::new(None);

/// Makes every `Client::connect` of this process authenticate with `password`.
pub fn authenticate_with(password: Option<String>) {
    *PASSWORD.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = password;
}

/// The password `Client::connect` authenticates with, if any.
pub fn password() -> Option<String> {
    PASSWORD.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
}

pub struct Client {
    stream: TcpStream,
    read: BytesMut,
    write: Vec<u8>,
    limits: Limits,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let stream =
            TcpStream::connect(addr).await.with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true)?;
        let mut client = Client {
            stream,
            read: BytesMut::with_capacity(16 << 10),
            write: Vec::new(),
            limits: Limits::default(),
        };
        if let Some(password) = password() {
            client
                .ok(&[b"AUTH", password.as_bytes()])
                .await
                .with_context(|| format!("authenticating to {addr}"))?;
        }
        Ok(client)
    }

    /// Sends one command and returns its reply (an error reply is `Ok(Frame::Error)`).
    pub async fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<Frame> {
        self.write.clear();
        encode(&mut self.write, args);
        self.stream.write_all(&self.write).await.context("sending a command")?;
        self.reply().await
    }

    /// Sends several commands in one write (a pipeline) and returns their replies in order.
    pub async fn pipeline(&mut self, commands: &[&[&[u8]]]) -> anyhow::Result<Vec<Frame>> {
        self.write.clear();
        for args in commands {
            encode(&mut self.write, args);
        }
        self.stream.write_all(&self.write).await.context("sending a pipeline")?;
        let mut replies = Vec::with_capacity(commands.len());
        for _ in commands {
            replies.push(self.reply().await?);
        }
        Ok(replies)
    }

    /// Reads the next reply.
    pub async fn reply(&mut self) -> anyhow::Result<Frame> {
        loop {
            if let Some(frame) =
                Frame::decode(&mut self.read, &self.limits).context("decoding a reply")?
            {
                return Ok(frame);
            }
            if self.stream.read_buf(&mut self.read).await.context("reading a reply")? == 0 {
                anyhow::bail!("the server closed the connection");
            }
        }
    }

    /// A command that must not fail.
    pub async fn ok(&mut self, args: &[&[u8]]) -> anyhow::Result<Frame> {
        match self.command(args).await? {
            Frame::Error(message) => {
                anyhow::bail!(
                    "{} failed: {}",
                    String::from_utf8_lossy(args[0]),
                    String::from_utf8_lossy(&message)
                )
            }
            frame => Ok(frame),
        }
    }
}

/// Appends one command as a RESP array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.put_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.put_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.put_slice(arg);
        out.put_slice(b"\r\n");
    }
}

/// The integer in a reply (an integer, or a bulk string holding one).
pub fn integer(frame: &Frame) -> Option<i64> {
    match frame {
        Frame::Integer(value) => Some(*value),
        Frame::Bulk(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}
