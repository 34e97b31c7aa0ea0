//! The clients of `bench failover`: writers that find the primary the way Redis client
//! libraries do, and record every write a server acknowledged, with when and which server.
//!
//! Through Sentinel (redoguard's observer or Redis Sentinel), each writer asks
//! `SENTINEL get-master-addr-by-name` of the first Sentinel that answers, connects there and
//! writes `SET key key` in a closed loop; after any error (a refused or reset connection,
//! `-READONLY`, `-TRYAGAIN`, a reply later than [`COMMAND_TIMEOUT`]) it waits [`RETRY`] and
//! asks again (redis-py's `Sentinel`). It also follows `+switch-master` on every Sentinel's
//! pub/sub (Jedis, go-redis, ioredis): when a Sentinel names another primary than the one a
//! writer is connected to, the writer drops that connection, even with a write in flight
//! (whose outcome is then unknown and not counted), and connects to the primary named. A writer
//! that only re-asked after errors would, when a cut leaves an old primary reachable and
//! taking writes (Redis), never leave it.
//!
//! Without Sentinel (the manual failover), each writer tries the members' addresses in turn,
//! the next after every error.
//!
//! *Every acknowledged write is recorded*: its key (unique), the server that acknowledged it
//! and the instant the reply arrived. A write without a reply is not acknowledged.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::BytesMut;
use parking_lot::Mutex;
use resp::{Frame, Limits};
use tokio::sync::watch;

use crate::client::Client;
use crate::sentinel::{ask_master, follow_switches};

/// Writers of a trial.
pub(crate) const WRITERS: usize = 4;
/// A write not answered within this is given up (the connection is dropped, the write is not
/// acknowledged): a client library's socket timeout, tight.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The wait after an error before asking again: it bounds how late a writer sees a new
/// primary (a library's retry back-off, tight).
pub(crate) const RETRY: Duration = Duration::from_millis(20);
/// How long a Sentinel may take to answer.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);

/// How writers find the primary.
#[derive(Debug, Clone)]
pub(crate) enum Discovery {
    /// Ask these Sentinels (in order) for the primary of `master`, and follow `+switch-master`.
    Sentinel { sentinels: Vec<SocketAddr>, master: String },
    /// No Sentinel: these servers, in turn.
    Endpoints(Vec<SocketAddr>),
}

/// A write a server acknowledged.
#[derive(Debug, Clone)]
pub(crate) struct Ack {
    pub(crate) key: String,
    pub(crate) server: SocketAddr,
    pub(crate) at: Instant,
}

/// What the writers have seen so far, per server: the first and last acknowledgement.
#[derive(Debug, Default)]
struct Seen {
    by_server: BTreeMap<SocketAddr, (u64, Instant, Instant)>,
    errors: u64,
}

/// Writers running on a thread of their own (in a network namespace, if asked).
pub(crate) struct Writers {
    stop: watch::Sender<bool>,
    seen: Arc<Mutex<Seen>>,
    thread: Option<JoinHandle<anyhow::Result<Vec<Ack>>>>,
}

impl Writers {
    /// Starts [`WRITERS`] writers with keys `prefix:<writer>:<sequence>`; with `namespace`,
    /// their sockets are made inside it.
    pub(crate) fn start(
        discovery: Discovery,
        prefix: &str,
        namespace: Option<String>,
    ) -> anyhow::Result<Writers> {
        let (stop, stopped) = watch::channel(false);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (prefix, shared) = (prefix.to_string(), seen.clone());
        let thread = std::thread::Builder::new().name("bench-writers".into()).spawn(move || {
            let _inside = namespace
                .as_deref()
                .map(linkemu::namespace::enter)
                .transpose()
                .context("entering the clients' site")?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the writers' runtime")?;
            Ok(runtime.block_on(run(discovery, prefix, stopped, shared)))
        })?;
        Ok(Writers { stop, seen, thread: Some(thread) })
    }

    /// Acknowledged writes so far.
    pub(crate) fn acknowledged(&self) -> u64 {
        self.seen.lock().by_server.values().map(|(count, _, _)| count).sum()
    }

    /// When `server` first acknowledged a write, if it has.
    pub(crate) fn first_ack_by(&self, server: SocketAddr) -> Option<Instant> {
        self.seen.lock().by_server.get(&server).map(|(_, first, _)| *first)
    }

    /// Errors the writers met (each followed by a new attempt).
    pub(crate) fn errors(&self) -> u64 {
        self.seen.lock().errors
    }

