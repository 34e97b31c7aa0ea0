//! Requests from clients: arrays of bulk strings (multibulk) or inline lines, decoded in two
//! steps: a cheap check that resumes where it stopped, then a parse that slices the arguments
//! out of the read buffer without copying them.

use bytes::{Bytes, BytesMut};

use crate::error::ProtocolError;
use crate::limits::Limits;
use crate::parse::parse_length;

/// Longest `*count` or `$length` line, type byte excluded: 19 digits are enough for any length
/// we could accept, and a client that sends more is not speaking RESP.
const LENGTH_LINE_BYTES_MAX: usize = 32;

/// One client request: the command name and its arguments, each a slice of the read buffer.
///
/// The slices keep the buffer they were cut from alive: copy an argument (`to_vec()`) before
/// keeping it for longer than the command takes to execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    args: Vec<Bytes>,
}

impl Request {
    /// A request made of these arguments (tests, or a server executing a command itself).
    pub fn new(args: Vec<Bytes>) -> Request {
        Request { args }
    }

    /// Name first, then the arguments. Never empty when it comes from a [`RequestDecoder`].
    pub fn args(&self) -> &[Bytes] {
        &self.args
    }

    pub fn into_args(self) -> Vec<Bytes> {
        self.args
    }
}

/// The sans-IO request decoder of one connection.
///
/// [`RequestDecoder::check`] walks the buffered bytes and remembers how far it got, so a large
/// request arriving in many reads is scanned once, not once per read. It allocates nothing and
/// enforces every [`Limits`] bound the moment a count or length is read: a `$4294967296` field
/// is refused at once. [`RequestDecoder::decode`] checks and, when a whole request is buffered,
/// splits it off the buffer and parses it.
///
/// Like Redis, it skips empty requests (`*0\r\n`, `*-1\r\n`, an empty inline line) silently.
/// Unlike Redis, it insists on `\r\n` after every line and bulk, and measures an inline line
/// against its limit even when its end has already arrived, so the outcome never depends on how
/// the bytes were split into reads.
#[derive(Debug, Clone)]
pub struct RequestDecoder {
    limits: Limits,
    progress: Progress,
}

/// How far the check got into the request at the front of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Nothing of the next request has been examined.
    Start,
    /// A multibulk request whose count line ended before `position`; `remaining` bulks follow.
    Multibulk { position: usize, remaining: u64 },
    /// An inline request whose first `searched` bytes hold no `\n`.
    Inline { searched: usize },
}

/// What the check found at the front of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checked {
    /// A multibulk request of `arguments` bulks in the first `length` bytes.
    Multibulk { length: usize, arguments: usize },
    /// An inline line; the request takes `length` bytes, the line (without its end) `line`.
    Inline { length: usize, line: usize },
    /// Nothing to execute (`*0`, `*-1`, blank line) in the first `length` bytes.
    Empty { length: usize },
}

