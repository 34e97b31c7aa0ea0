//! What a client run reports: per interval and overall, for people (text) and machines
//! (JSON, serde). Units: MB = 1,000,000 bytes, Mbit = 1,000,000 bits, latencies in µs.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::client::{ClientConfig, SocketBuffer};
use super::frame::{Mode, Summary, Welcome};
use super::payload::Payload;
use super::socket;

/// Latency percentiles in microseconds (from nanosecond histograms, so sub-µs digits are
/// real).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
    pub samples: u64,
}

impl LatencyUs {
    pub fn from_histogram(histogram_ns: &Histogram<u64>) -> LatencyUs {
        if histogram_ns.is_empty() {
            return LatencyUs::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencyUs {
            p50: us(histogram_ns.value_at_quantile(0.5)),
            p99: us(histogram_ns.value_at_quantile(0.99)),
            max: us(histogram_ns.max()),
            mean: histogram_ns.mean() / 1000.0,
            samples: histogram_ns.len(),
        }
    }
}

/// One reporting interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalReport {
    /// Seconds after the start.
    pub start_s: f64,
    pub end_s: f64,
    /// Bytes acknowledged by the server in this interval.
    pub bytes: u64,
    pub messages: u64,
    pub mb_per_s: f64,
    pub mbit_per_s: f64,
    pub msgs_per_s: f64,
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_max_us: f64,
}

impl IntervalReport {
    pub(crate) fn new(
        start: Duration,
        end: Duration,
        bytes: u64,
        messages: u64,
        latency: LatencyUs,
    ) -> IntervalReport {
        let seconds = (end - start).as_secs_f64().max(1e-9);
        IntervalReport {
            start_s: start.as_secs_f64(),
            end_s: end.as_secs_f64(),
            bytes,
            messages,
            mb_per_s: bytes as f64 / seconds / 1e6,
            mbit_per_s: bytes as f64 * 8.0 / seconds / 1e6,
            msgs_per_s: messages as f64 / seconds,
            lat_p50_us: latency.p50,
            lat_p99_us: latency.p99,
            lat_max_us: latency.max,
        }
    }
}

/// The whole run. Field names are stable: scripts read them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientReport {
    pub server: String,
    pub mode: Mode,
    pub write: bool,
    /// Message length in bytes.
    pub length: u32,
    pub num_conn: u32,
    pub payload: Payload,
    pub duration_s: f64,
    /// From the start to the last acknowledgement (at least the duration).
    pub elapsed_s: f64,
    pub interval_s: f64,
    /// Target rate in MB/s, if one was set.
    pub rate_mb_per_s: Option<f64>,
    pub delay_us: f64,
    /// Bytes and messages acknowledged by the server (durable there with `write`).
    pub bytes: u64,
    pub messages: u64,
    pub mb_per_s: f64,
    pub mbit_per_s: f64,
    pub msgs_per_s: f64,
    /// Send to acknowledgement (SYNC, ASYNC) or round trip (RTT), per message.
    pub lat_p50_us: f64,
    pub lat_p99_us: f64,
    pub lat_max_us: f64,
    pub lat_mean_us: f64,
    /// The server's fdatasync latency (with `write`).
    pub server_syncs: u64,
    pub server_sync_p50_us: f64,
    pub server_sync_p99_us: f64,
    pub server_sync_max_us: f64,
    /// Requested `SO_SNDBUF`/`SO_RCVBUF` in bytes; `None` = kernel autotuning.
    pub sockbuf_requested: Option<u64>,
    /// What the kernel granted (as getsockopt reports: twice the request when not capped).
    pub client_sndbuf: u64,
    pub client_rcvbuf: u64,
    pub server_sndbuf: u64,
    pub server_rcvbuf: u64,
    /// Whether a request was capped by `net.core.wmem_max`/`rmem_max` on either side.
    pub sockbuf_capped: bool,
    /// TCP congestion control the client's sockets used.
    pub congestion: String,
    pub intervals: Vec<IntervalReport>,
}

