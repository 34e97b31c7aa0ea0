//! Whether a standby may follow a primary: the decision a standby makes on every hello.
//!
//! A standby in incarnation `s` meets a primary in incarnation `p` (with the primary's
//! newest incarnation records):
//!
//! - `p` older than anything the standby knows (`s`, or a newer incarnation it has heard of
//!   and could not follow): the primary has been failed over. It is refused with
//!   `NewerIncarnation`, which fences it: it must never take a write again.
//! - Records of the same incarnation that differ (two members each opened an incarnation
//!   `n`): the two are on different branches: `Diverged`.
//! - `p == s`: the same history: follow.
//! - `p > s`: the primary's record of incarnation `s + 1` says where `s` ended on its branch.
//!   A standby that holds nothing beyond that point adopts the newer records and follows;
//!   one that holds more (redo the old primary generated after the failover point) has
//!   diverged and must be reinstated, which sets that redo aside.
//!
//! Positions compare as a standby's "next byte needed" does: the log and offset up to which
//! it holds redo, or the next log at offset 0 once its newest log is closed.

use redo::{Incarnation, RedoAddr, Scn};

use crate::history::{Branch, IncarnationHistory};

/// What a standby knows about itself.
#[derive(Debug, Clone, Copy)]
pub struct StandbyView<'a> {
    pub incarnation: Incarnation,
    pub history: &'a IncarnationHistory,
    /// The next byte it needs: it holds everything before.
    pub next: RedoAddr,
    /// A newer incarnation it has learned of and could not follow (it is fenced by it).
    pub fenced_by: Option<Incarnation>,
    /// The newest SCN its data files may hold (their checkpoint). Of a standby that received
    /// all it holds, never past its redo; of one built from a copy, data with no redo behind
    /// it (the copy's source may have been on a branch the primary left).
    pub data_through: Scn,
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Same incarnation: receive its redo.
    Follow,
    /// A newer incarnation this standby can follow: record these branches (durably, before
    /// receiving anything), then receive.
    Adopt(Vec<Branch>),
    /// The primary is in an older incarnation than `newest`, which this standby knows: refuse
    /// it, and tell it (it is fenced).
    StalePrimary { newest: Incarnation },
    /// This standby is on another branch than the primary: refuse; it must be reinstated.
    Diverged(String),
}

/// Decides whether `standby` may follow a primary in `primary` with records `primary_history`
/// (its newest ones, oldest first, consecutive).
pub fn decide(
    standby: &StandbyView<'_>,
    primary: Incarnation,
    primary_history: &[Branch],
) -> Verdict {
    let newest_known =
        standby.fenced_by.map_or(standby.incarnation, |fenced| fenced.max(standby.incarnation));
    if primary < newest_known {
        return Verdict::StalePrimary { newest: newest_known };
    }
    for theirs in primary_history.iter().filter(|branch| branch.incarnation <= standby.incarnation)
    {
        if let Some(ours) = standby.history.branch(theirs.incarnation)
            && ours != theirs
        {
            return Verdict::Diverged(format!(
                "incarnation {} began at SCN {} (opened by {}) here, but at SCN {} (opened by {}) on the primary: they are different histories",
                ours.incarnation, ours.first_scn, ours.member, theirs.first_scn, theirs.member
            ));
        }
    }
    if primary == standby.incarnation {
        return Verdict::Follow;
    }
    let next = Incarnation(standby.incarnation.0 + 1);
    let Some(branch) = primary_history.iter().find(|branch| branch.incarnation == next) else {
        return Verdict::Diverged(format!(
            "this standby is in incarnation {}, and the primary's history (incarnation {primary}) no longer reaches back to it: rebuild the standby",
            standby.incarnation
        ));
    };
    let end = branch.parent_end();
    let last_log = branch.first_seq.prev_seq();
    let beyond = standby.next > end
        || (standby.next.seq == last_log && standby.next.offset > branch.prev_end_offset);
    if standby.data_through >= branch.first_scn {
        return Verdict::Diverged(format!(
            "incarnation {} began at SCN {}, but this standby's data files hold changes up to SCN {}: they include the old primary's past the failover point; rebuild it (`redoguard server --from`) or reinstate it",
            branch.incarnation, branch.first_scn, standby.data_through
        ));
    }
    if beyond {
        return Verdict::Diverged(format!(
            "incarnation {} began after log {last_log} at offset {} (SCN {}), but this standby holds redo up to {}: it has redo of the old primary past the failover point; reinstate it",
            branch.incarnation,
            branch.prev_end_offset,
            branch.first_scn,
            describe(standby.next)
        ));
    }
    Verdict::Adopt(
        primary_history
            .iter()
            .filter(|branch| branch.incarnation > standby.incarnation)
            .cloned()
            .collect(),
    )
}

fn describe(next: RedoAddr) -> String {
    if next.offset == 0 {
        format!("the end of log {}", next.seq.prev_seq())
    } else {
        format!("log {} offset {}", next.seq, next.offset)
    }
}

#[cfg(test)]
mod tests {
    use redo::{LogSeq, Scn};

    use super::*;

    fn branch(
        incarnation: u32,
        first_seq: u64,
        prev_end_offset: u64,
        prev_closed_here: bool,
    ) -> Branch {
        Branch {
            incarnation: Incarnation(incarnation),
            first_seq: LogSeq(first_seq),
            first_scn: Scn(100 * u64::from(incarnation)),
            prev_end_offset,
            prev_closed_here,
            created_us: 1,
            member: "west".into(),
        }
    }

