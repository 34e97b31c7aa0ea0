//! Changes of role, as this member takes part in them (the `redoguard` commands drive them
//! across members; `docs/roles.md` has the protocol and why it never makes two primaries):
//!
//! - switchover, on the old primary (`prepare_switchover`): close the write gate, wait for the
//!   writers past it, make everything durable, wait until the target has it all, then become a
//!   standby of the target (control file first). On the target (`complete_switchover`): wait
//!   until it has received and applied that end, then become the primary, same incarnation.
//!   `abort_switchover` gives the old primary its role back when the target refused.
//! - failover, on a standby (`failover`): stop receiving, apply what was received (or not,
//!   `immediate`), and open as the primary of a new incarnation that begins right after the
//!   redo it holds (its history records where).
//! - fence, on a primary that learns of a newer incarnation: it takes no write again (durably)
//!   and stops shipping redo.
//! - reinstate, on a fenced member: set its redo past the failover point aside (with the
//!   records, for the DBA), rewind to the branch (or rebuild from a copy when its data files
//!   already hold changes past it), and become a standby of the new primary.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use redo::{Fence, Incarnation, LogSeq, RedoAddr, RedoLog, Role, Scn};
use roles::Branch;
use transport::{PrimaryPort, RedoPort};

use super::api::{Promoted, Reinstated, SetAside, SwitchoverPrepared};
use super::gate::GateState;
use super::{Roles, Running};

/// How long the old primary waits for the target to have everything it wrote.
const SWITCHOVER_SHIP_WAIT: Duration = Duration::from_secs(30);
/// How long writers already past the gate may take to finish their commits.
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// How long a target waits to have received and applied the old primary's end.
const CATCH_UP_WAIT: Duration = Duration::from_secs(60);
/// In the data directory: the member an old primary began a switchover to, until it follows
/// it (or the switchover is aborted).
const PENDING_SWITCHOVER: &str = "switchover.pending";
/// How often a member whose database a role change left closed tries to open it again.
const REOPEN_RETRY: Duration = Duration::from_secs(1);

/// A refusal: nothing was changed, and this says why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn refuse<T>(reason: impl Into<String>) -> anyhow::Result<T> {
    Err(Refused(reason.into()).into())
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work).await?
}

impl Roles {
    fn running(&self) -> anyhow::Result<Arc<Running>> {
        self.current().ok_or_else(|| {
            Refused("the database is not open (a role change failed or is under way)".into()).into()
        })
    }

    pub(crate) fn member_name(&self) -> String {
        self.config.replication.member.clone().unwrap_or_default()
    }

    fn require_members(&self) -> anyhow::Result<()> {
        if !self.config.replication.has_members() {
            return refuse(
                "this server runs the single-role form of the configuration: name its members ([[replication.members]]) to change roles",
            );
        }
        Ok(())
    }

