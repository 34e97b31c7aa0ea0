//! The authentication handshake on arbitrary bytes: requests decoded as a connection that has
//! not authenticated decodes them (its small limits), handed to a session that requires a
//! password, with a password check that accepts `default`/`secret` (admin) and
//! `reader`/`secret` (read). Never a panic; nothing is executed before a password was
//! accepted; after, nothing beyond the user's permission; an HTTP request closes.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use resp::{Action, Command, Limits, Permission, RequestDecoder, ServerFacts, Session, User};

fn check(username: &[u8], password: &[u8]) -> Option<User> {
    let permission = match (username, password) {
        (b"default", b"secret") => Permission::Admin,
        (b"reader", b"secret") => Permission::Read,
        _ => return None,
    };
    Some(User { name: Bytes::copy_from_slice(username), permission })
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    let unauthenticated = Limits {
        bulk_bytes_max: 16 << 10,
        arguments_max: 16,
        inline_bytes_max: 16 << 10,
        request_bytes_max: 64 << 10,
        ..Limits::default()
    };
    let facts = ServerFacts::new(&limits);
    let mut session = Session::requiring_auth(1, &limits);
    let mut decoder = RequestDecoder::new(unauthenticated);
    let mut buffer = BytesMut::from(data);
    loop {
        let request = match decoder.decode(&mut buffer) {
            Ok(Some(request)) => request,
            // Need more bytes, or a protocol error (the connection closes).
            Ok(None) | Err(_) => return,
        };
        let permission = session.user().map(|user| user.permission);
        match session.handle(Command::parse(request), &facts) {
            Action::Reply(_) | Action::ReplyAndClose(_) | Action::UnwatchAndReply(_) => {}
            Action::Close => return,
            Action::Authenticate { username, password, hello } => {
                let before = session.user().cloned();
                let user = check(&username, &password);
                let accepted = user.is_some();
                session.authenticated(user.clone(), hello, &facts);
                if accepted {
                    assert_eq!(session.user(), user.as_ref());
                    decoder = RequestDecoder::new(limits.clone());
                } else {
                    assert_eq!(session.user().cloned(), before, "a failed AUTH changed the user");
                }
            }
            Action::Execute(command) => {
                let permission = permission.expect("executed before a password was accepted");
                assert!(command.permission().is_none_or(|needs| needs <= permission));
            }
            Action::ExecuteTransaction(commands) => {
                let permission = permission.expect("executed before a password was accepted");
                for command in commands {
                    assert!(command.permission().is_none_or(|needs| needs <= permission));
                }
            }
        }
    }
});
