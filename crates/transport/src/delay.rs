//! Delayed apply on a standby (Data Guard's DELAY): redo is received and written at once, and
//! applied only once it is `delay` old in the primary's time.
//!
//! The receiver knows when the primary generated which SCN: every live write carries the
//! last SCN it holds and the time the primary's log writer made it, and every heartbeat the
//! primary's newest SCN and clock. From those points, every 200 ms, the receiver raises the
//! redo log's *apply horizon* (`RedoLog::raise_apply_horizon`) to the newest SCN generated at
//! least `delay` ago; apply reads no record above it. Redo read back from the primary's files
//! (catch-up) carries no time: it is dated by the next heartbeat, so it is applied no sooner
//! than `delay` after that, never earlier than its commit time plus `delay`.
//!
//! A failover lifts the horizon (`release`) so that the new primary opens with everything it
//! received applied.

use std::time::Duration;

use redo::{RedoLog, Scn};

/// The newest SCN of `points` ((SCN, primary time) in increasing order) generated at or
/// before `cutoff_us`, if any.
pub fn horizon_at(points: impl IntoIterator<Item = (Scn, u64)>, cutoff_us: u64) -> Option<Scn> {
    points.into_iter().take_while(|&(_, time_us)| time_us <= cutoff_us).last().map(|(scn, _)| scn)
}

/// Before a database opens as a standby with `delay`: nothing is applied until the receiver
/// knows how old the redo is.
pub fn hold(redo: &RedoLog, delay: Duration) {
    if !delay.is_zero() {
        redo.set_apply_horizon(Scn(0));
    }
}

/// Lifts the delay (a failover or a switchover to this standby applies everything it has);
/// returns whether redo was held back.
pub fn release(redo: &RedoLog, applied: Scn, received: Scn) -> bool {
    let held = redo.apply_horizon() != Scn(u64::MAX) && received > applied;
    redo.set_apply_horizon(Scn(u64::MAX));
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_horizon_is_the_newest_scn_old_enough() {
        let points = [(Scn(10), 1_000), (Scn(20), 2_000), (Scn(30), 3_000)];
        assert_eq!(horizon_at(points, 999), None);
        assert_eq!(horizon_at(points, 1_000), Some(Scn(10)));
        assert_eq!(horizon_at(points, 2_500), Some(Scn(20)));
        assert_eq!(horizon_at(points, u64::MAX), Some(Scn(30)));
    }

    #[test]
    fn delay_is_minutes_as_a_number_or_a_duration_as_text_and_bounded() {
        let parse = |text: &str| serde_json::from_str::<crate::StandbyConfig>(text).unwrap().delay;
        assert_eq!(parse("{}"), Duration::ZERO);
        assert_eq!(parse(r#"{"delay": 5}"#), Duration::from_secs(300));
        assert_eq!(parse(r#"{"delay": "30s"}"#), Duration::from_secs(30));
        assert_eq!(parse(r#"{"delay": "5min"}"#), Duration::from_secs(300));
        let config = crate::ReplicationConfig {
            role: crate::RoleConfig::Standby,
            standby: crate::StandbyConfig {
                delay: Duration::from_secs(8 * 24 * 3600),
                ..crate::StandbyConfig::default()
            },
            ..crate::ReplicationConfig::default()
        };
        let (field, reason) = config.validate().unwrap_err();
        assert_eq!(field, "replication.standby.delay");
        assert!(reason.contains("7 days"), "{reason}");
    }
}
