//! This member's run-time settings (`transport::settings`): destinations deferred, enabled
//! or edited, and the protection mode, changed through the admin API while the configuration
//! runs. They are kept in `DATA_DIR/settings.json` (replaced durably at every change) and
//! applied over the configuration file at every start; docs/destinations.md.
//!
//! - `GET /settings`: the run-time settings, and the destinations and protection mode in
//!   effect.
//! - `POST /settings/destinations/NAME` (JSON `DestinationEdit`, or `{"reset": true}`): on
//!   every member; a primary applies it to its redo transport at once.
//! - `POST /settings/protection_mode?mode=MODE`: likewise.
//! - `POST /settings/fast_start?observe_only=true|false`: fast-start failover observe-only for
//!   planned maintenance (a target refuses failovers; a primary needs no lease); the broker
//!   sets it on the targets before the primary, and clears it on the primary first.
//!
//! A change is checked first, as the file would be (a mode that needs a SYNC AFFIRM standby
//! without one is refused, 409, and nothing changes); raising a running primary to Maximum
//! Protection also needs enough SYNC AFFIRM standbys synchronized at that moment, or every
//! commit would stop.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::Mutex;
use redo::Storage;
use serde::{Deserialize, Serialize};
use transport::settings::Change;
use transport::{
    DestinationConfig, DestinationEdit, ProtectionMode, ReplicationConfig, RuntimeSettings,
};

use crate::ServerState;
use crate::role::Roles;

/// The file in the data directory.
pub const FILE: &str = "settings.json";

/// The run-time settings of this member, and the configuration in effect with them.
pub struct Settings {
    /// The `[replication]` section as the file says.
    file: ReplicationConfig,
    path: PathBuf,
    storage: Arc<dyn Storage>,
    current: Mutex<(RuntimeSettings, Arc<ReplicationConfig>)>,
}

impl Settings {
    /// Reads `DATA_DIR/settings.json`, if there is one, and checks the configuration with it
    /// applied: the error names the file (and how to go back to the configuration file's
    /// settings).
    pub fn load(
        file: &ReplicationConfig,
        data_dir: &std::path::Path,
        storage: Arc<dyn Storage>,
    ) -> anyhow::Result<Settings> {
        let path = data_dir.join(FILE);
        let runtime = if storage.exists(&path) {
            let bytes = redo::storage::read_all(storage.as_ref(), &path)
                .with_context(|| format!("reading {}", path.display()))?;
            RuntimeSettings::from_json(&bytes).map_err(|reason| {
                anyhow::anyhow!(
                    "{}: {reason} (it holds the settings changed at run time; fix it, or remove it to use the configuration file's)",
                    path.display()
                )
            })?
        } else {
            RuntimeSettings::default()
        };
        for name in runtime.unknown_destinations(file) {
            tracing::warn!(
                destination = name,
                file = %path.display(),
                "run-time settings name a destination the configuration no longer has: ignored"
            );
        }
        if file.fast_start_failover.enabled
            && runtime.protection_mode.is_some_and(|mode| mode != file.protection_mode)
        {
            anyhow::bail!(
                "{} sets the protection mode to {:?} at run time, but the configuration file enables fast-start failover under {:?}: the observers decide by the file's mode, so the primary must too (remove \"protection_mode\" from {}, or the file)",
                path.display(),
                runtime.protection_mode.expect("checked"),
                file.protection_mode,
                path.display()
            );
        }
        let effective = runtime.apply(file);
        effective.validate().map_err(|(field, reason)| {
            anyhow::anyhow!(
                "{field}: {reason}, with the settings changed at run time in {} applied (change them with `redoguard edit`, or remove the file to use the configuration file's)",
                path.display()
            )
        })?;
        if !runtime.is_empty() {
            tracing::info!(file = %path.display(), settings = %String::from_utf8_lossy(&runtime.to_json()).split_whitespace().collect::<Vec<_>>().join(" "), "settings changed at run time apply over the configuration file");
        }
        Ok(Settings {
            file: file.clone(),
            path,
            storage,
            current: Mutex::new((runtime, Arc::new(effective))),
        })
    }

    /// The `[replication]` section in effect: the file's, with the run-time settings.
    pub fn replication(&self) -> Arc<ReplicationConfig> {
        self.current.lock().1.clone()
    }

    pub fn runtime(&self) -> RuntimeSettings {
        self.current.lock().0.clone()
    }

    /// Whether fast-start failover is observe-only on this member now (planned maintenance).
    pub fn fast_start_observe_only(&self) -> bool {
        self.current.lock().0.fast_start_observe_only
    }

