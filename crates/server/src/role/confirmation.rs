//! A restarted primary's confirmation that it was not failed over while it was down.
//!
//! A primary that some standby followed (`control.followed`, on disk before the welcome that
//! set it was acted on) may have been failed over while it was down: the DBA's `failover`
//! needs only the target. It takes writes again once **every enabled destination** has
//! welcomed it in its incarnation. A welcome is a standby's statement that it follows this
//! primary's incarnation, so that it is not the primary of a newer one; and one standby's
//! welcome says nothing of another: a standby cut off from the failover's target, still in
//! the old incarnation, welcomes the old primary as readily as if nothing had happened. Only
//! when each member this primary ships to has answered is there none left that could be the
//! newer primary (a destination that knows a newer incarnation refuses the hello instead, and
//! this primary fences itself).
//!
//! A switchover's target is confirmed the same way as it opens: its old primary was a standby
//! with no primary open while the switchover was half done, so a failover may have come after
//! the prepare, and the target, cut off from that failover's primary, could not tell.
//!
//! What it does not ask: a deferred destination (the DBA's statement that this primary does
//! not ship to it; deferring one at run time is how a member gone for good is taken out of
//! what a restart waits for), and a member behind another (a cascaded standby, one behind a
//! far sync: a failover through a far sync seals it first). With no destination enabled, no
//! welcome can come: it waits until one is enabled.
//!
//! Welcomes are recorded with the incarnation their hello named, from the moment the
//! database opens, before its gate is set: a welcome that arrives while the gate still says
//! the role is changing is not lost, and one from an earlier incarnation never counts.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use roles::confirmation::Awaited;
use transport::{DestinationState, ReplicationConfig};

use super::gate::GateState;

/// The welcomes a primary received since it opened.
#[derive(Debug, Default)]
pub(crate) struct Confirmation {
    welcomed: Mutex<BTreeSet<(String, u32)>>,
    /// This process has just made the database primary by a failover (a new incarnation):
    /// the open that follows is no restart, and takes writes at once. Taken by the next open,
    /// so that a failed one leaves a later retry to wait for its standbys. (Not a switchover's
    /// target: it opens unconfirmed, since a failover may have come after the prepare.)
    promoted_here: AtomicBool,
}

impl Confirmation {
    /// The database was made primary by this process (its control file says so, with
    /// `followed` set): the open that follows needs no confirmation.
    pub(crate) fn promoted_here(&self) {
        self.promoted_here.store(true, Ordering::SeqCst);
    }

    /// Whether the database was just made primary here (see `promoted_here`); clears it.
    pub(crate) fn take_promoted_here(&self) -> bool {
        self.promoted_here.swap(false, Ordering::SeqCst)
    }

    /// Forgets every welcome: the database is opening (before its transport starts).
    pub(crate) fn forget(&self) {
        self.welcomed.lock().clear();
    }

    /// `destination` welcomed this primary in `incarnation`.
    pub(crate) fn welcomed(&self, destination: &str, incarnation: u32) {
        self.welcomed.lock().insert((destination.to_string(), incarnation));
    }

    /// What the primary in `incarnation` still waits for: `None` once every enabled
    /// destination of `replication` welcomed it in that incarnation, else the members to hear
    /// from: the enabled ones not heard yet, or with none enabled, the deferred ones, each with
    /// what would enable it. The decision is `roles::confirmation::awaited`'s (model-checked);
    /// only the words are said here.
    pub(crate) fn awaited(
        &self,
        replication: &ReplicationConfig,
        member: &str,
        incarnation: u32,
    ) -> Option<Vec<String>> {
        let destinations = replication.destinations();
        let shipped: Vec<roles::confirmation::Destination<'_>> = destinations
            .iter()
            .map(|destination| roles::confirmation::Destination {
                member: destination.name.as_str(),
                shipping: match destination.state {
                    DestinationState::Enable => roles::confirmation::Shipping::Enabled,
                    DestinationState::Defer => roles::confirmation::Shipping::Deferred,
                },
            })
            .collect();
        let welcomed = self.welcomed.lock();
        let welcomes = welcomed.iter().map(|(who, at)| (who.as_str(), *at));
        let members = match roles::confirmation::awaited(&shipped, welcomes, incarnation) {
            Awaited::Confirmed => return None,
            Awaited::Members(members) => members,
            Awaited::NoneEnabled => Vec::new(),
        };
        if !members.is_empty() {
            return Some(members.into_iter().map(str::to_string).collect());
        }
        // None enabled: the deferred ones, each with what would enable it.
        let alternates = replication.alternates(member);
        let mut awaited = Vec::new();
        for destination in &destinations {
            let name = &destination.name;
            awaited.push(
                match alternates.iter().find(|alternate| alternate.member == *name) {
                    // Enabled by the primary itself once its far sync has been lost for
                    // `after`: no command to give.
                    Some(alternate) => format!(
                        "{name} (the alternate of '{}': shipped to only once '{}' has been lost for {:?})",
                        alternate.instead_of, alternate.instead_of, alternate.after
                    ),
                    None => format!(
                        "{name} (deferred: enable it with `redoguard edit destination {name} state=enable`)"
                    ),
                },
            );
        }
        Some(awaited)
    }
}

impl super::Roles {
    /// Opens the gate of a restarted primary that every enabled destination has welcomed in
    /// its incarnation, or names in it who is still awaited. Called at every welcome, after
    /// the gate is set once the database opened, and after a destination's state changed.
    pub(crate) fn confirm(&self) {
        let Some(running) = self.current() else { return };
        let control = running.db.redo().control();
        if control.role != redo::Role::Primary || control.fenced.is_some() {
            return;
        }
        let replication = self.settings.replication();
        let member = replication.member.clone().unwrap_or_default();
        let unconfirmed = |state: &GateState| matches!(state, GateState::Unconfirmed { .. });
        match self.confirmation.awaited(&replication, &member, control.incarnation.0) {
            None => {
                if self.gate.replace(unconfirmed, GateState::Open) {
                    tracing::info!(
                        incarnation = control.incarnation.0,
                        "every standby this primary ships to accepted it in its incarnation: writes are taken"
                    );
                }
            }
            Some(members) => {
                if self.gate.state() != (GateState::Unconfirmed { members: members.clone() }) {
                    self.gate.replace(unconfirmed, GateState::Unconfirmed { members });
                }
            }
        }
    }
}
