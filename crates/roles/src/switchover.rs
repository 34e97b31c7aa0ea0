//! Whether a switchover's target can see every failover that may come while the switchover
//! is half done, through the routes it will ship by.
//!
//! While the old primary P is a standby with the switchover pending and the target T has not
//! opened, no member is an open primary: the DBA's `failover --to S` needs no `--force`, and
//! the switchover's complete may still reach T afterwards. T opens unconfirmed and takes
//! writes once every enabled destination of its own has welcomed it in its incarnation
//! (`confirmation`); a destination that is, or follows, the failover's primary refuses the
//! hello instead, and T fences itself. That sees the failover only if one of T's direct
//! destinations knows of it:
//!
//! - S shipped to directly by P: only S knows (its failover seals nothing), so S must be
//!   one of T's direct destinations;
//! - S behind a relay R under P's routes: its failover seals R (`relay`), which then refuses
//!   every hello of the old incarnation, so R must be one of T's direct destinations, or T
//!   itself (a sealed target refuses the switchover); R is one of P's direct destinations;
//! - S behind two relays: no failover is taken (`relay`);
//! - P itself: it follows T since its prepare, so a failover to it seals its relay under
//!   T's routes, or it is one of T's direct destinations.
//!
//! So a switchover is safe by its routes when every member P ships to directly is T, or one
//! T ships to directly. In a cascade whose routes differ with the primary (P → S → T, but
//! T → P → S) a member P ships to sits behind a relay of T's: a failover to it while the
//! switchover is half done went unseen, and T opened beside it (found by reading the code
//! against the model's argument). Such a switchover is refused; it can be done in steps that
//! each pass, or with routes that give T the same first hops.

/// The members P ships to directly that T would not ship to directly (T itself excepted):
/// empty when T's confirmation sees every failover the half-done switchover allows.
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
    fn a_hop_of_the_primary_behind_a_relay_of_the_target_is_unseen() {
        // Under b: b → c → a; under a: a → b → c. A switchover b → a: c, which b ships to
        // directly, is behind b for a.
        assert_eq!(unseen_hops(&names(&["c"]), "a", &names(&["b"])), vec!["c"]);
        // The other way (a → b): a ships only to b, the target.
        assert!(unseen_hops(&names(&["b"]), "b", &names(&["c"])).is_empty());
    }
}
