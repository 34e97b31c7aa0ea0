//! Switchover: the old primary's side (`prepare_switchover`, `abort_switchover`) and the
//! target's (`complete_switchover`); `record` has the files that remember a switchover under
//! way (on the old primary) and the switchovers a target refused.

mod record;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use redo::{RedoAddr, RedoLog, Role, Scn};

use super::super::Roles;
use super::super::api::{Promoted, SwitchoverPrepared};
use super::super::gate::GateState;
use super::*;

/// How long the old primary waits for the target to have everything it wrote.
const SWITCHOVER_SHIP_WAIT: Duration = Duration::from_secs(30);
/// How long writers already past the gate may take to finish their commits.
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// How long a switchover's target, open and unconfirmed, waits for its destinations'
/// welcomes before it answers (it goes on waiting after; the answer names whom).
const CONFIRM_WAIT: Duration = Duration::from_secs(10);

pub(crate) use record::PendingSwitchover;

/// What the target of a switchover is told by the broker: the old primary's answer to the
/// prepare (`SwitchoverPrepared`), as the complete's query carries it.
pub struct Handover {
    /// The old primary.
    pub from: String,
    /// The switchover's id, drawn by the old primary's prepare.
    pub id: u64,
    /// The old primary's incarnation: the target's must be the same.
    pub incarnation: u32,
    pub end: RedoAddr,
    pub last_scn: Scn,
    /// The old primary's fast-start failover record, if it handed one over.
    pub fast_start: Option<roles::fast_start::PrimaryRecord>,
}

/// The destination of primary `primary` that a switchover to `to` hands the redo to: `to`
/// itself when this primary ships to it (an alternate route in use included), otherwise the
/// first member on `to`'s path in `primary`'s route tree (a far sync or a cascading standby
/// that forwards to it, maybe through others). `Err` names why there is none.
fn first_hop(
    shipping: &[transport::DestinationStatus],
    replication: &transport::config::ReplicationConfig,
    primary: &str,
    to: &str,
) -> Result<String, String> {
    let shipped = |name: &str| {
        shipping.iter().any(|destination| {
            destination.name == name && destination.phase != transport::Phase::Deferred
        })
    };
    if shipped(to) {
        return Ok(to.to_string());
    }
    let path = replication.route_tree(primary).map(|tree| tree.path(to)).unwrap_or_default();
    match path.as_slice() {
        [first, hop, .., last] if first == primary && last == to && hop != to => Ok(hop.clone()),
        // A destination of its own that is deferred: the caller says so.
        _ if shipping.iter().any(|destination| destination.name == to) => Ok(to.to_string()),
        _ => Err(format!(
            "'{to}' is not a destination of this primary, neither directly nor through a relay"
        )),
    }
}

/// Why a switchover prepared in incarnation `prepared_in` (0: a record from before it was
/// kept) is void by its old primary's control file, if it is: a failover came after it. The
/// member follows a newer incarnation (giving the role back in it would make a second primary
/// of that one), or a failover target sealed it, as its relay, against its incarnation (that
/// failover's primary may be open already, and need not be a member this one ships to
/// directly: its confirmation would not hear of it). Both found by
/// `roles/tests/model_restart.rs`.
fn void_switchover(control: &redo::ControlData, prepared_in: u32) -> Option<String> {
    let incarnation = control.incarnation.0;
    if prepared_in != 0 && incarnation != prepared_in {
        return Some(format!(
            "it was prepared in incarnation {prepared_in}, and this member follows incarnation {incarnation} since (a failover came after it)"
        ));
    }
    sealed_against_own(control)
}

/// Logs that the void record of switchover `id` to `target` was removed, and says so.
fn void_removed(id: u64, target: &str, prepared_in: u32, reason: &str) -> String {
    tracing::warn!(switchover = id, to = %target, prepared_in, %reason, "a void switchover record removed");
    format!(
        "switchover {id} to '{target}': {reason}: it is void; its record is removed, and no role is given back"
    )
}

