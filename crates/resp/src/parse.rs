//! The generic RESP2/RESP3 frame decoder: a cheap [`Frame::check`], then an allocating
//! [`Frame::parse`]. Used for replies (clients, tests, tools); servers decode requests with the
//! stricter [`RequestDecoder`](crate::RequestDecoder).

use bytes::{Bytes, BytesMut};

use crate::error::ProtocolError;
use crate::frame::Frame;
use crate::limits::Limits;

/// Longest line a number (integer, length, count, double) may take before its `\r\n`. The
/// longest valid i64 is 20 bytes; doubles may carry more digits than they need.
pub(crate) const NUMBER_LINE_BYTES_MAX: usize = 64;

impl Frame {
    /// Says whether `buffer` starts with one whole frame and, if so, how many bytes it takes.
    /// Allocates nothing. `Ok(None)` means "need more bytes"; limits are enforced as soon as a
    /// length or count is read, so an announced 4 GB bulk is refused before its bytes arrive.
    pub fn check(buffer: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
        Ok(read(buffer, 0, 0, limits, None)?.map(|(end, _)| end))
    }

    /// Builds the frame from exactly the bytes that [`Frame::check`] measured. Bulk strings
    /// share `frame`'s memory. Bytes that are not one whole valid frame are an error, never a
    /// panic.
    pub fn parse(frame: &Bytes, limits: &Limits) -> Result<Frame, ProtocolError> {
        match read(frame, 0, 0, limits, Some(frame))? {
            Some((end, Some(parsed))) if end == frame.len() => Ok(parsed),
            _ => Err(ProtocolError::Incomplete),
        }
    }

    /// Checks, then splits one whole frame off the front of `buffer` and parses it.
    pub fn decode(buffer: &mut BytesMut, limits: &Limits) -> Result<Option<Frame>, ProtocolError> {
        match Frame::check(buffer, limits)? {
            None => Ok(None),
            Some(length) => {
                let frame = buffer.split_to(length).freeze();
                Frame::parse(&frame, limits).map(Some)
            }
        }
    }
}

/// What a successful read gives: where the frame ends and, when building, the frame.
type ReadResult = Result<Option<(usize, Option<Frame>)>, ProtocolError>;

