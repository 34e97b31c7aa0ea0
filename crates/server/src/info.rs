//! INFO: the server's state as Redis clients expect it (`# Section` headers, `field:value`
//! lines), with redoguard's own sections for redo and wait events.

use std::fmt::Write as _;

use crate::{Running, ServerState};

/// Sections in the order INFO prints them; INFO with no argument (or `all`, `everything`,
/// `default`) prints every one.
pub const SECTIONS: &[&str] =
    &["server", "clients", "persistence", "stats", "replication", "redo", "waits", "keyspace"];

/// The version we answer to clients that check `redis_version` (the commands we serve are
/// those of Redis 7).
const REDIS_COMPATIBLE_VERSION: &str = "7.2.0";

fn field(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = write!(out, "{name}:{value}\r\n");
}

/// A value on one line: INFO is line-oriented.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

fn group_state(state: redo::GroupState) -> &'static str {
    match state {
        redo::GroupState::Current => "CURRENT",
        redo::GroupState::Active => "ACTIVE",
        redo::GroupState::Inactive => "INACTIVE",
        redo::GroupState::Unused => "UNUSED",
    }
}

pub fn render(state: &ServerState, running: &Running, requested: &[String]) -> String {
    let all = requested.is_empty()
        || requested
            .iter()
            .any(|section| matches!(section.as_str(), "all" | "everything" | "default"));
    let wanted: Vec<&str> = SECTIONS
        .iter()
        .copied()
        .filter(|section| all || requested.iter().any(|asked| asked == section))
        .collect();
    let mut out = String::new();
    let status = running.db.status();
    let metrics = state.metrics.snapshot();
    for section in wanted {
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        let out = &mut out;
        match section {
            "server" => {
                out.push_str("# Server\r\n");
                field(out, "redis_version", REDIS_COMPATIBLE_VERSION);
                field(out, "redoguard_version", env!("CARGO_PKG_VERSION"));
                field(out, "redis_mode", "standalone");
                field(out, "role", crate::role_name(running.role()));
                field(out, "os", std::env::consts::OS);
                field(out, "process_id", std::process::id());
                field(out, "tcp_port", state.resp_addr.port());
                field(out, "uptime_in_seconds", state.started.elapsed().as_secs());
                field(out, "database_id", status.redo.identity.database_id);
                field(out, "data_dir", state.config.server.data_dir.display());
            }
            "clients" => {
                out.push_str("# Clients\r\n");
                field(
                    out,
                    "connected_clients",
                    state.connected.load(std::sync::atomic::Ordering::Relaxed),
                );
                field(out, "maxclients", state.config.server.max_connections);
                field(
                    out,
                    "blocked_clients",
                    state.blocked.load(std::sync::atomic::Ordering::Relaxed),
                );
                field(out, "rejected_connections", state.rejected.get());
            }
            "persistence" => {
                out.push_str("# Persistence\r\n");
                field(out, "checkpoint_scn", status.checkpoint_scn);
                field(out, "checkpoints", status.checkpoints);
                field(out, "last_checkpoint_time_us", status.last_checkpoint_us.unwrap_or(0));
                field(
                    out,
                    "last_checkpoint_status",
                    if status.last_checkpoint_error.is_some() { "err" } else { "ok" },
                );
                if let Some(error) = &status.last_checkpoint_error {
                    field(out, "last_checkpoint_error", one_line(error));
                }
                field(out, "unwritten_bytes", status.unwritten_bytes);
                let filter = status.row_filter.as_ref();
                field(out, "row_filter_bytes", filter.map_or(0, |filter| filter.bytes));
                field(out, "row_filter_rows", filter.map_or(0, |filter| filter.rows));
                field(out, "row_filter_ruled_out", filter.map_or(0, |filter| filter.ruled_out));
                let rows = &status.row_cache;
                field(out, "row_cache_bytes", rows.bytes);
                field(out, "row_cache_rows", rows.rows);
                field(out, "row_cache_hits", rows.hits);
                field(out, "row_cache_misses", rows.misses);
                field(out, "recovered_records", status.recovered_records);
                field(
                    out,
                    "writes_refused",
                    running
                        .db
                        .writes_refused()
                        .map_or("no".to_string(), |reason| one_line(&reason)),
                );
            }
            "stats" => {
                out.push_str("# Stats\r\n");
                field(out, "total_connections_received", state.total_connections.get());
                field(out, "total_commands_processed", state.commands_processed.get());
                field(out, "user_commits", metrics.stat("user commits"));
                field(out, "expired_keys", running.db.expired_keys());
            }
            "replication" => replication_section(state, running, out),
            "redo" => {
                out.push_str("# Redo\r\n");
                let redo = &status.redo;
                field(out, "next_scn", redo.next_scn);
                field(out, "durable_scn", redo.durable_scn);
                field(out, "current_seq", redo.durable_addr.seq);
                field(out, "current_offset", redo.durable_addr.offset);
                field(out, "log_buffer_used_bytes", redo.log_buffer_used_bytes);
                for group in &redo.groups {
                    let seq = group.seq.map_or("-".to_string(), |seq| seq.to_string());
                    field(
                        out,
                        &format!("group{}", group.group),
                        format!(
                            "state={},seq={seq},used_bytes={},size_bytes={},archived={},members={}",
                            group_state(group.state),
                            group.used_bytes,
                            group.size_bytes,
                            u8::from(group.archived),
                            group.members.len()
                        ),
                    );
                }
                for (name, value) in &metrics.stats {
                    field(out, &name.replace(' ', "_"), value);
                }
                if let Some(failure) = &redo.writer_failure {
                    field(out, "log_writer_failure", one_line(failure));
                }
                if let Some(stall) = &redo.stall {
                    field(out, "log_writer_stall", one_line(stall));
                }
            }
            "waits" => {
                out.push_str("# Waits\r\n");
                for event in &metrics.waits {
                    field(
                        out,
                        &event.name.replace(' ', "_"),
                        format!(
                            "count={},total_us={},avg_us={:.1},p50_us={},p99_us={},max_us={}",
                            event.count,
                            event.total_us,
                            event.avg_us,
                            event.p50_us,
                            event.p99_us,
                            event.max_us
                        ),
                    );
                }
            }
            "keyspace" => {
                out.push_str("# Keyspace\r\n");
                let keys = running.db.dbsize_or_bound();
                if keys > 0 {
                    field(out, "db0", format!("keys={keys},expires=0,avg_ttl=0"));
                }
            }
            _ => {}
        }
    }
    out
}

