//! What the role-transition tests share: a configuration of named members (real `redoguard
//! server` processes on loopback ports chosen for them), each with its own file listing every
//! member; start, kill -9, restart by name; and the `redoguard` broker commands.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{self, Server};

mod writes;
// (Each test binary uses some of them.)
#[allow(unused_imports)]
pub use writes::{assert_same_data, first_write, set};

/// One member.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub name: &'static str,
    /// `sync` or `async`: how a primary ships to it.
    pub transport: &'static str,
    pub affirm: bool,
    /// `role` for a new database: `primary` or `standby`.
    pub initial_role: &'static str,
    /// More keys of its `[[replication.members]]` entry (`delay = "5s"\n`, say; a `reopen`
    /// here replaces the cluster's).
    pub extra: &'static str,
    /// Not started by `Cluster::start`: a member the test brings up itself later (built with
    /// `--from`, say), so that no primary has shipped to it before.
    pub later: bool,
}

impl MemberSpec {
    pub fn new(
        name: &'static str,
        transport: &'static str,
        initial_role: &'static str,
    ) -> MemberSpec {
        MemberSpec { name, transport, affirm: true, initial_role, extra: "", later: false }
    }
}

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub members: Vec<MemberSpec>,
    pub protection_mode: &'static str,
    pub net_timeout: &'static str,
    pub reopen: &'static str,
    pub log_file_size: &'static str,
    pub checkpoint_interval: &'static str,
    /// Extra lines for the `[redo]` section (retention, say).
    pub redo_extra: String,
    /// Fast-start failover: the observers (in priority order; none: disabled), the threshold,
    /// and whether the observer reinstates by itself.
    pub observers: Vec<&'static str>,
    pub threshold: &'static str,
    pub auto_reinstate: bool,
    /// Extra keys of `[replication.fast_start_failover]` (`target = ["t"]`, say).
    pub fast_start_extra: &'static str,
    /// Each member and observer in a site of its own of a linkemu mesh (the test's own thread
    /// in one more, linked to all), so that a test can cut any pair; `false`: all on
    /// loopback.
    pub mesh: bool,
    /// Every link of the mesh: 1 ms of RTT unless given.
    pub mesh_link: Option<linkemu::LinkConfig>,
    /// Mutual TLS on redo transport: a CA and a certificate for every member and observer in
    /// `certs/` of the cluster's directory.
    pub tls: bool,
    /// The admin API token every member requires for POSTs (the observers and the
    /// `redoguard` commands run here send it).
    pub admin_token: Option<&'static str>,
    /// Extra lines for every member's `[auth]` section (`requirepass`, users).
    pub auth_extra: String,
    /// Extra keys of every member's `[replication]` table (`sync_quorum = "any 1"`, say).
    pub replication_extra: String,
    /// The password of every observer's Sentinel front (`[observer] requirepass`); the
    /// cluster's own Sentinel queries give it.
    pub sentinel_password: Option<&'static str>,
    /// Start every member and observer with `--insecure` (protected mode off): what a mesh
    /// cluster without TLS and passwords needs, its addresses being beyond loopback.
    pub insecure: bool,
}

impl ClusterConfig {
    /// A primary `east` and a SYNC AFFIRM standby `west`, under Maximum Availability.
    pub fn pair() -> ClusterConfig {
        ClusterConfig {
            members: vec![
                MemberSpec::new("east", "sync", "primary"),
                MemberSpec::new("west", "sync", "standby"),
            ],
            protection_mode: "maximum_availability",
            // Generous: a shared 2-core machine can stall a process for seconds, and a standby
            // dropped from the synchronized set would void a zero-loss check.
            net_timeout: "10s",
            reopen: "200ms",
            log_file_size: "2MiB",
            checkpoint_interval: "1s",
            redo_extra: String::new(),
            observers: Vec::new(),
            threshold: "2s",
            auto_reinstate: true,
            fast_start_extra: "",
            mesh: false,
            mesh_link: None,
            tls: false,
            admin_token: None,
            auth_extra: String::new(),
            replication_extra: String::new(),
            sentinel_password: None,
            insecure: false,
        }
    }

