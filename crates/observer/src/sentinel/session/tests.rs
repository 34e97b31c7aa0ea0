use bytes::Bytes;
use resp::{Frame, ProtocolVersion};

use super::{Knowledge, Session, Step};

/// A configuration whose primary is at 127.0.0.1:6390.
struct Fixed;

impl Knowledge for Fixed {
    fn sentinel(&self, args: &[String]) -> Frame {
        match args[0].as_str() {
            "get-master-addr-by-name" => {
                Frame::Array(vec![Frame::bulk("127.0.0.1"), Frame::bulk("6390")])
            }
            "masters" => Frame::Array(vec![Frame::Map(vec![
                (Frame::bulk("name"), Frame::bulk("pair")),
                (Frame::bulk("flags"), Frame::bulk("master")),
            ])]),
            _ => Frame::Null,
        }
    }

    fn info(&self) -> String {
        "# Sentinel\r\nsentinel_masters:1\r\n".into()
    }

    fn master_names(&self) -> Vec<String> {
        vec!["pair".into()]
    }
}

fn ask(session: &mut Session, words: &[&str]) -> Step {
    let args: Vec<Bytes> = words.iter().map(|word| Bytes::from(word.to_string())).collect();
    session.handle(&args, &Fixed)
}

/// The reply's bytes as the session's protocol encodes them.
fn wire(session: &mut Session, words: &[&str]) -> String {
    match ask(session, words) {
        Step::Reply(frames) => frames
            .iter()
            .map(|frame| String::from_utf8_lossy(&frame.to_bytes(session.protocol())).into_owned())
            .collect(),
        Step::ReplyAndClose(frame) => {
            format!("{} (closed)", String::from_utf8_lossy(&frame.to_bytes(session.protocol())))
        }
        Step::Close => "(closed)".into(),
    }
}

#[test]
fn hello_3_switches_to_resp3_and_says_sentinel() {
    let mut session = Session::new(9, None);
    let reply = wire(&mut session, &["HELLO", "3"]);
    assert!(reply.starts_with("%6\r\n"), "{reply}");
    assert!(reply.contains("$4\r\nmode\r\n$8\r\nsentinel\r\n"), "{reply}");
    assert!(reply.contains("$5\r\nproto\r\n:3\r\n"), "{reply}");
    assert!(!reply.contains("role"), "a Sentinel's HELLO has no role: {reply}");
    assert_eq!(session.protocol(), ProtocolVersion::Resp3);
    // RESP3: an instance is a map, a missing master null.
    assert_eq!(
        wire(&mut session, &["SENTINEL", "masters"]),
        "*1\r\n%2\r\n$4\r\nname\r\n$4\r\npair\r\n$5\r\nflags\r\n$6\r\nmaster\r\n"
    );
    // Back to RESP2: the same map as a flat array.
    let reply = wire(&mut session, &["HELLO", "2"]);
    assert!(reply.starts_with("*12\r\n"), "{reply}");
    assert_eq!(
        wire(&mut session, &["SENTINEL", "masters"]),
        "*1\r\n*4\r\n$4\r\nname\r\n$4\r\npair\r\n$5\r\nflags\r\n$6\r\nmaster\r\n"
    );
    assert_eq!(wire(&mut session, &["HELLO", "4"]), "-NOPROTO unsupported protocol version\r\n");
    assert!(wire(&mut session, &["HELLO", "three"]).starts_with("-ERR Protocol version"));
    assert!(wire(&mut session, &["HELLO", "3", "BOGUS"]).starts_with("-ERR Syntax error"));
    assert_eq!(session.protocol(), ProtocolVersion::Resp2, "a refused HELLO changes nothing");
}

#[test]
fn client_setinfo_and_names_are_taken_and_checked() {
    let mut session = Session::new(1, None);
    assert_eq!(wire(&mut session, &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]), "+OK\r\n");
    assert_eq!(wire(&mut session, &["CLIENT", "SETINFO", "lib-ver", "8.1.0"]), "+OK\r\n");
    assert_eq!(session.library().0.map(|name| name.as_ref()), Some(&b"redis-py"[..]));
    assert!(
        wire(&mut session, &["CLIENT", "SETINFO", "LIB-NAME", "a b"]).starts_with("-ERR LIB-NAME")
    );
    assert!(
        wire(&mut session, &["CLIENT", "SETINFO", "COLOUR", "x"]).starts_with("-ERR Unrecognized")
    );
    assert_eq!(wire(&mut session, &["CLIENT", "SETNAME", "app"]), "+OK\r\n");
    assert_eq!(wire(&mut session, &["CLIENT", "GETNAME"]), "$3\r\napp\r\n");
    assert_eq!(wire(&mut session, &["CLIENT", "ID"]), ":1\r\n");
    assert!(wire(&mut session, &["CLIENT", "KILL", "x"]).starts_with("-ERR unknown subcommand"));
}

