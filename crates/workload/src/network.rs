//! Where a benchmark's primary and standby run: both on this host's loopback, on the two
//! sides of a linkemu link (primary and clients on side A, standby on side B), or on the
//! sites of a linkemu mesh (site 0 is side A, site 1 side B, and more sites beyond, each pair
//! its own RTT), and the RTT between them as TCP sees it.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use linkemu::Side;

/// Where the primary (side A, with the clients) and the standby (side B) run.
pub(crate) enum Network {
    /// Both on this host's 127.0.0.1.
    Loopback,
    /// On the two sides of an emulated link.
    Link(Box<linkemu::Link>),
    /// On the sites of an emulated mesh: site 0 is side A, site 1 side B.
    Mesh(Box<linkemu::Mesh>),
}

/// The site a side is in a mesh (and the index a side has among the sites of the others).
fn site_of(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

/// The side of a site of loopback or a link (which have two).
fn side_of(site: usize) -> anyhow::Result<Side> {
    match site {
        0 => Ok(Side::A),
        1 => Ok(Side::B),
        _ => anyhow::bail!("site {site}: only a mesh has more than two sites"),
    }
}

/// Line rate of the emulated link the benchmarks use.
pub const LINK_RATE_BITS_PER_S: u64 = 1_000_000_000;

/// The networks a benchmark runs on for `rtts_ms`: loopback for 0, and one emulated link
/// (at the first RTT above 0; the caller sets the others) for the rest. A link that cannot
/// be brought up is reported in `skipped` (as what `who` then misses), not an error.
pub(crate) fn networks_for(
    rtts_ms: &[u32],
    who: &str,
    skipped: &mut Vec<String>,
    progress: &mut dyn FnMut(&str),
) -> Vec<(Network, Vec<u32>)> {
    let mut networks: Vec<(Network, Vec<u32>)> = Vec::new();
    if rtts_ms.contains(&0) {
        networks.push((Network::Loopback, vec![0]));
    }
    let linked: Vec<u32> = rtts_ms.iter().copied().filter(|&rtt| rtt > 0).collect();
    if !linked.is_empty() {
        let link = match linkemu::unavailable_reason() {
            Some(reason) => Err(anyhow::anyhow!(reason)),
            None => {
                progress("linkemu: link up, 1 Gbit/s");
                linkemu::Link::up(linkemu::LinkConfig {
                    rtt: Duration::from_millis(u64::from(linked[0])),
                    rate_bits_per_s: Some(LINK_RATE_BITS_PER_S),
                    ..linkemu::LinkConfig::default()
                })
                .context("bringing the link up")
            }
        };
        match link {
            Ok(link) => networks.push((Network::Link(Box::new(link)), linked)),
            Err(error) => {
                skipped.push(format!("{who} at RTT {linked:?} ms: no emulated link: {error:#}"))
            }
        }
    }
    networks
}

impl Network {
    /// A command that runs `program` on one side.
    pub(crate) fn command(&self, side: Side, program: impl AsRef<OsStr>) -> Command {
        match self {
            Network::Loopback => Command::new(program),
            Network::Link(link) => link.command(side, program),
            Network::Mesh(mesh) => mesh.command(site_of(side), program),
        }
    }

    /// A command that runs `program` on one site (0 and 1 are sides A and B; a mesh has more).
    pub(crate) fn site_command(
        &self,
        site: usize,
        program: impl AsRef<OsStr>,
    ) -> anyhow::Result<Command> {
        match self {
            Network::Mesh(mesh) => {
                anyhow::ensure!(site < mesh.sites(), "site {site} of a mesh of {}", mesh.sites());
                Ok(mesh.command(site, program))
            }
            _ => Ok(self.command(side_of(site)?, program)),
        }
    }

    /// The address one side is reached at from the other.
    pub(crate) fn address(&self, side: Side) -> Ipv4Addr {
        match self {
            Network::Loopback => Ipv4Addr::LOCALHOST,
            Network::Link(link) => link.address(side),
            Network::Mesh(mesh) => mesh.address(site_of(side)),
        }
    }

    /// The address a site is reached at from the others.
    pub(crate) fn site_address(&self, site: usize) -> anyhow::Result<Ipv4Addr> {
        match self {
            Network::Mesh(mesh) => {
                anyhow::ensure!(site < mesh.sites(), "site {site} of a mesh of {}", mesh.sites());
                Ok(mesh.address(site))
            }
            _ => Ok(self.address(side_of(site)?)),
        }
    }

    /// The addresses a server on `side` listens on: its loopback, and the link's address.
    pub(crate) fn listen_addresses(&self, side: Side) -> Vec<String> {
        match self {
            Network::Loopback => vec!["127.0.0.1".into()],
            Network::Link(link) => vec!["127.0.0.1".into(), link.address(side).to_string()],
            Network::Mesh(mesh) => {
                vec!["127.0.0.1".into(), mesh.address(site_of(side)).to_string()]
            }
        }
    }

    /// Runs `work` on a new thread on one side (sockets it creates stay there).
    /// Sets the `state` (`defer` or `enable`) of destination `name` of the primary whose
    /// admin API is at `admin` on side A, at run time (`POST /settings/destinations/NAME`).
    pub(crate) fn set_destination_state(
        &self,
        admin: std::net::SocketAddr,
        name: &str,
        state: &str,
    ) -> anyhow::Result<()> {
        let body = format!("{{\"state\": \"{state}\"}}");
        let path = format!("/settings/destinations/{name}");
        let (code, answer) = self.run_in(Side::A, move || {
            admin::http_call_with_body(
                &admin.to_string(),
                "POST",
                &path,
                body.as_bytes(),
                std::time::Duration::from_secs(10),
            )
        })??;
        anyhow::ensure!(
            code == 200,
            "state = {state} of '{name}' refused ({code}): {}",
            answer.trim()
        );
        Ok(())
    }

    pub(crate) fn run_in<R: Send>(
        &self,
        side: Side,
        work: impl FnOnce() -> R + Send,
    ) -> anyhow::Result<R> {
        self.run_in_site(site_of(side), work)
    }

    /// Runs `work` on a new thread on one site (0 and 1 are sides A and B; a mesh has more).
    pub(crate) fn run_in_site<R: Send>(
        &self,
        site: usize,
        work: impl FnOnce() -> R + Send,
    ) -> anyhow::Result<R> {
        match self {
            Network::Loopback => {
                side_of(site)?;
                Ok(std::thread::scope(|scope| {
                    scope
                        .spawn(work)
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                }))
            }
            Network::Link(link) => Ok(link.run_in(side_of(site)?, work)?),
            Network::Mesh(mesh) => {
                anyhow::ensure!(site < mesh.sites(), "site {site} of a mesh of {}", mesh.sites());
                Ok(mesh.run_in(site, work)?)
            }
        }
    }

    /// Sets the link's RTT (loopback has only 0; a mesh, every pair's).
    pub(crate) fn set_rtt(&self, rtt_ms: u32) -> anyhow::Result<()> {
        let rtt = Duration::from_millis(u64::from(rtt_ms));
        match self {
            Network::Loopback => Ok(()),
            Network::Link(link) => Ok(link.set_rtt(rtt)?),
            Network::Mesh(mesh) => {
                for a in 0..mesh.sites() {
                    for b in a + 1..mesh.sites() {
                        mesh.set_rtt(a, b, rtt)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Sets the RTT between two sites of a mesh; the other pairs keep theirs.
    pub(crate) fn set_pair_rtt(&self, a: usize, b: usize, rtt_ms: u32) -> anyhow::Result<()> {
        match self {
            Network::Mesh(mesh) => {
                anyhow::ensure!(
                    a.max(b) < mesh.sites() && a != b,
                    "sites {a} and {b} of a mesh of {}",
                    mesh.sites()
                );
                Ok(mesh.set_rtt(a, b, Duration::from_millis(u64::from(rtt_ms)))?)
            }
            _ => anyhow::bail!("only a mesh has an RTT per pair of sites"),
        }
    }

    /// Median of 21 one-byte TCP round trips from side A to side B, in milliseconds.
    pub(crate) fn measure_rtt_ms(&self) -> anyhow::Result<f64> {
        self.measure_rtt_ms_between(site_of(Side::A), site_of(Side::B))
    }

    /// Median of 21 one-byte TCP round trips from site `from` to site `to`, in milliseconds.
    pub(crate) fn measure_rtt_ms_between(&self, from: usize, to: usize) -> anyhow::Result<f64> {
        let address_b = self.site_address(to)?;
        let listener = self.run_in_site(to, move || TcpListener::bind((address_b, 0)))??;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let echo = std::thread::spawn(move || -> std::io::Result<()> {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut stream = loop {
                match listener.accept() {
                    Ok((stream, _)) => break stream,
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            return Err(error);
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(error) => return Err(error),
                }
            };
            stream.set_nonblocking(false)?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            let mut byte = [0u8; 1];
            while stream.read(&mut byte)? == 1 {
                stream.write_all(&byte)?;
            }
            Ok(())
        });
        let target = SocketAddr::from((address_b, port));
        let round_trips = self.run_in_site(from, move || -> std::io::Result<Vec<Duration>> {
            let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(10))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            let mut byte = [0u8; 1];
            let mut samples = Vec::with_capacity(21);
            for round in 0..24 {
                let started = Instant::now();
                stream.write_all(b"x")?;
                stream.read_exact(&mut byte)?;
                // The first three warm the path up (ARP-free TUN, but cold caches).
                if round >= 3 {
                    samples.push(started.elapsed());
                }
            }
            Ok(samples)
        })?;
        let echoed = echo.join().map_err(|_| anyhow::anyhow!("the RTT echo thread panicked"))?;
        let mut samples = round_trips.context("TCP ping-pong from A to B")?;
        echoed.context("TCP ping-pong echo on B")?;
        samples.sort();
        Ok(samples[samples.len() / 2].as_secs_f64() * 1e3)
    }

    /// A name for directories: `loopback` or `link`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Network::Loopback => "loopback",
            Network::Link(_) => "link",
            Network::Mesh(_) => "mesh",
        }
    }

    /// "loopback" or "linkemu at 10, 25 ms".
    pub(crate) fn describe(&self, rtts: &[u32]) -> String {
        match self {
            Network::Loopback => "loopback".into(),
            Network::Link(_) => format!("linkemu at {rtts:?} ms RTT"),
            Network::Mesh(mesh) => format!("a linkemu mesh of {} sites", mesh.sites()),
        }
    }
}
