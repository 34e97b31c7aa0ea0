//! advise: from a link's bandwidth and RTT and the peak redo rate, the figures a DBA
//! needs: bandwidth the redo needs, bandwidth-delay product, socket buffer sizes (3 × BDP,
//! as the reference recommends) and the kernel limits that must allow them, whether SYNC is
//! viable and what it adds to each commit, whether compression is needed and what ratio
//! suffices, and how much redo ASYNC puts at risk.
//!
//! Units are explicit everywhere because the reference mixes them: its "MB of redo" is
//! 1,048,576 bytes (our MiB) while its "Mbit" of bandwidth is 1,000,000 bits. So
//! 3 MiB/s of redo = 3 × 1,048,576 × 8 / 1,000,000 = 25.2 Mbit/s.

pub mod logs;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::{ByteSize, Rate, parse_duration, parse_rate};

/// Socket buffers recommended per stream, as a multiple of the bandwidth-delay product.
pub const SOCKBUF_BDP_MULTIPLE: f64 = 3.0;
/// Largest share of the link (or of a stream's window-limited throughput) that peak redo
/// should use: redo is bursty and TCP needs room to recover from loss.
pub const LINK_SHARE_MAX: f64 = 0.7;

/// What advise starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdviseInput {
    /// Link bandwidth in bits per second.
    pub bandwidth_bits_per_s: f64,
    /// Round-trip time between primary and standby.
    pub rtt: Duration,
    /// Peak redo generation rate in bytes per second.
    pub redo_bytes_per_s: f64,
    /// Socket buffer size in use or planned, in bytes; `None` = the recommended 3 × BDP.
    pub sockbuf_bytes: Option<u64>,
    /// Bytes of a typical redo write (one group commit), sent per SYNC round trip.
    pub write_bytes: u64,
    /// The standby's fdatasync latency for such a write (`redoguard iotest`), paid by
    /// SYNC AFFIRM; `None` if not measured.
    pub standby_sync: Option<Duration>,
    /// The most commit latency SYNC may add before it is not viable.
    pub latency_budget: Duration,
    /// How long the peak lasts, for the ASYNC backlog when the link cannot keep up.
    pub peak_duration: Duration,
}

/// A kernel setting and the value the advice needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelSetting {
    pub name: String,
    /// The value needed (for `tcp_wmem`/`tcp_rmem`: the third field, the maximum).
    pub needed: u64,
    /// The current value on this machine, if it could be read.
    pub current: Option<u64>,
}

impl KernelSetting {
    pub fn sufficient(&self) -> Option<bool> {
        self.current.map(|current| current >= self.needed)
    }
}

/// The advice. Every figure carries its unit in its name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    pub input: AdviseInput,
    /// Bandwidth the peak redo needs, in Mbit/s (1 Mbit = 1,000,000 bits).
    pub redo_mbit_per_s: f64,
    /// Share of the link the peak redo uses.
    pub link_utilisation: f64,
    /// Bandwidth-delay product in bytes: what must be in flight to fill the link.
    pub bdp_bytes: u64,
    /// Recommended socket send and receive buffer per stream, in bytes (3 × BDP).
    pub recommended_sockbuf_bytes: u64,
    /// The socket buffer the rest of the advice assumes.
    pub sockbuf_bytes: u64,
    /// The most one stream carries with that buffer: min(link, buffer / RTT), in Mbit/s.
    pub stream_mbit_per_s: f64,
    pub kernel: Vec<KernelSetting>,
    pub sync_viable: bool,
    /// What SYNC adds to each commit: RTT + sending one write + the standby's sync.
    pub sync_added_latency_ms: f64,
    pub sync_reasons: Vec<String>,
    pub compression_needed: bool,
    /// The smallest compression ratio (original / compressed) that fits the redo in the
    /// stream's usable throughput; 1.0 when none is needed.
    pub compression_ratio_needed: f64,
    /// ASYNC: redo generated but not yet at the standby, in seconds of redo, at the end of
    /// a peak of `peak_duration`.
    pub async_exposure_s: f64,
    /// The same in bytes.
    pub async_exposure_bytes: u64,
    /// Whether the ASYNC backlog grows during the peak (the link cannot keep up).
    pub async_backlog_grows: bool,
}

