//! linkemu: a WAN link on one machine, for tests, benchmarks and users.
//!
//! Two network namespaces, side A and side B, each get a TUN device (`wan0`) with one
//! address; one forwarder (two threads per direction, in this process) reads every packet
//! that one side sends and writes it into the other side after a one-way delay of `rtt / 2`
//! (± jitter), behind a rate cap with a bounded drop-tail queue, unless the configured loss
//! drops it. TCP between the namespaces then really sees the RTT, its windows and its
//! queue, which veth + tbf (no delay) cannot give, and this kernel has no netem.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use std::time::Duration;
//! use linkemu::{Link, LinkConfig, Side};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let link = Link::up(LinkConfig {
//!     rtt: Duration::from_millis(25),
//!     rate_bits_per_s: Some(1_000_000_000),
//!     ..LinkConfig::default()
//! })?;
//! // A server in namespace B, in this process: sockets stay in the namespace they were
//! // created in, whichever thread uses them afterwards.
//! let listener = link.run_in(Side::B, || std::net::TcpListener::bind("0.0.0.0:5000"))??;
//! let server = std::thread::spawn(move || {
//!     let (mut stream, _) = listener.accept().unwrap();
//!     let mut byte = [0u8; 1];
//!     stream.read_exact(&mut byte).unwrap();
//!     stream.write_all(&byte).unwrap();
//! });
//! let address = (link.address(Side::B), 5000);
//! let mut client = link.run_in(Side::A, || std::net::TcpStream::connect(address))??;
//! client.write_all(b"x")?;
//! link.set_rtt(Duration::from_millis(100))?; // takes effect for the next packet
//! let mut reply = [0u8; 1];
//! client.read_exact(&mut reply)?;
//! server.join().unwrap();
//! // Or a program, through `ip netns exec <namespace of A> …`.
//! let status = link.command(Side::A, "ip").args(["-brief", "address"]).status()?;
//! assert!(status.success());
//! drop(link); // stops the forwarder, deletes both namespaces, restores the sysctls
//! # Ok(())
//! # }
//! ```
//!
//! Names: [`Link::up`] picks `rgle<pid>x<n>a` / `…b`, unique per process and link, so that
//! parallel tests do not collide; [`Link::up_named`] takes a base name (the CLI's default is
//! `rglink`, giving `rglink-a` / `rglink-b`). Addresses: side A is `198.18.0.1`, side B is
//! `198.18.0.2` (the range RFC 2544 sets aside for benchmarks), point to point, in every link.

mod config;
pub mod daemon;
mod forwarder;
pub mod mesh;
pub mod namespace;
mod rng;
mod sysctl;
mod tun;

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

pub use config::*;
pub use forwarder::DirectionStats;
pub use mesh::Mesh;
pub use sysctl::socket_buffer_limits;

use forwarder::{Direction, Params, StopSignal};
use namespace::Namespace;
use sysctl::SocketBufferLimits;
use tun::Tun;

/// Everything that can go wrong bringing a link up or changing it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid link setting '{field}': {reason}")]
    Config { field: &'static str, reason: String },
    #[error("`{command}` failed: {reason}")]
    Command { command: String, reason: String },
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// One end of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub enum Side {
    A,
    B,
}

impl Side {
    /// The other end.
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    fn index(self) -> usize {
        match self {
            Side::A => 0,
            Side::B => 1,
        }
    }
}

/// Side A's address in every link.
pub const ADDRESS_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Side B's address in every link.
pub const ADDRESS_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The TUN interface's name inside each namespace.
pub const INTERFACE: &str = "wan0";
/// TUN transmit queue length: the default 500 drops packets silently under bursts.
pub const TXQUEUELEN: u32 = 10_000;

/// Both directions' counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LinkStats {
    pub a_to_b: DirectionStats,
    pub b_to_a: DirectionStats,
}

