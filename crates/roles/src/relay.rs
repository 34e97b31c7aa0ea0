//! A failover through a relay (a far sync, or a cascading standby): the decisions the target
//! and the relay make, sans-IO, so that the server applies them and `tests/model_relay.rs`
//! model-checks the same code (docs/roles.md, "Failover through a far sync").
//!
//! - the target may seal only a relay that receives from the primary itself (`sealable`):
//!   behind two relays the seal would stop the nearer one only, and the farther one would go
//!   on acknowledging a live old primary;
//! - a sealed relay takes no redo of the sealed incarnation, or an older one, from anyone
//!   (`takes_redo`), and a seal only ever raises that bound (`seal`);
//! - the target opens only once it holds the relay's whole durable end, with no log missing
//!   below it (`tail_taken`).

use redo::{Incarnation, LogSeq, RedoAddr};

/// Whether the failover target may seal `relay`, its source under `primary`'s routes, and
/// take the tail from it: only if the relay receives from the primary itself
/// (`relay_source`, the relay's own source under those routes). Otherwise the reason, naming
/// the relay above it.
pub fn sealable(primary: &str, relay: &str, relay_source: Option<&str>) -> Result<(), String> {
    match relay_source {
        Some(upstream) if upstream != primary => Err(format!(
            "under '{primary}' '{relay}' receives from '{upstream}', itself a relay: the tail is taken from the first relay only; fail over to a member nearer the primary"
        )),
        _ => Ok(()),
    }
}

/// The bound a relay keeps after a target failing over from `incarnation` sealed it, given
/// the bound it had (`Incarnation(0)`: never sealed). It only rises: seals are idempotent, and
/// an older one never lifts a newer.
pub fn seal(sealed_below: Incarnation, incarnation: Incarnation) -> Incarnation {
    sealed_below.max(Incarnation(incarnation.0.saturating_add(1)))
}

/// Whether a relay sealed below `sealed_below` takes redo of `incarnation` (a hello, or a
/// write on a connection already open).
pub fn takes_redo(sealed_below: Incarnation, incarnation: Incarnation) -> bool {
    incarnation >= sealed_below
}

/// Whether a failover target holds its sealed relay's whole tail: its received redo reaches
/// the relay's durable end `relay_end` (the seal's answer), and no log below the one it is
/// receiving is missing (`complete_through`: every log up to it is complete here; logs travel
/// over several connections, and a gap may be older). Only then may it stop receiving and
/// open.
pub fn tail_taken(relay_end: RedoAddr, received: RedoAddr, complete_through: LogSeq) -> bool {
    received >= relay_end && complete_through.next() >= received.seq
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64, offset: u64) -> RedoAddr {
        RedoAddr { seq: LogSeq(seq), offset }
    }

    #[test]
    fn only_a_relay_fed_by_the_primary_itself_is_sealed() {
        assert!(sealable("east", "far", Some("east")).is_ok());
        // A source the routes do not give (the relay is a root): nothing above it to stop.
        assert!(sealable("east", "far", None).is_ok());
        let refusal = sealable("east", "far2", Some("far1")).unwrap_err();
        assert!(refusal.contains("'far1', itself a relay"), "{refusal}");
    }

    #[test]
    fn a_seal_only_rises_and_refuses_the_sealed_incarnation_and_older() {
        let sealed = seal(Incarnation(0), Incarnation(3));
        assert_eq!(sealed, Incarnation(4));
        assert_eq!(seal(sealed, Incarnation(1)), Incarnation(4));
        assert!(!takes_redo(sealed, Incarnation(3)));
        assert!(!takes_redo(sealed, Incarnation(2)));
        assert!(takes_redo(sealed, Incarnation(4)));
        assert!(takes_redo(Incarnation(0), Incarnation(1)), "never sealed: takes everything");
    }

    #[test]
    fn the_tail_is_taken_at_the_relays_end_with_no_log_missing_below() {
        let end = at(7, 100);
        assert!(!tail_taken(end, at(7, 99), LogSeq(6)));
        assert!(tail_taken(end, at(7, 100), LogSeq(6)));
        assert!(tail_taken(end, at(8, 0), LogSeq(7)));
        // Past the end in position, but log 6 is still missing (sent on another connection).
        assert!(!tail_taken(end, at(8, 0), LogSeq(5)));
    }
}