/// Computes the advice. Pure: no I/O (the kernel's current values are filled in by
/// [`with_current_kernel_values`]).
pub fn advise(input: &AdviseInput) -> Advice {
    let rtt_s = input.rtt.as_secs_f64();
    let bandwidth = input.bandwidth_bits_per_s;
    let redo_bits = input.redo_bytes_per_s * 8.0;
    let bdp_bytes = (bandwidth * rtt_s / 8.0).round() as u64;
    let recommended_sockbuf_bytes = (bdp_bytes as f64 * SOCKBUF_BDP_MULTIPLE).round() as u64;
    let sockbuf_bytes = input.sockbuf_bytes.unwrap_or(recommended_sockbuf_bytes);
    let window_bits = if rtt_s > 0.0 { sockbuf_bytes as f64 * 8.0 / rtt_s } else { f64::INFINITY };
    let stream_bits = bandwidth.min(window_bits);
    let usable_bits = stream_bits * LINK_SHARE_MAX;

    let serialization_s = input.write_bytes as f64 * 8.0 / bandwidth;
    let standby_sync_s = input.standby_sync.map_or(0.0, |sync| sync.as_secs_f64());
    let sync_added_s = rtt_s + serialization_s + standby_sync_s;
    let mut sync_reasons = Vec::new();
    let within_budget = sync_added_s <= input.latency_budget.as_secs_f64();
    sync_reasons.push(format!(
        "adds {:.2} ms per commit (RTT {:.2} ms + sending {} bytes {:.3} ms + standby sync {}), {} the {:.2} ms budget",
        sync_added_s * 1e3,
        rtt_s * 1e3,
        input.write_bytes,
        serialization_s * 1e3,
        input.standby_sync.map_or("not measured: run redoguard iotest on the standby".to_string(), |s| format!("{:.3} ms", s.as_secs_f64() * 1e3)),
        if within_budget { "within" } else { "over" },
        input.latency_budget.as_secs_f64() * 1e3
    ));
    let fits = redo_bits <= usable_bits;
    sync_reasons.push(format!(
        "peak redo needs {:.1} Mbit/s, {} {:.0} % of what one stream carries ({:.1} Mbit/s)",
        redo_bits / 1e6,
        if fits { "within" } else { "more than" },
        LINK_SHARE_MAX * 100.0,
        stream_bits / 1e6
    ));

    let compression_ratio_needed = (redo_bits / usable_bits).max(1.0);
    let compression_needed = !fits;

    // ASYNC: redo in flight takes half an RTT to arrive; if the stream cannot keep up,
    // the backlog grows for the whole peak and drains at the stream's rate.
    let backlog_bytes =
        ((redo_bits - stream_bits).max(0.0) / 8.0) * input.peak_duration.as_secs_f64();
    let drain_s = if stream_bits > 0.0 { backlog_bytes * 8.0 / stream_bits } else { f64::INFINITY };
    let async_exposure_s = rtt_s / 2.0 + serialization_s + drain_s;
    let async_exposure_bytes =
        (input.redo_bytes_per_s * (rtt_s / 2.0 + serialization_s) + backlog_bytes).round() as u64;

    let kernel = vec![
        KernelSetting { name: "net.core.wmem_max".into(), needed: sockbuf_bytes, current: None },
        KernelSetting { name: "net.core.rmem_max".into(), needed: sockbuf_bytes, current: None },
        KernelSetting {
            name: "net.ipv4.tcp_wmem (max)".into(),
            needed: sockbuf_bytes,
            current: None,
        },
        KernelSetting {
            name: "net.ipv4.tcp_rmem (max)".into(),
            needed: sockbuf_bytes,
            current: None,
        },
    ];
    Advice {
        input: input.clone(),
        redo_mbit_per_s: redo_bits / 1e6,
        link_utilisation: redo_bits / bandwidth,
        bdp_bytes,
        recommended_sockbuf_bytes,
        sockbuf_bytes,
        stream_mbit_per_s: stream_bits / 1e6,
        kernel,
        sync_viable: within_budget && fits,
        sync_added_latency_ms: sync_added_s * 1e3,
        sync_reasons,
        compression_needed,
        compression_ratio_needed,
        async_exposure_s,
        async_exposure_bytes,
        async_backlog_grows: redo_bits > stream_bits,
    }
}

