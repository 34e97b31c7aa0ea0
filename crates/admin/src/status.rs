//! A server's status as the admin API serves it (`GET /status`, JSON), and how `redoguard
//! status` prints it for a person.

use std::fmt::Write as _;

use db::DbStatus;
use redo::ArchivedLog;
use serde::{Deserialize, Serialize};
use stats::MetricsSnapshot;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerInfo {
    pub version: String,
    pub pid: u32,
    pub role: String,
    pub uptime_s: u64,
    pub data_dir: String,
    pub resp_addr: String,
    /// The Redis protocol's TLS port, if there is one.
    #[serde(default)]
    pub resp_tls_addr: Option<String>,
    pub admin_addr: String,
    pub connected_clients: u64,
    pub total_connections: u64,
    pub rejected_connections: u64,
    pub commands_processed: u64,
    /// Why writes are refused right now (a full disk, say), if they are.
    pub writes_refused: Option<String>,
    /// What this server exposes without protection (a port beyond loopback without TLS, a
    /// password or a token): empty when nothing.
    #[serde(default)]
    pub security_warnings: Vec<String>,
    /// Whether Redis-protocol clients must authenticate, and whether the admin API's POSTs
    /// need a token.
    #[serde(default)]
    pub auth_required: bool,
    #[serde(default)]
    pub admin_token_required: bool,
    /// Where the admin token is, when the server made it itself (no `auth.admin_token`): the
    /// `redoguard` commands of its user on this host read it there.
    #[serde(default)]
    pub admin_token_file: Option<String>,
    /// Started with `--insecure` (`server.insecure`): protected mode is off, and
    /// `security_warnings` says what is exposed.
    #[serde(default)]
    pub insecure: bool,
}

/// The archive catalog in brief: the figures a DBA sizes a network with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchiveSummary {
    pub archived_logs: u64,
    pub archived_bytes: u64,
    /// Highest redo generation rate of any archived log (bytes of log over the time it was
    /// current), and which log.
    pub peak_bytes_per_s: f64,
    pub peak_seq: Option<u64>,
    /// The most recent entries, newest last.
    pub recent: Vec<ArchivedLog>,
}

impl ArchiveSummary {
    pub fn of(catalog: &[ArchivedLog], recent: usize) -> ArchiveSummary {
        let peak = catalog.iter().max_by(|a, b| a.bytes_per_s().total_cmp(&b.bytes_per_s()));
        ArchiveSummary {
            archived_logs: catalog.len() as u64,
            archived_bytes: catalog.iter().map(|entry| entry.size_bytes).sum(),
            peak_bytes_per_s: peak.map_or(0.0, ArchivedLog::bytes_per_s),
            peak_seq: peak.map(|entry| entry.seq.0),
            recent: catalog[catalog.len().saturating_sub(recent)..].to_vec(),
        }
    }
}

/// What `/status` says about archive retention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetentionStatus {
    pub policy: redo::DeletionPolicy,
    /// The first log still needed, and who needs it.
    pub needed_from: redo::LogSeq,
    pub held_by: String,
    pub last_pass: Option<redo::retention::RetentionPass>,
    pub last_error: Option<String>,
}

/// Replication: a primary's destinations, or a standby's primary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicationStatus {
    pub role: String,
    pub protection_mode: transport::ProtectionMode,
    /// On a primary with standbys: whether commits are protected as the mode promises.
    pub synchronized: Option<bool>,
    pub destinations: Vec<transport::DestinationStatus>,
    pub standby: Option<transport::StandbyReplicationStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub server: ServerInfo,
    pub database: DbStatus,
    pub replication: ReplicationStatus,
    /// The member's role in its configuration (none in the single-role form's old files).
    #[serde(default)]
    pub roles: Option<crate::roles::RoleStatus>,
    pub archive: ArchiveSummary,
    /// Archive retention: what is kept and why (none before its first pass).
    #[serde(default)]
    pub retention: Option<RetentionStatus>,
    pub metrics: MetricsSnapshot,
}

fn bytes(value: u64) -> String {
    units::format_bytes(value)
}

/// Now, as `time_us` prints it.
pub fn now_text() -> String {
    time_us(redo::types::now_unix_us())
}

