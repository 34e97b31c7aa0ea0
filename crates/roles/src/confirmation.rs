//! A restarted primary's confirmation: whether it may take writes again, or whom it still
//! waits for.
//!
//! A primary that some standby followed, or that a switchover or failover made primary, may
//! have been failed over while it was down: the DBA's `failover` needs only its target. It
//! takes writes again once **every enabled destination** has welcomed it in its incarnation.
//! A welcome says only that the member who sends it follows this incarnation (so that *it*
//! is not the primary of a newer one); one member's welcome says nothing of another's. A
//! destination that knows a newer incarnation refuses the hello instead, and the primary
//! fences itself: that is not decided here.
//!
//! What it does not wait for: a deferred destination (the DBA's word that it is not a
//! primary). With no destination enabled, no welcome can come: it waits until one is.
//!
//! The server (`server::role::confirmation`) keeps the welcomes and sets the gate from this
//! decision; `tests/model_restart.rs` model-checks it with failovers, crashes and partitions.

/// Whether the primary ships to a destination (`state` in its configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shipping {
    Enabled,
    /// The DBA's word that this member is not a primary; the primary does not ship to it.
    Deferred,
}

/// A member the primary ships to directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Destination<'a> {
    pub member: &'a str,
    pub shipping: Shipping,
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Awaited<'a> {
    /// Every enabled destination welcomed the primary in its incarnation: it takes writes.
    Confirmed,
    /// The enabled destinations not heard from yet in its incarnation, in their order.
    Members(Vec<&'a str>),
    /// No destination is enabled: no welcome can come (the caller says what would enable one).
    NoneEnabled,
}

/// What a primary of `incarnation` still waits for, having received `welcomes` (each the
/// member that sent it and the incarnation its hello named) since its database opened.
pub fn awaited<'a, 'w>(
    destinations: &[Destination<'a>],
    welcomes: impl IntoIterator<Item = (&'w str, u32)>,
    incarnation: u32,
) -> Awaited<'a> {
    let heard: Vec<&str> = welcomes
        .into_iter()
        .filter(|(_, at)| *at == incarnation)
        .map(|(member, _)| member)
        .collect();
    let enabled: Vec<&'a str> = destinations
        .iter()
        .filter(|destination| destination.shipping == Shipping::Enabled)
        .map(|destination| destination.member)
        .collect();
    if enabled.is_empty() {
        return Awaited::NoneEnabled;
    }
    let missing: Vec<&'a str> =
        enabled.into_iter().filter(|member| !heard.contains(member)).collect();
    if missing.is_empty() { Awaited::Confirmed } else { Awaited::Members(missing) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled(member: &str) -> Destination<'_> {
        Destination { member, shipping: Shipping::Enabled }
    }

    fn deferred(member: &str) -> Destination<'_> {
        Destination { member, shipping: Shipping::Deferred }
    }

    #[test]
    fn every_enabled_destination_must_welcome_not_the_first() {
        let destinations = [enabled("west"), enabled("south")];
        assert_eq!(awaited(&destinations, [], 2), Awaited::Members(vec!["west", "south"]));
        assert_eq!(awaited(&destinations, [("west", 2)], 2), Awaited::Members(vec!["south"]));
        assert_eq!(awaited(&destinations, [("south", 2), ("west", 2)], 2), Awaited::Confirmed);
    }

    #[test]
    fn a_welcome_in_another_incarnation_does_not_count() {
        let destinations = [enabled("west"), enabled("south")];
        let welcomes = [("west", 1), ("south", 2), ("west", 3)];
        assert_eq!(awaited(&destinations, welcomes, 2), Awaited::Members(vec!["west"]));
        assert_eq!(awaited(&destinations, [("west", 2), ("south", 2)], 3), {
            Awaited::Members(vec!["west", "south"])
        });
    }

    #[test]
    fn a_deferred_destination_is_not_awaited_and_none_enabled_is_said() {
        let destinations = [enabled("west"), deferred("south")];
        assert_eq!(awaited(&destinations, [("west", 1)], 1), Awaited::Confirmed);
        assert_eq!(awaited(&destinations, [("south", 1)], 1), Awaited::Members(vec!["west"]));
        let none = [deferred("west"), deferred("south")];
        assert_eq!(awaited(&none, [("west", 1), ("south", 1)], 1), Awaited::NoneEnabled);
        assert_eq!(awaited(&[], [], 1), Awaited::NoneEnabled);
    }

    #[test]
    fn a_welcome_from_a_member_not_shipped_to_counts_for_nothing() {
        // (A cascaded standby's, say: it is not a destination of this primary.)
        let destinations = [enabled("west")];
        assert_eq!(awaited(&destinations, [("far", 1)], 1), Awaited::Members(vec!["west"]));
    }
}