/// Reads this machine's current kernel limits into the advice.
pub fn with_current_kernel_values(mut advice: Advice) -> Advice {
    let read = |path: &str, field: usize| -> Option<u64> {
        std::fs::read_to_string(path).ok()?.split_whitespace().nth(field)?.parse().ok()
    };
    let sources = [
        ("/proc/sys/net/core/wmem_max", 0),
        ("/proc/sys/net/core/rmem_max", 0),
        ("/proc/sys/net/ipv4/tcp_wmem", 2),
        ("/proc/sys/net/ipv4/tcp_rmem", 2),
    ];
    for (setting, (path, field)) in advice.kernel.iter_mut().zip(sources) {
        setting.current = read(path, field);
    }
    advice
}

impl Advice {
    /// The advice as a person reads it.
    pub fn text(&self) -> String {
        let input = &self.input;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "Units: 1 Mbit = 1,000,000 bits; 1 MiB = 1,048,576 bytes (the reference's \"MB\" of redo); 1 MB = 1,000,000 bytes."
        );
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "Link      {} ({:.0} bit/s), RTT {:.2} ms",
            Rate { bits_per_s: input.bandwidth_bits_per_s },
            input.bandwidth_bits_per_s,
            input.rtt.as_secs_f64() * 1e3
        );
        let _ = writeln!(
            t,
            "Peak redo {:.0} bytes/s = {:.2} MiB/s = {:.2} MB/s",
            input.redo_bytes_per_s,
            input.redo_bytes_per_s / 1_048_576.0,
            input.redo_bytes_per_s / 1e6
        );
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "Bandwidth needed      {:.1} Mbit/s ({:.0} % of the link)",
            self.redo_mbit_per_s,
            self.link_utilisation * 100.0
        );
        let _ = writeln!(
            t,
            "Bandwidth-delay prod. {} bytes ({}) = bandwidth × RTT / 8",
            group(self.bdp_bytes),
            crate::units::format_bytes(self.bdp_bytes)
        );
        let _ = writeln!(
            t,
            "Socket buffers        {} bytes ({}) = 3 × BDP, for SO_SNDBUF on the primary and SO_RCVBUF on the standby",
            group(self.recommended_sockbuf_bytes),
            crate::units::format_bytes(self.recommended_sockbuf_bytes)
        );
        if self.sockbuf_bytes != self.recommended_sockbuf_bytes {
            let _ = writeln!(
                t,
                "With your buffers of  {} bytes, one stream carries at most {:.1} Mbit/s (buffer / RTT)",
                group(self.sockbuf_bytes),
                self.stream_mbit_per_s
            );
        }
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "Kernel settings (on both hosts) so that the kernel does not silently cap the buffers:"
        );
        for setting in &self.kernel {
            let status = match (setting.current, setting.sufficient()) {
                (Some(current), Some(true)) => format!("ok (now {})", group(current)),
                (Some(current), _) => format!("RAISE (now {})", group(current)),
                (None, _) => "unknown here".to_string(),
            };
            let _ =
                writeln!(t, "  {:<24} >= {:>13}   {status}", setting.name, group(setting.needed));
        }
        for command in self.sysctl_commands() {
            let _ = writeln!(t, "  {command}");
        }
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "SYNC      {} — adds about {:.2} ms to every commit",
            if self.sync_viable { "viable" } else { "NOT viable" },
            self.sync_added_latency_ms
        );
        for reason in &self.sync_reasons {
            let _ = writeln!(t, "          · {reason}");
        }
        if self.compression_needed {
            let _ = writeln!(
                t,
                "Compression NEEDED: a ratio of at least {:.2}:1 fits the peak into {:.0} % of one stream",
                self.compression_ratio_needed,
                LINK_SHARE_MAX * 100.0
            );
        } else {
            let _ = writeln!(
                t,
                "Compression not needed: the peak fits into {:.0} % of one stream",
                LINK_SHARE_MAX * 100.0
            );
        }
        let exposure = if self.async_backlog_grows {
            format!(
                "the link cannot keep up: after a {:?} peak the standby is {:.1} s behind ({} bytes of redo at risk)",
                input.peak_duration,
                self.async_exposure_s,
                group(self.async_exposure_bytes)
            )
        } else {
            format!(
                "about {:.1} ms of redo ({} bytes) in flight at any time",
                self.async_exposure_s * 1e3,
                group(self.async_exposure_bytes)
            )
        };
        let _ = write!(t, "ASYNC     data-loss exposure: {exposure}");
        t
    }
}

