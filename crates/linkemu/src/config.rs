//! What a link looks like: delay, rate, queue, loss, jitter, and the knobs of the devices.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Error;

/// Longest round-trip time a link accepts (a geostationary hop is about 0.6 s).
pub const RTT_MAX: Duration = Duration::from_secs(10);
/// Slowest rate a link accepts, in bits per second.
pub const RATE_BITS_PER_S_MIN: u64 = 8_000;
/// Fastest rate a link accepts, in bits per second (far above what the forwarder can carry).
pub const RATE_BITS_PER_S_MAX: u64 = 400_000_000_000;
/// Largest bottleneck queue, in bytes.
pub const QUEUE_BYTES_MAX: u64 = 1 << 30;
/// Smallest bottleneck queue, in bytes: one maximal offloaded packet must fit.
pub const QUEUE_BYTES_MIN: u64 = 64 * 1024 + 64;
/// Smallest default queue: what rate × RTT gives on a slow or short link is raised to this.
pub const QUEUE_BYTES_DEFAULT_MIN: u64 = 256 * 1024;
/// Largest socket buffer limit a link will raise `net.core.{w,r}mem_max` to.
pub const SOCKET_BUFFER_MAX_BYTES_MAX: u64 = 1 << 30;

/// The shape of an emulated link. Both directions are symmetrical.
///
/// Build one with [`LinkConfig::default`] and struct update syntax; [`LinkConfig::validate`]
/// refuses bad values by name (and [`crate::Link::up`] calls it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkConfig {
    /// Round-trip time the link adds: every packet is delayed by `rtt / 2` in each direction.
    /// Default: 0. Bounds: at most [`RTT_MAX`].
    pub rtt: Duration,
    /// Line rate in bits per second, or `None` for no cap (the forwarder's own ceiling).
    /// Default: `None`. Bounds: [`RATE_BITS_PER_S_MIN`]..=[`RATE_BITS_PER_S_MAX`].
    pub rate_bits_per_s: Option<u64>,
    /// Probability that a packet is dropped, per packet and direction, in `0.0..=1.0`.
    /// Default: 0.
    pub loss_ratio: f64,
    /// Drop-tail queue in front of the rate cap, in bytes (what a router's buffer holds).
    /// Default: `None` = rate × max(RTT, 10 ms), at least [`QUEUE_BYTES_DEFAULT_MIN`].
    /// Bounds: [`QUEUE_BYTES_MIN`]..=[`QUEUE_BYTES_MAX`]. Ignored without a rate cap.
    pub queue_bytes: Option<u64>,
    /// Each packet's one-way delay varies uniformly within ± `jitter` (never below zero);
    /// packets are never reordered, as on a single path. Default: 0. Bounds: at most rtt / 2.
    pub jitter: Duration,
    /// MTU of both TUN devices. Default: 1500. Bounds: 576..=65535.
    pub mtu: u32,
    /// Framing bytes charged per packet on top of its IP length when computing how long it
    /// occupies the line: 38 = Ethernet header 14 + FCS 4 + preamble 8 + inter-frame gap 12,
    /// so that a `1gbit` link carries at most ~941 Mbit/s of TCP payload, as gigabit
    /// Ethernet does. Default: 38. Bounds: at most 1000.
    pub framing_bytes: u32,
    /// Let the kernel hand the forwarder TCP super-packets of up to 64 KiB (TSO through
    /// `IFF_VNET_HDR`), each charged as the MTU-sized segments it stands for. This takes the
    /// forwarder's ceiling from ~1 Gbit/s to several. A lost super-packet loses all its
    /// segments at once, so links with `loss_ratio > 0` turn it off. Default: true.
    pub offload: bool,
    /// While the link is up, raise `net.core.wmem_max` and `net.core.rmem_max` (global, in
    /// the root namespace; they silently cap every `SO_SNDBUF`/`SO_RCVBUF` request) to at
    /// least this; the previous values are restored when the last link of any process on
    /// this machine goes down. Default: `Some(64 MiB)`. Bounds: at most 1 GiB.
    pub socket_buffer_max_bytes: Option<u64>,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            rtt: Duration::ZERO,
            rate_bits_per_s: None,
            loss_ratio: 0.0,
            queue_bytes: None,
            jitter: Duration::ZERO,
            mtu: 1500,
            framing_bytes: 38,
            offload: true,
            socket_buffer_max_bytes: Some(64 << 20),
        }
    }
}