#[test]
fn with_a_password_nothing_but_auth_hello_and_quit_before_it() {
    let mut session = Session::new(1, Some("sentinel secret"));
    assert_eq!(
        wire(&mut session, &["SENTINEL", "get-master-addr-by-name", "pair"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert!(wire(&mut session, &["HELLO", "3"]).starts_with("-NOAUTH HELLO must be called"));
    assert_eq!(session.protocol(), ProtocolVersion::Resp2);
    assert!(wire(&mut session, &["AUTH", "wrong"]).starts_with("-WRONGPASS"));
    // HELLO with AUTH: authenticates and switches at once, as redis-py 8 does.
    let reply = wire(&mut session, &["HELLO", "3", "AUTH", "default", "sentinel secret"]);
    assert!(reply.starts_with("%6\r\n"), "{reply}");
    assert_eq!(
        wire(&mut session, &["SENTINEL", "get-master-addr-by-name", "pair"]),
        "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6390\r\n"
    );
    // Another user does not exist.
    let mut other = Session::new(2, Some("sentinel secret"));
    assert!(wire(&mut other, &["AUTH", "admin", "sentinel secret"]).starts_with("-WRONGPASS"));
    assert!(wire(&mut other, &["AUTH", "sentinel secret"]).starts_with("+OK"));
    // Three wrong passwords close a connection that has not authenticated.
    let mut guesser = Session::new(3, Some("sentinel secret"));
    assert!(wire(&mut guesser, &["AUTH", "a"]).starts_with("-WRONGPASS"));
    assert!(wire(&mut guesser, &["AUTH", "b"]).starts_with("-WRONGPASS"));
    assert!(wire(&mut guesser, &["AUTH", "c"]).ends_with("(closed)"));
}

#[test]
fn without_a_password_auth_is_answered_as_redis_does() {
    let mut session = Session::new(1, None);
    assert!(wire(&mut session, &["AUTH", "x"]).starts_with("-ERR AUTH <password> called without"));
    assert!(wire(&mut session, &["HELLO", "3", "AUTH", "default", "x"]).starts_with("-ERR AUTH"));
    assert_eq!(wire(&mut session, &["PING"]), "+PONG\r\n");
}

#[test]
fn subscriptions_are_pushes_in_resp3_and_bounded() {
    let mut session = Session::new(1, None);
    assert_eq!(
        wire(&mut session, &["SUBSCRIBE", "+switch-master"]),
        "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
    );
    let message = session.switch_message("pair 127.0.0.1 1 127.0.0.1 2").unwrap();
    assert!(
        String::from_utf8_lossy(&message.to_bytes(ProtocolVersion::Resp2))
            .starts_with("*3\r\n$7\r\nmessage")
    );
    assert_eq!(wire(&mut session, &["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    let mut resp3 = Session::new(2, None);
    wire(&mut resp3, &["HELLO", "3"]);
    assert_eq!(
        wire(&mut resp3, &["PSUBSCRIBE", "*"]),
        ">3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n"
    );
    let message = resp3.switch_message("pair 127.0.0.1 1 127.0.0.1 2").unwrap();
    assert!(matches!(&message, Frame::Push(items) if items.len() == 4));
    assert_eq!(wire(&mut resp3, &["PING"]), "+PONG\r\n");
    assert_eq!(
        wire(&mut resp3, &["PUNSUBSCRIBE"]),
        ">3\r\n$12\r\npunsubscribe\r\n$1\r\n*\r\n:0\r\n"
    );
    assert!(resp3.switch_message("x").is_none());
    let names: Vec<String> = (0..super::SUBSCRIPTIONS_MAX + 1).map(|n| format!("c{n}")).collect();
    let mut words = vec!["SUBSCRIBE"];
    words.extend(names.iter().map(String::as_str));
    let reply = wire(&mut resp3, &words);
    assert!(reply.ends_with("channels and patterns at most\r\n"), "{reply}");
}

#[test]
fn http_closes_the_connection_and_unknown_commands_are_named() {
    let mut session = Session::new(1, None);
    assert_eq!(wire(&mut session, &["POST", "/", "HTTP/1.1"]), "(closed)");
    assert!(wire(&mut session, &["FLUSHALL"]).starts_with("-ERR unknown command 'flushall'"));
    assert_eq!(wire(&mut session, &["ROLE"]), "*2\r\n$8\r\nsentinel\r\n*1\r\n$4\r\npair\r\n");
}