    /// Keeps `runtime` durably, then makes it the settings in effect.
    fn set(&self, runtime: RuntimeSettings, effective: ReplicationConfig) -> anyhow::Result<()> {
        if runtime.is_empty() {
            if self.storage.exists(&self.path) {
                self.storage
                    .remove(&self.path)
                    .with_context(|| format!("removing {}", self.path.display()))?;
                let dir = self.path.parent().unwrap_or(std::path::Path::new("."));
                self.storage.sync_dir(dir).with_context(|| format!("syncing {}", dir.display()))?;
            }
        } else {
            redo::storage::replace_durably(self.storage.as_ref(), &self.path, &runtime.to_json())
                .with_context(|| format!("writing {}", self.path.display()))?;
        }
        *self.current.lock() = (runtime, Arc::new(effective));
        Ok(())
    }
}

/// A change asked for.
#[derive(Debug, Clone)]
pub enum Request {
    /// Edit a destination (`reset`: back to what the file says).
    Destination {
        name: String,
        edit: DestinationEdit,
        reset: bool,
    },
    ProtectionMode(ProtectionMode),
    /// Fast-start failover observe-only (planned maintenance) on or off.
    FastStartObserveOnly(bool),
}

pub use admin::roles::Edited;

/// What `GET /settings` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingsView {
    pub member: Option<String>,
    pub file: String,
    /// What was changed at run time.
    pub runtime: RuntimeSettings,
    /// In effect: the protection mode and every destination (in the configuration form,
    /// every member as a destination, this one included).
    pub protection_mode: ProtectionMode,
    pub destinations: Vec<DestinationConfig>,
}

/// A change refused (nothing changed): the reason, for a person.
#[derive(Debug)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

fn refused<T>(reason: impl Into<String>) -> anyhow::Result<T> {
    Err(Refused(reason.into()).into())
}

fn all_destinations(config: &ReplicationConfig) -> Vec<DestinationConfig> {
    if config.has_members() {
        config.members.iter().map(transport::MemberConfig::destination).collect()
    } else {
        config.destinations.clone()
    }
}

/// Checks a change, keeps it, and (on a primary) applies it to the redo transport. No role
/// change runs meanwhile. It runs as a task of its own (`admin::to_the_end`): a caller that
/// goes away (a client that gives up) never leaves a change kept and not applied.
pub async fn edit(roles: &Arc<Roles>, request: Request) -> anyhow::Result<Edited> {
    let roles = roles.clone();
    crate::admin::to_the_end(async move { edit_task(&roles, request).await }).await
}

async fn edit_task(roles: &Arc<Roles>, request: Request) -> anyhow::Result<Edited> {
    let _transition = roles.transition.lock().await;
    let settings = &roles.settings;
    let current = settings.runtime();
    let (next, edited) = match &request {
        Request::Destination { name, edit, reset } => {
            let next = if *reset {
                current
                    .with_edit(&settings.file, name, &DestinationEdit::default())
                    .map_err(Refused)?
                    .without(name)
            } else {
                current.with_edit(&settings.file, name, edit).map_err(Refused)?
            };
            (next, Some(name.clone()))
        }
        Request::ProtectionMode(mode) => {
            if settings.file.fast_start_failover.enabled {
                return refused(
                    "fast-start failover is enabled: its observers decide by the protection mode of their own configuration file, so the mode is changed there (on every member and observer) and they are restarted",
                );
            }
            let next = RuntimeSettings {
                protection_mode: (*mode != settings.file.protection_mode).then_some(*mode),
                ..current.clone()
            };
            (next, None)
        }
        Request::FastStartObserveOnly(observe_only) => {
            if !settings.file.fast_start_failover.enabled {
                return refused(
                    "fast-start failover is not enabled in this member's configuration",
                );
            }
            (RuntimeSettings { fast_start_observe_only: *observe_only, ..current.clone() }, None)
        }
    };
    let effective = next.apply(&settings.file);
    if let Err((field, reason)) = effective.validate() {
        return refused(format!("{field}: {reason}"));
    }
    if let Request::Destination { name, .. } = &request
        && effective.protection_mode == ProtectionMode::MaximumProtection
        && all_destinations(&effective).iter().find(|d| d.name == *name).map(|d| d.affirm)
            != all_destinations(&settings.replication())
                .iter()
                .find(|d| d.name == *name)
                .map(|d| d.affirm)
    {
        return refused(
            "affirm cannot change under maximum_protection (an acknowledgement of what was received must never count as one of what is durable): lower the protection mode first",
        );
    }
    let running = roles.current();
    let transport = running.as_ref().and_then(|running| running.transport.as_ref());
    if let Some(transport) = transport
        && effective.protection_mode == ProtectionMode::MaximumProtection
        && transport.mode() != ProtectionMode::MaximumProtection
    {
        let needed = effective.sync_quorum.protected_by();
        let synchronized = transport.synchronized_affirm();
        if synchronized < needed {
            return refused(format!(
                "maximum_protection needs {needed} SYNC AFFIRM standby synchronized before it is raised to (there are {synchronized}): every commit would wait until then; raise it once they are (redoguard show configuration)"
            ));
        }
    }
    let applied = transport.is_some();
    let retry = match &request {
        Request::Destination { name, .. } => Some(name.clone()),
        Request::ProtectionMode(_) | Request::FastStartObserveOnly(_) => None,
    };
    let changes = {
        let (next, effective) = (next.clone(), effective.clone());
        let roles = roles.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<(String, Change)>> {
            roles.settings.set(next.clone(), effective.clone())?;
            // A primary takes observe-only on or off before this answers: the broker turns
            // it off here before it turns it off on the targets.
            if let Some(fast_start) =
                running.as_ref().and_then(|running| running.fast_start.as_ref())
            {
                fast_start.set_observe_only(next.fast_start_observe_only);
            }
            let Some(transport) = running.as_ref().and_then(|running| running.transport.as_ref())
            else {
                return Ok(Vec::new());
            };
            let changes = transport
                .reconfigure(effective.protection_mode, &effective.destinations())
                .map_err(|reason| {
                    anyhow::anyhow!("applying the change to redo transport: {reason}")
                })?;
            if let Some(name) = retry {
                transport.retry(&name);
            }
            Ok(changes)
        })
        .await??
    };
    let changes: Vec<(String, String)> = changes
        .into_iter()
        .map(|(name, change)| {
            (
                name,
                match change {
                    Change::None => "none",
                    Change::InPlace => "in_place",
                    Change::Reconnect => "reconnect",
                }
                .to_string(),
            )
        })
        .collect();
    tracing::info!(change = ?request, applied, "run-time settings changed");
    // A restarted primary waits for its enabled destinations: one deferred now is no longer
    // awaited (the DBA's word that it is not the primary), one enabled now is.
    roles.confirm();
    Ok(Edited {
        member: effective.member.clone(),
        applied,
        changes,
        protection_mode: effective.protection_mode,
        destination: edited.and_then(|name| {
            all_destinations(&effective).into_iter().find(|destination| destination.name == name)
        }),
        file: settings.path.display().to_string(),
        fast_start_observe_only: settings.fast_start_observe_only(),
    })
}