impl Advice {
    /// `sysctl -w` commands for the settings that are too low here (or unknown), never
    /// lowering anything.
    pub fn sysctl_commands(&self) -> Vec<String> {
        let mut commands = Vec::new();
        for setting in &self.kernel {
            if setting.sufficient() == Some(true) {
                continue;
            }
            let command = match setting.name.as_str() {
                "net.ipv4.tcp_wmem (max)" => {
                    format!(
                        "sysctl -w net.ipv4.tcp_wmem=\"{}\"",
                        triple("/proc/sys/net/ipv4/tcp_wmem", [4096, 16384], setting.needed)
                    )
                }
                "net.ipv4.tcp_rmem (max)" => {
                    format!(
                        "sysctl -w net.ipv4.tcp_rmem=\"{}\"",
                        triple("/proc/sys/net/ipv4/tcp_rmem", [4096, 131072], setting.needed)
                    )
                }
                name => format!("sysctl -w {name}={}", setting.needed),
            };
            commands.push(command);
        }
        commands
    }
}

/// `min default max` with this machine's min and default (or Linux's) and the new max.
fn triple(path: &str, fallback: [u64; 2], max: u64) -> String {
    let current: Vec<u64> = std::fs::read_to_string(path)
        .map(|text| text.split_whitespace().filter_map(|word| word.parse().ok()).collect())
        .unwrap_or_default();
    let (min, default) = match current[..] {
        [min, default, _] => (min, default),
        _ => (fallback[0], fallback[1]),
    };
    format!("{min} {default} {max}")
}

