//! The operations a transaction is made of, and their results, with Redis's semantics.

use bytes::Bytes;

/// When a SET applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetCondition {
    Always,
    /// NX: only if the key does not exist.
    IfAbsent,
    /// XX: only if the key exists.
    IfPresent,
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Get { key: Bytes },
    MGet { keys: Vec<Bytes> },
    Exists { keys: Vec<Bytes> },
    Set { key: Bytes, value: Bytes, condition: SetCondition },
    MSet { pairs: Vec<(Bytes, Bytes)> },
    Del { keys: Vec<Bytes> },
    IncrBy { key: Bytes, increment: i64 },
}

impl Op {
    /// Whether the operation can change the key space.
    pub fn is_write(&self) -> bool {
        matches!(self, Op::Set { .. } | Op::MSet { .. } | Op::Del { .. } | Op::IncrBy { .. })
    }
}

/// The result of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    Ok,
    Nil,
    Value(Bytes),
    Integer(i64),
    Values(Vec<Option<Bytes>>),
    /// The operation failed (the rest of the transaction still ran, as in Redis).
    Error(String),
}

pub(crate) const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
pub(crate) const OVERFLOW: &str = "ERR increment or decrement would overflow";

/// Parses a value as Redis does for INCR: an optional minus sign and decimal digits, no
/// leading zeros or plus sign, within i64.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    if text == "0" {
        return Some(0);
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty()
        || digits.starts_with('0')
        || !digits.bytes().all(|byte| byte.is_ascii_digit())
    {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_integer(b"0"), Some(0));
        assert_eq!(parse_integer(b"-42"), Some(-42));
        assert_eq!(parse_integer(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_integer(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"007",
            b"+1",
            b" 1",
            b"1 ",
            b"1.0",
            b"9223372036854775808",
            b"abc",
        ] {
            assert_eq!(parse_integer(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
