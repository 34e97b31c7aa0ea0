//! Who may hold a connection on a member's redo listener, and for how long: the slots of
//! connections still proving who they are (the handshake), the slots of those that have, and
//! the check that a peer is what its first frame claims.
//!
//! A connection starts in a *handshake slot*: it has `handshake_timeout` for its TLS handshake
//! and its first frame. Handshake slots are few and shared fairly: one source address holds at
//! most `handshakes_per_address` of them, and when the pool (or a source's share) is full the
//! oldest handshake of the busiest source is ended to make room. So connections that say
//! nothing cannot keep a member's primary out: each lasts at most the timeout, a newcomer
//! evicts them rather than being refused, and a connection that has not sent a byte is
//! evicted before one that has (a flood of silent connections never ends a peer that is
//! handshaking, even from the same address).
//!
//! A peer that proves who it is (with TLS: its certificate is for the name its first frame
//! claims, and that name may ask what it asks) moves to an *established slot*: at most
//! `ESTABLISHED_PER_PEER` for one name and `CONNECTIONS_MAX` in all. Without TLS nothing is
//! proved: the name is the one claimed, and the listener only bounds what a stranger holds.

use std::collections::BTreeMap;
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use proto::{ErrorCode, ErrorMessage, Message};
use serde::{Deserialize, Serialize};

use crate::conn::Conn;

/// Established redo connections a member serves at once (a primary uses two per destination).
pub const CONNECTIONS_MAX: usize = 16;
/// Established connections of one peer (by the name it proved).
pub const ESTABLISHED_PER_PEER: usize = 8;
/// The largest first frame (before the peer is known): a hello with 64 incarnation records is
/// a few KiB.
pub const FIRST_FRAME_MAX: usize = 64 << 10;

fn default_handshake_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_handshakes_max() -> u32 {
    32
}

fn default_handshakes_per_address() -> u32 {
    4
}

/// `[replication.listener]`: what a peer that has not proved who it is may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenerLimits {
    /// Time for a new connection's TLS handshake and first frame together. Bounds:
    /// 100ms..=60s. Default: 5s.
    #[serde(default = "default_handshake_timeout", with = "units::serde_human::duration")]
    pub handshake_timeout: Duration,
    /// Connections in their handshake at once. Bounds: 2..=1024. Default: 32.
    #[serde(default = "default_handshakes_max")]
    pub handshakes_max: u32,
    /// Of those, from one source address. Bounds: 1..=`handshakes_max`. Default: 4.
    #[serde(default = "default_handshakes_per_address")]
    pub handshakes_per_address: u32,
}

impl Default for ListenerLimits {
    fn default() -> ListenerLimits {
        ListenerLimits {
            handshake_timeout: default_handshake_timeout(),
            handshakes_max: default_handshakes_max(),
            handshakes_per_address: default_handshakes_per_address(),
        }
    }
}

impl ListenerLimits {
    /// Checks the bounds; the error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let field = |name: &str| format!("replication.listener.{name}");
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.handshake_timeout)
        {
            return Err((
                field("handshake_timeout"),
                format!("{:?} is outside 100ms..=60s", self.handshake_timeout),
            ));
        }
        if !(2..=1024).contains(&self.handshakes_max) {
            return Err((
                field("handshakes_max"),
                format!("{} is outside 2..=1024", self.handshakes_max),
            ));
        }
        if !(1..=self.handshakes_max).contains(&self.handshakes_per_address) {
            return Err((
                field("handshakes_per_address"),
                format!(
                    "{} is outside 1..={} (handshakes_max)",
                    self.handshakes_per_address, self.handshakes_max
                ),
            ));
        }
        Ok(())
    }
}

/// Who may use a member's redo listener: with TLS, the peers whose certificates the
/// configuration's CA signed, each only as the name its certificate proves.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Mutual TLS; none: plain TCP (nothing is proved).
    pub tls: Option<Arc<tls::RedoTls>>,
    /// The members of the configuration (empty in the single-role form: any name the CA
    /// certified may ship redo).
    pub members: Vec<String>,
    /// The observers (fast-start failover).
    pub observers: Vec<String>,
    /// This member's own name.
    pub this: Option<String>,
    pub limits: ListenerLimits,
}

