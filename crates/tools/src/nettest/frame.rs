//! The nettest wire format, sans I/O: encode and decode frames, never panic on bytes from
//! the network, and say "need more bytes" as `Ok(None)`.
//!
//! Every frame is a 16-byte header and a body, little-endian
//! (docs/nettest-protocol.md has the diagrams):
//!
//! ```text
//! // Format: { kind: u8 | flags: u8 | reserved: u16 = 0 | body_bytes: u32 | seq: u64 | body }
//! ```

/// Bytes of a frame header.
pub const HEADER_BYTES: usize = 16;
/// `HELLO` starts with this, so that a stray client is recognised at once.
pub const MAGIC: [u8; 4] = *b"RGNT";
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Largest body of a control frame (everything but DATA and PING), in bytes.
pub const CONTROL_BODY_BYTES_MAX: u32 = 1024;
/// Largest message a server can be configured to accept, in bytes.
pub const MESSAGE_BYTES_LIMIT: u32 = 1 << 30;
/// `DATA` flag: the client waits for this message's acknowledgement (SYNC).
pub const FLAG_SYNC: u8 = 0x01;

/// What a frame is for. Client to server: `Hello`, `Data`, `Ping`, `Finish`; server to
/// client: `Welcome`, `Ack`, `Pong`, `Summary`, `Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Hello = 1,
    Welcome = 2,
    Data = 3,
    Ack = 4,
    Ping = 5,
    Pong = 6,
    Finish = 7,
    Summary = 8,
    Error = 9,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Hello,
            2 => Kind::Welcome,
            3 => Kind::Data,
            4 => Kind::Ack,
            5 => Kind::Ping,
            6 => Kind::Pong,
            7 => Kind::Finish,
            8 => Kind::Summary,
            9 => Kind::Error,
            _ => return None,
        })
    }

    /// Whether the body is a message (bounded by the negotiated maximum) rather than a
    /// control body (bounded by [`CONTROL_BODY_BYTES_MAX`]).
    fn carries_message(self) -> bool {
        matches!(self, Kind::Data | Kind::Ping)
    }
}

/// Why bytes are not a frame. Every variant names what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("unknown frame kind {0} (not a nettest peer, or a newer one)")]
    UnknownKind(u8),
    #[error("reserved header bytes are {0:#06x}, not zero")]
    Reserved(u16),
    #[error(
        "a {kind:?} frame of {body_bytes} bytes is longer than the maximum of {max_bytes} bytes"
    )]
    TooLong { kind: Kind, body_bytes: u32, max_bytes: u32 },
    #[error("a {kind:?} body of {body_bytes} bytes is malformed: {reason}")]
    BadBody { kind: Kind, body_bytes: usize, reason: &'static str },
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub body_bytes: u32,
    pub seq: u64,
}

impl Header {
    /// Decodes and checks a header; `message_bytes_max` bounds DATA and PING bodies.
    pub fn decode(
        bytes: &[u8; HEADER_BYTES],
        message_bytes_max: u32,
    ) -> Result<Header, FrameError> {
        let kind = Kind::from_byte(bytes[0]).ok_or(FrameError::UnknownKind(bytes[0]))?;
        let reserved = u16::from_le_bytes([bytes[2], bytes[3]]);
        if reserved != 0 {
            return Err(FrameError::Reserved(reserved));
        }
        let body_bytes = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        let max_bytes =
            if kind.carries_message() { message_bytes_max } else { CONTROL_BODY_BYTES_MAX };
        if body_bytes > max_bytes {
            return Err(FrameError::TooLong { kind, body_bytes, max_bytes });
        }
        let seq = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        Ok(Header { kind, flags: bytes[1], body_bytes, seq })
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES];
        bytes[0] = self.kind as u8;
        bytes[1] = self.flags;
        bytes[4..8].copy_from_slice(&self.body_bytes.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.seq.to_le_bytes());
        bytes
    }
}

/// A whole frame borrowed from a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub header: Header,
    pub body: &'a [u8],
}

