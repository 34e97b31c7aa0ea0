//! One Sentinel client connection's protocol state, sans-IO: the protocol version (`HELLO 2`
//! or `HELLO 3`), whether it has authenticated (`[observer] requirepass`), its name and library
//! (`CLIENT SETNAME`, `CLIENT SETINFO`), and its subscriptions. It answers every command a
//! Sentinel client sends; what it says about the configuration comes from `replies`.
//!
//! Answered as Redis Sentinel answers (Redis's `helloCommand`, `sentinelCommand`): `HELLO`'s map
//! has `mode` `sentinel` and no `role`; RESP3 connections get the `SENTINEL masters | master |
//! replicas | sentinels` entries as maps and pub/sub messages as push frames; with a password
//! required, everything but `AUTH`, `HELLO … AUTH` and `QUIT` gets `-NOAUTH`.

use bytes::Bytes;
use resp::{Frame, ProtocolVersion};
use sha2::{Digest, Sha256};

/// What the connection does after a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Send these frames (a SUBSCRIBE to several channels confirms each).
    Reply(Vec<Frame>),
    /// Send this frame, then close (QUIT, or a wrong password too many times).
    ReplyAndClose(Frame),
    /// Close without a reply: the request was HTTP (a web page made a browser post here).
    Close,
}

/// What the session asks of the observer for a request it cannot answer alone.
pub trait Knowledge {
    /// `SENTINEL <args>` (the subcommand first).
    fn sentinel(&self, args: &[String]) -> Frame;
    /// `INFO`'s text.
    fn info(&self) -> String;
    /// `ROLE`'s list of master names.
    fn master_names(&self) -> Vec<String>;
}

/// Wrong passwords a connection may give before it is closed.
const WRONG_PASSWORDS_MAX: u32 = 3;

/// Channels and patterns one connection may subscribe to.
pub const SUBSCRIPTIONS_MAX: usize = 64;

/// A connection's state.
#[derive(Debug)]
pub struct Session {
    id: u64,
    protocol: ProtocolVersion,
    /// SHA-256 of the password the front requires, if it requires one.
    password: Option<[u8; 32]>,
    authenticated: bool,
    wrong_passwords: u32,
    name: Option<Bytes>,
    library: (Option<Bytes>, Option<Bytes>),
    channels: Vec<String>,
    patterns: Vec<String>,
}

impl Session {
    /// A new connection; `requirepass` is the front's password, if any.
    pub fn new(id: u64, requirepass: Option<&str>) -> Session {
        Session {
            id,
            protocol: ProtocolVersion::Resp2,
            password: requirepass.map(|password| Sha256::digest(password.as_bytes()).into()),
            authenticated: requirepass.is_none(),
            wrong_passwords: 0,
            name: None,
            library: (None, None),
            channels: Vec::new(),
            patterns: Vec::new(),
        }
    }

    /// The version to encode replies with.
    pub fn protocol(&self) -> ProtocolVersion {
        self.protocol
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    /// Whether it listens for `+switch-master`.
    pub fn subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty()
    }

    /// `CLIENT SETINFO`'s library name and version.
    pub fn library(&self) -> (Option<&Bytes>, Option<&Bytes>) {
        (self.library.0.as_ref(), self.library.1.as_ref())
    }

    /// The frame that tells this connection of a failover (`+switch-master <name> <old ip>
    /// <old port> <new ip> <new port>`), if it subscribed to it.
    pub fn switch_message(&self, text: &str) -> Option<Frame> {
        const CHANNEL: &str = "+switch-master";
        let items = if self.channels.iter().any(|name| name == CHANNEL) {
            vec![bulk("message"), bulk(CHANNEL), bulk(text)]
        } else {
            let pattern = self
                .patterns
                .iter()
                .find(|pattern| resp::glob::matches(pattern.as_bytes(), CHANNEL.as_bytes()))?;
            vec![bulk("pmessage"), bulk(pattern.as_str()), bulk(CHANNEL), bulk(text)]
        };
        Some(self.push(items))
    }

    /// An out-of-band message: a push frame in RESP3, an array in RESP2.
    fn push(&self, items: Vec<Frame>) -> Frame {
        match self.protocol {
            ProtocolVersion::Resp3 => Frame::Push(items),
            ProtocolVersion::Resp2 => Frame::Array(items),
        }
    }