impl ClientReport {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        config: &ClientConfig,
        elapsed: Duration,
        bytes: u64,
        messages: u64,
        latency_ns: &Histogram<u64>,
        established: &[super::client::Established],
        summaries: &[Summary],
        intervals: Vec<IntervalReport>,
    ) -> ClientReport {
        let seconds = elapsed.as_secs_f64().max(1e-9);
        let latency = LatencyUs::from_histogram(latency_ns);
        let first = established.first();
        let welcome = first.map(|facts| &facts.server);
        let requested = match config.sockbuf {
            SocketBuffer::Auto => None,
            SocketBuffer::Bytes(bytes) => Some(bytes),
        };
        let granted = |pick: fn(&super::client::Established) -> u64| first.map(pick).unwrap_or(0);
        let (client_sndbuf, client_rcvbuf) =
            (granted(|f| f.client_sndbuf_bytes), granted(|f| f.client_rcvbuf_bytes));
        let (server_sndbuf, server_rcvbuf) = welcome
            .map(|w: &Welcome| (w.sndbuf_bytes as u64, w.rcvbuf_bytes as u64))
            .unwrap_or((0, 0));
        let sockbuf_capped = requested.is_some_and(|request| {
            [client_sndbuf, client_rcvbuf, server_sndbuf, server_rcvbuf]
                .iter()
                .any(|&granted| socket::was_capped(request, granted))
        });
        // The server's sync latency: the worst connection's percentiles (they are alike).
        let with_syncs = summaries.iter().filter(|summary| summary.syncs > 0);
        let server_syncs = summaries.iter().map(|summary| summary.syncs).sum();
        let worst = |pick: fn(&Summary) -> u64| {
            with_syncs.clone().map(pick).max().unwrap_or(0) as f64 / 1000.0
        };
        ClientReport {
            server: format!("{}:{}", config.host, config.port),
            mode: config.mode,
            write: config.write,
            length: config.message_bytes,
            num_conn: config.connections,
            payload: config.payload,
            duration_s: config.duration.as_secs_f64(),
            elapsed_s: seconds,
            interval_s: config.interval.as_secs_f64(),
            rate_mb_per_s: config.rate_bytes_per_s.map(|rate| rate / 1e6),
            delay_us: config.delay.as_secs_f64() * 1e6,
            bytes,
            messages,
            mb_per_s: bytes as f64 / seconds / 1e6,
            mbit_per_s: bytes as f64 * 8.0 / seconds / 1e6,
            msgs_per_s: messages as f64 / seconds,
            lat_p50_us: latency.p50,
            lat_p99_us: latency.p99,
            lat_max_us: latency.max,
            lat_mean_us: latency.mean,
            server_syncs,
            server_sync_p50_us: worst(|s| s.sync_ns_p50),
            server_sync_p99_us: worst(|s| s.sync_ns_p99),
            server_sync_max_us: worst(|s| s.sync_ns_max),
            sockbuf_requested: requested,
            client_sndbuf,
            client_rcvbuf,
            server_sndbuf,
            server_rcvbuf,
            sockbuf_capped,
            congestion: first.map(|facts| facts.congestion.clone()).unwrap_or_default(),
            intervals,
        }
    }

    /// The parameters of the test, before it starts, as a person reads them.
    pub fn describe(config: &ClientConfig) -> String {
        let mode = match config.mode {
            Mode::Sync => "SYNC (one message in flight per connection; each acknowledged)",
            Mode::Async => "ASYNC (streaming; acknowledged asynchronously)",
            Mode::Rtt => "RTT (ping-pong only)",
        };
        let mut text = String::new();
        let _ = writeln!(text, "nettest client → {}:{}", config.host, config.port);
        let _ = writeln!(text, "  mode        {mode}");
        let _ = writeln!(
            text,
            "  write       {}",
            if config.write {
                "yes: the server writes each message and fdatasyncs before acknowledging"
            } else {
                "no"
            }
        );
        let _ = writeln!(
            text,
            "  length      {} bytes ({})",
            config.message_bytes,
            crate::units::format_bytes(config.message_bytes as u64)
        );
        let _ = writeln!(text, "  connections {}", config.connections);
        let _ =
            writeln!(text, "  duration    {:?}, interval {:?}", config.duration, config.interval);
        let sockbuf = match config.sockbuf {
            SocketBuffer::Auto => "auto (kernel autotuning)".to_string(),
            SocketBuffer::Bytes(bytes) => {
                format!("{bytes} bytes ({})", crate::units::format_bytes(bytes))
            }
        };
        let _ = writeln!(text, "  sockbuf     {sockbuf}");
        if let Some(rate) = config.rate_bytes_per_s {
            let _ = writeln!(text, "  rate        {:.3} MB/s target", rate / 1e6);
        }
        if !config.delay.is_zero() {
            let _ = writeln!(text, "  delay       {:?} after each message", config.delay);
        }
        let _ = writeln!(text, "  payload     {:?}", config.payload);
        let _ = write!(
            text,
            "  units       MB = 1,000,000 bytes; Mbit = 1,000,000 bits; latency in µs"
        );
        text
    }

    /// The column heads for [`ClientReport::interval_line`].
    pub fn interval_heading(mode: Mode) -> String {
        match mode {
            Mode::Async => {
                format!("{:>15} {:>10} {:>11} {:>10}", "interval (s)", "MB/s", "Mbit/s", "msgs/s")
            }
            _ => format!(
                "{:>15} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10}",
                "interval (s)", "MB/s", "Mbit/s", "msgs/s", "p50 µs", "p99 µs", "max µs"
            ),
        }
    }

    /// One interval as a line of the table.
    pub fn interval_line(mode: Mode, interval: &IntervalReport) -> String {
        let span = format!("{:.1}-{:.1}", interval.start_s, interval.end_s);
        match mode {
            Mode::Async => format!(
                "{span:>15} {:>10.2} {:>11.2} {:>10.0}",
                interval.mb_per_s, interval.mbit_per_s, interval.msgs_per_s
            ),
            _ => format!(
                "{span:>15} {:>10.2} {:>11.2} {:>10.0} {:>10.1} {:>10.1} {:>10.1}",
                interval.mb_per_s,
                interval.mbit_per_s,
                interval.msgs_per_s,
                interval.lat_p50_us,
                interval.lat_p99_us,
                interval.lat_max_us
            ),
        }
    }

    /// The averages and facts after the run, as a person reads them.
    pub fn summary_text(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(
            text,
            "average over {:.2} s: {:.2} MB/s ({:.2} Mbit/s), {:.0} msgs/s, {} messages",
            self.elapsed_s, self.mb_per_s, self.mbit_per_s, self.msgs_per_s, self.messages
        );
        let what = match self.mode {
            Mode::Rtt => "round trip",
            _ => "send → acknowledgement",
        };
        let _ = writeln!(
            text,
            "latency ({what}): p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs, mean {:.1} µs",
            self.lat_p50_us, self.lat_p99_us, self.lat_max_us, self.lat_mean_us
        );
        if self.write {
            let _ = writeln!(
                text,
                "server fdatasync: {} calls, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
                self.server_syncs,
                self.server_sync_p50_us,
                self.server_sync_p99_us,
                self.server_sync_max_us
            );
        }
        let _ = writeln!(
            text,
            "socket buffers granted: client send {} / receive {}, server send {} / receive {} (bytes, as the kernel reports them: twice the request when not capped)",
            self.client_sndbuf, self.client_rcvbuf, self.server_sndbuf, self.server_rcvbuf
        );
        if let (true, Some(requested)) = (self.sockbuf_capped, self.sockbuf_requested) {
            let _ = writeln!(
                text,
                "WARNING: the kernel capped the {requested}-byte socket buffer request: net.core.wmem_max / net.core.rmem_max are lower on one side. Raise them there: sysctl -w net.core.wmem_max={requested} net.core.rmem_max={requested}"
            );
        }
        let _ = write!(text, "congestion control: {}", self.congestion);
        text
    }
}
