//! Round trips of every message, streams split anywhere, and hostile bytes.

use proptest::prelude::*;

use super::*;

fn position() -> impl Strategy<Value = Position> {
    (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(a, b, c, d)| Position {
        complete_through_seq: a,
        current_seq: b,
        current_offset: c,
        applied_scn: d,
    })
}

fn record() -> impl Strategy<Value = IncarnationRecord> {
    (any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>(), any::<u64>(), "[a-z]{0,12}").prop_map(
        |(first_seq, first_scn, prev_end_offset, prev_closed_here, created_us, member)| {
            IncarnationRecord {
                incarnation: 0,
                parent: 0,
                first_seq,
                first_scn,
                prev_end_offset,
                prev_closed_here,
                created_us,
                member,
            }
        },
    )
}

/// Consecutive records from incarnation `first` on, as a history is.
fn history() -> impl Strategy<Value = Vec<IncarnationRecord>> {
    (2u32..1000, prop::collection::vec(record(), 0..5)).prop_map(|(first, records)| {
        records
            .into_iter()
            .enumerate()
            .map(|(index, record)| {
                let incarnation = first + index as u32;
                IncarnationRecord { incarnation, parent: incarnation - 1, ..record }
            })
            .collect()
    })
}

fn names() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[a-z0-9_-]{1,12}", 0..=crate::NAMES_MAX)
}

