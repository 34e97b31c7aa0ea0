//! The server's configuration file (TOML): `[server]`, `[limits]`, `[redo]`, `[db]` and
//! `[replication]`.
//!
//! Every field has a default, so an empty file (or none) is a working configuration; unknown
//! fields are refused. `ServerConfig::load` reads and checks a file once, at start-up, and
//! every error names the field (`redo.groups: 1 is outside 2..=64`). `docs/config.md` lists
//! every field with its default and bounds.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use db::DbConfig;
use redo::RedoConfig;
use resp::Limits;
use serde::Deserialize;

/// The `[replication]` section, as a member's file and an observer's have it.
pub type ReplicationSection = transport::ReplicationConfig;

/// The `[server]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Directory of everything the database keeps: redo logs, archive, data files. Locked by
    /// the running server. Default: `redoguard-data` in the working directory.
    pub data_dir: PathBuf,
    /// Address the RESP (Redis protocol) listener binds. Default: `127.0.0.1`.
    pub bind: IpAddr,
    /// RESP port; 0 picks a free one (printed at start). Default: 6390.
    pub port: u16,
    /// Port of the admin HTTP API (JSON status, Prometheus metrics), on `admin_bind`; 0 picks
    /// a free one. Default: 6391.
    pub admin_port: u16,
    /// Address the admin API binds. Default: `127.0.0.1`.
    pub admin_bind: IpAddr,
    /// Client connections served at once; one more is told "max number of clients reached".
    /// Bounds: 1..=100000. Default: 1000.
    pub max_connections: u32,
    /// A client idle this long is disconnected; 0 = never. Bounds: 0 or 1s..=7d.
    /// Default: 1h.
    #[serde(with = "units::serde_human::duration")]
    pub idle_timeout: Duration,
    /// Threads serving clients; 0 = one per CPU but one (at least one). Bounds: 0..=256.
    /// Default: 0.
    pub worker_threads: u32,
    /// With a password required: a client that has not authenticated this long after it
    /// connected is disconnected. Bounds: 1s..=10min. Default: 10s.
    #[serde(with = "units::serde_human::duration")]
    pub auth_timeout: Duration,
    /// With a password required: clients connected and not yet authenticated, at most; one
    /// more ends the oldest of them (which is told why). Bounds: 1..=`max_connections`.
    /// Default: 100.
    pub unauthenticated_max: u32,
    /// Bytes of incomplete requests all clients together may make the server buffer (beyond
    /// 16 KiB each); a request that would pass it is refused with an error saying so, and its
    /// connection closed. Bounds: ≥ `limits.request_bytes_max`. Default: 512 MiB.
    #[serde(with = "units::serde_human::size")]
    pub request_buffer_total: u64,
    /// Admin API connections served at once; one more gets 503. Bounds: 1..=10000.
    /// Default: 64.
    pub admin_max_connections: u32,
    /// Time an admin API client has to send a request's headers. Bounds: 1s..=10min.
    /// Default: 10s.
    #[serde(with = "units::serde_human::duration")]
    pub admin_header_timeout: Duration,
    /// More names the admin API is reached by (a DNS name, a load balancer's), beyond its own
    /// addresses, `localhost`, the member's `admin` host and the certificate's name: a request
    /// whose `Host` is none of them is refused (DNS rebinding). Default: none.
    pub admin_hosts: Vec<String>,
    /// Start even though a port binds beyond loopback without TLS, a password or a token
    /// (protected mode off; `redoguard server --insecure`): said at start and in `/status`.
    /// Default: false.
    pub insecure: bool,
}