    /// Answers one request (its arguments, the command first).
    pub fn handle(&mut self, args: &[Bytes], knowledge: &dyn Knowledge) -> Step {
        let request = resp::Request::new(args.to_vec());
        if request.looks_like_http() {
            return Step::Close;
        }
        let text: Vec<String> =
            args.iter().map(|arg| String::from_utf8_lossy(arg).into_owned()).collect();
        let Some(command) = text.first().map(|name| name.to_ascii_lowercase()) else {
            return Step::Reply(Vec::new());
        };
        let one = |frame: Frame| Step::Reply(vec![frame]);
        match command.as_str() {
            "auth" => return self.auth(&args[1..]),
            "hello" => return self.hello(&args[1..]),
            "quit" => return Step::ReplyAndClose(Frame::ok()),
            _ if !self.authenticated => {
                return one(Frame::error("NOAUTH Authentication required."));
            }
            _ => {}
        }
        match command.as_str() {
            "ping" if self.subscribed() && self.protocol == ProtocolVersion::Resp2 => {
                one(Frame::Array(vec![
                    bulk("pong"),
                    bulk(text.get(1).cloned().unwrap_or_default()),
                ]))
            }
            "ping" => one(match args.get(1) {
                Some(message) => Frame::Bulk(message.clone()),
                None => Frame::simple("PONG"),
            }),
            "client" => one(self.client(&args[1..])),
            "role" => one(Frame::Array(vec![
                bulk("sentinel"),
                Frame::Array(knowledge.master_names().into_iter().map(bulk).collect()),
            ])),
            "info" => one(Frame::Bulk(Bytes::from(knowledge.info()))),
            "subscribe" | "psubscribe" => self.subscribe(&command, &text[1..]),
            "unsubscribe" | "punsubscribe" => self.unsubscribe(&command, &text[1..]),
            "sentinel" if text.len() < 2 => {
                one(Frame::error("ERR wrong number of arguments for 'sentinel' command"))
            }
            "sentinel" => one(knowledge.sentinel(&text[1..])),
            "select" => one(Frame::ok()),
            "command" => one(Frame::Array(Vec::new())),
            other => one(Frame::error(format!(
                "ERR unknown command '{}', with args beginning with: {}",
                printable(other),
                text[1..]
                    .iter()
                    .take(3)
                    .map(|arg| format!("'{}' ", printable(arg)))
                    .collect::<String>()
            ))),
        }
    }

    fn auth(&mut self, args: &[Bytes]) -> Step {
        let (user, password) = match args {
            [password] => (Bytes::from_static(b"default"), password),
            [user, password] => (user.clone(), password),
            _ => {
                return Step::Reply(vec![Frame::error(
                    "ERR wrong number of arguments for 'auth' command",
                )]);
            }
        };
        match self.check(&user, password) {
            Ok(()) => Step::Reply(vec![Frame::ok()]),
            Err(step) => step,
        }
    }

