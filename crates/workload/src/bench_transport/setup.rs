//! A redoguard setup: the configurations of a primary and its standby, the two servers on
//! the two sides of the network, stopped and removed when dropped, and their status.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use linkemu::Side;

use super::members::Layout;
use super::runs::Bench;
use crate::network::Network;
use crate::process::ServerProcess;

/// How long a destination may take to reach STREAMING or SYNCHRONIZED.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// A SYNC destination that does not answer within this is dropped (the case then reports it).
pub(super) const NET_TIMEOUT: &str = "10s";

/// A redoguard setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    NoStandby,
    Async,
    SyncNoAffirm,
    SyncAffirm,
    /// Two standbys, both SYNC AFFIRM under Maximum Availability, the commit waiting for
    /// `Quorum` of them.
    SyncAffirmTwo(Quorum),
    /// Members of one configuration on a mesh, with redo routes (`far_sync`, `fan_out`).
    Routes(Layout),
}

/// How many of its synchronized SYNC destinations a commit waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Quorum {
    /// `sync_quorum = "all"`: every one (Data Guard's rule).
    All,
    /// `sync_quorum = "any 1"`: the first to answer (PostgreSQL's `ANY 1`).
    AnyOne,
    /// No `sync_quorum` key: the server's default, every one. For a server that does not
    /// know the key yet.
    Default,
}

/// How long a primary waits for a slow SYNC destination once the quorum has answered,
/// before it drops it (`sync_latency`, Data Guard's `DATA_GUARD_SYNC_LATENCY`).
const SYNC_LATENCY: &str = "200ms";

/// The primary's `[replication]` keys that make a commit wait for `quorum` of its
/// synchronized SYNC destinations. The one place that knows their form (issue 11:
/// `sync_quorum = "all" | "any k"`, `sync_latency = "<duration>"`).
pub(super) fn sync_quorum_keys(quorum: Quorum) -> String {
    let value = match quorum {
        Quorum::All => "all",
        Quorum::AnyOne => "any 1",
        Quorum::Default => return String::new(),
    };
    format!("sync_quorum = \"{value}\"\nsync_latency = \"{SYNC_LATENCY}\"\n")
}

/// Whether a server's refusal to start is its refusal of [`sync_quorum_keys`]' keys.
pub(super) fn refused_sync_quorum(error: &anyhow::Error) -> bool {
    let text = format!("{error:#}");
    text.contains("sync_quorum") || text.contains("sync_latency")
}

/// What a setup's cases load it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Load {
    /// Each client commits again once acknowledged, for each client count.
    ClosedLoop,
    /// A steady redo rate, for each rate (ASYNC only).
    SteadyRate,
}

pub(super) const MODES: [Mode; 4] =
    [Mode::NoStandby, Mode::Async, Mode::SyncNoAffirm, Mode::SyncAffirm];

impl Mode {
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::NoStandby => "no_standby",
            Mode::Async => "async",
            Mode::SyncNoAffirm => "sync_noaffirm",
            Mode::SyncAffirm => "sync_affirm",
            Mode::SyncAffirmTwo(Quorum::All | Quorum::Default) => "sync_affirm_2_all",
            Mode::SyncAffirmTwo(Quorum::AnyOne) => "sync_affirm_2_any_1",
            Mode::Routes(layout) => layout.name(),
        }
    }

    /// The phase the destination must be in while measured.
    pub(super) fn phase(self) -> Option<transport::Phase> {
        match self {
            Mode::NoStandby => None,
            Mode::Async => Some(transport::Phase::Streaming),
            Mode::SyncNoAffirm | Mode::SyncAffirm | Mode::SyncAffirmTwo(_) => {
                Some(transport::Phase::Synchronized)
            }
            Mode::Routes(layout) => Some(layout.phase()),
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Mode::NoStandby => "a primary alone; the commit waits for its local log write",
            Mode::Async => {
                "transport = async under maximum_performance; the commit waits for the local log write only, the sender streams the redo"
            }
            Mode::SyncNoAffirm => {
                "transport = sync, affirm = false under maximum_availability; the commit waits for the local log write and the standby's receipt, sent in parallel"
            }
            Mode::SyncAffirm => {
                "transport = sync, affirm = true under maximum_availability; the commit waits for the local log write and the standby's fdatasync, sent in parallel"
            }
            Mode::SyncAffirmTwo(Quorum::All) => {
                "two standbys, each transport = sync, affirm = true, under maximum_availability with sync_quorum = \"all\", sync_latency = \"200ms\"; the commit waits for the local log write and both standbys' fdatasync"
            }
            Mode::SyncAffirmTwo(Quorum::Default) => {
                "two standbys, each transport = sync, affirm = true, under maximum_availability (no sync_quorum key: this server does not know it; its rule is every synchronized SYNC destination); the commit waits for the local log write and both standbys' fdatasync"
            }
            Mode::SyncAffirmTwo(Quorum::AnyOne) => {
                "two standbys, each transport = sync, affirm = true, under maximum_availability with sync_quorum = \"any 1\", sync_latency = \"200ms\"; the commit waits for the local log write and the first standby's fdatasync"
            }
            Mode::Routes(layout) => layout.describe(),
        }
    }

    /// The standbys this setup runs.
    pub(super) fn standbys(self) -> &'static [&'static str] {
        match self {
            Mode::NoStandby => &[],
            Mode::Async | Mode::SyncNoAffirm | Mode::SyncAffirm => &["standby"],
            Mode::SyncAffirmTwo(_) => &["standby1", "standby2"],
            Mode::Routes(layout) => layout.standbys(),
        }
    }
}

