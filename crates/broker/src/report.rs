//! The configuration as its members report it: who is primary, each standby's transport,
//! state and lags, what is wrong. `redoguard show configuration` prints it; `validate` and the
//! role changes decide from it.

use std::fmt::Write as _;
use std::time::Duration;

use admin::ServerStatus;
use redo::{Fence, LogSeq, RedoAddr, Scn};
use serde::{Deserialize, Serialize};
use transport::{MemberConfig, ProtectionMode};

use crate::client::{Admin, CallError};

/// Lags beyond this are a warning (Data Guard's default threshold); the same on the web page.
pub const LAG_THRESHOLD_S: f64 = admin::page::LAG_THRESHOLD_S;

/// One member, as it reports itself (and as the primary sees it, for a standby).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberReport {
    pub name: String,
    pub resp: String,
    pub admin: String,
    pub redo: String,
    /// How a primary ships to it: `SYNC AFFIRM`, `SYNC NOAFFIRM` or `ASYNC` (under the
    /// primary's routes, how it receives).
    pub transport: String,
    /// A far sync: never a primary, never a failover target.
    #[serde(default)]
    pub far_sync: bool,
    pub reachable: bool,
    /// Why it could not be reached.
    pub error: Option<String>,
    pub role: Option<String>,
    pub incarnation: Option<u32>,
    pub fenced: Option<Fence>,
    /// Whether it takes writes, and if not why (`OPEN`, `STANDBY`, `FENCED`, ...).
    pub writes: Option<String>,
    /// A standby: the member it follows, and whether that primary is connected now.
    pub follows: Option<String>,
    pub connected: Option<bool>,
    /// A standby, as the primary sees it: `SYNCHRONIZED`, `STREAMING`, `CATCHING_UP`, ...
    pub state: Option<String>,
    pub synchronized: Option<bool>,
    pub transport_lag_s: Option<f64>,
    pub apply_lag_s: Option<f64>,
    pub applied_scn: Option<Scn>,
    pub received: Option<RedoAddr>,
    pub complete_through_seq: Option<LogSeq>,
    /// A primary: the newest SCN and the durable one.
    pub next_scn: Option<Scn>,
    pub durable_scn: Option<Scn>,
    pub last_error: Option<String>,
    pub warnings: Vec<String>,
    /// The member's whole status, for callers that need more.
    #[serde(skip)]
    pub status: Option<Box<ServerStatus>>,
}

/// The configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Configuration {
    pub protection_mode: ProtectionMode,
    /// The open (not fenced) primary, if exactly one member says it is.
    pub primary: Option<String>,
    pub members: Vec<MemberReport>,
    pub lag_threshold_s: f64,
    /// Everything that needs a DBA's attention; empty when all is well.
    pub warnings: Vec<String>,
    /// The redo routes under the primary: who receives from whom (every standby from the
    /// primary, without routes).
    #[serde(default)]
    pub routes: Option<transport::RouteTree>,
}

impl Configuration {
    pub fn member(&self, name: &str) -> Option<&MemberReport> {
        self.members.iter().find(|member| member.name == name)
    }

    /// The admin API of member `name`.
    pub fn admin(&self, name: &str) -> Option<Admin> {
        self.member(name).map(|member| Admin::new(&member.admin))
    }
}

fn transport_of(member: &MemberConfig) -> String {
    transport::transport_name(member.transport, member.affirm).to_string()
}

fn phase_name(phase: transport::Phase) -> String {
    serde_json::to_value(phase)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{phase:?}"))
}

