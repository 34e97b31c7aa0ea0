//! Human units, on the command line and in configuration files: sizes (`9400`, `64KiB`, `1MiB`, `1MB`), durations (`10s`,
//! `500ms`, `2m`) and link rates (`1gbit`, `100mbit`, `20MB/s`).
//!
//! Sizes: a bare number is bytes; `K`/`M`/`G` with `B` are decimal (1 MB = 1,000,000 bytes) and
//! `KiB`/`MiB`/`GiB` are binary. Rates: `bit`-suffixed values are bits per second with decimal
//! prefixes (1 Mbit = 1,000,000 bits, as network people count them); `B/s`-suffixed values are
//! bytes per second with the same size rules.

use std::fmt;
use std::time::Duration;

/// A size in bytes, parsed from a human string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<ByteSize, String> {
        parse_size(text).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_bytes(self.0))
    }
}

/// Parses a size: `9400`, `64KiB`, `1MiB`, `1.5GiB`, `1MB`, `512k` (lower-case `k`/`m`/`g`
/// without `B` are binary, as `dd` users expect).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size (examples: 9400, 64KiB, 1MiB)"))?;
    let multiplier: f64 = match unit.trim() {
        "" | "B" | "b" => 1.0,
        "KiB" | "k" | "K" | "Ki" => 1024.0,
        "MiB" | "m" | "M" | "Mi" => 1024.0 * 1024.0,
        "GiB" | "g" | "G" | "Gi" => 1024.0 * 1024.0 * 1024.0,
        "TiB" | "Ti" => 1024.0f64.powi(4),
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "'{text}': unknown size unit '{other}' (use B, KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    let bytes = value * multiplier;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{text}' is out of range"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("'{text}' is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Parses a duration: `10s`, `500ms`, `2m`, `1h`, `250us`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if let Ok(seconds) = trimmed.parse::<f64>()
        && seconds.is_finite()
        && seconds >= 0.0
    {
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("'{text}' is out of range for a duration"));
    }
    humantime::parse_duration(trimmed)
        .map_err(|error| format!("'{text}' is not a duration ({error}; examples: 10s, 500ms, 2m)"))
}

/// A link or transfer rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Rate {
    pub bits_per_s: f64,
}

impl Rate {
    pub fn bytes_per_s(self) -> f64 {
        self.bits_per_s / 8.0
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(text: &str) -> Result<Rate, String> {
        parse_rate(text)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = self.bits_per_s;
        if bits >= 1e9 {
            write!(f, "{:.3} Gbit/s", bits / 1e9)
        } else if bits >= 1e6 {
            write!(f, "{:.3} Mbit/s", bits / 1e6)
        } else if bits >= 1e3 {
            write!(f, "{:.3} kbit/s", bits / 1e3)
        } else {
            write!(f, "{bits:.0} bit/s")
        }
    }
}

/// Parses a rate: `1gbit`, `100mbit`, `10kbit` (decimal bits per second), or `20MB/s`,
/// `5MiB/s` (bytes per second, converted to bits).
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    for (suffix, multiplier) in [
        ("gbit/s", 1e9),
        ("mbit/s", 1e6),
        ("kbit/s", 1e3),
        ("bit/s", 1.0),
        ("gbit", 1e9),
        ("mbit", 1e6),
        ("kbit", 1e3),
        ("bit", 1.0),
        ("gbps", 1e9),
        ("mbps", 1e6),
        ("kbps", 1e3),
    ] {
        if let Some(number) = lower.strip_suffix(suffix) {
            let value: f64 = number.trim().parse().map_err(|_| {
                format!("'{text}' is not a rate (examples: 1gbit, 100mbit, 20MB/s)")
            })?;
            if !value.is_finite() || value <= 0.0 {
                return Err(format!("'{text}': a rate must be positive"));
            }
            return Ok(Rate { bits_per_s: value * multiplier });
        }
    }
    if let Some(size) = trimmed.strip_suffix("/s") {
        let bytes = parse_size(size)?;
        if bytes == 0 {
            return Err(format!("'{text}': a rate must be positive"));
        }
        return Ok(Rate { bits_per_s: bytes as f64 * 8.0 });
    }
    Err(format!("'{text}' is not a rate (examples: 1gbit, 100mbit, 20MB/s)"))
}

/// Parses a ratio: `0.1%` (a percentage) or `0.001` (a fraction), within 0..=1.
pub fn parse_ratio(text: &str) -> Result<f64, String> {
    let trimmed = text.trim();
    let (number, scale) = match trimmed.strip_suffix('%') {
        Some(number) => (number.trim(), 100.0),
        None => (trimmed, 1.0),
    };
    let value: f64 =
        number.parse().map_err(|_| format!("'{text}' is not a ratio (examples: 0.1%, 0.001)"))?;
    let ratio = value / scale;
    if !(0.0..=1.0).contains(&ratio) {
        return Err(format!("'{text}' is outside 0..=100%"));
    }
    Ok(ratio)
}

