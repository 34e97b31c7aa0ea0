//! One epoch's configuration of `bench chaos`, as real processes on the mesh: the layout's
//! members — `east` (the first primary), `west` (SYNC AFFIRM) and `south` (ASYNC), and with
//! `--layout far-sync` the far sync `fs` between `east` and `west` (`layout`) — under Maximum
//! Availability with fast-start failover, and two observers `obs1`, `obs2`, each in a site of
//! its own; each member's data directory on a tmpfs of its own (which `disk_full` fills). What
//! the campaign asks of them: start, kill -9, pause, restart by name; their status; what the
//! observers' Sentinel fronts say.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use super::layout::Layout;
use super::processes::{Process, Tmpfs};
use crate::bench_failover::writers;
use crate::ports::free_port;
use crate::sentinel::master_addr;

/// The configuration's name: the Sentinel master name clients ask for.
pub(crate) const NAME: &str = "chaos";
pub(crate) const OBSERVERS: [&str; 2] = ["obs1", "obs2"];

/// The site of the clients and of the campaign's own thread: linked to every other, never cut
/// (after the members' and the observers' sites).
pub(crate) fn site_clients(layout: Layout) -> usize {
    layout.members().len() + OBSERVERS.len()
}

/// Sites in the mesh.
pub(crate) fn sites(layout: Layout) -> usize {
    site_clients(layout) + 1
}
/// Each member's file system.
pub(crate) const TMPFS_BYTES: u64 = 128 << 20;
/// What `disk_full` writes into a member's file system.
const FILLER: &str = "filler";
/// How long a status or Sentinel answer may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy)]
pub(crate) struct Ports {
    pub(crate) resp: u16,
    pub(crate) admin: u16,
    pub(crate) redo: u16,
}

/// A member: its process (if running) first, so that it stops before its file system goes.
pub(crate) struct Member {
    pub(crate) name: &'static str,
    pub(crate) site: usize,
    pub(crate) ports: Ports,
    pub(crate) process: Option<Process>,
    pub(crate) filled: bool,
    pub(crate) tmpfs: Tmpfs,
}

pub(crate) struct Observer {
    pub(crate) name: &'static str,
    pub(crate) site: usize,
    pub(crate) sentinel: SocketAddr,
    pub(crate) process: Option<Process>,
}

/// What an epoch's configuration is made of.
#[derive(Debug, Clone)]
pub(crate) struct ClusterSettings {
    pub(crate) binary: PathBuf,
    pub(crate) layout: Layout,
    pub(crate) threshold: Duration,
    pub(crate) net_timeout: Duration,
}

/// The processes of one epoch. Dropped: processes killed, file systems unmounted, the
/// directory removed, in that order.
pub(crate) struct Cluster<'m> {
    pub(crate) mesh: &'m linkemu::Mesh,
    settings: ClusterSettings,
    pub(crate) members: Vec<Member>,
    pub(crate) observers: Vec<Observer>,
    dir: tempfile::TempDir,
}

