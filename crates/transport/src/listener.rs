//! The redo listener: where a member of a configuration is reached by its peers.
//!
//! Every member listens on its redo address whatever its role. The first frame of a
//! connection says what the peer wants, and the member's current *port* (`RedoPort`) answers:
//!
//! - `Hello`: a primary shipping redo. A standby's port receives it (`receiver`); a primary's
//!   port refuses it, telling the sender which incarnation it is primary in (so that a stale
//!   primary learns it has been failed over), and learns from it if the sender is primary in
//!   a newer incarnation than its own.
//! - `Probe`: "who are you?": answered with the member's `RoleInfo`.
//! - `CopyRequest`: a new standby asking a primary or a database standby for a copy of its
//!   data (`copy`).
//! - `RelaySeal`: a failover target asking the member it receives from (a far sync, a
//!   cascading standby) to take no more of the old primary's redo and say where its own ends
//!   (`receiver`; docs/roles.md, "Failover through a far sync").
//!
//! - `ObserverPing`: a fast-start failover observer (`fast_start`).
//!
//! The port is replaced when the member's role changes; the listener (and its address) stays.
//! Before any of that, the peer proves who it is (`admission`): with TLS its certificate must
//! be for the name its first frame claims, and that name may ask only what its place in the
//! configuration allows. What a peer can hold here is bounded: a handshake slot for at most
//! the handshake timeout (shared fairly between source addresses: see `admission`), then 16
//! established connections in all, and TCP keepalive on every connection.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use proto::{CopyRequest, ErrorCode, ErrorMessage, Hello, Message, Probe, RelaySeal, RoleInfo};

pub use crate::admission::{CONNECTIONS_MAX, ListenerLimits, Security};
use crate::admission::{FIRST_FRAME_MAX, HandshakeSlot, Slots};
use crate::config::BufferSize;
use crate::conn::{Conn, ConnError};
use crate::primary::PAYLOAD_MAX;

/// TCP keepalive of redo connections: a peer silent for 10 s is probed every 5 s, and the
/// connection ends after 3 unanswered probes (about 25 s).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_RETRIES: u32 = 3;
/// How long a standby's answer to a hello may take to send.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// What a member does with the connections its peers open.
pub trait RedoPort: Send + Sync {
    /// A primary's hello: serve the connection (receive its redo) or refuse it.
    fn hello(&self, conn: Conn, hello: Hello);
    /// Who this member is.
    fn role_info(&self) -> RoleInfo;
    /// A new standby asks for a copy of the data: serve it, or refuse.
    fn copy(&self, conn: Conn, request: CopyRequest);
    /// A failover target asks this member, its relay, to take no more of the old primary's
    /// redo and say where its own ends. Only a standby that forwards serves it.
    fn relay_seal(&self, mut conn: Conn, seal: RelaySeal) {
        conn.refuse(ErrorMessage::new(
            ErrorCode::NotAStandby,
            format!(
                "'{}' asks this member for the tail of '{}', but it relays no redo now (it is no standby)",
                seal.member, seal.primary
            ),
        ));
    }
}

/// Refusals, counted for status: who was refused last, and why.
#[derive(Debug, Default)]
pub struct Refusals {
    state: Mutex<(u64, Option<String>)>,
}

impl Refusals {
    /// Logs the refusal, counts it, and tells the peer before closing.
    pub fn refuse(&self, conn: &mut Conn, error: ErrorMessage) {
        // (A stranger can be refused at will: 20 lines every 10 s at most.)
        static LOGGED: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
        if let Some(left_out) = LOGGED.admit() {
            tracing::error!(peer = %conn.peer, code = %error.code, message = %error.message, left_out, "redo listener: refused a peer");
        }
        {
            let mut state = self.state.lock();
            state.0 += 1;
            state.1 = Some(format!("refused {}: {}", conn.peer, error.message));
        }
        conn.refuse(error);
    }

    /// Notes a peer that could not even be told (a failed TLS handshake).
    pub fn note(&self, peer: SocketAddr, reason: &str) {
        let mut state = self.state.lock();
        state.0 += 1;
        state.1 = Some(format!("refused {peer}: {reason}"));
    }