impl Default for ServerSection {
    fn default() -> ServerSection {
        ServerSection {
            data_dir: PathBuf::from("redoguard-data"),
            bind: IpAddr::from([127, 0, 0, 1]),
            port: 6390,
            admin_port: 6391,
            admin_bind: IpAddr::from([127, 0, 0, 1]),
            admin_hosts: Vec::new(),
            insecure: false,
            max_connections: 1000,
            idle_timeout: Duration::from_secs(3600),
            worker_threads: 0,
            auth_timeout: Duration::from_secs(10),
            unauthenticated_max: 100,
            request_buffer_total: 512 << 20,
            admin_max_connections: 64,
            admin_header_timeout: Duration::from_secs(10),
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub server: ServerSection,
    /// Protocol limits per connection (see `docs/resp.md`).
    pub limits: Limits,
    pub redo: RedoConfig,
    pub db: DbConfig,
    /// The database's role and, on a primary, its standbys (see `docs/config.md`).
    pub replication: transport::ReplicationConfig,
    /// TLS: certificates, and which ports speak it (see `docs/security.md`). Default: none.
    pub tls: Option<tls::TlsConfig>,
    /// Users and passwords of the Redis protocol, the admin API's token.
    pub auth: crate::auth::AuthSection,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            server: ServerSection::default(),
            // A client can make the server buffer one request this large: keep the default
            // far below Redis's 1 GiB. Values larger than a redo record are refused anyway.
            limits: Limits {
                bulk_bytes_max: 64 << 20,
                request_bytes_max: 128 << 20,
                ..Limits::default()
            },
            redo: RedoConfig::default(),
            db: DbConfig::default(),
            replication: transport::ReplicationConfig::default(),
            tls: None,
            auth: crate::auth::AuthSection::default(),
        }
    }
}

/// A configuration that cannot be used, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the configuration file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("configuration file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