impl RequestDecoder {
    pub fn new(limits: Limits) -> RequestDecoder {
        RequestDecoder { limits, progress: Progress::Start }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Says whether `buffer` starts with one whole request and how many bytes it takes, or
    /// `Ok(None)` if more bytes are needed. Call it again with the same buffer plus new bytes;
    /// after a request has been taken off the front, call [`RequestDecoder::reset`] (decode does).
    pub fn check(&mut self, buffer: &[u8]) -> Result<Option<usize>, ProtocolError> {
        Ok(self.check_request(buffer)?.map(|checked| match checked {
            Checked::Multibulk { length, .. }
            | Checked::Inline { length, .. }
            | Checked::Empty { length } => length,
        }))
    }

    /// Forgets the progress of the check: the front of the buffer is a new request.
    pub fn reset(&mut self) {
        self.progress = Progress::Start;
    }

    /// Takes the next whole request off the front of `buffer`, skipping empty ones; `Ok(None)`
    /// if more bytes are needed. On an error the connection must be closed: the decoder's
    /// position in the stream is lost.
    pub fn decode(&mut self, buffer: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        loop {
            let Some(checked) = self.check_request(buffer)? else { return Ok(None) };
            self.reset();
            match checked {
                Checked::Empty { length } => {
                    let _ = buffer.split_to(length);
                }
                Checked::Multibulk { length, arguments } => {
                    let frame = buffer.split_to(length).freeze();
                    return Ok(Some(parse_multibulk(&frame, arguments)));
                }
                Checked::Inline { length, line } => {
                    let frame = buffer.split_to(length).freeze();
                    let args = split_inline(&frame[..line], self.limits.arguments_max)?;
                    if !args.is_empty() {
                        return Ok(Some(Request { args }));
                    }
                }
            }
        }
    }

    fn check_request(&mut self, buffer: &[u8]) -> Result<Option<Checked>, ProtocolError> {
        loop {
            match self.progress {
                Progress::Start => match buffer.first() {
                    None => return Ok(None),
                    Some(b'*') => {
                        let Some(line_end) = find_length_line(buffer, 1, true)? else {
                            return Ok(None);
                        };
                        let text = &buffer[1..line_end];
                        let position = line_end + 2;
                        let count = match parse_length(text) {
                            Some(count) => count,
                            // Redis ignores a negative count; so do we.
                            None if text.first() == Some(&b'-')
                                && parse_length(&text[1..]).is_some() =>
                            {
                                0
                            }
                            None => return Err(ProtocolError::InvalidMultibulkLength),
                        };
                        if count == 0 {
                            return Ok(Some(Checked::Empty { length: position }));
                        }
                        if count > self.limits.arguments_max as u64 {
                            return Err(ProtocolError::TooManyArguments {
                                count,
                                max: self.limits.arguments_max,
                            });
                        }
                        self.progress = Progress::Multibulk { position, remaining: count };
                    }
                    Some(_) => self.progress = Progress::Inline { searched: 0 },
                },
                Progress::Multibulk { position, remaining } => {
                    if remaining == 0 {
                        let length = position;
                        let arguments = self.arguments_in(buffer, length);
                        return Ok(Some(Checked::Multibulk { length, arguments }));
                    }
                    let Some(&kind) = buffer.get(position) else { return Ok(None) };
                    if kind != b'$' {
                        return Err(ProtocolError::ExpectedBulk(kind));
                    }
                    let Some(line_end) = find_length_line(buffer, position + 1, false)? else {
                        return Ok(None);
                    };
                    let length = parse_length(&buffer[position + 1..line_end])
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    if length > self.limits.bulk_bytes_max as u64 {
                        return Err(ProtocolError::BulkTooLong {
                            length,
                            max: self.limits.bulk_bytes_max,
                        });
                    }
                    let end = (line_end + 2) as u64 + length + 2;
                    if end > self.limits.request_bytes_max as u64 {
                        return Err(ProtocolError::RequestTooBig {
                            length: end,
                            max: self.limits.request_bytes_max,
                        });
                    }
                    let end = end as usize;
                    if buffer.len() < end {
                        return Ok(None);
                    }
                    if &buffer[end - 2..end] != b"\r\n" {
                        return Err(ProtocolError::ExpectedLineEnd("bulk string"));
                    }
                    self.progress = Progress::Multibulk { position: end, remaining: remaining - 1 };
                }
                Progress::Inline { searched } => {
                    let max = self.limits.inline_bytes_max;
                    // The line may take `max` bytes plus "\r\n"; look no further than that.
                    let window = buffer.len().min(max + 2);
                    match memchr::memchr(b'\n', &buffer[searched.min(window)..window]) {
                        Some(offset) => {
                            let newline = searched.min(window) + offset;
                            let line = if newline > 0 && buffer[newline - 1] == b'\r' {
                                newline - 1
                            } else {
                                newline
                            };
                            if line > max {
                                return Err(ProtocolError::InlineTooLong { max });
                            }
                            let length = newline + 1;
                            return Ok(Some(if line == 0 {
                                Checked::Empty { length }
                            } else {
                                Checked::Inline { length, line }
                            }));
                        }
                        // No '\n' yet: the line is too long once it has more than `max` bytes
                        // that cannot be followed by the end of line, whatever comes next.
                        None if window > max + 1 || (window == max + 1 && buffer[max] != b'\r') => {
                            return Err(ProtocolError::InlineTooLong { max });
                        }
                        None => {
                            self.progress = Progress::Inline { searched: window };
                            return Ok(None);
                        }
                    }
                }
            }
        }
    }

    /// The count line of a checked multibulk request, read again: cheaper than carrying it.
    fn arguments_in(&self, buffer: &[u8], length: usize) -> usize {
        let line_end = memchr::memchr(b'\r', &buffer[..length]).expect("checked count line");
        parse_length(&buffer[1..line_end]).expect("checked count") as usize
    }
}

/// Finds the `\r` ending a `*count` or `$length` line whose digits start at `start`.
fn find_length_line(
    buffer: &[u8],
    start: usize,
    multibulk: bool,
) -> Result<Option<usize>, ProtocolError> {
    let available = buffer.len() - start;
    let window = available.min(LENGTH_LINE_BYTES_MAX + 1);
    match memchr::memchr(b'\r', &buffer[start..start + window]) {
        Some(offset) => match buffer.get(start + offset + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some(start + offset)),
            Some(_) if multibulk => Err(ProtocolError::ExpectedLineEnd("multibulk length")),
            Some(_) => Err(ProtocolError::ExpectedLineEnd("bulk length")),
        },
        None if available > LENGTH_LINE_BYTES_MAX => Err(if multibulk {
            ProtocolError::MultibulkCountTooLong
        } else {
            ProtocolError::BulkCountTooLong
        }),
        None => Ok(None),
    }
}

