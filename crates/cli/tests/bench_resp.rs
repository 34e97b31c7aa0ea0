//! `redoguard bench resp` end to end, small: every test with 10 000
//! requests, one round, with real redis-benchmark, redis-server (installed by the bench from
//! Debian's packages if missing; without them it measures redoguard alone) and a redoguard
//! server. A thread watches, in /proc, which CPUs the bench's redis-benchmark and redoguard
//! server may run on while it runs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// (name, command line, its parent's command line, allowed CPUs) of every process now running.
fn processes() -> Vec<(String, String, String, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(status) = std::fs::read_to_string(path.join("status")) else { continue };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|value| value.trim().to_string())
                .unwrap_or_default()
        };
        let cmdline = |path: &Path| {
            std::fs::read(path.join("cmdline"))
                .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
                .unwrap_or_default()
        };
        let parent = Path::new("/proc").join(field("PPid:"));
        found.push((field("Name:"), cmdline(&path), cmdline(&parent), field("Cpus_allowed_list:")));
    }
    found
}

/// SET and GET at -c 1 and -c 50, and HSET, LPUSH, SADD, ZADD and SET EX at -c 50.
const TESTS: usize = 9;

#[test]
fn a_tiny_run_places_the_client_on_a_cpu_of_its_own_and_measures_the_shared_case_too() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("resp.json");
    let marker = dir.path().display().to_string();
    // The CPUs the watcher saw redis-benchmark allowed; and each server's CPUs as they
    // changed, in order.
    let seen = Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let server_moves = Arc::new(std::sync::Mutex::new(BTreeMap::<String, Vec<String>>::new()));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen, done, marker) = (seen.clone(), done.clone(), marker.clone());
        let server_moves = server_moves.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                for (name, cmdline, parent, cpus) in processes() {
                    // The bench's own children: their parent's command line names its --dir.
                    if !parent.contains(&marker) || !parent.contains("bench resp") {
                        continue;
                    }
                    let server = if name == "redis-benchmark" {
                        seen.lock().unwrap().insert(cpus);
                        continue;
                    } else if name == "redis-server" {
                        "redis"
                    } else if cmdline.contains(" server ") && cmdline.contains(&marker) {
                        "redoguard"
                    } else {
                        continue;
                    };
                    let mut moves = server_moves.lock().unwrap();
                    let moves = moves.entry(server.to_string()).or_default();
                    if moves.last() != Some(&cpus) {
                        moves.push(cpus);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let mut command = Command::new(common::binary());
    command
        .args(["bench", "resp", "--requests", "10000", "--rounds", "1", "--dir"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json);
    let output = common::run_with_cleanup_bound(
        &mut command,
        Duration::from_secs(600),
        Duration::from_secs(20),
        "bench resp",
    );
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    let servers = if report["redis_skipped"].is_null() { 2 } else { 1 };
    for result in results {
        for field in ["server", "test", "clients", "ops_per_s", "p50_us", "p99_us", "client_cpu"] {
            assert!(result.get(field).is_some(), "{field} missing in {result}");
        }
        assert!(result["ops_per_s"].as_f64().unwrap() > 0.0, "{result}");
        // redoguard's checkpoints, one count per run; none for Redis.
        let runs = result["runs_ops_per_s"].as_array().unwrap().len();
        let checkpoints = result["runs_checkpoints"].as_array().unwrap().len();
        let expected = if result["server"] == "redoguard" { runs } else { 0 };
        assert_eq!(checkpoints, expected, "{result}");
        // The CPU by thread names the server's own threads.
        let main_thread =
            if result["server"] == "redoguard" { "redoguard-worke" } else { "redis-server" };
        assert!(result["cpu_us_per_op_by_thread"].get(main_thread).is_some(), "{result}");
    }
    let allowed = workload::placement::Cpus::allowed().unwrap();
    let Some((client, rest)) = allowed.split() else {
        // One CPU: nothing to place; every test once, shared.
        assert_eq!(results.len(), TESTS * servers, "{report}");
        assert!(results.iter().all(|result| result["client_cpu"] == "shared"), "{report}");
        return;
    };
    // Every test with the client on its own CPU, and the durable SET at -c 50 shared too.
    let placed = |client_cpu: &str| {
        results.iter().filter(|result| result["client_cpu"] == client_cpu).count()
    };
    assert_eq!((placed("own"), placed("shared")), (TESTS * servers, servers), "{report}");
    // The writes of the other types each have their target beside Redis, and so do the reads.
    if servers == 2 {
        let writes =
            ["HSET", "LPUSH", "SADD", "ZADD", "SET EX"].map(|test| format!("durable {test}"));
        for test in writes.into_iter().chain(["GET".to_string()]) {
            let name = format!("redoguard / Redis {test} ops/s at -c 50");
            let targets = report["targets"].as_array().unwrap();
            assert!(
                targets.iter().any(|target| target["name"].as_str().unwrap().starts_with(&name)),
                "no target {name:?}: {report}"
            );
        }
    }
    let shared = results.iter().find(|result| result["client_cpu"] == "shared").unwrap();
    assert_eq!((shared["test"].as_str(), shared["clients"].as_u64()), (Some("SET"), Some(50)));
    assert_eq!(report["client_cpus"].as_str(), Some(client.list().as_str()), "{report}");
    assert_eq!(report["server_cpus"].as_str(), Some(rest.list().as_str()), "{report}");
    let placement = format!("client CPU \"own\": redis-benchmark on CPU {}", client.list());
    assert!(stdout.contains(&placement), "no {placement:?} in {stdout}");
    assert!(stdout.contains("floor of a SET at -c 1"), "{stdout}");
    if servers == 2 {
        assert!(stdout.contains("with the client CPU shared:"), "{stdout}");
    }
    // Where the processes were allowed to run, as the kernel had it: redis-benchmark on its
    // CPU or (the shared case) on all, never elsewhere.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, BTreeSet::from([client.list(), allowed.list()]));
    // Each server: (started anywhere, seen or not before it was first placed), then on the
    // servers' CPUs, anywhere for the shared case, and back, once for every two of the
    // durable SET's rounds (six at least, whatever `--rounds` says: own, shared | shared,
    // own | own, shared ...).
    let set_rounds: u32 = 6;
    let mut expected = vec![rest.list()];
    for _ in 0..set_rounds.div_ceil(2) {
        expected.extend([allowed.list(), rest.list()]);
    }
    let moves = server_moves.lock().unwrap().clone();
    assert_eq!(moves.len(), servers, "{moves:?}");
    for (server, moves) in &moves {
        let placed = match moves.first() {
            Some(first) if *first == allowed.list() => &moves[1..],
            _ => &moves[..],
        };
        assert_eq!(placed, expected.as_slice(), "{server}: {moves:?}");
    }
    let svg = std::fs::read_to_string(json.with_extension("svg")).unwrap();
    assert!(svg.contains("client CPU shared"), "the figure names the shared case");
}