    /// Replaces what runs: closes the database, lets `change` rewrite it while it is closed,
    /// and opens it again in the role its control file then names. Requests wait meanwhile.
    async fn reopen<T: Send + 'static>(
        self: &Arc<Roles>,
        reason: &str,
        change: impl FnOnce(&Roles) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        self.reopen_with(reason, true, change).await
    }

    /// As `reopen`; without `checkpoint` the database closes without its final checkpoint
    /// (the open replays the redo after the last one instead: quicker when a failover waits).
    async fn reopen_with<T: Send + 'static>(
        self: &Arc<Roles>,
        reason: &str,
        checkpoint: bool,
        change: impl FnOnce(&Roles) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        self.gate.set(GateState::Changing { reason: reason.to_string() });
        let running = self.current.write().take();
        if let Some(listener) = &self.listener {
            listener.set_port(Arc::new(transport::listener::Unavailable {
                refusals: self.refusals.clone(),
                info: super::placeholder_info(&self.member_name()),
                reason: format!("{reason}: retry"),
            }));
        }
        let roles = self.clone();
        let reason_owned = reason.to_string();
        let outcome = blocking(move || {
            let closing = Instant::now();
            if let Some(running) = running {
                if let Some(transport) = &running.transport {
                    running.db.redo().set_shipper(None);
                    transport.stop();
                }
                // A stop that failed (its final checkpoint on a full disk, say) still closed
                // everything: what was made durable is in the redo, which the open replays,
                // and what was not was never acknowledged. The change goes on.
                if let Err(error) = running.stop_with(checkpoint) {
                    tracing::warn!(
                        error = format!("{error:#}"),
                        change = reason_owned,
                        "the database stopped with an error; it opens from its redo"
                    );
                }
                drop(running);
            }
            let closed_ms = closing.elapsed().as_millis() as u64;
            let changed = change(&roles);
            let opening = Instant::now();
            let opened = roles.open_blocking();
            tracing::info!(
                change = reason_owned,
                closed_ms,
                opened_ms = opening.elapsed().as_millis() as u64,
                "role change: the database closed and opened again"
            );
            Ok((changed, opened))
        })
        .await;
        self.refusals.forget_last();
        match outcome {
            Ok((changed, Ok((running, gate)))) => {
                self.install(Some(Arc::new(running)));
                self.gate.set(gate);
                changed
            }
            Ok((changed, Err(error))) => {
                let reason = format!("cannot open the database after '{reason}': {error:#}");
                self.left_closed(&reason);
                // A change refused changed nothing on disk: the refusal is the answer (the
                // database opens again in its old role by itself), not the failed open.
                match changed {
                    Err(refused) if refused.is::<Refused>() => {
                        Err(Refused(format!("{refused:#}; and {reason}")).into())
                    }
                    _ => Err(anyhow!(reason)),
                }
            }
            Err(error) => {
                let reason = format!("cannot open the database after '{reason}': {error:#}");
                self.left_closed(&reason);
                Err(anyhow!(reason))
            }
        }
    }

    fn left_closed(self: &Arc<Roles>, reason: &str) {
        tracing::error!(reason, "role change left the database closed");
        self.note_error(reason);
        self.gate.set(GateState::Unavailable { reason: reason.to_string() });
        self.retry_open();
    }

    /// After a role change left the database closed (it could not open: a full disk, say),
    /// tries again every [`REOPEN_RETRY`], in the role its control file names, until it opens
    /// or another role change has come. Without it a member whose disk filled during a
    /// switchover would stay closed until restarted by hand, and the configuration without a
    /// primary.
    fn retry_open(self: &Arc<Roles>) {
        let roles = self.clone();
        tokio::spawn(async move {
            for attempt in 1u64.. {
                tokio::time::sleep(REOPEN_RETRY).await;
                let _transition = roles.transition.lock().await;
                if roles.current().is_some()
                    || !matches!(roles.gate.state(), GateState::Unavailable { .. })
                {
                    return;
                }
                let opener = roles.clone();
                match tokio::task::spawn_blocking(move || opener.open_blocking()).await {
                    Ok(Ok((running, gate))) => {
                        roles.refusals.forget_last();
                        roles.install(Some(Arc::new(running)));
                        roles.gate.set(gate);
                        tracing::warn!(
                            attempt,
                            "the database opened again after a role change left it closed"
                        );
                        roles.note_change(format!(
                            "opened again (attempt {attempt}) after a role change left it closed"
                        ));
                        return;
                    }
                    Ok(Err(error)) => {
                        // Once, then every minute: the reason is in the status meanwhile.
                        if attempt == 1 || attempt % 60 == 0 {
                            tracing::error!(
                                attempt,
                                error = format!("{error:#}"),
                                "the database still cannot open; retrying every {REOPEN_RETRY:?}"
                            );
                        }
                    }
                    Err(_) => return,
                }
            }
        });
    }

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
        if to == self.member_name() || self.config.replication.member_named(to).is_none() {
            return refuse(format!("'{to}' is not another member of this configuration"));
        }
        let Some(transport) = &running.transport else {
            return refuse("this primary ships redo to no standby");
        };
        let Some(target) =
            transport.status().into_iter().find(|destination| destination.name == to)
        else {
            return refuse(format!("'{to}' is not a destination of this primary"));
        };
        if !matches!(target.phase, transport::Phase::Synchronized | transport::Phase::Streaming) {
            return refuse(format!(
                "'{to}' is {:?}{}: it must be connected and caught up (SYNCHRONIZED or STREAMING)",
                target.phase,
                target.last_error.map_or(String::new(), |error| format!(" ({error})"))
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
            let acknowledged = transport
                .status()
                .into_iter()
                .find(|destination| destination.name == to)
                .map(|destination| destination.acknowledged);
            if acknowledged.is_some_and(|acknowledged| acknowledged >= end) {
                break;
            }
            if Instant::now() >= deadline {
                return undo(
                    self,
                    format!(
                        "'{to}' did not acknowledge the redo up to {end} within {SWITCHOVER_SHIP_WAIT:?}"
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
        if let Err(error) = self.write_pending_switchover(Some(to)) {
            return undo(self, format!("recording the switchover: {error:#}"));
        }
        self.notes.lock().switchover_to = Some(to.to_string());
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
            "became a standby of '{target}' (switchover; redo ends at {end}, SCN {last_scn})"
        ));
        Ok(SwitchoverPrepared {
            end,
            last_scn,
            incarnation: control.incarnation.0,
            elapsed_ms: started.elapsed().as_millis() as u64,
            fast_start,
        })
    }

    /// Switchover, target's part: once it holds and has applied the old primary's end, it
    /// becomes the primary (same incarnation).
    pub async fn complete_switchover(
        self: &Arc<Roles>,
        from: &str,
        end: RedoAddr,
        last_scn: Scn,
        fast_start: Option<roles::fast_start::PrimaryRecord>,
    ) -> anyhow::Result<Promoted> {
        self.require_members()?;
        self.refuse_if_far_sync()?;
        let _transition = self.transition.lock().await;
        let started = Instant::now();
        let running = self.running()?;
        let control = running.db.redo().control();
        if control.role != Role::Standby || control.fenced.is_some() {
            return refuse(format!("'{}' is not a standby that can take over", self.member_name()));
        }
        // A delayed standby applies everything before it takes over (and stays undelayed
        // until it restarts, should the switchover not complete).
        let delay = self.config.replication.standby_config().delay;
        let delay_released_s =
            transport::delay::release(running.db.redo(), running.db.applied_scn(), last_scn)
                .then(|| {
                    tracing::info!(delay = ?delay, "switchover: applying the redo the apply delay held back");
                    delay.as_secs_f64()
                });
        let deadline = Instant::now() + CATCH_UP_WAIT;
        loop {
            let received = running.db.redo().standby_position().next;
            let applied = running.db.applied_scn();
            if received >= end && applied >= last_scn {
                break;
            }
            if Instant::now() >= deadline {
                return refuse(format!(
                    "within {CATCH_UP_WAIT:?} this standby received redo up to {received} and applied SCN {applied}, not {end} and {last_scn}: it stays a standby"
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
        self.reopen(&format!("switchover from '{from}'"), move |roles| {
            // Neither written (a full disk, say): the control file still names a standby, this
            // member opens as one, and the refusal lets the old primary take its role back.
            let unchanged = |error: anyhow::Error| -> anyhow::Error {
                Refused(format!("cannot take over: {error:#}")).into()
            };
            roles.write_fast_start_record(&record).map_err(unchanged)?;
            let (redo_config, _) = roles.config.resolved();
            RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                control.role = Role::Primary;
                control.followed = false;
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
            Ok(())
        })
        .await?;
        self.notes.lock().switchover_to = None;
        let running = self.running()?;
        self.note_change(format!("became the primary (switchover from '{from}')"));
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
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Gives the role back to an old primary whose target refused to take it.
    pub async fn abort_switchover(self: &Arc<Roles>) -> anyhow::Result<()> {
        let _transition = self.transition.lock().await;
        let running = self.running()?;
        let control = running.db.redo().control();
        let pending = self.notes.lock().switchover_to.clone();
        let Some(target) = pending else {
            return refuse("no switchover is pending on this member");
        };
        if control.role != Role::Standby || control.fenced.is_some() {
            return refuse("this member is not the old primary of a pending switchover");
        }
        drop(running);
        self.reopen(&format!("switchover to '{target}' aborted"), |roles| {
            roles.write_pending_switchover(None)?;
            let (redo_config, _) = roles.config.resolved();
            RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                control.role = Role::Primary;
                Ok(())
            })?;
            Ok(())
        })
        .await?;
        self.notes.lock().switchover_to = None;
        self.note_change(format!("the primary again (switchover to '{target}' aborted)"));
        Ok(())
    }

    /// Failover: this standby becomes the primary of a new incarnation.
    pub async fn failover(
        self: &Arc<Roles>,
        immediate: bool,
        force: bool,
    ) -> anyhow::Result<Promoted> {
        let _transition = self.transition.lock().await;
        // `force` also opens it without its relay's tail, if that cannot be had.
        self.failover_holding(immediate, force, force).await
    }

    /// A far sync (`kind = "far_sync"`) relays redo and never becomes a primary, whoever asks
    /// (the broker and the observer do not; a request that reaches it all the same is refused).
    fn refuse_if_far_sync(&self) -> anyhow::Result<()> {
        let replication = self.settings.replication();
        let name = self.member_name();
        if replication.is_far_sync(&name) {
            return refuse(format!(
                "'{name}' is a far sync: it relays redo and never becomes a primary"
            ));
        }
        Ok(())
    }

    /// `failover`, by a caller that holds the role-change lock (`transition`). `force`: even
    /// with the primary connected; `without_tail`: even if the tail held by the member it
    /// receives from (a far sync) cannot be had.
    pub(crate) async fn failover_holding(
        self: &Arc<Roles>,
        immediate: bool,
        force: bool,
        without_tail: bool,
    ) -> anyhow::Result<Promoted> {
        self.require_members()?;
        self.refuse_if_far_sync()?;
        let started = Instant::now();
        let running = self.running()?;
        let control = running.db.redo().control();
        if control.role != Role::Standby {
            return refuse(format!("'{}' is the primary already", self.member_name()));
        }
        if let Some(fence) = &control.fenced {
            return refuse(format!(
                "this standby holds redo past the point where incarnation {} of '{}' began: it cannot become primary; reinstate it",
                fence.incarnation, fence.by
            ));
        }
        let Some(receiver) = running.receiver.clone() else {
            return refuse("this standby has no receiver");
        };
        let heard = receiver.status();
        // (A member forwarding the primary's redo is not the primary: a cascaded standby sees
        // its primary only through it, and the broker's own check that the primary is gone
        // stands.)
        if heard.primary_connected && !force {
            return refuse(format!(
                "the primary{} is connected to this standby: it is not lost; use switchover (or failover --force, which fences it)",
                heard.primary_member.as_ref().map_or(String::new(), |name| format!(" '{name}'"))
            ));
        }
        // Behind a far sync (or a cascading standby): first the tail it holds, the relay
        // sealed so that it takes no more of the old primary (`relay_tail`).
        let tail = self.take_relay_tail(&receiver, &heard, control.incarnation.0).await;
        if let super::relay_tail::RelayTail::Missing { relay, reason } = &tail
            && !without_tail
        {
            return refuse(format!(
                "the tail held by '{relay}', which this standby receives from, cannot be had: {reason}; use failover --force to open with what this standby holds (commits the old primary acknowledged through '{relay}' may be lost)"
            ));
        }
        // No more redo from anyone: what this standby holds now is what the new incarnation
        // begins after.
        receiver.stop(Duration::from_secs(5));
        // A delayed standby applies what its delay still held back before it opens; lifted
        // first, so that the branch point below reads every record received.
        let delay = self.config.replication.standby_config().delay;
        let held_back = running.db.redo().apply_horizon() != Scn(u64::MAX);
        let applied_before = running.db.applied_scn();
        running.db.redo().set_apply_horizon(Scn(u64::MAX));
        let db = running.db.clone();
        let branch_of = blocking(move || {
            let durable = db.redo().sync_received()?;
            let _ = durable;
            branch_point(db.redo())
        });
        let (first_seq, first_scn, prev_end_offset, prev_closed_here) = branch_of.await?;
        let received_scn = first_scn.prev();
        let unapplied_scns = received_scn.0.saturating_sub(applied_before.0);
        let held_back = held_back && unapplied_scns > 0;
        let delay_released_s = held_back.then(|| {
            tracing::info!(delay = ?delay, unapplied_scns, "failover: applying the redo the apply delay held back before opening as the primary");
            delay.as_secs_f64()
        });
        if !immediate {
            let deadline = Instant::now() + CATCH_UP_WAIT;
            while running.db.applied_scn() < received_scn {
                if Instant::now() >= deadline {
                    return refuse(format!(
                        "apply reached SCN {} of {received_scn} within {CATCH_UP_WAIT:?}; use failover --immediate to open without waiting for it (the redo is replayed as the database opens)",
                        running.db.applied_scn()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let incarnation = Incarnation(control.incarnation.0 + 1);
        let branch = Branch {
            incarnation,
            first_seq,
            first_scn,
            prev_end_offset,
            prev_closed_here,
            created_us: redo::types::now_unix_us(),
            member: self.member_name(),
        };
        drop(running);
        let history = self.history.clone();
        // Closed without a checkpoint: the new primary's open replays what it received, which
        // is quicker than writing it to the data files first while no one can write.
        self.reopen_with("failover", false, move |roles| {
            let (redo_config, _) = roles.config.resolved();
            // A new incarnation, a new reign: it has named no observer to anyone yet.
            roles.write_fast_start_record(&roles::fast_start::PrimaryRecord::default())?;
            let mut updated = history.lock().clone();
            updated.push(branch).map_err(|reason| anyhow!(reason))?;
            // The history first, then the control file (the commit point): a crash between
            // leaves a record the control file does not name, dropped at the next open.
            updated.save(roles.storage.as_ref(), &redo_config.dir)?;
            RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                control.role = Role::Primary;
                control.incarnation = incarnation;
                control.followed = false;
                control.fenced = None;
                Ok(())
            })?;
            Ok(())
        })
        .await?;
        let running = self.running()?;
        let next = running.db.redo().next_scn();
        if next != first_scn {
            tracing::error!(expected = %first_scn, opened_at = %next, "failover: the new primary's redo does not end where the branch says");
        }
        let old_primary_scn =
            (heard.primary_current_scn.0 > 0).then_some(heard.primary_current_scn);
        let old_primary_durable_scn =
            (heard.primary_durable_scn.0 > 0).then_some(heard.primary_durable_scn);
        let lost = old_primary_scn.map(|scn| scn.0.saturating_sub(received_scn.0));
        self.note_change(format!(
            "became the primary of incarnation {incarnation} (failover{}; first SCN {first_scn}, log {first_seq})",
            if immediate { ", immediate" } else { "" }
        ));
        Ok(Promoted {
            member: self.member_name(),
            incarnation: incarnation.0,
            first_scn,
            old_primary_scn,
            old_primary_durable_scn,
            lost_scns_at_most: lost,
            unapplied_scns,
            delay_released_s,
            relay_tail: tail.note(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// This primary has been failed over: it takes no write again until it is reinstated,
    /// and ships no more redo.
    pub async fn fence(
        self: &Arc<Roles>,
        incarnation: u32,
        primary: &str,
        reason: &str,
    ) -> anyhow::Result<()> {
        let _transition = self.transition.lock().await;
        let running = self.running()?;
        let control = running.db.redo().control();
        if control.role != Role::Primary {
            // (The news reached it after it became a standby: a reinstate, a switchover.)
            return refuse(format!(
                "'{}' is a standby now: there is no primary to fence",
                self.member_name()
            ));
        }
        if Incarnation(incarnation) <= control.incarnation {
            return refuse(format!(
                "incarnation {incarnation} is not newer than this database's {}",
                control.incarnation
            ));
        }
        if control.fenced.as_ref().is_some_and(|fence| fence.incarnation.0 >= incarnation) {
            return Ok(());
        }
        self.gate.set(GateState::Fenced {
            incarnation,
            primary: primary.to_string(),
            primary_resp: self
                .config
                .replication
                .member_named(primary)
                .map(|member| member.resp.clone()),
        });
        // Its data files stay where they are: a reinstate may rewind it to the failover point.
        running.db.suspend_checkpoints();
        let db = running.db.clone();
        let fence = Fence { incarnation: Incarnation(incarnation), by: primary.to_string() };
        blocking(move || Ok(db.redo().fence(fence)?)).await?;
        tracing::error!(
            primary,
            incarnation,
            reason,
            "FENCED: another member is the primary in a newer incarnation; this database takes no write until it is reinstated"
        );
        if let Some(transport) = &running.transport {
            running.db.redo().set_shipper(None);
            let running = running.clone();
            blocking(move || {
                if let Some(transport) = &running.transport {
                    transport.stop();
                }
                Ok(())
            })
            .await?;
            let _ = transport;
        }
        if let Some(listener) = &self.listener {
            let events = self.events.clone();
            listener.set_port(Arc::new(PrimaryPort {
                member: self.member_name(),
                incarnation: control.incarnation,
                role_info: self.role_info_source(&running.db),
                events: Arc::new(move |event| {
                    let _ = events.send(event);
                }),
                refusals: self.refusals.clone(),
                copy: None,
            }) as Arc<dyn RedoPort>);
        }
        self.note_change(format!(
            "fenced: '{primary}' is the primary of incarnation {incarnation} ({reason})"
        ));
        Ok(())
    }

    /// Reinstate: this fenced member becomes a standby of `primary`.
    pub async fn reinstate(self: &Arc<Roles>, primary: &str) -> anyhow::Result<Reinstated> {
        self.require_members()?;
        let _transition = self.transition.lock().await;
        let started = Instant::now();
        let running = self.running()?;
        let control = running.db.redo().control();
        let Some(fence) = control.fenced.clone() else {
            return match control.role {
                Role::Primary => refuse(format!(
                    "'{}' is a primary that has not been failed over: there is nothing to reinstate (to make it a standby, switch over)",
                    self.member_name()
                )),
                Role::Standby => refuse(format!(
                    "'{}' is a standby on its primary's branch: there is nothing to reinstate",
                    self.member_name()
                )),
            };
        };
        let Some(member) = self.config.replication.member_named(primary).cloned() else {
            return refuse(format!("'{primary}' is not a member of this configuration"));
        };
        let address = member.redo.clone();
        let asking = self.member_name();
        let (name, tls) = (member.name.clone(), self.redo_tls.clone());
        let info = blocking(move || {
            transport::probe(&address, &name, &asking, tls.as_deref(), Duration::from_secs(5))
                .map_err(|reason| anyhow!(reason))
        })
        .await
        .map_err(|error| Refused(format!("'{primary}' cannot be reached: {error:#}")))?;
        if info.role != proto::WireRole::Primary || info.fenced_incarnation != 0 {
            return refuse(format!(
                "'{primary}' is not an open primary (it says it is a {:?}{})",
                info.role,
                if info.fenced_incarnation != 0 { ", fenced" } else { "" }
            ));
        }
        if info.database_id != control.database_id.0 {
            return refuse(format!("'{primary}' is the primary of another database"));
        }
        if Incarnation(info.incarnation) < fence.incarnation
            || Incarnation(info.incarnation) <= control.incarnation
        {
            return refuse(format!(
                "'{primary}' is in incarnation {}, not in one newer than this database's {}",
                info.incarnation, control.incarnation
            ));
        }
        let branch = info
            .history
            .iter()
            .map(Branch::from_wire)
            .find(|branch| branch.incarnation.0 == control.incarnation.0 + 1);
        let aside = self.aside_dir(&fence)?;
        let db = running.db.clone();
        let checkpoint = running.db.checkpoint_scn();
        let (first_scn, keep_before) = match &branch {
            Some(branch) => (
                branch.first_scn,
                if branch.prev_closed_here {
                    branch.first_seq.prev_seq()
                } else {
                    branch.first_seq
                },
            ),
            None => (Scn(0), LogSeq(1)),
        };
        // The records past the failover point, for the DBA, before anything is changed (all of
        // them: a delayed apply's horizon does not hide any).
        running.db.redo().set_apply_horizon(Scn(u64::MAX));
        let tail_dir = aside.clone();
        let diverged = blocking(move || super::divergent::write(&db, first_scn, &tail_dir)).await?;
        if let Some(unreadable) = &diverged.unreadable {
            tracing::error!(unreadable, dir = %aside.display(), "reinstate: not all of the divergent tail could be read");
        }
        let rewind = branch.is_some() && checkpoint < first_scn;
        drop(running);
        let primary_name = primary.to_string();
        let redo_address = member.redo.clone();
        let aside_for_change = aside.clone();
        let copy_from = primary_name.clone();
        let logs = self
            .reopen(&format!("reinstate as a standby of '{primary}'"), move |roles| {
                let (redo_config, db_config) = roles.config.resolved();
                if rewind {
                    let set = redo::rewind::set_aside_logs(
                        &redo_config,
                        roles.storage.as_ref(),
                        keep_before,
                        &aside_for_change,
                    )?;
                    RedoLog::rewrite_control(&redo_config, roles.storage.as_ref(), |control| {
                        control.role = Role::Standby;
                        control.fenced = None;
                        control.followed = false;
                        Ok(())
                    })?;
                    Ok(set.logs)
                } else {
                    // Its data files already hold changes past the branch: they cannot be
                    // rewound. Everything is set aside and the database is rebuilt from a copy
                    // of the new primary's.
                    let set = redo::rewind::set_aside_logs(
                        &redo_config,
                        roles.storage.as_ref(),
                        LogSeq(1),
                        &aside_for_change,
                    )?;
                    super::copy::set_aside_database(
                        roles.storage.as_ref(),
                        &redo_config,
                        &db_config,
                        &aside_for_change,
                    )?;
                    super::copy::copy_from_primary(
                        &roles.config,
                        &roles.storage,
                        &redo_address,
                        &copy_from,
                        &roles.member_name(),
                    )?;
                    Ok(set.logs)
                }
            })
            .await?;
        let incarnation = info.incarnation;
        self.note_change(format!(
            "reinstated as a standby of '{primary_name}' (incarnation {incarnation}){}",
            if rewind { String::new() } else { ", rebuilt from a copy".to_string() }
        ));
        Ok(Reinstated {
            member: self.member_name(),
            primary: primary_name,
            incarnation,
            set_aside: SetAside {
                dir: aside.display().to_string(),
                logs,
                first_scn: diverged.range.map(|(first, _, _)| first),
                last_scn: diverged.range.map(|(_, last, _)| last),
                records: diverged.range.map_or(0, |(_, _, count)| count),
                unreadable: diverged.unreadable,
            },
            rebuilt: !rewind,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Replaces this member's fast-start failover record (it is read when the database opens
    /// as a primary).
    pub(crate) fn write_fast_start_record(
        &self,
        record: &roles::fast_start::PrimaryRecord,
    ) -> anyhow::Result<()> {
        let (redo_config, _) = self.config.resolved();
        let path = redo_config.dir.join(transport::fast_start::RECORD_FILE);
        redo::storage::replace_durably(self.storage.as_ref(), &path, &record.encode())
            .with_context(|| format!("writing {}", path.display()))
    }

    fn pending_switchover_path(&self) -> PathBuf {
        self.config.server.data_dir.join(PENDING_SWITCHOVER)
    }

    /// Records (durably) the switchover this old primary began, or that there is none.
    pub(crate) fn write_pending_switchover(&self, to: Option<&str>) -> anyhow::Result<()> {
        let path = self.pending_switchover_path();
        match to {
            Some(to) => redo::storage::replace_durably(
                self.storage.as_ref(),
                &path,
                format!("{to}\n").as_bytes(),
            )
            .with_context(|| format!("writing {}", path.display())),
            None if self.storage.exists(&path) => {
                self.storage
                    .remove(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
                let dir = path.parent().unwrap_or(std::path::Path::new("."));
                self.storage.sync_dir(dir).with_context(|| format!("syncing {}", dir.display()))
            }
            None => Ok(()),
        }
    }

    /// The switchover this member began as the old primary and has not seen completed, if any.
    pub(crate) fn load_pending_switchover(&self) -> anyhow::Result<Option<String>> {
        let path = self.pending_switchover_path();
        if !self.storage.exists(&path) {
            return Ok(None);
        }
        let bytes = redo::storage::read_all(self.storage.as_ref(), &path)
            .with_context(|| format!("reading {}", path.display()))?;
        let to = String::from_utf8_lossy(&bytes).trim().to_string();
        if self.config.replication.member_named(&to).is_none() {
            anyhow::bail!(
                "{}: '{to}' is not a member of this configuration (it records the target of a switchover this member began; remove it if none is under way)",
                path.display()
            );
        }
        Ok(Some(to))
    }

    /// A standby that began a switchover to `to` follows `to` now: the switchover is complete.
    pub(crate) fn note_switchover_complete(&self) {
        let Some(to) = self.notes.lock().switchover_to.clone() else { return };
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

    /// A new directory for what a reinstate sets aside.
    fn aside_dir(&self, fence: &Fence) -> anyhow::Result<PathBuf> {
        let stamp = redo::types::now_unix_us() / 1_000_000;
        let dir = self
            .config
            .server
            .data_dir
            .join("diverged")
            .join(format!("{stamp}-before-incarnation-{}", fence.incarnation));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(dir)
    }
}

/// Where a standby's redo ends, as the branch of a new incarnation records it: the first log
/// and SCN of the new incarnation, where the last log ends, and whether it is still open here
/// (the new primary closes it).
fn branch_point(redo: &RedoLog) -> anyhow::Result<(LogSeq, Scn, u64, bool)> {
    let next = redo.standby_position().next;
    if next.offset == 0 {
        // The newest log is closed (or there is none): the next log begins the incarnation.
        let last = next.seq.prev_seq();
        return Ok(match redo.log_extent(last).and_then(|extent| extent.end) {
            Some(end) => (next.seq, end.next_scn, end.end_offset, false),
            None => (next.seq.max(LogSeq(1)), redo.next_scn(), 0, false),
        });
    }
    let extent =
        redo.log_extent(next.seq).ok_or_else(|| anyhow!("log {} is not readable", next.seq))?;
    let mut last_scn = extent.header.first_scn.prev();
    let mut reader = redo.read_from_seq(next.seq);
    while let Some(record) = reader.next_record()? {
        last_scn = record.scn;
    }
    Ok((next.seq.next(), last_scn.next(), next.offset, true))
}