pub fn routes() -> Router<Arc<ServerState>> {
    Router::new()
        .route("/settings", get(view))
        .route("/settings/destinations/{name}", post(edit_destination))
        .route("/settings/protection_mode", post(edit_protection_mode))
        .route("/settings/fast_start", post(edit_fast_start))
}

async fn view(State(state): State<Arc<ServerState>>) -> impl IntoResponse {
    let settings = &state.roles.settings;
    let effective = settings.replication();
    axum::Json(SettingsView {
        member: effective.member.clone(),
        file: settings.path.display().to_string(),
        runtime: settings.runtime(),
        protection_mode: effective.protection_mode,
        destinations: all_destinations(&effective),
    })
}

fn answer(outcome: anyhow::Result<Edited>) -> Response {
    match outcome {
        Ok(edited) => (StatusCode::OK, axum::Json(edited)).into_response(),
        Err(error) if error.is::<Refused>() => {
            (StatusCode::CONFLICT, format!("{error}\n")).into_response()
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{error:#}\n")).into_response(),
    }
}

/// The body of `POST /settings/destinations/NAME`: the attributes to change, or `reset`.
#[derive(Debug, Default, Deserialize)]
struct DestinationBody {
    #[serde(default)]
    reset: bool,
    #[serde(flatten)]
    edit: serde_json::Map<String, serde_json::Value>,
}

async fn edit_destination(
    State(state): State<Arc<ServerState>>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let bad = |reason: String| (StatusCode::BAD_REQUEST, format!("{reason}\n")).into_response();
    let body: DestinationBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(error) => return bad(format!("the body is not a destination edit: {error}")),
    };
    let edit: DestinationEdit = match serde_json::from_value(serde_json::Value::Object(body.edit)) {
        Ok(edit) => edit,
        Err(error) => {
            return bad(format!(
                "{error} (these can be changed at run time: {})",
                transport::settings::EDITABLE.join(", ")
            ));
        }
    };
    if edit.is_empty() != body.reset {
        return bad("give either attributes to change or \"reset\": true".into());
    }
    answer(self::edit(&state.roles, Request::Destination { name, edit, reset: body.reset }).await)
}

#[derive(Deserialize)]
struct Mode {
    mode: ProtectionMode,
}

async fn edit_protection_mode(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<Mode>,
) -> Response {
    answer(edit(&state.roles, Request::ProtectionMode(query.mode)).await)
}

#[derive(Deserialize)]
struct FastStartEdit {
    observe_only: bool,
}

async fn edit_fast_start(
    State(state): State<Arc<ServerState>>,
    Query(query): Query<FastStartEdit>,
) -> Response {
    answer(edit(&state.roles, Request::FastStartObserveOnly(query.observe_only)).await)
}