/// Decodes the frame at the start of `buffer`: `Ok(None)` if more bytes are needed,
/// otherwise the frame and how many bytes it used.
pub fn decode(
    buffer: &[u8],
    message_bytes_max: u32,
) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(header_bytes) = buffer.first_chunk::<HEADER_BYTES>() else { return Ok(None) };
    let header = Header::decode(header_bytes, message_bytes_max)?;
    let end = HEADER_BYTES + header.body_bytes as usize;
    let Some(body) = buffer.get(HEADER_BYTES..end) else { return Ok(None) };
    Ok(Some((Frame { header, body }, end)))
}

/// Appends a frame to `out`.
pub fn encode(out: &mut Vec<u8>, kind: Kind, flags: u8, seq: u64, body: &[u8]) {
    let body_bytes = u32::try_from(body.len()).expect("bodies are below 4 GiB");
    out.extend_from_slice(&Header { kind, flags, body_bytes, seq }.encode());
    out.extend_from_slice(body);
}

/// How the client drives the test.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One message in flight per connection; the server acknowledges each.
    Sync,
    /// Messages stream; the server acknowledges what it has, asynchronously.
    Async,
    /// Ping-pong of small messages: the network's round trip only.
    Rtt,
}

impl Mode {
    fn to_byte(self) -> u8 {
        match self {
            Mode::Sync => 1,
            Mode::Async => 2,
            Mode::Rtt => 3,
        }
    }

    fn from_byte(byte: u8) -> Option<Mode> {
        Some(match byte {
            1 => Mode::Sync,
            2 => Mode::Async,
            3 => Mode::Rtt,
            _ => return None,
        })
    }
}

/// The client's opening: who it is and what it wants.
///
/// ```text
/// // Format: { magic: "RGNT" | version: u16 | mode: u8 | write: u8 | message_bytes: u32 |
/// //           sockbuf_bytes: u32 (0 = kernel autotuning) | reserved: u32 = 0 }   (20 bytes)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub mode: Mode,
    pub write: bool,
    pub message_bytes: u32,
    pub sockbuf_bytes: u32,
}

impl Hello {
    pub const BODY_BYTES: usize = 20;

    pub fn encode(&self) -> [u8; Hello::BODY_BYTES] {
        let mut body = [0u8; Hello::BODY_BYTES];
        body[0..4].copy_from_slice(&MAGIC);
        body[4..6].copy_from_slice(&self.version.to_le_bytes());
        body[6] = self.mode.to_byte();
        body[7] = self.write as u8;
        body[8..12].copy_from_slice(&self.message_bytes.to_le_bytes());
        body[12..16].copy_from_slice(&self.sockbuf_bytes.to_le_bytes());
        body
    }

    /// Decodes a HELLO body. The version is returned as sent: the caller decides whether it
    /// speaks it (so it can answer with its own).
    pub fn decode(body: &[u8]) -> Result<Hello, FrameError> {
        let bad =
            |reason| FrameError::BadBody { kind: Kind::Hello, body_bytes: body.len(), reason };
        let body: &[u8; Hello::BODY_BYTES] =
            body.try_into().map_err(|_| bad("a HELLO body is 20 bytes"))?;
        if body[0..4] != MAGIC {
            return Err(bad("no RGNT magic"));
        }
        let mode = Mode::from_byte(body[6]).ok_or(bad("unknown mode"))?;
        let write = match body[7] {
            0 => false,
            1 => true,
            _ => return Err(bad("write flag is neither 0 nor 1")),
        };
        if body[16..20] != [0; 4] {
            return Err(bad("reserved bytes are not zero"));
        }
        Ok(Hello {
            version: u16::from_le_bytes([body[4], body[5]]),
            mode,
            write,
            message_bytes: u32::from_le_bytes(body[8..12].try_into().expect("4 bytes")),
            sockbuf_bytes: u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")),
        })
    }
}

/// The server's answer to HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    /// The client's version is not spoken here.
    Version = 1,
    /// All connection slots are taken.
    Busy = 2,
    /// The request cannot be served (reason follows).
    Refused = 3,
}

/// ```text
/// // Format: { version: u16 | status: u8 | reserved: u8 = 0 | message_bytes_max: u32 |
/// //           rcvbuf_bytes: u32 | sndbuf_bytes: u32 | reason: UTF-8 (rest of the body) }
/// ```
/// The buffer sizes are what the kernel granted the server's socket (as `getsockopt`
/// reports them: Linux doubles a request to leave room for its bookkeeping).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub version: u16,
    pub status: Status,
    pub message_bytes_max: u32,
    pub rcvbuf_bytes: u32,
    pub sndbuf_bytes: u32,
    pub reason: String,
}

