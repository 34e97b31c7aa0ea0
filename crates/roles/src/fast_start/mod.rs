//! Fast-start failover's decisions, sans-IO: what the observer, the primary and a target
//! standby decide from what they have been told, and what each of them keeps on disk.
//!
//! - `primary`: the primary's side: the observer's lease, grants to go on without a target,
//!   which observer is active (and the hand-over to another), which targets hold every commit
//!   it acknowledged (synchronized), and whether a write may be acknowledged (`admit`);
//! - `observer`: the observer's side: who the primary is, the lease and grants it sends, when
//!   the primary is lost, to which target it fails over, and the news it gives an old primary;
//! - `target`: whether a standby takes the failover an observer asks of it;
//! - `record`: what the observer and the primary keep on disk (`ObserverRecord`,
//!   `PrimaryRecord`) and their file format.
//!
//! Every decision is a method `(state, input, now) -> output`: no socket, no thread, no
//! clock (`now` is an argument; `Time::now` reads the clock for the processes that drive
//! these machines). A change of state that a later act depends on, and that must survive a
//! restart, goes through the caller's `persist` before the state changes: if it fails, the
//! state does not change, and nothing that depends on it is done. A restart is a new machine
//! made from the record alone. The processes (`observer`, `transport`, `server`) feed these
//! machines what they hear and carry out what they decide; `tests/model` explores every
//! interleaving of them with stateright. `docs/fast-start-failover.md` has the protocol and
//! the argument.

pub mod observer;
pub mod primary;
pub mod reach;
pub mod record;
pub mod target;

use std::collections::BTreeMap;
use std::time::Duration;

pub use observer::{Effect, Observer, ObserverSettings, Outcome};
pub use primary::{Admission, Primary, PrimaryView};
pub use reach::Reach;
pub use record::{ObserverRecord, PendingFailover, PrimaryRecord, RecordError};
pub use target::{FailoverRequest, TargetView, accept_failover};

/// A point in time, in microseconds of a clock that never goes back and keeps counting while
/// the machine is suspended (`CLOCK_BOOTTIME`): a lease must run out on a host that slept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub u64);

impl Time {
    /// Now, on `CLOCK_BOOTTIME`. (The only function of this module that reads a clock; the
    /// decisions take `now` as an argument.)
    pub fn now() -> Time {
        let mut spec = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `spec` is a valid, writable timespec; CLOCK_BOOTTIME exists on every Linux
        // this runs on (since 2.6.39).
        let result = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut spec) };
        assert_eq!(result, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
        Time(spec.tv_sec as u64 * 1_000_000 + spec.tv_nsec as u64 / 1_000)
    }

    /// How long after `earlier` this is (zero if it is not after).
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    pub fn plus(self, duration: Duration) -> Time {
        Time(self.0.saturating_add(duration.as_micros() as u64))
    }
}

/// A place in the redo stream of one incarnation (`{ log sequence, byte offset }`), as a
/// primary's durable end or a standby's "holds everything before": the same on every member,
/// since a standby writes the primary's redo at the primary's own offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    pub seq: u64,
    pub offset: u64,
}

impl From<redo::RedoAddr> for Position {
    fn from(addr: redo::RedoAddr) -> Position {
        Position { seq: addr.seq.0, offset: addr.offset }
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.seq, self.offset)
    }
}

/// The protection modes fast-start failover runs under (`transport::ProtectionMode` without
/// Maximum Protection, which it does not run under).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protection {
    /// A target holds every commit the primary acknowledged, or the observer agreed (a grant)
    /// before the primary went on without it: no timing assumption.
    MaximumAvailability,
    /// The primary acknowledges under the observer's lease alone: the stated timing
    /// assumptions (clock rates within 20 %, no pause longer than the margin between a lease
    /// check and the acknowledgement) bound how much a failover may lose (`lag_limit`).
    MaximumPerformance,
}

impl Protection {
    pub fn code(self) -> u8 {
        match self {
            Protection::MaximumAvailability => 1,
            Protection::MaximumPerformance => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protection::MaximumAvailability => "maximum_availability",
            Protection::MaximumPerformance => "maximum_performance",
        }
    }
}

/// What fast-start failover runs with: the configuration's `[replication.fast_start_failover]`
/// and observers, which the observer and every member must agree on (the observer's pings
/// carry them; a member refuses a ping that disagrees, naming the field).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Settings {
    pub threshold: Duration,
    pub lag_limit: Duration,
    pub protection: Protection,
    /// The members that may be failed over to, in order of preference.
    pub targets: Vec<String>,
    /// The observers, in order of priority.
    pub observers: Vec<String>,
    /// Per member that may be primary, the fast-start targets its routes reach through one
    /// relay (a far sync, or a cascading standby the primary ships to itself), and that relay
    /// (`target -> relay`). Such a target counts as holding what its relay acknowledged
    /// durably: every failover to it first seals the relay and takes its tail
    /// (`crate::relay`), or does not happen. Behind two relays a target is never one (the
    /// configuration refuses it).
    pub relays: BTreeMap<String, BTreeMap<String, String>>,
}

impl Settings {
    /// How long the primary must be silent before the observer counts it as lost without the
    /// fast path: past its own lease (1.2 × `threshold`; its last ping came before its last
    /// answer), leaving a fifth of the threshold for the two hosts' clock rates to differ.
    /// The relay `target` receives from when `primary` is the primary (none: the primary
    /// ships to it itself).
    pub fn relay_of(&self, primary: &str, target: &str) -> Option<&str> {
        self.relays.get(primary)?.get(target).map(String::as_str)
    }

    pub fn lost_after(&self) -> Duration {
        self.threshold + self.threshold / 5
    }

    /// What the observer's ping says of these settings, for the member to compare.
    pub fn agreement(&self) -> Agreement {
        Agreement {
            threshold_ms: self.threshold.as_millis() as u64,
            lag_limit_ms: self.lag_limit.as_millis() as u64,
            protection: self.protection.code(),
        }
    }

    /// Whether a ping's settings are these: `Err` names each field that differs.
    pub fn check_agreement(&self, theirs: &Agreement) -> Result<(), String> {
        let ours = self.agreement();
        let mut differ = Vec::new();
        if ours.threshold_ms != theirs.threshold_ms {
            differ.push(format!(
                "threshold: the observer has {} ms, this member {} ms",
                theirs.threshold_ms, ours.threshold_ms
            ));
        }
        if ours.protection != theirs.protection {
            let name = |code| match code {
                1 => "maximum_availability",
                2 => "maximum_performance",
                _ => "an unknown mode",
            };
            differ.push(format!(
                "protection_mode: the observer has {}, this member {}",
                name(theirs.protection),
                name(ours.protection)
            ));
        }
        if ours.protection == Protection::MaximumPerformance.code()
            && ours.lag_limit_ms != theirs.lag_limit_ms
        {
            differ.push(format!(
                "lag_limit: the observer has {} ms, this member {} ms",
                theirs.lag_limit_ms, ours.lag_limit_ms
            ));
        }
        if differ.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the observer's fast-start failover settings are not this member's: {}",
                differ.join("; ")
            ))
        }
    }
}

/// The settings an observer's ping carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Agreement {
    pub threshold_ms: u64,
    pub lag_limit_ms: u64,
    pub protection: u8,
}
