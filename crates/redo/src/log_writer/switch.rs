//! Log switches: closing the current log, waiting until the next group may be reused (and
//! deciding the *stall*, `stall`, while a failure holds that up), opening the next log.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::members::LogBytes;
use super::stall::StallGuard;
use super::switch_waits::{PhaseGuard, SwitchPhase};
use super::{CurrentLog, WriterState};
use crate::error::{RedoError, Result};
use crate::format::{self, HeaderBlock, LogEnd, LogHeader};
use crate::online_log::{MemberState, OnlineLog, Reuse};
use crate::ship::WriteKind;
use crate::types::{LogSeq, RedoAddr, now_unix_us};
use crate::{Shared, SwitchReason};

impl Shared {
    /// Closes the current log (if any) and makes the next group current, waiting until that
    /// group may be reused.
    pub(crate) fn switch(&self, writer: &mut WriterState, reason: SwitchReason) -> Result<LogSeq> {
        let started = Instant::now();
        // Sessions held up from here on are counted under the switch's phase.
        let _switching =
            PhaseGuard::enter(&self.log_writer.switch_clock, Some(SwitchPhase::Completion));
        // A log is closed only behind writes whose fate is known (see `pipeline`).
        {
            let _standby = (!self.log_writer.pipeline.is_empty()).then(|| {
                PhaseGuard::enter(&self.log_writer.switch_clock, Some(SwitchPhase::SyncStandby))
            });
            self.log_writer.drain_pipeline()?;
        }
        // Only the leader puts writes in flight, and this is the leader.
        assert!(
            self.log_writer.pipeline.is_empty(),
            "a log is closed only behind a drained pipeline"
        );
        let block_size = self.config.block_size;
        let block = block_size as usize;
        let mut header_block = std::mem::take(&mut writer.buffer);
        header_block.resize_zeroed(block);
        let result = (|| {
            let next_group = {
                let table = self.table.lock();
                table.current.map_or(0, |current| (current + 1) % table.groups.len())
            };
            if let Some(current) = writer.current.take() {
                let end = LogEnd {
                    next_scn: writer.next_scn,
                    next_time_us: now_unix_us(),
                    end_offset: current.offset,
                };
                format::encode_header(&mut header_block, &HeaderBlock::Closed(current.header, end));
                let wait = self.write_log(
                    current.group,
                    LogBytes::Slice(&header_block),
                    u64::from(block_size),
                    WriteKind::ClosedHeader,
                    current.header.seq,
                    writer.next_scn.prev(),
                )?;
                {
                    let mut table = self.table.lock();
                    if let Some(log) = table.groups[current.group].log.as_mut() {
                        log.end = Some(end);
                    }
                }
                self.queue_archive(current.header.seq);
                if let Some(wait) = wait {
                    let _standby = PhaseGuard::enter(
                        &self.log_writer.switch_clock,
                        Some(SwitchPhase::SyncStandby),
                    );
                    self.wait_shipped(wait)?;
                }
            }
            self.wait_reusable(next_group)?;
            let seq = writer.last_seq.next();
            let header = LogHeader {
                block_size,
                file_size: self.config.log_file_size,
                database_id: self.identity().database_id,
                incarnation: self.identity().incarnation,
                thread: self.identity().thread,
                seq,
                first_scn: writer.next_scn,
                first_time_us: now_unix_us(),
            };
            format::encode_header(&mut header_block, &HeaderBlock::Open(header));
            {
                let mut table = self.table.lock();
                let group = &mut table.groups[next_group];
                // Reuse gives stale and failed members another chance: they are rewritten
                // from the header on, like the others.
                for member in &mut group.members {
                    if member.state != MemberState::Valid {
                        match self.storage.open_log(&member.path) {
                            Ok(file) => {
                                tracing::info!(member = %member.path.display(), "log member back in use at group reuse");
                                member.file = Some(Arc::from(file));
                                member.state = MemberState::Valid;
                            }
                            Err(error) => {
                                member.state = MemberState::Failed(format!("reopen: {error}"));
                            }
                        }
                    }
                }
                group.log = Some(OnlineLog { header, end: None, archived: false });
                table.current = Some(next_group);
            }
            let wait = self.write_log(
                next_group,
                LogBytes::Slice(&header_block),
                0,
                WriteKind::OpenHeader,
                seq,
                writer.next_scn.prev(),
            )?;
            writer.current = Some(CurrentLog {
                group: next_group,
                header,
                offset: format::first_unit_offset(block_size),
            });
            writer.last_seq = seq;
            let start = RedoAddr { seq, offset: format::first_unit_offset(block_size) };
            self.log_writer.advance_written(None, start);
            if let Some(wait) = wait {
                // (The SYNC standby takes a standby log group for the new log meanwhile.)
                let _standby = PhaseGuard::enter(
                    &self.log_writer.switch_clock,
                    Some(SwitchPhase::SyncStandby),
                );
                self.wait_shipped(wait)?;
            }
            self.log_writer.publish_durable(None, start);
            Ok(seq)
        })();
        writer.buffer = header_block;
        let seq = result?;
        self.waits.log_writer_switch.record_since(started);
        self.stats.log_switches.incr();
        self.table_changed.notify_all();
        tracing::info!(%seq, ?reason, "log switch");
        Ok(seq)
    }

