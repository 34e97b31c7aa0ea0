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

mod failover;
mod reinstate;
mod switchover;

pub use switchover::Handover;
pub(crate) use switchover::PendingSwitchover;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::gate::GateState;
use super::{Roles, Running};

/// How often a member whose database a role change left closed tries to open it again.
const REOPEN_RETRY: Duration = Duration::from_secs(1);

/// A refusal: nothing was changed, and this says why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

fn refuse<T>(reason: impl Into<String>) -> anyhow::Result<T> {
    Err(Refused(reason.into()).into())
}

/// Why a seal refuses this member a role of its own, if it does: a failover target sealed it,
/// as its relay, against its incarnation (`ControlData::sealed_below`). A failover from that
/// incarnation has begun elsewhere, and its primary may be open already.
fn sealed_against_own(control: &redo::ControlData) -> Option<String> {
    let (incarnation, sealed) = (control.incarnation.0, control.sealed_below.0);
    (sealed > incarnation).then(|| format!(
        "a failover from incarnation {incarnation} sealed this member (it takes nothing below incarnation {sealed}), and its primary may be open"
    ))
}

/// The control file as it is now, read in `reopen`'s change (the database closed): what the
/// receiver, which does not take the transition lock, may have written since the change's own
/// checks (an adopted incarnation, a fence, a seal). Nothing writes it now: the engine, shut
/// down, refuses a late writer (`redo::Shared::update_control`), whose write is then lost, not
/// made (a hello still being served past the receiver's stop, rare: its connection ends).
fn control_now(roles: &Roles) -> anyhow::Result<redo::ControlData> {
    let (redo_config, _) = roles.config.resolved();
    redo::RedoLog::read_control(&redo_config, roles.storage.as_ref())?
        .ok_or_else(|| anyhow!("the control file is gone"))
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
                self.confirm();
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
                        roles.confirm();
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
}
