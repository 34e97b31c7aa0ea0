//! kill -9 under load, on the real binary: clients write through a Redis client library,
//! the server is killed with SIGKILL at a random moment, restarted on the same data
//! directory, and everything it acknowledged must be there: every SET with its value, every
//! INCR counted, every MULTI/EXEC whole or not at all.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Server, Watchdog};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CYCLES: usize = 4;
const CLIENTS: usize = 6;
const COUNTERS: usize = 4;
/// Incremented by every MULTI/EXEC block and by nothing else.
const TX_COUNTER: &str = "tx:count";

/// The value written to a unique key: derived from the key, 16 to 2 KiB long, so that a
/// value found after recovery can be checked without remembering it, and so that the load
/// fills logs (log switches, archiving and checkpoints happen during the cycles).
fn value_of(key: &str) -> Vec<u8> {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let len = 16 + (hash % 2048) as usize;
    key.bytes().chain(std::iter::once(b'|')).cycle().take(len).collect()
}

fn counter(index: usize) -> String {
    format!("counter:{index}")
}

/// One operation a client sent.
#[derive(Debug, Clone)]
enum Op {
    Set(String),
    Incr(usize),
    /// MULTI; SET tx:ID:a; SET tx:ID:b; INCR tx:count; EXEC.
    Transaction(String),
}

fn run(connection: &mut redis::Connection, op: &Op) -> redis::RedisResult<()> {
    match op {
        Op::Set(key) => redis::cmd("SET").arg(key).arg(value_of(key)).query(connection),
        Op::Incr(index) => {
            redis::cmd("INCR").arg(counter(*index)).query::<i64>(connection).map(|_| ())
        }
        Op::Transaction(id) => {
            let (a, b) = tx_keys(id);
            redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(&a)
                .arg(value_of(&a))
                .cmd("SET")
                .arg(&b)
                .arg(value_of(&b))
                .cmd("INCR")
                .arg(TX_COUNTER)
                .query::<((), (), i64)>(connection)
                .map(|_| ())
        }
    }
}

fn tx_keys(id: &str) -> (String, String) {
    (format!("tx:{id}:a"), format!("tx:{id}:b"))
}

/// What one client saw acknowledged, and the one operation it had in flight when the server
/// died (its outcome is unknown: it may or may not have survived).
#[derive(Debug, Default)]
struct ClientLog {
    acknowledged: Vec<Op>,
    in_flight: Option<Op>,
    /// An error before the kill: a failure of the test.
    unexpected: Option<String>,
}

fn client(
    addr: std::net::SocketAddr,
    cycle: usize,
    number: usize,
    seed: u64,
    killed: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
) -> ClientLog {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut connection = common::redis_connection(addr);
    let mut log = ClientLog::default();
    for sequence in 0u64.. {
        let op = match rng.random_range(0..10) {
            0..5 => Op::Set(format!("key:{cycle}:{number}:{sequence}")),
            5..8 => Op::Incr(rng.random_range(0..COUNTERS)),
            _ => Op::Transaction(format!("{cycle}.{number}.{sequence}")),
        };
        match run(&mut connection, &op) {
            Ok(()) => {
                log.acknowledged.push(op);
                acknowledged.fetch_add(1, Ordering::Release);
            }
            Err(error) => {
                if !killed.load(Ordering::Acquire) {
                    log.unexpected = Some(format!("{op:?} failed before the kill: {error}"));
                }
                log.in_flight = Some(op);
                return log;
            }
        }
    }
    unreachable!()
}

/// What the database must hold, from everything acknowledged so far.
#[derive(Debug, Default)]
struct Expected {
    /// Keys whose SET was acknowledged (or found durable after a crash).
    keys: Vec<String>,
    /// SETs whose outcome is unknown.
    maybe_keys: Vec<String>,
    /// Transactions acknowledged (or found whole after a crash).
    transactions: Vec<String>,
    maybe_transactions: Vec<String>,
    /// Each counter's known value, and how many INCRs of it were in flight at the crash.
    counters: [i64; COUNTERS],
    counters_in_flight: [i64; COUNTERS],
}

