//! The nettest client: N connections that play a primary's redo sender (SYNC: one message
//! in flight, wait for the acknowledgement; ASYNC: stream, acknowledgements come back on
//! their own), and the interval and final reports.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::frame::{self, HEADER_BYTES, Header, Hello, Kind, Mode, Status, Summary, Welcome};
use super::payload::{self, Payload};
use super::report::{ClientReport, IntervalReport, LatencyUs};
use super::{NettestError, socket};

/// Connections one client may open.
pub const CONNECTIONS_LIMIT: u32 = 256;
/// Longest test.
pub const DURATION_MAX: Duration = Duration::from_secs(24 * 3600);
/// Send times an ASYNC connection remembers for latency; beyond it (a server far behind)
/// further messages are not timed, only counted.
const IN_FLIGHT_TRACKED_MAX: usize = 1 << 20;
/// Latency histograms track up to an hour, in nanoseconds, to 3 significant digits.
const LATENCY_NS_MAX: u64 = 3_600_000_000_000;

/// Socket buffer sizes for both ends of every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SocketBuffer {
    /// Leave the kernel's autotuning alone (`net.ipv4.tcp_wmem`/`tcp_rmem`).
    Auto,
    /// `SO_SNDBUF` and `SO_RCVBUF` of this many bytes, on the client before it connects and
    /// on the server's accepted socket.
    Bytes(u64),
}

impl std::str::FromStr for SocketBuffer {
    type Err = String;

    fn from_str(text: &str) -> Result<SocketBuffer, String> {
        if text.trim().eq_ignore_ascii_case("auto") {
            return Ok(SocketBuffer::Auto);
        }
        let bytes = crate::units::parse_size(text)?;
        if bytes == 0 || bytes > u32::MAX as u64 / 2 {
            return Err(format!("'{text}': socket buffers are 1 byte to 2 GiB, or auto"));
        }
        Ok(SocketBuffer::Bytes(bytes))
    }
}

/// One client run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// Server host name or address.
    pub host: String,
    /// Server port. Default: 5400.
    pub port: u16,
    /// SYNC, ASYNC or RTT (ping-pong only).
    pub mode: Mode,
    /// Ask the server to write each message to its file and fdatasync before acknowledging.
    pub write: bool,
    /// Bytes per message. Bounds: 1..=1 GiB (and the server's maximum).
    pub message_bytes: u32,
    /// How long messages are sent. Bounds: 1 ms..=24 h.
    pub duration: Duration,
    /// Reporting interval. Bounds: 1 ms..=duration.
    pub interval: Duration,
    /// Parallel connections. Bounds: 1..=256.
    pub connections: u32,
    pub sockbuf: SocketBuffer,
    /// Total target rate across connections in bytes per second; `None` = as fast as
    /// possible.
    pub rate_bytes_per_s: Option<f64>,
    /// Pause after each message (think time), per connection.
    pub delay: Duration,
    pub payload: Payload,
    /// Longest wait to connect, or for any answer from the server.
    pub timeout: Duration,
    /// TCP congestion control to request per socket (e.g. `cubic`); `None` = the system's.
    pub congestion: Option<String>,
}

impl ClientConfig {
    /// A configuration with the defaults for everything but where and how.
    pub fn new(host: impl Into<String>, port: u16, mode: Mode) -> ClientConfig {
        ClientConfig {
            host: host.into(),
            port,
            mode,
            write: false,
            message_bytes: if mode == Mode::Rtt { 1 } else { 9400 },
            duration: Duration::from_secs(10),
            interval: Duration::from_secs(2),
            connections: 1,
            sockbuf: SocketBuffer::Auto,
            rate_bytes_per_s: None,
            delay: Duration::ZERO,
            payload: Payload::Random,
            timeout: Duration::from_secs(10),
            congestion: None,
        }
    }