    /// How many were refused, and the last reason.
    pub fn get(&self) -> (u64, Option<String>) {
        self.state.lock().clone()
    }

    /// Forgets the last reason (it belonged to the member's previous role).
    pub fn forget_last(&self) {
        self.state.lock().1 = None;
    }
}

/// A port that answers every hello and copy request with "try again" (while the member's
/// role is changing) and probes with what it is given.
pub struct Unavailable {
    pub refusals: Arc<Refusals>,
    pub info: RoleInfo,
    pub reason: String,
}

impl RedoPort for Unavailable {
    fn hello(&self, mut conn: Conn, _hello: Hello) {
        self.refusals
            .refuse(&mut conn, ErrorMessage::new(ErrorCode::ShuttingDown, self.reason.clone()));
    }

    fn role_info(&self) -> RoleInfo {
        self.info.clone()
    }

    fn copy(&self, mut conn: Conn, _request: CopyRequest) {
        self.refusals
            .refuse(&mut conn, ErrorMessage::new(ErrorCode::ShuttingDown, self.reason.clone()));
    }
}

/// The listener.
pub struct RedoListener {
    inner: Arc<Inner>,
    local_addr: SocketAddr,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Inner {
    port: RwLock<Arc<dyn RedoPort>>,
    refusals: Arc<Refusals>,
    shutdown: AtomicBool,
    /// Answers observers (fast-start failover), whatever the role; none: refused.
    observer: RwLock<Option<Arc<dyn crate::fast_start::ObserverHooks>>>,
    security: Security,
    slots: Arc<Slots>,
}

impl RedoListener {
    /// Binds `address` (`ip:port`; port 0 picks one) with `receive_buffer` set before
    /// listening (so accepted connections get the window scale for it), and serves `port`,
    /// over plain TCP.
    pub fn bind(
        address: &str,
        receive_buffer: BufferSize,
        refusals: Arc<Refusals>,
        port: Arc<dyn RedoPort>,
    ) -> std::io::Result<RedoListener> {
        RedoListener::bind_secure(address, receive_buffer, refusals, port, Security::default())
    }