impl LinkStats {
    /// Mean time between a packet's due time and its delivery, over both directions, in
    /// nanoseconds (negative: early).
    pub fn mean_delivery_error_ns(&self) -> f64 {
        let packets = (self.a_to_b.packets_out + self.b_to_a.packets_out).max(1) as f64;
        let late = (self.a_to_b.late_ns_sum + self.b_to_a.late_ns_sum) as f64;
        let early = (self.a_to_b.early_ns_sum + self.b_to_a.early_ns_sum) as f64;
        (late - early) / packets
    }

    /// CPU time all forwarder threads have used, in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        [self.a_to_b, self.b_to_a].iter().map(|d| d.reader_cpu_ns + d.writer_cpu_ns).sum()
    }
}

/// Whether a process is alive: it exists and is not a zombie (a killed link process
/// whose parent has gone stays a zombie until someone reaps it).
pub(crate) fn process_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // Format: "pid (comm) state …"; comm may contain spaces and parentheses.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

/// Why linkemu cannot run here (not root, no `/dev/net/tun`, no `ip`), or `None` if it can.
/// Tests call this to skip with a clear message only where the kernel truly lacks support.
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("linkemu needs root (network namespaces and TUN devices)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun does not exist (no TUN support in this kernel)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(output) if output.status.success() => None,
        _ => Some("the `ip` command (iproute2) is missing".into()),
    }
}

/// An emulated link that is up. Dropping it stops the forwarder, deletes both namespaces
/// (and with them the TUN devices) and releases the raised socket buffer limits.
pub struct Link {
    name: String,
    config: std::sync::Mutex<LinkConfig>,
    params: Arc<Params>,
    stop: Arc<StopSignal>,
    directions: Vec<Direction>,
    tuns: [Arc<Tun>; 2],
    offload_on: AtomicBool,
    // Declared last: dropped after the devices and threads that live in them.
    namespaces: [Namespace; 2],
    _limits: Option<SocketBufferLimits>,
}

static LINKS_MADE: AtomicU32 = AtomicU32::new(0);

impl Link {
    /// Brings a link up under a name unique to this process and call (`rgle<pid>x<n>`).
    pub fn up(config: LinkConfig) -> Result<Link, Error> {
        let serial = LINKS_MADE.fetch_add(1, Ordering::Relaxed);
        Link::build(format!("rgle{}x{serial}", std::process::id()), config, "", "a", "b")
    }