    fn at(seq: u64, offset: u64) -> RedoAddr {
        RedoAddr { seq: LogSeq(seq), offset }
    }

    fn view(incarnation: u32, history: &IncarnationHistory, next: RedoAddr) -> StandbyView<'_> {
        StandbyView {
            incarnation: Incarnation(incarnation),
            history,
            next,
            fenced_by: None,
            data_through: Scn(0),
        }
    }

    #[test]
    fn the_same_incarnation_is_followed_and_an_older_one_is_stale() {
        let empty = IncarnationHistory::default();
        assert_eq!(decide(&view(1, &empty, at(3, 8192)), Incarnation(1), &[]), Verdict::Follow);
        let mut history = IncarnationHistory::default();
        history.push(branch(2, 5, 40960, true)).unwrap();
        assert_eq!(
            decide(&view(2, &history, at(6, 0)), Incarnation(1), &[]),
            Verdict::StalePrimary { newest: Incarnation(2) }
        );
        let fenced = StandbyView { fenced_by: Some(Incarnation(3)), ..view(2, &history, at(6, 0)) };
        assert_eq!(
            decide(&fenced, Incarnation(2), &history.branches),
            Verdict::StalePrimary { newest: Incarnation(3) }
        );
    }

    #[test]
    fn a_standby_behind_the_branch_point_adopts_the_new_incarnation() {
        let empty = IncarnationHistory::default();
        // The new primary closed log 4 at 40960 (it was open there).
        let record = branch(2, 5, 40960, true);
        for next in [at(1, 0), at(4, 8192), at(4, 40960)] {
            assert_eq!(
                decide(&view(1, &empty, next), Incarnation(2), std::slice::from_ref(&record)),
                Verdict::Adopt(vec![record.clone()]),
                "{next}"
            );
        }
        // Holding log 4 further, or closed (by the old primary), or log 5 of the old
        // incarnation: diverged.
        for next in [at(4, 45056), at(5, 0), at(5, 8192), at(9, 0)] {
            let verdict =
                decide(&view(1, &empty, next), Incarnation(2), std::slice::from_ref(&record));
            assert!(matches!(verdict, Verdict::Diverged(_)), "{next}: {verdict:?}");
        }
    }

    #[test]
    fn a_standby_built_from_a_copy_past_the_branch_point_has_diverged_whatever_its_redo() {
        let empty = IncarnationHistory::default();
        // Incarnation 2 begins at SCN 200; a copy's base log 4, no redo received yet.
        let record = branch(2, 5, 40960, true);
        let copied =
            |through: u64| StandbyView { data_through: Scn(through), ..view(1, &empty, at(4, 0)) };
        for through in [0, 150, 199] {
            assert_eq!(
                decide(&copied(through), Incarnation(2), std::slice::from_ref(&record)),
                Verdict::Adopt(vec![record.clone()]),
                "data through SCN {through}"
            );
        }
        for through in [200, 260] {
            let verdict = decide(&copied(through), Incarnation(2), std::slice::from_ref(&record));
            assert!(
                matches!(&verdict, Verdict::Diverged(reason) if reason.contains("data files hold changes up to SCN")),
                "data through SCN {through}: {verdict:?}"
            );
        }
        // The same incarnation: nothing to compare.
        assert_eq!(decide(&copied(260), Incarnation(1), &[]), Verdict::Follow);
    }

    #[test]
    fn when_the_old_primary_had_closed_the_last_log_holding_it_closed_is_on_the_branch() {
        let empty = IncarnationHistory::default();
        let record = branch(2, 5, 40960, false);
        for next in [at(4, 8192), at(4, 40960), at(5, 0)] {
            assert!(
                matches!(
                    decide(&view(1, &empty, next), Incarnation(2), std::slice::from_ref(&record)),
                    Verdict::Adopt(_)
                ),
                "{next}"
            );
        }
        for next in [at(4, 45056), at(5, 8192)] {
            assert!(
                matches!(
                    decide(&view(1, &empty, next), Incarnation(2), std::slice::from_ref(&record)),
                    Verdict::Diverged(_)
                ),
                "{next}"
            );
        }
    }

    #[test]
    fn two_incarnations_of_the_same_number_are_different_histories() {
        let mut ours = IncarnationHistory::default();
        ours.push(branch(2, 5, 40960, true)).unwrap();
        let theirs =
            Branch { member: "east".into(), first_scn: Scn(7), ..branch(2, 5, 40960, true) };
        let verdict = decide(&view(2, &ours, at(6, 8192)), Incarnation(2), &[theirs]);
        assert!(matches!(verdict, Verdict::Diverged(_)), "{verdict:?}");
    }

    #[test]
    fn several_failovers_behind_are_adopted_at_once_if_the_history_reaches_back() {
        let empty = IncarnationHistory::default();
        let records = vec![branch(2, 5, 40960, true), branch(3, 9, 8192, true)];
        assert_eq!(
            decide(&view(1, &empty, at(4, 8192)), Incarnation(3), &records),
            Verdict::Adopt(records.clone())
        );
        let verdict = decide(&view(1, &empty, at(4, 8192)), Incarnation(3), &records[1..]);
        assert!(
            matches!(verdict, Verdict::Diverged(ref reason) if reason.contains("rebuild")),
            "{verdict:?}"
        );
    }
}
