//! Command parsing and the session on arbitrary requests: never panic, and every error reply is
//! one line starting with an upper-case error code.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use resp::{Action, Command, Frame, Limits, ProtocolVersion, Request, ServerFacts, Session};

fuzz_target!(|data: &[u8]| {
    let limits = Limits { transaction_commands_max: 4, ..Limits::default() };
    let facts = ServerFacts::new(&limits);
    let mut session = Session::new(1, &limits);
    // Requests are separated by "\n", arguments by " ": simple, and reaches every command.
    for line in data.split(|&byte| byte == b'\n') {
        let args: Vec<Bytes> =
            line.split(|&byte| byte == b' ').map(Bytes::copy_from_slice).collect();
        let parsed = Command::parse(Request::new(args));
        if let Err(error) = &parsed {
            let text = error.to_string();
            let code = text.split(' ').next().unwrap_or_default();
            assert!(
                !code.is_empty() && code.bytes().all(|byte| byte.is_ascii_uppercase()),
                "{text}"
            );
        }
        let reply = match session.handle(parsed, &facts) {
            Action::Reply(reply) | Action::ReplyAndClose(reply) | Action::UnwatchAndReply(reply) => {
                reply
            }
            Action::Execute(command) => {
                assert!(command.name().chars().all(|c| c.is_ascii_lowercase() || c == '|' || c == '_'));
                continue;
            }
            Action::ExecuteTransaction(commands) => {
                assert!(commands.len() <= 4);
                continue;
            }
            // Without a password the session never asks; an HTTP request closes.
            Action::Authenticate { .. } => unreachable!("no password is required"),
            Action::Close => return,
        };
        for version in [ProtocolVersion::Resp2, ProtocolVersion::Resp3] {
            let bytes = reply.to_bytes(version);
            let unbounded = Limits { request_bytes_max: usize::MAX, ..Limits::default() };
            assert_eq!(Frame::check(&bytes, &unbounded), Ok(Some(bytes.len())), "one valid frame");
        }
    }
});