impl<'m> Cluster<'m> {
    /// Mounts the file systems, writes the files, starts the standbys, the primary, then the
    /// observers.
    pub(crate) fn start(
        mesh: &'m linkemu::Mesh,
        settings: ClusterSettings,
        work: &Path,
        epoch: u32,
    ) -> anyhow::Result<Cluster<'m>> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("epoch-{epoch}-"))
            .tempdir_in(work)
            .context("creating the epoch's directory")?;
        let layout = settings.layout;
        let mut members = Vec::new();
        for (site, name) in layout.member_names().enumerate() {
            let tmpfs = Tmpfs::mount(&dir.path().join(name), TMPFS_BYTES)?;
            let ports = Ports { resp: free_port()?, admin: free_port()?, redo: free_port()? };
            members.push(Member { name, site, ports, process: None, filled: false, tmpfs });
        }
        let mut observers = Vec::new();
        for (number, name) in OBSERVERS.iter().enumerate() {
            let site = layout.members().len() + number;
            let sentinel = SocketAddr::from((mesh.address(site), free_port()?));
            std::fs::create_dir_all(dir.path().join(name))?;
            observers.push(Observer { name, site, sentinel, process: None });
        }
        let mut cluster = Cluster { mesh, settings, members, observers, dir };
        for (index, name) in layout.member_names().enumerate() {
            std::fs::write(cluster.config_path(name), cluster.member_config(index))?;
        }
        for name in OBSERVERS {
            std::fs::write(cluster.config_path(name), cluster.observer_config(name))?;
        }
        for name in layout.start_order() {
            cluster.start_process(name)?;
        }
        for name in OBSERVERS {
            cluster.start_process(name)?;
        }
        Ok(cluster)
    }

    /// A member's or observer's file: beside its log, in its own directory (an observer runs
    /// there, so that anything it keeps on disk stays with it across restarts).
    fn config_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.toml"))
    }

    pub(crate) fn log_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    fn data_dir(&self, name: &str) -> PathBuf {
        self.member(name).tmpfs.path().join("data")
    }

    pub(crate) fn member(&self, name: &str) -> &Member {
        self.members
            .iter()
            .find(|member| member.name == name)
            .unwrap_or_else(|| panic!("no member {name}"))
    }

    fn member_mut(&mut self, name: &str) -> &mut Member {
        self.members
            .iter_mut()
            .find(|member| member.name == name)
            .unwrap_or_else(|| panic!("no member {name}"))
    }

    pub(crate) fn layout(&self) -> Layout {
        self.settings.layout
    }

    pub(crate) fn is_member(&self, name: &str) -> bool {
        self.layout().member(name).is_some()
    }

    /// Every member's and observer's name.
    pub(crate) fn process_names(&self) -> Vec<&'static str> {
        self.layout().member_names().chain(OBSERVERS).collect()
    }

    /// The site of the clients (and of the campaign's own thread).
    pub(crate) fn site_clients(&self) -> usize {
        site_clients(self.layout())
    }

    /// The site of a member or observer.
    pub(crate) fn site(&self, name: &str) -> usize {
        match self.members.iter().find(|member| member.name == name) {
            Some(member) => member.site,
            None => self.observer(name).site,
        }
    }

    pub(crate) fn observer(&self, name: &str) -> &Observer {
        self.observers
            .iter()
            .find(|observer| observer.name == name)
            .unwrap_or_else(|| panic!("no observer {name}"))
    }

    fn process_mut(&mut self, name: &str) -> &mut Option<Process> {
        if self.is_member(name) {
            &mut self.member_mut(name).process
        } else {
            let observer = self.observers.iter_mut().find(|observer| observer.name == name);
            &mut observer.unwrap_or_else(|| panic!("no observer {name}")).process
        }
    }

    pub(crate) fn is_running(&self, name: &str) -> bool {
        if self.is_member(name) {
            self.member(name).process.is_some()
        } else {
            self.observer(name).process.is_some()
        }
    }

    /// Starts (or restarts) a member on its data directory and ports, or an observer.
    pub(crate) fn start_process(&mut self, name: &str) -> anyhow::Result<()> {
        anyhow::ensure!(!self.is_running(name), "{name} is running");
        let site = self.site(name);
        let mut command = self.mesh.command(site, &self.settings.binary);
        let config = self.config_path(name);
        if self.is_member(name) {
            let ports = self.member(name).ports;
            command
                .arg("server")
                .arg("--config")
                .arg(&config)
                .arg("--data-dir")
                .arg(self.data_dir(name))
                .args([
                    "--port",
                    &ports.resp.to_string(),
                    "--admin-port",
                    &ports.admin.to_string(),
                ]);
        } else {
            command
                .arg("observer")
                .arg("--config")
                .arg(&config)
                .current_dir(self.dir.path().join(name));
        }
        let process = Process::start(name, command, &self.log_path(name), " ready: ")?;
        *self.process_mut(name) = Some(process);
        Ok(())
    }

    /// SIGKILL (nothing if not running).
    pub(crate) fn kill(&mut self, name: &str) {
        if let Some(mut process) = self.process_mut(name).take() {
            process.kill();
        }
    }

    /// SIGSTOP, until [`Cluster::resume`].
    pub(crate) fn pause(&mut self, name: &str) -> anyhow::Result<()> {
        match self.process_mut(name) {
            Some(process) => process.pause(),
            None => anyhow::bail!("{name} is not running"),
        }
    }

    pub(crate) fn resume(&mut self, name: &str) {
        if let Some(process) = self.process_mut(name) {
            process.resume();
        }
    }

    /// Every running process that exited by itself, forgotten (so that it can be started
    /// again); their names.
    pub(crate) fn reap_exited(&mut self) -> Vec<&'static str> {
        let mut exited = Vec::new();
        for member in &mut self.members {
            if member.process.as_mut().is_some_and(Process::exited) {
                member.process = None;
                exited.push(member.name);
            }
        }
        for observer in &mut self.observers {
            if observer.process.as_mut().is_some_and(Process::exited) {
                observer.process = None;
                exited.push(observer.name);
            }
        }
        exited
    }

    /// Resumes every paused process.
    pub(crate) fn resume_all(&mut self) {
        for member in &mut self.members {
            if let Some(process) = &mut member.process {
                process.resume();
            }
        }
        for observer in &mut self.observers {
            if let Some(process) = &mut observer.process {
                process.resume();
            }
        }
    }

    /// Fills a member's file system; the bytes written.
    pub(crate) fn fill_disk(&mut self, name: &str) -> anyhow::Result<u64> {
        let member = self.member_mut(name);
        member.filled = true;
        member.tmpfs.fill(FILLER)
    }

    /// Frees a member's file system, if filled.
    pub(crate) fn free_disk(&mut self, name: &str) {
        let member = self.member_mut(name);
        if member.filled {
            member.tmpfs.free(FILLER);
            member.filled = false;
        }
    }

    /// Frees every filled file system.
    pub(crate) fn free_disks(&mut self) {
        for name in self.layout().member_names() {
            self.free_disk(name);
        }
    }

    pub(crate) fn resp_addr(&self, name: &str) -> SocketAddr {
        let member = self.member(name);
        SocketAddr::from((self.mesh.address(member.site), member.ports.resp))
    }

    pub(crate) fn admin_addr(&self, name: &str) -> SocketAddr {
        let member = self.member(name);
        SocketAddr::from((self.mesh.address(member.site), member.ports.admin))
    }

    /// The member whose client address is `addr`.
    pub(crate) fn member_at(&self, addr: SocketAddr) -> Option<&'static str> {
        self.members.iter().map(|member| member.name).find(|name| self.resp_addr(name) == addr)
    }

    /// A member's status, if it answers within two seconds.
    pub(crate) fn status(&self, name: &str) -> anyhow::Result<admin::ServerStatus> {
        let admin = self.admin_addr(name).to_string();
        let body = admin::http_get(&admin, "/status", ASK_TIMEOUT)?;
        serde_json::from_str(&body).with_context(|| format!("the status of {name}"))
    }

    /// The member an observer's Sentinel front names as the primary.
    pub(crate) fn sentinel_primary(&self, observer: &str) -> Option<&'static str> {
        let sentinel = self.observer(observer).sentinel;
        let reply = writers::ask(
            sentinel,
            &[b"SENTINEL", b"get-master-addr-by-name", NAME.as_bytes()],
            ASK_TIMEOUT,
        )
        .ok()?;
        master_addr(&reply).and_then(|addr| self.member_at(addr))
    }

    /// The targets an observer would fail over to now (nobody unless it is active).
    pub(crate) fn failover_ready(&self, observer: &str) -> Vec<String> {
        writers::failover_ready(self.observer(observer).sentinel).unwrap_or_default()
    }

    /// The end of a process's log.
    pub(crate) fn log_tail(&self, name: &str, lines: usize) -> String {
        super::processes::tail(&self.log_path(name), lines)
    }

    /// What every member's file and the observers' share.
    fn shared_config(&self) -> String {
        let members: Vec<(std::net::Ipv4Addr, Ports)> = self
            .members
            .iter()
            .map(|member| (self.mesh.address(member.site), member.ports))
            .collect();
        let observers: Vec<(&str, SocketAddr)> =
            self.observers.iter().map(|observer| (observer.name, observer.sentinel)).collect();
        shared_config(&self.settings, &members, &observers)
    }

    fn member_config(&self, index: usize) -> String {
        member_config(self.layout(), index, &self.shared_config())
    }

    fn observer_config(&self, name: &str) -> String {
        observer_config(name, &self.shared_config())
    }
}