/// Asks the member at `addr` for the configuration, then every member for its status.
pub fn gather(addr: &str) -> anyhow::Result<Configuration> {
    let view = Admin::new(addr)
        .configuration()
        .map_err(|error| anyhow::anyhow!("cannot read the configuration from {addr}: {error}"))?;
    if view.members.is_empty() {
        anyhow::bail!(
            "{addr} runs the single-role form of the configuration: it names no members ([[replication.members]]), so roles cannot change"
        );
    }
    let statuses: Vec<Result<ServerStatus, CallError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = view
            .members
            .iter()
            .map(|member| {
                scope.spawn(|| Admin::with_timeout(&member.admin, Duration::from_secs(3)).status())
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| Err(CallError::Failed("panicked".into())))
            })
            .collect()
    });
    let mut members: Vec<MemberReport> = view
        .members
        .iter()
        .zip(statuses)
        .map(|(member, status)| report_of(member, status))
        .collect();
    let primaries: Vec<&MemberReport> = members
        .iter()
        .filter(|member| member.role.as_deref() == Some("primary") && member.fenced.is_none())
        .collect();
    let mut warnings = Vec::new();
    // Of several that say so (a partition, or an old primary not told yet), the one of the
    // newest incarnation is the primary; one of an older incarnation has been failed over
    // (it takes no write, and is fenced once it hears of the newer one). Two in the newest
    // incarnation are named, and neither is taken.
    let newest = primaries.iter().filter_map(|member| member.incarnation).max();
    let in_newest: Vec<&&MemberReport> =
        primaries.iter().filter(|member| member.incarnation == newest).collect();
    for stale in primaries.iter().filter(|member| member.incarnation < newest) {
        warnings.push(format!(
            "'{}' says it is an open primary in incarnation {}, older than {}: it has been failed over (it is fenced when it hears of the newer one)",
            stale.name,
            stale.incarnation.unwrap_or_default(),
            newest.unwrap_or_default()
        ));
    }
    let primary = match in_newest.as_slice() {
        [one] => Some(one.name.clone()),
        [] => {
            warnings.push("no member is an open primary".to_string());
            None
        }
        many => {
            warnings.push(format!(
                "{} members say they are an open primary in incarnation {}: {}",
                many.len(),
                newest.unwrap_or_default(),
                many.iter().map(|member| member.name.as_str()).collect::<Vec<_>>().join(", ")
            ));
            None
        }
    };
    warnings.extend(fast_start_warnings(&members, primary.as_deref()));
    // A standby, as its primary sees it.
    if let Some(primary) = primary
        .as_deref()
        .and_then(|name| members.iter().find(|member| member.name == name))
        .cloned()
        && let Some(status) = &primary.status
    {
        let tree = transport::route_tree(&view.members, &primary.name).ok();
        for destination in &status.replication.destinations {
            // An alternate route standing by (`alternate_of`): the member is shown as the
            // member it receives from sees it (below), not as a deferred destination.
            let alternate = tree.as_ref().is_some_and(|tree| {
                tree.source_of(&destination.name) != Some(primary.name.as_str())
            });
            if alternate && destination.phase == transport::Phase::Deferred {
                continue;
            }
            if let Some(member) = members.iter_mut().find(|member| member.name == destination.name)
            {
                member.state = Some(phase_name(destination.phase));
                member.synchronized = Some(destination.phase == transport::Phase::Synchronized);
                if destination.phase == transport::Phase::Deferred {
                    member.last_error = Some(format!(
                        "transport deferred: the primary ships nothing to it (redoguard edit destination {} state=enable)",
                        destination.name
                    ));
                } else if member.last_error.is_none()
                    && destination.phase != transport::Phase::Synchronized
                    && destination.phase != transport::Phase::Streaming
                {
                    member.last_error = destination.last_error.clone();
                }
            }
        }
    }
    // Under the primary's routes a standby may receive from another member, with the route's
    // transport.
    let routes =
        primary.as_deref().and_then(|primary| transport::route_tree(&view.members, primary).ok());
    if let Some(tree) = &routes {
        for hop in &tree.hops {
            // A member behind a forwarder, as the forwarder sees it (cascading).
            let forwarded = (hop.from != tree.primary)
                .then(|| {
                    let forwarder = members.iter().find(|member| member.name == hop.from)?;
                    let status = forwarder.status.as_ref()?;
                    status
                        .replication
                        .destinations
                        .iter()
                        .find(|destination| destination.name == hop.member)
                        .cloned()
                })
                .flatten();
            if let Some(member) = members.iter_mut().find(|member| member.name == hop.member) {
                member.transport = transport::transport_name(hop.transport, hop.affirm).into();
                if let Some(destination) = forwarded {
                    member.state = Some(phase_name(destination.phase));
                    member.synchronized = Some(false);
                    if member.last_error.is_none()
                        && destination.phase != transport::Phase::Streaming
                    {
                        member.last_error = destination.last_error.clone();
                    }
                }
            }
        }
    }
    for member in &mut members {
        let source = routes.as_ref().and_then(|tree| tree.source_of(&member.name));
        member.warnings = warnings_of(member, primary.as_deref(), source);
        warnings
            .extend(member.warnings.iter().map(|warning| format!("{}: {warning}", member.name)));
    }
    Ok(Configuration {
        protection_mode: view.protection_mode,
        primary,
        members,
        lag_threshold_s: LAG_THRESHOLD_S,
        warnings,
        routes,
    })
}