/// `1536` → `1.5 KiB`: binary units, for sizes a person reads.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("9400"), Ok(9400));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1MB"), Ok(1_000_000));
        assert_eq!(parse_size("512k"), Ok(512 * 1024));
        assert!(parse_size("12 parsecs").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("").is_err());
        assert!(parse_size("0.5").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1gbit").map(|r| r.bits_per_s), Ok(1e9));
        assert_eq!(parse_rate("100mbit").map(|r| r.bits_per_s), Ok(1e8));
        assert_eq!(parse_rate("20MB/s").map(|r| r.bits_per_s), Ok(160e6));
        assert_eq!(parse_rate("1MiB/s").map(|r| r.bits_per_s), Ok(8.0 * 1048576.0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0mbit").is_err());
        assert_eq!(parse_rate("1gbit").map(|r| r.to_string()), Ok("1.000 Gbit/s".to_string()));
    }

    #[test]
    fn ratios() {
        assert_eq!(parse_ratio("0.1%"), Ok(0.001));
        assert_eq!(parse_ratio("0.25"), Ok(0.25));
        assert_eq!(parse_ratio("100%"), Ok(1.0));
        assert!(parse_ratio("150%").is_err());
        assert!(parse_ratio("-1").is_err());
        assert!(parse_ratio("lots").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_bytes(100), "100 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(64 << 20), "64.0 MiB");
    }
}

/// Serde helpers for configuration files: a size may be written as a number of bytes
/// (`67108864`) or a human string (`"64MiB"`); a duration as milliseconds or `"500ms"`.
pub mod serde_human {
    use std::time::Duration;

    use serde::de::{self, Deserializer, Visitor};
    use serde::ser::Serializer;

    /// `#[serde(with = "units::serde_human::size")]` on a `u64` byte count.
    pub mod size {
        use super::*;

        pub fn serialize<S: Serializer>(bytes: &u64, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_u64(*bytes)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
            struct SizeVisitor;
            impl Visitor<'_> for SizeVisitor {
                type Value = u64;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a size: a number of bytes or a string such as \"64MiB\"")
                }
                fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
                    Ok(value)
                }
                fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
                    u64::try_from(value)
                        .map_err(|_| E::custom(format!("a size cannot be negative ({value})")))
                }
                fn visit_str<E: de::Error>(self, value: &str) -> Result<u64, E> {
                    crate::parse_size(value).map_err(E::custom)
                }
            }
            deserializer.deserialize_any(SizeVisitor)
        }
    }

    /// `#[serde(with = "units::serde_human::size_usize")]` on a `usize` byte count (a size
    /// beyond `usize` is refused, naming it).
    pub mod size_usize {
        use super::*;

        pub fn serialize<S: Serializer>(bytes: &usize, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_u64(*bytes as u64)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
            let bytes = super::size::deserialize(deserializer)?;
            usize::try_from(bytes).map_err(|_| {
                de::Error::custom(format!("{bytes} bytes is more than this machine can address"))
            })
        }
    }

    /// `#[serde(with = "units::serde_human::duration")]` on a `Duration`.
    pub mod duration {
        use super::*;

        pub fn serialize<S: Serializer>(
            duration: &Duration,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(&humantime::format_duration(*duration).to_string())
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Duration, D::Error> {
            struct DurationVisitor;
            impl Visitor<'_> for DurationVisitor {
                type Value = Duration;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(
                        "a duration: milliseconds, or a string such as \"500ms\" or \"30s\"",
                    )
                }
                fn visit_u64<E: de::Error>(self, value: u64) -> Result<Duration, E> {
                    Ok(Duration::from_millis(value))
                }
                fn visit_i64<E: de::Error>(self, value: i64) -> Result<Duration, E> {
                    u64::try_from(value)
                        .map(Duration::from_millis)
                        .map_err(|_| E::custom(format!("a duration cannot be negative ({value})")))
                }
                fn visit_str<E: de::Error>(self, value: &str) -> Result<Duration, E> {
                    crate::parse_duration(value).map_err(E::custom)
                }
            }
            deserializer.deserialize_any(DurationVisitor)
        }
    }

    #[cfg(test)]
    mod tests {
        use std::time::Duration;

        #[derive(Debug, serde::Deserialize, serde::Serialize, PartialEq)]
        struct Example {
            #[serde(with = "super::size")]
            size: u64,
            #[serde(with = "super::duration")]
            wait: Duration,
        }

        #[test]
        fn sizes_and_durations_in_either_form() {
            let human: Example =
                serde_json::from_str(r#"{"size": "64MiB", "wait": "250ms"}"#).unwrap();
            let plain: Example =
                serde_json::from_str(r#"{"size": 67108864, "wait": 250}"#).unwrap();
            assert_eq!(human, plain);
            assert_eq!(human.size, 64 << 20);
            assert_eq!(human.wait, Duration::from_millis(250));
            let error =
                serde_json::from_str::<Example>(r#"{"size": "lots", "wait": 1}"#).unwrap_err();
            assert!(error.to_string().contains("not a size"), "{error}");
            let error = serde_json::from_str::<Example>(r#"{"size": -1, "wait": 1}"#).unwrap_err();
            assert!(error.to_string().contains("negative"), "{error}");
        }
    }
}