/// The primary's configuration for `mode`, shipping to `standbys` (their redo listeners, in
/// the order of [`Mode::standbys`]).
pub(super) fn primary_config(
    mode: Mode,
    log_file_size: u64,
    standbys: &[Option<SocketAddr>],
    tcp_congestion: Option<&str>,
) -> String {
    let mut text = format!(
        "# Written by `redoguard bench transport`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 3\n"
    );
    let (transport, affirm, protection) = match mode {
        Mode::NoStandby => return text,
        Mode::Async => ("async", true, "maximum_performance"),
        Mode::SyncNoAffirm => ("sync", false, "maximum_availability"),
        Mode::SyncAffirm | Mode::SyncAffirmTwo(_) => ("sync", true, "maximum_availability"),
        // Written by `members`, in the configuration form.
        Mode::Routes(_) => return text,
    };
    text.push_str(&format!(
        "[replication]\nrole = \"primary\"\nprotection_mode = \"{protection}\"\n"
    ));
    if let Mode::SyncAffirmTwo(quorum) = mode {
        text.push_str(&sync_quorum_keys(quorum));
    }
    for (index, name) in mode.standbys().iter().enumerate() {
        let address = standbys
            .get(index)
            .copied()
            .flatten()
            .map_or_else(String::new, |address| address.to_string());
        text.push_str(&format!(
            "[[replication.destinations]]\nname = \"{name}\"\naddress = \"{address}\"\ntransport = \"{transport}\"\naffirm = {affirm}\nnet_timeout = \"{NET_TIMEOUT}\"\nreopen = \"500ms\"\n"
        ));
        if let Some(congestion) = tcp_congestion {
            text.push_str(&format!("tcp_congestion = \"{congestion}\"\n"));
        }
    }
    text
}

/// The standby's configuration: the primary's log size, one more group, listening on `listen`.
pub(super) fn standby_config(log_file_size: u64, listen: Ipv4Addr) -> String {
    format!(
        "# Written by `redoguard bench transport`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 4\n[replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"{listen}:0\"\n"
    )
}

/// A primary (on side A) and its standbys if any (on side B), stopped and removed when
/// dropped.
pub(super) struct Setup<'a> {
    pub(super) network: &'a Network,
    pub(super) dir: PathBuf,
    // Stopped in this order: the primary first, so that it does not log its standbys' going.
    pub(super) primary: ServerProcess,
    pub(super) standbys: Vec<ServerProcess>,
    /// The standbys' data, when not in `dir` (`standby_dir`).
    pub(super) standby_data: Option<PathBuf>,
    /// Where the clients on side A reach the primary.
    pub(super) client_addr: SocketAddr,
}

impl Setup<'_> {
    /// The primary's status, read from its side.
    pub(super) fn primary_status(&self) -> anyhow::Result<admin::ServerStatus> {
        status(self.network, Side::A, self.primary.admin_addr)
    }

    /// Stops every server with SIGTERM; fails if one does not stop cleanly.
    pub(super) fn stop(mut self) -> anyhow::Result<()> {
        let mut result = self.primary.stop().context("stopping the primary");
        for standby in &mut self.standbys {
            let stopped = standby.stop().context("stopping a standby");
            result = result.and(stopped);
        }
        result
    }

    /// The primary's process, for its CPU time.
    pub(super) fn primary_pid(&self) -> Option<u32> {
        self.primary.pid()
    }
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        let _ = self.primary.kill();
        for standby in &mut self.standbys {
            let _ = standby.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(data) = &self.standby_data {
            let _ = std::fs::remove_dir_all(data);
        }
    }
}

