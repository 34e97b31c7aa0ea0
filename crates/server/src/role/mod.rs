//! The database's role and everything that runs for it: a primary's redo transport and the
//! port its peers reach it at, or a standby's receiver; the write gate; and the changes of role
//! (`change`) that replace them.
//!
//! A role change closes the database and opens it again in its new role, in the same process:
//! the data directory stays locked, the RESP and admin listeners and the redo listener stay
//! bound, and requests that arrive meanwhile wait (briefly) for the new role. The control file
//! is the commit point of every change: it names the role (and the incarnation) the database
//! opens in, whatever happens after it is written.

pub mod api;
mod change;
mod confirmation;
mod copy;
pub mod divergent;
mod fast_start;
pub mod gate;
pub mod http;
mod relay_tail;
mod vouch;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use db::Database;
use gate::Refusal as _;
use parking_lot::{Mutex, RwLock};
use redo::{Role, Storage};
use roles::IncarnationHistory;
use stats::Metrics;
use tokio::sync::{mpsc, watch};
use transport::{
    CopyServer, PrimaryIdentity, PrimaryPort, PrimaryTransport, ReceiverContext, RedoListener,
    RedoPort, Refusals, StandbyReceiver, TransportEvent,
};

pub use copy::copy_from_primary;
use gate::{Gate, GateState};

use crate::config::ServerConfig;

/// How long a stopping primary waits for its standbys (and its observer's lease) to take its
/// last redo before it stops without them.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// What runs for the database's current role.
pub struct Running {
    pub db: Arc<Database>,
    /// A primary's redo transport (if it has destinations and is not fenced).
    pub transport: Option<PrimaryTransport>,
    /// A standby's receiver.
    pub receiver: Option<Arc<StandbyReceiver>>,
    /// A primary's fast-start failover state (lease, grant), when it is enabled.
    pub fast_start: Option<Arc<transport::FastStart>>,
}

impl Running {
    pub fn role(&self) -> Role {
        self.db.role()
    }

    /// Stops it: a standby stops receiving first; a primary flushes its redo (still shipping
    /// it) before its senders stop.
    fn stop(&self) -> anyhow::Result<()> {
        self.stop_with(true)
    }

    /// Stops; without `checkpoint`, the data files are left at their last checkpoint and the
    /// next open replays the redo after it.
    fn stop_with(&self, checkpoint: bool) -> anyhow::Result<()> {
        if let Some(receiver) = &self.receiver {
            receiver.stop(Duration::from_secs(5));
        }
        // A primary ships its last redo as it stops, but waits at most STOP_GRACE for its
        // standbys (or its observer's lease): cut off from all of them, it stops all the same.
        if let Some(transport) = &self.transport {
            transport.give_up_waiting_after(STOP_GRACE);
        }
        let stopped =
            if checkpoint { self.db.shutdown() } else { self.db.shutdown_without_checkpoint() };
        let gave_up = self.transport.as_ref().is_some_and(PrimaryTransport::gave_up);
        if let Some(transport) = &self.transport {
            transport.stop();
        }
        match stopped {
            // What it wrote last and no standby confirmed is in its redo (replayed at the next
            // start) and was never acknowledged: the stop itself went well.
            Err(error) if gave_up => {
                tracing::warn!(%error, "stopped without its standbys' acknowledgement of the last redo (it is in the redo here, and was never acknowledged)");
                Ok(())
            }
            stopped => stopped.context("stopping the database"),
        }
    }
}

/// A note for status: what happened last, and when.
#[derive(Debug, Default)]
struct Notes {
    last_change: Option<String>,
    last_error: Option<String>,
    /// A switchover this member began as the old primary and has not seen completed.
    switchover_to: Option<change::PendingSwitchover>,
}

/// The role slot of a server.
pub struct Roles {
    config: ServerConfig,
    metrics: Arc<Metrics>,
    storage: Arc<dyn Storage>,
    current: RwLock<Option<Arc<Running>>>,
    /// Bumped at every swap, so that requests waiting for the database see it.
    swapped: watch::Sender<u64>,
    pub gate: Arc<Gate>,
    /// One role change (or change of run-time settings) at a time.
    pub(crate) transition: tokio::sync::Mutex<()>,
    /// The run-time settings, and the `[replication]` section in effect with them.
    pub settings: Arc<crate::settings::Settings>,
    listener: Option<RedoListener>,
    refusals: Arc<Refusals>,
    history: Arc<Mutex<IncarnationHistory>>,
    events: mpsc::UnboundedSender<TransportEvent>,
    notes: Mutex<Notes>,
    /// The first log of each copy a new standby is taking from this primary.
    pub copy_holds: Arc<Mutex<Vec<redo::LogSeq>>>,
    /// Mutual TLS for redo transport (this member's certificate), if configured.
    pub redo_tls: Option<Arc<tls::RedoTls>>,
    /// The welcomes of a restarted primary's standbys (`confirmation`).
    confirmation: confirmation::Confirmation,
    /// The observers of the configuration whose pings this member refused (`fast_start`).
    refused_observer: Mutex<Vec<fast_start::RefusedObserver>>,
}

