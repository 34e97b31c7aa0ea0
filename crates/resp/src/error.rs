//! Protocol errors: malformed or oversized bytes from a peer. The connection is closed after one.

use std::fmt;

use crate::frame::Frame;

/// Why bytes from a peer are not valid RESP, or break a [`Limits`](crate::Limits) bound.
///
/// `Display` gives the text Redis sends (`Protocol error: invalid bulk length`), followed, for a
/// limit, by the numbers in parentheses. [`ProtocolError::to_frame`] makes the `-ERR …` reply
/// sent just before the server closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// The count after `*` is not a decimal integer.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// The count after `*` is more than `arguments_max`.
    #[error(
        "Protocol error: invalid multibulk length ({count} arguments is more than the maximum of {max})"
    )]
    TooManyArguments { count: u64, max: usize },
    /// The length after `$` is not a non-negative decimal integer.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// The length after `$` is more than `bulk_bytes_max`.
    #[error(
        "Protocol error: invalid bulk length ({length} bytes is more than the maximum of {max})"
    )]
    BulkTooLong { length: u64, max: usize },
    /// The request (or frame) announces more bytes in total than `request_bytes_max`.
    #[error("Protocol error: request too big ({length} bytes is more than the maximum of {max})")]
    RequestTooBig { length: u64, max: usize },
    /// No line end within the first bytes of a `*` count line.
    #[error("Protocol error: too big mbulk count string")]
    MultibulkCountTooLong,
    /// No line end within the first bytes of a `$` length line.
    #[error("Protocol error: too big bulk count string")]
    BulkCountTooLong,
    /// An inline command longer than `inline_bytes_max`.
    #[error("Protocol error: too big inline request (more than {max} bytes)")]
    InlineTooLong { max: usize },
    /// An inline command with an unterminated quote, or a closing quote not followed by a space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// An element of a request array that is not a bulk string.
    #[error("Protocol error: expected '$', got '{}'", Printable(*.0))]
    ExpectedBulk(u8),
    /// A line or a bulk string not ended by `\r\n`.
    #[error("Protocol error: expected '\\r\\n' after {0}")]
    ExpectedLineEnd(&'static str),
    /// A line (simple string, error, number) with no `\r\n` within its maximum length.
    #[error("Protocol error: {kind} line longer than {max} bytes")]
    LineTooLong { kind: &'static str, max: usize },
    /// A frame type byte this decoder does not know (or does not support: attributes, streams).
    #[error("Protocol error: unknown frame type '{}'", Printable(*.0))]
    UnknownType(u8),
    /// The body of a `:`, `,`, `#`, `(` or `=` frame is not what its type allows.
    #[error("Protocol error: invalid {0}")]
    InvalidValue(&'static str),
    /// Aggregates nested deeper than `depth_max`.
    #[error("Protocol error: frame nested deeper than {max} levels")]
    TooDeep { max: usize },
    /// [`Frame::parse`] was given bytes that [`Frame::check`] would not accept as one whole frame.
    #[error("Protocol error: incomplete frame")]
    Incomplete,
}

impl ProtocolError {
    /// The error reply sent before closing: `-ERR Protocol error: …\r\n` once encoded.
    pub fn to_frame(&self) -> Frame {
        Frame::Error(format!("ERR {self}").into())
    }
}

/// Shows a byte as Redis's `%c` would, but escaped when it is not printable ASCII.
struct Printable(u8);

impl fmt::Display for Printable {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.0.escape_ascii())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_start_as_redis_texts_do() {
        assert_eq!(
            ProtocolError::InvalidBulkLength.to_frame(),
            Frame::Error("ERR Protocol error: invalid bulk length".into())
        );
        assert_eq!(
            ProtocolError::BulkTooLong { length: 4_294_967_296, max: 536_870_912 }.to_string(),
            "Protocol error: invalid bulk length (4294967296 bytes is more than the maximum of 536870912)"
        );
        assert_eq!(
            ProtocolError::ExpectedBulk(b'f').to_string(),
            "Protocol error: expected '$', got 'f'"
        );
        assert_eq!(
            ProtocolError::ExpectedBulk(0).to_string(),
            "Protocol error: expected '$', got '\\x00'"
        );
        assert_eq!(
            ProtocolError::ExpectedLineEnd("bulk string").to_string(),
            "Protocol error: expected '\\r\\n' after bulk string"
        );
    }
}