/// The `[replication]` section every file shares: the layout's members in order at their
/// addresses (the far sync with its kind and routes), the observers with their Sentinel
/// addresses.
fn shared_config(
    settings: &ClusterSettings,
    members: &[(std::net::Ipv4Addr, Ports)],
    observers: &[(&str, SocketAddr)],
) -> String {
    let layout = settings.layout;
    let targets: Vec<String> = layout.targets().iter().map(|name| format!("\"{name}\"")).collect();
    let mut text = format!(
        "name = \"{NAME}\"\nprotection_mode = \"maximum_availability\"\n[replication.fast_start_failover]\nenabled = true\nthreshold = \"{}ms\"\nauto_reinstate = true\ntarget = [{}]\n",
        settings.threshold.as_millis(),
        targets.join(", ")
    );
    for (name, sentinel) in observers {
        text +=
            &format!("[[replication.observers]]\nname = \"{name}\"\nsentinel = \"{sentinel}\"\n");
    }
    for ((host, ports), member) in members.iter().zip(layout.members()) {
        let (name, transport) = (member.name, member.transport);
        text += &format!(
            "[[replication.members]]\nname = \"{name}\"\nresp = \"{host}:{}\"\nadmin = \"{host}:{}\"\nredo = \"{host}:{}\"\ntransport = \"{transport}\"\naffirm = true\nnet_timeout = \"{}ms\"\nreopen = \"200ms\"\n",
            ports.resp,
            ports.admin,
            ports.redo,
            settings.net_timeout.as_millis()
        );
        if member.far_sync {
            text += "kind = \"far_sync\"\n";
        }
        if !member.routes.is_empty() {
            let routes: Vec<String> = member
                .routes
                .iter()
                .map(|(when, to)| format!("{{ when = \"{when}\", to = \"{to}\" }}"))
                .collect();
            text += &format!("routes = [{}]\n", routes.join(", "));
        }
    }
    text
}

