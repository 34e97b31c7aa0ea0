//! `compression = "auto"`: compress (zstd at `compression_level`) only while the link, not the
//! CPU, is what holds a destination back, and say when that changes.
//!
//! The sender measures, per one-second window, how long its sends of redo blocked on the
//! socket (the link is full: the kernel's send buffer does not drain) and how much CPU the
//! codec took. It starts uncompressed and:
//! - switches compression **on** when sends blocked at least half of the window;
//! - switches it **off** when the codec took at least 80 % of a core while sends blocked
//!   under 20 % (the CPU is the bottleneck), or when the link would not be busy even
//!   uncompressed: sends blocked under a quarter of the window after scaling by the ratio
//!   (compressed bytes are what relieved it; the quarter against the half is the hysteresis
//!   that keeps it from flapping).
//!
//! Each switch is logged with its reason and shown in the destination's status.

use std::time::{Duration, Instant};

/// The window each decision looks at.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Sends blocked this share of a window: the link is the bottleneck.
const LINK_BUSY_ON: f64 = 0.5;
/// Below this share (scaled to uncompressed bytes) the link would not be a bottleneck.
const LINK_BUSY_OFF: f64 = 0.25;
/// The codec took this share of a core ...
const CPU_BUSY_OFF: f64 = 0.8;
/// ... while sends blocked less than this: the CPU is the bottleneck.
const LINK_IDLE_WITH_CPU: f64 = 0.2;

/// The decision of one destination (used by its sender thread only).
#[derive(Debug)]
pub struct AutoCompression {
    compressing: bool,
    reason: String,
    window_start: Instant,
    send_blocked: Duration,
    codec_cpu: Duration,
    bytes_uncompressed: u64,
    bytes_wire: u64,
}

impl AutoCompression {
    pub fn new(now: Instant) -> AutoCompression {
        AutoCompression {
            compressing: false,
            reason: "not compressing until the link is the bottleneck".into(),
            window_start: now,
            send_blocked: Duration::ZERO,
            codec_cpu: Duration::ZERO,
            bytes_uncompressed: 0,
            bytes_wire: 0,
        }
    }

    /// Whether to compress the next redo frame.
    pub fn compressing(&self) -> bool {
        self.compressing
    }

    /// The state and why, for status.
    pub fn describe(&self) -> String {
        format!("{}: {}", if self.compressing { "on" } else { "off" }, self.reason)
    }

    /// A redo frame was sent: how long the send blocked on the socket, the CPU the codec
    /// took (zero uncompressed), and its payload before and after.
    pub fn record(&mut self, blocked: Duration, codec_cpu: Duration, uncompressed: u64, wire: u64) {
        self.send_blocked += blocked;
        self.codec_cpu += codec_cpu;
        self.bytes_uncompressed += uncompressed;
        self.bytes_wire += wire;
    }

    /// Once a window has passed, decides; returns the new state's description when it
    /// switched.
    pub fn decide(&mut self, now: Instant) -> Option<String> {
        let elapsed = now.saturating_duration_since(self.window_start);
        if elapsed < WINDOW {
            return None;
        }
        let seconds = elapsed.as_secs_f64();
        let link_busy = self.send_blocked.as_secs_f64() / seconds;
        let cpu_busy = self.codec_cpu.as_secs_f64() / seconds;
        let ratio = if self.bytes_wire == 0 {
            1.0
        } else {
            self.bytes_uncompressed as f64 / self.bytes_wire as f64
        };
        let switched = if !self.compressing && link_busy >= LINK_BUSY_ON {
            Some(format!(
                "the link is the bottleneck: sends blocked {:.0} % of the last {seconds:.1} s",
                link_busy * 100.0
            ))
        } else if self.compressing && cpu_busy >= CPU_BUSY_OFF && link_busy < LINK_IDLE_WITH_CPU {
            Some(format!(
                "the CPU is the bottleneck: compressing took {:.0} % of a core while sends blocked {:.0} %",
                cpu_busy * 100.0,
                link_busy * 100.0
            ))
        } else if self.compressing && link_busy * ratio < LINK_BUSY_OFF {
            Some(format!(
                "the link is not the bottleneck: sends would block about {:.0} % uncompressed",
                link_busy * ratio * 100.0
            ))
        } else {
            None
        };
        self.window_start = now;
        self.send_blocked = Duration::ZERO;
        self.codec_cpu = Duration::ZERO;
        self.bytes_uncompressed = 0;
        self.bytes_wire = 0;
        let reason = switched?;
        self.compressing = !self.compressing;
        self.reason = reason;
        Some(self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn it_compresses_while_the_link_blocks_and_stops_when_it_would_not() {
        let start = Instant::now();
        let mut auto = AutoCompression::new(start);
        assert!(!auto.compressing());
        // A window whose sends hardly blocked: no change.
        auto.record(ms(100), ms(0), 10 << 20, 10 << 20);
        assert_eq!(auto.decide(start + ms(500)), None, "before the window ends");
        assert_eq!(auto.decide(start + ms(1000)), None);
        assert!(!auto.compressing());
        // Sends blocked 70 % of a window: on.
        auto.record(ms(700), ms(0), 10 << 20, 10 << 20);
        let said = auto.decide(start + ms(2000)).expect("switched on");
        assert!(auto.compressing() && said.contains("link is the bottleneck"), "{said}");
        // Compressed 4:1, sends block 20 %: uncompressed they would block 80 %: stays on.
        auto.record(ms(200), ms(300), 40 << 20, 10 << 20);
        assert_eq!(auto.decide(start + ms(3000)), None);
        assert!(auto.compressing());
        // The load falls: sends block 2 % at 4:1 (8 % uncompressed): off.
        auto.record(ms(20), ms(30), 4 << 20, 1 << 20);
        let said = auto.decide(start + ms(4000)).expect("switched off");
        assert!(!auto.compressing() && said.contains("not the bottleneck"), "{said}");
        assert!(auto.describe().starts_with("off: "));
    }

    #[test]
    fn it_stops_when_the_cpu_is_the_bottleneck() {
        let start = Instant::now();
        let mut auto = AutoCompression::new(start);
        auto.record(ms(900), ms(0), 10 << 20, 10 << 20);
        auto.decide(start + ms(1000)).expect("on");
        // The codec takes 90 % of a core; sends block 10 % even though, scaled by a 5:1
        // ratio, the link would be half busy uncompressed.
        auto.record(ms(100), ms(900), 50 << 20, 10 << 20);
        let said = auto.decide(start + ms(2000)).expect("switched off");
        assert!(!auto.compressing() && said.contains("CPU is the bottleneck"), "{said}");
    }
}