impl ServerConfig {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let mut config = ServerConfig::parse(&text)
            .map_err(|message| ConfigError::Parse { path: path.to_path_buf(), message })?;
        // Certificate files are named relative to the file that names them.
        let base = path.parent().unwrap_or(Path::new("."));
        config.tls = config.tls.map(|tls| tls.resolve(base));
        config.validate()?;
        Ok(config)
    }

    /// Parses TOML text (without checking bounds).
    pub fn parse(text: &str) -> Result<ServerConfig, String> {
        let mut config: ServerConfig =
            toml::from_str(text).map_err(|error| error.to_string().trim_end().to_string())?;
        // A [limits] section that names some limits leaves the others at the server's
        // defaults, not at the (larger) defaults of the protocol library.
        let table: toml::Table = toml::from_str(text).map_err(|error| error.to_string())?;
        // In the configuration form, this member's entry says where it listens: [server]
        // need not repeat it (a value it does give wins, and must agree; see `validate`).
        if let Some(member) = config.replication.this_member().cloned() {
            let server = table.get("server").and_then(toml::Value::as_table);
            let given = |key: &str| server.is_some_and(|server| server.contains_key(key));
            if let Ok(resp) = member.resp.parse::<std::net::SocketAddr>() {
                if !given("port") {
                    config.server.port = resp.port();
                }
                if !given("bind") {
                    config.server.bind = resp.ip();
                }
            }
            if let Ok(admin) = member.admin.parse::<std::net::SocketAddr>() {
                if !given("admin_port") {
                    config.server.admin_port = admin.port();
                }
                if !given("admin_bind") {
                    config.server.admin_bind = admin.ip();
                }
            }
        }
        if let Some(limits) = table.get("limits").and_then(toml::Value::as_table) {
            let defaults = ServerConfig::default().limits;
            if !limits.contains_key("bulk_bytes_max") {
                config.limits.bulk_bytes_max = defaults.bulk_bytes_max;
            }
            if !limits.contains_key("request_bytes_max") {
                config.limits.request_bytes_max = defaults.request_bytes_max;
            }
        }
        Ok(config)
    }

    /// Checks every bound; the error names the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field: &str, reason: String| {
            Err(ConfigError::Invalid { field: field.to_string(), reason })
        };
        let server = &self.server;
        if !(1..=100_000).contains(&server.max_connections) {
            return invalid(
                "server.max_connections",
                format!("{} is outside 1..=100000", server.max_connections),
            );
        }
        if !server.idle_timeout.is_zero()
            && !(Duration::from_secs(1)..=Duration::from_secs(7 * 86_400))
                .contains(&server.idle_timeout)
        {
            return invalid(
                "server.idle_timeout",
                format!("{:?} is neither 0 (never) nor within 1s..=7d", server.idle_timeout),
            );
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&server.auth_timeout) {
            return invalid(
                "server.auth_timeout",
                format!("{:?} is outside 1s..=10min", server.auth_timeout),
            );
        }
        if !(1..=server.max_connections).contains(&server.unauthenticated_max) {
            return invalid(
                "server.unauthenticated_max",
                format!(
                    "{} is outside 1..={} (server.max_connections)",
                    server.unauthenticated_max, server.max_connections
                ),
            );
        }
        if server.request_buffer_total < self.limits.request_bytes_max as u64 {
            return invalid(
                "server.request_buffer_total",
                format!(
                    "{} is less than limits.request_bytes_max ({}): the largest request could never be buffered",
                    server.request_buffer_total, self.limits.request_bytes_max
                ),
            );
        }
        if !(1..=10_000).contains(&server.admin_max_connections) {
            return invalid(
                "server.admin_max_connections",
                format!("{} is outside 1..=10000", server.admin_max_connections),
            );
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600))
            .contains(&server.admin_header_timeout)
        {
            return invalid(
                "server.admin_header_timeout",
                format!("{:?} is outside 1s..=10min", server.admin_header_timeout),
            );
        }
        if server.worker_threads > 256 {
            return invalid(
                "server.worker_threads",
                format!("{} is more than 256", server.worker_threads),
            );
        }
        if server.port != 0 && server.port == server.admin_port && server.bind == server.admin_bind
        {
            return invalid(
                "server.admin_port",
                format!("{} is also the RESP port", server.admin_port),
            );
        }
        if server.data_dir.as_os_str().is_empty() {
            return invalid("server.data_dir", "is empty".to_string());
        }
        self.limits.validate().map_err(|error| ConfigError::Invalid {
            field: format!("limits.{}", error.field),
            reason: format!("{} ({})", error.value, error.reason),
        })?;
        self.redo.validate().map_err(|error| match error {
            redo::RedoError::Config { field, reason } => {
                ConfigError::Invalid { field: format!("redo.{field}"), reason }
            }
            other => ConfigError::Invalid { field: "redo".into(), reason: other.to_string() },
        })?;
        self.db.validate().map_err(|error| match error {
            db::DbError::Config { field, reason } => {
                ConfigError::Invalid { field: format!("db.{field}"), reason }
            }
            other => ConfigError::Invalid { field: "db".into(), reason: other.to_string() },
        })?;
        self.replication
            .validate()
            .map_err(|(field, reason)| ConfigError::Invalid { field, reason })?;
        self.auth.validate().map_err(|(field, reason)| ConfigError::Invalid { field, reason })?;
        // One log write travels as one redo frame, and a log write may hold the whole log
        // buffer: keep it well inside the frame limit both sides enforce.
        if !self.replication.destinations.is_empty()
            && self.redo.log_buffer_size > transport::LOG_BUFFER_MAX_SHIPPED
        {
            return invalid(
                "redo.log_buffer_size",
                format!(
                    "{} is above {} MiB, the most a primary with standbys may have (one log write is one redo transport frame)",
                    self.redo.log_buffer_size,
                    transport::LOG_BUFFER_MAX_SHIPPED >> 20
                ),
            );
        }
        // Others reach this member where its entry says: it must listen there.
        if let Some(member) = self.replication.this_member() {
            let port_of = |address: &str| {
                address.rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok())
            };
            for (field, listening, advertised) in [
                ("server.port", self.server.port, port_of(&member.resp)),
                ("server.admin_port", self.server.admin_port, port_of(&member.admin)),
            ] {
                if listening != 0 && advertised.is_some_and(|advertised| advertised != listening) {
                    return invalid(
                        field,
                        format!(
                            "{listening}, but member '{}' is reached at port {} (replication.members): they must agree",
                            member.name,
                            advertised.unwrap_or_default()
                        ),
                    );
                }
            }
        }
        if let Some(tls) = &self.tls {
            if self.tls_name().is_none() {
                return invalid(
                    "tls.name",
                    "name the member this certificate is for (required in the single-role form)"
                        .into(),
                );
            }
            if tls.redo {
                for (index, member) in self.replication.members.iter().enumerate() {
                    if rustls_pki_types::ServerName::try_from(member.name.as_str()).is_err() {
                        return invalid(
                            &format!("replication.members[{index}].name"),
                            format!(
                                "'{}' cannot be a certificate's name, which TLS needs: it is not a DNS name (labels of letters, digits, '-' and '_', separated by '.')",
                                member.name
                            ),
                        );
                    }
                }
            }
            if tls.resp_port.is_some_and(|port| port != 0 && port == self.server.port) {
                return invalid(
                    "tls.resp_port",
                    format!("{} is also the plain RESP port", self.server.port),
                );
            }
        }
        if self.replication.role == transport::RoleConfig::Standby
            && let Ok(listen) = self.replication.standby.listen.parse::<std::net::SocketAddr>()
            && listen.port() != 0
            && (listen.port() == self.server.port || listen.port() == self.server.admin_port)
        {
            return Err(ConfigError::Invalid {
                field: "replication.standby.listen".into(),
                reason: format!("port {} is also the RESP or admin port", listen.port()),
            });
        }
        Ok(())
    }

    /// The name this server's certificate proves: `tls.name`, else its member's name.
    pub fn tls_name(&self) -> Option<String> {
        let tls = self.tls.as_ref()?;
        tls.name.clone().or_else(|| self.replication.member.clone())
    }

    /// Mutual TLS for redo transport, if `[tls]` asks for it: the files are read and checked
    /// now (an error names the file and what is wrong with it).
    pub fn redo_tls(&self) -> Result<Option<std::sync::Arc<tls::RedoTls>>, ConfigError> {
        let Some(config) = self.tls.as_ref().filter(|tls| tls.redo) else { return Ok(None) };
        let name = self.tls_name().unwrap_or_default();
        let invalid = |error: tls::TlsError| ConfigError::Invalid {
            field: "tls".into(),
            reason: error.to_string().trim_start_matches("tls: ").to_string(),
        };
        let material = tls::Material::load(config, &name).map_err(invalid)?;
        Ok(Some(std::sync::Arc::new(tls::RedoTls::new(&material).map_err(invalid)?)))
    }

    /// Paths of the redo and data files, resolved against the data directory.
    pub fn resolved(&self) -> (RedoConfig, DbConfig) {
        let base = &self.server.data_dir;
        let mut db = self.db.clone().resolve(base);
        // `[limits]` bounds collections and commands; the database enforces them.
        db.limits = db::DataLimits {
            collection_elements_max: self.limits.collection_elements_max,
            command_elements_max: self.limits.command_elements_max,
        };
        (self.redo.clone().resolve(base), db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_the_defaults() {
        let config = ServerConfig::parse("").unwrap();
        assert_eq!(config, ServerConfig::default());
        config.validate().unwrap();
    }

    #[test]
    fn a_full_file_parses_with_human_units() {
        let text = r#"
            [server]
            data_dir = "/var/lib/redoguard"
            port = 7000
            admin_port = 7001
            idle_timeout = "10m"
            [limits]
            bulk_bytes_max = 1048576
            request_bytes_max = 2097152
            [redo]
            log_file_size = "256MiB"
            groups = 4
            io_mode = "dsync"
            [db]
            checkpoint_interval = "1m"
            checkpoint_flush_after = 0
        "#;
        let config = ServerConfig::parse(text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.redo.log_file_size, 256 << 20);
        assert_eq!(config.redo.io_mode, redo::IoMode::Dsync);
        assert_eq!(config.server.idle_timeout, Duration::from_secs(600));
        assert_eq!(config.db.checkpoint_interval, Duration::from_secs(60));
        assert_eq!(config.db.checkpoint_flush_after, 0, "0 turns it off");
        let (redo, db) = config.resolved();
        assert_eq!(redo.dir, Path::new("/var/lib/redoguard/redo"));
        assert_eq!(db.dir, Path::new("/var/lib/redoguard/data"));
    }

    #[test]
    fn a_partial_limits_section_keeps_the_server_defaults_for_the_rest() {
        let config = ServerConfig::parse("[limits]\ndepth_max = 8").unwrap();
        let defaults = ServerConfig::default().limits;
        assert_eq!(config.limits.depth_max, 8);
        assert_eq!(config.limits.bulk_bytes_max, defaults.bulk_bytes_max);
        assert_eq!(config.limits.request_bytes_max, defaults.request_bytes_max);
        let config = ServerConfig::parse("[limits]\nbulk_bytes_max = 1048576").unwrap();
        assert_eq!(config.limits.bulk_bytes_max, 1 << 20);
    }

    #[test]
    fn errors_name_the_field() {
        let unknown = ServerConfig::parse("[redo]\nlog_size = 1").unwrap_err();
        assert!(unknown.contains("log_size"), "{unknown}");
        let wrong_type = ServerConfig::parse("[server]\nport = \"six\"").unwrap_err();
        assert!(wrong_type.contains("port"), "{wrong_type}");
        let bad_size = ServerConfig::parse("[redo]\nlog_file_size = \"huge\"").unwrap_err();
        assert!(bad_size.contains("not a size"), "{bad_size}");
        for (text, field) in [
            ("[redo]\ngroups = 1", "redo.groups"),
            ("[db]\ncheckpoint_interval = \"1ms\"", "db.checkpoint_interval"),
            ("[db]\ncheckpoint_flush_after = \"4KiB\"", "db.checkpoint_flush_after"),
            ("[server]\nmax_connections = 0", "server.max_connections"),
            ("[limits]\nbulk_bytes_max = 10", "limits.bulk_bytes_max"),
            ("[server]\nport = 7000\nadmin_port = 7000", "server.admin_port"),
            (
                "[redo]\nlog_buffer_size = \"64MiB\"\n[[replication.destinations]]\nname = \"s\"\naddress = \"127.0.0.1:1\"",
                "redo.log_buffer_size",
            ),
            (
                "[[replication.destinations]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\ntcp_congestion = \"BBR v2\"",
                "replication.destinations[0].tcp_congestion",
            ),
        ] {
            let error = ServerConfig::parse(text).unwrap().validate().unwrap_err();
            assert!(error.to_string().starts_with(field), "{text}: {error}");
        }
    }

    #[test]
    fn the_example_configurations_are_valid() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut files = Vec::new();
        for dir in [examples.clone(), examples.join("trio")] {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|extension| extension == "toml") {
                    files.push(path);
                }
            }
        }
        assert!(files.len() >= 5, "{files:?}");
        // As the README's steps make them: the password's hash put in.
        let hash = crate::auth::hash_password(b"a password").unwrap();
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.contains("PASTE_THE_HASH_FROM_redoguard_passwd"),
                "{} ships without its place for the password's hash",
                path.display()
            );
            let text = text.replace("PASTE_THE_HASH_FROM_redoguard_passwd", &hash);
            let config = ServerConfig::parse(&text)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            config.validate().unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            assert!(config.tls.as_ref().is_some_and(|tls| tls.redo), "{}", path.display());
            let member = config.replication.this_member().expect("a member");
            assert_eq!(
                config.server.port.to_string(),
                member.resp.rsplit_once(':').unwrap().1,
                "{}",
                path.display()
            );
        }
    }
}