impl Roles {
    /// Binds the redo listener (if this member has one) and returns the slot, empty, with the
    /// receiving end of the transport's events.
    pub fn bind(
        config: &ServerConfig,
        metrics: &Arc<Metrics>,
        storage: Arc<dyn Storage>,
        settings: Arc<crate::settings::Settings>,
    ) -> anyhow::Result<(Roles, mpsc::UnboundedReceiver<TransportEvent>)> {
        let refusals = Arc::new(Refusals::default());
        let replication = &config.replication;
        let redo_tls = config.redo_tls()?;
        if let Some(warning) = redo_tls.as_ref().and_then(|tls| tls.validity_warning.as_ref()) {
            tracing::error!(
                warning,
                "TLS: this member's certificate will be refused by its peers; put a valid one in place"
            );
        }
        let security = transport::Security {
            tls: redo_tls.clone(),
            members: replication.members.iter().map(|member| member.name.clone()).collect(),
            observers: replication.observers.iter().map(|observer| observer.name.clone()).collect(),
            this: replication.member.clone(),
            limits: replication.listener,
        };
        let listener = match replication.redo_listen() {
            Some(address) => {
                let opening: Arc<dyn RedoPort> = Arc::new(transport::listener::Unavailable {
                    refusals: refusals.clone(),
                    info: placeholder_info(replication.member.as_deref().unwrap_or_default()),
                    reason: "the database is opening".into(),
                });
                Some(
                    RedoListener::bind_secure(
                        &address,
                        replication.standby.receive_buffer,
                        refusals.clone(),
                        opening,
                        security,
                    )
                    .with_context(|| {
                        format!(
                            "{}: cannot listen for redo on {address}",
                            replication.redo_listen_field()
                        )
                    })?,
                )
            }
            None => None,
        };
        let (events, receiver) = mpsc::unbounded_channel();
        Ok((
            Roles {
                config: config.clone(),
                metrics: metrics.clone(),
                storage,
                current: RwLock::new(None),
                swapped: watch::Sender::new(0),
                gate: Arc::new(Gate::default()),
                transition: tokio::sync::Mutex::new(()),
                settings,
                listener,
                refusals,
                history: Arc::default(),
                events,
                notes: Mutex::default(),
                copy_holds: Arc::default(),
                redo_tls,
                confirmation: Default::default(),
                refused_observer: Mutex::default(),
            },
            receiver,
        ))
    }