/// A member's client address as `(host, port)`, from the configuration.
fn resp_address_of(state: &ServerState, member: Option<&str>) -> Option<(String, String)> {
    let replication = &state.config.replication;
    let address = match member.and_then(|name| replication.member_named(name)) {
        Some(member) => member.resp.clone(),
        None => replication.standby.primary.clone()?,
    };
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_string(), port.to_string()))
}

/// Whom a standby (or a fenced primary) follows, as clients should find it.
fn primary_of(running: &Running) -> (Option<String>, bool) {
    let fence = running.db.redo().control().fenced;
    match (&running.receiver, fence) {
        (_, Some(fence)) => (Some(fence.by), false),
        (Some(receiver), None) => {
            let (connected, primary) = receiver.primary();
            (primary, connected)
        }
        (None, None) => (None, false),
    }
}

/// `ROLE`, as Redis answers it: `master` with its durable offset (an SCN here) and each
/// connected replica's address and applied SCN, or `slave` with its master's address, the
/// link's state and its applied SCN. A fenced primary answers as the replica it must become.
pub fn role_reply(state: &ServerState, running: &Running) -> resp::Frame {
    use resp::Frame;
    let replication = state.replication_of(running);
    let is_master =
        running.role() == redo::Role::Primary && running.db.redo().control().fenced.is_none();
    if is_master {
        let replicas = replication
            .destinations
            .iter()
            .filter(|destination| {
                matches!(
                    destination.phase,
                    transport::Phase::Synchronized
                        | transport::Phase::Streaming
                        | transport::Phase::CatchingUp
                )
            })
            .filter_map(|destination| {
                let (host, port) = resp_address_of(state, Some(&destination.name))?;
                Some(Frame::Array(vec![
                    Frame::Bulk(host.into()),
                    Frame::Bulk(port.into()),
                    Frame::Bulk(destination.applied_scn.0.to_string().into()),
                ]))
            })
            .collect();
        return Frame::Array(vec![
            Frame::Bulk("master".into()),
            Frame::Integer(running.db.redo().durable_scn().0 as i64),
            Frame::Array(replicas),
        ]);
    }
    let (primary, connected) = primary_of(running);
    let (host, port) = resp_address_of(state, primary.as_deref()).unwrap_or_default();
    Frame::Array(vec![
        Frame::Bulk("slave".into()),
        Frame::Bulk(host.into()),
        Frame::Integer(port.parse().unwrap_or(0)),
        Frame::Bulk(if connected { "connected" } else { "connect" }.into()),
        Frame::Integer(running.db.applied_scn().0 as i64),
    ])
}

