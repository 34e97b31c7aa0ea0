//! Zero-data-loss failover through a far sync: before a failover target stops receiving, it
//! takes the tail of redo it lacks from the member it receives from (its far sync, or a
//! cascading standby), as Data Guard's failover through a far sync does.
//!
//! The target seals its relay (`transport::relay_seal`: the relay takes no more redo of the
//! old primary's incarnation, makes what it received durable and answers with that end), then
//! waits, at most `RELAY_TAIL_WAIT`, until its own received redo reaches that end: the relay
//! forwards it as it forwards everything. The argument for why this loses nothing the old
//! primary acknowledged and makes no second primary is in docs/roles.md ("Failover through a
//! far sync").

use std::time::{Duration, Instant};

use redo::RedoAddr;
use transport::{StandbyReceiver, StandbyReplicationStatus};

use super::Roles;

/// The most a failover target waits for its relay's tail once the relay is sealed. The tail
/// is what the relay holds and has not yet forwarded: its ASYNC lag to this target.
pub(crate) const RELAY_TAIL_WAIT: Duration = Duration::from_secs(30);
/// How long the seal itself may take (connecting, the relay's sync, its answer).
const SEAL_TIMEOUT: Duration = Duration::from_secs(5);

/// What a failover target did about its relay's tail.
pub(crate) enum RelayTail {
    /// It receives from the primary itself: there is no relay.
    Direct,
    /// It holds the relay's whole redo, up to `end`.
    Taken { relay: String, end: RedoAddr, waited: Duration },
    /// It could not: why (the relay is unreachable, refused, or its tail did not arrive).
    Missing { relay: String, reason: String },
}

impl RelayTail {
    /// A line for the failover's answer.
    pub(crate) fn note(&self) -> Option<String> {
        match self {
            RelayTail::Direct => None,
            RelayTail::Taken { relay, end, waited } => Some(format!(
                "took the tail held by '{relay}' (sealed at {end}) in {} ms",
                waited.as_millis()
            )),
            RelayTail::Missing { relay, reason } => Some(format!(
                "WITHOUT the tail held by '{relay}' ({reason}): commits the old primary acknowledged through it may be lost"
            )),
        }
    }
}

impl Roles {
    /// Takes the tail this standby lacks from the member it receives from, if that is not the
    /// primary itself (`heard` is its receiver's status). Called with the role-change lock
    /// held and the receiver still running: the relay forwards the tail to it.
    pub(crate) async fn take_relay_tail(
        &self,
        receiver: &StandbyReceiver,
        heard: &StandbyReplicationStatus,
        incarnation: u32,
    ) -> RelayTail {
        let replication = self.settings.replication();
        let me = self.member_name();
        // The relay is the one the routes name, whichever session was last: a session of the
        // primary's own (an alternate route while the far sync was lost) does not say that the
        // far sync, back since, forwarded all it acknowledged.
        let (primary, relay) = match heard.primary_member.clone() {
            Some(primary) => {
                let Some(relay) = replication.source(&primary).filter(|source| *source != primary)
                else {
                    return RelayTail::Direct;
                };
                (primary, relay)
            }
            None => {
                // Nothing heard since it started (restarted after its primary was lost):
                // the relay the routes give it under every other member that may be primary,
                // if they all give the same; the relay names the primary it receives from.
                let relays: Vec<Option<String>> = replication
                    .primary_candidates()
                    .filter(|candidate| candidate.name != me)
                    .map(|candidate| {
                        replication
                            .source(&candidate.name)
                            .filter(|source| *source != candidate.name)
                    })
                    .collect();
                match relays.first() {
                    _ if relays.iter().all(Option::is_none) => return RelayTail::Direct,
                    Some(Some(relay))
                        if relays.iter().all(|other| other.as_ref() == Some(relay)) =>
                    {
                        (String::new(), relay.clone())
                    }
                    _ => {
                        return RelayTail::Missing {
                            relay: "its relay".into(),
                            reason: "it has heard from no primary since it started, and the routes give it different sources under different primaries".into(),
                        };
                    }
                }
            }
        };
        // The seal stops only the relay it reaches: a relay that itself receives from another
        // relay may lack what that one acknowledged (and that one would go on acknowledging a
        // live old primary).
        let candidates: Vec<String> = if primary.is_empty() {
            replication
                .primary_candidates()
                .filter(|candidate| candidate.name != me)
                .map(|candidate| candidate.name.clone())
                .collect()
        } else {
            vec![primary.clone()]
        };
        for candidate in &candidates {
            let upstream = replication
                .route_tree(candidate)
                .and_then(|tree| tree.source_of(&relay).map(str::to_string));
            if let Err(reason) = roles::relay::sealable(candidate, &relay, upstream.as_deref()) {
                return RelayTail::Missing { relay, reason };
            }
        }
        let Some(address) = replication.member_named(&relay).map(|member| member.redo.clone())
        else {
            return RelayTail::Direct;
        };
        let started = Instant::now();
        let asking = me;
        let (name, tls) = (relay.clone(), self.redo_tls.clone());
        let sealed = tokio::task::spawn_blocking(move || {
            transport::relay_seal(
                &address,
                &name,
                &asking,
                &primary,
                incarnation,
                tls.as_deref(),
                SEAL_TIMEOUT,
            )
        })
        .await
        .unwrap_or_else(|error| Err(error.to_string()));
        let info = match sealed {
            Ok(info) => info,
            Err(reason) => {
                tracing::error!(%relay, %reason, "failover: the relay's tail cannot be had");
                return RelayTail::Missing { relay, reason };
            }
        };
        let end = RedoAddr {
            seq: redo::LogSeq(info.position.current_seq),
            offset: info.position.current_offset,
        };
        tracing::info!(%relay, %end, "failover: the relay is sealed; waiting for its tail");
        let deadline = Instant::now() + RELAY_TAIL_WAIT;
        loop {
            let status = receiver.status();
            let received = status.received;
            // Up to the relay's end, and no log missing below it (logs sent over other
            // connections, or a gap from before).
            if roles::relay::tail_taken(end, received, status.complete_through_seq) {
                return RelayTail::Taken { relay, end, waited: started.elapsed() };
            }
            if Instant::now() >= deadline {
                return RelayTail::Missing {
                    relay,
                    reason: format!(
                        "within {RELAY_TAIL_WAIT:?} this standby received up to {received}, not the relay's end {end}"
                    ),
                };
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