/// Slices the bulks out of a checked multibulk request. The check has validated every line, so
/// this only finds line ends again.
fn parse_multibulk(frame: &Bytes, arguments: usize) -> Request {
    let mut args = Vec::with_capacity(arguments);
    let mut position = memchr::memchr(b'\n', frame).expect("checked count line") + 1;
    for _ in 0..arguments {
        let line_end = position + memchr::memchr(b'\r', &frame[position..]).expect("checked line");
        let length = parse_length(&frame[position + 1..line_end]).expect("checked length") as usize;
        let start = line_end + 2;
        args.push(frame.slice(start..start + length));
        position = start + length + 2;
    }
    debug_assert_eq!(position, frame.len());
    Request { args }
}

/// Splits an inline line into arguments the way Redis's `sdssplitargs` does: blanks separate
/// arguments; "double quotes" allow `\n \r \t \b \a \\ \"` and `\xHH` escapes; 'single quotes'
/// allow `\'`; a closing quote must be followed by a blank or the end of the line.
pub(crate) fn split_inline(line: &[u8], arguments_max: usize) -> Result<Vec<Bytes>, ProtocolError> {
    let mut args = Vec::new();
    let mut position = 0;
    loop {
        while position < line.len() && is_blank(line[position]) {
            position += 1;
        }
        // A NUL ends the line, as in Redis (whose `sdssplitargs` reads a C string). Not
        // skipped, it made an empty argument after every other until `arguments_max`: three
        // bytes made the server build a million arguments.
        if position == line.len() || line[position] == 0 {
            return Ok(args);
        }
        if args.len() == arguments_max {
            return Err(ProtocolError::TooManyArguments {
                count: args.len() as u64 + 1,
                max: arguments_max,
            });
        }
        let mut current = Vec::new();
        let mut double_quoted = false;
        let mut single_quoted = false;
        loop {
            let byte = line.get(position).copied();
            if double_quoted {
                match byte {
                    None | Some(0) => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') => match (
                        line.get(position + 1),
                        line.get(position + 2),
                        line.get(position + 3),
                    ) {
                        (Some(b'x'), Some(&high), Some(&low))
                            if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() =>
                        {
                            current.push(hex_value(high) << 4 | hex_value(low));
                            position += 3;
                        }
                        // A backslash before the line's end (a NUL ends it): unbalanced.
                        (Some(0), _, _) => return Err(ProtocolError::UnbalancedQuotes),
                        (Some(&escaped), _, _) => {
                            current.push(match escaped {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => 0x08,
                                b'a' => 0x07,
                                other => other,
                            });
                            position += 1;
                        }
                        (None, _, _) => current.push(b'\\'),
                    },
                    Some(b'"') => {
                        if line.get(position + 1).is_some_and(|&next| !is_blank(next) && next != 0)
                        {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        position += 1;
                        break;
                    }
                    Some(other) => current.push(other),
                }
            } else if single_quoted {
                match byte {
                    None | Some(0) => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') if line.get(position + 1) == Some(&b'\'') => {
                        current.push(b'\'');
                        position += 1;
                    }
                    Some(b'\'') => {
                        if line.get(position + 1).is_some_and(|&next| !is_blank(next) && next != 0)
                        {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        position += 1;
                        break;
                    }
                    Some(other) => current.push(other),
                }
            } else {
                match byte {
                    None | Some(b' ' | b'\n' | b'\r' | b'\t' | 0) => break,
                    Some(b'"') => double_quoted = true,
                    Some(b'\'') => single_quoted = true,
                    Some(other) => current.push(other),
                }
            }
            position += 1;
        }
        args.push(Bytes::from(current));
    }
}

