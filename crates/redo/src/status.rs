//! The engine's status for a person or a monitoring system: identity, SCNs, the online log
//! groups and their members, archiving errors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{GroupStatus, Identity, LogSeq, MemberStatus, RedoAddr, RedoLog, Scn, format};

/// A snapshot of the engine for a person or a monitoring system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedoStatus {
    pub identity: Identity,
    /// SCN the next record will get.
    pub next_scn: Scn,
    /// Every record at or below this SCN is durable.
    pub durable_scn: Scn,
    /// End of durable redo.
    pub durable_addr: RedoAddr,
    /// Every record at or below this SCN is in the data files.
    pub checkpoint_scn: Scn,
    pub log_buffer_used_bytes: u64,
    pub groups: Vec<GroupStatus>,
    /// Archiving failures being retried, by log sequence.
    pub archive_errors: BTreeMap<LogSeq, String>,
    /// Set if the log writer failed and no redo is accepted.
    pub writer_failure: Option<String>,
    /// Set while a log switch is held up by a failure (a log that cannot be archived, a
    /// checkpoint that fails): commits are told `CommitStalled` until it goes on.
    #[serde(default)]
    pub stall: Option<String>,
}

impl RedoLog {
    /// Online log groups.
    pub fn groups(&self) -> Vec<GroupStatus> {
        let checkpoint = self.checkpoint_scn();
        let durable = self.shared.durable_addr();
        let table = self.shared.table.lock();
        (0..table.groups.len())
            .map(|index| {
                let group = &table.groups[index];
                let log = group.log.as_ref();
                let used_bytes = match log {
                    None => 0,
                    Some(log) => match log.end {
                        Some(end) => end.end_offset,
                        None if durable.seq == log.header.seq => durable.offset,
                        None => format::first_unit_offset(self.shared.config.block_size),
                    },
                };
                GroupStatus {
                    group: index as u32 + 1,
                    state: table.state(index, checkpoint),
                    seq: log.map(|log| log.header.seq),
                    first_scn: log.map(|log| log.header.first_scn),
                    next_scn: log.and_then(|log| log.end).map(|end| end.next_scn),
                    first_time_us: log.map(|log| log.header.first_time_us),
                    archived: log.is_some_and(|log| log.archived),
                    used_bytes,
                    size_bytes: self.shared.config.log_file_size,
                    members: group
                        .members
                        .iter()
                        .map(|member| MemberStatus {
                            path: member.path.clone(),
                            state: member.state.clone(),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    pub fn status(&self) -> RedoStatus {
        RedoStatus {
            identity: self.identity(),
            next_scn: self.next_scn(),
            durable_scn: self.durable_scn(),
            durable_addr: self.durable_addr(),
            checkpoint_scn: self.checkpoint_scn(),
            log_buffer_used_bytes: self.shared.buffer.used_bytes(),
            groups: self.groups(),
            archive_errors: self.shared.archive_errors(),
            writer_failure: self.shared.log_writer.failure_text(),
            stall: self.stalled(),
        }
    }

    /// Whether new redo is refused because archiving fails (and why).
    pub fn archiver_stuck(&self) -> Option<(LogSeq, String)> {
        self.shared.archive_errors().into_iter().next()
    }

    /// Why the log writer is stalled (a log switch held up by a failing archive or
    /// checkpoint), while it is: commits get `CommitStalled` until the switch goes on, which
    /// may be a moment after the failure that held it up has cleared.
    pub fn stalled(&self) -> Option<String> {
        self.shared.log_writer.stall()
    }
}