/// A server's status through its admin API, read from `side` (where it listens).
pub(super) fn status(
    network: &Network,
    side: Side,
    admin: SocketAddr,
) -> anyhow::Result<admin::ServerStatus> {
    let body = network.run_in(side, move || {
        admin::http_get(&admin.to_string(), "/status", Duration::from_secs(10))
    })??;
    serde_json::from_str(&body).context("parsing the server's status")
}

impl Bench<'_> {
    /// Starts `mode`'s servers in a directory named after `label` (what the setup is for),
    /// waits until every destination is as `mode` wants it.
    pub(super) fn start(&self, mode: Mode, label: &str) -> anyhow::Result<Setup<'_>> {
        if let Mode::Routes(layout) = mode {
            return self.start_members(layout, label);
        }
        let name = format!("redoguard-{}-{}-{label}", self.rtt(), mode.name());
        let dir = self.work.join(&name);
        // The standbys' data, on the file system of `standby_dir` if given.
        let standby_data = self.standby_work.map(|work| work.join(&name));
        // A setup started again (a quorum the server refused, without its keys) starts fresh.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        if let Some(data) = &standby_data {
            let _ = std::fs::remove_dir_all(data);
        }
        let log_file_size = self.config.log_file_size;
        let binary = &self.config.binary;
        let server = |side: Side, name: &str, config: String| -> anyhow::Result<ServerProcess> {
            let data = match &standby_data {
                Some(standby_data) if side == Side::B => standby_data.join(name),
                _ => dir.join(name),
            };
            std::fs::create_dir_all(&data)?;
            let config_path = dir.join(format!("{name}.toml"));
            std::fs::write(&config_path, config)?;
            let (config_path, data) =
                (config_path.display().to_string(), data.display().to_string());
            ServerProcess::start_command(
                self.network.command(side, binary),
                &["--config", &config_path, "--data-dir", &data],
                &dir.join(format!("{name}.log")),
            )
            .with_context(|| format!("starting the {name}"))
        };
        let tls_section = |name: &str| -> anyhow::Result<String> {
            if !self.config.tls {
                return Ok(String::new());
            }
            let certs = dir.join("certs");
            if !certs.join("ca.pem").exists() {
                tls::certs::write_set(
                    &certs,
                    &std::iter::once("primary")
                        .chain(mode.standbys().iter().copied())
                        .map(|name| (name.to_string(), Vec::new()))
                        .collect::<Vec<_>>(),
                )
                .map_err(anyhow::Error::msg)?;
            }
            Ok(format!(
                "[tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/{name}.pem\"\nkey_file = \"{0}/{name}-key.pem\"\nname = \"{name}\"\n",
                certs.display()
            ))
        };
        let mut standbys = Vec::new();
        for name in mode.standbys() {
            standbys.push(server(
                Side::B,
                name,
                standby_config(log_file_size, self.network.address(Side::B))
                    + &tls_section(name)?
                    + if self.config.tls { "" } else { crate::bench_batch::INSECURE },
            )?);
        }
        let redo: Vec<Option<SocketAddr>> =
            standbys.iter().map(|standby| standby.redo_addr).collect();
        let primary_text =
            primary_config(mode, log_file_size, &redo, self.config.tcp_congestion.as_deref())
                + &if standbys.is_empty() { String::new() } else { tls_section("primary")? };
        let primary = match server(Side::A, "primary", primary_text) {
            Ok(primary) => primary,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                if let Some(data) = &standby_data {
                    let _ = std::fs::remove_dir_all(data);
                }
                return Err(error);
            }
        };
        let client_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, primary.resp_addr.port()));
        let setup =
            Setup { network: self.network, dir, primary, standbys, standby_data, client_addr };
        if let Some(wanted) = mode.phase() {
            let deadline = Instant::now() + CONNECT_TIMEOUT;
            loop {
                crate::interrupt::check()?;
                let status = setup.primary_status()?;
                let destinations = &status.replication.destinations;
                if destinations.len() == mode.standbys().len()
                    && destinations.iter().all(|destination| destination.phase == wanted)
                {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "the standbys did not reach {wanted:?} within {CONNECT_TIMEOUT:?}: {:?}",
                    destinations
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(setup)
    }
}
