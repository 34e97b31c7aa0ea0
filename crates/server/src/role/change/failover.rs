//! Failover, on a standby: stop receiving, take a relay's tail, apply (or not), and open as
//! the primary of a new incarnation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use redo::{Incarnation, LogSeq, RedoLog, Role, Scn};
use roles::Branch;

use super::super::api::Promoted;
use super::super::{Roles, Running};
use super::*;

impl Roles {
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
        // Sealed as a failover target's relay: a second failover from the same incarnation
        // would make a second primary of the next one. The DBA's `--force` opens it anyway.
        if let Some(reason) = sealed_against_own(&control)
            && !without_tail
        {
            return refuse(format!(
                "{reason}: fail over to that target, or use failover --force to open this member beside it"
            ));
        }
        // A new standby that no primary has shipped to and that took no copy holds no
        // database: a primary made of it would hold nothing, and its old primary, which no
        // standby followed, restarts taking writes (found by `roles/tests/model_restart.rs`).
        if running.db.redo().identity().database_id == redo::DatabaseId(0) {
            return refuse(
                "this standby holds no database yet (no primary has shipped to it, and it was built from no copy): it cannot become primary",
            );
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
        if let super::super::relay_tail::RelayTail::Missing { relay, reason } = &tail
            && !without_tail
        {
            return refuse(format!(
                "the tail held by '{relay}', which this standby receives from, cannot be had: {reason}; use failover --force to open with what this standby holds (commits the old primary acknowledged through '{relay}' may be lost)"
            ));
        }
        // Said in the log too: a failover the observer asked for has no caller to read it.
        if let Some(note) = tail.note() {
            tracing::info!("failover: {note}");
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
        let (first_seq, first_scn, prev_end_offset, prev_closed_here) = match branch_of.await {
            Ok(branch) => branch,
            Err(error) => return self.receive_again(running, error).await,
        };
        let received_scn = first_scn.prev();
        let unapplied_scns = received_scn.0.saturating_sub(applied_before.0);
        let held_back = held_back && unapplied_scns > 0;
        let delay_released_s = held_back.then(|| {
            tracing::info!(delay = ?delay, unapplied_scns, "failover: applying the redo the apply delay held back before opening as the primary");
            delay.as_secs_f64()
        });
        if !immediate {
            let wait = self.settings.replication().failover_apply_wait;
            let deadline = Instant::now() + wait;
            while running.db.applied_scn() < received_scn {
                if Instant::now() >= deadline {
                    let refusal = Refused(format!(
                        "apply reached SCN {} of {received_scn} within {wait:?} (replication.failover_apply_wait); use failover --immediate to open without waiting for it (the redo is replayed as the database opens)",
                        running.db.applied_scn()
                    ));
                    return self.receive_again(running, refusal.into()).await;
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
        let started_in = control.incarnation;
        self.reopen_with("failover", false, move |roles| {
            let (redo_config, _) = roles.config.resolved();
            // Read again with the database closed: its receiver, running until the tail was
            // taken, may have been fenced (a hello found it diverged), followed a newer
            // incarnation, or been sealed since the checks above.
            let now = control_now(roles).context("reading the control file")?;
            if let Some(fence) = &now.fenced {
                return Err(Refused(format!(
                    "this standby was fenced meanwhile: it holds redo past the point where incarnation {} of '{}' began; reinstate it",
                    fence.incarnation, fence.by
                ))
                .into());
            }
            if now.incarnation != started_in {
                return Err(Refused(format!(
                    "this standby followed incarnation {} meanwhile (it was in {started_in}): another member is the primary of it",
                    now.incarnation
                ))
                .into());
            }
            if let Some(reason) = sealed_against_own(&now)
                && !without_tail
            {
                return Err(Refused(format!(
                    "{reason} (meanwhile): fail over to that target, or use failover --force"
                ))
                .into());
            }
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
                // Every standby of the incarnation before could be failed over to from now
                // on: a restart must hear from them all (`confirmation`).
                control.followed = true;
                control.fenced = None;
                Ok(())
            })?;
            roles.confirmation.promoted_here();
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
            awaiting: Vec::new(),
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// A failover refused after it stopped the receiver: the standby opens again as it was
    /// (its receiver running, its apply delay back), and `refusal` is the answer. Without it a
    /// refused failover left an open standby that received nothing until a restart.
    async fn receive_again<T>(
        self: &Arc<Roles>,
        running: Arc<Running>,
        refusal: anyhow::Error,
    ) -> anyhow::Result<T> {
        drop(running);
        tracing::warn!(refusal = format!("{refusal:#}"), "failover refused: receiving again");
        // Nothing to change: closed and opened in the role its control file names.
        if let Err(error) = self.reopen_with("failover refused", false, |_| Ok(())).await {
            return Err(refusal
                .context(format!("and the standby did not open again to receive: {error:#}")));
        }
        Err(refusal)
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