fn report_of(member: &MemberConfig, status: Result<ServerStatus, CallError>) -> MemberReport {
    let mut report = MemberReport {
        name: member.name.clone(),
        resp: member.resp.clone(),
        admin: member.admin.clone(),
        redo: member.redo.clone(),
        transport: transport_of(member),
        far_sync: member.kind == transport::MemberKind::FarSync,
        reachable: false,
        error: None,
        role: None,
        incarnation: None,
        fenced: None,
        writes: None,
        follows: None,
        connected: None,
        state: None,
        synchronized: None,
        transport_lag_s: None,
        apply_lag_s: None,
        applied_scn: None,
        received: None,
        complete_through_seq: None,
        next_scn: None,
        durable_scn: None,
        last_error: None,
        warnings: Vec::new(),
        status: None,
    };
    let status = match status {
        Ok(status) => status,
        Err(error) => {
            report.error = Some(error.to_string());
            return report;
        }
    };
    report.reachable = true;
    report.role = Some(status.server.role.clone());
    report.incarnation = Some(status.database.redo.identity.incarnation.0);
    report.applied_scn = Some(status.database.applied_scn);
    if let Some(roles) = &status.roles {
        report.fenced = roles.fenced.clone();
        report.writes = Some(gate_summary(&roles.gate));
        report.last_error = roles.last_error.clone();
    }
    match &status.replication.standby {
        Some(standby) => {
            report.follows = standby.primary_member.clone();
            report.connected = Some(standby.connected);
            report.transport_lag_s = Some(standby.transport_lag_s);
            // A far sync applies nothing: it has no apply lag to show.
            report.apply_lag_s = (!standby.far_sync).then_some(standby.apply_lag_s);
            report.received = Some(standby.received);
            report.complete_through_seq = Some(standby.complete_through_seq);
            if report.last_error.is_none() {
                report.last_error = standby.last_error.clone();
            }
        }
        None => {
            report.next_scn = Some(status.database.redo.next_scn);
            report.durable_scn = Some(status.database.redo.durable_scn);
        }
    }
    report.status = Some(Box::new(status));
    report
}

fn gate_summary(gate: &admin::GateState) -> String {
    use admin::GateState;
    match gate {
        GateState::Open => "OPEN".into(),
        GateState::Unconfirmed { .. } => "WAITING FOR ITS STANDBYS TO CONFIRM".into(),
        GateState::Quiesced { to } => format!("QUIESCED (switchover to {to})"),
        GateState::Changing { reason } => format!("CHANGING ({reason})"),
        GateState::Isolated => "ISOLATED (neither its standby nor the observer answers)".into(),
        GateState::Fenced { primary, incarnation, .. } => {
            format!("FENCED ({primary} is primary in incarnation {incarnation})")
        }
        GateState::Standby { .. } => "READ ONLY".into(),
        GateState::Unavailable { reason } => format!("UNAVAILABLE ({reason})"),
    }
}

/// What keeps fast-start failover from working as configured: a member that refuses an
/// observer's pings (its settings are not the member's), and a primary that hears from no
/// observer (not armed: as Data Guard's broker says when its observer stops observing).
fn fast_start_warnings(members: &[MemberReport], primary: Option<&str>) -> Vec<String> {
    let fast_start_of = |member: &MemberReport| {
        member.status.as_ref().and_then(|status| status.roles.as_ref()?.fast_start.clone())
    };
    let mut warnings: Vec<String> = members
        .iter()
        .filter_map(|member| {
            let refused = fast_start_of(member)?.observer_refused?;
            Some(format!(
                "'{}' refuses the pings of observer {refused} (it takes no decision with that observer)",
                member.name
            ))
        })
        .collect();
    if let Some(fast_start) = primary
        .and_then(|name| members.iter().find(|member| member.name == name))
        .and_then(fast_start_of)
    {
        let silent = fast_start
            .observer_last_contact_s
            .is_none_or(|seconds| seconds > fast_start.threshold_s);
        if silent {
            warnings.push(format!(
                "fast-start failover is not armed: the primary has heard from no observer{} (threshold {:.1} s)",
                fast_start
                    .observer_last_contact_s
                    .map_or(String::new(), |seconds| format!(" for {seconds:.1} s")),
                fast_start.threshold_s
            ));
        }
    }
    warnings
}