pub(crate) fn message() -> impl Strategy<Value = Message> {
    let text = "[ -~é]{0,40}";
    prop_oneof![
        (
            any::<u16>(),
            any::<u16>(),
            any::<u64>(),
            any::<u32>(),
            any::<u16>(),
            0u8..3,
            text,
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            (text, history(), text)
        )
            .prop_map(
                |(
                    version,
                    version_min,
                    database_id,
                    incarnation,
                    thread,
                    channel,
                    destination,
                    block_size,
                    log_file_size,
                    groups,
                    primary_time_us,
                    (member, history, relay_of),
                )| Message::Hello(Hello {
                    version,
                    version_min,
                    database_id,
                    incarnation,
                    thread,
                    channel: [Channel::Control, Channel::Sync, Channel::Archive][channel as usize],
                    destination,
                    block_size,
                    log_file_size,
                    groups,
                    primary_time_us,
                    member,
                    history,
                    relay_of,
                })
            ),
        (any::<u16>(), any::<u64>(), position(), any::<u64>()).prop_map(
            |(version, database_id, position, standby_time_us)| Message::Welcome(Welcome {
                version,
                database_id,
                position,
                standby_time_us
            })
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            1u8..=3,
            0u8..=2,
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 1..600),
            prop_oneof![Just(0u32), 1..=crate::ZERO_TAIL_MAX]
        )
            .prop_map(
                |(
                    write_id,
                    seq,
                    offset,
                    kind,
                    ack,
                    primary_time_us,
                    last_scn,
                    primary_durable_scn,
                    bytes,
                    zero_tail,
                )| Message::Write(Write {
                    write_id,
                    seq,
                    offset,
                    kind: [WriteKind::Units, WriteKind::OpenHeader, WriteKind::ClosedHeader]
                        [kind as usize - 1],
                    ack: [AckWanted::None, AckWanted::Received, AckWanted::Durable][ack as usize],
                    primary_time_us,
                    last_scn,
                    primary_durable_scn,
                    bytes,
                    zero_tail,
                })
            ),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(
            |(write_id, seq, end_offset, durable)| Message::Ack(Ack {
                write_id,
                seq,
                end_offset,
                durable
            })
        ),
        (
            prop::array::uniform6(any::<u64>()),
            any::<bool>(),
            text,
            prop::option::of((
                any::<u64>(),
                prop::collection::vec((text, text, any::<bool>()), 0..=crate::NAMES_MAX)
            ))
        )
            .prop_map(|(v, caught_up, observer, relay)| Message::Heartbeat(Heartbeat {
                primary_time_us: v[0],
                current_scn: v[1],
                durable_scn: v[2],
                current_seq: v[3],
                current_offset: v[4],
                transport_lag_us: v[5],
                caught_up,
                observer,
                relay: relay.map(|(primary_silence_ms, targets)| crate::RelayWord {
                    primary_silence_ms,
                    targets: targets
                        .into_iter()
                        .map(|(member, observer, caught_up)| crate::TargetWord {
                            member,
                            observer,
                            caught_up
                        })
                        .collect(),
                }),
            })),
        (
            text,
            any::<u64>(),
            (any::<bool>(), names(), any::<bool>(), names()),
            (any::<u32>(), text, text, any::<u32>()),
            (any::<u64>(), any::<u64>(), any::<u8>())
        )
            .prop_map(
                |(
                    observer,
                    time_us,
                    (lease, grant_unsync, failover, following),
                    (newer_incarnation, new_primary, failover_from, failover_incarnation),
                    (threshold_ms, lag_limit_ms, protection),
                )| {
                    Message::ObserverPing(ObserverPing {
                        observer,
                        time_us,
                        lease,
                        grant_unsync,
                        failover,
                        newer_incarnation,
                        new_primary,
                        following,
                        failover_from,
                        failover_incarnation,
                        threshold_ms,
                        lag_limit_ms,
                        protection,
                    })
                }
            ),
        (
            text,
            (any::<bool>(), names(), any::<bool>(), names()),
            prop::array::uniform3(any::<u64>()),
            text,
            position(),
            (any::<bool>(), 0u8..3)
        )
            .prop_map(
                |(
                    active_observer,
                    (synchronized, wants_unsync, isolated, targets_synchronized),
                    v,
                    refusal,
                    position,
                    (refusal_final, mode),
                )| {
                    Message::ObserverPong(ObserverPong {
                        info: RoleInfo {
                            member: "east".into(),
                            role: WireRole::Primary,
                            database_id: v[0],
                            incarnation: 2,
                            fenced_incarnation: 0,
                            primary: String::new(),
                            position,
                            durable_scn: v[1],
                            time_us: v[2],
                            history: Vec::new(),
                        },
                        active_observer,
                        synchronized,
                        wants_unsync,
                        isolated,
                        primary_silence_ms: v[0],
                        transport_lag_ms: v[1],
                        apply_lag_ms: v[2],
                        refusal,
                        targets_synchronized,
                        refusal_final,
                        mode: match mode {
                            0 => FastStartMode::Disabled,
                            1 => FastStartMode::Enabled,
                            _ => FastStartMode::ObserveOnly,
                        },
                    })
                }
            ),
        (position(), any::<u64>(), any::<u64>()).prop_map(
            |(position, apply_lag_us, standby_time_us)| Message::StandbyStatus(StandbyStatus {
                position,
                apply_lag_us,
                standby_time_us
            })
        ),
        (any::<u64>(), 0u64..1000, prop::collection::vec(any::<u8>(), 1..300), 0u64..1000)
            .prop_map(|(seq, offset, bytes, extra)| {
                let total_len = offset + bytes.len() as u64 + extra;
                Message::ArchiveChunk(ArchiveChunk { seq, offset, total_len, bytes })
            }),
        (any::<u64>(), any::<bool>())
            .prop_map(|(seq, complete)| Message::ArchiveAck(ArchiveAck { seq, complete })),
        (1u64..1000, 0u64..1000).prop_map(|(from_seq, span)| Message::GapRequest(GapRequest {
            from_seq,
            to_seq: from_seq + span
        })),
        (1u16..=10, text, any::<u32>(), text).prop_map(|(code, message, incarnation, primary)| {
            Message::Error(ErrorMessage {
                code: ErrorCode::from_u16(code),
                message,
                incarnation,
                primary,
            })
        }),
        (text, any::<u64>())
            .prop_map(|(member, time_us)| Message::Probe(Probe { member, time_us })),
        (text, text, any::<u32>(), any::<u64>()).prop_map(
            |(member, primary, incarnation, time_us)| {
                Message::RelaySeal(RelaySeal { member, primary, incarnation, time_us })
            }
        ),
        (text, any::<bool>(), any::<u64>(), (any::<u32>(), any::<u32>()), text, position())
            .prop_flat_map(
                move |(
                    member,
                    primary_role,
                    database_id,
                    (incarnation, fenced),
                    primary,
                    position,
                )| {
                    (any::<u64>(), any::<u64>(), history()).prop_map(
                        move |(durable_scn, time_us, history)| {
                            Message::RoleInfo(RoleInfo {
                                member: member.clone(),
                                role: if primary_role {
                                    WireRole::Primary
                                } else {
                                    WireRole::Standby
                                },
                                database_id,
                                incarnation,
                                fenced_incarnation: fenced,
                                primary: primary.clone(),
                                position,
                                durable_scn,
                                time_us,
                                history,
                            })
                        },
                    )
                }
            ),
        (text, any::<u64>())
            .prop_map(|(member, time_us)| Message::CopyRequest(CopyRequest { member, time_us })),
        (prop::array::uniform6(any::<u64>()), any::<u32>(), any::<u32>(), text, history())
            .prop_map(|(v, incarnation, block_size, member, history)| Message::CopyBegin(
                CopyBegin {
                    database_id: v[0],
                    incarnation,
                    checkpoint_scn: v[1],
                    first_seq: v[2],
                    keys: v[3],
                    bytes: v[4],
                    block_size,
                    log_file_size: v[5],
                    member,
                    history,
                }
            )),
        prop::collection::vec(
            (prop::collection::vec(any::<u8>(), 0..20), prop::collection::vec(any::<u8>(), 0..40)),
            0..10
        )
        .prop_map(|entries| Message::CopyChunk(CopyChunk { entries })),
        (any::<u64>(), any::<u64>())
            .prop_map(|(keys, bytes)| Message::CopyEnd(CopyEnd { keys, bytes })),
    ]
}

