//! The durable SET at `-c 50` second by second (issue 34): each server's rate sampled once a
//! second while redis-benchmark runs (its `total_commands_processed`, over `INFO stats`, as
//! both servers keep it), with redoguard's checkpoints counted in the same second, so that a
//! checkpoint that takes a burst of the server's CPU shows as the seconds it slows.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tools::bench::plot::{Event, Line, LinePanel};

use super::RespResult;

/// One second of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Second {
    pub ops_per_s: f64,
    /// redoguard's checkpoints completed in this second (0 for Redis).
    pub checkpoints: u64,
}

/// A connection that asks a server for its count of commands processed.
pub(crate) struct Counter {
    stream: TcpStream,
}

impl Counter {
    pub(crate) fn connect(port: u16) -> anyhow::Result<Counter> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("connecting to {addr} to sample its rate"))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        Ok(Counter { stream })
    }

    /// `total_commands_processed` from `INFO stats`.
    pub(crate) fn commands(&mut self) -> anyhow::Result<u64> {
        self.stream.write_all(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")?;
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        // A bulk string: `$LEN\r\n` then LEN bytes and `\r\n`.
        let text = loop {
            let read = self.stream.read(&mut chunk).context("reading INFO stats")?;
            anyhow::ensure!(read > 0, "the server closed the connection during INFO stats");
            reply.extend_from_slice(&chunk[..read]);
            anyhow::ensure!(reply.len() < 1 << 20, "INFO stats longer than 1 MiB");
            if reply.first() == Some(&b'-') && reply.ends_with(b"\r\n") {
                anyhow::bail!("INFO stats: {}", String::from_utf8_lossy(&reply).trim());
            }
            let Some(end) = reply.windows(2).position(|pair| pair == b"\r\n") else { continue };
            let len: usize = std::str::from_utf8(&reply[1..end])?
                .parse()
                .context("INFO stats: not a bulk string")?;
            if reply.len() >= end + 2 + len + 2 {
                break String::from_utf8_lossy(&reply[end + 2..end + 2 + len]).into_owned();
            }
        };
        text.lines()
            .find_map(|line| line.strip_prefix("total_commands_processed:"))
            .context("INFO stats has no total_commands_processed")?
            .trim()
            .parse()
            .context("total_commands_processed is not a number")
    }
}

/// Seconds of every run of `result` back to back, the first and last of each left out (a
/// run's start and end fall within them: partial seconds).
pub fn steady_seconds(result: &RespResult) -> Vec<Second> {
    result
        .runs_per_second
        .iter()
        .flat_map(|run| run.iter().skip(1).take(run.len().saturating_sub(2)).copied())
        .collect()
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The line panel: each server's seconds back to back over its runs, checkpoints marked.
pub fn panel(results: &[&RespResult]) -> Option<LinePanel> {
    if results.iter().all(|result| result.runs_per_second.is_empty()) {
        return None;
    }
    let mut events = Vec::new();
    let series = results
        .iter()
        .map(|result| {
            let seconds = steady_seconds(result);
            for (at, second) in seconds.iter().enumerate() {
                if second.checkpoints > 0 {
                    events.push(Event {
                        label: format!("{} checkpoint", result.server),
                        x: at as f64,
                    });
                }
            }
            Line {
                name: result.server.clone(),
                points: seconds
                    .iter()
                    .enumerate()
                    .map(|(at, second)| (at as f64, second.ops_per_s))
                    .collect(),
            }
        })
        .collect();
    Some(LinePanel {
        title: format!(
            "Durable SET at -c 50 (client CPU {}), second by second over every round",
            results[0].client_cpu
        ),
        x_label: "second of the server's runs, back to back".into(),
        y_label: "requests/s".into(),
        series,
        events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_and_last_second_of_each_run_are_left_out() {
        let second = |ops_per_s: f64| Second { ops_per_s, checkpoints: 0 };
        let result = RespResult {
            runs_per_second: vec![
                vec![second(1.0), second(50.0), second(60.0), second(2.0)],
                vec![second(3.0), second(4.0)],
                vec![second(5.0), second(70.0), second(6.0)],
            ],
            ..RespResult::empty("redoguard")
        };
        let steady: Vec<f64> = steady_seconds(&result).iter().map(|s| s.ops_per_s).collect();
        assert_eq!(steady, vec![50.0, 60.0, 70.0]);
        assert_eq!(median(&mut steady.clone()), 60.0);
    }
}