/// `source`: the member it receives redo from under the primary's routes.
fn warnings_of(member: &MemberReport, primary: Option<&str>, source: Option<&str>) -> Vec<String> {
    let mut warnings = Vec::new();
    if !member.reachable {
        warnings
            .push(format!("cannot be reached: {}", member.error.as_deref().unwrap_or("no answer")));
        return warnings;
    }
    if let Some(fence) = &member.fenced {
        warnings.push(format!(
            "fenced: '{}' is primary in incarnation {}; reinstate this member",
            fence.by, fence.incarnation
        ));
    }
    if member.role.as_deref() == Some("standby") && member.fenced.is_none() {
        if member.connected == Some(false) {
            warnings.push("its primary is not connected".into());
        }
        if let Some(lag) = member.transport_lag_s
            && lag > LAG_THRESHOLD_S
        {
            warnings.push(format!("transport lag {lag:.1} s is over {LAG_THRESHOLD_S} s"));
        }
        if let Some(lag) = member.apply_lag_s
            && lag > LAG_THRESHOLD_S
        {
            warnings.push(format!("apply lag {lag:.1} s is over {LAG_THRESHOLD_S} s"));
        }
        if let (Some(received), Some(complete)) = (member.received, member.complete_through_seq)
            && complete.0 + 1 < received.seq.0
        {
            warnings.push(format!(
                "logs {}..={} are missing (a gap)",
                complete.0 + 1,
                received.seq.0 - 1
            ));
        }
        if let (Some(follows), Some(primary)) = (member.follows.as_deref(), primary)
            && follows != primary
            && Some(follows) != source
        {
            match source {
                Some(source) if source != primary => warnings.push(format!(
                    "receives from '{follows}', not from '{source}' as the routes of the primary '{primary}' say"
                )),
                _ => warnings.push(format!("follows '{follows}', not the primary '{primary}'")),
            }
        }
    }
    if member.role.as_deref() == Some("primary")
        && member.fenced.is_none()
        && member.writes.as_deref() != Some("OPEN")
    {
        warnings.push(format!("takes no writes: {}", member.writes.as_deref().unwrap_or("?")));
    }
    warnings
}

fn seconds(value: Option<f64>) -> String {
    value.map_or("-".to_string(), |value| format!("{value:.1} s"))
}

/// `redoguard show configuration`.
pub fn render(configuration: &Configuration) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Configuration - protection mode: {:?}", configuration.protection_mode);
    let _ = writeln!(out, "  Primary: {}", configuration.primary.as_deref().unwrap_or("(none)"));
    let fast_start_of = |member: &MemberReport| {
        member.status.as_ref().and_then(|status| status.roles.as_ref()?.fast_start.clone())
    };
    let fast_start = configuration
        .primary
        .as_deref()
        .and_then(|name| configuration.member(name))
        .and_then(fast_start_of);
    // Without an open primary to report it, any member's configuration says whether it is on.
    let enabled_elsewhere =
        configuration.members.iter().any(|member| fast_start_of(member).is_some());
    match fast_start {
        Some(fast_start) => {
            let _ = writeln!(
                out,
                "  Fast-start failover: ENABLED{}  threshold {:.1} s  targets {}  observer {}{}{}",
                if fast_start.mode.as_deref() == Some("observe-only") {
                    " (OBSERVE ONLY: the observer decides nothing)"
                } else {
                    ""
                },
                fast_start.threshold_s,
                fast_start.targets.join(", "),
                fast_start.observer.as_deref().unwrap_or("(none heard)"),
                fast_start
                    .observer_last_contact_s
                    .map_or(String::new(), |seconds| format!(" (last contact {seconds:.1} s ago)")),
                match (fast_start.isolated, fast_start.wants_unsync) {
                    (Some(true), _) => "  ISOLATED",
                    (_, Some(true)) =>
                        "  waiting for the observer's consent to go on unsynchronized",
                    _ => "",
                }
            );
        }
        None if enabled_elsewhere => {
            let _ = writeln!(
                out,
                "  Fast-start failover: ENABLED (no open primary reports its state; the observer's INFO says what it would do)"
            );
        }
        None => {
            let _ = writeln!(out, "  Fast-start failover: DISABLED");
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<12} {:<16} {:>4} {:<14} {:<14} {:>10} {:>10}  writes / last error",
        "member", "role", "inc", "transport", "state", "transport", "apply"
    );
    let _ = writeln!(
        out,
        "  {:<12} {:<16} {:>4} {:<14} {:<14} {:>10} {:>10}",
        "", "", "", "", "", "lag", "lag"
    );
    for member in &configuration.members {
        let role = match (&member.role, &member.fenced) {
            (None, _) => "UNREACHABLE".to_string(),
            (Some(_), Some(_)) => "fenced".to_string(),
            (Some(role), None) if role == "primary" => "Primary".to_string(),
            (Some(_), None) if member.far_sync => "Far sync".to_string(),
            (Some(_), None) => "Physical standby".to_string(),
        };
        let state = if member.role.as_deref() == Some("primary") && member.fenced.is_none() {
            "-".to_string()
        } else {
            member.state.clone().unwrap_or_else(|| "-".to_string())
        };
        // A healthy member shows whether it takes writes; one with a problem, the problem.
        let note = match (&member.writes, &member.last_error) {
            (_, Some(error)) if !member.warnings.is_empty() => error.clone(),
            (Some(writes), _) => writes.clone(),
            (None, _) => member.error.clone().unwrap_or_default(),
        };
        let _ = writeln!(
            out,
            "  {:<12} {:<16} {:>4} {:<14} {:<14} {:>10} {:>10}  {}",
            member.name,
            role,
            member.incarnation.map_or("-".to_string(), |incarnation| incarnation.to_string()),
            member.transport,
            state,
            seconds(member.transport_lag_s),
            if member.far_sync { "not applied".to_string() } else { seconds(member.apply_lag_s) },
            note
        );
    }
    if let Some(tree) = &configuration.routes {
        let _ = writeln!(out);
        let _ = writeln!(out, "  Redo routes (when {} is the primary):", tree.primary);
        let label = |hop: &transport::Hop| {
            let member = configuration.member(&hop.member);
            format!(
                "{}  {}  transport lag {}",
                transport::transport_name(hop.transport, hop.affirm),
                member.and_then(|member| member.state.clone()).unwrap_or_else(|| "-".into()),
                seconds(member.and_then(|member| member.transport_lag_s))
            )
        };
        for line in tree.render(&label) {
            let _ = writeln!(out, "    {line}");
        }
    }
    let _ = writeln!(out);
    if configuration.warnings.is_empty() {
        let _ = writeln!(out, "Configuration status: SUCCESS");
    } else {
        let _ = writeln!(out, "Configuration status: WARNING");
        for warning in &configuration.warnings {
            let _ = writeln!(out, "  - {warning}");
        }
    }
    out
}