/// Reads one frame starting at `start`, `depth` aggregates deep. With `source` (the same bytes
/// as `buffer`, shared) it builds the frame; without, it only validates and measures, which is
/// the check. One function for both keeps check and parse from ever disagreeing.
fn read(
    buffer: &[u8],
    start: usize,
    depth: usize,
    limits: &Limits,
    source: Option<&Bytes>,
) -> ReadResult {
    let Some(&kind) = buffer.get(start) else { return Ok(None) };
    let body = start + 1;
    let slice = |from: usize, to: usize| source.map(|bytes| bytes.slice(from..to));
    match kind {
        b'+' | b'-' | b'(' => {
            let (name, max) = match kind {
                b'+' => ("simple string", limits.bulk_bytes_max),
                b'-' => ("error", limits.bulk_bytes_max),
                _ => ("big number", limits.bulk_bytes_max),
            };
            let Some(line_end) = find_line_end(buffer, body, max, name, limits)? else {
                return Ok(None);
            };
            let text = &buffer[body..line_end];
            if kind == b'(' && !is_big_number(text) {
                return Err(ProtocolError::InvalidValue("big number"));
            }
            let frame = slice(body, line_end).map(|text| match kind {
                b'+' => Frame::Simple(text),
                b'-' => Frame::Error(text),
                _ => Frame::BigNumber(text),
            });
            Ok(Some((line_end + 2, frame)))
        }
        b':' | b',' | b'#' | b'_' => {
            let name = match kind {
                b':' => "integer",
                b',' => "double",
                b'#' => "boolean",
                _ => "null",
            };
            let Some(line_end) = find_line_end(buffer, body, NUMBER_LINE_BYTES_MAX, name, limits)?
            else {
                return Ok(None);
            };
            let text = &buffer[body..line_end];
            let frame = match kind {
                b':' => {
                    Frame::Integer(parse_signed(text).ok_or(ProtocolError::InvalidValue(name))?)
                }
                b',' => Frame::Double(parse_double(text).ok_or(ProtocolError::InvalidValue(name))?),
                b'#' => match text {
                    b"t" => Frame::Boolean(true),
                    b"f" => Frame::Boolean(false),
                    _ => return Err(ProtocolError::InvalidValue(name)),
                },
                _ if text.is_empty() => Frame::Null,
                _ => return Err(ProtocolError::InvalidValue(name)),
            };
            Ok(Some((line_end + 2, source.map(|_| frame))))
        }
        b'$' | b'!' | b'=' => {
            let name = match kind {
                b'$' => "bulk length",
                b'!' => "bulk error length",
                _ => "verbatim string length",
            };
            let Some(line_end) = find_line_end(buffer, body, NUMBER_LINE_BYTES_MAX, name, limits)?
            else {
                return Ok(None);
            };
            let text = &buffer[body..line_end];
            if kind == b'$' && text == b"-1" {
                return Ok(Some((line_end + 2, source.map(|_| Frame::Null))));
            }
            let length = parse_length(text).ok_or(ProtocolError::InvalidBulkLength)?;
            if length > limits.bulk_bytes_max as u64 {
                return Err(ProtocolError::BulkTooLong { length, max: limits.bulk_bytes_max });
            }
            let data_start = line_end + 2;
            let data_end = data_start + length as usize;
            let end = data_end + 2;
            refuse_beyond_request_max(end, limits)?;
            if buffer.len() < end {
                return Ok(None);
            }
            if &buffer[data_end..end] != b"\r\n" {
                return Err(ProtocolError::ExpectedLineEnd("bulk string"));
            }
            if kind == b'=' && (length < 4 || buffer[data_start + 3] != b':') {
                return Err(ProtocolError::InvalidValue("verbatim string: expected 'fmt:' first"));
            }
            let frame = slice(data_start, data_end).map(|data| match kind {
                b'$' => Frame::Bulk(data),
                b'!' => Frame::BulkError(data),
                _ => Frame::Verbatim { format: [data[0], data[1], data[2]], text: data.slice(4..) },
            });
            Ok(Some((end, frame)))
        }
        b'*' | b'~' | b'>' | b'%' => {
            let Some(line_end) =
                find_line_end(buffer, body, NUMBER_LINE_BYTES_MAX, "aggregate length", limits)?
            else {
                return Ok(None);
            };
            let text = &buffer[body..line_end];
            if kind == b'*' && text == b"-1" {
                return Ok(Some((line_end + 2, source.map(|_| Frame::NullArray))));
            }
            let count = parse_length(text).ok_or(ProtocolError::InvalidMultibulkLength)?;
            if count > limits.arguments_max as u64 {
                return Err(ProtocolError::TooManyArguments { count, max: limits.arguments_max });
            }
            if depth >= limits.depth_max {
                return Err(ProtocolError::TooDeep { max: limits.depth_max });
            }
            let elements = if kind == b'%' { count as usize * 2 } else { count as usize };
            let mut position = line_end + 2;
            // Every element takes at least three bytes ("_\r\n"), so the capacity is bounded by
            // the bytes present, never by a count the peer made up.
            let capacity = elements.min(buffer.len().saturating_sub(position) / 3);
            let mut items = source.map(|_| Vec::with_capacity(capacity));
            for _ in 0..elements {
                let Some((end, item)) = read(buffer, position, depth + 1, limits, source)? else {
                    return Ok(None);
                };
                position = end;
                if let (Some(items), Some(item)) = (items.as_mut(), item) {
                    items.push(item);
                }
            }
            let frame = items.map(|items| match kind {
                b'*' => Frame::Array(items),
                b'~' => Frame::Set(items),
                b'>' => Frame::Push(items),
                _ => {
                    let mut pairs = Vec::with_capacity(items.len() / 2);
                    let mut items = items.into_iter();
                    while let (Some(key), Some(value)) = (items.next(), items.next()) {
                        pairs.push((key, value));
                    }
                    Frame::Map(pairs)
                }
            });
            Ok(Some((position, frame)))
        }
        other => Err(ProtocolError::UnknownType(other)),
    }
}

/// Finds the `\r` of the `\r\n` that ends the line starting at `start`, which may be at most
/// `max` bytes long. `Ok(None)` if the line is not complete yet. The answer depends only on the
/// bytes, never on how many have arrived, so any split of a stream decodes the same.
fn find_line_end(
    buffer: &[u8],
    start: usize,
    max: usize,
    kind: &'static str,
    limits: &Limits,
) -> Result<Option<usize>, ProtocolError> {
    let available = buffer.len().saturating_sub(start);
    let window = available.min(max.saturating_add(1));
    match memchr::memchr(b'\r', &buffer[start..start + window]) {
        Some(offset) => {
            let line_end = start + offset;
            refuse_beyond_request_max(line_end + 2, limits)?;
            match buffer.get(line_end + 1) {
                None => Ok(None),
                Some(b'\n') => Ok(Some(line_end)),
                Some(_) => Err(ProtocolError::ExpectedLineEnd(kind)),
            }
        }
        None if available > max => Err(ProtocolError::LineTooLong { kind, max }),
        None => {
            refuse_beyond_request_max(buffer.len(), limits)?;
            Ok(None)
        }
    }
}

