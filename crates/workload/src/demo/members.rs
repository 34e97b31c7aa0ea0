//! The members of the demo's configurations (the configuration form): their directories,
//! ports and `[[replication.members]]` entries, and the waits on their states that the
//! observed demo and the far sync demo share.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::free_port;
use crate::process::{ServerProcess, status_at};

pub(super) struct Member {
    pub(super) name: &'static str,
    pub(super) dir: PathBuf,
    pub(super) resp: u16,
    pub(super) admin: u16,
    pub(super) redo: u16,
}

impl Member {
    pub(super) fn new(name: &'static str, root: &Path) -> anyhow::Result<Member> {
        Ok(Member {
            name,
            dir: root.join(name),
            resp: free_port()?,
            admin: free_port()?,
            redo: free_port()?,
        })
    }

    pub(super) fn args(&self) -> Vec<String> {
        vec![
            "--config".into(),
            self.dir.join("demo.toml").display().to_string(),
            "--data-dir".into(),
            self.dir.display().to_string(),
            "--port".into(),
            self.resp.to_string(),
            "--admin-port".into(),
            self.admin.to_string(),
        ]
    }

    pub(super) fn start(&self, binary: &Path) -> anyhow::Result<ServerProcess> {
        let args = self.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ServerProcess::start(binary, &args, &self.dir.join("server.log"))
            .with_context(|| format!("starting {}", self.name))
    }

    /// Its `[[replication.members]]` entry: how a primary ships to it, and `extra` keys
    /// (`kind`, `routes`).
    pub(super) fn entry(&self, transport: &str, affirm: bool, extra: &str) -> String {
        format!(
            "\n[[replication.members]]\nname = \"{}\"\nresp = \"127.0.0.1:{}\"\nadmin = \"127.0.0.1:{}\"\nredo = \"127.0.0.1:{}\"\ntransport = \"{transport}\"\naffirm = {affirm}\nnet_timeout = \"5s\"\nreopen = \"500ms\"\n{extra}",
            self.name, self.resp, self.admin, self.redo
        )
    }
}

/// Polls `condition` every 50 ms for at most `limit`.
pub(super) async fn until(
    limit: Duration,
    what: &str,
    mut condition: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while !condition() {
        anyhow::ensure!(Instant::now() < deadline, "{what} did not happen within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Whether `member` (admin address) is a standby of `primary`, connected, not fenced.
pub(super) fn follows(member: SocketAddr, primary: &str) -> bool {
    status_at(member).ok().is_some_and(|status| {
        status.roles.as_ref().is_some_and(|roles| roles.role == "standby" && roles.fenced.is_none())
            && status.replication.standby.as_ref().is_some_and(|standby| {
                standby.connected && standby.primary_member.as_deref() == Some(primary)
            })
    })
}

/// How many transactions a reinstate set aside in `dir` (`diverged/*/divergent.redo`).
pub(super) fn divergent_transactions(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir.join("diverged")) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| db::divergent::records(&entry.path()).ok())
        .sum()
}
