//! `redoguard bench resp`: redoguard against Redis at equal durability, driven by
//! redis-benchmark, with the raw fdatasync of the same file system measured in the same run.
//!
//! Redis runs with `appendonly yes` and `appendfsync always` (an fsync of the append-only file
//! before replies, once per event-loop iteration: Redis's own group commit); redoguard with its
//! defaults (every write command durable before its reply). Both keep their files in the same
//! directory. redis-server and redis-benchmark come from Debian's packages; the benchmark
//! installs them if missing, and if that fails it says so and runs redoguard alone.
//!
//! Both servers run from the start (an idle one costs nothing measurable). Every test at
//! `-c 50` (the durable SET, the other types' writes, and the GET: each a target) runs in
//! alternating rounds (redoguard, Redis, Redis, redoguard, …), so that a virtual disk whose
//! fdatasync drifts over the run (it moves by 10× here within minutes) weighs on both alike;
//! the ops/s of each is all requests over all the time of its runs. (One GET run per server
//! cannot judge its target: the same binary, the same fill, gave 9.7 and 11.9 µs of CPU per
//! GET from one run to the next.) The tests at `-c 1` run once per server. Each run also reads
//! the server process's CPU time from /proc, for the CPU per request. Redis's automatic AOF
//! rewrite is turned off: a fork and rewrite of the append-only file in the middle of a run
//! would slow Redis by chance of timing, not by design.
//!
//! Where the processes run ([`crate::placement`]): redis-benchmark runs on a CPU of its own and
//! both servers on the others, as when the client is on a host of its own; the durable SET at
//! `-c 50` also runs with all of them free to run anywhere (`client_cpu` "shared"), as on a
//! machine shared with its clients, the two placements alternating within its rounds. On a
//! single CPU everything is shared.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::placement::Cpus;
use crate::process::ServerProcess;

mod peer;
pub mod per_second;
mod render;

pub(crate) use peer::{RedisServer, ensure_redis, have};
pub use per_second::Second;
pub(crate) use render::direct_note;
pub use render::render;

/// Rounds of the durable SET at `-c 50` at least (issue 34: its slowest round is judged, and
/// its seconds).
const SET_ROUNDS: u32 = 6;

#[derive(Debug, Clone)]
pub struct BenchRespConfig {
    /// The `redoguard` binary.
    pub binary: PathBuf,
    /// File system to run both servers on.
    pub dir: PathBuf,
    /// Requests per redis-benchmark run.
    pub requests: u64,
    /// Runs of each durable write at `-c 50` (SET and the types) per server, alternating
    /// between the servers.
    pub rounds: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RespResult {
    pub server: String,
    pub test: String,
    pub clients: u32,
    pub requests: u64,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub fdatasync_p50_us: f64,
    /// Each run's ops/s, in the order run (several for the alternated test).
    #[serde(default)]
    pub runs_ops_per_s: Vec<f64>,
    /// redoguard's checkpoints completed during each run, in the same order (empty for Redis,
    /// and in older reports): a checkpoint writes the changed keys into the data files, and
    /// the runs it overlaps are the slow ones.
    #[serde(default)]
    pub runs_checkpoints: Vec<u64>,
    /// Each run's rate second by second (see `per_second`), in the same order; empty in
    /// older reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs_per_second: Vec<Vec<Second>>,
    /// The server process's CPU time (user + system) per request, µs.
    #[serde(default)]
    pub cpu_us_per_op: Option<f64>,
    /// The same by thread of the server (`/proc/PID/task/*/stat`, by thread name as the
    /// kernel keeps it, 15 bytes): where each server's time per request goes. Absent from
    /// older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_op_by_thread: Option<BTreeMap<String, f64>>,
    /// Where redis-benchmark ran: "own" (a CPU of its own, the servers on the others) or
    /// "shared" (anywhere, as the servers). Reports from before this field: "shared".
    #[serde(default = "shared")]
    pub client_cpu: String,
}

fn shared() -> String {
    ClientCpu::Shared.name().to_string()
}

#[cfg(test)]
impl RespResult {
    pub(crate) fn empty(server: &str) -> RespResult {
        RespResult {
            server: server.into(),
            test: "SET".into(),
            clients: 50,
            requests: 0,
            ops_per_s: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            fdatasync_p50_us: 0.0,
            runs_ops_per_s: Vec::new(),
            runs_checkpoints: Vec::new(),
            runs_per_second: Vec::new(),
            cpu_us_per_op: None,
            cpu_us_per_op_by_thread: None,
            client_cpu: shared(),
        }
    }
}

/// Where redis-benchmark runs relative to the servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientCpu {
    /// On a CPU of its own; the servers on the others.
    Own,
    /// Anywhere, as the servers.
    Shared,
}

