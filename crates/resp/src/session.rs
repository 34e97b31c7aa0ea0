//! The protocol state of one client connection, sans-IO: protocol version, name, commit mode and
//! the MULTI queue. It answers every command that needs no database and hands the others over.

use bytes::Bytes;

use crate::auth::User;
use crate::cmd::help_reply;
use crate::cmd::{ClientAttribute, Command, CommandError, CommitMode};
use crate::frame::{Frame, ProtocolVersion};
use crate::glob;
use crate::limits::Limits;

/// What the server must do after [`Session::handle`].
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send this reply; nothing else to do.
    Reply(Frame),
    /// Execute this command against the database and reply with its result. Only key-space
    /// commands (`Command::Data`, `Command::Block`, DBSIZE, KEYS, SCAN), WATCH, INFO, ROLE and
    /// SHUTDOWN come out here. A write commits with [`Session::commit_mode`].
    Execute(Command),
    /// EXEC: execute these commands as one atomic transaction with one commit, and reply an
    /// array holding each command's reply in order (an empty array if none were queued). Only
    /// commands for which [`Command::is_allowed_in_transaction`] holds are queued: the
    /// key-value commands, INFO, and PING and ECHO, which [`Command::local_reply`] answers.
    ExecuteTransaction(Vec<Command>),
    /// Forget the connection's watched keys (DISCARD, an EXEC refused for errors while
    /// queueing), then send this reply.
    UnwatchAndReply(Frame),
    /// Send this reply, flush, and close the connection (QUIT).
    ReplyAndClose(Frame),
    /// Close the connection without a reply: the request was HTTP.
    Close,
    /// AUTH, or HELLO with AUTH: check the password of `username` and tell the session with
    /// [`Session::authenticated`] (which replies, to `hello` as HELLO would if given).
    Authenticate { username: Bytes, password: Bytes, hello: Option<HelloRest> },
}

/// The rest of a HELLO that authenticates: applied once the password is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloRest {
    pub protocol: Option<ProtocolVersion>,
    pub client_name: Option<Bytes>,
}

/// What a session says about the server in HELLO and CONFIG GET replies. Build it once at
/// start-up and share it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFacts {
    /// HELLO's `server` field. Default: `redoguard`.
    pub server: String,
    /// HELLO's `version` field. Default: this crate's version.
    pub version: String,
    /// HELLO's `role` field: `master` for a primary, `replica` for a standby.
    pub role: String,
    /// CONFIG GET's answers, name (lower case) and value. Default: `save` "" (no snapshots:
    /// the redo log is the durability), `appendonly` "yes" and `appendfsync` "always" (what
    /// WAIT commits are closest to in Redis terms), `databases` "1", `proto-max-bulk-len`.
    /// CONFIG SET accepts these only with the value they have.
    pub config: Vec<(String, String)>,
    /// Redis's thresholds for its compact encodings (`hash-max-listpack-entries` …): CONFIG
    /// SET accepts and remembers them, and they change nothing, since redoguard keeps one
    /// layout per type (`docs/resp.md`). Shared by every session of the server.
    pub encoding_hints: EncodingHints,
}

