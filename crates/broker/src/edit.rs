//! Run-time changes of the configuration (Data Guard's `EDIT DATABASE … SET PROPERTY`, `SET
//! STATE`, `EDIT CONFIGURATION SET PROTECTION MODE`): a destination deferred, enabled or
//! edited, or the protection mode. Each member keeps its own run-time settings (`settings.json`
//! in its data directory), so the change goes to every member: the primary first, which checks
//! it against the running configuration and applies it to its redo transport at once (if it
//! refuses, nothing changed anywhere), then every other member, so that whichever becomes
//! primary later ships the same way. A member that cannot be reached is named in the answer:
//! run the command again once it is up. Fast-start failover observe-only (planned maintenance)
//! goes the other way round when it is turned on: the standbys first, the primary last.

use admin::roles::Edited;
use serde::{Deserialize, Serialize};
pub use transport::{DestinationEdit, ProtectionMode};

use crate::client::{Admin, CallError};

/// What one change did on each member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EditReport {
    /// The primary that applied it at once, if one was open.
    pub primary: Option<String>,
    pub members: Vec<MemberOutcome>,
}

/// One member's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberOutcome {
    pub member: String,
    pub edited: Option<Edited>,
    /// Why it did not take the change (refused, or not reached).
    pub error: Option<String>,
}

/// What is changed.
#[derive(Debug, Clone)]
pub enum EditRequest {
    Destination {
        name: String,
        edit: DestinationEdit,
    },
    /// A destination back to what the configuration files say.
    Reset {
        name: String,
    },
    ProtectionMode(ProtectionMode),
    /// Fast-start failover observe-only (planned maintenance) on or off.
    FastStartObserveOnly(bool),
}

impl EditRequest {
    fn send(&self, admin: &Admin) -> Result<Edited, CallError> {
        match self {
            EditRequest::Destination { name, edit } => {
                admin.post_json(&format!("/settings/destinations/{name}"), edit)
            }
            EditRequest::Reset { name } => admin.post_json(
                &format!("/settings/destinations/{name}"),
                &serde_json::json!({ "reset": true }),
            ),
            EditRequest::ProtectionMode(mode) => {
                let mode = serde_json::to_value(mode)
                    .ok()
                    .and_then(|value| value.as_str().map(str::to_string))
                    .unwrap_or_default();
                admin.post(&format!("/settings/protection_mode?mode={mode}"))
            }
            EditRequest::FastStartObserveOnly(observe_only) => {
                admin.post(&format!("/settings/fast_start?observe_only={observe_only}"))
            }
        }
    }
}

/// Makes the change through the admin API of any member at `addr` (see the module's doc).
/// Refused, with nothing changed, when the primary refuses it.
pub fn edit(addr: &str, request: &EditRequest) -> anyhow::Result<EditReport> {
    let view = Admin::new(addr)
        .configuration()
        .map_err(|error| anyhow::anyhow!("cannot read the configuration from {addr}: {error}"))?;
    if view.members.is_empty() {
        // The single-role form: this server is the configuration's only primary.
        let edited = request.send(&Admin::new(addr)).map_err(refusal)?;
        return Ok(EditReport {
            primary: edited.applied.then(|| addr.to_string()),
            members: vec![MemberOutcome {
                member: addr.to_string(),
                edited: Some(edited),
                error: None,
            }],
        });
    }
    let configuration = crate::gather(addr)?;
    if let EditRequest::FastStartObserveOnly(true) = request {
        return observe_only(&configuration, request);
    }
    let primary = configuration.primary.clone();
    let mut members = Vec::new();
    if let Some(primary) = &primary {
        let admin = configuration.admin(primary).expect("the primary is a member");
        let edited = request
            .send(&admin)
            .map_err(|error| anyhow::anyhow!("'{primary}' (the primary): {}", refusal(error)))?;
        members.push(MemberOutcome { member: primary.clone(), edited: Some(edited), error: None });
    }
    for member in &configuration.members {
        if Some(&member.name) == primary.as_ref() {
            continue;
        }
        let outcome = match request.send(&Admin::new(&member.admin)) {
            Ok(edited) => {
                MemberOutcome { member: member.name.clone(), edited: Some(edited), error: None }
            }
            Err(error) => MemberOutcome {
                member: member.name.clone(),
                edited: None,
                error: Some(error.to_string()),
            },
        };
        members.push(outcome);
    }
    if primary.is_none() && members.iter().all(|member| member.edited.is_none()) {
        let reasons: Vec<String> = members
            .iter()
            .map(|member| {
                format!("{}: {}", member.member, member.error.clone().unwrap_or_default())
            })
            .collect();
        anyhow::bail!("no member took the change: {}", reasons.join("; "));
    }
    Ok(EditReport { primary, members })
}

