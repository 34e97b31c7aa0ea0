//! Active expiry on a primary: keys whose deadline passed are deleted even if no client reads
//! them, as Redis's active expire cycle does, each deletion a redo record a standby applies.
//! Every `EXPIRY_PERIOD` the primary deletes due keys a step at a time (at most
//! `EXPIRY_KEYS_PER_STEP` keys, each step through the write gate like any write), and stops
//! after `EXPIRY_BUDGET` of a period, so that expiry takes at most a quarter of one core
//! however many keys are due; the rest wait for the next period.
//!
//! A standby runs none of this: it never deletes by its own clock, it only hides what is past
//! its deadline from its readers (`db::view`).

use std::sync::Arc;
use std::time::Duration;

use redo::{CommitOptions, Role};

use crate::ServerState;

/// How often the cycle runs (Redis's `hz` 10).
pub(crate) const EXPIRY_PERIOD: Duration = Duration::from_millis(100);
/// Keys one step deletes at most (Redis's keys per loop).
pub(crate) const EXPIRY_KEYS_PER_STEP: usize = 20;
/// The time one period may spend deleting (a quarter of it, as Redis's slow cycle).
pub(crate) const EXPIRY_BUDGET: Duration = Duration::from_millis(25);

pub(crate) async fn run(state: Arc<ServerState>) {
    let mut shutdown = state.shutdown.subscribe();
    let mut ticker = tokio::time::interval(EXPIRY_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = crate::stopped(&mut shutdown) => return,
        }
        let Some(running) = state.roles.current() else { continue };
        if running.role() != Role::Primary {
            continue;
        }
        let started = tokio::time::Instant::now();
        while started.elapsed() < EXPIRY_BUDGET {
            let Ok(_writer) = state.roles.enter_write().await else { break };
            let step = match running.db.expire_step(EXPIRY_KEYS_PER_STEP) {
                Ok(step) => step,
                Err(error) => {
                    tracing::debug!(%error, "active expiry: no step now");
                    break;
                }
            };
            if let Some(scn) = step.scn
                && let Err(refusal) =
                    crate::execute::commit(&running.db, scn, CommitOptions::default()).await
            {
                tracing::warn!(?refusal, %scn, "active expiry: the deletion's commit was not confirmed");
                break;
            }
            if !step.more {
                break;
            }
        }
    }
}
