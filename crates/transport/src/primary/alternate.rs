//! Alternate routes (Data Guard's `ALTERNATE`): a primary ships to a member itself while the
//! member that member normally receives from (a far sync, one of the primary's destinations)
//! is lost, and stops when it is back (`config::routes`, `RouteConfig::alternate_of`).
//!
//! The alternate is one of the primary's destinations from the start, deferred
//! (`state = "defer"`: nothing shipped, counted in no protection mode). A watcher enables it
//! once the member it stands in for has not been connected (catching up, streaming or
//! synchronized) for the route's `after`, and defers it again as soon as that member is
//! connected: it then forwards to the terminal itself, and the terminal takes redo from either
//! (`cascade::CascadeContext::accepts_relay`; the primary's own hello is always taken). What
//! the terminal misses meanwhile is a gap, resolved by whichever ships to it next.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Inner, Phase, PrimaryTransport};
use crate::config::{Alternate, DestinationConfig, DestinationState};

/// How often the watcher looks at the destinations.
const WATCH_INTERVAL: Duration = Duration::from_millis(100);

impl PrimaryTransport {
    /// Watches `alternates` until the transport stops (nothing to do without any).
    pub fn watch_alternates(&self, alternates: Vec<Alternate>) {
        if alternates.is_empty() {
            return;
        }
        let inner = self.inner.clone();
        let thread = std::thread::Builder::new()
            .name("redo-alternate".into())
            .spawn(move || watch(&inner, &alternates));
        match thread {
            Ok(thread) => self.threads.lock().push(thread),
            Err(error) => tracing::error!(%error, "cannot start the alternate routes' watcher"),
        }
    }

    /// Enables or defers destination `name` (an alternate taking over or standing down), its
    /// other settings as they are.
    pub fn set_state(&self, name: &str, state: DestinationState) -> Result<(), String> {
        set_state(&self.inner, name, state)
    }
}

fn set_state(inner: &Arc<Inner>, name: &str, state: DestinationState) -> Result<(), String> {
    let mode = *inner.mode.lock();
    let configs: Vec<DestinationConfig> = inner
        .destinations
        .iter()
        .map(|destination| {
            let mut config = (*destination.config()).clone();
            if destination.name == name {
                config.state = state;
            }
            config
        })
        .collect();
    PrimaryTransport::reconfigure_inner(inner, mode, &configs).map(|_| ())
}

fn watch(inner: &Arc<Inner>, alternates: &[Alternate]) {
    // Per alternate: since when the member it stands in for is not connected.
    let mut lost_since: Vec<Option<Instant>> = vec![None; alternates.len()];
    let named = |name: &str| inner.destinations.iter().find(|destination| destination.name == name);
    while !inner.shutdown.load(Ordering::Acquire) {
        std::thread::sleep(WATCH_INTERVAL);
        for (index, alternate) in alternates.iter().enumerate() {
            let (Some(far_sync), Some(terminal)) =
                (named(&alternate.instead_of), named(&alternate.member))
            else {
                continue;
            };
            // Read each time: a run-time edit of the destinations (the file's) defers it too.
            let in_use = terminal.config().state == DestinationState::Enable;
            let phase = far_sync.state.lock().phase;
            let connected =
                matches!(phase, Phase::CatchingUp | Phase::Streaming | Phase::Synchronized);
            if connected {
                lost_since[index] = None;
                if in_use {
                    match set_state(inner, &alternate.member, DestinationState::Defer) {
                        Ok(()) => {
                            tracing::warn!(member = %alternate.member, far_sync = %alternate.instead_of, "alternate route: '{}' is back; it forwards to '{}' again, and this primary stops shipping to it", alternate.instead_of, alternate.member);
                        }
                        Err(reason) => {
                            tracing::error!(member = %alternate.member, reason, "alternate route: cannot stand down")
                        }
                    }
                }
                continue;
            }
            let since = *lost_since[index].get_or_insert_with(Instant::now);
            if !in_use && since.elapsed() >= alternate.after {
                match set_state(inner, &alternate.member, DestinationState::Enable) {
                    Ok(()) => {
                        tracing::warn!(member = %alternate.member, far_sync = %alternate.instead_of, lost_for = ?since.elapsed(), "alternate route: '{}' is lost; this primary ships to '{}' itself", alternate.instead_of, alternate.member);
                    }
                    Err(reason) => {
                        tracing::error!(member = %alternate.member, reason, "alternate route: cannot take over")
                    }
                }
            }
        }
    }
}
