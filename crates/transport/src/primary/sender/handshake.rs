//! Connecting a channel to the standby: the hello, the handshake (which measures the round
//! trip and sizes the send buffer), the compressor a session uses, and the refusals that
//! report this primary fenced.

use std::time::{Duration, Instant};

use proto::{Channel, FrameCompressor, Hello, Message};
use redo::types::now_unix_us;

use crate::config::BufferSize;
use crate::conn::{Conn, ConnError};
use crate::primary::{COMPRESSION_VERSION_MIN, Destination, Inner, PAYLOAD_MAX, TransportEvent};

/// The longest single connection attempt (a standby's SYN-ACK takes one round trip).
const CONNECT_SLICE: Duration = Duration::from_secs(2);

impl Inner {
    pub(super) fn hello(&self, channel: Channel, destination: &Destination) -> Message {
        let identity = self.redo.identity();
        let config = self.redo.config();
        Message::Hello(Hello {
            version: proto::PROTOCOL_VERSION,
            version_min: proto::PROTOCOL_VERSION_MIN,
            database_id: identity.database_id.0,
            incarnation: identity.incarnation.0,
            thread: identity.thread.0,
            channel,
            destination: destination.name.clone(),
            block_size: config.block_size,
            log_file_size: config.log_file_size,
            groups: config.groups,
            primary_time_us: now_unix_us(),
            member: self.identity.member.clone(),
            history: self.identity.history.clone(),
            relay_of: self
                .identity
                .relay
                .as_ref()
                .map(|relay| relay.primary.clone())
                .unwrap_or_default(),
        })
    }

    /// Connects a channel and returns the standby's welcome, the round-trip time (that of the
    /// TCP handshake, without TLS or the standby's own work before it welcomes) and the send
    /// buffer set. With `sized`, the socket gets the destination's `send_buffer`: `auto` is
    /// 3 × bandwidth × that round trip, set once the handshake has measured it (no probe
    /// connection first: on a long link that was one more round trip before any redo moved).
    pub(in crate::primary) fn connect(
        &self,
        channel: Channel,
        destination: &Destination,
        sized: bool,
    ) -> Result<(Conn, proto::Welcome, Duration, Option<u64>), String> {
        let config = &destination.config();
        let fixed = match config.send_buffer {
            BufferSize::Bytes(bytes) if sized => Some(bytes),
            _ => None,
        };
        // Attempts of at most CONNECT_SLICE each, within net_timeout in all: a stop (or a role
        // change) does not wait out a long net_timeout behind an unreachable standby.
        let deadline = Instant::now() + config.net_timeout;
        let (conn, rtt) = loop {
            let started = Instant::now();
            let slice = deadline.saturating_duration_since(started).min(CONNECT_SLICE);
            match Conn::connect_with(
                &config.address,
                slice.max(Duration::from_millis(1)),
                fixed,
                config.tcp_congestion.as_deref(),
                PAYLOAD_MAX,
            ) {
                Ok(conn) => break (conn, started.elapsed()),
                Err(ConnError::Io(error))
                    if error.kind() == std::io::ErrorKind::TimedOut
                        && Instant::now() < deadline
                        && !self.shutdown.load(std::sync::atomic::Ordering::Acquire) =>
                {
                    continue;
                }
                Err(error) => {
                    return Err(format!("connecting to {}: {error}", config.address));
                }
            }
        };
        let mut send_buffer = fixed;
        if sized
            && config.send_buffer == BufferSize::Auto
            && let Some(bandwidth) = destination.bandwidth_bytes_per_s()
        {
            let bytes = ((3.0 * bandwidth * rtt.as_secs_f64()) as u64).max(64 << 10);
            conn.set_send_buffer(bytes).map_err(|error| {
                format!("sizing the send buffer to {}: {error}", config.address)
            })?;
            send_buffer = Some(bytes);
        }
        let mut conn = conn
            .secure(self.identity.tls.as_deref(), &config.name, config.net_timeout)
            .map_err(|error| format!("connecting to {}: {error}", config.address))?;
        conn.count_sent(destination.wire_bytes.clone());
        let hello = self.hello(channel, destination);
        let incarnation = match &hello {
            Message::Hello(hello) => hello.incarnation,
            _ => unreachable!("hello() makes a hello"),
        };
        conn.send(&hello, config.net_timeout)
            .map_err(|error| format!("handshake with {}: {error}", config.address))?;
        match conn.recv(Some(config.net_timeout)) {
            Ok(Message::Welcome(welcome)) => {
                conn.peer_version = welcome.version;
                if channel == Channel::Control {
                    (self.events)(TransportEvent::Followed {
                        destination: config.name.clone(),
                        incarnation,
                    });
                }
                Ok((conn, welcome, rtt, send_buffer))
            }
            Ok(Message::Error(error)) => {
                let reason = format!(
                    "the standby at {} refused this primary: {}",
                    config.address, error.message
                );
                self.note_refusal(&error, &reason);
                Err(reason)
            }
            Ok(other) => Err(format!(
                "the standby at {} answered the handshake with {:?}",
                config.address,
                other.kind()
            )),
            Err(error) => Err(format!("handshake with {}: {error}", config.address)),
        }
    }

    /// The compressor for a session with a standby that welcomed with `welcome`: none if the
    /// destination compresses nothing or the standby is older than protocol version 3 (it
    /// would take the codec byte for a reserved one and misread the payload).
    pub(super) fn compressor_for(
        &self,
        destination: &Destination,
        welcome: &proto::Welcome,
    ) -> Option<FrameCompressor> {
        let config = &destination.config();
        let codec = config.compression.codec()?;
        if welcome.version < COMPRESSION_VERSION_MIN {
            tracing::warn!(destination = %config.name, standby_version = welcome.version, "the standby speaks a protocol version without compression: redo goes uncompressed");
            return None;
        }
        match FrameCompressor::new(codec, config.compression_level) {
            Ok(compressor) => Some(compressor),
            Err(error) => {
                tracing::error!(destination = %config.name, %error, "cannot start the compressor: redo goes uncompressed");
                None
            }
        }
    }

    /// A standby's refusal that says this primary has been failed over is reported at once.
    pub(in crate::primary) fn note_refusal(&self, error: &proto::ErrorMessage, reason: &str) {
        if error.code == proto::ErrorCode::NewerIncarnation {
            (self.events)(TransportEvent::Fenced {
                incarnation: error.incarnation,
                primary: error.primary.clone(),
                reason: reason.to_string(),
            });
        }
    }
}