fn refuse_beyond_request_max(end: usize, limits: &Limits) -> Result<(), ProtocolError> {
    if end > limits.request_bytes_max {
        return Err(ProtocolError::RequestTooBig {
            length: end as u64,
            max: limits.request_bytes_max,
        });
    }
    Ok(())
}

/// A length or count: decimal digits only, no sign, no leading zero (Redis's `string2ll` rules).
pub(crate) fn parse_length(text: &[u8]) -> Option<u64> {
    match text {
        [b'0'] => Some(0),
        [b'1'..=b'9', ..] if text.len() <= 19 => {
            let mut value: u64 = 0;
            for &byte in text {
                if !byte.is_ascii_digit() {
                    return None;
                }
                value = value * 10 + u64::from(byte - b'0');
            }
            Some(value)
        }
        _ => None,
    }
}

/// A signed 64-bit integer as RESP3 allows it: optional `+` or `-`, then digits.
fn parse_signed(text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?;
    if text.is_empty() || text.len() > 21 {
        return None;
    }
    text.parse().ok()
}

fn parse_double(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    // Rust's parser takes the forms RESP3 needs ("1.5", "1e300", "inf", "-inf", "nan") and a
    // few harmless extra ones ("infinity", "+2"); refuse whitespace and empty text explicitly.
    if text.is_empty() || text.bytes().any(|byte| byte.is_ascii_whitespace()) {
        return None;
    }
    text.parse().ok()
}