/// Redis's encoding thresholds as CONFIG SET last set them (Redis's defaults until then).
#[derive(Debug, Clone)]
pub struct EncodingHints(std::sync::Arc<std::sync::Mutex<Vec<(&'static str, String)>>>);

impl PartialEq for EncodingHints {
    fn eq(&self, other: &EncodingHints) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for EncodingHints {}

impl Default for EncodingHints {
    fn default() -> EncodingHints {
        let defaults = [
            ("hash-max-listpack-entries", "128"),
            ("hash-max-listpack-value", "64"),
            ("hash-max-ziplist-entries", "128"),
            ("hash-max-ziplist-value", "64"),
            ("list-compress-depth", "0"),
            ("list-max-listpack-size", "-2"),
            ("list-max-ziplist-size", "-2"),
            ("set-max-intset-entries", "512"),
            ("zset-max-listpack-entries", "128"),
            ("zset-max-listpack-value", "64"),
            ("zset-max-ziplist-entries", "128"),
            ("zset-max-ziplist-value", "64"),
        ];
        EncodingHints(std::sync::Arc::new(std::sync::Mutex::new(
            defaults.into_iter().map(|(name, value)| (name, value.to_string())).collect(),
        )))
    }
}

impl EncodingHints {
    fn get(&self) -> Vec<(&'static str, String)> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Sets a hint if `name` is one (an integer value, as Redis checks it); `None` if not a hint.
    fn set(&self, name: &str, value: &[u8]) -> Option<Result<(), String>> {
        let mut hints = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (_, current) = hints.iter_mut().find(|(hint, _)| hint.eq_ignore_ascii_case(name))?;
        Some(match crate::cmd::parse_integer(value) {
            Some(number) => {
                *current = number.to_string();
                Ok(())
            }
            None => Err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer"
            )),
        })
    }
}

impl ServerFacts {
    pub fn new(limits: &Limits) -> ServerFacts {
        let config = [
            ("save", String::new()),
            ("appendonly", "yes".into()),
            ("appendfsync", "always".into()),
            ("databases", "1".into()),
            ("proto-max-bulk-len", limits.bulk_bytes_max.to_string()),
        ];
        ServerFacts {
            server: "redoguard".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            role: "master".into(),
            config: config.into_iter().map(|(name, value)| (name.to_string(), value)).collect(),
            encoding_hints: EncodingHints::default(),
        }
    }

    /// CONFIG SET's reply: every pair applied, or none (the first refusal is the reply).
    pub fn config_set(&self, pairs: &[(Bytes, Bytes)]) -> Frame {
        for (name, value) in pairs {
            let name_text = String::from_utf8_lossy(name).to_ascii_lowercase();
            let fixed = self.config.iter().find(|(fixed, _)| *fixed == name_text);
            let refusal = match fixed {
                Some((_, current)) if current.as_bytes() == value.as_ref() => continue,
                Some((_, current)) => format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name_text}') - not supported: it is '{current}' in redoguard and comes from the server's TOML file"
                ),
                None => {
                    match self.encoding_hints.get().iter().any(|(hint, _)| *hint == name_text) {
                        true => continue,
                        false => format!(
                            "ERR CONFIG SET failed (possibly related to argument '{name_text}') - not supported: the configuration comes from the server's TOML file and is fixed at start"
                        ),
                    }
                }
            };
            return Frame::error(refusal);
        }
        for (name, value) in pairs {
            if let Some(Err(error)) = self.encoding_hints.set(&String::from_utf8_lossy(name), value)
            {
                return Frame::error(error);
            }
        }
        Frame::ok()
    }

    /// CONFIG GET's reply: every parameter matching any of the patterns (ignoring case), once,
    /// as a map (a flat array in RESP2).
    pub fn config_get(&self, patterns: &[Bytes]) -> Frame {
        let hints = self.encoding_hints.get();
        let pairs = self
            .config
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone()))
            .chain(hints.iter().map(|(name, value)| (*name, value.clone())))
            .filter(|(name, _)| {
                patterns.iter().any(|pattern| glob::matches_ignoring_case(pattern, name.as_bytes()))
            })
            .map(|(name, value)| (Frame::bulk(name.to_string()), Frame::bulk(value)))
            .collect();
        Frame::Map(pairs)
    }
}

/// The commands queued since MULTI.
#[derive(Debug, Clone, Default)]
struct Transaction {
    commands: Vec<Command>,
    /// An error while queueing makes EXEC fail, as in Redis.
    aborted: bool,
}

/// One connection's protocol state.
#[derive(Debug, Clone)]
pub struct Session {
    id: u64,
    protocol: ProtocolVersion,
    name: Option<Bytes>,
    library_name: Option<Bytes>,
    library_version: Option<Bytes>,
    commit_mode: CommitMode,
    transaction: Option<Transaction>,
    transaction_commands_max: usize,
    /// Whether the server requires a password (`requirepass` or users).
    auth_required: bool,
    /// Who the connection is authenticated as (without a password required: `default`, who
    /// may do everything).
    user: Option<User>,
    /// Whether WATCH was sent since the last EXEC, DISCARD or UNWATCH.
    watching: bool,
}

impl Session {
    /// A new session; `id` is what CLIENT ID and HELLO report, unique per server run.
    pub fn new(id: u64, limits: &Limits) -> Session {
        Session {
            id,
            protocol: ProtocolVersion::Resp2,
            name: None,
            library_name: None,
            library_version: None,
            commit_mode: CommitMode::default(),
            transaction: None,
            transaction_commands_max: limits.transaction_commands_max,
            auth_required: false,
            user: Some(User::default_open()),
            watching: false,
        }
    }

    /// A new session on a server that requires a password: nothing but AUTH, HELLO and QUIT
    /// until [`Session::authenticated`] accepts one.
    pub fn requiring_auth(id: u64, limits: &Limits) -> Session {
        Session { auth_required: true, user: None, ..Session::new(id, limits) }
    }

    /// Who the connection is authenticated as, if anyone.
    pub fn user(&self) -> Option<&User> {
        self.user.as_ref()
    }