impl Welcome {
    pub const FIXED_BYTES: usize = 16;

    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(Welcome::FIXED_BYTES + self.reason.len());
        body.extend_from_slice(&self.version.to_le_bytes());
        body.push(self.status as u8);
        body.push(0);
        body.extend_from_slice(&self.message_bytes_max.to_le_bytes());
        body.extend_from_slice(&self.rcvbuf_bytes.to_le_bytes());
        body.extend_from_slice(&self.sndbuf_bytes.to_le_bytes());
        let room = CONTROL_BODY_BYTES_MAX as usize - Welcome::FIXED_BYTES;
        body.extend_from_slice(truncate_utf8(&self.reason, room).as_bytes());
        body
    }

    pub fn decode(body: &[u8]) -> Result<Welcome, FrameError> {
        let bad =
            |reason| FrameError::BadBody { kind: Kind::Welcome, body_bytes: body.len(), reason };
        let fixed =
            body.first_chunk::<{ Welcome::FIXED_BYTES }>().ok_or(bad("shorter than 16 bytes"))?;
        let status = match fixed[2] {
            0 => Status::Ok,
            1 => Status::Version,
            2 => Status::Busy,
            3 => Status::Refused,
            _ => return Err(bad("unknown status")),
        };
        let word = |at: usize| u32::from_le_bytes(fixed[at..at + 4].try_into().expect("4 bytes"));
        let reason = std::str::from_utf8(&body[Welcome::FIXED_BYTES..])
            .map_err(|_| bad("reason is not UTF-8"))?
            .to_string();
        Ok(Welcome {
            version: u16::from_le_bytes([fixed[0], fixed[1]]),
            status,
            message_bytes_max: word(4),
            rcvbuf_bytes: word(8),
            sndbuf_bytes: word(12),
            reason,
        })
    }
}

/// What the server did over the whole connection, sent in answer to FINISH.
///
/// ```text
/// // Format: { messages: u64 | bytes: u64 | syncs: u64 | sync_ns_p50: u64 |
/// //           sync_ns_p99: u64 | sync_ns_max: u64 }   (48 bytes)
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub messages: u64,
    pub bytes: u64,
    /// fdatasync calls made for this connection (0 without `--write`).
    pub syncs: u64,
    pub sync_ns_p50: u64,
    pub sync_ns_p99: u64,
    pub sync_ns_max: u64,
}

impl Summary {
    pub const BODY_BYTES: usize = 48;

    pub fn encode(&self) -> [u8; Summary::BODY_BYTES] {
        let mut body = [0u8; Summary::BODY_BYTES];
        let fields = [
            self.messages,
            self.bytes,
            self.syncs,
            self.sync_ns_p50,
            self.sync_ns_p99,
            self.sync_ns_max,
        ];
        for (index, field) in fields.iter().enumerate() {
            body[index * 8..index * 8 + 8].copy_from_slice(&field.to_le_bytes());
        }
        body
    }

