//! Redo compression per destination: the configuration's choices (`compression`,
//! `compression_level`, `compression_for`), what a sender compresses, and the counters both
//! sides keep (bytes before and after, CPU time spent). The codecs and the frame are
//! `proto::compress`.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// A destination's codec. Default: `none`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    None,
    /// LZ4 (block format): cheap on CPU, about 2× on redo.
    Lz4,
    /// zstd at `compression_level`: more CPU, smaller.
    Zstd,
    /// zstd at `compression_level`, only while the link, not the CPU, is the bottleneck
    /// (`auto_compression`).
    Auto,
}

impl Compression {
    pub fn codec(self) -> Option<proto::Codec> {
        match self {
            Compression::None => None,
            Compression::Lz4 => Some(proto::Codec::Lz4),
            Compression::Zstd | Compression::Auto => Some(proto::Codec::Zstd),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Auto => "auto",
        }
    }
}

/// What a destination compresses. SYNC writes (the log writer's, on the SYNC connection) are
/// never compressed: they sit between a commit and its acknowledgement. Default: `gap`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionScope {
    /// Redo read back from the log files and the archive: catch-up after an outage or for a
    /// new standby, and archived logs shipped whole (gap resolution).
    #[default]
    Gap,
    /// Also the live ASYNC stream (the log writer's writes, from the destination's queue).
    All,
}

/// Default `compression_level`: zstd's fastest, which on redo still gains most of what higher
/// levels do (docs/config.md has measurements).
pub const COMPRESSION_LEVEL_DEFAULT: i32 = 1;
/// Bounds of `compression_level` (zstd's ordinary levels; 20..=22 need far more memory).
pub const COMPRESSION_LEVELS: std::ops::RangeInclusive<i32> = 1..=19;

/// Bytes before and after compression, frames, and the CPU time spent, on one side.
#[derive(Debug, Default)]
pub struct CompressionCounters {
    /// Redo-carrying frames that went through the codec (or, on a standby, came compressed).
    pub frames: AtomicU64,
    /// Their payload bytes uncompressed.
    pub bytes_uncompressed: AtomicU64,
    /// Their payload bytes on the wire.
    pub bytes_wire: AtomicU64,
    /// Thread CPU time spent compressing (primary) or decompressing (standby).
    pub cpu_ns: AtomicU64,
}

impl CompressionCounters {
    pub fn add(&self, uncompressed: usize, wire: usize, cpu_ns: u64) {
        self.frames.fetch_add(1, Ordering::Relaxed);
        self.bytes_uncompressed.fetch_add(uncompressed as u64, Ordering::Relaxed);
        self.bytes_wire.fetch_add(wire as u64, Ordering::Relaxed);
        self.cpu_ns.fetch_add(cpu_ns, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> CompressionCounts {
        let uncompressed = self.bytes_uncompressed.load(Ordering::Relaxed);
        let wire = self.bytes_wire.load(Ordering::Relaxed);
        CompressionCounts {
            frames: self.frames.load(Ordering::Relaxed),
            bytes_uncompressed: uncompressed,
            bytes_wire: wire,
            ratio: if wire == 0 { 1.0 } else { uncompressed as f64 / wire as f64 },
            cpu_s: self.cpu_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// What `CompressionCounters` hold, for status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CompressionCounts {
    pub frames: u64,
    pub bytes_uncompressed: u64,
    pub bytes_wire: u64,
    /// `bytes_uncompressed / bytes_wire` (1 when nothing was counted).
    pub ratio: f64,
    /// CPU seconds spent in the codec.
    pub cpu_s: f64,
}

/// A destination's compression, for status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DestinationCompression {
    /// `none`, `lz4` or `zstd`, as configured.
    pub codec: String,
    pub level: i32,
    /// `gap` or `all`.
    pub scope: CompressionScope,
    /// Whether the connected standby takes compressed frames (protocol version 3 or later);
    /// false while disconnected or with an older standby, which gets every frame uncompressed.
    pub active: bool,
    /// With `compression = "auto"`: whether it compresses now, and why (`on: …`, `off: …`).
    #[serde(default)]
    pub auto: Option<String>,
    /// With `compression = "auto"`, each open archive connection's own state (`on: …`,
    /// `off: …`), in the order they were opened; empty while none is open.
    #[serde(default)]
    pub archive_auto: Vec<String>,
    /// Frames the sender put through the codec (a frame compressing to no less than it was
    /// goes uncompressed and counts with equal bytes on both sides).
    pub counts: CompressionCounts,
}

/// CPU time this thread has used, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `time` is a valid timespec for the call to write.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    if result != 0 {
        return 0;
    }
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use crate::config::DestinationConfig;

    use super::*;

    fn parse(extra: &str) -> DestinationConfig {
        let text = format!(r#"{{"name": "s", "address": "127.0.0.1:1"{extra}}}"#);
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn the_keys_default_to_no_compression_and_refuse_a_level_out_of_bounds() {
        let plain = parse("");
        assert_eq!(
            (plain.compression, plain.compression_level, plain.compression_for),
            (Compression::None, COMPRESSION_LEVEL_DEFAULT, CompressionScope::Gap)
        );
        let zstd =
            parse(r#", "compression": "zstd", "compression_level": 3, "compression_for": "all""#);
        assert_eq!(zstd.compression.codec(), Some(proto::Codec::Zstd));
        assert_eq!(zstd.compression_for, CompressionScope::All);
        assert!(zstd.validate(&|name| name.to_string()).is_ok());
        let (field, reason) = parse(r#", "compression": "zstd", "compression_level": 22"#)
            .validate(&|name| name.to_string())
            .unwrap_err();
        assert_eq!(field, "compression_level");
        assert!(reason.contains("1..=19"), "{reason}");
        assert!(
            serde_json::from_str::<DestinationConfig>(
                r#"{"name": "s", "address": "127.0.0.1:1", "compression": "gzip"}"#
            )
            .is_err()
        );
    }

    #[test]
    fn counters_add_up_and_report_the_ratio() {
        let counters = CompressionCounters::default();
        assert_eq!(counters.snapshot().ratio, 1.0);
        counters.add(1000, 250, 2_000_000);
        counters.add(1000, 250, 1_000_000);
        let counts = counters.snapshot();
        assert_eq!((counts.frames, counts.bytes_uncompressed, counts.bytes_wire), (2, 2000, 500));
        assert_eq!(counts.ratio, 4.0);
        assert!((counts.cpu_s - 0.003).abs() < 1e-9);
        let before = thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_ns() > before, "the thread's CPU clock moves");
    }
}
