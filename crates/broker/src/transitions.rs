//! Switchover, failover and reinstate across the members, each a sequence of member-local
//! steps that a member refuses when they do not hold (`docs/roles.md`).

use std::time::{Duration, Instant};

use admin::roles::{Promoted, Reinstated, SwitchoverPrepared};
use serde::{Deserialize, Serialize};

use crate::client::{Admin, CallError};
use crate::report::{Configuration, MemberReport, gather};
use crate::validate::validate;

/// How long a role change may take on one member (it waits for redo to be shipped and
/// applied, bounded on the member's side).
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

/// How long the broker waits for a reinstate: one that cannot rewind rebuilds the member from a
/// copy of the primary's database, as long as that takes (the member's admin server answers
/// within 75 minutes).
const REINSTATE_TIMEOUT: Duration = Duration::from_secs(75 * 60);

/// Beyond a switchover target's own wait for the redo: its confirmation by the old primary and
/// its opening as the primary.
const COMPLETE_MARGIN: Duration = Duration::from_secs(60);

/// How long the broker waits for a switchover's target to answer its complete: the target waits
/// up to its `replication.switchover_wait` (up to an hour) for the old primary's redo before it
/// refuses, and an answer the broker stopped waiting for would be reported as a failure of a
/// switchover that then completes.
fn complete_timeout(target: &MemberReport) -> Duration {
    complete_timeout_for(
        target
            .status
            .as_ref()
            .and_then(|status| status.roles.as_ref())
            .and_then(|roles| roles.switchover_wait_s),
    )
}

/// `complete_timeout` for the wait a target reported (none: a version that did not report it,
/// whose wait was at most a minute by default). A day at most, whatever it says.
fn complete_timeout_for(switchover_wait_s: Option<f64>) -> Duration {
    let wait = switchover_wait_s
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .map_or(Duration::ZERO, |seconds| Duration::from_secs_f64(seconds.min(86_400.0)));
    STEP_TIMEOUT.max(wait + COMPLETE_MARGIN)
}

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
    /// Every primary fenced first (`--force`): the old one, and any older one not told yet.
    #[serde(default)]
    pub fenced: Vec<String>,
    pub promoted: Promoted,
    pub elapsed_ms: u64,
}

fn step<T: serde::de::DeserializeOwned>(admin: &str, path: &str) -> Result<T, CallError> {
    step_within(admin, path, STEP_TIMEOUT)
}