    pub fn validate(&self) -> Result<(), NettestError> {
        let invalid = |field, reason: String| Err(NettestError::Config { field, reason });
        if !(1..=frame::MESSAGE_BYTES_LIMIT).contains(&self.message_bytes) {
            return invalid(
                "length",
                format!(
                    "{} is outside 1..={} bytes",
                    self.message_bytes,
                    frame::MESSAGE_BYTES_LIMIT
                ),
            );
        }
        if self.duration < Duration::from_millis(1) || self.duration > DURATION_MAX {
            return invalid("duration", format!("{:?} is outside 1ms..=24h", self.duration));
        }
        if self.interval < Duration::from_millis(1) || self.interval > self.duration {
            return invalid(
                "interval",
                format!(
                    "{:?} must be at least 1ms and at most the duration {:?}",
                    self.interval, self.duration
                ),
            );
        }
        if !(1..=CONNECTIONS_LIMIT).contains(&self.connections) {
            return invalid(
                "num-conn",
                format!("{} is outside 1..={CONNECTIONS_LIMIT}", self.connections),
            );
        }
        if let Some(rate) = self.rate_bytes_per_s
            && !(rate.is_finite() && rate > 0.0)
        {
            return invalid("rate", format!("{rate} bytes/s is not a positive rate"));
        }
        if self.timeout.is_zero() {
            return invalid("timeout", "must be longer than zero".into());
        }
        if self.write && self.mode == Mode::Rtt {
            return invalid("write", "--rtt measures the network only; it cannot --write".into());
        }
        Ok(())
    }
}

