//! A redoguard setup: the configurations of a primary and its standby, the two servers on
//! the two sides of the network, stopped and removed when dropped, and their status.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use linkemu::Side;

use super::runs::Bench;
use crate::network::Network;
use crate::process::ServerProcess;

/// How long a destination may take to reach STREAMING or SYNCHRONIZED.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// A SYNC destination that does not answer within this is dropped (the case then reports it).
const NET_TIMEOUT: &str = "10s";

/// A redoguard setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    NoStandby,
    Async,
    SyncNoAffirm,
    SyncAffirm,
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
        }
    }

    /// The phase the destination must be in while measured.
    pub(super) fn phase(self) -> Option<transport::Phase> {
        match self {
            Mode::NoStandby => None,
            Mode::Async => Some(transport::Phase::Streaming),
            Mode::SyncNoAffirm | Mode::SyncAffirm => Some(transport::Phase::Synchronized),
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
        }
    }
}

/// The primary's configuration for `mode`, shipping to `standby` (its redo listener).
pub(super) fn primary_config(
    mode: Mode,
    log_file_size: u64,
    standby: Option<SocketAddr>,
) -> String {
    let mut text = format!(
        "# Written by `redoguard bench transport`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 3\n"
    );
    let (transport, affirm, protection) = match mode {
        Mode::NoStandby => return text,
        Mode::Async => ("async", true, "maximum_performance"),
        Mode::SyncNoAffirm => ("sync", false, "maximum_availability"),
        Mode::SyncAffirm => ("sync", true, "maximum_availability"),
    };
    let address = standby.map_or_else(String::new, |address| address.to_string());
    text.push_str(&format!(
        "[replication]\nrole = \"primary\"\nprotection_mode = \"{protection}\"\n[[replication.destinations]]\nname = \"standby\"\naddress = \"{address}\"\ntransport = \"{transport}\"\naffirm = {affirm}\nnet_timeout = \"{NET_TIMEOUT}\"\nreopen = \"500ms\"\n"
    ));
    text
}

/// The standby's configuration: the primary's log size, one more group, listening on `listen`.
pub(super) fn standby_config(log_file_size: u64, listen: Ipv4Addr) -> String {
    format!(
        "# Written by `redoguard bench transport`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 4\n[replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"{listen}:0\"\n"
    )
}

/// A primary (on side A) and maybe its standby (on side B), stopped and removed when dropped.
pub(super) struct Setup<'a> {
    pub(super) network: &'a Network,
    pub(super) dir: PathBuf,
    // Stopped in this order: the primary first, so that it does not log its standby's going.
    pub(super) primary: ServerProcess,
    pub(super) standby: Option<ServerProcess>,
}

impl Setup<'_> {
    /// The primary's status, read from its side.
    pub(super) fn primary_status(&self) -> anyhow::Result<server::ServerStatus> {
        status(self.network, Side::A, self.primary.admin_addr)
    }

    /// Stops both servers with SIGTERM; fails if either does not stop cleanly.
    pub(super) fn stop(mut self) -> anyhow::Result<()> {
        let primary = self.primary.stop().context("stopping the primary");
        let standby = match &mut self.standby {
            Some(standby) => standby.stop().context("stopping the standby"),
            None => Ok(()),
        };
        primary.and(standby)
    }
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        let _ = self.primary.kill();
        if let Some(standby) = &mut self.standby {
            let _ = standby.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server's status through its admin API, read from `side` (where it listens).
pub(super) fn status(
    network: &Network,
    side: Side,
    admin: SocketAddr,
) -> anyhow::Result<server::ServerStatus> {
    let body = network.run_in(side, move || {
        server::status::http_get(&admin.to_string(), "/status", Duration::from_secs(10))
    })??;
    serde_json::from_str(&body).context("parsing the server's status")
}

impl Bench<'_> {
    /// Starts `mode`'s servers, waits until the destination is as `mode` wants it.
    pub(super) fn start(&self, mode: Mode, load: Load) -> anyhow::Result<Setup<'_>> {
        let dir = self.work.join(format!("redoguard-{}-{}-{load:?}", self.rtt(), mode.name()));
        std::fs::create_dir_all(&dir)?;
        let log_file_size = self.config.log_file_size;
        let binary = &self.config.binary;
        let server = |side: Side, name: &str, config: String| -> anyhow::Result<ServerProcess> {
            let data = dir.join(name);
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
                    &[("primary".into(), Vec::new()), ("standby".into(), Vec::new())],
                )
                .map_err(anyhow::Error::msg)?;
            }
            Ok(format!(
                "[tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/{name}.pem\"\nkey_file = \"{0}/{name}-key.pem\"\nname = \"{name}\"\n",
                certs.display()
            ))
        };
        let standby = match mode {
            Mode::NoStandby => None,
            _ => Some(server(
                Side::B,
                "standby",
                standby_config(log_file_size, self.network.address(Side::B))
                    + &tls_section("standby")?,
            )?),
        };
        let redo = standby.as_ref().and_then(|standby| standby.redo_addr);
        let primary_text = primary_config(mode, log_file_size, redo)
            + &if mode == Mode::NoStandby { String::new() } else { tls_section("primary")? };
        let primary = match server(Side::A, "primary", primary_text) {
            Ok(primary) => primary,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        let setup = Setup { network: self.network, dir, primary, standby };
        if let Some(wanted) = mode.phase() {
            let deadline = Instant::now() + CONNECT_TIMEOUT;
            loop {
                crate::interrupt::check()?;
                let status = setup.primary_status()?;
                let destination = status.replication.destinations.first();
                if destination.is_some_and(|destination| destination.phase == wanted) {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "the standby did not reach {wanted:?} within {CONNECT_TIMEOUT:?}: {:?}",
                    destination
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(setup)
    }
}
