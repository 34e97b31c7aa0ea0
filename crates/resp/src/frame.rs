//! RESP frames (RESP2 and RESP3) and their encoding for either protocol version.

use bytes::{BufMut, Bytes};

/// The protocol a connection speaks: RESP2 until the client sends `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ProtocolVersion {
    #[default]
    Resp2,
    Resp3,
}

impl ProtocolVersion {
    /// The number a client gives to `HELLO` and the `proto` field of its reply.
    pub fn number(self) -> i64 {
        match self {
            ProtocolVersion::Resp2 => 2,
            ProtocolVersion::Resp3 => 3,
        }
    }
}

/// One RESP value. The same type serves requests (decoded by the generic frame decoder) and
/// replies (encoded with [`Frame::encode`]); a server decodes requests with
/// [`RequestDecoder`](crate::RequestDecoder) instead, which is stricter and faster.
///
/// RESP3-only types are written in RESP2 the way Redis does it: a map becomes a flat array of
/// keys and values, a set or push an array, a double or big number a bulk string, a boolean the
/// integer 1 or 0, a verbatim string its text as a bulk string, a bulk error a simple error.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `+OK\r\n`. A `\r` or `\n` in the text is written as a space so it cannot end the line.
    Simple(Bytes),
    /// `-ERR message\r\n`: the text starts with the error code (`ERR`, `NOPROTO`, …). Line ends
    /// in the text are written as spaces.
    Error(Bytes),
    /// `:42\r\n`
    Integer(i64),
    /// `$5\r\nhello\r\n`
    Bulk(Bytes),
    /// The null reply: `$-1\r\n` in RESP2, `_\r\n` in RESP3.
    Null,
    /// The null array: `*-1\r\n` in RESP2, `_\r\n` in RESP3.
    NullArray,
    /// `*2\r\n…`
    Array(Vec<Frame>),
    /// RESP3 `%1\r\n` key value …
    Map(Vec<(Frame, Frame)>),
    /// RESP3 `~2\r\n…`
    Set(Vec<Frame>),
    /// RESP3 `,3.14\r\n`, also `,inf`, `,-inf`, `,nan`.
    Double(f64),
    /// RESP3 `#t\r\n` / `#f\r\n`
    Boolean(bool),
    /// RESP3 `(3492890328409238509324850943850943825024385\r\n`: an optional `-` and digits.
    BigNumber(Bytes),
    /// RESP3 `=15\r\ntxt:Some string\r\n`: a three-byte format and the text.
    Verbatim { format: [u8; 3], text: Bytes },
    /// RESP3 `>2\r\n…`: out-of-band data such as pub/sub messages.
    Push(Vec<Frame>),
    /// RESP3 `!21\r\nSYNTAX invalid syntax\r\n`: an error that may hold any bytes.
    BulkError(Bytes),
}

const CRLF: &[u8] = b"\r\n";

impl Frame {
    /// `+OK`
    pub fn ok() -> Frame {
        Frame::Simple(Bytes::from_static(b"OK"))
    }

    /// A simple string from static text, e.g. `Frame::simple("PONG")`.
    pub fn simple(text: &'static str) -> Frame {
        Frame::Simple(Bytes::from_static(text.as_bytes()))
    }

    /// An error reply; `text` starts with the code, e.g. `"ERR syntax error"`.
    pub fn error(text: impl Into<String>) -> Frame {
        Frame::Error(Bytes::from(text.into()))
    }

    /// A bulk string from anything that becomes `Bytes` (`Vec<u8>`, `String`, `Bytes`, …).
    pub fn bulk(data: impl Into<Bytes>) -> Frame {
        Frame::Bulk(data.into())
    }

