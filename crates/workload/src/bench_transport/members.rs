//! The setups of redo routes: members of one configuration (the configuration form,
//! `[[replication.members]]`), each on its own site of a linkemu mesh, with a far sync or a
//! cascading standby between the primary and the terminal standbys (`far_sync`, `fan_out`).
//!
//! Site 0 holds the primary and the clients (side A of [`Network`]); every other member has a
//! site of its own, so that each hop crosses the RTT of its pair of sites. Each member listens
//! on its site's address at the ports of its layout ([`Layout::port_base`]), so that the
//! layouts of one experiment can be up at once on one mesh.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::runs::Bench;
use super::setup::Setup;
use crate::network::Network;
use crate::process::ServerProcess;

/// How long the destinations may take to reach STREAMING or SYNCHRONIZED, hop by hop.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// The primary's name in every layout.
pub(super) const PRIMARY: &str = "p";

/// A layout of members: who ships to whom, and where each member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// `p` ships SYNC AFFIRM to the far sync `fs` (site 1: the near hop), which forwards
    /// ASYNC to the terminal standby `t` (site 2: the far hop). Maximum Availability.
    FarSync,
    /// `p` ships SYNC AFFIRM to `t` (site 2) itself. Maximum Availability.
    SyncAffirmDirect,
    /// `p` ships ASYNC to `t` (site 2) itself. Maximum Performance.
    AsyncDirect,
    /// `p` ships ASYNC to `s1` (site 1) alone. Maximum Performance.
    OneStandby,
    /// `p` ships ASYNC to `s1`..`s4` (sites 1..4) itself. Maximum Performance.
    FourDirect,
    /// `p` ships ASYNC to `s1` (site 1), which forwards to `s2`, `s3`, `s4` (sites 2..4).
    /// Maximum Performance.
    Cascade,
}

/// One member of a layout.
struct Member {
    name: &'static str,
    site: usize,
    /// How the primary ships to it (its entry's `transport`).
    transport: &'static str,
    far_sync: bool,
    /// Whom it forwards to while `p` is the primary.
    forwards_to: &'static [&'static str],
}

impl Layout {
    pub(super) fn name(self) -> &'static str {
        match self {
            Layout::FarSync => "sync_affirm_far_sync",
            Layout::SyncAffirmDirect => "sync_affirm_direct",
            Layout::AsyncDirect => "async_direct",
            Layout::OneStandby => "async_one_standby",
            Layout::FourDirect => "async_four_direct",
            Layout::Cascade => "async_cascade_1_to_3",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Layout::FarSync => {
                "p ships transport = sync, affirm = true under maximum_availability to the far sync fs (kind = \"far_sync\", the near hop), which forwards ASYNC to the terminal standby t (the far hop, routes = [{ when = \"p\", to = \"t\" }]); the commit waits for the local log write and fs's fdatasync"
            }
            Layout::SyncAffirmDirect => {
                "p ships transport = sync, affirm = true under maximum_availability to the terminal standby t (the far hop) itself; the commit waits for the local log write and t's fdatasync"
            }
            Layout::AsyncDirect => {
                "p ships transport = async under maximum_performance to the terminal standby t (the far hop) itself; the commit waits for the local log write only"
            }
            Layout::OneStandby => {
                "p ships transport = async under maximum_performance to one standby s1"
            }
            Layout::FourDirect => {
                "p ships transport = async under maximum_performance to four standbys s1..s4 itself"
            }
            Layout::Cascade => {
                "p ships transport = async under maximum_performance to s1, which forwards to s2, s3 and s4 (routes = [{ when = \"p\", to = \"s2\" }, …]): four standbys, one of them the primary's"
            }
        }
    }

    /// Every standby of the layout (far sync included), in start order.
    pub(super) fn standbys(self) -> &'static [&'static str] {
        match self {
            Layout::FarSync => &["fs", "t"],
            Layout::SyncAffirmDirect | Layout::AsyncDirect => &["t"],
            Layout::OneStandby => &["s1"],
            Layout::FourDirect | Layout::Cascade => &["s1", "s2", "s3", "s4"],
        }
    }

    /// The phase every destination of the primary is in while measured.
    pub(super) fn phase(self) -> transport::Phase {
        match self {
            Layout::FarSync | Layout::SyncAffirmDirect => transport::Phase::Synchronized,
            _ => transport::Phase::Streaming,
        }
    }

    /// The sites the layout needs (the primary's included).
    pub(super) fn sites(self) -> usize {
        match self {
            Layout::FarSync | Layout::SyncAffirmDirect | Layout::AsyncDirect => 3,
            Layout::OneStandby => 2,
            Layout::FourDirect | Layout::Cascade => 5,
        }
    }

    /// The first of the three ports (RESP, admin, redo) each member listens on.
    fn port_base(self) -> u16 {
        match self {
            Layout::FarSync => 7100,
            Layout::SyncAffirmDirect => 7110,
            Layout::AsyncDirect => 7120,
            Layout::OneStandby => 7130,
            Layout::FourDirect => 7140,
            Layout::Cascade => 7150,
        }
    }

    fn protection_mode(self) -> &'static str {
        match self {
            Layout::FarSync | Layout::SyncAffirmDirect => "maximum_availability",
            _ => "maximum_performance",
        }
    }

    fn members(self) -> Vec<Member> {
        let member = |name, site, transport| Member {
            name,
            site,
            transport,
            far_sync: false,
            forwards_to: &[],
        };
        let mut members = vec![member(PRIMARY, 0, "async")];
        match self {
            Layout::FarSync => {
                members.push(Member {
                    far_sync: true,
                    forwards_to: &["t"],
                    ..member("fs", 1, "sync")
                });
                members.push(member("t", 2, "async"));
            }
            Layout::SyncAffirmDirect => {
                // Under Maximum Availability every member that may be the primary needs a
                // SYNC member: t, should it become the primary, ships SYNC to p.
                members[0].transport = "sync";
                members.push(member("t", 2, "sync"));
            }
            Layout::AsyncDirect => members.push(member("t", 2, "async")),
            Layout::OneStandby => members.push(member("s1", 1, "async")),
            Layout::FourDirect | Layout::Cascade => {
                let forwards_to: &'static [&'static str] =
                    if self == Layout::Cascade { &["s2", "s3", "s4"] } else { &[] };
                members.push(Member { forwards_to, ..member("s1", 1, "async") });
                for (site, name) in ["s2", "s3", "s4"].into_iter().enumerate() {
                    members.push(member(name, site + 2, "async"));
                }
            }
        }
        members
    }
}

