//! Archive retention, as the server runs it: every few seconds, works out the first archived
//! log still needed — by this database (its checkpoint; on a standby, its apply), by every
//! standby under the deletion policy (applied, or received), whether this member ships to it
//! as a primary or forwards to it (cascading, a far sync), by a new standby being copied —
//! and lets the redo engine delete the archived logs before it (`redo::retention`). Status says
//! what is kept and why. A far sync has no checkpoint and applies nothing: only what it
//! forwards holds its archives (what it has not received yet is not archived here anyway).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redo::{DeletionPolicy, LogSeq, Role};

use crate::{Running, ServerState};

const INTERVAL: Duration = Duration::from_secs(2);

pub use admin::status::RetentionStatus;

/// The shared slot the task writes and `/status` reads.
pub type RetentionSlot = Arc<Mutex<Option<RetentionStatus>>>;

/// The first log still needed, and why.
fn needed(running: &Running, policy: DeletionPolicy, holds: &[LogSeq]) -> (LogSeq, String) {
    let redo = running.db.redo();
    let seq_of = |scn: redo::Scn| redo.seq_holding(scn.next()).unwrap_or(LogSeq(1));
    let far_sync = running.db.is_far_sync();
    let mut needed = if far_sync {
        // (Nothing of this member's own: the newest log it has is as far as it could go.)
        (redo.written_addr().seq.max(redo.standby_position().next.seq), String::new())
    } else {
        (seq_of(running.db.checkpoint_scn()), "this database's checkpoint".to_string())
    };
    let mut hold = |seq: LogSeq, why: String| {
        if seq < needed.0 {
            needed = (seq, why);
        }
    };
    if running.role() == Role::Standby && !far_sync {
        hold(seq_of(running.db.applied_scn()), "this standby's apply".into());
    }
    for seq in holds {
        hold(*seq, "a new standby being copied".into());
    }
    let shipped = running.transport.as_ref().map(|transport| transport.status());
    let forwarded = running.receiver.as_ref().map(|receiver| receiver.forwarding());
    for destinations in [shipped, forwarded].into_iter().flatten() {
        for destination in destinations {
            if destination.last_heard_s.is_none() {
                hold(
                    LogSeq(1),
                    format!(
                        "standby '{}', not heard from since this server started",
                        destination.name
                    ),
                );
                continue;
            }
            match policy {
                DeletionPolicy::None => {}
                DeletionPolicy::AppliedOnAllStandby => hold(
                    seq_of(destination.applied_scn),
                    format!("standby '{}' has not applied it", destination.name),
                ),
                DeletionPolicy::ShippedToAllStandby => {
                    let missing = destination
                        .gaps
                        .iter()
                        .min()
                        .copied()
                        .unwrap_or(destination.acknowledged.seq);
                    hold(
                        missing.min(destination.acknowledged.seq),
                        format!("standby '{}' has not received it", destination.name),
                    );
                }
            }
        }
    }
    if needed.1.is_empty() {
        needed.1 =
            "this far sync's newest log (it applies nothing; nothing forwarded waits)".into();
    }
    needed
}

/// Runs retention until the server stops.
pub(crate) async fn run(state: Arc<ServerState>) {
    let policy = state.config.redo.archive_deletion_policy;
    loop {
        tokio::time::sleep(INTERVAL).await;
        let Some(running) = state.roles.current() else { continue };
        let holds = state.roles.copy_holds.lock().clone();
        let (needed_from, held_by) = needed(&running, policy, &holds);
        let pass = if policy == DeletionPolicy::None {
            Ok(None)
        } else {
            let running = running.clone();
            tokio::task::spawn_blocking(move || {
                running.db.redo().delete_archived(needed_from).map(Some)
            })
            .await
            .unwrap_or_else(|error| Err(redo::RedoError::WriterFailed(error.to_string())))
        };
        let mut slot = state.retention.lock();
        let previous = slot.take();
        *slot = Some(match pass {
            Ok(pass) => RetentionStatus {
                policy,
                needed_from,
                held_by,
                last_pass: pass.or_else(|| previous.and_then(|status| status.last_pass)),
                last_error: None,
            },
            Err(error) => {
                tracing::warn!(%error, "archive retention failed");
                RetentionStatus {
                    policy,
                    needed_from,
                    held_by,
                    last_pass: previous.and_then(|status| status.last_pass),
                    last_error: Some(error.to_string()),
                }
            }
        });
    }
}