    /// Appends this frame, encoded for `version`, to `out`. Allocates only when `out` grows.
    pub fn encode<B: BufMut>(&self, version: ProtocolVersion, out: &mut B) {
        let resp3 = version == ProtocolVersion::Resp3;
        match self {
            Frame::Simple(text) => put_line(out, b'+', text),
            Frame::Error(text) => put_line(out, b'-', text),
            Frame::Integer(value) => put_integer(out, b':', *value),
            Frame::Bulk(data) => put_blob(out, b'$', data),
            Frame::Null if resp3 => out.put_slice(b"_\r\n"),
            Frame::Null => out.put_slice(b"$-1\r\n"),
            Frame::NullArray if resp3 => out.put_slice(b"_\r\n"),
            Frame::NullArray => out.put_slice(b"*-1\r\n"),
            Frame::Array(items) => put_aggregate(out, version, b'*', items),
            Frame::Map(pairs) => {
                if resp3 {
                    put_length(out, b'%', pairs.len());
                } else {
                    put_length(out, b'*', pairs.len() * 2);
                }
                for (key, value) in pairs {
                    key.encode(version, out);
                    value.encode(version, out);
                }
            }
            Frame::Set(items) => {
                put_aggregate(out, version, if resp3 { b'~' } else { b'*' }, items)
            }
            Frame::Push(items) => {
                put_aggregate(out, version, if resp3 { b'>' } else { b'*' }, items)
            }
            Frame::Double(value) => {
                let mut text = [0u8; 40];
                let text = format_double(*value, &mut text);
                if resp3 {
                    out.put_u8(b',');
                    out.put_slice(text);
                    out.put_slice(CRLF);
                } else {
                    put_blob(out, b'$', text);
                }
            }
            Frame::Boolean(value) if resp3 => {
                out.put_slice(if *value { b"#t\r\n" } else { b"#f\r\n" })
            }
            Frame::Boolean(value) => put_integer(out, b':', i64::from(*value)),
            Frame::BigNumber(digits) if resp3 => put_line(out, b'(', digits),
            Frame::BigNumber(digits) => put_blob(out, b'$', digits),
            Frame::Verbatim { format, text } if resp3 => {
                put_length(out, b'=', text.len() + 4);
                out.put_slice(format);
                out.put_u8(b':');
                out.put_slice(text);
                out.put_slice(CRLF);
            }
            Frame::Verbatim { text, .. } => put_blob(out, b'$', text),
            Frame::BulkError(text) if resp3 => put_blob(out, b'!', text),
            Frame::BulkError(text) => put_line(out, b'-', text),
        }
    }

    /// This frame encoded for `version` in a new vector; for tests and one-off replies.
    pub fn to_bytes(&self, version: ProtocolVersion) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(version, &mut out);
        out
    }
}

fn put_line<B: BufMut>(out: &mut B, kind: u8, text: &[u8]) {
    out.put_u8(kind);
    if memchr::memchr2(b'\r', b'\n', text).is_none() {
        out.put_slice(text);
    } else {
        // A line end inside the text would end the frame early and let the rest of the text be
        // read as further frames; Redis replaces them with spaces too.
        for &byte in text {
            out.put_u8(if byte == b'\r' || byte == b'\n' { b' ' } else { byte });
        }
    }
    out.put_slice(CRLF);
}

fn put_integer<B: BufMut>(out: &mut B, kind: u8, value: i64) {
    out.put_u8(kind);
    out.put_slice(itoa::Buffer::new().format(value).as_bytes());
    out.put_slice(CRLF);
}

fn put_length<B: BufMut>(out: &mut B, kind: u8, length: usize) {
    out.put_u8(kind);
    out.put_slice(itoa::Buffer::new().format(length).as_bytes());
    out.put_slice(CRLF);
}

fn put_blob<B: BufMut>(out: &mut B, kind: u8, data: &[u8]) {
    put_length(out, kind, data.len());
    out.put_slice(data);
    out.put_slice(CRLF);
}

fn put_aggregate<B: BufMut>(out: &mut B, version: ProtocolVersion, kind: u8, items: &[Frame]) {
    put_length(out, kind, items.len());
    for item in items {
        item.encode(version, out);
    }
}