/// What every connection shares with the reporting thread.
struct Tally {
    bytes_acked: AtomicU64,
    messages_acked: AtomicU64,
    /// Latencies since the last interval report.
    latency_ns: Mutex<Histogram<u64>>,
    /// When the last acknowledgement arrived, in ns after the start.
    last_ack_ns: AtomicU64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            bytes_acked: AtomicU64::new(0),
            messages_acked: AtomicU64::new(0),
            latency_ns: Mutex::new(new_histogram()),
            last_ack_ns: AtomicU64::new(0),
        }
    }

    fn acked(&self, messages: u64, bytes: u64, start: Instant) {
        self.messages_acked.fetch_add(messages, Ordering::Relaxed);
        self.bytes_acked.fetch_add(bytes, Ordering::Relaxed);
        self.last_ack_ns.fetch_max(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("valid histogram bounds")
}

fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let _ = histogram.record((elapsed.as_nanos() as u64).clamp(1, LATENCY_NS_MAX));
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The starting gate: connections set up, then all start together (or abort).
struct Gate {
    state: Mutex<Option<Result<Instant, ()>>>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) -> Option<Instant> {
        let mut state = lock(&self.state);
        loop {
            match *state {
                Some(Ok(start)) => return Some(start),
                Some(Err(())) => return None,
                None => state = self.opened.wait(state).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }

    fn open(&self, outcome: Result<Instant, ()>) {
        *lock(&self.state) = Some(outcome);
        self.opened.notify_all();
    }
}

/// Facts about one connection once it is set up.
#[derive(Debug, Clone)]
pub(crate) struct Established {
    pub(crate) client_sndbuf_bytes: u64,
    pub(crate) client_rcvbuf_bytes: u64,
    pub(crate) server: Welcome,
    pub(crate) congestion: String,
}

/// Runs a test; see [`run_client_with`] to see each interval as it ends.
pub fn run_client(config: &ClientConfig) -> Result<ClientReport, NettestError> {
    run_client_with(config, |_| {})
}

/// Runs a test, calling `on_interval` at the end of each reporting interval.
pub fn run_client_with(
    config: &ClientConfig,
    mut on_interval: impl FnMut(&IntervalReport),
) -> Result<ClientReport, NettestError> {
    config.validate()?;
    let address = resolve(&config.host, config.port)?;
    let gate = Arc::new(Gate { state: Mutex::new(None), opened: Condvar::new() });
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Tally>> =
        (0..config.connections).map(|_| Arc::new(Tally::new())).collect();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Established, NettestError>>();
    let mut workers = Vec::with_capacity(config.connections as usize);
    for index in 0..config.connections {
        let (own_config, own_gate, own_stop, tally, ready) = (
            config.clone(),
            gate.clone(),
            stop.clone(),
            tallies[index as usize].clone(),
            ready_tx.clone(),
        );
        let spawned =
            std::thread::Builder::new().name(format!("nettest-client-{index}")).spawn(move || {
                connection(&own_config, address, index, &own_gate, &own_stop, &tally, &ready)
            });
        match spawned {
            Ok(handle) => workers.push(handle),
            Err(source) => {
                gate.open(Err(()));
                return Err(NettestError::Io { what: "spawn a connection thread".into(), source });
            }
        }
    }
    drop(ready_tx);
    let mut established = Vec::with_capacity(workers.len());
    let mut setup_error = None;
    for _ in 0..workers.len() {
        match ready_rx.recv() {
            Ok(Ok(facts)) => established.push(facts),
            Ok(Err(error)) => {
                setup_error.get_or_insert(error);
            }
            Err(_) => break,
        }
    }
    if let Some(error) = setup_error {
        gate.open(Err(()));
        for worker in workers {
            let _ = worker.join();
        }
        return Err(error);
    }
    let start = Instant::now();
    gate.open(Ok(start));

    // Interval reports until every connection has finished.
    let mut intervals = Intervals::new(&tallies);
    let mut next_tick = config.interval;
    let mut emitted = 0;
    let mut results = Vec::with_capacity(workers.len());
    let mut pending: VecDeque<_> = workers.into_iter().collect();
    while let Some(worker) = pending.pop_front() {
        if !worker.is_finished() {
            pending.push_front(worker);
            let now = start.elapsed();
            if now >= next_tick && next_tick <= config.duration {
                intervals.take(next_tick);
                // The newest interval is held back until the next one: a short final
                // remainder may still be folded into it.
                let shown = intervals.reports.len() - 1;
                intervals.reports[emitted..shown].iter().for_each(&mut on_interval);
                emitted = shown;
                next_tick += config.interval;
                continue;
            }
            let wait = next_tick.saturating_sub(now).min(Duration::from_millis(20));
            std::thread::sleep(wait.max(Duration::from_millis(1)));
            continue;
        }
        results.push(worker.join().unwrap_or_else(|_| {
            Err(NettestError::Protocol {
                peer: address.to_string(),
                reason: "a connection thread panicked".into(),
            })
        }));
    }
    let last_ack = tallies.iter().map(|t| t.last_ack_ns.load(Ordering::Relaxed)).max().unwrap_or(0);
    let elapsed = Duration::from_nanos(last_ack).max(config.duration.min(start.elapsed()));
    if intervals.unreported_bytes() > 0 || intervals.reports.is_empty() {
        // Whatever was acknowledged after the last full interval (the drain after the
        // deadline, or a partial interval).
        let end = elapsed.max(intervals.start);
        intervals.take_last(end, config.interval / 4);
    }
    intervals.reports[emitted..].iter().for_each(&mut on_interval);
    let mut summaries = Vec::with_capacity(results.len());
    for result in results {
        summaries.push(result?);
    }
    let bytes: u64 = tallies.iter().map(|t| t.bytes_acked.load(Ordering::Relaxed)).sum();
    let messages: u64 = tallies.iter().map(|t| t.messages_acked.load(Ordering::Relaxed)).sum();
    Ok(ClientReport::build(
        config,
        elapsed,
        bytes,
        messages,
        &intervals.total_latency,
        &established,
        &summaries,
        intervals.reports,
    ))
}

/// Cuts the running totals into interval reports.
struct Intervals<'a> {
    tallies: &'a [Arc<Tally>],
    reports: Vec<IntervalReport>,
    total_latency: Histogram<u64>,
    bytes: u64,
    messages: u64,
    start: Duration,
    /// Latencies of the last reported interval, in case the final remainder joins it.
    last_latency: Histogram<u64>,
}

impl<'a> Intervals<'a> {
    fn new(tallies: &'a [Arc<Tally>]) -> Intervals<'a> {
        Intervals {
            tallies,
            reports: Vec::new(),
            total_latency: new_histogram(),
            bytes: 0,
            messages: 0,
            start: Duration::ZERO,
            last_latency: new_histogram(),
        }
    }

    fn acked_bytes(&self) -> u64 {
        self.tallies.iter().map(|t| t.bytes_acked.load(Ordering::Relaxed)).sum()
    }

    fn unreported_bytes(&self) -> u64 {
        self.acked_bytes() - self.bytes
    }

    /// Closes the interval that ends at `end` (after the start) and returns its report.
    fn take(&mut self, end: Duration) -> &IntervalReport {
        let (bytes, messages, latency) = self.drain();
        let report = IntervalReport::new(
            self.start,
            end,
            bytes - self.bytes,
            messages - self.messages,
            LatencyUs::from_histogram(&latency),
        );
        (self.bytes, self.messages, self.start) = (bytes, messages, end);
        self.last_latency = latency;
        self.reports.push(report);
        self.reports.last().expect("just pushed")
    }

    /// Closes the final, partial interval; one shorter than `short` (the drain of the last
    /// acknowledgements after the deadline) joins the interval before it rather than
    /// standing alone with a meaningless rate.
    fn take_last(&mut self, end: Duration, short: Duration) -> &IntervalReport {
        if end.saturating_sub(self.start) >= short || self.reports.is_empty() {
            return self.take(end);
        }
        let previous = self.reports.pop().expect("not empty");
        let (bytes, messages, latency) = self.drain();
        let _ = self.last_latency.add(&latency);
        let start = Duration::from_secs_f64(previous.start_s);
        let report = IntervalReport::new(
            start,
            end,
            previous.bytes + bytes - self.bytes,
            previous.messages + messages - self.messages,
            LatencyUs::from_histogram(&self.last_latency),
        );
        (self.bytes, self.messages, self.start) = (bytes, messages, end);
        self.reports.push(report);
        self.reports.last().expect("just pushed")
    }

    /// Totals so far and the latencies since the last call.
    fn drain(&mut self) -> (u64, u64, Histogram<u64>) {
        let bytes = self.acked_bytes();
        let messages: u64 =
            self.tallies.iter().map(|t| t.messages_acked.load(Ordering::Relaxed)).sum();
        let mut latency = new_histogram();
        for tally in self.tallies {
            let mut histogram = lock(&tally.latency_ns);
            let _ = latency.add(&*histogram);
            histogram.reset();
        }
        let _ = self.total_latency.add(&latency);
        (bytes, messages, latency)
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, NettestError> {
    (host, port)
        .to_socket_addrs()
        .map_err(|source| NettestError::Io { what: format!("resolve {host}"), source })?
        .next()
        .ok_or_else(|| NettestError::Config {
            field: "host",
            reason: format!("{host} has no address"),
        })
}

/// One connection, from connect to SUMMARY.
fn connection(
    config: &ClientConfig,
    address: SocketAddr,
    index: u32,
    gate: &Gate,
    stop: &AtomicBool,
    tally: &Tally,
    ready: &std::sync::mpsc::Sender<Result<Established, NettestError>>,
) -> Result<Summary, NettestError> {
    let setup = establish(config, address);
    let (stream, facts) = match setup {
        Ok(ok) => ok,
        Err(error) => {
            let _ = ready.send(Err(error));
            return Ok(Summary::default());
        }
    };
    let _ = ready.send(Ok(facts));
    let Some(start) = gate.wait() else { return Ok(Summary::default()) };
    let deadline = start + config.duration;
    let message = {
        let kind = if config.mode == Mode::Rtt { Kind::Ping } else { Kind::Data };
        let flags = if config.mode == Mode::Sync { frame::FLAG_SYNC } else { 0 };
        let mut message =
            Header { kind, flags, body_bytes: config.message_bytes, seq: 0 }.encode().to_vec();
        message.extend_from_slice(&payload::generate(
            config.payload,
            config.message_bytes as usize,
            index as u64 + 1,
        ));
        message
    };
    let pacing = config.rate_bytes_per_s.map(|rate| {
        Duration::from_secs_f64(config.message_bytes as f64 / (rate / config.connections as f64))
    });
    let peer = address.to_string();
    let run = Run { config, pacing, deadline, start, stop, tally, peer: &peer };
    let result = match config.mode {
        Mode::Sync | Mode::Rtt => run.lockstep(stream, message),
        Mode::Async => run.stream_messages(stream, message),
    };
    if result.is_err() {
        // One broken connection ends the test: the figures of the others would mislead.
        stop.store(true, Ordering::Relaxed);
    }
    result
}

fn establish(
    config: &ClientConfig,
    address: SocketAddr,
) -> Result<(TcpStream, Established), NettestError> {
    let peer = address.to_string();
    let io_error =
        |what: &str, source| NettestError::Io { what: format!("{what} ({peer})"), source };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| io_error("create a socket", e))?;
    if let SocketBuffer::Bytes(bytes) = config.sockbuf {
        socket.set_send_buffer_size(bytes as usize).map_err(|e| io_error("set SO_SNDBUF", e))?;
        socket.set_recv_buffer_size(bytes as usize).map_err(|e| io_error("set SO_RCVBUF", e))?;
    }
    if let Some(name) = &config.congestion {
        socket::set_congestion(&socket, name).map_err(|e| NettestError::Config {
            field: "congestion",
            reason: format!(
                "the kernel refuses '{name}': {e} (see net.ipv4.tcp_available_congestion_control)"
            ),
        })?;
    }
    socket.connect_timeout(&address.into(), config.timeout).map_err(|e| io_error("connect", e))?;
    let mut stream: TcpStream = socket.into();
    stream.set_nodelay(true).map_err(|e| io_error("set TCP_NODELAY", e))?;
    stream.set_read_timeout(Some(config.timeout)).map_err(|e| io_error("set a read timeout", e))?;
    stream
        .set_write_timeout(Some(config.timeout))
        .map_err(|e| io_error("set a write timeout", e))?;
    let sockbuf_bytes = match config.sockbuf {
        SocketBuffer::Auto => 0,
        SocketBuffer::Bytes(bytes) => bytes as u32,
    };
    let hello = Hello {
        version: frame::VERSION,
        mode: config.mode,
        write: config.write,
        message_bytes: config.message_bytes,
        sockbuf_bytes,
    };
    let mut out = Vec::new();
    frame::encode(&mut out, Kind::Hello, 0, 0, &hello.encode());
    stream.write_all(&out).map_err(|e| io_error("send HELLO", e))?;
    let (header, body) = read_frame(&mut stream, &peer, config.timeout)?;
    if header.kind != Kind::Welcome {
        return Err(NettestError::Protocol {
            peer,
            reason: format!("expected WELCOME, got {:?}", header.kind),
        });
    }
    let welcome = Welcome::decode(&body)
        .map_err(|e| NettestError::Protocol { peer: peer.clone(), reason: e.to_string() })?;
    if welcome.status != Status::Ok {
        return Err(NettestError::Refused {
            peer,
            reason: format!("{:?}: {}", welcome.status, welcome.reason),
        });
    }
    let socket = socket2::SockRef::from(&stream);
    let facts = Established {
        client_sndbuf_bytes: socket.send_buffer_size().unwrap_or(0) as u64,
        client_rcvbuf_bytes: socket.recv_buffer_size().unwrap_or(0) as u64,
        server: welcome,
        congestion: socket::congestion(&stream).unwrap_or_else(|_| "unknown".into()),
    };
    Ok((stream, facts))
}

/// Reads one frame from the server: only control frames come this way, so the body is
/// small and bounded by the header check. An ERROR frame becomes [`NettestError::Refused`].
fn read_frame(
    stream: &mut TcpStream,
    peer: &str,
    timeout: Duration,
) -> Result<(Header, Vec<u8>), NettestError> {
    let map = |error: io::Error, doing: &str| match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            NettestError::Timeout { peer: peer.to_string(), timeout, doing: doing.to_string() }
        }
        io::ErrorKind::UnexpectedEof => NettestError::Protocol {
            peer: peer.to_string(),
            reason: format!("the server closed the connection while we were {doing}"),
        },
        _ => NettestError::Io { what: format!("read from {peer} while {doing}"), source: error },
    };
    let mut header = [0u8; HEADER_BYTES];
    stream.read_exact(&mut header).map_err(|e| map(e, "waiting for an answer"))?;
    let header = Header::decode(&header, 0).map_err(|e| NettestError::Protocol {
        peer: peer.to_string(),
        reason: format!("the server sent {e}"),
    })?;
    let mut body = vec![0u8; header.body_bytes as usize];
    stream.read_exact(&mut body).map_err(|e| map(e, "reading an answer"))?;
    if header.kind == Kind::Error {
        return Err(NettestError::Refused {
            peer: peer.to_string(),
            reason: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    Ok((header, body))
}

fn pace(next_send: &mut Instant, pacing: Option<Duration>) {
    let Some(gap) = pacing else { return };
    let now = Instant::now();
    if *next_send > now {
        std::thread::sleep(*next_send - now);
    }
    // A sender that fell behind does not burst to catch up by more than one message.
    *next_send = (*next_send).max(now) + gap;
}

fn send_failed(peer: &str, error: io::Error, timeout: Duration) -> NettestError {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => NettestError::Timeout {
            peer: peer.to_string(),
            timeout,
            doing: "sending (the server stopped reading)".into(),
        },
        _ => NettestError::Io { what: format!("send to {peer}"), source: error },
    }
}

/// What a connection's sending loop needs to know.
struct Run<'a> {
    config: &'a ClientConfig,
    pacing: Option<Duration>,
    deadline: Instant,
    start: Instant,
    stop: &'a AtomicBool,
    tally: &'a Tally,
    peer: &'a str,
}

impl Run<'_> {
    fn running(&self) -> bool {
        Instant::now() < self.deadline && !self.stop.load(Ordering::Relaxed)
    }

    /// SYNC and RTT: send one message, wait for its acknowledgement, repeat.
    fn lockstep(
        &self,
        mut stream: TcpStream,
        mut message: Vec<u8>,
    ) -> Result<Summary, NettestError> {
        let (config, peer) = (self.config, self.peer);
        let expected_kind = if config.mode == Mode::Rtt { Kind::Pong } else { Kind::Ack };
        let mut next_send = Instant::now();
        let mut seq = 0u64;
        while self.running() {
            pace(&mut next_send, self.pacing);
            seq += 1;
            message[8..16].copy_from_slice(&seq.to_le_bytes());
            let sent_at = Instant::now();
            stream.write_all(&message).map_err(|e| send_failed(peer, e, config.timeout))?;
            let (header, _) = read_frame(&mut stream, peer, config.timeout)?;
            let latency = sent_at.elapsed();
            if header.kind != expected_kind || header.seq != seq {
                return Err(NettestError::Protocol {
                    peer: peer.to_string(),
                    reason: format!(
                        "expected {expected_kind:?} {seq}, got {:?} {}",
                        header.kind, header.seq
                    ),
                });
            }
            record(&mut lock(&self.tally.latency_ns), latency);
            self.tally.acked(1, config.message_bytes as u64, self.start);
            if !config.delay.is_zero() {
                std::thread::sleep(config.delay);
            }
        }
        let mut out = Vec::new();
        frame::encode(&mut out, Kind::Finish, 0, seq, &[]);
        stream.write_all(&out).map_err(|e| send_failed(peer, e, config.timeout))?;
        let (header, body) = read_frame(&mut stream, peer, config.timeout)?;
        if header.kind != Kind::Summary {
            return Err(NettestError::Protocol {
                peer: peer.to_string(),
                reason: format!("expected SUMMARY, got {:?}", header.kind),
            });
        }
        Summary::decode(&body)
            .map_err(|e| NettestError::Protocol { peer: peer.to_string(), reason: e.to_string() })
    }

    /// ASYNC: this thread streams messages; a helper thread reads acknowledgements and
    /// times every message they cover.
    fn stream_messages(
        &self,
        mut stream: TcpStream,
        mut message: Vec<u8>,
    ) -> Result<Summary, NettestError> {
        let (config, peer) = (self.config, self.peer);
        let in_flight: Mutex<VecDeque<(u64, Instant)>> = Mutex::new(VecDeque::new());
        let mut reader = stream
            .try_clone()
            .map_err(|source| NettestError::Io { what: "clone a socket".into(), source })?;
        std::thread::scope(|scope| {
            let acks = std::thread::Builder::new()
                .name("nettest-acks".into())
                .spawn_scoped(scope, || {
                    let result = self.read_acks(&mut reader, &in_flight);
                    if result.is_err() {
                        self.stop.store(true, Ordering::Relaxed);
                    }
                    result
                })
                .map_err(|source| NettestError::Io {
                    what: "spawn the acknowledgement reader".into(),
                    source,
                })?;
            let mut next_send = Instant::now();
            let mut seq = 0u64;
            let mut send_error = None;
            while self.running() {
                pace(&mut next_send, self.pacing);
                seq += 1;
                message[8..16].copy_from_slice(&seq.to_le_bytes());
                {
                    let mut in_flight = lock(&in_flight);
                    if in_flight.len() < IN_FLIGHT_TRACKED_MAX {
                        in_flight.push_back((seq, Instant::now()));
                    }
                }
                if let Err(error) = stream.write_all(&message) {
                    send_error = Some(send_failed(peer, error, config.timeout));
                    break;
                }
                if !config.delay.is_zero() {
                    std::thread::sleep(config.delay);
                }
            }
            if send_error.is_none() {
                let mut out = Vec::new();
                frame::encode(&mut out, Kind::Finish, 0, seq, &[]);
                if let Err(error) = stream.write_all(&out) {
                    send_error = Some(send_failed(peer, error, config.timeout));
                }
            }
            if send_error.is_some() {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
            let summary = acks.join().unwrap_or_else(|_| {
                Err(NettestError::Protocol {
                    peer: peer.to_string(),
                    reason: "the acknowledgement reader panicked".into(),
                })
            });
            match send_error {
                Some(error) => Err(error),
                None => summary,
            }
        })
    }

    /// Reads ACKs (cumulative) until the SUMMARY.
    fn read_acks(
        &self,
        reader: &mut TcpStream,
        in_flight: &Mutex<VecDeque<(u64, Instant)>>,
    ) -> Result<Summary, NettestError> {
        let peer = self.peer;
        let message_bytes = self.config.message_bytes as u64;
        let mut acked = 0u64;
        let mut latencies = Vec::new();
        loop {
            let (header, body) = read_frame(reader, peer, self.config.timeout)?;
            match header.kind {
                Kind::Ack => {
                    let now = Instant::now();
                    let covered = header.seq.saturating_sub(acked);
                    acked = acked.max(header.seq);
                    {
                        let mut in_flight = lock(in_flight);
                        while in_flight.front().is_some_and(|(seq, _)| *seq <= header.seq) {
                            let (_, sent_at) = in_flight.pop_front().expect("front exists");
                            latencies.push(now - sent_at);
                        }
                    }
                    let mut histogram = lock(&self.tally.latency_ns);
                    latencies.drain(..).for_each(|latency| record(&mut histogram, latency));
                    drop(histogram);
                    self.tally.acked(covered, covered * message_bytes, self.start);
                }
                Kind::Summary => {
                    return Summary::decode(&body).map_err(|e| NettestError::Protocol {
                        peer: peer.to_string(),
                        reason: e.to_string(),
                    });
                }
                other => {
                    return Err(NettestError::Protocol {
                        peer: peer.to_string(),
                        reason: format!("unexpected {other:?} during an ASYNC test"),
                    });
                }
            }
        }
    }
}