impl Expected {
    fn add(&mut self, log: ClientLog) {
        for op in log.acknowledged {
            match op {
                Op::Set(key) => self.keys.push(key),
                Op::Incr(index) => self.counters[index] += 1,
                Op::Transaction(id) => self.transactions.push(id),
            }
        }
        match log.in_flight {
            Some(Op::Set(key)) => self.maybe_keys.push(key),
            Some(Op::Incr(index)) => self.counters_in_flight[index] += 1,
            Some(Op::Transaction(id)) => self.maybe_transactions.push(id),
            None => {}
        }
    }

    /// Operations known to be in the database.
    fn operations(&self) -> u64 {
        (self.keys.len() + self.transactions.len()) as u64
            + self.counters.iter().sum::<i64>() as u64
    }

    /// Checks the database against what was acknowledged; settles the unknown outcomes by
    /// what recovery found (all-or-nothing for a transaction, exact value for a SET).
    fn verify(&mut self, connection: &mut redis::Connection) {
        for chunk in self.keys.chunks(256) {
            let values: Vec<Option<Vec<u8>>> =
                redis::cmd("MGET").arg(chunk).query(connection).unwrap();
            for (key, value) in chunk.iter().zip(values) {
                let value = value.unwrap_or_else(|| panic!("acknowledged SET of {key} is lost"));
                assert!(value == value_of(key), "{key} holds a wrong value after recovery");
            }
        }
        for key in std::mem::take(&mut self.maybe_keys) {
            let value: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query(connection).unwrap();
            if let Some(value) = value {
                assert!(value == value_of(&key), "in-flight {key} holds a wrong value");
                self.keys.push(key);
            }
        }
        let check_transaction = |connection: &mut redis::Connection, id: &str| -> bool {
            let (a, b) = tx_keys(id);
            let (value_a, value_b): (Option<Vec<u8>>, Option<Vec<u8>>) =
                redis::cmd("MGET").arg(&a).arg(&b).query(connection).unwrap();
            match (value_a, value_b) {
                (Some(value_a), Some(value_b)) => {
                    assert!(
                        value_a == value_of(&a) && value_b == value_of(&b),
                        "{id}: wrong values"
                    );
                    true
                }
                (None, None) => false,
                (value_a, value_b) => panic!(
                    "transaction {id} is half there after recovery: {a} {}, {b} {}",
                    if value_a.is_some() { "present" } else { "absent" },
                    if value_b.is_some() { "present" } else { "absent" },
                ),
            }
        };
        for id in &self.transactions {
            assert!(check_transaction(connection, id), "acknowledged transaction {id} is lost");
        }
        for id in std::mem::take(&mut self.maybe_transactions) {
            if check_transaction(connection, &id) {
                self.transactions.push(id);
            }
        }
        // Every transaction present incremented the counter once, and no other write did.
        let tx_count: Option<i64> = redis::cmd("GET").arg(TX_COUNTER).query(connection).unwrap();
        assert_eq!(
            tx_count.unwrap_or(0),
            self.transactions.len() as i64,
            "{TX_COUNTER} must equal the number of transactions present"
        );
        for index in 0..COUNTERS {
            let value: Option<i64> =
                redis::cmd("GET").arg(counter(index)).query(connection).unwrap();
            let value = value.unwrap_or(0);
            let (low, high) =
                (self.counters[index], self.counters[index] + self.counters_in_flight[index]);
            assert!(
                (low..=high).contains(&value),
                "{} is {value}: acknowledged INCRs make it at least {low}, with those in flight at most {high}",
                counter(index)
            );
            self.counters[index] = value;
            self.counters_in_flight[index] = 0;
        }
        // Nothing else: no key that no acknowledged or in-flight write made.
        let keys = self.keys.len()
            + 2 * self.transactions.len()
            + usize::from(!self.transactions.is_empty())
            + self.counters.iter().filter(|&&value| value > 0).count();
        let dbsize: usize = redis::cmd("DBSIZE").query(connection).unwrap();
        assert_eq!(dbsize, keys, "DBSIZE after recovery");
    }
}

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    // Small logs and frequent checkpoints: a few seconds of load switch logs, archive them
    // and checkpoint, so a crash lands among all of these.
    let path = dir.join("redoguard.toml");
    std::fs::write(
        &path,
        "[redo]\nlog_file_size = \"2MiB\"\ngroups = 3\n[db]\ncheckpoint_interval = \"500ms\"\n",
    )
    .unwrap();
    path
}