    /// Checks a password; with none required, answers as Redis does.
    fn check(&mut self, user: &[u8], password: &[u8]) -> Result<(), Step> {
        let Some(expected) = self.password else {
            if user != b"default" {
                return Err(wrong_pass());
            }
            return Err(Step::Reply(vec![Frame::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            )]));
        };
        let given: [u8; 32] = Sha256::digest(password).into();
        let same = expected.iter().zip(given.iter()).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0;
        if same && user == b"default" {
            self.authenticated = true;
            self.wrong_passwords = 0;
            return Ok(());
        }
        self.wrong_passwords += 1;
        if self.wrong_passwords >= WRONG_PASSWORDS_MAX && !self.authenticated {
            return Err(Step::ReplyAndClose(Frame::error(
                "WRONGPASS invalid username-password pair or user is disabled.",
            )));
        }
        Err(wrong_pass())
    }

    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`, as Redis's
    /// `helloCommand` in Sentinel mode.
    fn hello(&mut self, args: &[Bytes]) -> Step {
        let one = |frame: Frame| Step::Reply(vec![frame]);
        let mut protocol = None;
        let mut rest = args;
        if let Some((version, tail)) = args.split_first() {
            match std::str::from_utf8(version).ok().and_then(|text| text.parse::<i64>().ok()) {
                Some(2) => protocol = Some(ProtocolVersion::Resp2),
                Some(3) => protocol = Some(ProtocolVersion::Resp3),
                Some(_) => return one(Frame::error("NOPROTO unsupported protocol version")),
                None => {
                    return one(Frame::error(
                        "ERR Protocol version is not an integer or out of range",
                    ));
                }
            }
            rest = tail;
        }
        let mut auth = None;
        let mut name = None;
        while let Some((option, tail)) = rest.split_first() {
            if option.eq_ignore_ascii_case(b"auth") && tail.len() >= 2 {
                auth = Some((tail[0].clone(), tail[1].clone()));
                rest = &tail[2..];
            } else if option.eq_ignore_ascii_case(b"setname") && !tail.is_empty() {
                if tail[0].iter().any(|byte| !(b'!'..=b'~').contains(byte)) {
                    return one(Frame::error(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    ));
                }
                name = Some(tail[0].clone());
                rest = &tail[1..];
            } else {
                return one(Frame::error(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    printable(&String::from_utf8_lossy(option))
                )));
            }
        }
        if let Some((user, password)) = auth
            && let Err(step) = self.check(&user, &password)
        {
            return step;
        }
        if !self.authenticated {
            return one(Frame::error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            ));
        }
        if let Some(name) = name {
            self.name = Some(name);
        }
        if let Some(protocol) = protocol {
            self.protocol = protocol;
        }
        let field = |name: &'static str, value: Frame| (Frame::bulk(name), value);
        one(Frame::Map(vec![
            field("server", Frame::bulk("redis")),
            field("version", Frame::bulk(REDIS_VERSION)),
            field("proto", Frame::Integer(self.protocol.number())),
            field("id", Frame::Integer(self.id as i64)),
            field("mode", Frame::bulk("sentinel")),
            field("modules", Frame::Array(Vec::new())),
        ]))
    }

    fn client(&mut self, args: &[Bytes]) -> Frame {
        let Some(sub) = args.first().map(|sub| sub.to_ascii_lowercase()) else {
            return Frame::error("ERR wrong number of arguments for 'client' command");
        };
        match (sub.as_slice(), &args[1..]) {
            (b"setname", [name]) => {
                if name.iter().any(|byte| !(b'!'..=b'~').contains(byte)) {
                    return Frame::error(
                        "ERR Client names cannot contain spaces, newlines or special characters.",
                    );
                }
                self.name = (!name.is_empty()).then(|| name.clone());
                Frame::ok()
            }
            (b"getname", []) => self.name.clone().map_or(Frame::Null, Frame::Bulk),
            (b"id", []) => Frame::Integer(self.id as i64),
            (b"setinfo", [attribute, value]) => {
                if value.iter().any(|byte| !(b'!'..=b'~').contains(byte)) {
                    return Frame::error(format!(
                        "ERR {} cannot contain spaces, newlines or special characters.",
                        String::from_utf8_lossy(attribute).to_ascii_uppercase()
                    ));
                }
                match attribute.to_ascii_lowercase().as_slice() {
                    b"lib-name" => self.library.0 = Some(value.clone()),
                    b"lib-ver" => self.library.1 = Some(value.clone()),
                    _ => {
                        return Frame::error(format!(
                            "ERR Unrecognized option '{}'",
                            printable(&String::from_utf8_lossy(attribute))
                        ));
                    }
                }
                Frame::ok()
            }
            _ => Frame::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
                printable(&String::from_utf8_lossy(&sub))
            )),
        }
    }

    fn subscribe(&mut self, command: &str, names: &[String]) -> Step {
        if names.is_empty() {
            return Step::Reply(vec![Frame::error(format!(
                "ERR wrong number of arguments for '{command}' command"
            ))]);
        }
        let pattern = command == "psubscribe";
        let mut replies = Vec::with_capacity(names.len());
        for name in names {
            let full = self.channels.len() + self.patterns.len() >= SUBSCRIPTIONS_MAX;
            let list = if pattern { &mut self.patterns } else { &mut self.channels };
            if !list.contains(name) {
                if full {
                    replies.push(Frame::error(format!(
                        "ERR a Sentinel connection subscribes to {SUBSCRIPTIONS_MAX} channels and patterns at most"
                    )));
                    continue;
                }
                list.push(name.clone());
            }
            let count = (self.channels.len() + self.patterns.len()) as i64;
            replies.push(self.push(vec![
                bulk(command),
                bulk(name.as_str()),
                Frame::Integer(count),
            ]));
        }
        Step::Reply(replies)
    }

    fn unsubscribe(&mut self, command: &str, names: &[String]) -> Step {
        let pattern = command == "punsubscribe";
        let list = if pattern { &mut self.patterns } else { &mut self.channels };
        let gone: Vec<String> = if names.is_empty() {
            std::mem::take(list)
        } else {
            names
                .iter()
                .filter(|name| {
                    let had = list.contains(name);
                    list.retain(|kept| kept != *name);
                    had
                })
                .cloned()
                .collect()
        };
        // Each confirmation counts what is left after its own removal, as Redis does.
        let left = self.channels.len() + self.patterns.len();
        if gone.is_empty() {
            return Step::Reply(vec![self.push(vec![
                bulk(command),
                Frame::Null,
                Frame::Integer(left as i64),
            ])]);
        }
        let replies = gone
            .iter()
            .enumerate()
            .map(|(index, name)| {
                let count = (left + gone.len() - index - 1) as i64;
                self.push(vec![bulk(command), bulk(name.as_str()), Frame::Integer(count)])
            })
            .collect();
        Step::Reply(replies)
    }
}

/// The Redis version HELLO reports: the Sentinel protocol this front speaks is that of Redis 7.2
/// (clients use the version to decide which commands to send).
pub const REDIS_VERSION: &str = "7.2.0";

fn bulk(text: impl Into<String>) -> Frame {
    Frame::Bulk(Bytes::from(text.into()))
}

fn wrong_pass() -> Step {
    Step::Reply(vec![Frame::error("WRONGPASS invalid username-password pair or user is disabled.")])
}

/// At most 64 characters of `text`, control characters as `?`, for an error message.
fn printable(text: &str) -> String {
    text.chars().take(64).map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests;