    pub fn decode(body: &[u8]) -> Result<Summary, FrameError> {
        let body: &[u8; Summary::BODY_BYTES] =
            body.try_into().map_err(|_| FrameError::BadBody {
                kind: Kind::Summary,
                body_bytes: body.len(),
                reason: "a SUMMARY body is 48 bytes",
            })?;
        let field = |index: usize| {
            u64::from_le_bytes(body[index * 8..index * 8 + 8].try_into().expect("8 bytes"))
        };
        Ok(Summary {
            messages: field(0),
            bytes: field(1),
            syncs: field(2),
            sync_ns_p50: field(3),
            sync_ns_p99: field(4),
            sync_ns_max: field(5),
        })
    }
}

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a char boundary.
pub fn truncate_utf8(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_4_gib_length_is_refused_before_any_allocation() {
        let mut header =
            Header { kind: Kind::Data, flags: 0, body_bytes: u32::MAX, seq: 1 }.encode();
        let error = Header::decode(&header, 64 << 20).unwrap_err();
        assert_eq!(
            error.to_string(),
            "a Data frame of 4294967295 bytes is longer than the maximum of 67108864 bytes"
        );
        header[0] = Kind::Welcome as u8;
        header[4..8].copy_from_slice(&2000u32.to_le_bytes());
        assert!(matches!(Header::decode(&header, 64 << 20), Err(FrameError::TooLong { .. })));
    }

    #[test]
    fn a_wrong_protocol_is_recognised_from_its_first_bytes() {
        let http = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(decode(http, 1 << 20), Err(FrameError::UnknownKind(b'G')));
        let mut tls_like = [0u8; 16];
        tls_like[0] = 1; // looks like HELLO…
        tls_like[2] = 3; // …but the reserved bytes are not zero
        assert!(matches!(decode(&tls_like, 1 << 20), Err(FrameError::Reserved(3))));
    }

    #[test]
    fn incomplete_frames_need_more_bytes() {
        let mut out = Vec::new();
        encode(&mut out, Kind::Data, FLAG_SYNC, 9, &[7u8; 100]);
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut], 1 << 20), Ok(None), "cut at {cut}");
        }
        let (frame, used) = decode(&out, 1 << 20).unwrap().unwrap();
        assert_eq!(used, out.len());
        assert_eq!(frame.header.seq, 9);
        assert_eq!(frame.body, &[7u8; 100]);
    }

    #[test]
    fn hello_checks_magic_mode_and_reserved() {
        let hello = Hello {
            version: VERSION,
            mode: Mode::Async,
            write: true,
            message_bytes: 9400,
            sockbuf_bytes: 0,
        };
        assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
        let mut body = hello.encode();
        body[0] = b'X';
        assert!(Hello::decode(&body).unwrap_err().to_string().contains("magic"));
        let mut body = hello.encode();
        body[6] = 9;
        assert!(Hello::decode(&body).unwrap_err().to_string().contains("mode"));
        let mut body = hello.encode();
        body[19] = 1;
        assert!(Hello::decode(&body).unwrap_err().to_string().contains("reserved"));
        assert!(Hello::decode(&body[..19]).is_err());
    }

    fn kind() -> impl Strategy<Value = Kind> {
        (1u8..=9).prop_map(|byte| Kind::from_byte(byte).unwrap())
    }

    proptest! {
        #[test]
        fn frames_round_trip(kind in kind(), flags: u8, seq: u64, body in proptest::collection::vec(any::<u8>(), 0..1024)) {
            let mut out = Vec::new();
            encode(&mut out, kind, flags, seq, &body);
            out.extend_from_slice(b"trailing");
            let (frame, used) = decode(&out, 1 << 20).unwrap().unwrap();
            prop_assert_eq!(used, HEADER_BYTES + body.len());
            prop_assert_eq!(frame.header, Header { kind, flags, body_bytes: body.len() as u32, seq });
            prop_assert_eq!(frame.body, &body[..]);
        }

        #[test]
        fn decoding_arbitrary_bytes_never_panics_nor_overreads(bytes in proptest::collection::vec(any::<u8>(), 0..256), max in 0u32..512) {
            if let Ok(Some((frame, used))) = decode(&bytes, max) {
                prop_assert!(used <= bytes.len());
                prop_assert_eq!(frame.body.len(), used - HEADER_BYTES);
                prop_assert!(frame.header.body_bytes <= max.max(CONTROL_BODY_BYTES_MAX));
            }
            let _ = Hello::decode(&bytes);
            let _ = Welcome::decode(&bytes);
            let _ = Summary::decode(&bytes);
        }

        #[test]
        fn welcome_and_summary_round_trip(status in 0u8..4, max: u32, rcv: u32, snd: u32, reason in ".{0,40}", fields: [u64; 6]) {
            let status = [Status::Ok, Status::Version, Status::Busy, Status::Refused][status as usize];
            let welcome = Welcome { version: VERSION, status, message_bytes_max: max, rcvbuf_bytes: rcv, sndbuf_bytes: snd, reason };
            prop_assert_eq!(Welcome::decode(&welcome.encode()), Ok(welcome));
            let summary = Summary { messages: fields[0], bytes: fields[1], syncs: fields[2], sync_ns_p50: fields[3], sync_ns_p99: fields[4], sync_ns_max: fields[5] };
            prop_assert_eq!(Summary::decode(&summary.encode()), Ok(summary));
        }
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("abc", 10), "abc");
    }
}