fn replication_section(state: &ServerState, running: &Running, out: &mut String) {
    out.push_str("# Replication\r\n");
    let replication = state.replication_of(running);
    let fenced = running.db.redo().control().fenced;
    if running.role() == redo::Role::Standby || fenced.is_some() {
        // The names Redis clients look for, then ours.
        let (primary, connected) = primary_of(running);
        field(out, "role", "slave");
        if let Some((host, port)) = resp_address_of(state, primary.as_deref()) {
            field(out, "master_host", host);
            field(out, "master_port", port);
        }
        field(out, "master_link_status", if connected { "up" } else { "down" });
        let standby = replication.standby.as_ref();
        field(
            out,
            "master_last_io_seconds_ago",
            standby.and_then(|standby| standby.last_heard_s).map_or(-1, |seconds| seconds as i64),
        );
        field(out, "master_sync_in_progress", 0);
        let applied = running.db.applied_scn().0;
        field(out, "slave_read_repl_offset", applied);
        field(out, "slave_repl_offset", applied);
        field(out, "slave_priority", 100);
        field(out, "slave_read_only", 1);
        field(out, "replica_announced", 1);
        field(out, "connected_slaves", 0);
        field(out, "master_failover_state", "no-failover");
        field(out, "master_repl_offset", applied);
        field(out, "redoguard_role", if fenced.is_some() { "fenced" } else { "standby" });
        field(out, "incarnation", running.db.redo().identity().incarnation);
        if let Some(primary) = &primary {
            field(out, "primary_member", primary);
        }
        if let Some(standby) = standby {
            field(out, "transport_lag_s", format!("{:.3}", standby.transport_lag_s));
            // A far sync applies nothing: no apply lag, and it says what it is.
            if standby.far_sync {
                field(out, "redoguard_kind", "far_sync");
            } else {
                field(out, "apply_lag_s", format!("{:.3}", standby.apply_lag_s));
            }
            field(out, "received_seq", standby.received.seq);
            field(out, "received_offset", standby.received.offset);
            field(out, "complete_through_seq", standby.complete_through_seq);
            field(out, "applied_scn", standby.applied_scn);
            field(out, "primary_current_scn", standby.primary_current_scn);
            field(out, "primary_durable_scn", standby.primary_durable_scn);
            if let Some(error) = &standby.last_error {
                field(out, "last_error", one_line(error));
            }
        }
        return;
    }
    field(out, "role", "master");
    let connected: Vec<&transport::DestinationStatus> = replication
        .destinations
        .iter()
        .filter(|destination| {
            matches!(
                destination.phase,
                transport::Phase::Synchronized
                    | transport::Phase::Streaming
                    | transport::Phase::CatchingUp
            )
        })
        .collect();
    field(out, "connected_slaves", connected.len());
    for (index, destination) in connected.iter().enumerate() {
        let (host, port) = resp_address_of(state, Some(&destination.name)).unwrap_or_default();
        field(
            out,
            &format!("slave{index}"),
            format!(
                "ip={host},port={port},state={},offset={},lag={}",
                if destination.phase == transport::Phase::CatchingUp {
                    "wait_bgsave"
                } else {
                    "online"
                },
                destination.applied_scn,
                destination.last_heard_s.map_or(0, |seconds| seconds as u64)
            ),
        );
    }
    field(out, "master_failover_state", "no-failover");
    let durable = running.db.redo().durable_scn().0;
    field(out, "master_repl_offset", durable);
    field(out, "redoguard_role", "primary");
    field(out, "incarnation", running.db.redo().identity().incarnation);
    field(out, "protection_mode", format!("{:?}", replication.protection_mode));
    let synchronized = match replication.synchronized {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    };
    field(out, "synchronized", synchronized);
    for (index, destination) in replication.destinations.iter().enumerate() {
        field(
            out,
            &format!("destination{index}"),
            format!(
                "name={},address={},transport={},affirm={},state={:?},sent={},acknowledged={},transport_lag_s={:.3},apply_lag_s={:.3},failures={}",
                destination.name,
                destination.address,
                destination.transport,
                u8::from(destination.affirm),
                destination.phase,
                destination.sent,
                destination.acknowledged,
                destination.transport_lag_s,
                destination.apply_lag_s,
                destination.failures
            ),
        );
    }
}