/// A member's file: small logs, a checkpoint a second, everything else the defaults.
fn member_config(layout: Layout, index: usize, shared: &str) -> String {
    let super::layout::MemberSpec { name, role, .. } = layout.members()[index];
    format!(
        "# Written by `redoguard bench chaos`.\n{}[redo]\nlog_file_size = \"4MiB\"\ngroups = 4\n[db]\ncheckpoint_interval = \"1s\"\n[replication]\nmember = \"{name}\"\nrole = \"{role}\"\n{shared}",
        crate::bench_batch::INSECURE
    )
}

fn observer_config(name: &str, shared: &str) -> String {
    format!(
        "# Written by `redoguard bench chaos`.\n# Protected mode off, as for the members: the mesh's namespaces are reached by nothing else.\n[observer]\nname = \"{name}\"\ninsecure = true\n[replication]\n{shared}"
    )
}

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        // Observers first: they would reinstate and fail over members as they go.
        for observer in &mut self.observers {
            if let Some(mut process) = observer.process.take() {
                process.kill();
            }
        }
        for member in &mut self.members {
            if let Some(mut process) = member.process.take() {
                process.kill();
            }
        }
        // Then the fields: the file systems are unmounted, the directory removed.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each layout's files, as the servers and the observers read them.
    fn configurations(
        layout: Layout,
    ) -> (Vec<server::ServerConfig>, Vec<observer::ObserverConfig>) {
        let settings = ClusterSettings {
            binary: "redoguard".into(),
            layout,
            threshold: Duration::from_secs(2),
            net_timeout: Duration::from_secs(2),
        };
        let count = layout.members().len();
        let members: Vec<(std::net::Ipv4Addr, Ports)> = (0..count)
            .map(|site| {
                let base = 7000 + 3 * site as u16;
                (
                    std::net::Ipv4Addr::new(198, 19, 0, site as u8 + 1),
                    Ports { resp: base, admin: base + 1, redo: base + 2 },
                )
            })
            .collect();
        let observers: Vec<(&str, SocketAddr)> = OBSERVERS
            .iter()
            .enumerate()
            .map(|(number, name)| {
                (*name, SocketAddr::from(([198, 19, 0, (count + 1 + number) as u8], 7100)))
            })
            .collect();
        let shared = shared_config(&settings, &members, &observers);
        let servers = (0..count)
            .map(|index| {
                let config =
                    server::ServerConfig::parse(&member_config(layout, index, &shared)).unwrap();
                config.validate().unwrap();
                assert!(config.replication.fast_start_failover.enabled);
                config
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let observers = OBSERVERS
            .iter()
            .map(|name| {
                let path = dir.path().join(format!("{name}.toml"));
                std::fs::write(&path, observer_config(name, &shared)).unwrap();
                let config = observer::ObserverConfig::load(&path).unwrap();
                assert_eq!(config.replication.observers.len(), 2);
                assert_eq!(config.replication.fast_start_failover.target, ["east", "west"]);
                config
            })
            .collect();
        (servers, observers)
    }

    #[test]
    fn configurations_parse_as_the_server_and_observer_read_them() {
        let (servers, _) = configurations(Layout::Standard);
        assert_eq!(servers.len(), 3);
        for server in &servers {
            assert!(!server.replication.is_far_sync("east"));
        }
    }

    /// The far-sync layout's files say what `Layout::FarSync` means: `fs` a far sync, `west`
    /// behind it under `east`, no relay under `west`, the far sync never a target; and the
    /// faults and the settling (which use `Layout`) agree with the servers' own route trees.
    #[test]
    fn the_far_sync_layouts_files_relay_west_through_fs_under_east() {
        let layout = Layout::FarSync;
        let (servers, _) = configurations(layout);
        assert_eq!(servers.len(), 4);
        let fs = &servers[3];
        assert_eq!(fs.replication.member.as_deref(), Some("fs"));
        assert!(fs.replication.is_far_sync("fs"));
        for server in &servers {
            let replication = &server.replication;
            let this = replication.member.clone().unwrap();
            for primary in ["east", "west"] {
                let tree = replication.route_tree(primary).unwrap();
                for name in layout.member_names().filter(|name| *name != primary) {
                    let expected = layout.source(name, primary).unwrap_or(primary);
                    assert_eq!(tree.source_of(name), Some(expected), "{name} under {primary}");
                }
            }
            assert!(
                replication.primary_candidates().all(|member| member.name != "fs"),
                "fs is never a primary ({this})"
            );
        }
        assert_eq!(fs.replication.source("east").as_deref(), Some("east"));
        assert_eq!(servers[1].replication.source("east").as_deref(), Some("fs"));
        assert_eq!(servers[1].replication.source("west"), None);
        let forwarded: Vec<String> = fs
            .replication
            .forwards("east")
            .into_iter()
            .map(|destination| destination.name)
            .collect();
        assert_eq!(forwarded, ["west"]);
        assert!(fs.replication.forwards("west").is_empty());
    }
}