#[test]
fn kill_dash_nine_under_load_loses_no_acknowledged_write() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the kill -9 test");
    let started = Instant::now();
    let seed = common::seed();
    println!("seed {seed} (set REDOGUARD_TEST_SEED to replay the same choices)");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let log = dir.path().join("server.log");
    let config = config(dir.path());
    let mut expected = Expected::default();
    let (mut switches, mut checkpoints, mut archived) = (0, 0, 0);
    let mut acknowledged_total = 0;
    for cycle in 0..CYCLES {
        let server = Server::start(&data_dir, Some(&config), &log);
        let mut connection = server.redis();
        if cycle > 0 {
            expected.verify(&mut connection);
            let replayed = common::recovered_records(&mut connection);
            assert!(replayed > 0, "cycle {cycle}: recovery replayed no redo after a kill -9");
            assert_eq!(server.status().database.recovered_records, replayed);
        }
        let killed = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|number| {
                let (killed, acknowledged) = (killed.clone(), acknowledged.clone());
                let (addr, seed) = (server.resp_addr(), rng.random());
                std::thread::spawn(move || client(addr, cycle, number, seed, killed, acknowledged))
            })
            .collect();
        // A random moment under load; then the next acknowledgement, so that the kill lands
        // right after a commit, with redo after the last checkpoint for recovery to replay.
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1200)));
        let metrics = server.status().metrics;
        switches += metrics.stat("redo log switches");
        checkpoints += metrics.stat("checkpoints completed");
        archived += metrics.stat("archived logs");
        let seen = acknowledged.load(Ordering::Acquire);
        let deadline = Instant::now() + Duration::from_secs(30);
        while acknowledged.load(Ordering::Acquire) == seen
            // (Clients that stopped on an error are reported below.)
            && !clients.iter().all(|client| client.is_finished())
        {
            assert!(Instant::now() < deadline, "cycle {cycle}: no acknowledgement for 30 s");
            std::thread::yield_now();
        }
        killed.store(true, Ordering::Release);
        let pid = server.pid();
        server.kill();
        let mut in_flight = 0;
        for client in clients {
            let seen = client.join().expect("a client thread panicked");
            if let Some(error) = &seen.unexpected {
                panic!("cycle {cycle}: {error}\nserver log:\n{}", common::tail(&log, 30));
            }
            in_flight += usize::from(seen.in_flight.is_some());
            expected.add(seen);
        }
        println!(
            "cycle {cycle}: killed pid {pid} after {} acknowledged operations ({in_flight} in flight); so far {switches} log switches, {checkpoints} checkpoints, {archived} logs archived",
            acknowledged.load(Ordering::Acquire),
        );
        acknowledged_total += acknowledged.load(Ordering::Acquire);
    }
    // Otherwise the crashes never landed among log switches and checkpoints. (Each start
    // makes one switch, to open a log: count more than those.)
    assert!(
        switches > CYCLES as u64 && checkpoints > 0,
        "the load was too light to exercise log switches ({switches}) and checkpoints ({checkpoints})"
    );

    // After the last kill: everything is there; a clean stop then leaves nothing to replay.
    let server = Server::start(&data_dir, Some(&config), &log);
    let mut connection = server.redis();
    expected.verify(&mut connection);
    assert!(common::recovered_records(&mut connection) > 0);
    drop(connection);
    server.stop();
    let server = Server::start(&data_dir, Some(&config), &log);
    let mut connection = server.redis();
    assert_eq!(
        common::recovered_records(&mut connection),
        0,
        "a clean stop checkpoints everything: nothing to replay"
    );
    expected.verify(&mut connection);
    println!(
        "verified {acknowledged_total} acknowledged operations over {CYCLES} kill -9 cycles, {} in all with the in-flight ones that survived ({} SETs, {} MULTI/EXEC, {} INCRs), in {:.1?}",
        expected.operations(),
        expected.keys.len(),
        expected.transactions.len(),
        expected.counters.iter().sum::<i64>(),
        started.elapsed()
    );
}