fn is_big_number(text: &[u8]) -> bool {
    let digits = match text {
        [b'-' | b'+', rest @ ..] => rest,
        _ => text,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::ProtocolVersion;

    fn limits() -> Limits {
        Limits::default()
    }

    fn parse_all(bytes: &[u8]) -> Result<Option<Frame>, ProtocolError> {
        let mut buffer = BytesMut::from(bytes);
        let frame = Frame::decode(&mut buffer, &limits())?;
        if frame.is_some() {
            assert!(buffer.is_empty(), "left over: {:?}", buffer);
        }
        Ok(frame)
    }

    #[test]
    fn every_type_decodes() {
        let cases: Vec<(&[u8], Frame)> = vec![
            (b"+OK\r\n", Frame::ok()),
            (b"-ERR x\r\n", Frame::error("ERR x")),
            (b":-7\r\n", Frame::Integer(-7)),
            (b":+7\r\n", Frame::Integer(7)),
            (b"$3\r\na\r\n\r\n", Frame::bulk("a\r\n")),
            (b"$-1\r\n", Frame::Null),
            (b"*-1\r\n", Frame::NullArray),
            (b"_\r\n", Frame::Null),
            (b"*2\r\n:1\r\n$0\r\n\r\n", Frame::Array(vec![Frame::Integer(1), Frame::bulk("")])),
            (b"%1\r\n+k\r\n#t\r\n", Frame::Map(vec![(Frame::simple("k"), Frame::Boolean(true))])),
            (b"~1\r\n#f\r\n", Frame::Set(vec![Frame::Boolean(false)])),
            (b">1\r\n_\r\n", Frame::Push(vec![Frame::Null])),
            (b",1.5\r\n", Frame::Double(1.5)),
            (b",-inf\r\n", Frame::Double(f64::NEG_INFINITY)),
            (b"(-12345678901234567890\r\n", Frame::BigNumber("-12345678901234567890".into())),
            (b"=8\r\nmkd:*hi*\r\n", Frame::Verbatim { format: *b"mkd", text: "*hi*".into() }),
            (b"!3\r\nERR\r\n", Frame::BulkError("ERR".into())),
        ];
        for (bytes, expected) in cases {
            assert_eq!(parse_all(bytes), Ok(Some(expected)), "{}", bytes.escape_ascii());
        }
        let Ok(Some(Frame::Double(nan))) = parse_all(b",nan\r\n") else { panic!() };
        assert!(nan.is_nan());
    }

    #[test]
    fn every_proper_prefix_needs_more_bytes() {
        let frame = Frame::Array(vec![
            Frame::Map(vec![(Frame::bulk("key"), Frame::Double(2.5))]),
            Frame::Verbatim { format: *b"txt", text: "x".into() },
            Frame::Null,
            Frame::BigNumber("1".into()),
        ]);
        let bytes = frame.to_bytes(ProtocolVersion::Resp3);
        for cut in 0..bytes.len() {
            assert_eq!(Frame::check(&bytes[..cut], &limits()), Ok(None), "cut at {cut}");
        }
        assert_eq!(Frame::check(&bytes, &limits()), Ok(Some(bytes.len())));
    }

    #[test]
    fn malformed_frames_are_errors() {
        let cases: Vec<(&[u8], ProtocolError)> = vec![
            (b"?x\r\n", ProtocolError::UnknownType(b'?')),
            (b":12a\r\n", ProtocolError::InvalidValue("integer")),
            (b":\r\n", ProtocolError::InvalidValue("integer")),
            (b",\r\n", ProtocolError::InvalidValue("double")),
            (b"#x\r\n", ProtocolError::InvalidValue("boolean")),
            (b"_x\r\n", ProtocolError::InvalidValue("null")),
            (b"(1a\r\n", ProtocolError::InvalidValue("big number")),
            (b"$-2\r\n", ProtocolError::InvalidBulkLength),
            (b"$01\r\n", ProtocolError::InvalidBulkLength),
            (b"$1\r\nab\r\n", ProtocolError::ExpectedLineEnd("bulk string")),
            (b"+OK\rX", ProtocolError::ExpectedLineEnd("simple string")),
            (b"*x\r\n", ProtocolError::InvalidMultibulkLength),
            (b"~-1\r\n", ProtocolError::InvalidMultibulkLength),
            (
                b"=3\r\ntxt\r\n",
                ProtocolError::InvalidValue("verbatim string: expected 'fmt:' first"),
            ),
        ];
        for (bytes, expected) in cases {
            assert_eq!(Frame::check(bytes, &limits()), Err(expected), "{}", bytes.escape_ascii());
        }
    }

    #[test]
    fn limits_are_enforced_before_the_bytes_arrive() {
        let limits = limits();
        assert_eq!(
            Frame::check(b"$4294967296\r\n", &limits),
            Err(ProtocolError::BulkTooLong { length: 4_294_967_296, max: limits.bulk_bytes_max })
        );
        assert_eq!(
            Frame::check(b"*99999999999\r\n", &limits),
            Err(ProtocolError::TooManyArguments { count: 99_999_999_999, max: 1_048_576 })
        );
        let small = Limits { bulk_bytes_max: 1024, request_bytes_max: 2000, ..Limits::default() };
        assert_eq!(
            Frame::check(b"*2\r\n$1000\r\n", &small).unwrap(),
            None,
            "one bulk fits the request"
        );
        let mut two = b"*2\r\n$1000\r\n".to_vec();
        two.extend_from_slice(&[b'x'; 1000]);
        two.extend_from_slice(b"\r\n$1000\r\n");
        assert_eq!(
            Frame::check(&two, &small),
            Err(ProtocolError::RequestTooBig { length: 2022, max: 2000 })
        );
        assert_eq!(
            Frame::check(&[b':'; 80], &limits),
            Err(ProtocolError::LineTooLong { kind: "integer", max: NUMBER_LINE_BYTES_MAX })
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let limits = Limits { depth_max: 3, ..Limits::default() };
        assert!(Frame::check(b"*1\r\n*1\r\n*1\r\n:1\r\n", &limits).unwrap().is_some());
        assert_eq!(
            Frame::check(b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", &limits),
            Err(ProtocolError::TooDeep { max: 3 })
        );
        // The default bound keeps a hostile nesting far from the thread's stack limit.
        let deep = b"*1\r\n".repeat(100_000);
        assert_eq!(
            Frame::check(&deep, &Limits::default()),
            Err(ProtocolError::TooDeep { max: 32 })
        );
    }

    #[test]
    fn parse_refuses_bytes_that_are_not_one_whole_frame() {
        let limits = limits();
        assert_eq!(
            Frame::parse(&Bytes::from_static(b"+OK\r"), &limits),
            Err(ProtocolError::Incomplete)
        );
        assert_eq!(
            Frame::parse(&Bytes::from_static(b"+OK\r\n+OK\r\n"), &limits),
            Err(ProtocolError::Incomplete)
        );
    }

    #[test]
    fn lengths_follow_redis_rules() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"123"), Some(123));
        assert_eq!(parse_length(b"9223372036854775807"), Some(i64::MAX as u64));
        for bad in [&b""[..], b"00", b"01", b"-1", b"+1", b"1 ", b"99999999999999999999"] {
            assert_eq!(parse_length(bad), None, "{}", bad.escape_ascii());
        }
    }
}
