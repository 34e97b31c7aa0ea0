//! The peer: a durable Redis (`appendfsync always`) that the benchmarks start and measure
//! beside redoguard, installed from Debian's packages if missing.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// Whether `program` is on the `PATH`.
pub(crate) fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Installs redis-server and redis-benchmark from Debian's packages if they are missing.
pub(crate) fn ensure_redis(progress: &mut dyn FnMut(&str)) -> Result<(), String> {
    if have("redis-server") && have("redis-benchmark") {
        return Ok(());
    }
    progress("installing redis-server and redis-tools from Debian's packages");
    let install = "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools";
    let status = Command::new("sh")
        .arg("-c")
        .arg(install)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() && have("redis-server") && have("redis-benchmark") => Ok(()),
        Ok(status) => Err(format!(
            "`{install}` failed ({status}); is this Debian, as root, with the package registry reachable?"
        )),
        Err(error) => Err(format!("cannot run `{install}`: {error}")),
    }
}

/// A redis-server this process started; killed when dropped.
pub(crate) struct RedisServer {
    pub(crate) child: Child,
    pub(crate) port: u16,
}

impl RedisServer {
    /// A durable Redis (`appendfsync always`) on 127.0.0.1, without automatic AOF rewrites.
    pub(crate) fn start(dir: &Path) -> anyhow::Result<RedisServer> {
        RedisServer::start_with(
            Command::new("redis-server"),
            || Command::new("redis-cli"),
            &["127.0.0.1"],
            crate::ports::free_port()?,
            dir,
            &["--auto-aof-rewrite-percentage", "0"],
        )
    }

    /// A durable Redis (`appendfsync always`, no RDB snapshots) with its files in `dir`,
    /// listening on `bind` addresses at `port`, plus `extra_args` (`--replicaof …`, say).
    /// `server` is the command that runs redis-server where it should run (in a network
    /// namespace, say) and `cli` makes a redis-cli there, for the readiness PING on
    /// 127.0.0.1. Returns once it answers PING (20 s at most).
    pub(crate) fn start_with(
        mut server: Command,
        cli: impl Fn() -> Command,
        bind: &[&str],
        port: u16,
        dir: &Path,
        extra_args: &[&str],
    ) -> anyhow::Result<RedisServer> {
        std::fs::create_dir_all(dir)?;
        let child = server
            .args(["--port", &port.to_string(), "--bind"])
            .args(bind)
            .args(["--dir", &dir.display().to_string()])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
            ])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting redis-server")?;
        // From here on, an early return kills it.
        let mut redis = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ping = cli().args(["-p", &port.to_string(), "ping"]).output();
            if ping.is_ok_and(|output| String::from_utf8_lossy(&output.stdout).contains("PONG")) {
                break;
            }
            if let Some(status) = redis.child.try_wait()? {
                anyhow::bail!("redis-server exited at start with {status}");
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "redis-server did not answer PING within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(redis)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
