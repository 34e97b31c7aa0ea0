//! Is a standby ready to become the primary? (`redoguard validate NAME`, and the checks a
//! switchover makes before it asks anything of a member.)

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::report::{Configuration, LAG_THRESHOLD_S};

/// One check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub ok: bool,
    pub what: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Validation {
    pub name: String,
    /// Every check passed: a switchover to it loses nothing and completes.
    pub ready_for_switchover: bool,
    /// It can be failed over to (the primary is lost): reachable, a standby, not fenced.
    pub ready_for_failover: bool,
    pub findings: Vec<Finding>,
}

/// Validates member `name` of `configuration` as a target.
pub fn validate(configuration: &Configuration, name: &str) -> Validation {
    let mut findings = Vec::new();
    let mut check = |ok: bool, what: String| findings.push(Finding { ok, what });
    let Some(member) = configuration.member(name) else {
        check(false, format!("'{name}' is not a member of the configuration"));
        return Validation {
            name: name.into(),
            ready_for_switchover: false,
            ready_for_failover: false,
            findings,
        };
    };
    if !member.reachable {
        check(
            false,
            format!("cannot be reached: {}", member.error.as_deref().unwrap_or("no answer")),
        );
        return Validation {
            name: name.into(),
            ready_for_switchover: false,
            ready_for_failover: false,
            findings,
        };
    }
    check(true, "reachable".into());
    if member.far_sync {
        check(false, format!("'{name}' is a far sync: it relays redo and is never a primary"));
        return Validation {
            name: name.into(),
            ready_for_switchover: false,
            ready_for_failover: false,
            findings,
        };
    }
    let standby = member.role.as_deref() == Some("standby");
    check(standby, format!("role: {}", member.role.as_deref().unwrap_or("?")));
    check(
        member.fenced.is_none(),
        match &member.fenced {
            None => "not fenced".into(),
            Some(fence) => format!(
                "fenced by incarnation {} of '{}': reinstate it first",
                fence.incarnation, fence.by
            ),
        },
    );
    let failover_ready = standby && member.fenced.is_none();
    let primary = configuration.primary.as_deref();
    check(
        primary.is_some(),
        match primary {
            Some(primary) => format!("the primary is '{primary}'"),
            None => "no open primary: only a failover can make it primary".into(),
        },
    );
    check(
        member.connected == Some(true),
        match (&member.follows, member.connected) {
            (Some(follows), Some(true)) => format!("connected to its primary '{follows}'"),
            _ => "not connected to a primary".into(),
        },
    );
    if let (Some(follows), Some(primary)) = (member.follows.as_deref(), primary) {
        check(
            follows == primary,
            format!(
                "follows '{follows}'{}",
                if follows == primary { "" } else { ", not the primary" }
            ),
        );
    }
    let caught_up = matches!(member.state.as_deref(), Some("SYNCHRONIZED" | "STREAMING"));
    check(
        caught_up,
        format!(
            "state at the primary: {}{}",
            member.state.as_deref().unwrap_or("unknown"),
            if caught_up { "" } else { " (it must be SYNCHRONIZED, or STREAMING for ASYNC)" }
        ),
    );
    if let (Some(received), Some(complete)) = (member.received, member.complete_through_seq) {
        let gap = complete.0 + 1 < received.seq.0;
        check(
            !gap,
            if gap {
                format!("logs {}..={} are missing (a gap)", complete.0 + 1, received.seq.0 - 1)
            } else {
                "no gap".into()
            },
        );
    }
    for (kind, lag) in [("transport", member.transport_lag_s), ("apply", member.apply_lag_s)] {
        if let Some(lag) = lag {
            check(
                lag <= LAG_THRESHOLD_S,
                format!("{kind} lag {lag:.1} s (threshold {LAG_THRESHOLD_S} s)"),
            );
        }
    }
    if let (Some(primary), Some(status)) =
        (primary.and_then(|primary| configuration.member(primary)), &member.status)
        && let Some(primary_status) = &primary.status
    {
        let ours = &status.database.redo;
        let theirs = &primary_status.database.redo;
        let groups_ok = ours.groups.len() >= theirs.groups.len();
        check(
            groups_ok,
            format!(
                "standby log groups: {} (the primary has {}{})",
                ours.groups.len(),
                theirs.groups.len(),
                if groups_ok { "" } else { "; give it at least as many, one more is better" }
            ),
        );
        // It opens unconfirmed (a failover may have come after the prepare) and takes writes
        // once every member it ships to has welcomed it (`server::role::confirmation`): one
        // the primary ships to that cannot be reached would hold it closed.
        let unreachable: Vec<&str> = primary_status
            .replication
            .destinations
            .iter()
            .filter(|destination| destination.state != "defer" && destination.name != name)
            .filter(|destination| {
                configuration.member(&destination.name).is_some_and(|member| !member.reachable)
            })
            .map(|destination| destination.name.as_str())
            .collect();
        check(
            unreachable.is_empty(),
            match unreachable[..] {
                [] => "every destination of the primary is reachable".into(),
                _ => format!(
                    "{} cannot be reached: '{name}' would take writes only once each has welcomed it (start it, or defer it: `redoguard edit destination NAME state=defer`)",
                    unreachable
                        .iter()
                        .map(|member| format!("'{member}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
        );
        let size = |redo: &redo::RedoStatus| redo.groups.first().map(|group| group.size_bytes);
        check(
            size(ours) == size(theirs),
            format!(
                "log size {} (the primary's: {})",
                size(ours).map_or("-".into(), |bytes| bytes.to_string()),
                size(theirs).map_or("-".into(), |bytes| bytes.to_string())
            ),
        );
    }
    let ready = findings.iter().all(|finding| finding.ok);
    Validation {
        name: name.into(),
        ready_for_switchover: ready,
        ready_for_failover: failover_ready,
        findings,
    }
}

pub fn render(validation: &Validation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Database - {}", validation.name);
    for finding in &validation.findings {
        let _ = writeln!(out, "  [{}] {}", if finding.ok { " ok " } else { "FAIL" }, finding.what);
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  Ready for switchover: {}",
        if validation.ready_for_switchover { "Yes" } else { "No" }
    );
    let _ = writeln!(
        out,
        "  Ready for failover:   {}",
        if validation.ready_for_failover { "Yes (if the primary is lost)" } else { "No" }
    );
    out
}