/// The file of member `name` of `layout`: every member with its addresses on its site
/// (`hosts`, by site), its kind and its routes, and which one this file runs.
pub(super) fn config_text(
    layout: Layout,
    hosts: &[Ipv4Addr],
    name: &str,
    log_file_size: u64,
) -> anyhow::Result<String> {
    let role = if name == PRIMARY { "primary" } else { "standby" };
    let mut text = format!(
        "# Written by `redoguard bench transport`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 4\n[replication]\nmember = \"{name}\"\nrole = \"{role}\"\nprotection_mode = \"{}\"\nname = \"bench\"\n",
        layout.protection_mode()
    );
    let port = layout.port_base();
    for member in layout.members() {
        let host = hosts
            .get(member.site)
            .with_context(|| format!("no address for site {}", member.site))?;
        text.push_str(&format!(
            "[[replication.members]]\nname = \"{}\"\nresp = \"{host}:{port}\"\nadmin = \"{host}:{}\"\nredo = \"{host}:{}\"\ntransport = \"{}\"\naffirm = true\nnet_timeout = \"{}\"\nreopen = \"500ms\"\n",
            member.name,
            port + 1,
            port + 2,
            member.transport,
            super::setup::NET_TIMEOUT
        ));
        if member.far_sync {
            text.push_str("kind = \"far_sync\"\n");
        }
        if !member.forwards_to.is_empty() {
            let routes: Vec<String> = member
                .forwards_to
                .iter()
                .map(|to| format!("{{ when = \"{PRIMARY}\", to = \"{to}\" }}"))
                .collect();
            text.push_str(&format!("routes = [{}]\n", routes.join(", ")));
        }
    }
    Ok(text + crate::bench_batch::INSECURE)
}

/// Every layout, for the tests.
#[cfg(test)]
pub(super) const LAYOUTS: [Layout; 6] = [
    Layout::FarSync,
    Layout::SyncAffirmDirect,
    Layout::AsyncDirect,
    Layout::OneStandby,
    Layout::FourDirect,
    Layout::Cascade,
];

/// The members' names of `layout`, the primary first.
#[cfg(test)]
pub(super) fn member_names(layout: Layout) -> Vec<&'static str> {
    layout.members().iter().map(|member| member.name).collect()
}

/// A server's status through its admin API, read from its site.
fn status_in_site(
    network: &Network,
    site: usize,
    admin: SocketAddr,
) -> anyhow::Result<admin::ServerStatus> {
    let body = network.run_in_site(site, move || {
        admin::http_get(&admin.to_string(), "/status", Duration::from_secs(10))
    })??;
    serde_json::from_str(&body).context("parsing the server's status")
}