    /// The pair, with fast-start failover and one observer.
    pub fn pair_with_observer() -> ClusterConfig {
        ClusterConfig { observers: vec!["obs1"], ..ClusterConfig::pair() }
    }
}

/// Ports a member listens on.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub resp: u16,
    pub admin: u16,
    pub redo: u16,
}

/// A port free now and never handed out before in this process, below the kernel's
/// ephemeral range (see `workload::ports`).
fn free_port() -> u16 {
    workload::ports::free_port().expect("a free port")
}

/// The members, in one temporary directory (deleted at the end, after the servers are killed).
pub struct Cluster {
    pub config: ClusterConfig,
    pub ports: BTreeMap<&'static str, Ports>,
    /// The Sentinel port of each observer.
    pub sentinel_ports: BTreeMap<&'static str, u16>,
    servers: BTreeMap<&'static str, Option<Server>>,
    observers: BTreeMap<&'static str, Option<common::Service>>,
    /// With `mesh`: the test's thread inside the clients' site, until the cluster drops (after
    /// the servers, before the mesh).
    inside: Option<linkemu::namespace::NamespaceGuard>,
    /// With `mesh`: the site of each member and observer (the clients' site is the last).
    pub sites: BTreeMap<&'static str, usize>,
    pub mesh: Option<linkemu::Mesh>,
    pub root: tempfile::TempDir,
}

impl Cluster {
    /// Writes every member's file, starts the standbys, then the primary, and waits until the
    /// primary ships to every standby (SYNCHRONIZED or STREAMING).
    pub fn start(config: ClusterConfig) -> Cluster {
        let root = tempfile::tempdir().unwrap();
        let names: Vec<&'static str> = config
            .members
            .iter()
            .map(|member| member.name)
            .chain(config.observers.iter().copied())
            .collect();
        let (mesh, sites, inside) = if config.mesh {
            if let Some(reason) = linkemu::unavailable_reason() {
                panic!("this test needs linkemu, which cannot run here: {reason}");
            }
            let link = config.mesh_link.clone().unwrap_or(linkemu::LinkConfig {
                rtt: Duration::from_millis(1),
                ..Default::default()
            });
            let mesh = linkemu::Mesh::up(names.len() + 1, link)
                .unwrap_or_else(|error| panic!("bringing the mesh up: {error}"));
            let sites: BTreeMap<&'static str, usize> =
                names.iter().enumerate().map(|(site, name)| (*name, site)).collect();
            let inside = linkemu::namespace::enter(mesh.namespace(names.len()))
                .unwrap_or_else(|error| panic!("entering the clients' site: {error}"));
            (Some(mesh), sites, Some(inside))
        } else {
            (None, BTreeMap::new(), None)
        };
        let ports: BTreeMap<&'static str, Ports> = config
            .members
            .iter()
            .map(|member| {
                (member.name, Ports { resp: free_port(), admin: free_port(), redo: free_port() })
            })
            .collect();
        let sentinel_ports = config.observers.iter().map(|name| (*name, free_port())).collect();
        let mut cluster = Cluster {
            config,
            ports,
            sentinel_ports,
            servers: BTreeMap::new(),
            observers: BTreeMap::new(),
            inside,
            sites,
            mesh,
            root,
        };
        if cluster.config.tls {
            let names: Vec<(String, Vec<String>)> = cluster
                .config
                .members
                .iter()
                .map(|member| member.name)
                .chain(cluster.config.observers.iter().copied())
                .map(|name| (name.to_string(), Vec::new()))
                .collect();
            tls::certs::write_set(&cluster.certs_dir(), &names).unwrap();
        }
        for member in cluster.config.members.clone() {
            std::fs::write(cluster.config_path(member.name), cluster.config_text(&member)).unwrap();
        }
        for observer in cluster.config.observers.clone() {
            let token = cluster
                .config
                .admin_token
                .map(|token| format!("token = \"{token}\"\n"))
                .unwrap_or_default();
            let token = token
                + &cluster
                    .config
                    .sentinel_password
                    .map(|password| format!("requirepass = \"{password}\"\n"))
                    .unwrap_or_default();
            // Each observer keeps its record in a directory of its own, in the cluster's.
            let text = format!(
                "[observer]\nname = \"{observer}\"\ndata_dir = \"{}\"\n{token}[replication]\n{}{}",
                cluster.data_dir(observer).display(),
                cluster.shared_text(),
                cluster.tls_text(observer)
            );
            std::fs::write(cluster.config_path(observer), text).unwrap();
        }
        let (primaries, standbys): (Vec<MemberSpec>, Vec<MemberSpec>) = cluster
            .config
            .members
            .clone()
            .into_iter()
            .partition(|member| member.initial_role == "primary");
        for member in standbys.iter().chain(&primaries).filter(|member| !member.later) {
            cluster.start_member(member.name);
        }
        let primary = primaries.first().expect("a primary").name;
        cluster.wait_shipping(primary, Duration::from_secs(60));
        for observer in cluster.config.observers.clone() {
            cluster.start_observer(observer);
        }
        cluster
    }