fn is_blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8]) -> (Vec<Vec<String>>, Result<(), ProtocolError>) {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut buffer = BytesMut::from(bytes);
        let mut requests = Vec::new();
        loop {
            match decoder.decode(&mut buffer) {
                Ok(Some(request)) => requests.push(
                    request
                        .args()
                        .iter()
                        .map(|arg| String::from_utf8_lossy(arg).into_owned())
                        .collect(),
                ),
                Ok(None) => return (requests, Ok(())),
                Err(error) => return (requests, Err(error)),
            }
        }
    }

    fn args(words: &[&str]) -> Vec<String> {
        words.iter().map(|word| word.to_string()).collect()
    }

    #[test]
    fn multibulk_requests_decode_and_pipeline() {
        let (requests, end) =
            decode_all(b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
        assert_eq!(end, Ok(()));
        assert_eq!(requests, vec![args(&["PING"]), args(&["SET", "k", ""])]);
    }

    #[test]
    fn empty_requests_are_skipped_as_redis_skips_them() {
        let (requests, end) = decode_all(b"*0\r\n*-10\r\n\r\n\n*1\r\n$4\r\nPING\r\n");
        assert_eq!(end, Ok(()));
        assert_eq!(requests, vec![args(&["PING"])]);
    }

    #[test]
    fn inline_requests_split_like_redis() {
        let (requests, end) = decode_all(
            b"PING\r\nset  k 'it''s'\nECHO \"a\\x41\\n\\\"\" '\\'' x\"y z\"\r\n  \t  \r\n",
        );
        assert_eq!(end, Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(requests, vec![args(&["PING"])]);
        let (requests, end) = decode_all(b"ECHO \"a\\x41\\n\\\"\" '\\'' x\"y z\"\r\n");
        assert_eq!(end, Ok(()));
        assert_eq!(requests, vec![args(&["ECHO", "aA\n\"", "'", "xy z"])]);
        assert_eq!(decode_all(b"GET \"k\r\n").1, Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(decode_all(b"GET \"k\"x\r\n").1, Err(ProtocolError::UnbalancedQuotes));
    }

    /// A NUL ends an inline line, as in Redis: three bytes (`\0\r\n`) made the server build
    /// `arguments_max` empty arguments (a million, 50 ms and 30 MB each; found by a hostile-input
    /// audit).
    #[test]
    fn a_nul_ends_an_inline_line_as_in_redis() {
        assert_eq!(split_inline(b"\0", 1_048_576), Ok(vec![]));
        assert_eq!(split_inline(b"a\0b c", 1_048_576), Ok(vec![Bytes::from_static(b"a")]));
        assert_eq!(
            split_inline(b"GET k \0 x", 3),
            Ok(vec![Bytes::from_static(b"GET"), Bytes::from_static(b"k")])
        );
        assert_eq!(split_inline(b"\"a\0b\"", 8), Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(split_inline(b"'a\0b'", 8), Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(split_inline(b"\"a\\x00b\"", 8), Ok(vec![Bytes::from_static(b"a\0b")]));
        // A backslash before a NUL is one before the end; a NUL after a closing quote ends the
        // line there (Redis's C string).
        assert_eq!(split_inline(b"\"a\\\0b\"", 8), Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(split_inline(b"\"a\"\0x", 8), Ok(vec![Bytes::from_static(b"a")]));
        assert_eq!(split_inline(b"'a'\0x", 8), Ok(vec![Bytes::from_static(b"a")]));
        let (requests, end) = decode_all(b"\0\r\nPING\r\n");
        assert_eq!(end, Ok(()));
        assert_eq!(requests, vec![args(&["PING"])]);
    }

    #[test]
    fn protocol_errors_carry_the_redis_text() {
        let cases: Vec<(&[u8], &str)> = vec![
            (b"*x\r\n", "Protocol error: invalid multibulk length"),
            (b"*1\r\n:1\r\n", "Protocol error: expected '$', got ':'"),
            (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$x\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$1\r\nab\r\n", "Protocol error: expected '\\r\\n' after bulk string"),
            (b"*1\rx", "Protocol error: expected '\\r\\n' after multibulk length"),
            (b"*11111111111111111111111111111111111", "Protocol error: too big mbulk count string"),
            (
                b"*1\r\n$11111111111111111111111111111111111",
                "Protocol error: too big bulk count string",
            ),
        ];
        for (bytes, text) in cases {
            let error = decode_all(bytes).1.unwrap_err();
            assert_eq!(error.to_string(), text, "{}", bytes.escape_ascii());
        }
    }

    #[test]
    fn a_4_gb_length_field_is_refused_before_any_payload() {
        let mut decoder = RequestDecoder::new(Limits::default());
        assert_eq!(
            decoder.check(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4294967296\r\n"),
            Err(ProtocolError::BulkTooLong { length: 4_294_967_296, max: 536_870_912 })
        );
        let mut decoder = RequestDecoder::new(Limits::default());
        assert_eq!(
            decoder.check(b"*4294967296\r\n"),
            Err(ProtocolError::TooManyArguments { count: 4_294_967_296, max: 1_048_576 })
        );
    }

    #[test]
    fn the_whole_request_is_bounded() {
        let limits = Limits { bulk_bytes_max: 1024, request_bytes_max: 1500, ..Limits::default() };
        let mut decoder = RequestDecoder::new(limits);
        let mut bytes = b"*3\r\n$3\r\nSET\r\n$1000\r\n".to_vec();
        bytes.extend_from_slice(&[b'k'; 1000]);
        bytes.extend_from_slice(b"\r\n$1000\r\n");
        assert_eq!(
            decoder.check(&bytes),
            Err(ProtocolError::RequestTooBig { length: 2031, max: 1500 })
        );
    }

    #[test]
    fn inline_lines_are_bounded_whatever_the_split() {
        let limits = Limits { inline_bytes_max: 16, ..Limits::default() };
        let long = b"ECHO 0123456789ab\r\n"; // 17 bytes before the line end
        let mut decoder = RequestDecoder::new(limits.clone());
        assert_eq!(decoder.check(long), Err(ProtocolError::InlineTooLong { max: 16 }));
        let mut decoder = RequestDecoder::new(limits.clone());
        assert_eq!(decoder.check(&long[..10]), Ok(None));
        assert_eq!(decoder.check(&long[..16]), Ok(None));
        assert_eq!(decoder.check(&long[..17]), Err(ProtocolError::InlineTooLong { max: 16 }));
        let longest = b"ECHO 0123456789a\r\n"; // exactly 16 bytes before the line end
        let mut decoder = RequestDecoder::new(limits);
        assert_eq!(decoder.check(&longest[..16]), Ok(None));
        assert_eq!(decoder.check(&longest[..17]), Ok(None), "the '\\r' may be followed by '\\n'");
        assert_eq!(decoder.check(longest), Ok(Some(18)));
    }

    #[test]
    fn the_check_resumes_instead_of_rescanning() {
        let mut decoder = RequestDecoder::new(Limits::default());
        let bytes = b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n";
        assert_eq!(decoder.check(&bytes[..8]), Ok(None));
        assert_eq!(decoder.progress, Progress::Multibulk { position: 4, remaining: 2 });
        assert_eq!(decoder.check(&bytes[..20]), Ok(None));
        assert_eq!(decoder.progress, Progress::Multibulk { position: 14, remaining: 1 });
        assert_eq!(decoder.check(bytes), Ok(Some(bytes.len())));
    }

    #[test]
    fn too_many_arguments_are_refused_inline_too() {
        let limits = Limits { arguments_max: 3, ..Limits::default() };
        let mut decoder = RequestDecoder::new(limits.clone());
        let mut buffer = BytesMut::from(&b"a b c d\r\n"[..]);
        assert_eq!(
            decoder.decode(&mut buffer),
            Err(ProtocolError::TooManyArguments { count: 4, max: 3 })
        );
        let mut decoder = RequestDecoder::new(limits);
        assert_eq!(
            decoder.check(b"*4\r\n"),
            Err(ProtocolError::TooManyArguments { count: 4, max: 3 })
        );
    }
}