    /// Answers fast-start failover observers on the redo listener (if there are observers),
    /// and watches the role: an isolated primary's gate closed while it is isolated, a
    /// switchover this member began noted complete once it follows its new primary.
    pub fn serve_observers(self: &Arc<Roles>) -> Option<tokio::task::JoinHandle<()>> {
        if let Some(listener) = &self.listener
            && !self.config.replication.observers.is_empty()
        {
            listener.set_observer_hooks(Arc::new(fast_start::Hooks {
                roles: Arc::downgrade(self),
                runtime: tokio::runtime::Handle::current(),
                taking_over: parking_lot::Mutex::new(None),
            }));
        }
        let roles = self.clone();
        Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                fast_start::watch_isolation(&roles);
                roles.note_switchover_complete();
            }
        }))
    }

    /// The redo listener's address, if there is one.
    pub fn redo_addr(&self) -> Option<std::net::SocketAddr> {
        self.listener.as_ref().map(RedoListener::local_addr)
    }

    /// What runs now (none while the role is changing).
    pub fn current(&self) -> Option<Arc<Running>> {
        self.current.read().clone()
    }

    /// What runs now, waiting (up to 10 s) while the role is changing.
    pub async fn current_or_wait(&self) -> Option<Arc<Running>> {
        let mut swapped = self.swapped.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(running) = self.current() {
                return Some(running);
            }
            if tokio::time::timeout_at(deadline, swapped.changed()).await.is_err() {
                return None;
            }
        }
    }

    fn install(&self, running: Option<Arc<Running>>) {
        *self.current.write() = running;
        self.swapped.send_modify(|count| *count += 1);
    }

    /// Opens the database in its role (the configuration's `role` for a new one) and starts
    /// what the role runs.
    pub async fn open(self: &Arc<Roles>) -> anyhow::Result<()> {
        // A switchover this member began as the old primary, before a restart.
        if let Some(pending) = self.load_pending_switchover()? {
            let to = &pending.to;
            tracing::warn!(to = %to, id = pending.id, "a switchover this member began has not been seen complete: `redoguard switchover --to {to}` completes it");
            self.notes.lock().switchover_to = Some(pending);
        }
        let roles = self.clone();
        let (running, gate) = tokio::task::spawn_blocking(move || roles.open_blocking()).await??;
        self.prepare_refused_record();
        // (Peers refused while the database was opening are not its problem now.)
        self.refusals.forget_last();
        self.install(Some(Arc::new(running)));
        self.gate.set(gate);
        self.confirm();
        Ok(())
    }

    fn open_blocking(self: &Arc<Roles>) -> anyhow::Result<(Running, GateState)> {
        // First: an open that fails still takes it, and a retry waits for the standbys.
        let promoted_here = self.confirmation.take_promoted_here();
        let (redo_config, db_config) = self.config.resolved();
        // What the file says, with the settings changed at run time.
        let replication = self.settings.replication();
        let replication = replication.as_ref();
        let initial = match replication.role {
            transport::RoleConfig::Primary => Role::Primary,
            transport::RoleConfig::Standby => Role::Standby,
        };
        let redo = redo::RedoLog::open_as(
            initial,
            redo_config,
            self.storage.clone(),
            self.metrics.clone(),
        )
        .context("cannot open the redo log")?;
        if let Some(member) = &replication.member {
            redo.claim_member(member)?;
        }
        // A far sync (`kind = "far_sync"`) keeps standby logs and archives only: no data
        // files, no apply, never opened (`Database::open_far_sync`).
        let far_sync = replication.member.as_deref().is_some_and(|m| replication.is_far_sync(m));
        // A delayed standby applies nothing before its receiver knows how old the redo is.
        if redo.role() == Role::Standby && !far_sync {
            transport::delay::hold(&redo, replication.standby_config().delay);
        }
        // A fenced database's data files stay at their checkpoint (see `change::fence`).
        let fenced = redo.control().fenced.is_some();
        let db = if far_sync {
            let data_file = db_config.data_file();
            if self.storage.exists(&data_file) {
                tracing::warn!(data_file = %data_file.display(), "this far sync's data directory holds a data file (from a version that opened far syncs like standbys): it is not used; it may be deleted");
            }
            Database::open_far_sync(db_config, redo, &self.storage, &self.metrics)
                .context("cannot open the far sync")?
        } else {
            Database::open_with_redo(db_config, redo, &self.storage, &self.metrics, fenced)
                .context("cannot open the database")?
        };
        let db = Arc::new(db);
        let control = db.redo().control();
        let history = IncarnationHistory::load(
            self.storage.as_ref(),
            &db.redo().config().dir,
            control.incarnation,
        )?;
        *self.history.lock() = history.clone();
        let member = replication.member.clone().unwrap_or_default();
        match control.role {
            Role::Primary => {
                // Before its transport starts: its welcomes count from here on.
                self.confirmation.forget();
                let fenced = control.fenced.clone();
                let destinations = replication.destinations();
                let fast_start = if replication.fast_start_failover.enabled && fenced.is_none() {
                    // What it keeps of the observers (the active one, the targets told of
                    // one), and where its redo is durable now: every target owes it that.
                    let (file, record) = transport::fast_start::RecordFile::load(
                        self.storage.clone(),
                        &db.redo().config().dir,
                    )
                    .map_err(|reason| anyhow::anyhow!(reason))?;
                    let fast_start = transport::FastStart::new(
                        replication.fast_start_failover.clone(),
                        replication.fast_start_settings(),
                        &member,
                        file,
                        record,
                        db.redo().durable_addr(),
                    );
                    fast_start.set_observe_only(self.settings.fast_start_observe_only());
                    Some(fast_start)
                } else {
                    None
                };
                let transport = if fenced.is_none() && !destinations.is_empty() {
                    let events = self.events.clone();
                    let transport = PrimaryTransport::start_as(
                        db.redo().handle(),
                        PrimaryIdentity {
                            // (In the single-role form, the name its certificate proves.)
                            member: match &self.redo_tls {
                                Some(tls) if member.is_empty() => tls.name.clone(),
                                _ => member.clone(),
                            },
                            history: history.to_wire(),
                            tls: self.redo_tls.clone(),
                            relay: None,
                        },
                        replication.protection(),
                        destinations,
                        &self.metrics,
                        Arc::new(move |event| {
                            let _ = events.send(event);
                        }),
                        fast_start.clone(),
                    )
                    .context("starting redo transport")?;
                    transport.watch_alternates(replication.alternates(&member));
                    db.redo().set_shipper(Some(transport.shipper()));
                    Some(transport)
                } else {
                    None
                };
                if let Some(listener) = &self.listener {
                    let events = self.events.clone();
                    listener.set_port(Arc::new(PrimaryPort {
                        member: member.clone(),
                        incarnation: control.incarnation,
                        role_info: self.role_info_source(&db),
                        events: Arc::new(move |event| {
                            let _ = events.send(event);
                        }),
                        refusals: self.refusals.clone(),
                        copy: fenced.is_none().then(|| CopyServer {
                            redo: db.redo().handle(),
                            snapshot: copy::snapshot_source(&db),
                            member: member.clone(),
                            history: self.history_source(),
                            holds: self.copy_holds.clone(),
                        }),
                    }));
                }
                let gate = match fenced {
                    Some(fence) => GateState::Fenced {
                        incarnation: fence.incarnation.0,
                        primary_resp: replication
                            .member_named(&fence.by)
                            .map(|member| member.resp.clone()),
                        primary: fence.by,
                    },
                    // Restarted after some standby followed it, or after it was made primary
                    // (not just now, by this process): a failover may have happened meanwhile.
                    // It takes writes once every enabled destination has welcomed it again
                    // (`confirmation`).
                    None if control.followed && transport.is_some() && !promoted_here => {
                        match self.confirmation.awaited(replication, &member, control.incarnation.0)
                        {
                            Some(members) => GateState::Unconfirmed { members },
                            None => GateState::Open,
                        }
                    }
                    None => GateState::Open,
                };
                Ok((Running { db, transport, receiver: None, fast_start }, gate))
            }
            Role::Standby => {
                let Some(listener) = &self.listener else {
                    anyhow::bail!(
                        "this database is a standby, but the configuration gives it no redo listener (replication.standby.listen, or its member's redo address)"
                    );
                };
                let applied = {
                    let db = Arc::downgrade(&db);
                    Arc::new(move || db.upgrade().map_or(redo::Scn(0), |db| db.applied_scn()))
                        as transport::AppliedScn
                };
                let receiver = StandbyReceiver::start(ReceiverContext {
                    redo: db.redo().handle(),
                    storage: self.storage.clone(),
                    history: self.history.clone(),
                    config: replication.standby_config(),
                    applied,
                    far_sync,
                    role_info: self.role_info_source(&db),
                    refusals: self.refusals.clone(),
                    listen: listener.local_addr().to_string(),
                    vouch: vouch::voucher(&self.config),
                    // In the configuration form: forwarded redo the routes name, and
                    // forwarding along them (cascading).
                    cascade: replication.has_members().then(|| transport::CascadeContext {
                        replication: replication.clone(),
                        tls: self.redo_tls.clone(),
                        metrics: self.metrics.clone(),
                    }),
                    // A database standby serves copies of its data files as the primary does
                    // (a new standby behind a cascade is built from its cascading standby);
                    // a far sync has none.
                    copy: (!far_sync).then(|| CopyServer {
                        redo: db.redo().handle(),
                        snapshot: copy::snapshot_source(&db),
                        member: member.clone(),
                        history: self.history_source(),
                        holds: self.copy_holds.clone(),
                    }),
                })?;
                listener.set_port(receiver.clone());
                let gate = match &control.fenced {
                    Some(fence) => GateState::Fenced {
                        incarnation: fence.incarnation.0,
                        primary: fence.by.clone(),
                        primary_resp: replication
                            .member_named(&fence.by)
                            .map(|member| member.resp.clone()),
                    },
                    None => GateState::Standby {
                        primary: None,
                        primary_resp: replication.standby.primary.clone(),
                    },
                };
                Ok((
                    Running { db, transport: None, receiver: Some(receiver), fast_start: None },
                    gate,
                ))
            }
        }
    }

    /// The incarnation history as it is when asked (for the copies this member serves).
    fn history_source(&self) -> transport::copy::HistorySource {
        let history = self.history.clone();
        Arc::new(move || history.lock().to_wire())
    }

    /// Who this member is, for a peer's probe.
    pub(crate) fn role_info_source(&self, db: &Arc<Database>) -> transport::RoleInfoSource {
        let db = Arc::downgrade(db);
        let member = self.config.replication.member.clone().unwrap_or_default();
        let history = self.history.clone();
        Arc::new(move || {
            let Some(db) = db.upgrade() else { return placeholder_info(&member) };
            let redo = db.redo();
            let mut info = transport::receiver::standby_role_info(redo, &member);
            info.history = history.lock().to_wire();
            if redo.role() == Role::Primary {
                let durable = redo.durable_addr();
                info.role = proto::WireRole::Primary;
                info.position.current_seq = durable.seq.0;
                info.position.current_offset = durable.offset;
                info.durable_scn = redo.durable_scn().0;
            }
            info.position.applied_scn = db.applied_scn().0;
            info
        })
    }

    /// Lets a write through the gate, or says what to tell the client (a standby names the
    /// primary it follows).
    pub async fn enter_write(&self) -> Result<gate::Writer<'_>, resp::Frame> {
        self.gate.enter().await.map_err(|state| self.refusal(state))
    }

    /// What a write the database refused as read-only is told: the gate's refusal when it
    /// names the primary (a standby, a fenced primary), so that every `-READONLY` names the
    /// primary this member knows of.
    pub fn read_only_refusal(&self) -> resp::Frame {
        match self.gate.state() {
            state @ (GateState::Standby { .. } | GateState::Fenced { .. }) => self.refusal(state),
            _ => resp::Frame::error("READONLY You can't write against a read only replica."),
        }
    }

    /// What a client asking a far sync for the key space is told: it holds no data (standby
    /// logs and archives only) and is never opened, as Data Guard's far sync answers a query
    /// with "database not open"; the primary it receives from, if it knows one, is named.
    /// `None` on any other member.
    pub fn far_sync_refusal(&self, running: &Running) -> Option<resp::Frame> {
        if !running.db.is_far_sync() {
            return None;
        }
        let member = self.config.replication.member.clone().unwrap_or_default();
        let primary = running.receiver.as_ref().and_then(|receiver| receiver.primary().1);
        let primary = match primary {
            Some(name) => match self.config.replication.member_named(&name) {
                Some(entry) => format!(": ask the primary, '{name}' at {}", entry.resp),
                None => format!(": ask the primary, '{name}'"),
            },
            None => String::new(),
        };
        Some(resp::Frame::error(format!(
            "NOTOPEN '{member}' is a far sync: it keeps standby logs and archives only, holds no data and is never opened, so it serves no key{primary}"
        )))
    }

    /// A closed gate's refusal (a standby names the primary it follows).
    fn refusal(&self, state: GateState) -> resp::Frame {
        match state {
            GateState::Standby { primary: None, .. } => {
                let primary = self.current().and_then(|running| {
                    running.receiver.as_ref().and_then(|receiver| receiver.primary().1)
                });
                let primary_resp = primary
                    .as_deref()
                    .and_then(|name| self.config.replication.member_named(name))
                    .map(|member| member.resp.clone())
                    .or_else(|| self.config.replication.standby.primary.clone());
                GateState::Standby { primary, primary_resp }.refusal()
            }
            other => other.refusal(),
        }
    }

    /// Stops what runs (the server is stopping).
    pub async fn stop(self: &Arc<Roles>) -> anyhow::Result<()> {
        let _transition = self.transition.lock().await;
        let running = self.current.write().take();
        let roles = self.clone();
        tokio::task::spawn_blocking(move || {
            let stopped = running.map_or(Ok(()), |running| running.stop());
            if let Some(listener) = &roles.listener {
                listener.stop();
            }
            stopped
        })
        .await?
    }

    /// What `/status` says about the role.
    pub fn status(&self) -> Option<api::RoleStatus> {
        let running = self.current()?;
        let control = running.db.redo().control();
        let notes = self.notes.lock();
        Some(api::RoleStatus {
            member: self.config.replication.member.clone(),
            role: crate::role_name(control.role).to_string(),
            incarnation: control.incarnation.0,
            fenced: control.fenced,
            history: self.history.lock().branches.clone(),
            gate: self.gate.state(),
            base_seq: control.base_seq,
            last_change: notes.last_change.clone(),
            last_error: notes.last_error.clone(),
            switchover_to: notes.switchover_to.as_ref().map(|pending| pending.to.clone()),
            switchover_id: notes.switchover_to.as_ref().map(|pending| pending.id),
            switchover_incarnation: notes.switchover_to.as_ref().map(|pending| pending.incarnation),
            fast_start: self.fast_start_status(&running),
            followed: control.followed,
            sealed_below: control.sealed_below.0,
            switchover_wait_s: Some(self.settings.replication().switchover_wait.as_secs_f64()),
        })
    }

    fn fast_start_status(&self, running: &Running) -> Option<api::FastStartStatus> {
        let replication = &self.config.replication;
        let config = &replication.fast_start_failover;
        if !config.enabled {
            return None;
        }
        let mut status = api::FastStartStatus {
            threshold_s: config.threshold.as_secs_f64(),
            targets: replication.failover_targets(),
            observer: None,
            observer_last_contact_s: None,
            synchronized: None,
            wants_unsync: None,
            isolated: None,
            synchronized_targets: None,
            mode: Some(
                match fast_start::mode(self) {
                    proto::FastStartMode::ObserveOnly => "observe-only",
                    _ => "enabled",
                }
                .to_string(),
            ),
            observer_refused: self.refused_observer(),
        };
        if let Some(fast_start) = &running.fast_start {
            let (observer, last) = fast_start.observer_contact();
            let view = fast_start.view();
            status.observer = observer;
            status.observer_last_contact_s = last;
            status.synchronized = Some(view.all_synchronized);
            status.wants_unsync = Some(!view.wants_unsync.is_empty());
            status.isolated = Some(view.isolated);
            status.synchronized_targets = Some(view.synchronized);
        } else if let Some(receiver) = &running.receiver {
            status.observer = receiver.status().active_observer;
        }
        Some(status)
    }

    /// Handles what the transport learns about this primary's role: a standby followed it
    /// (a restarted primary's confirmation), or it has been failed over (it fences itself).
    pub async fn on_event(self: &Arc<Roles>, event: TransportEvent) {
        match event {
            TransportEvent::Followed { destination, incarnation } => {
                // Recorded first: a welcome while the gate still says the role is changing
                // counts once it is set (`confirm`).
                self.confirmation.welcomed(&destination, incarnation);
                let Some(running) = self.current() else { return };
                let control = running.db.redo().control();
                if control.role != Role::Primary
                    || control.fenced.is_some()
                    || control.incarnation.0 != incarnation
                {
                    return;
                }
                if let Err(error) = running.db.redo().note_followed() {
                    tracing::error!(%error, "cannot record that a standby follows this primary");
                }
                tracing::debug!(standby = %destination, incarnation, "a standby accepted this primary");
                self.confirm();
            }
            TransportEvent::Fenced { incarnation, primary, reason } => {
                // News that arrives after this member stopped being a primary (a reinstate, a
                // switchover, a fence already made) needs nothing.
                let stale = self.current().is_none_or(|running| {
                    let control = running.db.redo().control();
                    control.role != Role::Primary
                        || control
                            .fenced
                            .as_ref()
                            .is_some_and(|fence| fence.incarnation.0 >= incarnation)
                });
                if stale {
                    tracing::debug!(
                        incarnation,
                        primary,
                        "news of a newer incarnation after this member stopped being a primary"
                    );
                } else if let Err(error) = self.fence(incarnation, &primary, &reason).await {
                    tracing::error!(%error, "cannot fence this primary");
                }
            }
        }
    }

    fn note_change(&self, change: String) {
        tracing::warn!(change, "role change");
        let mut notes = self.notes.lock();
        notes.last_change = Some(format!("{} {change}", crate::status::now_text()));
        notes.last_error = None;
    }

    fn note_error(&self, error: &str) {
        self.notes.lock().last_error = Some(format!("{} {error}", crate::status::now_text()));
    }
}

/// A `RoleInfo` for a member whose database is not open.
fn placeholder_info(member: &str) -> proto::RoleInfo {
    proto::RoleInfo {
        member: member.to_string(),
        role: proto::WireRole::Standby,
        database_id: 0,
        incarnation: 0,
        fenced_incarnation: 0,
        primary: String::new(),
        position: proto::Position::default(),
        durable_scn: 0,
        time_us: redo::types::now_unix_us(),
        history: Vec::new(),
    }
}
