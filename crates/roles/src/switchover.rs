//! Whether a switchover's target can see every failover that may come while the switchover
//! is half done, through the routes it will ship by.
//!
//! While the old primary P is a standby with the switchover pending and the target T has not
//! opened, no member is an open primary: the DBA's `failover --to S` needs no `--force`, and
//! the switchover's complete may still reach T afterwards. T opens unconfirmed and takes
//! writes once every enabled destination of its own has welcomed it in its incarnation
//! (`confirmation`); a destination that is, or follows, the failover's primary refuses the
//! hello instead, and T fences itself, and a relay the failover sealed refuses every hello of
//! the old incarnation, so that T stays unconfirmed. That sees the failover only if one of the
//! destinations T waits for knows of it (without `--force`, with which a failover may go
//! without its seal: the DBA's call, as for a restarted primary):
//!
//! - S one of P's first hops (a hop of its routes, an alternate it may have shipped to since
//!   its far sync was lost, or a destination deferred since): its failover seals nothing, so
//!   S must be one T waits for: an enabled first hop of T's;
//! - S behind a relay R under P's routes: its failover seals R, so R must be one T waits for,
//!   or T itself (a sealed target refuses the switchover); R is one of P's first hops;
//! - S behind two relays: no failover is taken (`relay`);
//! - P itself: it has heard from no primary since its prepare, so its failover looks for the
//!   relay the routes give it under every other member: none if P is a first hop of them all
//!   (and so one T waits for), a refusal otherwise (it cannot seal a relay for itself).
//!
//! So a switchover is safe by its routes when every member P may ship to directly is T, or an
//! enabled first hop of T's. In a cascade whose routes differ with the primary (P → S → T, but
//! T → P → S) a member P ships to sits behind a relay of T's: a failover to it while the
//! switchover was half done went unseen, and T opened beside it (found by reading the code
//! against the model's argument). The same with a member that is a first hop of P's and only
//! an alternate of T's (deferred while its far sync is there: found by a second reading).
//! Such a switchover is refused; it can be done in steps that each pass, or with routes that
//! give T the same first hops.
//!
//! Model-checked with routes (`tests/model/routes.rs`, `tests/model_restart.rs`): with this
//! rule, a target that a failover sealed refusing, and an old primary that a failover sealed
//! not taking its role back (its abort voids the record), never two primaries; without any
//! one of them, a counterexample.

/// The members P may ship to directly (`primary_hops`) that T would not wait for (its enabled
/// first hops, `target_hops`; T itself excepted): empty when T's confirmation sees every
/// failover the half-done switchover allows.
pub fn unseen_hops<'a>(
    primary_hops: &'a [String],
    target: &str,
    target_hops: &[String],
) -> Vec<&'a str> {
    primary_hops
        .iter()
        .filter(|hop| hop.as_str() != target && !target_hops.contains(hop))
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(members: &[&str]) -> Vec<String> {
        members.iter().map(|member| member.to_string()).collect()
    }

    #[test]
    fn without_routes_every_member_is_a_hop_of_both() {
        // P=a ships to b and c; T=b ships to a and c.
        assert!(unseen_hops(&names(&["b", "c"]), "b", &names(&["a", "c"])).is_empty());
    }

    #[test]
    fn through_a_far_sync_both_ways_the_far_sync_is_a_hop_of_both() {
        // east → far → west, and west → far → east (or west → east, far).
        assert!(unseen_hops(&names(&["far"]), "west", &names(&["far"])).is_empty());
        assert!(unseen_hops(&names(&["far"]), "west", &names(&["east", "far"])).is_empty());
        assert!(unseen_hops(&names(&["east", "far"]), "east", &names(&["far"])).is_empty());
    }

    #[test]
    fn a_first_hop_of_the_primary_that_is_only_an_alternate_of_the_target_is_unseen() {
        // P ships to T, F and X directly; T ships to F, X its alternate (deferred): T's
        // enabled first hops are F alone.
        assert_eq!(unseen_hops(&names(&["T", "F", "X"]), "T", &names(&["F"])), vec!["X"]);
    }

    #[test]
    fn a_hop_of_the_primary_behind_a_relay_of_the_target_is_unseen() {
        // Under b: b → c → a; under a: a → b → c. A switchover b → a: c, which b ships to
        // directly, is behind b for a.
        assert_eq!(unseen_hops(&names(&["c"]), "a", &names(&["b"])), vec!["c"]);
        // The other way (a → b): a ships only to b, the target.
        assert!(unseen_hops(&names(&["b"]), "b", &names(&["c"])).is_empty());
    }
}