    /// Starts `config` on a linkemu mesh (each member and observer in a site of its own, every
    /// link `config.mesh_link`, 1 ms by default; `--insecure`, the addresses being beyond
    /// loopback), then gives the links between each of the `far` pairs an RTT of `far_rtt`
    /// (the members started and connected over the near links) and waits until the primary
    /// ships to every member again.
    pub fn start_on_mesh(
        config: ClusterConfig,
        far: &[(&str, &str)],
        far_rtt: Duration,
    ) -> Cluster {
        let cluster = Cluster::start(ClusterConfig { mesh: true, insecure: true, ..config });
        let mesh = cluster.mesh.as_ref().expect("a mesh cluster");
        for (a, b) in far {
            mesh.set_rtt(cluster.sites[a], cluster.sites[b], far_rtt)
                .unwrap_or_else(|error| panic!("setting {a}—{b} to {far_rtt:?}: {error}"));
        }
        cluster.wait_shipping(cluster.initial_primary(), Duration::from_secs(90));
        cluster
    }

    /// The member started as the primary.
    pub fn initial_primary(&self) -> &'static str {
        self.config
            .members
            .iter()
            .find(|member| member.initial_role == "primary")
            .expect("a primary")
            .name
    }

    /// What every member's and observer's `[replication]` shares: the protection mode, the
    /// fast-start settings, the observers and the members.
    fn shared_text(&self) -> String {
        let mut text =
            format!("protection_mode = \"{}\"\nname = \"cluster\"\n", self.config.protection_mode);
        text += &self.config.replication_extra;
        if !self.config.observers.is_empty() {
            text += &format!(
                "[replication.fast_start_failover]\nenabled = true\nthreshold = \"{}\"\nauto_reinstate = {}\n{}",
                self.config.threshold, self.config.auto_reinstate, self.config.fast_start_extra
            );
            for observer in &self.config.observers {
                text += &format!(
                    "[[replication.observers]]\nname = \"{observer}\"\nsentinel = \"{}:{}\"\n",
                    self.host(observer),
                    self.sentinel_ports[observer]
                );
            }
        }
        text + &self.members_text()
    }

    /// The address a member or observer listens on: its site's, or loopback.
    pub fn host(&self, name: &str) -> String {
        match (&self.mesh, self.sites.get(name)) {
            (Some(mesh), Some(site)) => mesh.address(*site).to_string(),
            _ => "127.0.0.1".to_string(),
        }
    }

    /// Runs `work` (which starts a process, say) in the site of `name`, or here.
    fn in_site_of<R: Send>(&self, name: &str, work: impl FnOnce() -> R + Send) -> R {
        match (&self.mesh, self.sites.get(name)) {
            (Some(mesh), Some(site)) => {
                mesh.run_in(*site, work).unwrap_or_else(|error| panic!("entering a site: {error}"))
            }
            _ => work(),
        }
    }

    /// Cuts every link between the sites of `a` and each of `others` (a mesh cluster).
    pub fn cut(&self, a: &str, others: &[&str]) {
        let mesh = self.mesh.as_ref().expect("a mesh cluster");
        for other in others {
            mesh.cut(self.sites[a], self.sites[other]);
        }
    }

    /// Restores the links between `a` and each of `others` (a mesh cluster).
    pub fn restore(&self, a: &str, others: &[&str]) {
        let mesh = self.mesh.as_ref().expect("a mesh cluster");
        for other in others {
            mesh.restore(self.sites[a], self.sites[other]);
        }
    }

    /// Restores every cut link (a mesh cluster).
    pub fn restore_all(&self) {
        self.mesh.as_ref().expect("a mesh cluster").restore_all();
    }

    /// Starts (or restarts) an observer.
    pub fn start_observer(&mut self, name: &'static str) {
        let mut command = std::process::Command::new(common::binary());
        command.args(["observer", "--config", self.config_path(name).to_str().unwrap()]);
        if self.config.insecure {
            command.arg("--insecure");
        }
        let log = self.log_path(name);
        let service = self.in_site_of(name, || common::Service::start(command, "ready", &log));
        self.observers.insert(name, Some(service));
    }

    /// SIGKILL to an observer.
    pub fn kill_observer(&mut self, name: &str) {
        if let Some(service) = self.observers.get_mut(name).and_then(Option::take) {
            service.kill();
        }
    }

    /// Where an observer's Sentinel front listens.
    pub fn sentinel_addr(&self, observer: &str) -> SocketAddr {
        format!("{}:{}", self.host(observer), self.sentinel_ports[observer]).parse().unwrap()
    }

    /// The primary's client address as an observer's Sentinel front says it.
    pub fn sentinel_master(&self, observer: &str) -> Option<SocketAddr> {
        let addr = self.sentinel_addr(observer);
        let mut connection = self.sentinel_connection(addr);
        let answer: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg("cluster")
            .query(&mut connection)
            .ok()?;
        answer.and_then(|(host, port)| format!("{host}:{port}").parse().ok())
    }

    /// The targets an observer would fail over to now (its `INFO` field
    /// `redoguard_failover_ready`): empty unless it is the active observer and some target is
    /// ready.
    pub fn failover_ready(&self, observer: &str) -> Vec<String> {
        let addr: SocketAddr =
            format!("{}:{}", self.host(observer), self.sentinel_ports[observer]).parse().unwrap();
        let mut connection = self.sentinel_connection(addr);
        let info: String = redis::cmd("INFO").query(&mut connection).unwrap_or_default();
        info.lines()
            .find_map(|line| line.strip_prefix("redoguard_failover_ready:"))
            .map(|names| {
                names.split(',').filter(|name| !name.is_empty()).map(String::from).collect()
            })
            .unwrap_or_default()
    }

    /// Waits until fast-start failover to `standby` is armed: it was told by its primary
    /// (directly, or through its relay) that it is synchronized and to take a failover from
    /// `obs1`, and `obs1` would fail over to it.
    pub fn wait_armed_to(&self, standby: &str, limit: Duration) {
        let ready = common::poll_until(limit, || {
            self.server(standby).status().replication.standby.is_some_and(|status| {
                status.caught_up && status.active_observer.as_deref() == Some("obs1")
            }) && self.failover_ready("obs1").iter().any(|name| name == standby)
        });
        assert!(ready, "fast-start failover to {standby} is not armed\n{}", self.logs());
    }

    /// Waits until `obs1` names `member` as the primary and it takes a write: the time from
    /// `since`.
    pub fn failed_over_to(&self, member: &str, since: Instant, limit: Duration) -> Duration {
        let mut last = String::new();
        let ok = common::poll_until(limit, || {
            if self.sentinel_master("obs1").and_then(|addr| self.member_at(addr)) != Some(member) {
                return false;
            }
            let mut connection = common::redis_connection(self.resp_addr(member));
            match redis::cmd("SET").arg("after the failover").arg("1").query::<()>(&mut connection)
            {
                Ok(()) => true,
                Err(error) => {
                    last = error.to_string();
                    false
                }
            }
        });
        assert!(ok, "no failover to {member} within {limit:?} ({last})\n{}", self.logs());
        since.elapsed()
    }

    /// Every member's name, in the configuration's order.
    pub fn member_names(&self) -> Vec<&'static str> {
        self.config.members.iter().map(|member| member.name).collect()
    }

    /// A connection to an observer's Sentinel front, authenticated if it needs a password.
    fn sentinel_connection(&self, addr: SocketAddr) -> redis::Connection {
        match self.config.sentinel_password {
            Some(password) => common::redis_connection_as(addr, password),
            None => common::redis_connection(addr),
        }
    }

    /// The member whose client port is `addr`.
    pub fn member_at(&self, addr: SocketAddr) -> Option<&'static str> {
        self.ports.iter().find(|(_, ports)| ports.resp == addr.port()).map(|(name, _)| *name)
    }

    fn members_text(&self) -> String {
        let mut text = String::new();
        for member in &self.config.members {
            let ports = self.ports[member.name];
            let host = self.host(member.name);
            text += &format!(
                "[[replication.members]]\nname = \"{}\"\nresp = \"{host}:{}\"\nadmin = \"{host}:{}\"\nredo = \"{host}:{}\"\ntransport = \"{}\"\naffirm = {}\nnet_timeout = \"{}\"\n",
                member.name,
                ports.resp,
                ports.admin,
                ports.redo,
                member.transport,
                member.affirm,
                self.config.net_timeout,
            );
            // The cluster's `reopen`, unless the member's own keys give one.
            if !member.extra.contains("reopen =") {
                text += &format!("reopen = \"{}\"\n", self.config.reopen);
            }
            text += member.extra;
        }
        text
    }

    fn config_text(&self, member: &MemberSpec) -> String {
        format!(
            "[redo]\nlog_file_size = \"{}\"\ngroups = 4\n{}\n[db]\ncheckpoint_interval = \"{}\"\n[replication]\nmember = \"{}\"\nrole = \"{}\"\n{}{}",
            self.config.log_file_size,
            self.config.redo_extra,
            self.config.checkpoint_interval,
            member.name,
            member.initial_role,
            self.shared_text(),
            self.tls_text(member.name)
        ) + &match (self.config.admin_token, self.config.auth_extra.as_str()) {
            (None, "") => String::new(),
            (token, extra) => format!(
                "[auth]\n{}{extra}\n",
                token.map(|token| format!("admin_token = \"{token}\"\n")).unwrap_or_default()
            ),
        }
    }

    /// Where the CA and every member's and observer's certificate are (with `tls`).
    pub fn certs_dir(&self) -> PathBuf {
        self.root.path().join("certs")
    }

    /// The `[tls]` section of `name`'s file (empty without `tls`).
    fn tls_text(&self, name: &str) -> String {
        if !self.config.tls {
            return String::new();
        }
        let dir = self.certs_dir();
        format!(
            "[tls]\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            dir.join("ca.pem").display(),
            dir.join(format!("{name}.pem")).display(),
            dir.join(format!("{name}-key.pem")).display()
        )
    }

    pub fn config_path(&self, name: &str) -> PathBuf {
        self.root.path().join(format!("{name}.toml"))
    }

    pub fn data_dir(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.root.path().join(format!("{name}.log"))
    }

    /// Starts (or restarts) a member on its data directory and its ports; `extra` are more
    /// arguments (`--from`, say).
    pub fn start_member_with(&mut self, name: &'static str, extra: &[&str]) {
        assert!(self.servers.get(name).is_none_or(Option::is_none), "{name} is running");
        let ports = self.ports[name];
        let (resp, admin) = (ports.resp.to_string(), ports.admin.to_string());
        let config = self.config_path(name);
        let data_dir = self.data_dir(name);
        let mut args = vec![
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--port",
            &resp,
            "--admin-port",
            &admin,
        ];
        if self.config.insecure {
            args.push("--insecure");
        }
        args.extend_from_slice(extra);
        let log = self.log_path(name);
        let server = self.in_site_of(name, || Server::start_args(&args, &log));
        self.servers.insert(name, Some(server));
    }

    pub fn start_member(&mut self, name: &'static str) {
        self.start_member_with(name, &[]);
    }

    pub fn server(&self, name: &str) -> &Server {
        self.servers
            .get(name)
            .and_then(Option::as_ref)
            .unwrap_or_else(|| panic!("{name} is not running"))
    }

    pub fn is_running(&self, name: &str) -> bool {
        self.servers.get(name).is_some_and(Option::is_some)
    }

    /// SIGKILL.
    pub fn kill(&mut self, name: &str) {
        let server = self
            .servers
            .get_mut(name)
            .and_then(Option::take)
            .unwrap_or_else(|| panic!("{name} is not running"));
        server.kill();
    }

    /// SIGTERM: the member must stop cleanly (exit status 0); how long it took.
    pub fn stop(&mut self, name: &str) -> Duration {
        let server = self
            .servers
            .get_mut(name)
            .and_then(Option::take)
            .unwrap_or_else(|| panic!("{name} is not running"));
        let started = std::time::Instant::now();
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.stop()));
        if stopped.is_err() {
            panic!("{name} did not stop cleanly on SIGTERM\n{}", self.logs());
        }
        started.elapsed()
    }

    /// A running member's admin address, for `--addr`.
    pub fn addr_of(&self, name: &str) -> String {
        format!("{}:{}", self.host(name), self.ports[name].admin)
    }

    /// Any running member's admin address.
    pub fn any_addr(&self) -> String {
        let name = self
            .servers
            .iter()
            .find(|(_, server)| server.is_some())
            .map(|(name, _)| *name)
            .expect("a running member");
        self.addr_of(name)
    }

    pub fn resp_addr(&self, name: &str) -> SocketAddr {
        format!("{}:{}", self.host(name), self.ports[name].resp).parse().unwrap()
    }

    /// Runs `redoguard ARGS --addr <a running member>` (unless ARGS give `--addr`):
    /// (succeeded, stdout, stderr).
    pub fn redoguard(&self, args: &[&str]) -> (bool, String, String) {
        let addr = self.any_addr();
        let mut command = std::process::Command::new(common::binary());
        command.args(args);
        if !args.contains(&"--addr") {
            command.args(["--addr", &addr]);
        }
        if let Some(token) = self.config.admin_token {
            command.args(["--token", token]);
        }
        common::run_bounded(&mut command, Duration::from_secs(180))
    }

    /// `redoguard ARGS`, which must succeed.
    pub fn must(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.redoguard(args);
        assert!(ok, "redoguard {args:?} failed:\n{stdout}{stderr}\n{}", self.logs());
        stdout
    }

    /// Waits until every other running member is shipped to (SYNCHRONIZED or STREAMING): by
    /// `primary`, or, under its redo routes, by the member that forwards to it (cascading).
    pub fn wait_shipping(&self, primary: &str, limit: Duration) {
        let running: Vec<&str> = self
            .servers
            .iter()
            .filter(|(_, server)| server.is_some())
            .map(|(name, _)| *name)
            .collect();
        let others: Vec<&str> = running.iter().copied().filter(|name| *name != primary).collect();
        let destinations = || -> Vec<transport::DestinationStatus> {
            running
                .iter()
                .flat_map(|name| self.server(name).status().replication.destinations)
                .collect()
        };
        let ok = common::poll_until(limit, || {
            let destinations = destinations();
            others.iter().all(|other| {
                destinations.iter().any(|destination| {
                    destination.name == *other
                        && matches!(
                            destination.phase,
                            transport::Phase::Synchronized | transport::Phase::Streaming
                        )
                })
            })
        });
        assert!(
            ok,
            "{others:?} are not all shipped to under {primary}: {:?}\n{}",
            destinations(),
            self.logs()
        );
    }

    /// The phase in which `primary` ships to `member`, if it is one of its destinations.
    pub fn phase_of(&self, primary: &str, member: &str) -> Option<transport::Phase> {
        self.server(primary)
            .status()
            .replication
            .destinations
            .iter()
            .find(|destination| destination.name == member)
            .map(|destination| destination.phase)
    }

    /// Waits until standby `name` has seen its primary go, as a DBA would before a failover:
    /// the standby refuses one while its primary is connected, and after a `kill -9` it reads
    /// each channel's end only when it next reads that channel.
    pub fn wait_primary_lost(&self, name: &str, limit: Duration) {
        let gone = common::poll_until(limit, || {
            self.server(name).status().replication.standby.is_some_and(|s| !s.connected)
        });
        assert!(gone, "{name} still says its primary is connected\n{}", self.logs());
    }

    /// Waits until member `name` has applied everything `primary` has made durable.
    pub fn wait_applied(&self, name: &str, primary: &str, limit: Duration) {
        let durable = self.server(primary).status().database.redo.durable_scn;
        let ok = common::poll_until(limit, || {
            self.server(name).status().database.applied_scn >= durable
        });
        assert!(ok, "{name} did not apply up to SCN {durable} within {limit:?}\n{}", self.logs());
    }

    /// Asserts that every key of `acknowledged` is on `name` (by GET), naming up to ten
    /// missing ones with the members' logs; `what` says whose acknowledgements they were.
    pub fn assert_all_present(&self, name: &str, acknowledged: &[String], what: &str) {
        let mut connection = common::redis_connection(self.resp_addr(name));
        let missing: Vec<&String> = acknowledged
            .iter()
            .filter(|key| {
                redis::cmd("GET")
                    .arg(*key)
                    .query::<Option<String>>(&mut connection)
                    .unwrap()
                    .is_none()
            })
            .collect();
        assert!(
            missing.is_empty(),
            "{} of {} {what} are missing on {name}: {:?}\n{}",
            missing.len(),
            acknowledged.len(),
            &missing[..missing.len().min(10)],
            self.logs()
        );
    }

    /// The ends of every member's log.
    pub fn logs(&self) -> String {
        self.config
            .members
            .iter()
            .map(|member| member.name)
            .chain(self.config.observers.iter().copied())
            .map(|name| format!("--- {name} log:\n{}\n", common::tail(&self.log_path(name), 30)))
            .collect()
    }
}