/// Fast-start failover observe-only on: every member but the primary first (each then
/// refuses a failover), and the primary (which then needs no lease) only once they all did.
/// A member that cannot be reached leaves the primary as it was: refused. (Off is the usual
/// order: the primary first, which needs its lease again before any target takes a failover.)
fn observe_only(
    configuration: &crate::Configuration,
    request: &EditRequest,
) -> anyhow::Result<EditReport> {
    let primary = configuration.primary.clone();
    let mut members = Vec::new();
    for member in &configuration.members {
        if Some(&member.name) == primary.as_ref() {
            continue;
        }
        let edited = request.send(&Admin::new(&member.admin)).map_err(|error| {
            anyhow::anyhow!(
                "'{}' did not take observe-only ({}): the primary is left as it was, so a failover can still happen; run the command again once '{}' is up",
                member.name,
                refusal(error),
                member.name
            )
        })?;
        members.push(MemberOutcome {
            member: member.name.clone(),
            edited: Some(edited),
            error: None,
        });
    }
    if let Some(primary) = &primary {
        let admin = configuration.admin(primary).expect("the primary is a member");
        let edited = request
            .send(&admin)
            .map_err(|error| anyhow::anyhow!("'{primary}' (the primary): {}", refusal(error)))?;
        members.insert(
            0,
            MemberOutcome { member: primary.clone(), edited: Some(edited), error: None },
        );
    }
    Ok(EditReport { primary, members })
}

fn refusal(error: CallError) -> anyhow::Error {
    match error {
        CallError::Refused(reason) => anyhow::anyhow!("refused, nothing changed: {reason}"),
        CallError::Failed(reason) => anyhow::anyhow!("{reason}"),
    }
}

/// The report for a person.
pub fn render(report: &EditReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    match &report.primary {
        Some(primary) => {
            let _ = writeln!(out, "Applied on the primary '{primary}' at once.");
        }
        None => {
            let _ = writeln!(out, "No open primary: kept by the members for when one opens.");
        }
    }
    for member in &report.members {
        match (&member.edited, &member.error) {
            (Some(edited), _) => {
                let what = match &edited.destination {
                    Some(destination) => format!(
                        "{}: state={} transport={:?} affirm={} net_timeout={:?} compression={} max_connections={}",
                        destination.name,
                        destination.state.name(),
                        destination.transport,
                        destination.affirm,
                        destination.net_timeout,
                        destination.compression.name(),
                        destination.max_connections
                    ),
                    None => format!(
                        "protection mode {:?}{}",
                        edited.protection_mode,
                        if edited.fast_start_observe_only {
                            ", fast-start failover observe-only"
                        } else {
                            ""
                        }
                    ),
                };
                let changes = if edited.changes.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (transport: {})",
                        edited
                            .changes
                            .iter()
                            .map(|(name, change)| format!("{name} {change}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                let _ = writeln!(
                    out,
                    "  {:<12} kept in {}: {what}{changes}",
                    member.member, edited.file
                );
            }
            (None, error) => {
                let _ = writeln!(
                    out,
                    "  {:<12} NOT CHANGED: {} (run the command again once it is up)",
                    member.member,
                    error.clone().unwrap_or_default()
                );
            }
        }
    }
    out
}