    /// Waits until `more` writes were acknowledged and `at_least` has passed (a steady load
    /// before the event), up to `limit`.
    pub(crate) fn warm(&self, more: u64, at_least: Duration, limit: Duration) -> bool {
        let started = Instant::now();
        let base = self.acknowledged();
        while started.elapsed() < limit {
            if self.acknowledged() >= base + more && started.elapsed() >= at_least {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Stops the writers (a write in flight is abandoned) and returns every acknowledged write.
    pub(crate) fn stop(mut self) -> anyhow::Result<Vec<Ack>> {
        let _ = self.stop.send(true);
        let thread = self.thread.take().expect("stopped once");
        thread.join().map_err(|_| anyhow::anyhow!("the writers' thread panicked"))?
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn run(
    discovery: Discovery,
    prefix: String,
    stop: watch::Receiver<bool>,
    seen: Arc<Mutex<Seen>>,
) -> Vec<Ack> {
    // The primary most recently named by a `+switch-master`, if any.
    let (named, _) = watch::channel::<Option<SocketAddr>>(None);
    let mut tasks = tokio::task::JoinSet::new();
    if let Discovery::Sentinel { sentinels, .. } = &discovery {
        for &sentinel in sentinels {
            tasks.spawn(follow_switches(sentinel, named.clone(), stop.clone()));
        }
    }
    let writers: Vec<_> = (0..WRITERS)
        .map(|number| {
            let writer = Writer {
                key_prefix: format!("{prefix}:{number}"),
                discovery: discovery.clone(),
                named: named.subscribe(),
                stop: stop.clone(),
                seen: seen.clone(),
                next_endpoint: number,
            };
            tokio::spawn(writer.run())
        })
        .collect();
    let mut acks = Vec::new();
    for writer in writers {
        acks.extend(writer.await.unwrap_or_default());
    }
    tasks.abort_all();
    acks
}

/// One writer's loop.
struct Writer {
    key_prefix: String,
    discovery: Discovery,
    named: watch::Receiver<Option<SocketAddr>>,
    stop: watch::Receiver<bool>,
    seen: Arc<Mutex<Seen>>,
    next_endpoint: usize,
}

/// Why a writer left a connection.
enum Left {
    Error,
    /// A Sentinel named this primary instead.
    Switched(SocketAddr),
    Stopped,
}

impl Writer {
    async fn run(mut self) -> Vec<Ack> {
        let mut acks = Vec::new();
        let mut sequence = 0u64;
        let mut switched_to: Option<SocketAddr> = None;
        while !*self.stop.borrow() {
            let target = match switched_to.take() {
                Some(addr) => Some(addr),
                None => self.primary().await,
            };
            let left = match target {
                Some(addr) => self.write_to(addr, &mut sequence, &mut acks).await,
                None => Left::Error,
            };
            match left {
                Left::Stopped => break,
                Left::Switched(addr) => switched_to = Some(addr),
                Left::Error => {
                    self.seen.lock().errors += 1;
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY) => {}
                        _ = self.stop.changed() => break,
                    }
                }
            }
        }
        acks
    }

    /// The primary to try now.
    async fn primary(&mut self) -> Option<SocketAddr> {
        match &self.discovery {
            Discovery::Sentinel { sentinels, master } => {
                for &sentinel in sentinels {
                    let asked =
                        tokio::time::timeout(SENTINEL_TIMEOUT, ask_master(sentinel, master));
                    if let Ok(Ok(Some(addr))) = asked.await {
                        return Some(addr);
                    }
                }
                None
            }
            Discovery::Endpoints(addresses) => {
                let addr = addresses[self.next_endpoint % addresses.len()];
                self.next_endpoint += 1;
                Some(addr)
            }
        }
    }

    /// Writes to `addr` until an error, a switch or the stop.
    async fn write_to(
        &mut self,
        addr: SocketAddr,
        sequence: &mut u64,
        acks: &mut Vec<Ack>,
    ) -> Left {
        let Ok(Ok(mut client)) = tokio::time::timeout(CONNECT_TIMEOUT, Client::connect(addr)).await
        else {
            return Left::Error;
        };
        loop {
            if let Some(named) = *self.named.borrow_and_update()
                && named != addr
            {
                return Left::Switched(named);
            }
            let key = format!("{}:{sequence}", self.key_prefix);
            *sequence += 1;
            // A write in flight is abandoned (with its connection, whose next reply would be
            // its own) only for a switch to another primary.
            let reply = {
                let args: [&[u8]; 3] = [b"SET", key.as_bytes(), key.as_bytes()];
                let command = tokio::time::timeout(COMMAND_TIMEOUT, client.command(&args));
                tokio::pin!(command);
                loop {
                    tokio::select! {
                        reply = &mut command => break reply,
                        changed = self.named.changed() => {
                            if changed.is_err() {
                                return Left::Stopped;
                            }
                            if let Some(named) = *self.named.borrow_and_update()
                                && named != addr
                            {
                                return Left::Switched(named);
                            }
                        }
                        _ = self.stop.changed() => return Left::Stopped,
                    }
                }
            };
            match reply {
                Ok(Ok(Frame::Simple(_))) => {
                    let at = Instant::now();
                    {
                        let mut seen = self.seen.lock();
                        let entry = seen.by_server.entry(addr).or_insert((0, at, at));
                        entry.0 += 1;
                        entry.2 = at;
                    }
                    acks.push(Ack { key, server: addr, at });
                }
                _ => return Left::Error,
            }
        }
    }
}

/// The targets the observer answering Sentinel at `sentinel` would fail over to now (its `INFO`
/// field `redoguard_failover_ready`; nobody unless it is the active observer): fast-start
/// failover is armed for a target only once this names it.
pub(crate) fn failover_ready(sentinel: SocketAddr) -> anyhow::Result<Vec<String>> {
    let Frame::Bulk(info) = ask(sentinel, &[b"INFO"], Duration::from_secs(2))? else {
        anyhow::bail!("the observer at {sentinel} answered INFO with something else than text");
    };
    Ok(String::from_utf8_lossy(&info)
        .lines()
        .find_map(|line| line.strip_prefix("redoguard_failover_ready:"))
        .map(|names| names.split(',').filter(|name| !name.is_empty()).map(String::from).collect())
        .unwrap_or_default())
}

/// One command to `addr`, blocking, with every wait bounded by `timeout`: for the benchmark's
/// own checks (not the measured writers).
pub(crate) fn ask(addr: SocketAddr, args: &[&[u8]], timeout: Duration) -> anyhow::Result<Frame> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("cannot connect to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    // With a password (the demo's servers): AUTH first, in the same write.
    let password = crate::client::password();
    let mut commands: Vec<&[&[u8]]> = Vec::new();
    let auth: [&[u8]; 2] = [b"AUTH", password.as_deref().unwrap_or_default().as_bytes()];
    if password.is_some() {
        commands.push(&auth);
    }
    commands.push(args);
    let mut request = Vec::new();
    for args in &commands {
        request.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args.iter() {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
    }
    stream.write_all(&request)?;
    let limits = Limits { bulk_bytes_max: 64 << 20, ..Limits::default() };
    let mut buffer = BytesMut::with_capacity(64 << 10);
    let mut chunk = vec![0u8; 64 << 10];
    let mut replies_left = commands.len();
    loop {
        if let Some(frame) = Frame::decode(&mut buffer, &limits)? {
            replies_left -= 1;
            if replies_left == 0 {
                return Ok(frame);
            }
            if let Frame::Error(error) = frame {
                anyhow::bail!("{addr} refused the password: {}", String::from_utf8_lossy(&error));
            }
            continue;
        }
        let read = stream.read(&mut chunk).with_context(|| format!("reading from {addr}"))?;
        anyhow::ensure!(read > 0, "{addr} closed the connection");
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// The acknowledged writes missing (or holding another value) on the server at `addr`.
pub(crate) fn missing(addr: SocketAddr, acks: &[Ack]) -> anyhow::Result<u64> {
    let mut missing = 0;
    for chunk in acks.chunks(500) {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(chunk.iter().map(|ack| ack.key.as_bytes()));
        let reply = ask(addr, &args, Duration::from_secs(10))?;
        let Frame::Array(values) = reply else {
            anyhow::bail!("MGET on {addr} answered {reply:?}");
        };
        anyhow::ensure!(values.len() == chunk.len(), "MGET on {addr}: wrong number of values");
        for (ack, value) in chunk.iter().zip(values) {
            if !matches!(&value, Frame::Bulk(bytes) if bytes.as_ref() == ack.key.as_bytes()) {
                missing += 1;
            }
        }
    }
    Ok(missing)
}