/// Every key and value of the database at `addr` (SCAN), sorted.
/// Four writers on `address`, each SETting its own keys until the server turns it away (a
/// closed gate, a fence) or stops answering, a minute at most: the keys each acknowledged.
pub fn writers_until_turned_away(address: SocketAddr) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    (0..4)
        .map(|writer| {
            std::thread::spawn(move || {
                let mut connection = common::redis_connection(address);
                let mut acknowledged = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(60);
                for index in 0.. {
                    let key = format!("w{writer}:{index}");
                    match redis::cmd("SET").arg(&key).arg(index).query::<()>(&mut connection) {
                        Ok(()) => acknowledged.push(key),
                        Err(_) => break,
                    }
                    if Instant::now() > deadline {
                        break;
                    }
                }
                acknowledged
            })
        })
        .collect()
}

pub fn all_data(connection: &mut redis::Connection) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut cursor: u64 = 0;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) =
            redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(1000).query(connection).unwrap();
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    let mut pairs = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(500) {
        let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(chunk).query(connection).unwrap();
        for (key, value) in chunk.iter().zip(values) {
            if let Some(value) = value {
                pairs.push((key.clone(), value));
            }
        }
    }
    pairs
}

/// The archived logs of a member, by file name, with their bytes.
pub fn archives(dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir.join("archive"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(".arc"))
                .map(|entry| {
                    (
                        entry.file_name().to_string_lossy().into_owned(),
                        std::fs::read(entry.path()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The call a broker makes to complete `prepared`, prepared by `from` in `incarnation`.
pub fn complete_path(
    prepared: &admin::roles::SwitchoverPrepared,
    from: &str,
    incarnation: u32,
) -> String {
    format!(
        "/roles/switchover/complete?from={from}&id={}&incarnation={incarnation}&end_seq={}&end_offset={}&last_scn={}",
        prepared.id, prepared.end.seq.0, prepared.end.offset, prepared.last_scn.0
    )
}