proptest! {
    #[test]
    fn every_message_round_trips(message in message()) {
        let frame = message.to_frame();
        let decoder = Decoder::default();
        prop_assert_eq!(decoder.frame_len(&frame).unwrap(), Some(frame.len()));
        let (decoded, used) = decoder.decode(&frame).unwrap().unwrap();
        prop_assert_eq!(used, frame.len());
        prop_assert_eq!(decoded, message);
        // Any prefix is "need more bytes", never an error.
        for cut in 0..frame.len() {
            prop_assert_eq!(decoder.decode(&frame[..cut]).unwrap(), None);
        }
    }

    #[test]
    fn a_stream_of_messages_decodes_in_order(messages in prop::collection::vec(message(), 1..8)) {
        let mut stream = Vec::new();
        for message in &messages {
            message.encode(&mut stream);
        }
        let decoder = Decoder::default();
        let mut at = 0;
        let mut decoded = Vec::new();
        while let Some((message, used)) = decoder.decode(&stream[at..]).unwrap() {
            decoded.push(message);
            at += used;
        }
        prop_assert_eq!(at, stream.len());
        prop_assert_eq!(decoded, messages);
    }

    #[test]
    fn any_flipped_bit_is_refused(message in message(), position in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut frame = message.to_frame();
        let at = position.index(frame.len());
        frame[at] ^= 1 << bit;
        match Decoder::default().decode(&frame) {
            Ok(Some((decoded, _))) => prop_assert!(false, "a damaged frame decoded as {decoded:?}"),
            Ok(None) => prop_assert!((4..8).contains(&at), "only a changed length can make the frame look incomplete"),
            Err(_) => {}
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Decoder::default().decode(&bytes);
        // Also behind a valid header, so that the payload decoders see them.
        for kind in 1u8..=20 {
            let mut frame = vec![0u8; FRAME_HEADER_LEN];
            frame[0..4].copy_from_slice(b"RGWP");
            frame[4..8].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            frame[8] = kind;
            frame.extend_from_slice(&bytes);
            let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[8..12]), &frame[FRAME_HEADER_LEN..]);
            frame[12..16].copy_from_slice(&crc.to_le_bytes());
            let _ = Decoder::default().decode(&frame);
        }
    }
}