impl ClientCpu {
    /// Where the targets are judged: with the client on a CPU of its own (as on a host of its
    /// own) when the run could place it so.
    fn judged(placed_apart: bool) -> ClientCpu {
        if placed_apart { ClientCpu::Own } else { ClientCpu::Shared }
    }

    fn name(self) -> &'static str {
        match self {
            ClientCpu::Own => "own",
            ClientCpu::Shared => "shared",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRespReport {
    pub dir: String,
    pub fdatasync_p50_us: f64,
    /// Raw p50 of a 4 KiB O_DIRECT|O_DSYNC write: how redoguard's log writes by default
    /// (`io_mode = "auto"`) where the file system takes O_DIRECT; absent where it does not,
    /// and in older reports.
    #[serde(default)]
    pub direct_p50_us: Option<f64>,
    /// The CPUs redis-benchmark had to itself, and the servers', when a test gave it its own
    /// (as taskset lists them: "1", "0"); absent on one CPU and in older reports.
    #[serde(default)]
    pub client_cpus: Option<String>,
    #[serde(default)]
    pub server_cpus: Option<String>,
    pub results: Vec<RespResult>,
    /// Why Redis was not measured, if it was not.
    pub redis_skipped: Option<String>,
    pub targets: Vec<crate::bench_commit::Target>,
}

/// What a sample of a server says: its commands processed so far, and its checkpoints.
type Sample<'a> = &'a mut dyn FnMut() -> anyhow::Result<(u64, u64)>;

/// Runs redis-benchmark for one test and client count (on `cpus`, if given); parses its CSV
/// line. With `sample`, the server is sampled once a second meanwhile: its seconds.
fn benchmark(
    port: u16,
    test: &str,
    clients: u32,
    requests: u64,
    cpus: Option<&Cpus>,
    sample: Option<Sample>,
) -> anyhow::Result<((f64, f64, f64), Vec<Second>)> {
    let mut command = Command::new("redis-benchmark");
    command.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-c", &clients.to_string()]);
    command.args(["-n", &requests.to_string(), "-r", "1000000", "-d", "100", "--csv"]);
    // A test of redis-benchmark's own (`-t hset`), or a command of ours spelled out.
    let spelled = custom_command(test);
    match &spelled {
        Some(words) => command.args(words),
        None => command.args(["-t", test]),
    };
    if let Some(cpus) = cpus {
        cpus.apply_to_command(&mut command);
    }
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().context("running redis-benchmark")?;
    let mut seconds = Vec::new();
    if let Some(sample) = sample {
        let mut last = (Instant::now(), sample()?);
        while child.try_wait()?.is_none() {
            std::thread::sleep(
                Duration::from_secs(1)
                    .saturating_sub(last.0.elapsed())
                    .min(Duration::from_millis(50)),
            );
            if last.0.elapsed() < Duration::from_secs(1) {
                continue;
            }
            let now = (Instant::now(), sample()?);
            let elapsed = now.0.duration_since(last.0).as_secs_f64();
            seconds.push(Second {
                // The sampler's own INFO counts as a command: left out.
                ops_per_s: now.1.0.saturating_sub(last.1.0).saturating_sub(1) as f64 / elapsed,
                checkpoints: now.1.1.saturating_sub(last.1.1),
            });
            last = now;
        }
    }
    let output = child.wait_with_output().context("running redis-benchmark")?;
    anyhow::ensure!(
        output.status.success(),
        "redis-benchmark failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
    let text = String::from_utf8_lossy(&output.stdout);
    let name = spelled.map_or(test.to_string(), |words| words.join(" "));
    let line = text
        .lines()
        .find(|line| {
            line.to_ascii_uppercase().starts_with(&format!("\"{}", name.to_ascii_uppercase()))
        })
        .with_context(|| format!("no {test} line in redis-benchmark's output: {text}"))?;
    let fields: Vec<f64> = line
        .split(',')
        .skip(1)
        .map(|field| field.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    anyhow::ensure!(fields.len() >= 6, "unexpected redis-benchmark line: {line}");
    Ok(((fields[0], fields[3] * 1000.0, fields[5] * 1000.0), seconds))
}

/// The commands redis-benchmark has no test of its own for, spelled out: `set ex` is a SET
/// with a time to live (each key a new one, as `-t set` does with `-r`).
fn custom_command(test: &str) -> Option<Vec<&'static str>> {
    match test {
        "set ex" => {
            Some(vec!["SET", "key:__rand_int__", "value-of-a-key-with-a-ttl", "EX", "3600"])
        }
        _ => None,
    }
}

/// One redis-benchmark run against one server.
#[derive(Debug, Clone)]
struct Run {
    ops_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    /// The server's CPU time during the run.
    cpu_seconds: f64,
    /// Checkpoints the server completed during the run (redoguard only).
    checkpoints: Option<u64>,
    /// The server's CPU time during the run by thread name.
    threads: BTreeMap<String, f64>,
    /// The run second by second (the durable SET at `-c 50` only).
    seconds: Vec<Second>,
}

/// A server's runs of one test as one result: ops/s is all requests over all the runs' time;
/// p50 and p99 are the runs' medians.
fn combine(
    server: &str,
    (test, clients, client_cpu): (&str, u32, ClientCpu),
    requests: u64,
    runs: &[Run],
    fdatasync_p50_us: f64,
) -> RespResult {
    let median = |value: &dyn Fn(&Run) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(value).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let seconds: f64 = runs.iter().map(|run| requests as f64 / run.ops_per_s).sum();
    let total = requests as f64 * runs.len() as f64;
    let cpu: f64 = runs.iter().map(|run| run.cpu_seconds).sum();
    RespResult {
        server: server.to_string(),
        test: test.to_uppercase(),
        clients,
        requests: requests * runs.len() as u64,
        ops_per_s: total / seconds,
        p50_us: median(&|run| run.p50_us),
        p99_us: median(&|run| run.p99_us),
        fdatasync_p50_us,
        runs_ops_per_s: runs.iter().map(|run| run.ops_per_s).collect(),
        runs_checkpoints: runs.iter().filter_map(|run| run.checkpoints).collect(),
        runs_per_second: if runs.iter().any(|run| !run.seconds.is_empty()) {
            runs.iter().map(|run| run.seconds.clone()).collect()
        } else {
            Vec::new()
        },
        cpu_us_per_op: (total > 0.0).then(|| cpu / total * 1e6),
        cpu_us_per_op_by_thread: crate::process::threads_summed(
            runs.iter().map(|run| &run.threads),
            total / 1e6,
        ),
        client_cpu: client_cpu.name().to_string(),
    }
}

pub fn run(
    config: &BenchRespConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<BenchRespReport> {
    std::fs::create_dir_all(&config.dir)?;
    let work = tempfile::Builder::new().prefix("redoguard-bench-resp-").tempdir_in(&config.dir)?;
    let redis_skipped = ensure_redis(&mut progress).err();
    anyhow::ensure!(
        have("redis-benchmark"),
        "redis-benchmark is needed to drive the servers and could not be installed: {}",
        redis_skipped.clone().unwrap_or_default()
    );
    let raw = |progress: &mut dyn FnMut(&str),
               method: tools::iotest::SyncMethod|
     -> Result<f64, tools::iotest::IoTestError> {
        progress(&format!("raw {method:?}, 4 KiB").to_lowercase());
        let mut iotest = tools::iotest::IoTestConfig::new(work.path(), 4096, method);
        iotest.duration = Duration::from_secs(2);
        Ok(tools::iotest::run(&iotest)?.lat_p50_us)
    };
    let fdatasync_p50_us = raw(&mut progress, tools::iotest::SyncMethod::Fdatasync)?;
    // What the log's default writes cost; none where the file system refuses O_DIRECT.
    let direct_p50_us = raw(&mut progress, tools::iotest::SyncMethod::Direct).ok();
    // Both servers up at once: (name, port, pid).
    let dir = work.path().join("redoguard");
    std::fs::create_dir_all(&dir)?;
    let data_dir = dir.display().to_string();
    let redoguard = ServerProcess::start(
        &config.binary,
        &["--data-dir", &data_dir],
        &work.path().join("redoguard.log"),
    )?;
    let redis = if redis_skipped.is_none() {
        Some(RedisServer::start(&work.path().join("redis"))?)
    } else {
        None
    };
    let mut servers = vec![(
        "redoguard",
        redoguard.resp_addr.port(),
        redoguard.pid().context("the redoguard server has no process")?,
    )];
    if let Some(redis) = &redis {
        servers.push(("redis", redis.port, redis.child.id()));
    }
    // redoguard's checkpoints so far (Redis has none to count).
    let checkpoints = |server: &str| -> anyhow::Result<Option<u64>> {
        if server != "redoguard" {
            return Ok(None);
        }
        Ok(Some(redoguard.status()?.metrics.stat("checkpoints completed")))
    };
    let allowed = Cpus::allowed().context("reading this process's CPUs")?;
    let split = allowed.split();
    // Each test as (test, clients, where the client runs); the durable SET at -c 50 both ways.
    // The writes of the other types (issue 32), each at -c 50: one element added to a
    // collection (of up to a million: `-r`), and a SET with a time to live.
    let types = ["hset", "lpush", "sadd", "zadd", "set ex"];
    let tests: Vec<(&str, u32, Vec<ClientCpu>)> = match split {
        Some(_) => [
            ("set", 1, vec![ClientCpu::Own]),
            ("set", 50, vec![ClientCpu::Own, ClientCpu::Shared]),
            ("get", 1, vec![ClientCpu::Own]),
            ("get", 50, vec![ClientCpu::Own]),
        ]
        .into_iter()
        .chain(types.map(|test| (test, 50, vec![ClientCpu::Own])))
        .collect(),
        None => [("set", 1), ("set", 50), ("get", 1), ("get", 50)]
            .into_iter()
            .chain(types.map(|test| (test, 50)))
            .map(|(test, clients)| (test, clients, vec![ClientCpu::Shared]))
            .collect(),
    };
    // Puts the servers where `client_cpu` wants them (if they are not there yet); returns the
    // client's CPUs, if it has its own.
    let mut placed = None;
    let mut place = |client_cpu: ClientCpu| -> anyhow::Result<Option<&Cpus>> {
        let (client_cpus, server_cpus) = match (client_cpu, &split) {
            (ClientCpu::Own, Some((client, servers))) => (Some(client), servers),
            _ => (None, &allowed),
        };
        if placed != Some(client_cpu) {
            for &(server, _, pid) in &servers {
                server_cpus
                    .apply_to_process(pid)
                    .with_context(|| format!("placing {server} on CPUs {}", server_cpus.list()))?;
            }
            placed = Some(client_cpu);
        }
        Ok(client_cpus)
    };
    let mut results = Vec::new();
    for (test, clients, placements) in tests {
        // The target alternates: the servers (A B B A …) and, within a round, the placements
        // (own, shared, then shared, own …), so that a drift over the run (the disk's, or the
        // servers' growing data) weighs on each alike. The rest runs once per server.
        // (Every test at -c 50: one run of a type's write spreads as the SET's single runs
        // do, by half, and a GET's by a fifth, so a ratio of one run each says little.)
        let alternated = clients == 50;
        let rounds = match (alternated, test) {
            (true, "set") => config.rounds.max(SET_ROUNDS),
            (true, _) => config.rounds.max(1),
            (false, _) => 1,
        };
        let sampled = alternated && test == "set";
        let server_raw = raw(&mut progress, tools::iotest::SyncMethod::Fdatasync)?;
        // Runs by placement, then by server.
        let mut runs: Vec<Vec<Vec<Run>>> = vec![vec![Vec::new(); servers.len()]; placements.len()];
        for round in 0..rounds {
            let mut order: Vec<usize> = (0..servers.len()).collect();
            let mut placings: Vec<usize> = (0..placements.len()).collect();
            if round % 2 == 1 {
                order.reverse();
                placings.reverse();
            }
            for placing in placings {
                let client_cpu = placements[placing];
                let client_cpus = place(client_cpu)?;
                for &index in &order {
                    let (server, port, pid) = servers[index];
                    progress(&format!(
                        "{server}: {} -c {clients} -n {}, client CPU {}{}",
                        test.to_uppercase(),
                        config.requests,
                        client_cpu.name(),
                        if alternated {
                            format!(" (round {} of {rounds})", round + 1)
                        } else {
                            String::new()
                        }
                    ));
                    let checkpoints_before = checkpoints(server)?;
                    let cpu_before = crate::process::cpu_seconds(pid)?;
                    let threads_before = crate::process::thread_cpu_seconds(pid)?;
                    let mut counter =
                        if sampled { Some(per_second::Counter::connect(port)?) } else { None };
                    let mut sample = || -> anyhow::Result<(u64, u64)> {
                        let commands = match &mut counter {
                            Some(counter) => counter.commands()?,
                            None => 0,
                        };
                        Ok((commands, checkpoints(server)?.unwrap_or(0)))
                    };
                    let ((ops_per_s, p50_us, p99_us), seconds) = benchmark(
                        port,
                        test,
                        clients,
                        config.requests,
                        client_cpus,
                        sampled.then_some(&mut sample as Sample),
                    )?;
                    let cpu = crate::process::cpu_seconds(pid)? - cpu_before;
                    let threads = crate::process::threads_since(
                        &threads_before,
                        crate::process::thread_cpu_seconds(pid)?,
                    );
                    let checkpoints = checkpoints(server)?
                        .zip(checkpoints_before)
                        .map(|(after, before)| after.saturating_sub(before));
                    runs[placing][index].push(Run {
                        ops_per_s,
                        p50_us,
                        p99_us,
                        cpu_seconds: cpu,
                        checkpoints,
                        threads,
                        seconds,
                    });
                }
            }
        }
        for (placing, client_cpu) in placements.iter().enumerate() {
            for (index, (server, _, _)) in servers.iter().enumerate() {
                results.push(combine(
                    server,
                    (test, clients, *client_cpu),
                    config.requests,
                    &runs[placing][index],
                    server_raw,
                ));
            }
        }
    }
    drop(redis);
    drop(redoguard);
    let judged = ClientCpu::judged(split.is_some());
    let judged_result =
        |server: &str, test: &str, clients: u32| find(&results, server, test, clients, judged);
    let mut targets = Vec::new();
    // Each durable write at -c 50, the types' (issue 32) and the SET; and the reads (issue 34:
    // what a standby serves all day).
    let durable = types.into_iter().chain(["set"]).map(|test| (test, "durable "));
    for (test, what) in durable.chain([("get", "")]) {
        let name = test.to_uppercase();
        if let (Some(ours), Some(redis)) =
            (judged_result("redoguard", &name, 50), judged_result("redis", &name, 50))
        {
            let ratio = ours.ops_per_s / redis.ops_per_s;
            targets.push(crate::bench_commit::Target {
                name: format!(
                    "redoguard / Redis {what}{name} ops/s at -c 50 (client CPU {})",
                    judged.name()
                ),
                value: ratio,
                limit: ">= 1.0".into(),
                met: ratio >= 1.0,
            });
        }
    }
    // The durable SET at -c 50 round by round, and second by second (issue 34): no round
    // slower than Redis's, and no second that a checkpoint (or anything) slows much.
    if let (Some(ours), Some(redis)) =
        (judged_result("redoguard", "SET", 50), judged_result("redis", "SET", 50))
    {
        let mut ratios: Vec<f64> =
            ours.runs_ops_per_s.iter().zip(&redis.runs_ops_per_s).map(|(a, b)| a / b).collect();
        if !ratios.is_empty() {
            let slowest = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let middle = per_second::median(&mut ratios);
            let rounds = ratios.len();
            for (what, value, limit, met) in [
                ("slowest", slowest, ">= 1.0", slowest >= 1.0),
                ("median", middle, ">= 1.2", middle >= 1.2),
            ] {
                targets.push(crate::bench_commit::Target {
                    name: format!(
                        "redoguard / Redis durable SET at -c 50, the {what} of {rounds} rounds (client CPU {})",
                        judged.name()
                    ),
                    value,
                    limit: limit.into(),
                    met,
                });
            }
        }
        let seconds = per_second::steady_seconds(ours);
        if !seconds.is_empty() {
            let mut rates: Vec<f64> = seconds.iter().map(|second| second.ops_per_s).collect();
            let slowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let middle = per_second::median(&mut rates);
            targets.push(crate::bench_commit::Target {
                name: format!(
                    "redoguard's slowest second / its median second, durable SET at -c 50 ({} seconds)",
                    seconds.len()
                ),
                value: slowest / middle,
                limit: ">= 0.8".into(),
                met: slowest / middle >= 0.8,
            });
        }
    }
    if let Some(ours) = judged_result("redoguard", "SET", 1) {
        let ratio = ours.p50_us / ours.fdatasync_p50_us;
        targets.push(crate::bench_commit::Target {
            name: "redoguard SET p50 at -c 1 / raw fdatasync p50".into(),
            value: ratio,
            limit: "<= 1.2".into(),
            met: ratio <= 1.2,
        });
    }
    Ok(BenchRespReport {
        dir: config.dir.display().to_string(),
        fdatasync_p50_us,
        direct_p50_us,
        client_cpus: split.as_ref().map(|(client, _)| client.list()),
        server_cpus: split.as_ref().map(|(_, servers)| servers.list()),
        results,
        redis_skipped,
        targets,
    })
}

/// `server`'s result of `test` at `clients` with the client placed as `client_cpu` says.
fn find<'a>(
    results: &'a [RespResult],
    server: &str,
    test: &str,
    clients: u32,
    client_cpu: ClientCpu,
) -> Option<&'a RespResult> {
    results.iter().find(|result| {
        result.server == server
            && result.test == test
            && result.clients == clients
            && result.client_cpu == client_cpu.name()
    })
}

#[cfg(test)]
mod tests;