/// `9375000` → `9,375,000`.
pub fn group(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `redoguard advise`.
#[derive(Debug, Clone, clap::Args)]
pub struct AdviseArgs {
    /// Link bandwidth (1gbit, 100mbit, 125MB/s).
    #[arg(long, value_parser = parse_rate, required_unless_present_any = ["from_nettest", "from_status"])]
    pub bandwidth: Option<Rate>,
    /// Round-trip time between primary and standby (25ms).
    #[arg(long, value_parser = parse_duration, required_unless_present_any = ["from_nettest", "from_status"])]
    pub rtt: Option<Duration>,
    /// Peak redo rate (3MiB/s; note that the reference's "MB" is a MiB). With --from-status:
    /// the rate the status observed unless given.
    #[arg(long, value_parser = parse_rate, required_unless_present = "from_status")]
    pub redo_rate: Option<Rate>,
    /// A member's status, to size its online logs from the redo it has seen: its admin URL
    /// (http://HOST:PORT[/status]; its /history is read too) or a file holding the JSON of
    /// /status (`redoguard status --json`). The link's advice follows if --bandwidth and
    /// --rtt (or --from-nettest) are given too.
    #[arg(long, value_name = "URL|FILE")]
    pub from_status: Option<String>,
    /// With --from-status: how often the online logs should switch at the observed peak (the
    /// reference: every 15-20 minutes in production). 1s..=24h.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub switch_interval: Duration,
    /// Socket buffer size in use or planned (default: the recommended 3 × BDP).
    #[arg(long)]
    pub sockbuf: Option<ByteSize>,
    /// Bytes of a typical redo write (one group commit).
    #[arg(long, default_value = "16KiB")]
    pub write_size: ByteSize,
    /// The standby's fdatasync latency for such a write (from redoguard iotest).
    #[arg(long, value_parser = parse_duration)]
    pub standby_sync: Option<Duration>,
    /// The most commit latency SYNC may add.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    pub latency_budget: Duration,
    /// How long the redo peak lasts.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub peak_duration: Duration,
    /// Take what is not given from nettest JSON reports (an --rtt run gives the RTT, an
    /// ASYNC run the bandwidth one stream achieved). Repeatable.
    #[arg(long, value_name = "FILE")]
    pub from_nettest: Vec<PathBuf>,
    /// Also write the advice as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl AdviseArgs {
    /// Whether the link's advice can be given: a bandwidth and an RTT, given or from nettest
    /// reports.
    pub fn has_link(&self) -> bool {
        (self.bandwidth.is_some() && self.rtt.is_some()) || !self.from_nettest.is_empty()
    }

    /// The advice's input; `observed_redo_bytes_per_s` stands in for --redo-rate when that is
    /// not given (--from-status).
    pub fn input(&self, observed_redo_bytes_per_s: Option<f64>) -> anyhow::Result<AdviseInput> {
        use anyhow::Context;
        let mut bandwidth = self.bandwidth.map(|rate| rate.bits_per_s);
        let mut rtt = self.rtt;
        for path in &self.from_nettest {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read {}", path.display()))?;
            let report: crate::nettest::ClientReport = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a nettest --json report", path.display()))?;
            match report.mode {
                crate::nettest::Mode::Rtt => {
                    rtt = rtt.or(Some(Duration::from_secs_f64(report.lat_p50_us / 1e6)));
                }
                crate::nettest::Mode::Async if !report.write => {
                    bandwidth = bandwidth.or(Some(report.mbit_per_s * 1e6));
                }
                _ => {}
            }
        }
        let bandwidth_bits_per_s = bandwidth
            .context("no bandwidth: give --bandwidth, or a nettest ASYNC report without --write")?;
        let rtt = rtt.context("no RTT: give --rtt, or a nettest --rtt report")?;
        anyhow::ensure!(rtt > Duration::ZERO, "--rtt must be longer than zero");
        anyhow::ensure!(self.write_size.bytes() > 0, "--write-size must be at least one byte");
        Ok(AdviseInput {
            bandwidth_bits_per_s,
            rtt,
            redo_bytes_per_s: self
                .redo_rate
                .map(Rate::bytes_per_s)
                .or(observed_redo_bytes_per_s)
                .context("no redo rate: give --redo-rate, or --from-status")?,
            sockbuf_bytes: self.sockbuf.map(ByteSize::bytes),
            write_bytes: self.write_size.bytes(),
            standby_sync: self.standby_sync,
            latency_budget: self.latency_budget,
            peak_duration: self.peak_duration,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(bandwidth_bits_per_s: f64, rtt_ms: u64, redo_bytes_per_s: f64) -> AdviseInput {
        AdviseInput {
            bandwidth_bits_per_s,
            rtt: Duration::from_millis(rtt_ms),
            redo_bytes_per_s,
            sockbuf_bytes: None,
            write_bytes: 16 * 1024,
            standby_sync: None,
            latency_budget: Duration::from_millis(5),
            peak_duration: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_references_gigabit_example() {
        // 1 Gbit/s × 25 ms → BDP 3,125,000 bytes → buffers of 9,375,000 bytes.
        let advice = advise(&input(1e9, 25, 1_048_576.0));
        assert_eq!(advice.bdp_bytes, 3_125_000);
        assert_eq!(advice.recommended_sockbuf_bytes, 9_375_000);
        assert!(advice.text().contains("3,125,000 bytes"));
        assert!(advice.text().contains("9,375,000 bytes"));
        assert!(advice.kernel.iter().all(|setting| setting.needed == 9_375_000));
    }

    #[test]
    fn the_references_redo_example_counts_a_mb_of_redo_as_a_mib() {
        // 3 "MB"/s of redo = 3 × 1,048,576 bytes/s → 25.2 Mbit/s (1 Mbit = 1,000,000 bits).
        let redo: Rate = "3MiB/s".parse().unwrap();
        let advice = advise(&input(1e9, 25, redo.bytes_per_s()));
        assert!((advice.redo_mbit_per_s - 25.165824).abs() < 1e-9);
        assert!(advice.text().contains("Bandwidth needed      25.2 Mbit/s"), "{}", advice.text());
        assert!(advice.text().contains("3.00 MiB/s"));
    }

    #[test]
    fn sync_is_viable_on_a_short_fast_link_and_not_on_a_long_one() {
        let mut near = input(1e9, 1, 4.0 * 1_048_576.0);
        near.standby_sync = Some(Duration::from_micros(500));
        let advice = advise(&near);
        assert!(advice.sync_viable, "{:?}", advice.sync_reasons);
        // 1 ms + 16 KiB at 1 Gbit/s (0.131 ms) + 0.5 ms.
        assert!((advice.sync_added_latency_ms - 1.631072).abs() < 1e-6);
        let far = advise(&input(1e9, 100, 4.0 * 1_048_576.0));
        assert!(!far.sync_viable);
        assert!(far.sync_reasons[0].contains("over the 5.00 ms budget"));
    }

    #[test]
    fn compression_ratio_fits_the_peak_into_the_usable_share() {
        // 100 Mbit/s link, 20 MiB/s of redo = 167.8 Mbit/s; usable 70 Mbit/s → 2.4:1.
        let advice = advise(&input(100e6, 10, 20.0 * 1_048_576.0));
        assert!(advice.compression_needed);
        assert!((advice.compression_ratio_needed - 167.77216 / 70.0).abs() < 1e-9);
        assert!(advice.text().contains("at least 2.40:1"));
        let small = advise(&input(100e6, 10, 1_048_576.0));
        assert!(!small.compression_needed);
        assert_eq!(small.compression_ratio_needed, 1.0);
    }

    #[test]
    fn small_buffers_throttle_one_stream_and_grow_the_async_backlog() {
        // 16 KiB over 100 ms carries 1.31 Mbit/s, far below 20 MiB/s of redo.
        let mut slow = input(1e9, 100, 20.0 * 1_048_576.0);
        slow.sockbuf_bytes = Some(16 * 1024);
        let advice = advise(&slow);
        assert!((advice.stream_mbit_per_s - 1.31072).abs() < 1e-9);
        assert!(advice.async_backlog_grows);
        // A minute of peak takes (167.77 / 1.31 − 1) minutes ≈ 2 hours to drain.
        assert!(advice.async_exposure_s > 7000.0, "{}", advice.async_exposure_s);
        // With 3 × BDP the same link keeps up: exposure is half an RTT plus one write.
        let advice = advise(&input(1e9, 100, 20.0 * 1_048_576.0));
        assert!(!advice.async_backlog_grows);
        assert!((advice.async_exposure_s - (0.05 + 16384.0 * 8.0 / 1e9)).abs() < 1e-12);
    }

    #[test]
    fn kernel_settings_are_judged_against_current_values() {
        let advice = with_current_kernel_values(advise(&input(1e9, 25, 1e6)));
        if let Some(current) = advice.kernel[0].current {
            assert_eq!(advice.kernel[0].sufficient(), Some(current >= 9_375_000));
        }
    }

    #[test]
    fn sysctl_commands_raise_only_what_is_too_low() {
        let mut advice = advise(&input(1e9, 25, 1e6));
        advice.kernel[0].current = Some(4_194_304);
        advice.kernel[1].current = Some(64 << 20);
        advice.kernel[2].current = None;
        advice.kernel[3].current = Some(33_554_432);
        let commands = advice.sysctl_commands();
        assert_eq!(commands.len(), 2, "{commands:?}");
        assert_eq!(commands[0], "sysctl -w net.core.wmem_max=9375000");
        assert!(
            commands[1].starts_with("sysctl -w net.ipv4.tcp_wmem=\"")
                && commands[1].ends_with(" 9375000\"")
        );
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(9_375_000), "9,375,000");
    }
}