pub fn time_us(micros: u64) -> String {
    if micros == 0 {
        return "-".to_string();
    }
    let seconds = micros / 1_000_000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The status for a person: what the server is, its logs, checkpoint, archive and waits.
pub fn render(status: &ServerStatus) -> String {
    let mut out = String::new();
    let server = &status.server;
    let db = &status.database;
    let redo = &db.redo;
    let _ = writeln!(
        out,
        "redoguard {} · {} · pid {} · up {}s",
        server.version, server.role, server.pid, server.uptime_s
    );
    let _ = writeln!(
        out,
        "  data dir {}   RESP {}   admin {}",
        server.data_dir, server.resp_addr, server.admin_addr
    );
    let _ = writeln!(
        out,
        "  clients {} connected ({} total, {} refused)   commands {}",
        server.connected_clients,
        server.total_connections,
        server.rejected_connections,
        server.commands_processed
    );
    if let Some(roles) = &status.roles {
        let _ = writeln!(
            out,
            "  member {} · incarnation {} · writes {}{}",
            roles.member.as_deref().unwrap_or("-"),
            roles.incarnation,
            match &roles.gate {
                crate::roles::GateState::Open => "OPEN".to_string(),
                other => other.refusal_text(),
            },
            roles
                .last_change
                .as_ref()
                .map_or(String::new(), |change| format!("\n  last role change: {change}"))
        );
    }
    if let Some(reason) = &server.writes_refused {
        let _ = writeln!(out, "  WRITES REFUSED: {reason}");
    }
    if let Some(failure) = &redo.writer_failure {
        let _ = writeln!(out, "  LOG WRITER FAILED: {failure}");
    }
    if let Some(stall) = &redo.stall {
        let _ = writeln!(
            out,
            "  LOG WRITER STALLED (commits are answered 'not durable yet'; their redo is written when the log switch goes on): {stall}"
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "database {}   keys {}", redo.identity.database_id, db.keys);
    let _ = writeln!(
        out,
        "  SCN next {}  durable {}  checkpoint {}   unwritten to data files {}",
        redo.next_scn,
        redo.durable_scn,
        db.checkpoint_scn,
        bytes(db.unwritten_bytes)
    );
    let _ = writeln!(
        out,
        "  checkpoints {} (last {}){}",
        db.checkpoints,
        time_us(db.last_checkpoint_us.unwrap_or(0)),
        db.last_checkpoint_error
            .as_ref()
            .map_or(String::new(), |error| format!("   LAST FAILED: {error}"))
    );
    match &db.row_filter {
        Some(filter) => {
            let _ = writeln!(
                out,
                "  row filter {} for {} rows, holds {}; {} lookups answered without the data files",
                bytes(filter.bytes),
                filter.capacity,
                filter.rows,
                filter.ruled_out
            );
        }
        None => {
            let _ = writeln!(out, "  row filter none (being built, or [db] row_filter_max = 0)");
        }
    }
    let rows = &db.row_cache;
    if rows.capacity == 0 {
        let _ = writeln!(out, "  row cache none ([db] row_cache_size = 0)");
    } else {
        let _ = writeln!(
            out,
            "  row cache {} of {}, {} key rows; {} lookups answered, {} searched in the data files",
            bytes(rows.bytes),
            bytes(rows.capacity),
            rows.rows,
            rows.hits,
            rows.misses
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "online logs (log buffer in use: {})", bytes(redo.log_buffer_used_bytes));
    let _ = writeln!(
        out,
        "  {:<6} {:<9} {:>8} {:>12} {:>12} {:>19} {:>9}  members",
        "group", "state", "seq", "first scn", "used", "size", "archived"
    );
    for group in &redo.groups {
        let members: Vec<String> = group
            .members
            .iter()
            .map(|member| match &member.state {
                redo::MemberState::Valid => member.path.display().to_string(),
                redo::MemberState::Stale(reason) => {
                    format!("{} (STALE: {reason})", member.path.display())
                }
                redo::MemberState::Failed(reason) => {
                    format!("{} (FAILED: {reason})", member.path.display())
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "  {:<6} {:<9} {:>8} {:>12} {:>12} {:>19} {:>9}  {}",
            group.group,
            format!("{:?}", group.state).to_uppercase(),
            group.seq.map_or("-".to_string(), |seq| seq.to_string()),
            group.first_scn.map_or("-".to_string(), |scn| scn.to_string()),
            bytes(group.used_bytes),
            bytes(group.size_bytes),
            if group.archived { "yes" } else { "no" },
            members.join(", ")
        );
    }
    render_replication(&mut out, &status.replication);
    let archive = &status.archive;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "archive: {} logs, {}; peak redo rate {:.2} MiB/s{}",
        archive.archived_logs,
        bytes(archive.archived_bytes),
        archive.peak_bytes_per_s / (1024.0 * 1024.0),
        archive.peak_seq.map_or(String::new(), |seq| format!(" (log {seq})"))
    );
    for entry in &archive.recent {
        let _ = writeln!(
            out,
            "  seq {:>8}  scn {}..{}  {:>10}  {:>7.2} MiB/s  {}",
            entry.seq,
            entry.first_scn,
            entry.next_scn,
            bytes(entry.size_bytes),
            entry.bytes_per_s() / (1024.0 * 1024.0),
            entry.path.display()
        );
    }
    for (seq, error) in &redo.archive_errors {
        let _ = writeln!(out, "  ARCHIVING OF LOG {seq} FAILS: {error}");
    }
    if let Some(retention) = &status.retention {
        let _ = writeln!(
            out,
            "  retention: {:?}; logs from {} on are kept ({}){}{}",
            retention.policy,
            retention.needed_from,
            retention.held_by,
            retention.last_pass.as_ref().map_or(String::new(), |pass| format!(
                "; deleted {} logs ({}) at the last pass, {} no longer needed kept for archive_keep_min",
                pass.deleted_logs,
                bytes(pass.deleted_bytes),
                pass.kept_young
            )),
            retention.last_error.as_ref().map_or(String::new(), |error| format!("; LAST PASS FAILED: {error}"))
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "top wait events");
    let _ = writeln!(
        out,
        "  {:<42} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "event", "waits", "total ms", "avg µs", "p99 µs", "max µs"
    );
    for event in status.metrics.waits.iter().take(10) {
        let _ = writeln!(
            out,
            "  {:<42} {:>10} {:>12.1} {:>10.1} {:>10} {:>10}",
            event.name,
            event.count,
            event.total_us as f64 / 1000.0,
            event.avg_us,
            event.p99_us,
            event.max_us
        );
    }
    render_log_switch_waits(&mut out, &status.metrics);
    let _ = writeln!(out);
    let _ = writeln!(out, "statistics");
    for (name, value) in &status.metrics.stats {
        let _ = writeln!(out, "  {name:<42} {value:>14}");
    }
    out
}

/// The waits of sessions held up at log switches, one line per reason, whether or not it
/// made the top wait events.
fn render_log_switch_waits(out: &mut String, metrics: &stats::MetricsSnapshot) {
    let _ = writeln!(out);
    let _ =
        writeln!(out, "waits at log switches (sessions held up, by what the switch waited for)");
    for event in metrics.log_switch_waits() {
        let _ = writeln!(
            out,
            "  {:<42} {:>10} {:>12.1} {:>10.1} {:>10} {:>10}",
            event.name,
            event.count,
            event.total_us as f64 / 1000.0,
            event.avg_us,
            event.p99_us,
            event.max_us
        );
    }
}

fn render_replication(out: &mut String, replication: &ReplicationStatus) {
    let _ = writeln!(out);
    if let Some(standby) = &replication.standby {
        let _ = writeln!(
            out,
            "standby of {}: {}, listening for redo on {}",
            standby.primary.as_deref().unwrap_or("its primary"),
            if standby.connected {
                format!("connected from {}", standby.primary_peer.as_deref().unwrap_or("?"))
            } else {
                "NOT CONNECTED".to_string()
            },
            standby.listen
        );
        // A far sync applies nothing (standby logs and archives only).
        let apply = if standby.far_sync {
            "not applied: far sync".to_string()
        } else {
            format!("apply lag {:.3} s", standby.apply_lag_s)
        };
        let applied = if standby.far_sync {
            String::new()
        } else {
            format!("   applied SCN {}", standby.applied_scn)
        };
        let _ = writeln!(
            out,
            "  transport lag {:.3} s   {apply}   received up to {}{applied}   primary at SCN {} (durable {}){}",
            standby.transport_lag_s,
            standby.received,
            standby.primary_current_scn,
            standby.primary_durable_scn,
            standby
                .last_heard_s
                .map_or(String::new(), |seconds| format!("   last heard {seconds:.1} s ago"))
        );
        if let Some(error) = &standby.last_error {
            let _ = writeln!(out, "  last error: {error}");
        }
        return;
    }
    let _ = writeln!(
        out,
        "replication: {:?}{}",
        replication.protection_mode,
        match replication.synchronized {
            Some(true) => "  (SYNCHRONIZED)",
            Some(false) => "  (UNSYNCHRONIZED)",
            None => "  (no standby configured)",
        }
    );
    if replication.destinations.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  {:<12} {:<22} {:<15} {:<13} {:>14} {:>14} {:>9} {:>9}  last error",
        "destination", "address", "transport", "state", "sent", "acknowledged", "lag s", "apply s"
    );
    for destination in &replication.destinations {
        let _ = writeln!(
            out,
            "  {:<12} {:<22} {:<15} {:<13} {:>14} {:>14} {:>9.3} {:>9.3}  {}",
            destination.name,
            destination.address,
            format!(
                "{} {}",
                destination.transport,
                if destination.affirm { "AFFIRM" } else { "NOAFFIRM" }
            ),
            format!("{:?}", destination.phase).to_uppercase(),
            destination.sent.to_string(),
            destination.acknowledged.to_string(),
            destination.transport_lag_s,
            destination.apply_lag_s,
            destination.last_error.as_deref().unwrap_or("")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(time_us(1_700_000_000_000_000), "2023-11-14 22:13:20Z");
        assert_eq!(time_us(0), "-");
    }

    #[test]
    fn every_reason_of_a_wait_at_a_log_switch_is_shown_waited_for_or_not() {
        let metrics = stats::Metrics::new();
        metrics
            .wait(stats::LOG_FILE_SWITCH_ARCHIVING)
            .record(std::time::Duration::from_millis(250));
        let mut out = String::new();
        render_log_switch_waits(&mut out, &metrics.snapshot());
        let lines: Vec<&str> = out.lines().skip(2).collect();
        assert_eq!(lines.len(), 4, "{out}");
        for (line, name) in lines.iter().zip(stats::LOG_FILE_SWITCH_WAITS) {
            assert!(line.trim_start().starts_with(name), "{line}");
        }
        let archiving: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            archiving[archiving.len() - 5..],
            ["1", "250.0", "250000.0", "250879", "250000"]
        );
        assert!(lines[0].split_whitespace().any(|field| field == "0"), "{out}");
    }
}
