//! Session: replies to connection commands, HELLO's protocol switch, MULTI/EXEC/DISCARD.

use bytes::Bytes;

use super::*;
use crate::cmd::{CommitWait, CommitWrite};
use crate::request::Request;

fn command(words: &[&str]) -> Result<Command, CommandError> {
    Command::parse(Request::new(words.iter().map(|word| Bytes::from(word.to_string())).collect()))
}

struct Fixture {
    session: Session,
    facts: ServerFacts,
}

impl Fixture {
    fn new() -> Fixture {
        let limits = Limits { transaction_commands_max: 3, ..Limits::default() };
        Fixture { session: Session::new(7, &limits), facts: ServerFacts::new(&limits) }
    }

    fn handle(&mut self, words: &[&str]) -> Action {
        self.session.handle(command(words), &self.facts)
    }

    /// The reply's bytes as this session would encode them.
    fn reply(&mut self, words: &[&str]) -> String {
        match self.handle(words) {
            Action::Reply(frame)
            | Action::ReplyAndClose(frame)
            | Action::UnwatchAndReply(frame) => {
                String::from_utf8(frame.to_bytes(self.session.protocol())).unwrap()
            }
            other => panic!("{words:?} gave {other:?}"),
        }
    }
}

#[test]
fn ping_echo_select_client() {
    let mut f = Fixture::new();
    assert_eq!(f.reply(&["PING"]), "+PONG\r\n");
    assert_eq!(f.reply(&["PING", "hi"]), "$2\r\nhi\r\n");
    assert_eq!(f.reply(&["ECHO", "hey"]), "$3\r\nhey\r\n");
    assert_eq!(f.reply(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(f.reply(&["SELECT", "9"]), "-ERR DB index is out of range\r\n");
    assert_eq!(f.reply(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(f.reply(&["CLIENT", "SETNAME", "app"]), "+OK\r\n");
    assert_eq!(f.reply(&["CLIENT", "GETNAME"]), "$3\r\napp\r\n");
    assert_eq!(f.reply(&["CLIENT", "SETNAME", ""]), "+OK\r\n");
    assert_eq!(f.reply(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(f.reply(&["CLIENT", "ID"]), ":7\r\n");
    assert_eq!(f.reply(&["CLIENT", "SETINFO", "LIB-NAME", "redis-py"]), "+OK\r\n");
    assert_eq!(f.session.library().0, Some(&Bytes::from_static(b"redis-py")));
    assert_eq!(
        f.reply(&["NOPE", "x"]),
        "-ERR unknown command 'NOPE', with args beginning with: 'x' \r\n"
    );
    assert_eq!(f.reply(&["QUIT"]), "+OK\r\n");
    assert!(matches!(f.handle(&["QUIT"]), Action::ReplyAndClose(_)));
}

#[test]
fn hello_switches_the_protocol_and_replies_in_the_new_one() {
    let mut f = Fixture::new();
    let version = env!("CARGO_PKG_VERSION");
    let resp2 = format!(
        "*14\r\n+server\r\n$9\r\nredoguard\r\n+version\r\n${}\r\n{version}\r\n+proto\r\n:2\r\n\
         +id\r\n:7\r\n+mode\r\n$10\r\nstandalone\r\n+role\r\n$6\r\nmaster\r\n+modules\r\n*0\r\n",
        version.len()
    );
    assert_eq!(f.reply(&["HELLO"]), resp2);
    let reply = f.reply(&["HELLO", "3", "SETNAME", "app"]);
    assert!(reply.starts_with("%7\r\n+server\r\n"), "{reply}");
    assert!(reply.contains("+proto\r\n:3\r\n"), "{reply}");
    assert_eq!(f.session.protocol(), ProtocolVersion::Resp3);
    assert_eq!(f.reply(&["CLIENT", "GETNAME"]), "$3\r\napp\r\n");
    assert_eq!(f.reply(&["CLIENT", "SETNAME", ""]), "+OK\r\n");
    assert_eq!(f.reply(&["CLIENT", "GETNAME"]), "_\r\n");
    assert_eq!(f.reply(&["HELLO", "4"]), "-NOPROTO unsupported protocol version\r\n");
    assert_eq!(f.session.protocol(), ProtocolVersion::Resp3, "a refused HELLO changes nothing");
    assert_eq!(
        f.reply(&["HELLO", "2", "AUTH", "admin", "secret"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(f.session.protocol(), ProtocolVersion::Resp3);
    assert!(f.reply(&["HELLO", "2", "AUTH", "default", "anything"]).starts_with("*14\r\n"));
    assert_eq!(f.session.protocol(), ProtocolVersion::Resp2);
}

#[test]
fn auth_behaves_as_redis_without_passwords() {
    let mut f = Fixture::new();
    assert_eq!(
        f.reply(&["AUTH", "secret"]),
        "-ERR AUTH <password> called without any password configured for the default user. \
         Are you sure your configuration is correct?\r\n"
    );
    assert_eq!(f.reply(&["AUTH", "default", "anything"]), "+OK\r\n");
    assert_eq!(
        f.reply(&["AUTH", "admin", "secret"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(f.reply(&["AUTH", "a", "b", "c"]), "-ERR syntax error\r\n");
    assert_eq!(f.reply(&["AUTH"]), "-ERR wrong number of arguments for 'auth' command\r\n");
}

#[test]
fn commit_mode_is_kept_per_session() {
    let mut f = Fixture::new();
    assert_eq!(f.reply(&["COMMITMODE"]), "$14\r\nWAIT IMMEDIATE\r\n");
    assert_eq!(f.reply(&["COMMITMODE", "BATCH", "NOWAIT"]), "+OK\r\n");
    assert_eq!(f.session.commit_mode().wait, CommitWait::NoWait);
    assert_eq!(f.session.commit_mode().write, CommitWrite::Batch);
    assert_eq!(f.reply(&["COMMITMODE", "WAIT"]), "+OK\r\n");
    assert_eq!(f.reply(&["COMMITMODE"]), "$10\r\nWAIT BATCH\r\n");
}

#[test]
fn config_get_answers_what_redis_benchmark_asks() {
    let mut f = Fixture::new();
    assert_eq!(f.reply(&["CONFIG", "GET", "save"]), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
    assert_eq!(
        f.reply(&["CONFIG", "GET", "appendonly"]),
        "*2\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n"
    );
    assert_eq!(
        f.reply(&["CONFIG", "GET", "APPEND*"]),
        "*4\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n$11\r\nappendfsync\r\n$6\r\nalways\r\n"
    );
    assert_eq!(f.reply(&["CONFIG", "GET", "nosuch"]), "*0\r\n");
    f.reply(&["HELLO", "3"]);
    assert_eq!(f.reply(&["CONFIG", "GET", "databases"]), "%1\r\n$9\r\ndatabases\r\n$1\r\n1\r\n");
}

#[test]
fn command_introspection_satisfies_clients() {
    let mut f = Fixture::new();
    assert_eq!(f.reply(&["COMMAND", "DOCS"]), "*0\r\n");
    let count = crate::cmd::table::COMMANDS.len();
    assert_eq!(f.reply(&["COMMAND", "COUNT"]), format!(":{count}\r\n"));
    assert!(
        f.reply(&["COMMAND"]).starts_with(&format!("*{count}\r\n*10\r\n$6\r\nappend\r\n:3\r\n"))
    );
    assert_eq!(
        f.reply(&["COMMAND", "INFO", "get", "nosuch"]),
        "*2\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*0\r\n*0\r\n*0\r\n*0\r\n*-1\r\n"
    );
    assert!(f.reply(&["COMMAND", "HELP"]).starts_with("*13\r\n+COMMAND <subcommand>"));
}

#[test]
fn data_commands_go_to_the_database() {
    let mut f = Fixture::new();
    for words in [&["GET", "k"][..], &["SET", "k", "v"], &["INFO"], &["SHUTDOWN"], &["DBSIZE"]] {
        assert_eq!(f.handle(words), Action::Execute(command(words).unwrap()));
    }
}

#[test]
fn multi_queues_and_exec_hands_over_the_transaction() {
    let mut f = Fixture::new();
    assert_eq!(f.reply(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(f.reply(&["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
    assert_eq!(f.reply(&["MULTI"]), "+OK\r\n");
    assert!(f.session.in_transaction());
    assert_eq!(f.reply(&["MULTI"]), "-ERR MULTI calls can not be nested\r\n");
    assert_eq!(f.reply(&["SET", "a", "1"]), "+QUEUED\r\n");
    assert_eq!(f.reply(&["INCR", "a"]), "+QUEUED\r\n");
    assert_eq!(f.reply(&["PING"]), "+QUEUED\r\n");
    assert_eq!(
        f.handle(&["EXEC"]),
        Action::ExecuteTransaction(vec![
            command(&["SET", "a", "1"]).unwrap(),
            command(&["INCR", "a"]).unwrap(),
            command(&["PING"]).unwrap(),
        ])
    );
    assert!(!f.session.in_transaction());
    assert_eq!(f.reply(&["MULTI"]), "+OK\r\n");
    assert_eq!(f.handle(&["EXEC"]), Action::ExecuteTransaction(vec![]));
}

#[test]
fn errors_while_queueing_abort_the_transaction() {
    for bad in [&["GET"][..], &["NOPE"], &["COMMITMODE", "NOWAIT"], &["HELLO", "3"]] {
        let mut f = Fixture::new();
        f.reply(&["MULTI"]);
        assert_eq!(f.reply(&["SET", "a", "1"]), "+QUEUED\r\n");
        assert!(f.reply(bad).starts_with("-ERR "), "{bad:?}");
        assert_eq!(f.reply(&["SET", "b", "2"]), "+QUEUED\r\n");
        assert_eq!(
            f.reply(&["EXEC"]),
            "-EXECABORT Transaction discarded because of previous errors.\r\n",
            "{bad:?}"
        );
        assert!(!f.session.in_transaction());
    }
}

#[test]
fn the_queue_is_bounded() {
    let mut f = Fixture::new();
    f.reply(&["MULTI"]);
    for _ in 0..3 {
        assert_eq!(f.reply(&["INCR", "a"]), "+QUEUED\r\n");
    }
    assert_eq!(
        f.reply(&["INCR", "a"]),
        "-ERR transaction too big: more than 3 queued commands (transaction_commands_max)\r\n"
    );
    assert!(f.reply(&["EXEC"]).starts_with("-EXECABORT"));
}

#[test]
fn discard_forgets_the_queue() {
    let mut f = Fixture::new();
    f.reply(&["MULTI"]);
    f.reply(&["SET", "a", "1"]);
    assert_eq!(f.reply(&["DISCARD"]), "+OK\r\n");
    assert_eq!(f.reply(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
}

#[test]
fn local_replies_for_transactions() {
    assert_eq!(command(&["PING"]).unwrap().local_reply(), Some(Frame::simple("PONG")));
    assert_eq!(command(&["ECHO", "x"]).unwrap().local_reply(), Some(Frame::bulk("x")));
    assert_eq!(command(&["GET", "x"]).unwrap().local_reply(), None);
}

#[test]
fn with_a_password_required_nothing_runs_before_auth_and_nothing_beyond_the_permission() {
    let limits = Limits::default();
    let facts = ServerFacts::new(&limits);
    let mut session = Session::requiring_auth(1, &limits);
    let reply = |action: Action| match action {
        Action::Reply(frame) | Action::UnwatchAndReply(frame) => {
            String::from_utf8(frame.to_bytes(ProtocolVersion::Resp2)).unwrap()
        }
        other => panic!("expected a reply, got {other:?}"),
    };
    for words in [&["GET", "k"][..], &["SHUTDOWN"], &["MULTI"], &["CONFIG", "GET", "*"]] {
        assert_eq!(
            reply(session.handle(command(words), &facts)),
            "-NOAUTH Authentication required.\r\n",
            "{words:?}"
        );
    }
    assert!(matches!(session.handle(command(&["QUIT"]), &facts), Action::ReplyAndClose(_)));
    let Action::Authenticate { username, hello: None, .. } =
        session.handle(command(&["AUTH", "pw"]), &facts)
    else {
        panic!("AUTH must ask the server")
    };
    assert_eq!(username, Bytes::from_static(b"default"));
    let wrong = session.authenticated(None, None, &facts);
    assert!(
        String::from_utf8(wrong.to_bytes(ProtocolVersion::Resp2))
            .unwrap()
            .starts_with("-WRONGPASS")
    );
    assert!(session.user().is_none());
    let reader =
        crate::User { name: Bytes::from_static(b"reader"), permission: crate::Permission::Read };
    assert_eq!(session.authenticated(Some(reader), None, &facts), Frame::ok());
    assert!(matches!(session.handle(command(&["GET", "k"]), &facts), Action::Execute(_)));
    assert!(
        reply(session.handle(command(&["SET", "k", "v"]), &facts))
            .starts_with("-NOPERM User reader")
    );
    // Inside MULTI, a command beyond the permission dooms the transaction.
    reply(session.handle(command(&["MULTI"]), &facts));
    reply(session.handle(command(&["DEL", "k"]), &facts));
    assert!(reply(session.handle(command(&["EXEC"]), &facts)).starts_with("-EXECABORT"));
    // An HTTP request closes the connection.
    assert!(matches!(session.handle(command(&["POST", "/", "HTTP/1.1"]), &facts), Action::Close));
}

#[test]
fn config_set_accepts_encoding_hints_and_the_values_in_force_only() {
    let mut f = Fixture::new();
    assert_eq!(f.reply(&["CONFIG", "SET", "save", ""]), "+OK\r\n");
    assert_eq!(f.reply(&["CONFIG", "SET", "zset-max-ziplist-entries", "0"]), "+OK\r\n");
    assert_eq!(
        f.reply(&["CONFIG", "GET", "zset-max-ziplist-entries"]),
        "*2\r\n$24\r\nzset-max-ziplist-entries\r\n$1\r\n0\r\n"
    );
    assert!(f.reply(&["CONFIG", "SET", "save", "900 1"]).starts_with(
        "-ERR CONFIG SET failed (possibly related to argument 'save') - not supported"
    ));
    assert!(f.reply(&["CONFIG", "SET", "maxmemory", "1"]).starts_with(
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - not supported"
    ));
    assert!(
        f.reply(&["CONFIG", "SET", "set-max-intset-entries", "x"])
            .starts_with("-ERR CONFIG SET failed")
    );
}

#[test]
fn watch_is_refused_inside_multi_and_discard_ends_the_watches() {
    let mut f = Fixture::new();
    assert!(matches!(f.handle(&["WATCH", "a"]), Action::Execute(Command::Watch { .. })));
    assert!(f.session.watching());
    assert_eq!(f.reply(&["MULTI"]), "+OK\r\n");
    assert_eq!(f.reply(&["WATCH", "b"]), "-ERR WATCH inside MULTI is not allowed\r\n");
    assert!(matches!(f.handle(&["DISCARD"]), Action::UnwatchAndReply(_)));
    assert!(!f.session.watching());
}
