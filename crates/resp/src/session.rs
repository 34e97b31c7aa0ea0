//! The protocol state of one client connection, sans-IO: protocol version, name, commit mode and
//! the MULTI queue. It answers every command that needs no database and hands the others over.

use bytes::Bytes;

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
    /// Execute this command against the database and reply with its result. Only key-value
    /// commands (GET, SET, DEL, EXISTS, INCR, INCRBY, MSET, MGET, DBSIZE, KEYS, SCAN), INFO and
    /// SHUTDOWN come out here. A write commits with [`Session::commit_mode`].
    Execute(Command),
    /// EXEC: execute these commands as one atomic transaction with one commit, and reply an
    /// array holding each command's reply in order (an empty array if none were queued). Only
    /// commands for which [`Command::is_allowed_in_transaction`] holds are queued: the
    /// key-value commands, INFO, and PING and ECHO, which [`Command::local_reply`] answers.
    ExecuteTransaction(Vec<Command>),
    /// Send this reply, flush, and close the connection (QUIT).
    ReplyAndClose(Frame),
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
    pub config: Vec<(String, String)>,
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
        }
    }

    /// CONFIG GET's reply: every parameter matching any of the patterns (ignoring case), once,
    /// as a map (a flat array in RESP2).
    pub fn config_get(&self, patterns: &[Bytes]) -> Frame {
        let pairs = self
            .config
            .iter()
            .filter(|(name, _)| {
                patterns.iter().any(|pattern| glob::matches_ignoring_case(pattern, name.as_bytes()))
            })
            .map(|(name, value)| (Frame::bulk(name.clone()), Frame::bulk(value.clone())))
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
        }
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

    /// Takes one parsed request and says what to do. A parse error is replied; inside MULTI it
    /// also dooms the transaction.
    pub fn handle(&mut self, parsed: Result<Command, CommandError>, facts: &ServerFacts) -> Action {
        let command = match parsed {
            Ok(command) => command,
            Err(error) => {
                if let Some(transaction) = &mut self.transaction {
                    transaction.aborted = true;
                }
                return Action::Reply(error.to_frame());
            }
        };
        if let Some(transaction) = &mut self.transaction {
            return match command {
                Command::Exec => {
                    let transaction = self.transaction.take().expect("in a transaction");
                    if transaction.aborted {
                        Action::Reply(Frame::error(
                            "EXECABORT Transaction discarded because of previous errors.",
                        ))
                    } else {
                        Action::ExecuteTransaction(transaction.commands)
                    }
                }
                Command::Discard => {
                    self.transaction = None;
                    Action::Reply(Frame::ok())
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
                    // redoguard has no users: the only one is Redis's password-less "default".
                    return Action::Reply(Frame::error(
                        "WRONGPASS invalid username-password pair or user is disabled.",
                    ));
                }
                if let Some(name) = client_name {
                    self.name = (!name.is_empty()).then_some(name);
                }
                if let Some(protocol) = protocol {
                    self.protocol = protocol;
                }
                self.hello_reply(facts)
            }
            // Answered as Redis answers them when no password is configured.
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