    /// `bind`, admitting peers as `security` says (mutual TLS, who may ask what).
    pub fn bind_secure(
        address: &str,
        receive_buffer: BufferSize,
        refusals: Arc<Refusals>,
        port: Arc<dyn RedoPort>,
        security: Security,
    ) -> std::io::Result<RedoListener> {
        let address: SocketAddr = address.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the redo listener address '{address}' is not ip:port"),
            )
        })?;
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        if let BufferSize::Bytes(bytes) = receive_buffer {
            socket.set_recv_buffer_size(bytes as usize)?;
        }
        socket.bind(&address.into())?;
        socket.listen(64)?;
        let listener: TcpListener = socket.into();
        let local_addr = listener.local_addr()?;
        if security.tls.is_none() && !local_addr.ip().is_loopback() {
            tracing::warn!(listen = %local_addr, "SECURITY: the redo listener binds a non-loopback address without TLS: anyone who reaches it can ship redo to this member or ask it for a copy of its data; configure [tls]");
        }
        let inner = Arc::new(Inner {
            port: RwLock::new(port),
            refusals,
            shutdown: AtomicBool::new(false),
            observer: RwLock::new(None),
            slots: Slots::new(security.limits),
            security,
        });
        let thread = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("redo-listen".into())
                .spawn(move || inner.accept(listener))?
        };
        Ok(RedoListener { inner, local_addr, thread: Mutex::new(Some(thread)) })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Whether peers must prove who they are with TLS.
    pub fn is_tls(&self) -> bool {
        self.inner.security.tls.is_some()
    }

    /// Handshakes in progress, established connections, handshakes ended to make room.
    pub fn slot_counts(&self) -> (usize, usize, u64) {
        self.inner.slots.counts()
    }

    /// Serves `port` from the next connection on (connections already served by the old
    /// port end as that port stops them).
    pub fn set_port(&self, port: Arc<dyn RedoPort>) {
        *self.inner.port.write() = port;
    }

    /// Answers observers from now on.
    pub fn set_observer_hooks(&self, hooks: Arc<dyn crate::fast_start::ObserverHooks>) {
        *self.inner.observer.write() = Some(hooks);
    }

    pub fn refusals(&self) -> &Arc<Refusals> {
        &self.inner.refusals
    }

    /// Stops accepting and waits for the connections being served to end.
    pub fn stop(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        // Unblock accept().
        let _ = std::net::TcpStream::connect_timeout(&self.local_addr, Duration::from_millis(200));
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RedoListener {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inner {
    fn accept(self: Arc<Inner>, listener: TcpListener) {
        let mut connections: Vec<JoinHandle<()>> = Vec::new();
        for stream in listener.incoming() {
            if self.shutdown.load(Ordering::Acquire) {
                break;
            }
            let stream = match stream {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::warn!(%error, "redo listener: accept failed");
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            // A peer that vanished without a FIN (a power cut, a long partition) must not
            // hold its connection for ever: the kernel probes an idle connection and ends it.
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(KEEPALIVE_IDLE)
                .with_interval(KEEPALIVE_INTERVAL)
                .with_retries(KEEPALIVE_RETRIES);
            if let Err(error) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
                tracing::warn!(%error, "redo listener: cannot enable TCP keepalive");
            }
            let Ok(peer) = stream.peer_addr() else { continue };
            // Every connection starts in a handshake slot; when they are all taken, the oldest
            // of the busiest source ends (its thread sees its socket shut).
            let slot = self.slots.handshake(peer.ip(), &stream);
            connections.retain(|handle| !handle.is_finished());
            let inner = self.clone();
            let handle =
                std::thread::Builder::new().name("redo-rfs".into()).spawn(move || match Conn::new(
                    stream,
                    FIRST_FRAME_MAX,
                ) {
                    Ok(conn) => inner.serve(conn, slot),
                    Err(error) => {
                        tracing::debug!(%peer, %error, "redo listener: connection lost at once")
                    }
                });
            match handle {
                Ok(handle) => connections.push(handle),
                Err(error) => tracing::error!(%error, "redo listener: cannot start a thread"),
            }
        }
        for handle in connections.drain(..) {
            let _ = handle.join();
        }
    }

    /// One connection: the TLS handshake, then its first frame says who it is and what it is
    /// for, all within the handshake timeout.
    fn serve(&self, conn: Conn, slot: HandshakeSlot) {
        let peer = conn.peer;
        if let Err(error) = conn.wait_for_bytes(slot.left()) {
            tracing::debug!(%peer, %error, "redo listener: a connection said nothing");
            return;
        }
        slot.spoke();
        let mut conn = match &self.security.tls {
            Some(tls) => match conn.accept_tls(tls, slot.left()) {
                Ok(conn) => conn,
                Err(error) => {
                    // A stranger, a peer without TLS, or a certificate refused: logged (not
                    // counted as a refusal: nothing was said to it), 20 every 10 s at most.
                    static LOGGED: crate::log_limit::LogLimit = crate::log_limit::LogLimit::new();
                    if let Some(left_out) = LOGGED.admit() {
                        tracing::warn!(%peer, %error, left_out, "redo listener: TLS handshake failed");
                    }
                    self.refusals.note(peer, &format!("TLS handshake failed: {error}"));
                    return;
                }
            },
            None => conn,
        };
        let first = match conn.recv(Some(slot.left())) {
            Ok(message) => message,
            Err(ConnError::Protocol(error)) => {
                self.refusals
                    .refuse(&mut conn, ErrorMessage::new(ErrorCode::Malformed, error.to_string()));
                return;
            }
            Err(error) => {
                tracing::debug!(%peer, %error, "redo listener: connection closed before its first frame");
                return;
            }
        };
        let name = match self.security.admit(&conn, &first) {
            Ok(name) => name,
            Err(error) => {
                self.refusals.refuse(&mut conn, error);
                return;
            }
        };
        let _established = match self.slots.establish(slot, &name) {
            Ok(established) => established,
            Err(error) => {
                self.refusals.refuse(&mut conn, error);
                return;
            }
        };
        conn.set_payload_max(PAYLOAD_MAX);
        let port = self.port.read().clone();
        match first {
            Message::Hello(hello) => port.hello(conn, hello),
            Message::Probe(Probe { member, .. }) => {
                tracing::debug!(%peer, member, "redo listener: probed");
                let _ = conn.send(&Message::RoleInfo(port.role_info()), Duration::from_secs(10));
                conn.shutdown();
            }
            Message::CopyRequest(request) => port.copy(conn, request),
            Message::RelaySeal(seal) => port.relay_seal(conn, seal),
            Message::ObserverPing(ping) => match self.observer.read().clone() {
                Some(hooks) => crate::fast_start::serve_observer(conn, ping, hooks.as_ref(), &|| {
                    self.shutdown.load(Ordering::Acquire)
                }),
                None => self.refusals.refuse(
                    &mut conn,
                    ErrorMessage::new(ErrorCode::NotAStandby, "this member takes no observer (fast-start failover is not configured here)"),
                ),
            },
            // `admit` let nothing else through.
            other => self.refusals.refuse(
                &mut conn,
                ErrorMessage::new(ErrorCode::Malformed, format!("unexpected {:?}", other.kind())),
            ),
        }
    }
}

/// Asks the member called `name` at `address` who it is (a `Probe`), within `timeout`, as
/// `asking`; over mutual TLS if `tls` is given (the answer must come from `name`).
pub fn probe(
    address: &str,
    name: &str,
    asking: &str,
    tls: Option<&tls::RedoTls>,
    timeout: Duration,
) -> Result<RoleInfo, String> {
    let mut conn = Conn::connect(address, timeout, None, PAYLOAD_MAX)
        .and_then(|conn| conn.secure(tls, name, timeout))
        .map_err(|error| format!("connecting to {address}: {error}"))?;
    conn.send(
        &Message::Probe(Probe { member: asking.to_string(), time_us: redo::types::now_unix_us() }),
        timeout,
    )
    .map_err(|error| format!("asking {address}: {error}"))?;
    match conn.recv(Some(timeout)) {
        Ok(Message::RoleInfo(info)) => Ok(info),
        Ok(Message::Error(error)) => Err(format!("{address} refused: {}", error.message)),
        Ok(other) => Err(format!("{address} answered with {:?}", other.kind())),
        Err(error) => Err(format!("asking {address}: {error}")),
    }
}

/// Asks `relay` (at `address`), the member this one receives its redo from, to take no more of
/// `primary`'s redo of `incarnation` (or older) and say where its redo ends (a `RelaySeal`),
/// within `timeout`, as `asking`; over mutual TLS if `tls` is given. The answer's position is
/// the relay's durable end after the seal.
pub fn relay_seal(
    address: &str,
    relay: &str,
    asking: &str,
    primary: &str,
    incarnation: u32,
    tls: Option<&tls::RedoTls>,
    timeout: Duration,
) -> Result<RoleInfo, String> {
    let mut conn = Conn::connect(address, timeout, None, PAYLOAD_MAX)
        .and_then(|conn| conn.secure(tls, relay, timeout))
        .map_err(|error| format!("connecting to '{relay}' at {address}: {error}"))?;
    conn.send(
        &Message::RelaySeal(RelaySeal {
            member: asking.to_string(),
            primary: primary.to_string(),
            incarnation,
            time_us: redo::types::now_unix_us(),
        }),
        timeout,
    )
    .map_err(|error| format!("asking '{relay}': {error}"))?;
    match conn.recv(Some(timeout)) {
        Ok(Message::RoleInfo(info)) => Ok(info),
        Ok(Message::Error(error)) => Err(format!("'{relay}' refused: {}", error.message)),
        Ok(other) => Err(format!("'{relay}' answered with {:?}", other.kind())),
        Err(error) => Err(format!("asking '{relay}': {error}")),
    }
}