#[test]
fn a_lying_length_is_refused_from_the_header_alone() {
    let mut header = [0u8; FRAME_HEADER_LEN];
    header[0..4].copy_from_slice(b"RGWP");
    header[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let error = Decoder::default().frame_len(&header).unwrap_err();
    assert_eq!(
        error,
        ProtoError::TooLong { length: u32::MAX as usize, max: FRAME_PAYLOAD_MAX_DEFAULT }
    );
    assert!(matches!(Decoder::default().frame_len(b"GET / HTTP/1.1"), Err(ProtoError::Magic(_))));
}

#[test]
fn the_handshake_refuses_other_databases_versions_and_layouts() {
    let hello = Hello {
        version: PROTOCOL_VERSION,
        version_min: PROTOCOL_VERSION_MIN,
        database_id: 7,
        incarnation: 1,
        thread: 1,
        channel: Channel::Control,
        destination: "standby1".into(),
        block_size: 4096,
        log_file_size: 64 << 20,
        groups: 3,
        primary_time_us: 0,
        member: "east".into(),
        history: Vec::new(),
        relay_of: String::new(),
    };
    let ours = LocalIdentity { database_id: 7, block_size: 4096, log_file_size: 64 << 20 };
    assert_eq!(check_hello(&hello, &ours), Ok(()));
    assert_eq!(
        check_hello(&hello, &LocalIdentity { database_id: 0, ..ours }),
        Ok(()),
        "a new standby adopts the database"
    );
    let other = check_hello(&hello, &LocalIdentity { database_id: 8, ..ours }).unwrap_err();
    assert_eq!(other.code, ErrorCode::WrongDatabase);
    assert!(other.message.contains("0000000000000008"), "{}", other.message);
    let future =
        Hello { version: PROTOCOL_VERSION + 1, version_min: PROTOCOL_VERSION + 1, ..hello.clone() };
    assert_eq!(check_hello(&future, &ours).unwrap_err().code, ErrorCode::VersionMismatch);
    let layout = check_hello(&hello, &LocalIdentity { block_size: 512, ..ours }).unwrap_err();
    assert_eq!(layout.code, ErrorCode::LayoutMismatch);
}

#[test]
fn a_hello_on_an_unknown_channel_is_refused_as_malformed() {
    let hello = Message::Hello(Hello {
        version: PROTOCOL_VERSION,
        version_min: PROTOCOL_VERSION_MIN,
        database_id: 7,
        incarnation: 1,
        thread: 1,
        channel: Channel::Archive,
        destination: "standby1".into(),
        block_size: 4096,
        log_file_size: 64 << 20,
        groups: 3,
        primary_time_us: 0,
        member: "east".into(),
        history: Vec::new(),
        relay_of: String::new(),
    });
    let frame = hello.to_frame();
    let (decoded, _) = Decoder::default().decode(&frame).unwrap().unwrap();
    assert_eq!(decoded, hello, "channel 3 (archive) is version 4's");
    // Channel is byte 18 of the payload; the CRC is made again so that only the channel is wrong.
    let mut forged = frame.clone();
    forged[FRAME_HEADER_LEN + 18] = 4;
    let mut crc = crc32c::crc32c(&forged[8..12]);
    crc = crc32c::crc32c_append(crc, &forged[FRAME_HEADER_LEN..]);
    forged[12..16].copy_from_slice(&crc.to_le_bytes());
    let error = Decoder::default().decode(&forged).unwrap_err();
    assert!(error.to_string().contains("unknown channel 4"), "{error}");
}

proptest! {
    #[test]
    fn a_write_leaves_out_its_zero_tail_and_gets_it_back(
        head in prop::collection::vec(any::<u8>(), 0..300),
        zeros in prop_oneof![0usize..40, 4000usize..4200, 65530usize..65600],
    ) {
        let mut whole = head.clone();
        whole.resize(head.len() + zeros, 0);
        prop_assume!(!whole.is_empty());
        let tail = crate::zero_tail(&whole);
        prop_assert!(tail < whole.len(), "at least one byte is sent");
        prop_assert!(tail <= crate::ZERO_TAIL_MAX as usize);
        prop_assert!(whole[whole.len() - tail..].iter().all(|&byte| byte == 0));
        let short_of_the_bound = tail < crate::ZERO_TAIL_MAX as usize;
        if short_of_the_bound && tail + 1 < whole.len() {
            prop_assert_ne!(whole[whole.len() - tail - 1], 0, "every trailing zero is left out");
        }
        let write = Write {
            write_id: 1,
            seq: 2,
            offset: 4096,
            kind: WriteKind::Units,
            ack: AckWanted::Durable,
            primary_time_us: 3,
            last_scn: 4,
            primary_durable_scn: 5,
            bytes: whole[..whole.len() - tail].to_vec(),
            zero_tail: tail as u32,
        };
        prop_assert_eq!(write.len(), whole.len() as u64);
        let frame = Message::Write(write.clone()).to_frame();
        prop_assert_eq!(frame[8], if tail > 0 { 19 } else { 3 }, "a whole write is a version 4 Write");
        let (decoded, _) = Decoder::default().decode(&frame).unwrap().unwrap();
        prop_assert_eq!(&decoded, &Message::Write(write));
        let Message::Write(decoded) = decoded else { unreachable!() };
        // The decoder left room for the tail: putting it back moves nothing.
        let at = decoded.bytes.as_ptr();
        let untrimmed = decoded.untrimmed();
        prop_assert_eq!(untrimmed.bytes.as_ptr(), at);
        prop_assert_eq!(untrimmed.bytes, whole);
    }
}

#[test]
fn a_trimmed_write_with_an_impossible_zero_tail_is_refused() {
    let write = Message::Write(Write {
        write_id: 1,
        seq: 2,
        offset: 4096,
        kind: WriteKind::Units,
        ack: AckWanted::None,
        primary_time_us: 3,
        last_scn: 4,
        primary_durable_scn: 5,
        bytes: b"RGRU".to_vec(),
        zero_tail: 4092,
    });
    let frame = write.to_frame();
    assert_eq!(Decoder::default().decode(&frame).unwrap().unwrap().0, write);
    // The zero tail is bytes 50..54 of the payload; the CRC is made again so that only it is
    // wrong.
    for (tail, says) in [(0u32, "zero tail of 0 bytes"), (crate::ZERO_TAIL_MAX + 1, "65537")] {
        let mut forged = frame.clone();
        forged[FRAME_HEADER_LEN + 50..FRAME_HEADER_LEN + 54].copy_from_slice(&tail.to_le_bytes());
        let mut crc = crc32c::crc32c(&forged[8..12]);
        crc = crc32c::crc32c_append(crc, &forged[FRAME_HEADER_LEN..]);
        forged[12..16].copy_from_slice(&crc.to_le_bytes());
        let error = Decoder::default().decode(&forged).unwrap_err();
        assert!(error.to_string().contains(says), "{error}");
    }
}

#[test]
fn a_name_list_longer_than_its_bound_is_refused() {
    use crate::frame::{Reader, Writer};
    let mut bytes = Vec::new();
    let mut writer = Writer(&mut bytes);
    writer.u8(crate::NAMES_MAX as u8 + 1);
    for _ in 0..=crate::NAMES_MAX {
        writer.text("x");
    }
    let mut reader = Reader { bytes: &bytes, at: 0, kind: crate::Kind::ObserverPong };
    assert!(reader.names().is_err());
}

#[test]
fn long_text_is_cut_at_a_character_boundary() {
    let message = Message::Error(ErrorMessage::new(ErrorCode::Internal, "é".repeat(TEXT_MAX)));
    let (decoded, _) = Decoder::default().decode(&message.to_frame()).unwrap().unwrap();
    let Message::Error(error) = decoded else { panic!() };
    assert!(error.message.len() <= TEXT_MAX && error.message.chars().all(|c| c == 'é'));
}

#[test]
fn a_history_that_skips_or_forges_an_incarnation_is_refused() {
    let record = |incarnation: u32| IncarnationRecord {
        incarnation,
        parent: incarnation - 1,
        first_seq: 10,
        first_scn: 100,
        ..IncarnationRecord::default()
    };
    let probe = |history: Vec<IncarnationRecord>| {
        Message::RoleInfo(RoleInfo {
            member: "west".into(),
            role: WireRole::Standby,
            database_id: 1,
            incarnation: 3,
            fenced_incarnation: 0,
            primary: String::new(),
            position: Position::default(),
            durable_scn: 0,
            time_us: 0,
            history,
        })
        .to_frame()
    };
    assert!(Decoder::default().decode(&probe(vec![record(2), record(3)])).is_ok());
    let skipped = Decoder::default().decode(&probe(vec![record(2), record(4)])).unwrap_err();
    assert!(skipped.to_string().contains("consecutive"), "{skipped}");
    let forged = IncarnationRecord { parent: 7, ..record(3) };
    assert!(Decoder::default().decode(&probe(vec![forged])).is_err());
}

/// A copy chunk's frame with its entry count forged to `count`, resealed (CRC).
fn copy_chunk_claiming(count: u32) -> Vec<u8> {
    let mut frame =
        Message::CopyChunk(CopyChunk { entries: vec![(b"k".to_vec(), b"v".to_vec())] }).to_frame();
    frame[FRAME_HEADER_LEN..FRAME_HEADER_LEN + 4].copy_from_slice(&count.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&frame[8..12]), &frame[FRAME_HEADER_LEN..]);
    frame[12..16].copy_from_slice(&crc.to_le_bytes());
    frame
}

