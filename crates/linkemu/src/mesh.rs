//! A mesh: several sites (network namespaces), every pair joined by its own emulated link, so
//! that a test can cut one pair and leave the others talking — a primary cut from its standby
//! but not from the observer, say — which one two-sided [`Link`](crate::Link) cannot show.
//!
//! Site `i` has the address `198.19.0.(i + 1)` (on its loopback); for every other site `j` it
//! has a TUN device `mesh<j>` and a route to `j`'s address through it. One forwarder per pair
//! moves packets between the two TUN devices with the configured delay, rate and loss, and a
//! cut drops every packet of that pair only: both ways ([`Mesh::cut`]), or one way
//! ([`Mesh::cut_one_way`]: `a` no longer reaches `b` while `b`'s packets still reach `a`).
//!
//! Names: `rglm<pid>x<n>s<i>` per site, unique per process and mesh; everything is deleted when
//! the mesh drops.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::forwarder::{Direction, Params, StopSignal};
use crate::namespace::{self, Namespace};
use crate::tun::Tun;
use crate::{Error, LinkConfig, TXQUEUELEN};

/// Most sites in one mesh.
pub const SITES_MAX: usize = 8;

static MESHES_MADE: AtomicU32 = AtomicU32::new(0);

/// One pair's link, between sites `a < b`.
struct Pair {
    params: Arc<Params>,
    /// `a → b`, then `b → a`.
    directions: Vec<Direction>,
    /// Cuts of one direction alone: `a → b`, then `b → a`.
    one_way_cuts: [Arc<AtomicBool>; 2],
    _tuns: [Arc<Tun>; 2],
}

impl Pair {
    /// The index of the direction `from → to` in `directions` and `one_way_cuts`.
    fn direction_index(from: usize, to: usize) -> usize {
        usize::from(from > to)
    }
}

/// Sites joined pairwise by emulated links. Dropping it stops the forwarders and deletes the
/// namespaces.
pub struct Mesh {
    name: String,
    /// The configuration every pair came up with ([`Mesh::set_rtt`] changes one pair's RTT).
    config: LinkConfig,
    stop: Arc<StopSignal>,
    pairs: BTreeMap<(usize, usize), Pair>,
    namespaces: Vec<Namespace>,
}

fn ordered(a: usize, b: usize) -> (usize, usize) {
    if a < b { (a, b) } else { (b, a) }
}