impl LinkConfig {
    /// Refuses values out of bounds, naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |field: &'static str, reason: String| Err(Error::Config { field, reason });
        if self.rtt > RTT_MAX {
            return invalid(
                "rtt",
                format!("{:?} is longer than the maximum {RTT_MAX:?}", self.rtt),
            );
        }
        if let Some(rate) = self.rate_bits_per_s
            && !(RATE_BITS_PER_S_MIN..=RATE_BITS_PER_S_MAX).contains(&rate)
        {
            return invalid(
                "rate",
                format!(
                    "{rate} bit/s is outside {RATE_BITS_PER_S_MIN}..={RATE_BITS_PER_S_MAX} bit/s"
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.loss_ratio) {
            return invalid("loss", format!("{} is not a probability in 0..=1", self.loss_ratio));
        }
        if let Some(queue) = self.queue_bytes
            && !(QUEUE_BYTES_MIN..=QUEUE_BYTES_MAX).contains(&queue)
        {
            return invalid(
                "queue",
                format!("{queue} bytes is outside {QUEUE_BYTES_MIN}..={QUEUE_BYTES_MAX}"),
            );
        }
        if self.jitter > self.rtt / 2 {
            return invalid(
                "jitter",
                format!(
                    "{:?} is more than the one-way delay {:?} (rtt / 2)",
                    self.jitter,
                    self.rtt / 2
                ),
            );
        }
        if !(576..=65535).contains(&self.mtu) {
            return invalid("mtu", format!("{} is outside 576..=65535", self.mtu));
        }
        if self.framing_bytes > 1000 {
            return invalid("framing", format!("{} bytes is more than 1000", self.framing_bytes));
        }
        if let Some(limit) = self.socket_buffer_max_bytes
            && limit > SOCKET_BUFFER_MAX_BYTES_MAX
        {
            return invalid(
                "socket_buffer_max",
                format!("{limit} bytes is more than {SOCKET_BUFFER_MAX_BYTES_MAX}"),
            );
        }
        Ok(())
    }

    /// The drop-tail queue in bytes that this configuration gets (see [`Self::queue_bytes`]).
    pub fn effective_queue_bytes(&self) -> u64 {
        if let Some(queue) = self.queue_bytes {
            return queue;
        }
        let Some(rate) = self.rate_bits_per_s else { return QUEUE_BYTES_MAX };
        let horizon = self.rtt.max(Duration::from_millis(10));
        let bytes = (rate as f64 / 8.0 * horizon.as_secs_f64()) as u64;
        bytes.clamp(QUEUE_BYTES_DEFAULT_MIN, QUEUE_BYTES_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        LinkConfig::default().validate().unwrap();
    }

    #[test]
    fn refuses_each_bad_field_by_name() {
        let cases: Vec<(&str, LinkConfig)> = vec![
            ("rtt", LinkConfig { rtt: Duration::from_secs(11), ..LinkConfig::default() }),
            ("rate", LinkConfig { rate_bits_per_s: Some(10), ..LinkConfig::default() }),
            ("loss", LinkConfig { loss_ratio: 1.5, ..LinkConfig::default() }),
            ("loss", LinkConfig { loss_ratio: f64::NAN, ..LinkConfig::default() }),
            ("queue", LinkConfig { queue_bytes: Some(100), ..LinkConfig::default() }),
            (
                "jitter",
                LinkConfig {
                    rtt: Duration::from_millis(10),
                    jitter: Duration::from_millis(6),
                    ..LinkConfig::default()
                },
            ),
            ("mtu", LinkConfig { mtu: 100, ..LinkConfig::default() }),
            ("framing", LinkConfig { framing_bytes: 5000, ..LinkConfig::default() }),
            (
                "socket_buffer_max",
                LinkConfig { socket_buffer_max_bytes: Some(2 << 30), ..LinkConfig::default() },
            ),
        ];
        for (field, config) in cases {
            match config.validate() {
                Err(Error::Config { field: named, .. }) => assert_eq!(named, field),
                other => panic!("{field}: expected a config error, got {other:?}"),
            }
        }
    }

    #[test]
    fn default_queue_is_one_bdp_with_a_floor() {
        let gigabit = LinkConfig {
            rate_bits_per_s: Some(1_000_000_000),
            rtt: Duration::from_millis(25),
            ..LinkConfig::default()
        };
        assert_eq!(gigabit.effective_queue_bytes(), 3_125_000);
        let short = LinkConfig { rtt: Duration::ZERO, ..gigabit.clone() };
        assert_eq!(short.effective_queue_bytes(), 1_250_000);
        let slow = LinkConfig { rate_bits_per_s: Some(1_000_000), ..gigabit };
        assert_eq!(slow.effective_queue_bytes(), QUEUE_BYTES_DEFAULT_MIN);
    }
}
