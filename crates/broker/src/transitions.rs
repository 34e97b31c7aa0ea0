//! Switchover, failover and reinstate across the members, each a sequence of member-local
//! steps that a member refuses when they do not hold (`docs/roles.md`).

use std::time::{Duration, Instant};

use admin::roles::{Promoted, Reinstated, SwitchoverPrepared};
use serde::{Deserialize, Serialize};

use crate::client::{Admin, CallError};
use crate::report::{Configuration, gather};
use crate::validate::validate;

/// How long a role change may take on one member (it waits for redo to be shipped and
/// applied, bounded on the member's side).
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// What a switchover did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Switchover {
    pub from: String,
    pub to: String,
    pub prepared: SwitchoverPrepared,
    pub promoted: Promoted,
    /// From the command to the new primary taking writes.
    pub elapsed_ms: u64,
}

/// What a failover did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failover {
    pub to: String,
    /// The old primary, and whether it was reachable (and so fenced first).
    pub old_primary: Option<String>,
    pub old_primary_fenced: bool,
    pub promoted: Promoted,
    pub elapsed_ms: u64,
}

fn step<T: serde::de::DeserializeOwned>(admin: &str, path: &str) -> Result<T, CallError> {
    Admin::with_timeout(admin, STEP_TIMEOUT).post(path)
}

fn refused(reason: impl Into<String>) -> anyhow::Error {
    anyhow::anyhow!("{}", reason.into())
}

