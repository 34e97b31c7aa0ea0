//! A standby's listener and receiver together: the single-role form of the configuration (and
//! tests), where the role never changes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redo::{RedoLog, Storage};
use roles::IncarnationHistory;

use crate::config::StandbyConfig;
use crate::listener::{RedoListener, Refusals};
use crate::receiver::{
    AppliedScn, ReceiverContext, RoleInfoSource, StandbyReceiver, StandbyReplicationStatus,
    standby_role_info,
};

/// A standby's listener and receiver together: the single-role form of the configuration
/// (and tests), where the role never changes.
pub struct StandbyService {
    receiver: Arc<StandbyReceiver>,
    listener: RedoListener,
}

impl StandbyService {
    /// Binds the listener and starts receiving the primary.
    pub fn start(
        redo: RedoLog,
        config: StandbyConfig,
        applied: AppliedScn,
    ) -> std::io::Result<StandbyService> {
        let refusals = Arc::new(Refusals::default());
        let info_redo = redo.handle();
        let role_info: RoleInfoSource = Arc::new(move || standby_role_info(&info_redo, ""));
        let storage: Arc<dyn Storage> = Arc::new(redo::OsStorage::new(redo.config().io_mode));
        let history = IncarnationHistory::load(
            storage.as_ref(),
            &redo.config().dir,
            redo.identity().incarnation,
        )
        .map_err(std::io::Error::other)?;
        let receiver = StandbyReceiver::start(ReceiverContext {
            redo,
            storage,
            history: Arc::new(Mutex::new(history)),
            listen: config.listen.clone(),
            config: config.clone(),
            applied,
            far_sync: false,
            role_info,
            refusals: refusals.clone(),
            // (Tests and tools: the server's standbys vouch, see `server::role`.)
            vouch: None,
            cascade: None,
            copy: None,
        })?;
        let listener =
            RedoListener::bind(&config.listen, config.receive_buffer, refusals, receiver.clone())?;
        tracing::info!(listen = %listener.local_addr(), "standby: waiting for the primary's redo");
        Ok(StandbyService { receiver, listener })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    pub fn status(&self) -> StandbyReplicationStatus {
        let mut status = self.receiver.status();
        status.listen = self.listener.local_addr().to_string();
        status
    }

    /// Ends the primary's connections, then stops listening.
    pub fn stop(&self) {
        self.receiver.stop(Duration::from_secs(5));
        self.listener.stop();
    }
}
