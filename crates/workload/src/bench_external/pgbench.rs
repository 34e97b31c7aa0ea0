//! pgbench, PostgreSQL's load: its script (one upsert per transaction, like a Redis SET),
//! one run at one `synchronous_commit` setting, and what its summary and its
//! per-transaction log say.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use linkemu::Side;

use super::postgresql::{PgCluster, pg_client};
use super::process::run_bounded;
use super::{KEYS, LATENCY_US_MAX, Measured, VALUE_BYTES, latency_histogram};
use crate::network::Network;

/// The pgbench script: one durable upsert per transaction, like a Redis SET.
fn pgbench_script() -> String {
    format!(
        "\\set k random(1, {KEYS})\nINSERT INTO kv (k, v) VALUES (:k, '{}') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v;\n",
        "v".repeat(VALUE_BYTES)
    )
}

/// One pgbench run at one `synchronous_commit` setting.
pub(super) fn pgbench(
    network: &Network,
    cluster: &mut PgCluster,
    synchronous_commit: &str,
    clients: u32,
    seconds: u64,
    case_dir: &Path,
) -> anyhow::Result<Measured> {
    std::fs::create_dir_all(case_dir)?;
    let script = case_dir.join("set.sql");
    std::fs::write(&script, pgbench_script())?;
    let mut command = pg_client(network, Side::A, "pgbench", cluster.port);
    command
        .args(["-n", "-M", "prepared", "-j", "1"])
        .args(["-c", &clients.to_string(), "-T", &seconds.to_string()])
        .arg("-f")
        .arg(&script)
        .arg("--log")
        .arg(format!("--log-prefix={}", case_dir.join("pgbench").display()))
        .arg("postgres")
        .current_dir(case_dir)
        .env("PGOPTIONS", format!("-c synchronous_commit={synchronous_commit}"));
    let output = run_bounded(command, Duration::from_secs(seconds + 120))?;
    cluster.check_alive()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "pgbench failed ({}): {}{}",
        output.status,
        stdout.trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let summary = parse_pgbench_summary(&stdout)
        .with_context(|| format!("no `tps = ` line in pgbench's output:\n{stdout}"))?;
    let mut log = PgbenchLog::default();
    for entry in std::fs::read_dir(case_dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with("pgbench.") {
            log.add(&std::fs::read_to_string(entry.path())?)?;
        }
    }
    anyhow::ensure!(
        log.transactions > 0,
        "pgbench logged no transaction in {}",
        case_dir.display()
    );
    Ok(Measured {
        commits: log.transactions,
        commits_per_s: summary.tps,
        latency_us: log.latency_us,
        failures: log.failed.max(summary.failed),
    })
}

/// What pgbench's summary says.
#[derive(Debug, PartialEq)]
struct PgbenchSummary {
    tps: f64,
    failed: u64,
}

/// Reads `tps = 1234.5 (without initial connection time)` and, if present,
/// `number of failed transactions: 3 (0.1%)`.
fn parse_pgbench_summary(stdout: &str) -> Option<PgbenchSummary> {
    let tps = stdout.lines().find_map(|line| {
        line.trim().strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok()
    })?;
    let failed = stdout
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("number of failed transactions: ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Some(PgbenchSummary { tps, failed })
}

/// pgbench's per-transaction log (`--log`), one or more files.
struct PgbenchLog {
    transactions: u64,
    failed: u64,
    latency_us: Histogram<u64>,
}

impl Default for PgbenchLog {
    fn default() -> PgbenchLog {
        PgbenchLog { transactions: 0, failed: 0, latency_us: latency_histogram() }
    }
}

impl PgbenchLog {
    /// Adds one log file's lines. Format (PostgreSQL 15):
    /// `client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]`,
    /// `time` being the transaction's latency in µs, or `failed`, `serialization`,
    /// `deadlock` or `skipped` for one that did not commit.
    fn add(&mut self, text: &str) -> anyhow::Result<()> {
        for (number, line) in text.lines().enumerate() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            anyhow::ensure!(
                fields.len() >= 6,
                "pgbench log line {}: expected at least 6 fields: {line:?}",
                number + 1
            );
            match fields[2].parse::<u64>() {
                Ok(latency_us) => {
                    self.latency_us.record(latency_us.clamp(1, LATENCY_US_MAX))?;
                    self.transactions += 1;
                }
                Err(_) => match fields[2] {
                    "failed" | "serialization" | "deadlock" | "skipped" => self.failed += 1,
                    other => {
                        anyhow::bail!("pgbench log line {}: unexpected time {other:?}", number + 1)
                    }
                },
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_log_gives_exact_percentiles_and_counts_failures() {
        let mut log = PgbenchLog::default();
        // 100 transactions of 1..=100 ms, in two files (two threads), one failure, and the
        // optional schedule-lag and retries columns on some lines.
        let mut first = String::new();
        let mut second = String::new();
        for n in 1..=100u64 {
            let line = format!("{} {n} {} 0 1700000000 {}\n", n % 4, n * 1000, n * 7);
            if n % 2 == 0 { first.push_str(&line) } else { second.push_str(&line) }
        }
        second.push_str("3 101 failed 0 1700000001 12 0 2\n");
        log.add(&first).unwrap();
        log.add(&second).unwrap();
        assert_eq!(log.transactions, 100);
        assert_eq!(log.failed, 1);
        let p50 = log.latency_us.value_at_quantile(0.5);
        let p99 = log.latency_us.value_at_quantile(0.99);
        // hdrhistogram with 3 significant digits: within 0.1 %.
        assert!((49_950..=50_050).contains(&p50), "p50 {p50}");
        assert!((98_900..=99_100).contains(&p99), "p99 {p99}");
    }

    #[test]
    fn pgbench_log_refuses_what_it_does_not_understand() {
        let mut log = PgbenchLog::default();
        assert!(log.add("0 1 1234\n").is_err());
        assert!(log.add("0 1 soon 0 1700000000 1\n").is_err());
    }

    #[test]
    fn pgbench_summary_of_postgresql_15() {
        let stdout = "\
transaction type: set.sql
scaling factor: 1
query mode: prepared
number of clients: 16
number of threads: 1
maximum number of tries: 1
duration: 5 s
number of transactions actually processed: 12345
number of failed transactions: 2 (0.016%)
latency average = 6.481 ms
initial connection time = 23.456 ms
tps = 2468.987654 (without initial connection time)
";
        assert_eq!(
            parse_pgbench_summary(stdout),
            Some(PgbenchSummary { tps: 2468.987654, failed: 2 })
        );
        assert_eq!(parse_pgbench_summary("latency average = 1 ms\n"), None);
    }
}