/// Moves the primary role to standby `to`, losing nothing. Refused (nothing changed) when `to`
/// is not ready.
pub fn switchover(addr: &str, to: &str) -> anyhow::Result<Switchover> {
    let started = Instant::now();
    let configuration = gather(addr)?;
    let target = configuration
        .member(to)
        .ok_or_else(|| refused(format!("'{to}' is not a member of this configuration")))?;
    // A switchover the broker left half done (the old primary is a standby waiting for `to`)
    // is completed, not started again.
    if let Some(pending) = pending_switchover(&configuration, to) {
        return complete(&configuration, &pending?, to, started);
    }
    let Some(primary) = configuration.primary.clone() else {
        return Err(refused("no member is an open primary: a switchover needs one (use failover)"));
    };
    if primary == to {
        return Err(refused(format!("'{to}' is the primary already")));
    }
    let validation = validate(&configuration, to);
    if !validation.ready_for_switchover {
        let missing: Vec<String> = validation
            .findings
            .iter()
            .filter(|finding| !finding.ok)
            .map(|finding| finding.what.clone())
            .collect();
        return Err(refused(format!(
            "'{to}' is not ready for a switchover: {}",
            missing.join("; ")
        )));
    }
    let primary_admin =
        configuration.member(&primary).map(|member| member.admin.clone()).unwrap_or_default();
    let prepared: SwitchoverPrepared =
        step(&primary_admin, &format!("/roles/switchover/prepare?to={to}"))
            .map_err(|error| refused(format!("'{primary}' could not hand over: {error}")))?;
    let promoted = match promote(&target.admin, &primary, &prepared) {
        Ok(promoted) => promoted,
        Err(CallError::Refused(reason)) => {
            return Err(take_back(&primary_admin, &primary, to, &reason));
        }
        Err(CallError::Failed(reason)) => {
            return Err(anyhow::anyhow!(
                "'{primary}' is now a standby, but completing the switchover on '{to}' failed ({reason}): run `redoguard show configuration`, then `redoguard switchover --to {to}` again to complete it"
            ));
        }
    };
    Ok(Switchover {
        from: primary,
        to: to.to_string(),
        prepared,
        promoted,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// After the target refused: the old primary takes its role back. Safe because the target
/// recorded (durably, before it answered) that it never completes this switchover: no other
/// broker's complete of the same switchover can make it a primary too (docs/roles.md,
/// "Switchover").
fn take_back(primary_admin: &str, primary: &str, to: &str, reason: &str) -> anyhow::Error {
    let back: Result<serde_json::Value, _> = step(primary_admin, "/roles/switchover/abort");
    refused(format!(
        "'{to}' refused to take over ({reason}); {}",
        match back {
            Ok(_) => format!("'{primary}' is the primary again"),
            Err(error) => format!(
                "and '{primary}' could not take its role back ({error}): run `redoguard switchover --to {to}` again, or failover"
            ),
        }
    ))
}

fn promote(admin: &str, from: &str, prepared: &SwitchoverPrepared) -> Result<Promoted, CallError> {
    // The old primary's fast-start failover record goes to the new primary (names are
    // configuration names: no character needs escaping in a query).
    let fast_start = prepared.fast_start.as_ref().map_or(String::new(), |record| {
        format!(
            "&active={}&announced={}",
            record.active.as_deref().unwrap_or_default(),
            record.announced_to.iter().cloned().collect::<Vec<_>>().join(",")
        )
    });
    step(
        admin,
        &format!(
            "/roles/switchover/complete?from={from}&id={}&incarnation={}&end_seq={}&end_offset={}&last_scn={}{fast_start}",
            prepared.id,
            prepared.incarnation,
            prepared.end.seq.0,
            prepared.end.offset,
            prepared.last_scn.0
        ),
    )
}

/// The old primary of a switchover to `to` that was prepared and not completed, with where its
/// redo ends. `Err` when its switchover has no id (recorded by a version before ids): the
/// target cannot tell it from one it refused, whose old primary may be the primary again.
fn pending_switchover(
    configuration: &Configuration,
    to: &str,
) -> Option<anyhow::Result<(String, SwitchoverPrepared)>> {
    configuration.members.iter().find_map(|member| {
        let status = member.status.as_ref()?;
        let roles = status.roles.as_ref()?;
        if roles.switchover_to.as_deref() != Some(to) || member.role.as_deref() != Some("standby") {
            return None;
        }
        let name = &member.name;
        let id = match roles.switchover_id {
            Some(id) if id != 0 => id,
            _ => {
                return Some(Err(refused(format!(
                    "'{name}' is a standby with a switchover to '{to}' pending that it recorded without an id (a version before switchover ids): it is not completed, since '{to}' could not tell it from one it refused. Give '{name}' its role back (`POST /roles/switchover/abort` on its admin API) and run the switchover again, or `redoguard failover --to {to}`"
                ))));
            }
        };
        let redo = &status.database.redo;
        Some(Ok((
            name.clone(),
            SwitchoverPrepared {
                id,
                end: status
                    .replication
                    .standby
                    .as_ref()
                    .map_or(redo.durable_addr, |standby| standby.received),
                last_scn: status.database.applied_scn,
                incarnation: redo.identity.incarnation.0,
                elapsed_ms: 0,
                // Not known here: the new primary takes the conservative record (every
                // target counted as told of an observer).
                fast_start: None,
            },
        )))
    })
}

fn complete(
    configuration: &Configuration,
    pending: &(String, SwitchoverPrepared),
    to: &str,
    started: Instant,
) -> anyhow::Result<Switchover> {
    let (from, prepared) = pending;
    let target = configuration.member(to).expect("checked");
    let promoted = promote(&target.admin, from, prepared).map_err(|error| match error {
        // Refused (this switchover now or before, an earlier broker's answer lost, say): the
        // target never completes it, and the old primary takes its role back.
        CallError::Refused(reason) => {
            let admin =
                configuration.member(from).map(|member| member.admin.clone()).unwrap_or_default();
            take_back(&admin, from, to, &reason)
        }
        CallError::Failed(reason) => anyhow::anyhow!(
            "completing the switchover from '{from}' on '{to}' failed ({reason}): '{from}' stays a standby; run `redoguard show configuration`, then `redoguard switchover --to {to}` again"
        ),
    })?;
    Ok(Switchover {
        from: from.clone(),
        to: to.to_string(),
        prepared: prepared.clone(),
        promoted,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Makes standby `to` the primary of a new incarnation because the primary is lost. Refused
/// while the primary is reachable and open (unless `force`: it is then fenced first).
pub fn failover(addr: &str, to: &str, immediate: bool, force: bool) -> anyhow::Result<Failover> {
    let started = Instant::now();
    let configuration = gather(addr)?;
    let target = configuration
        .member(to)
        .ok_or_else(|| refused(format!("'{to}' is not a member of this configuration")))?;
    if !target.reachable {
        return Err(refused(format!(
            "'{to}' cannot be reached: {}",
            target.error.as_deref().unwrap_or("no answer")
        )));
    }
    if target.role.as_deref() != Some("standby") {
        return Err(refused(format!("'{to}' is not a standby")));
    }
    let old_primary = configuration.primary.clone().or_else(|| target.follows.clone());
    let mut fenced = false;
    if let Some(primary) = configuration.primary.as_deref() {
        if !force {
            return Err(refused(format!(
                "the primary '{primary}' is reachable and open: it is not lost. Use `redoguard switchover --to {to}`, or failover --force, which fences '{primary}' first"
            )));
        }
        let admin =
            configuration.member(primary).map(|member| member.admin.clone()).unwrap_or_default();
        let incarnation = target.incarnation.unwrap_or(1) + 1;
        let outcome: Result<serde_json::Value, _> =
            step(&admin, &format!("/roles/fence?incarnation={incarnation}&primary={to}"));
        match outcome {
            Ok(_) => fenced = true,
            Err(error) => {
                return Err(refused(format!(
                    "'{primary}' could not be fenced ({error}): nothing was changed"
                )));
            }
        }
    }
    let promoted: Promoted = step(
        &target.admin,
        &format!("/roles/failover?immediate={immediate}&force={force}"),
    )
    .map_err(|error| match error {
        CallError::Refused(reason) => refused(format!("'{to}' refused to take over: {reason}")),
        CallError::Failed(reason) if fenced => anyhow::anyhow!(
            "'{}' is fenced, but the failover on '{to}' failed part way ({reason}): no member is the primary now; once the cause is fixed, run `redoguard failover --to {to}` again (`redoguard show configuration` shows where each member stands)",
            old_primary.as_deref().unwrap_or("the old primary")
        ),
        CallError::Failed(reason) => anyhow::anyhow!(
            "failover on '{to}' failed part way ({reason}): run `redoguard show configuration`"
        ),
    })?;
    Ok(Failover {
        to: to.to_string(),
        old_primary,
        old_primary_fenced: fenced,
        promoted,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Makes fenced member `name` a standby of the current primary.
pub fn reinstate(addr: &str, name: &str) -> anyhow::Result<Reinstated> {
    let configuration = gather(addr)?;
    let member = configuration
        .member(name)
        .ok_or_else(|| refused(format!("'{name}' is not a member of this configuration")))?;
    if !member.reachable {
        return Err(refused(format!(
            "'{name}' cannot be reached ({}): start it first (it starts fenced and takes no write)",
            member.error.as_deref().unwrap_or("no answer")
        )));
    }
    let Some(primary) = configuration.primary.clone() else {
        return Err(refused("no member is an open primary to reinstate it under"));
    };
    if primary == name {
        return Err(refused(format!("'{name}' is the primary")));
    }
    step(&member.admin, &format!("/roles/reinstate?primary={primary}")).map_err(|error| match error
    {
        CallError::Refused(reason) => refused(format!("'{name}' refused: {reason}")),
        CallError::Failed(reason) => anyhow::anyhow!(
            "reinstating '{name}' failed part way ({reason}): run `redoguard show configuration`"
        ),
    })
}