#[test]
fn a_copy_chunk_that_claims_more_entries_than_it_holds_is_refused_before_allocating() {
    let error = Decoder::default().decode(&copy_chunk_claiming(1000)).unwrap_err();
    assert!(error.to_string().contains("1000 entries cannot fit"), "{error}");
    // A count over the bound is refused as such, whatever the frame holds.
    let error = Decoder::default().decode(&copy_chunk_claiming(u32::MAX)).unwrap_err();
    assert!(error.to_string().contains("more than 1048576"), "{error}");
}

/// Decoded, an entry takes 48 bytes however short it was on the wire: a chunk of empty pairs
/// (8 bytes each) may carry `COPY_CHUNK_ENTRIES_MAX` of them, and not one more.
#[test]
fn a_copy_chunk_carries_at_most_its_bound_of_entries() {
    let chunk = |count: usize| {
        Message::CopyChunk(CopyChunk { entries: vec![(Vec::new(), Vec::new()); count] }).to_frame()
    };
    let decoder = Decoder { payload_max: 16 << 20 };
    let (message, _) = decoder.decode(&chunk(COPY_CHUNK_ENTRIES_MAX)).unwrap().unwrap();
    assert!(
        matches!(message, Message::CopyChunk(CopyChunk { entries }) if entries.len() == COPY_CHUNK_ENTRIES_MAX)
    );
    let error = decoder.decode(&chunk(COPY_CHUNK_ENTRIES_MAX + 1)).unwrap_err();
    assert!(error.to_string().contains("more than 1048576"), "{error}");
}