impl Mesh {
    /// Brings up `sites` sites (2..=8), every pair joined by a link of `config`.
    pub fn up(sites: usize, config: LinkConfig) -> Result<Mesh, Error> {
        if !(2..=SITES_MAX).contains(&sites) {
            return Err(Error::Config {
                field: "sites",
                reason: format!("{sites} sites; a mesh has 2..={SITES_MAX}"),
            });
        }
        config.validate()?;
        let serial = MESHES_MADE.fetch_add(1, Ordering::Relaxed);
        let name = format!("rglm{}x{serial}", std::process::id());
        let stop = Arc::new(
            StopSignal::new()
                .map_err(|source| Error::Io { what: "create eventfd".into(), source })?,
        );
        let mut mesh = Mesh {
            name,
            config: config.clone(),
            stop,
            pairs: BTreeMap::new(),
            namespaces: Vec::new(),
        };
        for site in 0..sites {
            let namespace = Namespace::create(&format!("{}s{site}", mesh.name))?;
            let local = format!("{}/32", Mesh::address_of(site));
            namespace::ip(&["-n", namespace.name(), "addr", "add", &local, "dev", "lo"])?;
            mesh.namespaces.push(namespace);
        }
        let offload = config.offload && config.loss_ratio == 0.0;
        for a in 0..sites {
            for b in a + 1..sites {
                let tun_a = Arc::new(Tun::open_in(
                    mesh.namespaces[a].name(),
                    &format!("mesh{b}"),
                    offload,
                )?);
                let tun_b = Arc::new(Tun::open_in(
                    mesh.namespaces[b].name(),
                    &format!("mesh{a}"),
                    offload,
                )?);
                for (here, there) in [(a, b), (b, a)] {
                    let ns = mesh.namespaces[here].name().to_string();
                    let device = format!("mesh{there}");
                    let (mtu, txqueuelen) = (config.mtu.to_string(), TXQUEUELEN.to_string());
                    namespace::ip(&[
                        "-n",
                        &ns,
                        "link",
                        "set",
                        "dev",
                        &device,
                        "mtu",
                        &mtu,
                        "txqueuelen",
                        &txqueuelen,
                        "up",
                    ])?;
                    let (peer, source) = (
                        format!("{}/32", Mesh::address_of(there)),
                        Mesh::address_of(here).to_string(),
                    );
                    namespace::ip(&[
                        "-n", &ns, "route", "add", &peer, "dev", &device, "src", &source,
                    ])?;
                }
                let params = Arc::new(Params {
                    one_way_ns: AtomicU64::new((config.rtt / 2).as_nanos() as u64),
                    jitter_ns: AtomicU64::new(config.jitter.as_nanos() as u64),
                    rate_bits_per_s: AtomicU64::new(config.rate_bits_per_s.unwrap_or(0)),
                    loss_per_2_32: AtomicU64::new(
                        (config.loss_ratio * 4_294_967_296.0).round() as u64
                    ),
                    queue_bytes: AtomicU64::new(config.effective_queue_bytes()),
                    framing_bytes: AtomicU64::new(config.framing_bytes as u64),
                    cut: AtomicBool::new(false),
                });
                let one_way_cuts = [(); 2].map(|_| Arc::new(AtomicBool::new(false)));
                let mut directions = Vec::with_capacity(2);
                for (label, from, to, cut, seed) in [
                    ("ab", &tun_a, &tun_b, &one_way_cuts[0], 0x5eed_0101 + (a * 16 + b) as u64),
                    ("ba", &tun_b, &tun_a, &one_way_cuts[1], 0x5eed_0201 + (a * 16 + b) as u64),
                ] {
                    directions.push(
                        Direction::start(
                            label,
                            from.clone(),
                            to.clone(),
                            params.clone(),
                            cut.clone(),
                            mesh.stop.clone(),
                            seed,
                        )
                        .map_err(|source| Error::Io {
                            what: "start forwarder thread".into(),
                            source,
                        })?,
                    );
                }
                mesh.pairs.insert(
                    (a, b),
                    Pair { params, directions, one_way_cuts, _tuns: [tun_a, tun_b] },
                );
            }
        }
        tracing::info!(name = mesh.name, sites, ?config, "linkemu: mesh up");
        Ok(mesh)
    }