    /// Brings a link up whose namespaces are `<name>-a` and `<name>-b`. Refuses if either
    /// exists already.
    pub fn up_named(name: &str, config: LinkConfig) -> Result<Link, Error> {
        if name.is_empty()
            || name.len() > 32
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::Config {
                field: "name",
                reason: format!("'{name}': use 1 to 32 letters, digits, '-' or '_'"),
            });
        }
        Link::build(name.to_string(), config, "-", "a", "b")
    }

    fn build(
        name: String,
        config: LinkConfig,
        separator: &str,
        a: &str,
        b: &str,
    ) -> Result<Link, Error> {
        config.validate()?;
        let limits = config.socket_buffer_max_bytes.map(SocketBufferLimits::raise).transpose()?;
        let namespace_a = Namespace::create(&format!("{name}{separator}{a}"))?;
        let namespace_b = Namespace::create(&format!("{name}{separator}{b}"))?;
        let offload = config.offload && config.loss_ratio == 0.0;
        let tun_a = Arc::new(Tun::open_in(namespace_a.name(), INTERFACE, offload)?);
        let tun_b = Arc::new(Tun::open_in(namespace_b.name(), INTERFACE, offload)?);
        for (namespace, local, peer) in
            [(&namespace_a, ADDRESS_A, ADDRESS_B), (&namespace_b, ADDRESS_B, ADDRESS_A)]
        {
            let ns = namespace.name();
            let (local, peer) = (format!("{local}/32"), format!("{peer}/32"));
            namespace::ip(&["-n", ns, "addr", "add", &local, "peer", &peer, "dev", INTERFACE])?;
            let (mtu, txqueuelen) = (config.mtu.to_string(), TXQUEUELEN.to_string());
            namespace::ip(&[
                "-n",
                ns,
                "link",
                "set",
                "dev",
                INTERFACE,
                "mtu",
                &mtu,
                "txqueuelen",
                &txqueuelen,
                "up",
            ])?;
        }
        let params = Arc::new(Params {
            one_way_ns: AtomicU64::new(0),
            jitter_ns: AtomicU64::new(0),
            rate_bits_per_s: AtomicU64::new(0),
            loss_per_2_32: AtomicU64::new(0),
            queue_bytes: AtomicU64::new(0),
            framing_bytes: AtomicU64::new(0),
            cut: AtomicBool::new(false),
        });
        let stop = Arc::new(
            StopSignal::new()
                .map_err(|source| Error::Io { what: "create eventfd".into(), source })?,
        );
        let mut link = Link {
            name,
            config: std::sync::Mutex::new(config.clone()),
            params,
            stop,
            directions: Vec::with_capacity(2),
            tuns: [tun_a, tun_b],
            offload_on: AtomicBool::new(offload),
            namespaces: [namespace_a, namespace_b],
            _limits: limits,
        };
        link.apply(&config);
        for (label, from, to, seed) in [("ab", 0, 1, 0x5eed_0001), ("ba", 1, 0, 0x5eed_0002)] {
            let direction = Direction::start(
                label,
                link.tuns[from].clone(),
                link.tuns[to].clone(),
                link.params.clone(),
                // A link is cut both ways or not at all (`Link::cut`); a mesh cuts one way too.
                Arc::new(AtomicBool::new(false)),
                link.stop.clone(),
                seed,
            )
            .map_err(|source| Error::Io { what: "start forwarder thread".into(), source })?;
            link.directions.push(direction);
        }
        tracing::info!(
            a = link.namespace(Side::A),
            b = link.namespace(Side::B),
            ?config,
            "linkemu: link up"
        );
        Ok(link)
    }

    fn apply(&self, config: &LinkConfig) {
        let params = &self.params;
        params.one_way_ns.store((config.rtt / 2).as_nanos() as u64, Ordering::Relaxed);
        params.jitter_ns.store(config.jitter.as_nanos() as u64, Ordering::Relaxed);
        params.rate_bits_per_s.store(config.rate_bits_per_s.unwrap_or(0), Ordering::Relaxed);
        let loss = (config.loss_ratio * 4_294_967_296.0).round() as u64;
        params.loss_per_2_32.store(loss, Ordering::Relaxed);
        params.queue_bytes.store(config.effective_queue_bytes(), Ordering::Relaxed);
        params.framing_bytes.store(config.framing_bytes as u64, Ordering::Relaxed);
    }

    /// Validates a changed configuration and applies it to packets from now on.
    pub(crate) fn change(&self, edit: impl FnOnce(&mut LinkConfig)) -> Result<(), Error> {
        let mut current = self.config.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut next = current.clone();
        edit(&mut next);
        next.validate()?;
        if next.mtu != current.mtu
            || next.socket_buffer_max_bytes != current.socket_buffer_max_bytes
        {
            return Err(Error::Config {
                field: "mtu",
                reason: "the MTU and socket buffer limit are fixed while a link is up".into(),
            });
        }
        let offload = next.offload && next.loss_ratio == 0.0;
        if offload != self.offload_on.load(Ordering::Relaxed) {
            for tun in &self.tuns {
                tun.set_offload(offload)?;
            }
            self.offload_on.store(offload, Ordering::Relaxed);
        }
        self.apply(&next);
        *current = next;
        Ok(())
    }

    /// Changes the round-trip time (jitter must still fit in half of it).
    pub fn set_rtt(&self, rtt: Duration) -> Result<(), Error> {
        self.change(|config| config.rtt = rtt)
    }

    /// Changes the rate cap (`None` = uncapped).
    pub fn set_rate(&self, rate_bits_per_s: Option<u64>) -> Result<(), Error> {
        self.change(|config| config.rate_bits_per_s = rate_bits_per_s)
    }

    /// Changes the loss ratio (0..=1). A non-zero loss turns segmentation offload off.
    pub fn set_loss(&self, loss_ratio: f64) -> Result<(), Error> {
        self.change(|config| config.loss_ratio = loss_ratio)
    }

    /// Changes the jitter.
    pub fn set_jitter(&self, jitter: Duration) -> Result<(), Error> {
        self.change(|config| config.jitter = jitter)
    }

    /// Changes the drop-tail queue (`None` = the default for the rate and RTT).
    pub fn set_queue_bytes(&self, queue_bytes: Option<u64>) -> Result<(), Error> {
        self.change(|config| config.queue_bytes = queue_bytes)
    }

    /// Applies a whole configuration at once (MTU and socket buffer limit must not change).
    pub fn set_config(&self, config: LinkConfig) -> Result<(), Error> {
        self.change(|current| *current = config)
    }

    /// Cuts the link: every packet, including those in flight, is dropped until
    /// [`Link::restore`]. Sockets see silence, as with a pulled cable.
    pub fn cut(&self) {
        self.params.cut.store(true, Ordering::Relaxed);
        for direction in &self.directions {
            direction.drop_in_flight();
        }
    }

    /// Ends a cut.
    pub fn restore(&self) {
        self.params.cut.store(false, Ordering::Relaxed);
    }

    /// Whether the link is cut.
    pub fn is_cut(&self) -> bool {
        self.params.cut.load(Ordering::Relaxed)
    }

    /// The current configuration.
    pub fn config(&self) -> LinkConfig {
        self.config.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The link's base name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace of one side (for `ip netns exec`).
    pub fn namespace(&self, side: Side) -> &str {
        self.namespaces[side.index()].name()
    }

    /// The address of one side, reachable from the other side.
    pub fn address(&self, side: Side) -> Ipv4Addr {
        match side {
            Side::A => ADDRESS_A,
            Side::B => ADDRESS_B,
        }
    }

    /// Counters of both directions.
    pub fn stats(&self) -> LinkStats {
        LinkStats {
            a_to_b: self.directions[0].counters.snapshot(),
            b_to_a: self.directions[1].counters.snapshot(),
        }
    }

    /// A command that runs `program` inside one side's namespace (`ip netns exec`).
    pub fn command(&self, side: Side, program: impl AsRef<OsStr>) -> Command {
        namespace::command(self.namespace(side), program.as_ref())
    }

    /// Runs `work` on a thread inside one side's namespace and returns its result. Sockets
    /// it creates stay in that namespace when handed back to other threads.
    pub fn run_in<R: Send>(&self, side: Side, work: impl FnOnce() -> R + Send) -> Result<R, Error> {
        let namespace = self.namespace(side);
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let _inside = namespace::enter(namespace)?;
                    Ok(work())
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Starts `work` on a new thread inside one side's namespace (a server, say).
    pub fn spawn_in<R: Send + 'static>(
        &self,
        side: Side,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<JoinHandle<R>, Error> {
        let namespace = self.namespace(side).to_string();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(format!("in-{namespace}"))
            .spawn(move || {
                let inside = namespace::enter(&namespace);
                let entered = inside.as_ref().map(|_| ()).map_err(|error| error.to_string());
                let failed = entered.is_err();
                let _ = ready_tx.send(entered);
                if failed {
                    // Ends the thread without running `work` (and without a panic message).
                    std::panic::resume_unwind(Box::new(()));
                }
                let _inside = inside;
                work()
            })
            .map_err(|source| Error::Io { what: "spawn a thread".into(), source })?;
        let entered = ready_rx
            .recv()
            .unwrap_or_else(|_| Err("the thread ended before entering the namespace".into()));
        match entered {
            Ok(()) => Ok(handle),
            Err(reason) => {
                let _ = handle.join();
                Err(Error::Command {
                    command: format!("setns into {}", self.namespace(side)),
                    reason,
                })
            }
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stop.raise();
        for direction in &mut self.directions {
            direction.join();
        }
        tracing::info!(name = self.name, "linkemu: link down");
        // Fields drop next: TUN devices, then namespaces, then the sysctl hold.
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("a", &self.namespace(Side::A))
            .field("b", &self.namespace(Side::B))
            .field("config", &self.config())
            .finish()
    }
}
