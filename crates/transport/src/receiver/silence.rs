//! How long each redo source (a primary, or a member forwarding its redo) has been silent: the
//! receive-silence limit (`silence_timeout`) that ends the connections of a source no longer
//! heard, when its link is cut without a FIN or RST (a partition, a pulled cable).
//!
//! A source is one member in one incarnation, on all of its connections together: a live
//! primary keeps its control connection busy with heartbeats (every 500 ms), while its SYNC
//! connection (one write at a time) and its archive connections (whole logs) may be idle for
//! long. So a connection is ended when nothing has come from its source on *any* of its
//! connections for the limit, never for its own idleness alone.
//!
//! Silence is counted only while every connection of the source waits for bytes: a connection
//! whose thread is busy with what it received (a slow sync of the standby logs, say) is not
//! listening, and what its source sent meanwhile waits unread in its socket. The standby's own
//! stall is no silence of the source.
//!
//! Pure: callers pass `now`, so tests need no clock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Who a connection's redo comes from: the member sending it (a primary, or a relay) in its
/// incarnation; a sender that gives no name (a single-role primary) by its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SourceKey {
    sender: String,
    incarnation: u32,
}

impl SourceKey {
    pub(super) fn of(hello: &proto::Hello, peer: SocketAddr) -> SourceKey {
        let sender =
            if hello.member.is_empty() { peer.ip().to_string() } else { hello.member.clone() };
        SourceKey { sender, incarnation: hello.incarnation }
    }

    /// The member (or host) the redo comes from, for a log line.
    pub(super) fn sender(&self) -> &str {
        &self.sender
    }
}

#[derive(Debug)]
struct Source {
    key: SourceKey,
    /// When something last came from it, or one of its connections last went back to waiting
    /// for bytes (the standby listened again from then on).
    at: Instant,
    connections: u32,
    /// Of those, the ones busy with what they received (not waiting for bytes).
    busy: u32,
}

/// The sources of the connections being served (at most one per connection: the listener
/// bounds them).
#[derive(Debug, Default)]
pub(super) struct Sources {
    sources: Vec<Source>,
}

impl Sources {
    fn find(&mut self, key: &SourceKey) -> Option<&mut Source> {
        self.sources.iter_mut().find(|source| source.key == *key)
    }

    /// A connection of `key` is served from `now` on (busy: it is not waiting for bytes yet).
    pub(super) fn join(&mut self, key: &SourceKey, now: Instant) {
        match self.find(key) {
            Some(source) => {
                source.connections += 1;
                source.busy += 1;
                source.at = source.at.max(now);
            }
            None => {
                self.sources.push(Source { key: key.clone(), at: now, connections: 1, busy: 1 })
            }
        }
    }

    /// A connection of `key` has ended (`busy`: while not waiting for bytes).
    pub(super) fn leave(&mut self, key: &SourceKey, busy: bool) {
        if let Some(at) = self.sources.iter().position(|source| source.key == *key) {
            let source = &mut self.sources[at];
            source.connections = source.connections.saturating_sub(1);
            if busy {
                source.busy = source.busy.saturating_sub(1);
            }
            if source.connections == 0 {
                self.sources.swap_remove(at);
            }
        }
    }

    /// Bytes came from `key` at `now`.
    pub(super) fn heard(&mut self, key: &SourceKey, now: Instant) {
        if let Some(source) = self.find(key) {
            source.at = source.at.max(now);
        }
    }

    /// A connection of `key` got a message and is busy with it from `now`.
    pub(super) fn busy(&mut self, key: &SourceKey, now: Instant) {
        if let Some(source) = self.find(key) {
            source.at = source.at.max(now);
            source.busy += 1;
        }
    }

    /// A connection of `key` is done with what it received and waits for bytes again.
    pub(super) fn waiting(&mut self, key: &SourceKey, now: Instant) {
        if let Some(source) = self.find(key) {
            source.at = source.at.max(now);
            source.busy = source.busy.saturating_sub(1);
        }
    }

    /// How long `key` has been silent at `now` while the standby listened on every one of its
    /// connections (zero while one of them is busy).
    pub(super) fn silence(&self, key: &SourceKey, now: Instant) -> Duration {
        match self.sources.iter().find(|source| source.key == *key) {
            Some(source) if source.busy == 0 => now.saturating_duration_since(source.at),
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(sender: &str, incarnation: u32) -> SourceKey {
        SourceKey { sender: sender.into(), incarnation }
    }

    const S: Duration = Duration::from_secs(1);

    /// An idle SYNC connection is not silent while its primary's control connection hears
    /// heartbeats; once the control connection hears nothing, both are silent together.
    #[test]
    fn a_source_is_silent_only_when_no_connection_of_it_hears_anything() {
        let t0 = Instant::now();
        let east = key("east", 1);
        let mut sources = Sources::default();
        sources.join(&east, t0); // control
        sources.waiting(&east, t0);
        sources.join(&east, t0); // SYNC
        sources.waiting(&east, t0);
        for second in 1..=10 {
            // A heartbeat on the control connection, handled at once.
            sources.busy(&east, t0 + second * S);
            sources.waiting(&east, t0 + second * S);
        }
        assert_eq!(sources.silence(&east, t0 + 10 * S), Duration::ZERO);
        assert_eq!(sources.silence(&east, t0 + 16 * S), 6 * S);
        // Another member, or the same member in another incarnation, is another source.
        assert_eq!(sources.silence(&key("east", 2), t0 + 16 * S), Duration::ZERO);
        sources.join(&key("west", 1), t0 + 16 * S);
        assert_eq!(sources.silence(&east, t0 + 16 * S), 6 * S);
    }

    /// A connection busy with what it received (a slow sync) is not listening: no silence
    /// counts until it waits for bytes again, and then from then on.
    #[test]
    fn no_silence_counts_while_a_connection_is_busy() {
        let t0 = Instant::now();
        let east = key("east", 1);
        let mut sources = Sources::default();
        sources.join(&east, t0);
        sources.waiting(&east, t0);
        sources.join(&east, t0);
        sources.waiting(&east, t0);
        sources.busy(&east, t0 + S);
        assert_eq!(sources.silence(&east, t0 + 30 * S), Duration::ZERO);
        sources.waiting(&east, t0 + 30 * S);
        assert_eq!(sources.silence(&east, t0 + 32 * S), 2 * S);
        // Bytes of a message not whole yet count too.
        sources.heard(&east, t0 + 32 * S);
        assert_eq!(sources.silence(&east, t0 + 33 * S), S);
    }

    /// A source is forgotten with its last connection, busy or not.
    #[test]
    fn a_source_goes_with_its_last_connection() {
        let t0 = Instant::now();
        let east = key("east", 1);
        let mut sources = Sources::default();
        sources.join(&east, t0);
        sources.join(&east, t0);
        sources.waiting(&east, t0);
        sources.leave(&east, true);
        assert_eq!(sources.silence(&east, t0 + 3 * S), 3 * S);
        sources.leave(&east, false);
        assert!(sources.sources.is_empty());
        assert_eq!(sources.silence(&east, t0 + 3 * S), Duration::ZERO);
    }
}