/// An incarnation record takes at least 43 bytes on the wire: a history count that the bytes
/// left cannot hold is refused before its records are allocated.
#[test]
fn a_history_that_claims_more_records_than_it_holds_is_refused_before_allocating() {
    let decode = |bytes: &[u8]| {
        let mut reader = frame::Reader { bytes, at: 0, kind: Kind::Hello };
        roles::decode_history(&mut reader)
    };
    // 64 records claimed, 42 bytes after the count.
    let mut bytes = 64u16.to_le_bytes().to_vec();
    bytes.extend([0u8; 42]);
    let error = decode(&bytes).unwrap_err();
    assert!(error.to_string().contains("64 incarnation records cannot fit in 42 bytes"), "{error}");
    // One record of 43 bytes (no member name) fits, and decodes.
    let record = IncarnationRecord {
        incarnation: 2,
        parent: 1,
        first_seq: 3,
        first_scn: 4,
        prev_end_offset: 5,
        prev_closed_here: true,
        created_us: 6,
        member: String::new(),
    };
    let mut encoded = Vec::new();
    roles::encode_history(std::slice::from_ref(&record), &mut frame::Writer(&mut encoded));
    assert_eq!(encoded.len(), 2 + 43);
    assert_eq!(decode(&encoded).unwrap(), vec![record]);
}

/// Version 9's relay word trails a heartbeat only when present: without it, a heartbeat is
/// byte for byte a version 8 one (what a version 8 peer is sent); a word naming more targets
/// than any configuration has is refused by name.
#[test]
fn a_heartbeat_without_a_relay_word_is_a_version_8_heartbeat_and_a_long_word_is_refused() {
    let beat = Heartbeat {
        primary_time_us: 1,
        current_scn: 2,
        durable_scn: 3,
        current_seq: 4,
        current_offset: 5,
        transport_lag_us: 6,
        caught_up: true,
        observer: "obs1".into(),
        relay: None,
    };
    let plain = Message::Heartbeat(beat.clone()).to_frame();
    // 16-byte header, six u64, a bool, a text (u16 length + 4 bytes).
    assert_eq!(plain.len(), 16 + 48 + 1 + 2 + 4);
    let word = |count: usize| crate::RelayWord {
        primary_silence_ms: 7,
        targets: (0..count)
            .map(|index| crate::TargetWord {
                member: format!("t{index}"),
                observer: "obs1".into(),
                caught_up: true,
            })
            .collect(),
    };
    let with = Message::Heartbeat(Heartbeat { relay: Some(word(2)), ..beat.clone() });
    assert_eq!(
        Decoder::default().decode(&with.to_frame()).unwrap().map(|(message, _)| message),
        Some(with)
    );
    let long = Message::Heartbeat(Heartbeat { relay: Some(word(crate::NAMES_MAX + 1)), ..beat })
        .to_frame();
    let error = Decoder::default().decode(&long).unwrap_err().to_string();
    assert!(error.contains("targets behind a relay"), "{error}");
}
