//! The standby's side of the handshake on arbitrary bytes, as `transport`'s standby serves a
//! connection: the first frame is decoded; a hello is checked with `check_hello` against a
//! local identity, which must accept exactly the compatible hellos and name the first reason
//! to refuse the others; and whatever goes back (a welcome, or a refusal carrying the
//! decoder's or the check's text) is a valid frame that decodes to what was sent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::{
    Channel, Decoder, ErrorCode, ErrorMessage, FRAME_HEADER_LEN, Hello, LocalIdentity, Message,
    PROTOCOL_VERSION, PROTOCOL_VERSION_MIN, Position, TEXT_MAX, Welcome, check_hello,
};

/// Forges the magic and checksum of the first frame, so that the hello decoder is reached.
fn forge(frame: &mut [u8]) {
    if frame.len() < FRAME_HEADER_LEN {
        return;
    }
    frame[0..4].copy_from_slice(b"RGWP");
    let length = u32::from_le_bytes(frame[4..8].try_into().unwrap()) as usize;
    let Some(payload) = frame.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + length) else { return };
    let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[8..12]), payload);
    frame[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// The standby's identity: the hello's own values or near misses, so every branch is reached.
fn local_identity(selector: u8, hello: &Hello) -> LocalIdentity {
    LocalIdentity {
        database_id: match selector & 3 {
            0 => 0,
            1 | 2 => hello.database_id,
            _ => hello.database_id.wrapping_add(1),
        },
        block_size: if selector & 4 == 0 { hello.block_size } else { hello.block_size ^ 512 },
        log_file_size: if selector & 8 == 0 { hello.log_file_size } else { !hello.log_file_size },
    }
}

fn check(hello: &Hello, local: &LocalIdentity) -> Result<(), ErrorMessage> {
    let result = check_hello(hello, local);
    let version_ok = hello.version >= PROTOCOL_VERSION_MIN && hello.version_min <= PROTOCOL_VERSION;
    let database_ok = local.database_id == 0 || local.database_id == hello.database_id;
    let layout_ok =
        hello.block_size == local.block_size && hello.log_file_size == local.log_file_size;
    let expected = if !version_ok {
        Some(ErrorCode::VersionMismatch)
    } else if !database_ok {
        Some(ErrorCode::WrongDatabase)
    } else if !layout_ok {
        Some(ErrorCode::LayoutMismatch)
    } else {
        None
    };
    assert_eq!(result.as_ref().err().map(|error| error.code), expected, "{hello:?} {local:?}");
    result
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, data)) = input.split_first() else { return };
    let mut first = data.to_vec();
    if selector & 0x10 != 0 {
        forge(&mut first);
    }
    let decoder = Decoder::default();
    let reply = match decoder.decode(&first) {
        Ok(None) => return,
        Ok(Some((Message::Hello(hello), _))) => {
            assert!(hello.destination.len() <= TEXT_MAX && hello.member.len() <= TEXT_MAX);
            assert!(hello.history.len() <= proto::HISTORY_MAX);
            assert!(matches!(hello.channel, Channel::Control | Channel::Sync));
            match check(&hello, &local_identity(selector, &hello)) {
                Ok(()) => Message::Welcome(Welcome {
                    version: PROTOCOL_VERSION,
                    database_id: hello.database_id,
                    position: Position::default(),
                    standby_time_us: hello.primary_time_us,
                }),
                Err(refusal) => Message::Error(refusal),
            }
        }
        Ok(Some((other, _))) => Message::Error(ErrorMessage::new(
            ErrorCode::Malformed,
            format!("expected a hello, got {:?}", other.kind()),
        )),
        Err(error) => Message::Error(ErrorMessage::new(ErrorCode::Malformed, error.to_string())),
    };
    let sent = reply.to_frame();
    let (received, used) = decoder.decode(&sent).expect("our reply decodes").expect("whole");
    assert_eq!(used, sent.len());
    match (&reply, &received) {
        (Message::Error(sent), Message::Error(received)) => {
            assert_eq!(received.code, sent.code);
            // Text over TEXT_MAX is cut at a character boundary, never refused.
            assert!(received.message.len() <= TEXT_MAX);
            assert!(sent.message.starts_with(&received.message));
            if sent.message.len() <= TEXT_MAX {
                assert_eq!(received.message, sent.message);
            }
        }
        _ => assert_eq!(received, reply),
    }
});
