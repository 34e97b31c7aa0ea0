//! redoguard's trials: a pair `east` (primary) and `west` (SYNC AFFIRM standby) under Maximum
//! Availability, with fast-start failover and one observer `obs1` (but for the manual
//! failover), from generated member-form configurations.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::writers::{self, Discovery, Writers};
use super::{
    Bench, Case, FAILOVER_LIMIT, Place, SITE_PRIMARY, SITE_STANDBY, SITE_WATCH, Sample, Spawned,
    System, measure_event, wait_until,
};
use crate::ports::free_port;
use crate::process::{ServerProcess, status_at};

/// The configuration's name: the Sentinel master name clients ask for.
const NAME: &str = "bench";
const OBSERVER: &str = "obs1";
const EAST: usize = 0;
const WEST: usize = 1;
const MEMBERS: [&str; 2] = ["east", "west"];
const SITES: [usize; 2] = [SITE_PRIMARY, SITE_STANDBY];
/// How long servers may take to ship, and fast-start failover to be armed.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// One trial of `case`.
pub(super) fn trial(
    bench: &Bench<'_>,
    case: Case,
    place: Place<'_>,
    number: u32,
) -> anyhow::Result<Sample> {
    let fast_start = case != Case::Failover;
    let mut pair = Pair::start(bench, case, place, number, fast_start)?;
    let mut sample = pair.measure(case, number).map_err(|error| error.context(pair.logs()))?;
    sample.note = pair.observer_events();
    Ok(sample)
}

#[derive(Debug, Clone, Copy)]
struct Ports {
    resp: u16,
    admin: u16,
    redo: u16,
}

/// The two members and the observer of one trial.
struct Pair<'a> {
    place: Place<'a>,
    threshold: Duration,
    ports: [Ports; 2],
    sentinel: Option<SocketAddr>,
    servers: [Option<ServerProcess>; 2],
    observer: Option<Spawned>,
    /// Last, so that it is removed after every process has stopped.
    dir: tempfile::TempDir,
}