    /// The outcome of an [`Action::Authenticate`]: the user the password belongs to, or none
    /// (a wrong password, or no such user). Returns the reply. A failed attempt leaves the
    /// connection as it was (authenticated as before, or not).
    pub fn authenticated(
        &mut self,
        user: Option<User>,
        hello: Option<HelloRest>,
        facts: &ServerFacts,
    ) -> Frame {
        let Some(user) = user else {
            return Frame::error("WRONGPASS invalid username-password pair or user is disabled.");
        };
        self.user = Some(user);
        match hello {
            Some(hello) => self.apply_hello(hello, facts),
            None => Frame::ok(),
        }
    }

    fn apply_hello(&mut self, hello: HelloRest, facts: &ServerFacts) -> Frame {
        if let Some(name) = hello.client_name {
            self.name = (!name.is_empty()).then_some(name);
        }
        if let Some(protocol) = hello.protocol {
            self.protocol = protocol;
        }
        self.hello_reply(facts)
    }

    /// `-NOPERM` if the connection's user may not run `command`.
    fn forbidden(&self, command: &Command) -> Option<Frame> {
        let needs = command.permission()?;
        let user = self.user.as_ref()?;
        (user.permission < needs).then(|| {
            Frame::error(format!(
                "NOPERM User {} has no permissions to run the '{}' command",
                String::from_utf8_lossy(&user.name),
                command.name()
            ))
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// The version to encode replies with.
    pub fn protocol(&self) -> ProtocolVersion {
        self.protocol
    }

    /// The commit options writes of this connection use.
    pub fn commit_mode(&self) -> CommitMode {
        self.commit_mode
    }

    pub fn name(&self) -> Option<&Bytes> {
        self.name.as_ref()
    }

    /// `CLIENT SETINFO LIB-NAME` and `LIB-VER`, for the server's client list.
    pub fn library(&self) -> (Option<&Bytes>, Option<&Bytes>) {
        (self.library_name.as_ref(), self.library_version.as_ref())
    }

    /// Whether MULTI has been sent and neither EXEC nor DISCARD yet.
    pub fn in_transaction(&self) -> bool {
        self.transaction.is_some()
    }

    /// Whether the connection watches keys (WATCH since the last EXEC, DISCARD or UNWATCH).
    pub fn watching(&self) -> bool {
        self.watching
    }

    /// The EXEC just handed out ends the connection's watches: whether it had any.
    pub fn take_watching(&mut self) -> bool {
        std::mem::take(&mut self.watching)
    }

    /// Takes one parsed request and says what to do. A parse error is replied; inside MULTI it
    /// also dooms the transaction.
    pub fn handle(&mut self, parsed: Result<Command, CommandError>, facts: &ServerFacts) -> Action {
        let command = match parsed {
            Ok(command) => command,
            Err(CommandError::LooksLikeHttp) => return Action::Close,
            Err(error) => {
                if let Some(transaction) = &mut self.transaction {
                    transaction.aborted = true;
                }
                return Action::Reply(error.to_frame());
            }
        };
        if self.auth_required {
            match &command {
                Command::Auth { username, password } => {
                    return Action::Authenticate {
                        username: username.clone().unwrap_or(Bytes::from_static(b"default")),
                        password: password.clone(),
                        hello: None,
                    };
                }
                Command::Hello { protocol, auth: Some(auth), client_name } => {
                    return Action::Authenticate {
                        username: auth.username.clone(),
                        password: auth.password.clone(),
                        hello: Some(HelloRest {
                            protocol: *protocol,
                            client_name: client_name.clone(),
                        }),
                    };
                }
                Command::Hello { .. } if self.user.is_none() => {
                    return Action::Reply(Frame::error(
                        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
                    ));
                }
                command if self.user.is_none() && !command.allowed_before_auth() => {
                    return Action::Reply(Frame::error("NOAUTH Authentication required."));
                }
                _ => {}
            }
        }
        if let Some(refusal) = self.forbidden(&command) {
            if let Some(transaction) = &mut self.transaction {
                transaction.aborted = true;
            }
            return Action::Reply(refusal);
        }
        if let Some(transaction) = &mut self.transaction {
            return match command {
                Command::Exec => {
                    let transaction = self.transaction.take().expect("in a transaction");
                    if transaction.aborted {
                        self.watching = false;
                        Action::UnwatchAndReply(Frame::error(
                            "EXECABORT Transaction discarded because of previous errors.",
                        ))
                    } else {
                        Action::ExecuteTransaction(transaction.commands)
                    }
                }
                Command::Discard => {
                    self.transaction = None;
                    self.watching = false;
                    Action::UnwatchAndReply(Frame::ok())
                }
                // Run at once, not queued, as in Redis (the transaction goes on).
                Command::Watch { .. } => {
                    Action::Reply(Frame::error("ERR WATCH inside MULTI is not allowed"))
                }
                Command::Unwatch => {
                    transaction.commands.push(Command::Unwatch);
                    Action::Reply(Frame::simple("QUEUED"))
                }
                Command::Multi => Action::Reply(Frame::error("ERR MULTI calls can not be nested")),
                Command::Quit => Action::ReplyAndClose(Frame::ok()),
                command if !command.is_allowed_in_transaction() => {
                    transaction.aborted = true;
                    Action::Reply(Frame::error("ERR Command not allowed inside a transaction"))
                }
                _ if transaction.commands.len() >= self.transaction_commands_max => {
                    transaction.aborted = true;
                    Action::Reply(Frame::error(format!(
                        "ERR transaction too big: more than {} queued commands \
                         (transaction_commands_max)",
                        self.transaction_commands_max
                    )))
                }
                command => {
                    transaction.commands.push(command);
                    Action::Reply(Frame::simple("QUEUED"))
                }
            };
        }
        let reply = match command {
            Command::Multi => {
                self.transaction = Some(Transaction::default());
                Frame::ok()
            }
            Command::Exec => Frame::error("ERR EXEC without MULTI"),
            Command::Discard => Frame::error("ERR DISCARD without MULTI"),
            Command::Quit => return Action::ReplyAndClose(Frame::ok()),
            Command::Ping { .. } | Command::Echo { .. } => {
                command.local_reply().expect("PING and ECHO answer locally")
            }
            Command::Hello { protocol, auth, client_name } => {
                if let Some(auth) = auth
                    && auth.username != "default"
                {
                    // Without a password the only user is Redis's password-less "default".
                    return Action::Reply(Frame::error(
                        "WRONGPASS invalid username-password pair or user is disabled.",
                    ));
                }
                self.apply_hello(HelloRest { protocol, client_name }, facts)
            }
            // (With a password required, AUTH was handed to the server above.) Answered as
            // Redis answers them when no password is configured.
            Command::Auth { username: None, .. } => Frame::error(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ),
            Command::Auth { username: Some(username), .. } if username != "default" => {
                Frame::error("WRONGPASS invalid username-password pair or user is disabled.")
            }
            Command::Auth { .. } => Frame::ok(),
            Command::Introspect(query) => query.reply(),
            Command::Help { command } => help_reply(command),
            Command::ClientSetName { name } => {
                self.name = (!name.is_empty()).then_some(name);
                Frame::ok()
            }
            Command::ClientGetName => self.name.clone().map_or(Frame::Null, Frame::Bulk),
            Command::ClientSetInfo { attribute, value } => {
                match attribute {
                    ClientAttribute::LibraryName => self.library_name = Some(value),
                    ClientAttribute::LibraryVersion => self.library_version = Some(value),
                }
                Frame::ok()
            }
            Command::ClientId => Frame::Integer(self.id as i64),
            Command::Select => Frame::ok(),
            Command::ConfigGet { parameters } => facts.config_get(&parameters),
            Command::ConfigSet { pairs } => facts.config_set(&pairs),
            Command::Time | Command::Save => return Action::Execute(command),
            Command::FunctionFlush => Frame::ok(),
            Command::Watch { keys } => {
                self.watching = true;
                return Action::Execute(Command::Watch { keys });
            }
            Command::Unwatch => {
                self.watching = false;
                return Action::UnwatchAndReply(Frame::ok());
            }
            Command::CommitMode { wait: None, write: None } => {
                Frame::bulk(self.commit_mode.to_string())
            }
            Command::CommitMode { wait, write } => {
                self.commit_mode.apply(wait, write);
                Frame::ok()
            }
            command => return Action::Execute(command),
        };
        Action::Reply(reply)
    }

    fn hello_reply(&self, facts: &ServerFacts) -> Frame {
        let field = |name: &'static str, value: Frame| (Frame::simple(name), value);
        Frame::Map(vec![
            field("server", Frame::bulk(facts.server.clone())),
            field("version", Frame::bulk(facts.version.clone())),
            field("proto", Frame::Integer(self.protocol.number())),
            field("id", Frame::Integer(self.id as i64)),
            field("mode", Frame::bulk("standalone")),
            field("role", Frame::bulk(facts.role.clone())),
            field("modules", Frame::Array(Vec::new())),
        ])
    }
}

impl Command {
    /// The reply of a command that needs neither the database nor the session (PING, ECHO),
    /// for executing them inside a transaction; `None` for every other command.
    pub fn local_reply(&self) -> Option<Frame> {
        match self {
            Command::Ping { message: None } => Some(Frame::simple("PONG")),
            Command::Ping { message: Some(message) } | Command::Echo { message } => {
                Some(Frame::Bulk(message.clone()))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
