//! nettest: redo transport without the database. A client plays the primary's redo sender
//! (SYNC or ASYNC, optionally asking the server to write and fdatasync each message as a
//! standby would) and reports throughput per interval and latency percentiles; a server
//! plays the standby for many clients at once. The wire protocol is in
//! `docs/nettest-protocol.md`.
//!
//! ```no_run
//! use tools::nettest::{ClientConfig, Mode, Server, ServerConfig, run_client};
//! # fn main() -> Result<(), tools::nettest::NettestError> {
//! let server = Server::start(ServerConfig { bind: "127.0.0.1:0".parse().unwrap(), ..ServerConfig::default() })?;
//! let mut config = ClientConfig::new("127.0.0.1", server.local_addr().port(), Mode::Sync);
//! config.duration = std::time::Duration::from_secs(2);
//! config.interval = std::time::Duration::from_secs(1);
//! let report = run_client(&config)?;
//! println!("{:.1} MB/s, p99 {:.0} µs", report.mb_per_s, report.lat_p99_us);
//! # Ok(())
//! # }
//! ```

mod client;
pub mod frame;
pub mod payload;
mod report;
mod server;
pub mod socket;

use std::path::PathBuf;
use std::time::Duration;

pub use client::{CONNECTIONS_LIMIT, ClientConfig, SocketBuffer, run_client, run_client_with};
pub use frame::Mode;
pub use payload::Payload;
pub use report::{ClientReport, IntervalReport, LatencyUs};
pub use server::{Server, ServerConfig, ServerStats, serve};

use crate::units::{ByteSize, parse_duration, parse_rate};

/// The port a server listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 5400;

/// Everything that can go wrong in a nettest run; each names what and where.
#[derive(Debug, thiserror::Error)]
pub enum NettestError {
    #[error("invalid nettest setting '--{field}': {reason}")]
    Config { field: &'static str, reason: String },
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the server at {peer} refused the test: {reason}")]
    Refused { peer: String, reason: String },
    #[error("protocol error with {peer}: {reason}")]
    Protocol { peer: String, reason: String },
    #[error("no answer from {peer} within {timeout:?} while {doing} (see --timeout)")]
    Timeout { peer: String, timeout: Duration, doing: String },
}

/// `redoguard nettest server`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// Port to listen on.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: std::net::IpAddr,
    /// Let clients ask for --write: connection slot N writes to PATH.N (preallocated,
    /// overwritten in place, fdatasync before each acknowledgement).
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Size of each connection's file.
    #[arg(long, default_value = "64MiB")]
    pub file_size: ByteSize,
    /// Longest message accepted; a longer length field closes that connection.
    #[arg(long, default_value = "64MiB")]
    pub max_message: ByteSize,
    /// Clients served at once; more are told "busy".
    #[arg(long, default_value_t = 64)]
    pub max_connections: u32,
    /// Disconnect a client silent for this long.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
}

impl ServerArgs {
    pub fn config(&self) -> Result<ServerConfig, NettestError> {
        let max_message =
            u32::try_from(self.max_message.bytes()).map_err(|_| NettestError::Config {
                field: "max-message",
                reason: format!("{} is more than 1 GiB", self.max_message),
            })?;
        let config = ServerConfig {
            bind: std::net::SocketAddr::new(self.bind, self.port),
            file: self.file.clone(),
            file_bytes: self.file_size.bytes(),
            message_bytes_max: max_message,
            connections_max: self.max_connections,
            idle_timeout: self.idle_timeout,
            ..ServerConfig::default()
        };
        config.validate()?;
        Ok(config)
    }
}

/// `redoguard nettest client`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Server host name or address.
    pub host: String,
    /// Server port.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// sync: one message in flight, each acknowledged; async: stream.
    #[arg(long, value_enum, required_unless_present = "rtt", conflicts_with = "rtt")]
    pub mode: Option<Mode>,
    /// Measure the round trip only (ping-pong of --length bytes, default 1).
    #[arg(long)]
    pub rtt: bool,
    /// The server writes each message to its file and fdatasyncs before acknowledging.
    #[arg(long)]
    pub write: bool,
    /// Bytes per message (9400, 64KiB, 1MiB). Default: 9400 (1 with --rtt).
    #[arg(long)]
    pub length: Option<ByteSize>,
    /// How long to send (10s, 2m).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Reporting interval.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Parallel connections.
    #[arg(long, default_value_t = 1)]
    pub num_conn: u32,
    /// Socket send/receive buffer size on both ends (bytes, 16KiB, 9375000) or auto.
    #[arg(long, default_value = "auto")]
    pub sockbuf: SocketBuffer,
    /// Target rate over all connections (20MB/s, 100mbit).
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<crate::units::Rate>,
    /// Pause after each message.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub delay: Duration,
    /// Message contents.
    #[arg(long, value_enum, default_value = "random")]
    pub payload: Payload,
    /// Longest wait to connect or for any answer.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// TCP congestion control per socket (cubic, reno, bbr); default: the system's.
    #[arg(long)]
    pub congestion: Option<String>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl ClientArgs {
    pub fn config(&self) -> Result<ClientConfig, NettestError> {
        let mode = if self.rtt { Mode::Rtt } else { self.mode.unwrap_or(Mode::Sync) };
        let mut config = ClientConfig::new(self.host.clone(), self.port, mode);
        if let Some(length) = self.length {
            config.message_bytes =
                u32::try_from(length.bytes()).map_err(|_| NettestError::Config {
                    field: "length",
                    reason: format!("{length} is more than 1 GiB"),
                })?;
        }
        config.write = self.write;
        config.duration = self.duration;
        config.interval = self.interval;
        config.connections = self.num_conn;
        config.sockbuf = self.sockbuf;
        config.rate_bytes_per_s = self.rate.map(|rate| rate.bytes_per_s());
        config.delay = self.delay;
        config.payload = self.payload;
        config.timeout = self.timeout;
        config.congestion = self.congestion.clone();
        config.validate()?;
        Ok(config)
    }
}