/// `redoguard show database NAME`.
pub fn render_member(configuration: &Configuration, name: &str) -> Option<String> {
    let member = configuration.member(name)?;
    let mut out = String::new();
    let line = |out: &mut String, key: &str, value: String| {
        let _ = writeln!(out, "  {key:<24} {value}");
    };
    let _ = writeln!(out, "Database - {}", member.name);
    line(&mut out, "role", member.role.clone().unwrap_or_else(|| "unreachable".into()));
    if let Some(error) = &member.error {
        line(&mut out, "error", error.clone());
    }
    line(
        &mut out,
        "addresses",
        format!("resp {}  admin {}  redo {}", member.resp, member.admin, member.redo),
    );
    line(&mut out, "as a destination", member.transport.clone());
    if let Some(incarnation) = member.incarnation {
        line(&mut out, "incarnation", incarnation.to_string());
    }
    if let Some(fence) = &member.fenced {
        line(&mut out, "fenced by", format!("'{}' (incarnation {})", fence.by, fence.incarnation));
    }
    if let Some(writes) = &member.writes {
        line(&mut out, "writes", writes.clone());
    }
    if let Some(follows) = &member.follows {
        line(
            &mut out,
            "follows",
            format!(
                "{follows} ({})",
                if member.connected == Some(true) { "connected" } else { "not connected" }
            ),
        );
    }
    if let Some(state) = &member.state {
        line(&mut out, "state at the primary", state.clone());
    }
    line(&mut out, "transport lag", seconds(member.transport_lag_s));
    if member.far_sync {
        line(
            &mut out,
            "apply lag",
            "not applied: far sync (standby logs and archives only)".into(),
        );
    } else {
        line(&mut out, "apply lag", seconds(member.apply_lag_s));
    }
    if let Some(received) = member.received {
        line(&mut out, "received up to", received.to_string());
    }
    if let Some(complete) = member.complete_through_seq {
        line(&mut out, "complete through log", complete.to_string());
    }
    if let Some(applied) = member.applied_scn {
        line(&mut out, "applied SCN", applied.to_string());
    }
    if let (Some(next), Some(durable)) = (member.next_scn, member.durable_scn) {
        line(&mut out, "SCN next / durable", format!("{next} / {durable}"));
    }
    if let Some(status) = &member.status
        && let Some(roles) = &status.roles
    {
        for branch in &roles.history {
            line(
                &mut out,
                &format!("incarnation {}", branch.incarnation),
                format!(
                    "began at SCN {}, log {} (failover to {})",
                    branch.first_scn, branch.first_seq, branch.member
                ),
            );
        }
        if let Some(change) = &roles.last_change {
            line(&mut out, "last role change", change.clone());
        }
    }
    if let Some(error) = &member.last_error {
        line(&mut out, "last error", error.clone());
    }
    for warning in &member.warnings {
        line(&mut out, "WARNING", warning.clone());
    }
    Some(out)
}