    fn address_of(site: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 19, 0, site as u8 + 1)
    }

    /// How many sites.
    pub fn sites(&self) -> usize {
        self.namespaces.len()
    }

    /// A site's address, reachable from every other site (while their pair is not cut).
    pub fn address(&self, site: usize) -> Ipv4Addr {
        assert!(site < self.sites(), "site {site} of {}", self.sites());
        Mesh::address_of(site)
    }

    /// A site's namespace (for `ip netns exec`, or [`namespace::enter`]).
    pub fn namespace(&self, site: usize) -> &str {
        self.namespaces[site].name()
    }

    fn pair(&self, a: usize, b: usize) -> &Pair {
        assert_ne!(a, b, "a site has no link to itself");
        self.pairs.get(&ordered(a, b)).unwrap_or_else(|| panic!("no sites {a} and {b}"))
    }

    /// Changes the RTT of the link between two sites, for packets from now on (a far site
    /// behind a near one, say); the other pairs keep theirs. The drop-tail queue follows the
    /// RTT as [`LinkConfig::effective_queue_bytes`] sizes it. Refused, naming the field, if the
    /// mesh's configuration with this RTT is not valid (longer than the maximum, or shorter
    /// than twice the jitter).
    pub fn set_rtt(&self, a: usize, b: usize, rtt: std::time::Duration) -> Result<(), Error> {
        let pair = self.pair(a, b);
        let changed = LinkConfig { rtt, ..self.config.clone() };
        changed.validate()?;
        pair.params.one_way_ns.store((rtt / 2).as_nanos() as u64, Ordering::Relaxed);
        pair.params.queue_bytes.store(changed.effective_queue_bytes(), Ordering::Relaxed);
        Ok(())
    }

    /// Cuts the link between two sites: every packet between them, in flight included, is
    /// dropped until [`Mesh::restore`]; every other pair goes on.
    pub fn cut(&self, a: usize, b: usize) {
        let pair = self.pair(a, b);
        pair.params.cut.store(true, Ordering::Relaxed);
        for direction in &pair.directions {
            direction.drop_in_flight();
        }
    }

    /// Cuts one direction of the link between two sites: every packet from `from` to `to`, in
    /// flight included, is dropped until [`Mesh::restore`], while packets from `to` to `from`
    /// still arrive (an asymmetric partition: `to` hears nothing from `from`, `from` hears
    /// `to`; a TCP connection between them stalls, but datagrams one way go through).
    pub fn cut_one_way(&self, from: usize, to: usize) {
        let pair = self.pair(from, to);
        let index = Pair::direction_index(from, to);
        pair.one_way_cuts[index].store(true, Ordering::Relaxed);
        pair.directions[index].drop_in_flight();
    }

    /// Ends every cut between two sites: both ways and each one way.
    pub fn restore(&self, a: usize, b: usize) {
        let pair = self.pair(a, b);
        pair.params.cut.store(false, Ordering::Relaxed);
        for cut in &pair.one_way_cuts {
            cut.store(false, Ordering::Relaxed);
        }
    }

    /// Whether the link between two sites is cut (both ways, by [`Mesh::cut`]).
    pub fn is_cut(&self, a: usize, b: usize) -> bool {
        self.pair(a, b).params.cut.load(Ordering::Relaxed)
    }

    /// Whether packets from `from` to `to` are dropped: the link is cut, or that direction is.
    pub fn is_cut_one_way(&self, from: usize, to: usize) -> bool {
        let pair = self.pair(from, to);
        pair.params.cut.load(Ordering::Relaxed)
            || pair.one_way_cuts[Pair::direction_index(from, to)].load(Ordering::Relaxed)
    }

    /// Cuts every link of `site` to the sites in `others`.
    pub fn cut_from(&self, site: usize, others: &[usize]) {
        for &other in others {
            self.cut(site, other);
        }
    }

    /// Restores every cut link and every cut direction.
    pub fn restore_all(&self) {
        for pair in self.pairs.values() {
            pair.params.cut.store(false, Ordering::Relaxed);
            for cut in &pair.one_way_cuts {
                cut.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Runs `work` on a thread inside a site's namespace and returns its result (sockets and
    /// child processes it creates stay in that namespace).
    pub fn run_in<R: Send>(
        &self,
        site: usize,
        work: impl FnOnce() -> R + Send,
    ) -> Result<R, Error> {
        let namespace = self.namespace(site);
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

    /// A command that runs `program` inside a site's namespace.
    pub fn command(&self, site: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        namespace::command(self.namespace(site), program.as_ref())
    }
}

impl Drop for Mesh {
    fn drop(&mut self) {
        self.stop.raise();
        for pair in self.pairs.values_mut() {
            for direction in &mut pair.directions {
                direction.join();
            }
        }
        tracing::info!(name = self.name, "linkemu: mesh down");
        // Fields drop next: the TUN devices with the pairs, then the namespaces.
    }
}

impl std::fmt::Debug for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh").field("name", &self.name).field("sites", &self.sites()).finish()
    }
}
