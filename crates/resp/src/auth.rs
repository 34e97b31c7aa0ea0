//! Authentication and permissions, sans-IO: what a command needs, what an unauthenticated
//! connection may send, and requests that are really HTTP.
//!
//! The session asks the server to check a password (`Action::Authenticate`: the check is the
//! server's, it hashes) and is told the outcome (`Session::authenticated`). Until then, with a
//! password required, every command but AUTH, HELLO and QUIT gets `-NOAUTH`; afterwards each
//! command needs its permission (read, write, admin), else `-NOPERM`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::cmd::Command;
use crate::request::Request;

/// What a user may do, each level including the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// The commands that only read the key space (GET, HGETALL, ZRANGE, TTL, SCAN …), WATCH,
    /// DBSIZE, KEYS, INFO, ROLE.
    Read,
    /// And those that change it (SET, HSET, LPUSH, EXPIRE, DEL …; inside MULTI too).
    Write,
    /// And FLUSHALL, FLUSHDB, SHUTDOWN, CONFIG, and whatever changes the server or its role.
    Admin,
}

impl Permission {
    pub fn name(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }
}

/// The user a connection is authenticated as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: Bytes,
    pub permission: Permission,
}

impl User {
    /// Redis's `default` user without a password: everything is allowed.
    pub fn default_open() -> User {
        User { name: Bytes::from_static(b"default"), permission: Permission::Admin }
    }
}

impl Command {
    /// The permission the command needs; `None`: any connection that has authenticated (the
    /// connection's own state: PING, HELLO, CLIENT, COMMITMODE, MULTI, COMMAND, …).
    pub fn permission(&self) -> Option<Permission> {
        match self {
            Command::Data { op: keyspace::Op::FlushAll, .. } => Some(Permission::Admin),
            command if command.is_write() => Some(Permission::Write),
            Command::Data { .. }
            | Command::Block { .. }
            | Command::Watch { .. }
            | Command::DbSize
            | Command::Keys { .. }
            | Command::Scan { .. }
            | Command::Info { .. }
            | Command::Role => Some(Permission::Read),
            Command::FunctionFlush => Some(Permission::Write),
            Command::Shutdown { .. }
            | Command::ConfigGet { .. }
            | Command::ConfigSet { .. }
            | Command::Save => Some(Permission::Admin),
            _ => None,
        }
    }

    /// Whether an unauthenticated connection may send it: AUTH, HELLO (to authenticate with
    /// AUTH in it) and QUIT, as in Redis.
    pub fn allowed_before_auth(&self) -> bool {
        matches!(self, Command::Auth { .. } | Command::Hello { .. } | Command::Quit)
    }
}

impl Request {
    /// Whether the request is the start of an HTTP request (a browser made to post to this
    /// port by a web page, say): a request line (`GET /path HTTP/1.1`, any method), or a
    /// `POST`, `PUT` or `Host:` line. Redis closes such a connection at once ("Possible SECURITY ATTACK"), so
    /// that nothing in the body is ever run as a command; so does redoguard.
    pub fn looks_like_http(&self) -> bool {
        let args = self.args();
        let Some(first) = args.first() else { return false };
        let first = first.as_ref();
        if first.eq_ignore_ascii_case(b"post")
            || first.eq_ignore_ascii_case(b"put")
            || first.eq_ignore_ascii_case(b"host:")
        {
            return true;
        }
        const METHODS: [&[u8]; 7] =
            [b"get", b"head", b"options", b"delete", b"patch", b"connect", b"trace"];
        args.len() == 3
            && METHODS.iter().any(|method| first.eq_ignore_ascii_case(method))
            && args[2].len() >= 5
            && args[2][..5].eq_ignore_ascii_case(b"http/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::request::RequestDecoder;

    fn request(text: &str) -> Request {
        let mut decoder = RequestDecoder::new(Limits::default());
        let mut buffer = bytes::BytesMut::from(text.as_bytes());
        decoder.decode(&mut buffer).unwrap().unwrap()
    }

    #[test]
    fn http_requests_are_recognized_and_commands_are_not() {
        for text in [
            "POST / HTTP/1.1\r\n",
            "GET /status HTTP/1.1\r\n",
            "Host: 127.0.0.1:6390\r\n",
            "put /x HTTP/1.0\r\n",
        ] {
            assert!(request(text).looks_like_http(), "{text:?}");
        }
        for text in ["GET key\r\n", "SET k HTTP/1.1\r\n", "*2\r\n$3\r\nGET\r\n$5\r\nHTTP/\r\n"] {
            assert!(!request(text).looks_like_http(), "{text:?}");
        }
    }

    #[test]
    fn permissions_are_ordered_and_commands_need_theirs() {
        assert!(Permission::Read < Permission::Write && Permission::Write < Permission::Admin);
        let parse = |text: &str| Command::parse(request(text)).unwrap();
        assert_eq!(parse("GET k\r\n").permission(), Some(Permission::Read));
        assert_eq!(parse("SET k v\r\n").permission(), Some(Permission::Write));
        assert_eq!(parse("SHUTDOWN\r\n").permission(), Some(Permission::Admin));
        assert_eq!(parse("CONFIG GET *\r\n").permission(), Some(Permission::Admin));
        assert_eq!(parse("PING\r\n").permission(), None);
        assert_eq!(parse("HSET h f v\r\n").permission(), Some(Permission::Write));
        assert_eq!(parse("ZRANGE z 0 -1\r\n").permission(), Some(Permission::Read));
        assert_eq!(parse("FLUSHALL\r\n").permission(), Some(Permission::Admin));
        assert_eq!(parse("FLUSHDB\r\n").permission(), Some(Permission::Admin));
        assert!(parse("AUTH x\r\n").allowed_before_auth());
        assert!(!parse("PING\r\n").allowed_before_auth());
    }
}