fn step_within<T: serde::de::DeserializeOwned>(
    admin: &str,
    path: &str,
    timeout: Duration,
) -> Result<T, CallError> {
    Admin::with_timeout(admin, timeout).post(path)
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
    // is completed, not started again; but not while there is a primary: then the record is
    // stale (its switchover completed, and its old primary never saw it, or a failover came
    // after it), and completing it would make a second primary (found by
    // `roles/tests/model_restart.rs`).
    if configuration.primary.is_none()
        && let Some(pending) = pending_switchover(&configuration, to)
    {
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
    let promoted = match promote(target, &primary, &prepared) {
        Ok(promoted) => promoted,
        Err(CallError::Refused(reason)) => {
            return Err(take_back(&primary_admin, &primary, to, prepared.id, &reason));
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

/// After the target refused switchover `id`: the old primary takes its role back. Safe because
/// the target recorded (durably, before it answered) that it never completes this switchover:
/// no other broker's complete of the same switchover can make it a primary too (docs/roles.md,
/// "Switchover"). The abort names the switchover: the old primary refuses it if a later one is
/// pending there (this broker's answer came late).
fn take_back(primary_admin: &str, primary: &str, to: &str, id: u64, reason: &str) -> anyhow::Error {
    let back: Result<serde_json::Value, _> =
        step(primary_admin, &format!("/roles/switchover/abort?id={id}"));
    refused(format!(
        "'{to}' refused to take over ({reason}); {}",
        match back {
            Ok(_) => format!(
                "'{primary}' is the primary again, and takes writes once every member it ships to has welcomed it (a member gone for good: `redoguard edit destination NAME state=defer`)"
            ),
            Err(error) => format!(
                "and '{primary}' could not take its role back ({error}): run `redoguard switchover --to {to}` again, or failover"
            ),
        }
    ))
}

fn promote(
    target: &MemberReport,
    from: &str,
    prepared: &SwitchoverPrepared,
) -> Result<Promoted, CallError> {
    // The old primary's fast-start failover record goes to the new primary (names are
    // configuration names: no character needs escaping in a query).
    let fast_start = prepared.fast_start.as_ref().map_or(String::new(), |record| {
        format!(
            "&active={}&announced={}",
            record.active.as_deref().unwrap_or_default(),
            record.announced_to.iter().cloned().collect::<Vec<_>>().join(",")
        )
    });
    step_within(
        &target.admin,
        &format!(
            "/roles/switchover/complete?from={from}&id={}&incarnation={}&end_seq={}&end_offset={}&last_scn={}{fast_start}",
            prepared.id,
            prepared.incarnation,
            prepared.end.seq.0,
            prepared.end.offset,
            prepared.last_scn.0
        ),
        complete_timeout(target),
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
        // Completed in the incarnation it was prepared in, as its record keeps it; not in the
        // one its old primary follows now, which a failover after it may have given it (a
        // second primary of that incarnation, found by `roles/tests/model_restart.rs`).
        let incarnation = match roles.switchover_incarnation {
            Some(incarnation) if incarnation != 0 => incarnation,
            _ => {
                return Some(Err(refused(format!(
                    "'{name}' is a standby with switchover {id} to '{to}' pending that it recorded without its incarnation (a version before it was kept): it is not completed. Give '{name}' its role back (`POST /roles/switchover/abort?id={id}` on its admin API) and run the switchover again, or `redoguard failover --to {to}`"
                ))));
            }
        };
        let now = redo.identity.incarnation.0;
        let void = if incarnation != now {
            Some(format!("follows incarnation {now} since"))
        } else if roles.sealed_below > incarnation {
            Some(format!(
                "a failover target sealed it since (it takes nothing below incarnation {})",
                roles.sealed_below
            ))
        } else {
            None
        };
        if let Some(why) = void {
            return Some(Err(refused(format!(
                "'{name}' holds switchover {id} to '{to}', prepared in incarnation {incarnation}, and {why}: a failover came after it, and it is void. Remove it (`POST /roles/switchover/abort?id={id}` on '{name}''s admin API: it gives no role back), then run the switchover again from the primary"
            ))));
        }
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
                incarnation,
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
    let promoted = promote(target, from, prepared).map_err(|error| match error {
        // Refused (this switchover now or before, an earlier broker's answer lost, say): the
        // target never completes it, and the old primary takes its role back.
        CallError::Refused(reason) => {
            let admin =
                configuration.member(from).map(|member| member.admin.clone()).unwrap_or_default();
            take_back(&admin, from, to, prepared.id, &reason)
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
    // Every member that answers and says it is a primary not fenced, whatever its incarnation:
    // the newest one, and any older one not told yet. An older one may be a primary restarted
    // and still unconfirmed, holding a welcome from before a failover: from a member that is
    // the primary now, or follows it. Left running, it opened on that stale welcome beside the
    // new primary once the DBA deferred the member that would have refused it (found by
    // `roles/tests/model_restart.rs`). So the failover is refused while any answers, and
    // `--force` fences them all before the target is asked.
    let primaries: Vec<&str> = configuration
        .members
        .iter()
        .filter(|member| {
            member.reachable
                && member.role.as_deref() == Some("primary")
                && member.fenced.is_none()
                && member.name != to
        })
        .map(|member| member.name.as_str())
        .collect();
    let mut fenced = Vec::new();
    if !primaries.is_empty() && !force {
        return Err(refused(match (configuration.primary.as_deref(), primaries.as_slice()) {
            (Some(primary), [one]) if *one == primary => format!(
                "the primary '{primary}' is reachable and open: it is not lost. Use `redoguard switchover --to {to}`, or failover --force, which fences '{primary}' first"
            ),
            _ => format!(
                "{} reachable and not fenced ({}): a failover beside a primary that answers is refused. Use failover --force, which fences {} first",
                if primaries.len() == 1 { "a primary is" } else { "primaries are" },
                described(&configuration, &primaries),
                if primaries.len() == 1 { "it" } else { "them all" },
            ),
        }));
    }
    let incarnation = target.incarnation.unwrap_or(1) + 1;
    for primary in &primaries {
        let admin =
            configuration.member(primary).map(|member| member.admin.clone()).unwrap_or_default();
        let outcome: Result<serde_json::Value, _> =
            step(&admin, &format!("/roles/fence?incarnation={incarnation}&primary={to}"));
        if let Err(error) = outcome {
            return Err(refused(if fenced.is_empty() {
                format!("'{primary}' could not be fenced ({error}): nothing was changed")
            } else {
                format!(
                    "'{primary}' could not be fenced ({error}): {} fenced, nothing else was changed",
                    fenced.iter().map(|name| format!("'{name}'")).collect::<Vec<_>>().join(", ")
                )
            }));
        }
        fenced.push(primary.to_string());
    }
    let fenced_any = !fenced.is_empty();
    let fenced_names = fenced.iter().map(|name| format!("'{name}'")).collect::<Vec<_>>().join(", ");
    let promoted: Promoted = step(
        &target.admin,
        &format!("/roles/failover?immediate={immediate}&force={force}"),
    )
    .map_err(|error| match error {
        CallError::Refused(reason) => refused(format!("'{to}' refused to take over: {reason}")),
        CallError::Failed(reason) if fenced_any => anyhow::anyhow!(
            "{fenced_names} {} fenced, but the failover on '{to}' failed part way ({reason}): no member is the primary now; once the cause is fixed, run `redoguard failover --to {to}` again (`redoguard show configuration` shows where each member stands)",
            if fenced.len() == 1 { "is" } else { "are" }
        ),
        CallError::Failed(reason) => anyhow::anyhow!(
            "failover on '{to}' failed part way ({reason}): run `redoguard show configuration`"
        ),
    })?;
    Ok(Failover {
        to: to.to_string(),
        old_primary_fenced: old_primary.as_ref().is_some_and(|old| fenced.contains(old)),
        old_primary,
        fenced,
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
    step_within(&member.admin, &format!("/roles/reinstate?primary={primary}"), REINSTATE_TIMEOUT)
        .map_err(|error| match error {
            CallError::Refused(reason) => refused(format!("'{name}' refused: {reason}")),
            CallError::Failed(reason) => anyhow::anyhow!(
                "reinstating '{name}' failed part way ({reason}): run `redoguard show configuration`"
            ),
        })
}

/// Primaries named with their incarnation and gate, for a refusal.
fn described(configuration: &Configuration, names: &[&str]) -> String {
    names
        .iter()
        .map(|name| {
            let member = configuration.member(name);
            let incarnation = member.and_then(|member| member.incarnation).unwrap_or_default();
            match member.and_then(|member| member.writes.as_deref()) {
                Some(writes) => format!("'{name}' in incarnation {incarnation}, writes {writes}"),
                None => format!("'{name}' in incarnation {incarnation}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broker_waits_for_a_switchover_target_as_long_as_the_target_waits_and_a_margin() {
        // The default minute, or nothing reported: the usual two minutes.
        assert_eq!(complete_timeout_for(None), STEP_TIMEOUT);
        assert_eq!(complete_timeout_for(Some(60.0)), STEP_TIMEOUT);
        // A longer wait: the broker does not give up before the target answers.
        assert_eq!(complete_timeout_for(Some(600.0)), Duration::from_secs(660));
        assert_eq!(complete_timeout_for(Some(3600.0)), Duration::from_secs(3660));
        // Nonsense from a member is bounded, never a panic.
        for nonsense in [f64::NAN, f64::INFINITY, -5.0] {
            assert_eq!(complete_timeout_for(Some(nonsense)), STEP_TIMEOUT, "{nonsense}");
        }
        assert_eq!(complete_timeout_for(Some(1e12)), Duration::from_secs(86_400 + 60));
    }
}