impl Roles {
    /// Switchover, old primary's part: on return it is a standby of `to`, and the answer says
    /// where its redo ends.
    pub async fn prepare_switchover(
        self: &Arc<Roles>,
        to: &str,
    ) -> anyhow::Result<SwitchoverPrepared> {
        self.require_members()?;
        let _transition = self.transition.lock().await;
        let started = Instant::now();
        let running = self.running()?;
        let control = running.db.redo().control();
        if control.role != Role::Primary || control.fenced.is_some() {
            return refuse(format!("'{}' is not the primary", self.member_name()));
        }
        // Only from an open gate. A primary restarted and still unconfirmed does not know that
        // it is the primary still (a failover may have happened while it was down), nor does
        // an isolated one: it hands nothing over, and the `undo` below, which opens the gate,
        // must never open one it found closed (found by `roles/tests/model_restart.rs`).
        let gate = self.gate.state();
        if gate != GateState::Open {
            return refuse(format!(
                "'{}' takes no write now ({gate:?}): a switchover starts only from a primary whose gate is open",
                self.member_name()
            ));
        }
        if to == self.member_name() || self.config.replication.member_named(to).is_none() {
            return refuse(format!("'{to}' is not another member of this configuration"));
        }
        if self.settings.replication().is_far_sync(to) {
            return refuse(format!(
                "'{to}' is a far sync: it holds no database and never becomes the primary"
            ));
        }
        self.refuse_unseen_hops(&self.member_name(), to)?;
        let Some(transport) = &running.transport else {
            return refuse("this primary ships redo to no standby");
        };
        // Who this primary must hand everything to: `to` itself, or, for a target reached
        // through relays (a far sync, a cascading standby), the first of them.
        let shipping = transport.status();
        let via = match first_hop(&shipping, &self.settings.replication(), &self.member_name(), to)
        {
            Ok(via) => via,
            Err(reason) => return refuse(reason),
        };
        let Some(hop) = shipping.into_iter().find(|destination| destination.name == via) else {
            return refuse(format!("'{via}' is not a destination of this primary"));
        };
        let through =
            if via == to { String::new() } else { format!(" (through which '{to}' receives)") };
        if !matches!(hop.phase, transport::Phase::Synchronized | transport::Phase::Streaming) {
            return refuse(format!(
                "'{via}'{through} is {:?}{}: it must be connected and caught up (SYNCHRONIZED or STREAMING)",
                hop.phase,
                hop.last_error.map_or(String::new(), |error| format!(" ({error})"))
            ));
        }
        self.gate.set(GateState::Quiesced { to: to.to_string() });
        let undo = |roles: &Roles, reason: String| {
            roles.gate.set(GateState::Open);
            roles.note_error(&reason);
            Err::<SwitchoverPrepared, _>(anyhow::Error::from(Refused(reason)))
        };
        if !self.gate.drained(DRAIN_WAIT).await {
            return undo(
                self,
                format!(
                    "writers did not finish their commits within {DRAIN_WAIT:?}; the switchover was abandoned"
                ),
            );
        }
        let db = running.db.clone();
        let (end, last_scn) = match blocking(move || {
            let scn = db.redo().flush()?;
            Ok((db.redo().durable_addr(), scn))
        })
        .await
        {
            Ok(flushed) => flushed,
            Err(error) => return undo(self, format!("making the redo durable: {error:#}")),
        };
        let deadline = Instant::now() + SWITCHOVER_SHIP_WAIT;
        loop {
            // Through a relay, the relay holding it durably is enough here: the target opens
            // only once it has received and applied it all (`complete_switchover`).
            let acknowledged = transport
                .status()
                .into_iter()
                .find(|destination| destination.name == via)
                .map(|destination| destination.acknowledged);
            if acknowledged.is_some_and(|acknowledged| acknowledged >= end) {
                break;
            }
            if Instant::now() >= deadline {
                return undo(
                    self,
                    format!(
                        "'{via}'{through} did not acknowledge the redo up to {end} within {SWITCHOVER_SHIP_WAIT:?}"
                    ),
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // What the new primary takes over of fast-start failover: the observer this one takes
        // decisions from, and the targets it named one to.
        let fast_start = running.fast_start.as_ref().map(|fast_start| fast_start.record());
        drop(running);
        // On disk before the role changes: a restart of this member in between must still
        // know the switchover it began (`redoguard switchover --to` completes it, or abort).
        // Its id: the target never completes a switchover it refused once (this member may
        // have taken its role back meanwhile), and a new prepare is a new switchover.
        let pending = PendingSwitchover {
            to: to.to_string(),
            id: record::new_id(),
            incarnation: control.incarnation.0,
        };
        if let Err(error) = self.write_pending_switchover(Some(&pending)) {
            return undo(self, format!("recording the switchover: {error:#}"));
        }
        let id = pending.id;
        self.notes.lock().switchover_to = Some(pending);
        let target = to.to_string();
        self.reopen(&format!("switchover to '{to}'"), move |roles| {
            let (redo_config, _) = roles.config.resolved();
            RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                control.role = Role::Standby;
                control.followed = false;
                Ok(())
            })?;
            Ok(())
        })
        .await?;
        self.note_change(format!(
            "became a standby of '{target}' (switchover {id}; redo ends at {end}, SCN {last_scn})"
        ));
        Ok(SwitchoverPrepared {
            id,
            end,
            last_scn,
            incarnation: control.incarnation.0,
            elapsed_ms: started.elapsed().as_millis() as u64,
            fast_start,
        })
    }

    /// Switchover, target's part: once it holds and has applied the old primary's end, it
    /// becomes the primary (same incarnation). A switchover it refused once (its id recorded,
    /// durably, before the refusal is answered) it refuses for ever: the old primary may have
    /// taken its role back since. A refusal it cannot record is answered as a failure, on which
    /// the broker leaves the old primary a standby.
    pub async fn complete_switchover(
        self: &Arc<Roles>,
        handover: Handover,
    ) -> anyhow::Result<Promoted> {
        self.require_members()?;
        self.refuse_if_far_sync()?;
        let (from, id) = (handover.from.clone(), handover.id);
        if id == 0 {
            return refuse(
                "switchover id 0 names no switchover (an old primary's prepare draws one)",
            );
        }
        let started = Instant::now();
        let transition = self.transition.lock().await;
        let refused = self.refused_switchovers().context("reading the refused switchovers")?;
        if refused.contains(&id) {
            let me = self.member_name();
            return refuse(format!(
                "switchover {id} from '{from}' was refused already; run `redoguard switchover --to {me}` again to start a new one"
            ));
        }
        // Not a refusal: this member may have been a standby again since (a later
        // switchover), and the old primary of this one must not take its role back.
        let completed =
            self.completed_switchovers().context("reading the completed switchovers")?;
        if completed.contains(&id) {
            anyhow::bail!(
                "switchover {id} from '{from}' was completed here already (this call is stale: a second broker's, or a record '{from}' kept of it): it is not completed again, and '{from}' must not take its role back on this answer"
            );
        }
        let promoted = match self.complete_switchover_locked(handover).await {
            Ok(promoted) => promoted,
            Err(error) if error.is::<Refused>() => {
                return match self.record_refused_switchover(id) {
                    Ok(()) => Err(error),
                    Err(record) => Err(anyhow::anyhow!(
                        "{error}; and recording switchover {id} as refused failed ({record:#}): '{from}' must not take its role back on this answer (run `redoguard show configuration`)"
                    )),
                };
            }
            Err(error) => return Err(error),
        };
        drop(transition);
        self.await_confirmation(promoted, &from, id, started).await
    }

    /// `complete_switchover`, under the transition lock, the id not refused before.
    async fn complete_switchover_locked(
        self: &Arc<Roles>,
        handover: Handover,
    ) -> anyhow::Result<Promoted> {
        let Handover { from, id, incarnation, end, last_scn, fast_start } = handover;
        let started = Instant::now();
        // Closed (a role change left it so; it opens again by itself), this member cannot tell
        // its role here: its control file may name a primary. Not a refusal, then.
        let running = self.running().map_err(|error| {
            anyhow::anyhow!(
                "{error}: '{from}' must not take its role back on this answer; run `redoguard switchover --to {}` again",
                self.member_name()
            )
        })?;
        let control = running.db.redo().control();
        if control.role == Role::Primary
            && control.fenced.is_none()
            && control.incarnation.0 == incarnation
        {
            // Not a refusal: on one the broker gives the old primary its role back, and this
            // member is its primary already (this switchover completed by another broker's
            // call, say, or another).
            anyhow::bail!(
                "'{}' is the primary of incarnation {incarnation} already: '{from}' must not take its role back (it follows '{}'); switchover {id} is not completed again",
                self.member_name(),
                self.member_name()
            );
        }
        if control.role != Role::Standby || control.fenced.is_some() {
            return refuse(format!("'{}' is not a standby that can take over", self.member_name()));
        }
        if control.incarnation.0 != incarnation {
            return refuse(format!(
                "'{from}' prepared switchover {id} in incarnation {incarnation}, and this standby is in incarnation {}",
                control.incarnation.0
            ));
        }
        self.refuse_unseen_hops(&from, &self.member_name())?;
        // A delayed standby applies everything before it takes over (and stays undelayed
        // until it restarts, should the switchover not complete).
        let delay = self.config.replication.standby_config().delay;
        let delay_released_s =
            transport::delay::release(running.db.redo(), running.db.applied_scn(), last_scn)
                .then(|| {
                    tracing::info!(delay = ?delay, "switchover: applying the redo the apply delay held back");
                    delay.as_secs_f64()
                });
        let wait = self.settings.replication().switchover_wait;
        let deadline = Instant::now() + wait;
        loop {
            let received = running.db.redo().standby_position().next;
            let applied = running.db.applied_scn();
            if received >= end && applied >= last_scn {
                break;
            }
            if Instant::now() >= deadline {
                return refuse(format!(
                    "within {wait:?} (replication.switchover_wait) this standby received redo up to {received} and applied SCN {applied}, not {end} and {last_scn}: it stays a standby"
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(running);
        // The old primary's fast-start failover record is this primary's from now on (or, not
        // handed over, every target counts as told of an observer: no other becomes active
        // before they all follow it). On disk before the control file names the role.
        let record = fast_start.unwrap_or_else(|| roles::fast_start::PrimaryRecord {
            active: None,
            announced_to: self
                .config
                .replication
                .failover_targets()
                .into_iter()
                .filter(|target| *target != self.member_name())
                .collect(),
        });
        let old_primary = from.clone();
        self.reopen(&format!("switchover from '{from}'"), move |roles| {
            // Neither written (a full disk, say): the control file still names a standby, this
            // member opens as one, and the refusal lets the old primary take its role back.
            let unchanged = |error: anyhow::Error| -> anyhow::Error {
                Refused(format!("cannot take over: {error:#}")).into()
            };
            let (redo_config, _) = roles.config.resolved();
            // Its receiver may have adopted a newer incarnation while it waited (it does not
            // take the transition lock): a failover made another member the primary. A
            // switchover of the old incarnation must not open this one as a second primary of
            // the new one, which no hello would fence (docs/roles.md, "a failover while a
            // switchover is half done"). The database is closed here: nothing adopts now.
            let now = control_now(roles).context("reading the control file")?;
            if now.incarnation.0 != incarnation {
                return Err(Refused(format!(
                    "switchover {id} from '{old_primary}' was prepared in incarnation {incarnation}, and this standby has followed incarnation {} since: it stays a standby",
                    now.incarnation
                ))
                .into());
            }
            // A relay (it forwards redo to a cascaded standby) that a failover target sealed:
            // a failover from this incarnation has begun, and its target may be the primary of
            // the next one already (it need not be a member this one ships to directly, so no
            // welcome would be missing).
            if let Some(reason) = sealed_against_own(&now) {
                return Err(Refused(format!(
                    "switchover {id} from '{old_primary}': {reason}: it stays a standby"
                ))
                .into());
            }
            // Or fenced meanwhile (a hello found it diverged).
            if now.role != Role::Standby || now.fenced.is_some() {
                return Err(Refused(format!(
                    "switchover {id} from '{old_primary}': this member is no longer a standby that can take over (fenced meanwhile?): it stays as it is"
                ))
                .into());
            }
            roles.record_completed_switchover(id).map_err(unchanged)?;
            roles.write_fast_start_record(&record).map_err(unchanged)?;
            RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                control.role = Role::Primary;
                // The old primary, its standby now, and every other standby could be failed
                // over to from now on: a restart must hear from them all (`confirmation`).
                control.followed = true;
                Ok(())
            })
            .map_err(|error| {
                // Unchanged only if the file still names a standby (the rename may have
                // happened before the error, a directory sync that failed).
                match RedoLog::read_control(&redo_config, roles.storage.as_ref()) {
                    Ok(Some(control)) if control.role == Role::Standby => unchanged(error.into()),
                    _ => anyhow::Error::from(error),
                }
            })?;
            // Not `promoted_here`: it opens unconfirmed, as a restarted primary does. A
            // failover may have come after the prepare (the old primary a standby, none open:
            // the broker's failover needs no `--force`), and this member, cut off from its
            // target, cannot tell; it takes writes once every enabled destination has welcomed
            // it in this incarnation, and one that follows a newer one fences it instead
            // (docs/roles.md, "A failover while a switchover is half done").
            Ok(())
        })
        .await?;
        self.notes.lock().switchover_to = None;
        let running = self.running()?;
        self.note_change(format!(
            "became the primary (switchover {id} from '{from}'); it takes writes once every member it ships to has welcomed it"
        ));
        Ok(Promoted {
            member: self.member_name(),
            incarnation: control.incarnation.0,
            first_scn: running.db.redo().next_scn(),
            old_primary_scn: Some(last_scn),
            old_primary_durable_scn: Some(last_scn),
            lost_scns_at_most: Some(0),
            unapplied_scns: 0,
            delay_released_s,
            relay_tail: None,
            awaiting: Vec::new(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// A switchover's target, open and unconfirmed (its transition lock released: a hello's
    /// refusal naming a newer incarnation takes it to fence this member): waits, briefly, for
    /// its destinations' welcomes, and says whom it still waits for.
    async fn await_confirmation(
        &self,
        mut promoted: Promoted,
        from: &str,
        id: u64,
        started: Instant,
    ) -> anyhow::Result<Promoted> {
        let gate = self
            .gate
            .wait_while(|state| matches!(state, GateState::Unconfirmed { .. }), CONFIRM_WAIT)
            .await;
        match gate {
            GateState::Unconfirmed { members } => promoted.awaiting = members,
            GateState::Fenced { incarnation: newer, primary, .. } => anyhow::bail!(
                "'{}' took over (switchover {id} from '{from}', incarnation {}), then learned of incarnation {newer} of '{primary}': a failover came after the prepare. It takes no writes (fenced): make it a standby of '{primary}' with `redoguard reinstate {}`; '{from}' must not take its role back",
                self.member_name(),
                promoted.incarnation,
                self.member_name()
            ),
            _ => {}
        }
        promoted.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(promoted)
    }

    /// Refuses a switchover from `from` to `to` whose target, by the routes, would not see a
    /// failover that came while it was half done (`roles::switchover`): a member `from` may
    /// ship to directly that `to` would not wait for as it opens (behind a relay of its routes,
    /// deferred, or only an alternate).
    fn refuse_unseen_hops(&self, from: &str, to: &str) -> anyhow::Result<()> {
        let replication = self.settings.replication();
        // P's every possible first hop (an alternate it may have shipped to since its far sync
        // was lost, a destination deferred after it shipped to it), against those T waits for.
        let (primary_hops, target_hops) =
            (replication.hops_of(from), replication.enabled_hops_of(to));
        let unseen = roles::switchover::unseen_hops(&primary_hops, to, &target_hops);
        if unseen.is_empty() {
            return Ok(());
        }
        refuse(format!(
            "'{from}' ships directly to {}, which '{to}' would not ship to directly (it would reach it only through a relay, or it is deferred or an alternate there): a failover to it while the switchover is half done would go unseen by '{to}' as it opens. Switch over in steps whose routes keep the first hops, or give '{to}' a route to each directly (docs/roles.md, \"Switchover and routes\")",
            unseen.iter().map(|member| format!("'{member}'")).collect::<Vec<_>>().join(", ")
        ))
    }

    /// Gives the role back to an old primary whose target refused to take it: switchover `id`
    /// (the broker names it; `None`, by hand, whichever is pending).
    ///
    /// It opens unconfirmed (`followed`): while it was a standby, a failover may have made
    /// another member the primary (none was open: the broker's failover needs no `--force`),
    /// so it takes writes once every destination has welcomed it again, as after a restart.
    /// Before, it opened at once, and restarted open, `followed` cleared by the prepare (found
    /// by `roles/tests/model_restart.rs`).
    pub async fn abort_switchover(self: &Arc<Roles>, id: Option<u64>) -> anyhow::Result<()> {
        let _transition = self.transition.lock().await;
        let running = self.running()?;
        let control = running.db.redo().control();
        let pending = self.notes.lock().switchover_to.clone();
        let Some(PendingSwitchover { to: target, id: pending_id, incarnation: prepared_in }) =
            pending
        else {
            return refuse("no switchover is pending on this member");
        };
        // A broker that aborts another switchover than the pending one (its own, refused,
        // while a later one was prepared) must not give the role back: the later one may be
        // completed (found by `roles/tests/model_restart.rs`).
        if let Some(id) = id
            && id != pending_id
        {
            return refuse(format!(
                "switchover {pending_id} to '{target}' is pending on this member, not switchover {id}: it is not aborted"
            ));
        }
        let id = pending_id;
        if control.role != Role::Standby || control.fenced.is_some() {
            return refuse("this member is not the old primary of a pending switchover");
        }
        // A failover came after it (see `void_switchover`): the role to give back is no longer
        // this member's. The record is void: removed, no role given back.
        if let Some(reason) = void_switchover(&control, prepared_in) {
            drop(running);
            self.write_pending_switchover(None).context("removing the void switchover record")?;
            self.notes.lock().switchover_to = None;
            return refuse(void_removed(id, &target, prepared_in, &reason));
        }
        drop(running);
        let void_target = target.clone();
        self.reopen(&format!("switchover to '{target}' aborted"), move |roles| {
            let (redo_config, _) = roles.config.resolved();
            // Read again with the database closed: until it closed, its receiver (which does
            // not take the transition lock) took hellos and seals. A failover's new incarnation
            // adopted, or a seal, since the check above makes the record void here too (found
            // by `roles/tests/model_restart.rs` with routes); a switchover completed meanwhile
            // (this member followed its target) leaves nothing to abort.
            if roles.notes.lock().switchover_to.as_ref().is_none_or(|pending| pending.id != id) {
                return Err(Refused(format!(
                    "switchover {id} to '{void_target}' completed meanwhile: this member follows its target; no role is given back"
                ))
                .into());
            }
            let now = control_now(roles).context("reading the control file")?;
            if now.role != Role::Standby || now.fenced.is_some() {
                return Err(Refused(format!(
                    "switchover {id} to '{void_target}': this member is no longer a standby that can take its role back (fenced meanwhile?); no role is given back"
                ))
                .into());
            }
            if let Some(reason) = void_switchover(&now, prepared_in) {
                roles.write_pending_switchover(None)?;
                roles.notes.lock().switchover_to = None;
                return Err(Refused(void_removed(id, &void_target, prepared_in, &reason)).into());
            }
            roles.write_pending_switchover(None)?;
            RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                control.role = Role::Primary;
                // Its standbys hold its database (the target, at least): a restart, and this
                // open, hear from them all first (`confirmation`).
                control.followed = true;
                Ok(())
            })?;
            Ok(())
        })
        .await?;
        self.notes.lock().switchover_to = None;
        self.note_change(format!("the primary again (switchover {id} to '{target}' aborted)"));
        Ok(())
    }

    /// A standby that began a switchover to `to` follows `to` now: the switchover is complete.
    ///
    /// Under the role-change lock, skipped while a change runs (asked again 100 ms later):
    /// every other writer of the pending record holds it, and an abort decides on that record
    /// in its closed step. Without it, a completion noted between the abort's check and its
    /// write gave the old primary its role back beside its target.
    pub(crate) fn note_switchover_complete(&self) {
        let Ok(_transition) = self.transition.try_lock() else { return };
        let Some(to) = self.notes.lock().switchover_to.clone().map(|pending| pending.to) else {
            return;
        };
        let Some(running) = self.current() else { return };
        let follows = running
            .receiver
            .as_ref()
            .is_some_and(|receiver| receiver.primary() == (true, Some(to.clone())));
        if follows && running.role() == Role::Standby {
            match self.write_pending_switchover(None) {
                Ok(()) => {
                    self.notes.lock().switchover_to = None;
                    tracing::info!(primary = %to, "switchover complete: this standby follows its new primary");
                }
                Err(error) => {
                    tracing::error!(%error, "cannot record that the switchover is complete")
                }
            }
        }
    }
}