/// What a first frame claims the peer is.
#[derive(Clone, Copy)]
enum Claim<'a> {
    /// A member (shipping redo, asking for a copy).
    Member(&'a str),
    /// A member or an observer (a probe).
    Peer(&'a str),
    Observer(&'a str),
}

impl Security {
    /// Whether the peer on `conn` may send `first`: with TLS, its certificate proves the name
    /// the frame claims and that name may ask this. Returns the name it is known by (the
    /// claimed one, without TLS).
    pub fn admit(&self, conn: &Conn, first: &Message) -> Result<String, ErrorMessage> {
        let claim = match first {
            Message::Hello(hello) => Claim::Member(&hello.member),
            Message::CopyRequest(request) => Claim::Member(&request.member),
            Message::RelaySeal(seal) => Claim::Member(&seal.member),
            Message::Probe(probe) => Claim::Peer(&probe.member),
            Message::ObserverPing(ping) => Claim::Observer(&ping.observer),
            other => {
                return Err(ErrorMessage::new(
                    ErrorCode::Malformed,
                    format!(
                        "expected a hello, a probe, a copy request, a relay seal or an observer ping, got {:?}",
                        other.kind()
                    ),
                ));
            }
        };
        let (Claim::Member(name) | Claim::Peer(name) | Claim::Observer(name)) = claim;
        if self.tls.is_none() {
            return Ok(name.to_string());
        }
        let refuse = |message: String| Err(ErrorMessage::new(ErrorCode::Unauthenticated, message));
        if name.is_empty() {
            return refuse(
                "this listener takes only peers that name themselves (TLS is on)".into(),
            );
        }
        if !conn.peer_proves(name) {
            return refuse(format!(
                "the certificate this peer presented is not for '{name}', the name it claims"
            ));
        }
        let member = self.members.is_empty() || self.members.iter().any(|member| member == name);
        let observer = self.observers.iter().any(|observer| observer == name);
        let allowed = match claim {
            Claim::Member(_) => member,
            Claim::Peer(_) => member || observer,
            Claim::Observer(_) => observer,
        };
        if !allowed {
            return refuse(format!(
                "'{name}' is not {} of this configuration",
                match claim {
                    Claim::Observer(_) => "an observer",
                    _ => "a member",
                }
            ));
        }
        if matches!(claim, Claim::Member(_)) && self.this.as_deref() == Some(name) {
            return refuse(format!("'{name}' is this member itself"));
        }
        Ok(name.to_string())
    }
}

struct Handshaking {
    id: u64,
    source: IpAddr,
    since: Instant,
    /// The peer has sent something (a TLS ClientHello, a first frame).
    spoke: Arc<AtomicBool>,
    /// A handle on the socket, to end the handshake from the accepting thread.
    socket: TcpStream,
}

#[derive(Default)]
struct State {
    handshaking: Vec<Handshaking>,
    established: BTreeMap<String, usize>,
    next_id: u64,
    evicted: u64,
}

/// The listener's slots.
pub struct Slots {
    limits: ListenerLimits,
    state: Mutex<State>,
}

/// A connection's handshake slot, given back when dropped.
pub struct HandshakeSlot {
    slots: Arc<Slots>,
    id: u64,
    spoke: Arc<AtomicBool>,
    pub deadline: Instant,
}

/// A connection's established slot, given back when dropped.
pub struct EstablishedSlot {
    slots: Arc<Slots>,
    name: String,
}

impl Slots {
    pub fn new(limits: ListenerLimits) -> Arc<Slots> {
        Arc::new(Slots { limits, state: Mutex::default() })
    }

    /// A handshake slot for a connection from `source`, ending the oldest handshake of the
    /// busiest source (this one, if its share is full) when there is no room.
    pub fn handshake(self: &Arc<Slots>, source: IpAddr, socket: &TcpStream) -> HandshakeSlot {
        let mut state = self.state.lock();
        let from_source = state.handshaking.iter().filter(|slot| slot.source == source).count();
        let victim_source = if from_source >= self.limits.handshakes_per_address as usize {
            Some(source)
        } else if state.handshaking.len() >= self.limits.handshakes_max as usize {
            let mut counts: BTreeMap<IpAddr, usize> = BTreeMap::new();
            for slot in &state.handshaking {
                *counts.entry(slot.source).or_default() += 1;
            }
            counts.into_iter().max_by_key(|&(_, count)| count).map(|(source, _)| source)
        } else {
            None
        };
        if let Some(victim_source) = victim_source
            && let Some(at) = state
                .handshaking
                .iter()
                .enumerate()
                .filter(|(_, slot)| slot.source == victim_source)
                .min_by_key(|(_, slot)| (slot.spoke.load(Ordering::Acquire), slot.since))
                .map(|(at, _)| at)
        {
            let victim = state.handshaking.remove(at);
            state.evicted += 1;
            tracing::debug!(source = %victim.source, held_ms = victim.since.elapsed().as_millis() as u64, "redo listener: ended a handshake to make room");
            let _ = victim.socket.shutdown(std::net::Shutdown::Both);
        }
        let id = state.next_id;
        state.next_id += 1;
        let since = Instant::now();
        let spoke = Arc::new(AtomicBool::new(false));
        if let Ok(socket) = socket.try_clone() {
            state.handshaking.push(Handshaking { id, source, since, spoke: spoke.clone(), socket });
        }
        HandshakeSlot {
            slots: self.clone(),
            id,
            spoke,
            deadline: since + self.limits.handshake_timeout,
        }
    }

    /// Moves a connection that proved it is `name` to an established slot, or says why not.
    pub fn establish(
        self: &Arc<Slots>,
        handshake: HandshakeSlot,
        name: &str,
    ) -> Result<EstablishedSlot, ErrorMessage> {
        drop(handshake);
        let mut state = self.state.lock();
        let total: usize = state.established.values().sum();
        let mine = state.established.get(name).copied().unwrap_or(0);
        if total >= CONNECTIONS_MAX {
            return Err(ErrorMessage::new(
                ErrorCode::Busy,
                format!("this member already serves {total} redo connections, its limit"),
            ));
        }
        if mine >= ESTABLISHED_PER_PEER {
            return Err(ErrorMessage::new(
                ErrorCode::Busy,
                format!("'{name}' already holds {mine} redo connections here, its limit"),
            ));
        }
        *state.established.entry(name.to_string()).or_default() += 1;
        Ok(EstablishedSlot { slots: self.clone(), name: name.to_string() })
    }

    /// Handshakes in progress, established connections, handshakes ended to make room.
    pub fn counts(&self) -> (usize, usize, u64) {
        let state = self.state.lock();
        (state.handshaking.len(), state.established.values().sum(), state.evicted)
    }

    pub fn limits(&self) -> ListenerLimits {
        self.limits
    }
}

impl HandshakeSlot {
    /// The peer has sent its first bytes: it is evicted after the silent ones.
    pub fn spoke(&self) {
        self.spoke.store(true, Ordering::Release);
    }

    /// Time left for the handshake.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock();
        state.handshaking.retain(|slot| slot.id != self.id);
    }
}

impl Drop for EstablishedSlot {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock();
        if let Some(count) = state.established.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                state.established.remove(&self.name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_share_evicts_the_oldest_handshake_of_that_source() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let limits =
            ListenerLimits { handshakes_max: 4, handshakes_per_address: 2, ..Default::default() };
        let slots = Slots::new(limits);
        let mut held = Vec::new();
        let mut accepted = Vec::new();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for source in [a, a, a, b] {
            let _client = TcpStream::connect(addr).unwrap();
            let (socket, _) = listener.accept().unwrap();
            held.push(slots.handshake(source, &socket));
            accepted.push((socket, _client));
        }
        // The third from `a` ended the first: `a` holds two, `b` one.
        assert_eq!(slots.counts().0, 3);
        assert_eq!(slots.counts().2, 1);
        let mut byte = [0u8; 1];
        use std::io::Read as _;
        assert_eq!((&accepted[0].0).read(&mut byte).unwrap_or(0), 0, "the oldest was shut down");
        let name = "east";
        let established = slots.establish(held.pop().unwrap(), name).unwrap();
        assert_eq!(slots.counts().0, 2);
        assert_eq!(slots.counts().1, 1);
        drop(established);
        assert_eq!(slots.counts().1, 0);
    }
}