    /// Waits until group `index` may be reused: its log archived and checkpointed. While a
    /// failure blocks that (archiving or the checkpoint fails: a full disk), the commits
    /// waiting are told so at once (`set_stall`) instead of hanging until space returns; this
    /// wait goes on, and their redo is written when it ends. The switch is in the phase of
    /// what it waits for (`SwitchPhase::Archiving`, `Checkpoint`) meanwhile.
    fn wait_reusable(&self, index: usize) -> Result<()> {
        let _stall = StallGuard(&self.log_writer);
        let _phase =
            PhaseGuard::enter(&self.log_writer.switch_clock, Some(SwitchPhase::Completion));
        let mut asked_checkpoint: Option<Instant> = None;
        let mut stalled: Option<String> = None;
        let mut table = self.table.lock();
        loop {
            // The writer refused further redo meanwhile (fenced, or a member failed): this
            // switch, and the records it holds, must never be written and counted durable.
            if let Some(error) = self.failure() {
                return Err(error);
            }
            let checkpoint = self.control.lock().checkpoint_scn;
            let reuse = table.reuse(index, checkpoint);
            let blocked_by = match reuse {
                Reuse::Ready => None,
                Reuse::NeedsArchiving(seq) => self
                    .archive_failing
                    .load(Ordering::Acquire)
                    .then(|| {
                        // Only this log's own failure: another's says nothing of this one.
                        self.archive_errors().get(&seq).map(|reason| {
                            format!("log sequence {seq} cannot be archived: {reason}")
                        })
                    })
                    .flatten(),
                Reuse::NeedsCheckpoint(_) => self
                    .checkpoint_failure
                    .lock()
                    .as_ref()
                    .map(|reason| format!("the checkpoint that frees it fails: {reason}")),
            };
            let reason = blocked_by.map(|cause| {
                format!("the next log switch waits for log group {}, and {cause}", index + 1)
            });
            if reason != stalled {
                // Starts, ends, or says the new cause (archiving done, now the checkpoint).
                stalled = reason.clone();
                // Never hold the table lock while waking the waiters (the commit lock).
                drop(table);
                self.log_writer.set_stall(reason);
                table = self.table.lock();
                continue;
            }
            self.log_writer.switch_clock.enter(Some(match reuse {
                Reuse::Ready => SwitchPhase::Completion,
                Reuse::NeedsArchiving(_) => SwitchPhase::Archiving,
                Reuse::NeedsCheckpoint(_) => SwitchPhase::Checkpoint,
            }));
            match reuse {
                Reuse::Ready => break,
                Reuse::NeedsArchiving(seq) => {
                    if self.is_shut_down() {
                        return Err(RedoError::Shutdown);
                    }
                    // Its copy, if spread, goes on at once.
                    self.archive_hurry.fetch_max(seq.0, Ordering::AcqRel);
                }
                Reuse::NeedsCheckpoint(scn) => {
                    if self.is_shut_down() {
                        return Err(RedoError::Shutdown);
                    }
                    if asked_checkpoint.is_none_or(|asked| asked.elapsed() > Duration::from_secs(1))
                    {
                        asked_checkpoint = Some(Instant::now());
                        let handler = self.checkpoint_handler.lock().clone();
                        if let Some(handler) = handler {
                            // The handler may advance the checkpoint itself; never hold the
                            // table lock across it.
                            drop(table);
                            handler(scn);
                            table = self.table.lock();
                            continue;
                        }
                    }
                }
            }
            self.table_changed.wait_for(&mut table, Duration::from_millis(100));
        }
        drop(table);
        Ok(())
    }
}