impl<'a> Pair<'a> {
    /// Writes the files, starts west, then east, waits until east ships to west
    /// synchronized, then (with `fast_start`) starts the observer and waits until fast-start
    /// failover is armed.
    fn start(
        bench: &Bench<'_>,
        case: Case,
        place: Place<'a>,
        number: u32,
        fast_start: bool,
    ) -> anyhow::Result<Pair<'a>> {
        let dir = bench.trial_dir(System::Redoguard, case, number)?;
        let ports = [(); 2].map(|_| Ports { resp: 0, admin: 0, redo: 0 });
        let mut pair = Pair {
            place,
            threshold: bench.config.threshold,
            ports,
            sentinel: None,
            servers: [None, None],
            observer: None,
            dir,
        };
        for ports in &mut pair.ports {
            *ports = Ports { resp: free_port()?, admin: free_port()?, redo: free_port()? };
        }
        if fast_start {
            pair.sentinel = Some(SocketAddr::from((place.host(SITE_WATCH), free_port()?)));
        }
        for member in [WEST, EAST] {
            let path = pair.dir.path().join(format!("{}.toml", MEMBERS[member]));
            std::fs::write(&path, pair.member_config(member))?;
            pair.start_member(bench, member)?;
        }
        wait_until("east shipping to west, synchronized", READY_LIMIT, || {
            let status = pair.status(EAST)?;
            Ok(status.replication.destinations.iter().any(|destination| {
                destination.name == "west" && destination.phase == transport::Phase::Synchronized
            }))
        })?;
        if fast_start {
            let path = pair.dir.path().join("obs1.toml");
            std::fs::write(&path, pair.observer_config())?;
            let mut command = place.command(SITE_WATCH, &bench.config.binary);
            command.args(["observer", "--config"]).arg(&path);
            pair.observer = Some(Spawned::start(
                "the observer",
                command,
                &pair.dir.path().join("obs1.log"),
                Some("ready"),
            )?);
            wait_until("fast-start failover armed", READY_LIMIT, || pair.armed())?;
        }
        Ok(pair)
    }

    fn start_member(&mut self, bench: &Bench<'_>, member: usize) -> anyhow::Result<()> {
        let name = MEMBERS[member];
        let dir = self.dir.path();
        let (config, data) = (dir.join(format!("{name}.toml")), dir.join(name));
        let (resp, admin) =
            (self.ports[member].resp.to_string(), self.ports[member].admin.to_string());
        let server = ServerProcess::start_command(
            self.place.command(SITES[member], &bench.config.binary),
            &[
                "--config",
                &config.display().to_string(),
                "--data-dir",
                &data.display().to_string(),
                "--port",
                &resp,
                "--admin-port",
                &admin,
            ],
            &dir.join(format!("{name}.log")),
        )
        .with_context(|| format!("starting {name}"))?;
        self.servers[member] = Some(server);
        Ok(())
    }

    fn resp(&self, member: usize) -> SocketAddr {
        SocketAddr::from((self.place.host(SITES[member]), self.ports[member].resp))
    }

    fn admin(&self, member: usize) -> SocketAddr {
        SocketAddr::from((self.place.host(SITES[member]), self.ports[member].admin))
    }

    fn status(&self, member: usize) -> anyhow::Result<admin::ServerStatus> {
        status_at(self.admin(member))
    }

    /// Fast-start failover is armed: the observer names east, east holds its lease and is not
    /// isolated, west is caught up and names the observer, and the observer would fail over
    /// to west.
    fn armed(&self) -> anyhow::Result<bool> {
        let sentinel = self.sentinel.context("no observer")?;
        let named = writers::ask(
            sentinel,
            &[b"SENTINEL", b"get-master-addr-by-name", NAME.as_bytes()],
            Duration::from_secs(2),
        )?;
        if crate::sentinel::master_addr(&named) != Some(self.resp(EAST)) {
            return Ok(false);
        }
        let east = self.status(EAST)?;
        let east_ready = east.roles.and_then(|roles| roles.fast_start).is_some_and(|fast_start| {
            fast_start.observer.as_deref() == Some(OBSERVER) && fast_start.isolated == Some(false)
        });
        let west = self.status(WEST)?;
        let west_ready = west.replication.standby.is_some_and(|standby| {
            standby.caught_up && standby.active_observer.as_deref() == Some(OBSERVER)
        });
        Ok(east_ready
            && west_ready
            && writers::failover_ready(sentinel)?.iter().any(|name| name == MEMBERS[WEST]))
    }

    /// SIGKILL to a member.
    fn kill(&mut self, member: usize) -> anyhow::Result<()> {
        match self.servers[member].take() {
            Some(mut server) => server.kill(),
            None => Ok(()),
        }
    }

    /// The writers, the event, the measures.
    fn measure(&mut self, case: Case, number: u32) -> anyhow::Result<Sample> {
        let discovery = match self.sentinel {
            Some(sentinel) => {
                Discovery::Sentinel { sentinels: vec![sentinel], master: NAME.into() }
            }
            None => Discovery::Endpoints(vec![self.resp(EAST), self.resp(WEST)]),
        };
        let writers = Writers::start(
            discovery,
            &format!("{}:{number}", case.name()),
            self.place.clients_namespace(),
        )?;
        let (west, place) = (self.resp(WEST), self.place);
        // The observer decides a primary is lost after 1.2 × threshold of silence.
        let limit = self.threshold.mul_f64(1.2) + FAILOVER_LIMIT;
        match case {
            Case::Kill => measure_event(writers, west, limit, || {
                let started = Instant::now();
                self.kill(EAST)?;
                Ok((started, (), None))
            }),
            Case::Cut => measure_event(writers, west, limit, || {
                let started = Instant::now();
                let cut = place.cut(SITE_PRIMARY, &[SITE_STANDBY, SITE_WATCH]);
                Ok((started, cut, None))
            }),
            Case::Switchover => {
                let east = self.admin(EAST).to_string();
                measure_event(writers, west, limit, || {
                    let started = Instant::now();
                    broker::transitions::switchover(&east, "west")
                        .context("redoguard switchover --to west")?;
                    Ok((started, (), Some(started.elapsed().as_secs_f64())))
                })
            }
            Case::Failover => {
                let west_admin = self.admin(WEST).to_string();
                measure_event(writers, west, limit, || {
                    self.kill(EAST)?;
                    // The DBA sees the primary gone, then fails over.
                    wait_until("west seeing its primary gone", Duration::from_secs(30), || {
                        Ok(self.status(WEST)?.replication.standby.is_some_and(|s| !s.connected))
                    })?;
                    let started = Instant::now();
                    broker::transitions::failover(&west_admin, "west", false, false)
                        .context("redoguard failover --to west")?;
                    Ok((started, (), Some(started.elapsed().as_secs_f64())))
                })
            }
        }
    }

    /// The observer's own account of the failover (its log lines that say what it did).
    fn observer_events(&self) -> Option<String> {
        let log = std::fs::read_to_string(self.dir.path().join("obs1.log")).ok()?;
        let events: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("fast-start failover"))
            .map(|line| line.find("event=").map_or(line, |at| &line[at..]))
            .collect();
        (!events.is_empty()).then(|| format!("observer: {}", events.join(" | ")))
    }

    /// The end of every process's log.
    fn logs(&self) -> String {
        ["east", "west", "obs1"]
            .iter()
            .map(|name| self.dir.path().join(format!("{name}.log")))
            .filter(|path| path.exists())
            .map(|path| {
                format!(
                    "\n--- {}:\n{}",
                    path.file_name().unwrap_or_default().to_string_lossy(),
                    super::harness::log_tail(&path, 15)
                )
            })
            .collect()
    }

    /// What every member's file and the observer's share.
    fn shared_config(&self) -> String {
        let mut text = format!("name = \"{NAME}\"\nprotection_mode = \"maximum_availability\"\n");
        if let Some(sentinel) = self.sentinel {
            text += &format!(
                "[replication.fast_start_failover]\nenabled = true\nthreshold = \"{}ms\"\n[[replication.observers]]\nname = \"{OBSERVER}\"\nsentinel = \"{sentinel}\"\n",
                self.threshold.as_millis()
            );
        }
        for (member, name) in MEMBERS.iter().enumerate() {
            let (host, ports) = (self.place.host(SITES[member]), self.ports[member]);
            text += &format!(
                "[[replication.members]]\nname = \"{name}\"\nresp = \"{host}:{}\"\nadmin = \"{host}:{}\"\nredo = \"{host}:{}\"\ntransport = \"sync\"\naffirm = true\n",
                ports.resp, ports.admin, ports.redo
            );
        }
        text
    }

    /// A member's file: small logs (a trial writes a few MB), everything else the defaults.
    fn member_config(&self, member: usize) -> String {
        let role = if member == EAST { "primary" } else { "standby" };
        format!(
            "# Written by `redoguard bench failover`.\n{}[redo]\nlog_file_size = \"16MiB\"\ngroups = 4\n[replication]\nmember = \"{}\"\nrole = \"{role}\"\n{}",
            crate::bench_batch::INSECURE,
            MEMBERS[member],
            self.shared_config()
        )
    }

    fn observer_config(&self) -> String {
        format!(
            "# Written by `redoguard bench failover`.\n# Protected mode off, as for the members (Redis Sentinel beside it runs open too).\n[observer]\nname = \"{OBSERVER}\"\ninsecure = true\ndata_dir = \"{}\"\n[replication]\n{}",
            self.dir.path().join(OBSERVER).display(),
            self.shared_config()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_parse_as_the_server_and_observer_read_them() {
        let dir = tempfile::tempdir().unwrap();
        for fast_start in [true, false] {
            let pair = Pair {
                place: Place::Loopback,
                threshold: Duration::from_secs(2),
                ports: [
                    Ports { resp: 7000, admin: 7001, redo: 7002 },
                    Ports { resp: 7003, admin: 7004, redo: 7005 },
                ],
                sentinel: fast_start.then(|| "127.0.0.1:7006".parse().unwrap()),
                servers: [None, None],
                observer: None,
                dir: tempfile::tempdir_in(dir.path()).unwrap(),
            };
            for member in [EAST, WEST] {
                let config = server::ServerConfig::parse(&pair.member_config(member)).unwrap();
                config.validate().unwrap();
                assert_eq!(config.replication.fast_start_failover.enabled, fast_start);
            }
            if fast_start {
                let path = dir.path().join("obs1.toml");
                std::fs::write(&path, pair.observer_config()).unwrap();
                let config = observer::ObserverConfig::load(&path).unwrap();
                assert_eq!(
                    config.replication.fast_start_failover.threshold,
                    Duration::from_secs(2)
                );
            }
        }
    }
}