impl Bench<'_> {
    /// Starts `layout`'s members on the mesh in a directory named after `label`, the standbys
    /// first; returns once the primary's destinations are in the layout's phase and every
    /// forwarder's are STREAMING.
    pub(super) fn start_members(&self, layout: Layout, label: &str) -> anyhow::Result<Setup<'_>> {
        let name = format!("redoguard-{}-{label}", layout.name());
        let dir = self.work.join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        // The standbys' data, on the file system of `standby_dir` if given.
        let standby_data = self.standby_work.map(|work| work.join(&name));
        if let Some(data) = &standby_data {
            let _ = std::fs::remove_dir_all(data);
        }
        let members = layout.members();
        let hosts = (0..layout.sites())
            .map(|site| self.network.site_address(site))
            .collect::<anyhow::Result<Vec<Ipv4Addr>>>()?;
        let start = |member: &Member| -> anyhow::Result<ServerProcess> {
            let data = match &standby_data {
                Some(standby_data) if member.name != PRIMARY => standby_data.join(member.name),
                _ => dir.join(member.name),
            };
            std::fs::create_dir_all(&data)?;
            let config_path = dir.join(format!("{}.toml", member.name));
            std::fs::write(
                &config_path,
                config_text(layout, &hosts, member.name, self.config.log_file_size)?,
            )?;
            let (resp, admin) =
                (layout.port_base().to_string(), (layout.port_base() + 1).to_string());
            ServerProcess::start_command(
                self.network.site_command(member.site, &self.config.binary)?,
                &[
                    "--config",
                    &config_path.display().to_string(),
                    "--data-dir",
                    &data.display().to_string(),
                    "--port",
                    &resp,
                    "--admin-port",
                    &admin,
                ],
                &dir.join(format!("{}.log", member.name)),
            )
            .with_context(|| format!("starting {} ({})", member.name, layout.name()))
        };
        let mut standbys = Vec::new();
        let mut failed = None;
        for member in members.iter().filter(|member| member.name != PRIMARY) {
            match start(member) {
                Ok(server) => standbys.push(server),
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        let primary = match failed {
            None => start(&members[0]),
            Some(error) => Err(error),
        };
        let primary = match primary {
            Ok(primary) => primary,
            Err(error) => {
                for standby in &mut standbys {
                    let _ = standby.kill();
                }
                let _ = std::fs::remove_dir_all(&dir);
                if let Some(data) = &standby_data {
                    let _ = std::fs::remove_dir_all(data);
                }
                return Err(error);
            }
        };
        let client_addr = primary.resp_addr;
        let setup =
            Setup { network: self.network, dir, primary, standbys, standby_data, client_addr };
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        // The primary's own destinations, then each forwarder's.
        let primary_ships: Vec<&str> = members
            .iter()
            .filter(|member| {
                member.name != PRIMARY
                    && !members.iter().any(|other| other.forwards_to.contains(&member.name))
            })
            .map(|member| member.name)
            .collect();
        loop {
            crate::interrupt::check()?;
            let status = setup.primary_status()?;
            let destinations = &status.replication.destinations;
            let mut names: Vec<&str> = destinations.iter().map(|d| d.name.as_str()).collect();
            names.sort_unstable();
            if names == primary_ships
                && destinations.iter().all(|destination| destination.phase == layout.phase())
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{}: the primary's destinations did not reach {:?} within {CONNECT_TIMEOUT:?}: {destinations:?}",
                layout.name(),
                layout.phase()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Each member a route names takes its redo from that forwarder, and follows `p`.
        for (index, member) in members.iter().skip(1).enumerate() {
            let Some(forwarder) =
                members.iter().find(|other| other.forwards_to.contains(&member.name))
            else {
                continue;
            };
            let server = &setup.standbys[index];
            loop {
                crate::interrupt::check()?;
                let status = status_in_site(self.network, member.site, server.admin_addr)?;
                let standby = status.replication.standby;
                let (primary, source) = standby.as_ref().map_or((None, None), |standby| {
                    (standby.primary_member.as_deref(), standby.source_member.as_deref())
                });
                if (primary, source) == (Some(PRIMARY), Some(forwarder.name)) {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{}: {} does not take its redo from {} within {CONNECT_TIMEOUT:?}: its primary_member is {primary:?}, its source_member {source:?}",
                    layout.name(),
                    member.name,
                    forwarder.name
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for (index, member) in members.iter().skip(1).enumerate() {
            if member.forwards_to.is_empty() {
                continue;
            }
            let server = &setup.standbys[index];
            loop {
                crate::interrupt::check()?;
                let status = status_in_site(self.network, member.site, server.admin_addr)?;
                let destinations = &status.replication.destinations;
                if destinations.len() == member.forwards_to.len()
                    && destinations
                        .iter()
                        .all(|destination| destination.phase == transport::Phase::Streaming)
                {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "{}: {} did not forward to {:?} (STREAMING) within {CONNECT_TIMEOUT:?}: {destinations:?}",
                    layout.name(),
                    member.name,
                    member.forwards_to
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(setup)
    }

    /// The destinations of each forwarder of `layout` in `setup` that are not STREAMING now,
    /// as problems of a case (a forwarder that stopped forwarding makes its figures invalid).
    pub(super) fn forwarding_problems(&self, layout: Layout, setup: &Setup<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        for (index, member) in layout.members().iter().skip(1).enumerate() {
            if member.forwards_to.is_empty() {
                continue;
            }
            let Some(server) = setup.standbys.get(index) else { continue };
            match status_in_site(self.network, member.site, server.admin_addr) {
                Ok(status) => {
                    for destination in &status.replication.destinations {
                        if destination.phase != transport::Phase::Streaming {
                            problems.push(format!(
                                "{} forwards to {} in {:?}, not STREAMING (last error {:?})",
                                member.name,
                                destination.name,
                                destination.phase,
                                destination.last_error
                            ));
                        }
                    }
                    if status.replication.destinations.len() != member.forwards_to.len() {
                        problems.push(format!(
                            "{} forwards to {} members, not {}",
                            member.name,
                            status.replication.destinations.len(),
                            member.forwards_to.len()
                        ));
                    }
                }
                Err(error) => {
                    problems.push(format!("{}'s status: {error:#}", member.name));
                }
            }
        }
        problems
    }
}

/// What the primary ships to itself in `layout`: its destinations' count.
pub(super) fn primary_destinations(layout: Layout) -> u32 {
    match layout {
        Layout::FourDirect => 4,
        _ => 1,
    }
}

/// Each standby's CPU seconds (user + system) now, by name; a member whose process is gone is
/// left out.
pub(super) fn standbys_cpu_seconds(layout: Layout, setup: &Setup<'_>) -> Vec<(String, f64)> {
    layout
        .standbys()
        .iter()
        .zip(&setup.standbys)
        .filter_map(|(name, server)| {
            let seconds = server.pid().and_then(|pid| crate::process::cpu_seconds(pid).ok())?;
            Some((name.to_string(), seconds))
        })
        .collect()
}

/// Adds what each member used between `before` and `after` (`standbys_cpu_seconds`) to
/// `sums`, in seconds.
pub(super) fn add_cpu_since(
    sums: &mut std::collections::BTreeMap<String, f64>,
    before: &[(String, f64)],
    after: &[(String, f64)],
) {
    for (name, last) in after {
        if let Some((_, first)) = before.iter().find(|(other, _)| other == name) {
            *sums.entry(name.clone()).or_default() += last - first;
        }
    }
}

/// CPU seconds by member as µs per commit (None without a commit or a member).
pub(super) fn per_commit(
    sums: &std::collections::BTreeMap<String, f64>,
    commits: u64,
) -> Option<std::collections::BTreeMap<String, f64>> {
    (commits > 0 && !sums.is_empty()).then(|| {
        sums.iter().map(|(name, seconds)| (name.clone(), seconds * 1e6 / commits as f64)).collect()
    })
}

/// `member_cpu_us_per_commit` as text: `fs 26.1, t 8.0` (`-` without).
pub(super) fn members_cpu_text(case: &super::TransportCase) -> String {
    case.member_cpu_us_per_commit.as_ref().map_or_else(
        || "-".into(),
        |members| {
            members
                .iter()
                .map(|(name, us)| format!("{name} {us:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
    )
}

/// A linkemu mesh of `sites` at `rtt` between each two, at the benchmarks' link rate, as a
/// `Network`, after saying `announce`; `None`, with why in `report.skipped` (under
/// `experiment`), where meshes cannot run here or this one did not come up.
pub(super) fn mesh_network(
    experiment: &str,
    sites: usize,
    rtt: std::time::Duration,
    announce: &str,
    report: &mut super::TransportReport,
    progress: &mut dyn FnMut(&str),
) -> Option<crate::network::Network> {
    if let Some(reason) = linkemu::unavailable_reason() {
        report.skipped.push(format!("{experiment}: no linkemu mesh: {reason}"));
        return None;
    }
    progress(announce);
    let link = linkemu::LinkConfig {
        rtt,
        rate_bits_per_s: Some(crate::network::LINK_RATE_BITS_PER_S),
        ..linkemu::LinkConfig::default()
    };
    match linkemu::Mesh::up(sites, link) {
        Ok(mesh) => Some(crate::network::Network::Mesh(Box::new(mesh))),
        Err(error) => {
            report.skipped.push(format!("{experiment}: the mesh did not come up: {error}"));
            None
        }
    }
}