/// Writes the shortest text that reads back as exactly `value`: `inf`, `-inf` and `nan` as
/// RESP3 spells them, plain decimals for ordinary magnitudes and exponent form (`1e300`) for
/// the others so that no double takes hundreds of digits.
fn format_double(value: f64, buffer: &mut [u8; 40]) -> &[u8] {
    use std::io::Write as _;
    if value.is_nan() {
        return b"nan";
    }
    if value.is_infinite() {
        return if value > 0.0 { b"inf" } else { b"-inf" };
    }
    let magnitude = value.abs();
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    // Rust prints the shortest round-trip digits in both notations; the longest case, such as
    // "-2.2250738585072014e-308", is 24 bytes, so the buffer cannot overflow.
    let written = if magnitude == 0.0 || (1e-5..1e17).contains(&magnitude) {
        write!(cursor, "{value}")
    } else {
        write!(cursor, "{value:e}")
    };
    written.expect("a double's text fits in 40 bytes");
    let length = cursor.position() as usize;
    &buffer[..length]
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProtocolVersion::{Resp2, Resp3};

    fn both(frame: Frame) -> (String, String) {
        (
            String::from_utf8(frame.to_bytes(Resp2)).unwrap(),
            String::from_utf8(frame.to_bytes(Resp3)).unwrap(),
        )
    }

    #[test]
    fn simple_types_are_written_as_redis_writes_them() {
        assert_eq!(both(Frame::ok()), ("+OK\r\n".into(), "+OK\r\n".into()));
        assert_eq!(Frame::error("ERR syntax error").to_bytes(Resp2), b"-ERR syntax error\r\n");
        assert_eq!(Frame::Integer(-42).to_bytes(Resp2), b":-42\r\n");
        assert_eq!(Frame::Integer(i64::MIN).to_bytes(Resp2), b":-9223372036854775808\r\n");
        assert_eq!(Frame::bulk("hello").to_bytes(Resp2), b"$5\r\nhello\r\n");
        assert_eq!(Frame::bulk("").to_bytes(Resp3), b"$0\r\n\r\n");
    }

    #[test]
    fn nulls_differ_between_versions() {
        assert_eq!(both(Frame::Null), ("$-1\r\n".into(), "_\r\n".into()));
        assert_eq!(both(Frame::NullArray), ("*-1\r\n".into(), "_\r\n".into()));
    }

    #[test]
    fn resp3_types_are_downgraded_for_resp2() {
        let map = Frame::Map(vec![(Frame::bulk("a"), Frame::Integer(1))]);
        assert_eq!(both(map), ("*2\r\n$1\r\na\r\n:1\r\n".into(), "%1\r\n$1\r\na\r\n:1\r\n".into()));
        let set = Frame::Set(vec![Frame::simple("x")]);
        assert_eq!(both(set), ("*1\r\n+x\r\n".into(), "~1\r\n+x\r\n".into()));
        let push = Frame::Push(vec![]);
        assert_eq!(both(push), ("*0\r\n".into(), ">0\r\n".into()));
        assert_eq!(both(Frame::Boolean(true)), (":1\r\n".into(), "#t\r\n".into()));
        assert_eq!(both(Frame::Boolean(false)), (":0\r\n".into(), "#f\r\n".into()));
        assert_eq!(both(Frame::Double(1.5)), ("$3\r\n1.5\r\n".into(), ",1.5\r\n".into()));
        assert_eq!(
            both(Frame::BigNumber("-123".into())),
            ("$4\r\n-123\r\n".into(), "(-123\r\n".into())
        );
        let verbatim = Frame::Verbatim { format: *b"txt", text: "Some string".into() };
        assert_eq!(
            both(verbatim),
            ("$11\r\nSome string\r\n".into(), "=15\r\ntxt:Some string\r\n".into())
        );
        let error = Frame::BulkError("SYNTAX bad\r\nthing".into());
        assert_eq!(
            both(error),
            ("-SYNTAX bad  thing\r\n".into(), "!17\r\nSYNTAX bad\r\nthing\r\n".into())
        );
    }

    #[test]
    fn doubles_use_the_shortest_exact_text() {
        let text = |value: f64| String::from_utf8(Frame::Double(value).to_bytes(Resp3)).unwrap();
        assert_eq!(text(0.0), ",0\r\n");
        assert_eq!(text(-0.0), ",-0\r\n");
        assert_eq!(text(3.25), ",3.25\r\n");
        assert_eq!(text(1e300), ",1e300\r\n");
        assert_eq!(text(-2.2250738585072014e-308), ",-2.2250738585072014e-308\r\n");
        assert_eq!(text(f64::INFINITY), ",inf\r\n");
        assert_eq!(text(f64::NEG_INFINITY), ",-inf\r\n");
        assert_eq!(text(f64::NAN), ",nan\r\n");
        assert_eq!(text(0.1 + 0.2), ",0.30000000000000004\r\n");
    }

    #[test]
    fn line_ends_inside_simple_text_cannot_forge_frames() {
        let frame = Frame::error("ERR bad\r\n+OK");
        assert_eq!(frame.to_bytes(Resp2), b"-ERR bad  +OK\r\n");
    }

    #[test]
    fn nested_aggregates() {
        let frame = Frame::Array(vec![Frame::Array(vec![Frame::Null]), Frame::Integer(7)]);
        assert_eq!(
            both(frame),
            ("*2\r\n*1\r\n$-1\r\n:7\r\n".into(), "*2\r\n*1\r\n_\r\n:7\r\n".into())
        );
    }
}
