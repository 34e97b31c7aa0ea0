//! The archiver: worker threads that copy each filled online log to every archive
//! destination and record it in the archive catalog.
//!
//! A copy is checked as it is made (every unit's checksum, sequence and offset, up to the
//! end the closed header records); a member that fails the check is skipped for a mirror.
//! The copy is written to a temporary name, synced, renamed into place and its directory
//! synced, and only then entered in the catalog: a catalog entry always names a whole,
//! durable file. A destination that fails (a full disk, say) is retried every
//! `archive_retry_interval`; meanwhile the group cannot be reused.
//!
//! The copy bypasses the page cache where it can (`Storage::create_streamed`) and is spread
//! over half the time its log took to fill, at most `archive_spread_max` (`copy_spread`), so
//! that it takes little CPU from the sessions and reaches the disk a piece at a time; a log
//! switch that needs the group, or the shutdown, hurries it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::Shared;
use crate::catalog::ArchivedLog;
use crate::error::{RedoError, Result};
use crate::format::{self, HeaderBlock, LogEnd, LogHeader, RedoScanner, ScanStep};
use crate::online_log::MemberState;
use crate::storage::StorageFile;
use crate::types::{LogSeq, RedoThread, now_unix_us};

/// Logs waiting to be archived, and the last failure of each.
#[derive(Debug, Default)]
pub(crate) struct ArchiveQueue {
    pub(crate) pending: VecDeque<LogSeq>,
    busy: BTreeSet<LogSeq>,
    errors: BTreeMap<LogSeq, String>,
}

/// File name of an archived log: `<thread>_<sequence>.arc`, the sequence zero-padded so that
/// names sort in sequence order.
pub fn archive_file_name(thread: RedoThread, seq: LogSeq) -> String {
    format!("{}_{:010}.arc", thread.0, seq.0)
}

impl Shared {
    pub(crate) fn queue_archive(&self, seq: LogSeq) {
        let mut queue = self.archive_queue.lock();
        if !queue.pending.contains(&seq) && !queue.busy.contains(&seq) {
            queue.pending.push_back(seq);
            self.archive_ready.notify_one();
        }
    }

    /// Every current archiving failure.
    pub(crate) fn archive_errors(&self) -> BTreeMap<LogSeq, String> {
        self.archive_queue.lock().errors.clone()
    }

    /// One archiver worker.
    pub(crate) fn archiver(self: &Arc<Shared>) {
        loop {
            let seq = {
                let mut queue = self.archive_queue.lock();
                loop {
                    if self.is_shut_down() {
                        return;
                    }
                    if let Some(seq) = queue.pending.pop_front() {
                        queue.busy.insert(seq);
                        break seq;
                    }
                    self.archive_ready.wait(&mut queue);
                }
            };
            #[cfg(test)]
            self.failpoint("archiver: before archiving");
            let result = self.archive(seq);
            let mut queue = self.archive_queue.lock();
            queue.busy.remove(&seq);
            match result {
                Ok(()) => {
                    if let Some(error) = queue.errors.remove(&seq) {
                        tracing::info!(%seq, previous_error = %error, "archived after retrying");
                    }
                    if queue.errors.is_empty() {
                        self.archive_failing.store(false, Ordering::Release);
                    }
                    drop(queue);
                    {
                        let mut table = self.table.lock();
                        if let Some(group) = table.find(seq)
                            && let Some(log) = table.groups[group].log.as_mut()
                        {
                            log.archived = true;
                        }
                    }
                    self.table_changed.notify_all();
                }
                Err(error) => {
                    // Said once per log and cause, not at every retry: a full disk may
                    // last hours, and the status shows the error meanwhile.
                    let text = error.to_string();
                    if queue.errors.get(&seq) != Some(&text) {
                        tracing::error!(%seq, %error, retry_every = ?self.config.archive_retry_interval, "archiving failed; will retry until it succeeds");
                    } else {
                        tracing::debug!(%seq, %error, "archiving failed again");
                    }
                    queue.errors.insert(seq, text);
                    self.archive_failing.store(true, Ordering::Release);
                    drop(queue);
                    self.table_changed.notify_all();
                    // Retry after the interval (or at shutdown, give up until the next open).
                    let mut queue = self.archive_queue.lock();
                    let deadline = Instant::now() + self.config.archive_retry_interval;
                    while !self.is_shut_down() && Instant::now() < deadline {
                        self.archive_ready.wait_until(&mut queue, deadline);
                    }
                    if !queue.pending.contains(&seq) {
                        queue.pending.push_front(seq);
                    }
                    self.archive_ready.notify_one();
                }
            }
        }
    }

    /// Archives `seq` to every destination that lacks it.
    fn archive(&self, seq: LogSeq) -> Result<()> {
        let (header, end, members) = {
            let table = self.table.lock();
            let group = table.find(seq).ok_or(RedoError::LogNotAvailable { seq })?;
            let group = &table.groups[group];
            let log = group.log.as_ref().expect("found by sequence");
            let end = log.end.ok_or_else(|| {
                RedoError::WriterFailed(format!(
                    "log {seq} queued for archiving before it was closed"
                ))
            })?;
            let members: Vec<(PathBuf, Arc<dyn StorageFile>)> = group
                .members
                .iter()
                .filter(|member| member.state == MemberState::Valid)
                .filter_map(|member| member.file.clone().map(|file| (member.path.clone(), file)))
                .collect();
            (log.header, end, members)
        };
        // One spread for the log, shared by the destinations still to copy it.
        let todo =
            self.config.archive_dests.iter().filter(|dest| !self.catalog.has(seq, dest)).count();
        let spread = self.copy_spread(&header, &end) / (todo.max(1) as u32);
        for dest in &self.config.archive_dests {
            if self.catalog.has(seq, dest) {
                continue;
            }
            let path = dest.join(archive_file_name(header.thread, seq));
            let mut last_error = None;
            let mut copied = false;
            for (source_path, source) in &members {
                let copy =
                    self.copy_log(source.as_ref(), source_path, &header, &end, &path, spread);
                if copy.is_err() {
                    // Never leave a partial copy behind: on a full disk it holds the space
                    // the retry needs.
                    let mut temporary = path.as_os_str().to_owned();
                    temporary.push(".tmp");
                    let _ = self.storage.remove(Path::new(&temporary));
                }
                match copy {
                    Ok(()) => {
                        copied = true;
                        break;
                    }
                    Err(error @ RedoError::Corrupt { .. }) => {
                        tracing::error!(member = %source_path.display(), %error, "log member fails its check while archiving; trying a mirror");
                        last_error = Some(error);
                    }
                    Err(error) => return Err(error),
                }
            }
            if !copied {
                return Err(last_error.unwrap_or(RedoError::LogNotAvailable { seq }));
            }
            self.catalog.append(ArchivedLog {
                thread: header.thread,
                seq,
                first_scn: header.first_scn,
                next_scn: end.next_scn,
                first_time_us: header.first_time_us,
                next_time_us: end.next_time_us,
                size_bytes: end.end_offset,
                completed_us: now_unix_us(),
                path,
            })?;
            self.stats.archived_logs.incr();
            self.stats.archived_bytes.add(end.end_offset);
        }
        Ok(())
    }

    /// Copies `[0, end_offset)` of a member to `path`, checking it on the way.
    fn copy_log(
        &self,
        source: &dyn StorageFile,
        source_path: &Path,
        header: &LogHeader,
        end: &LogEnd,
        path: &Path,
        spread: Duration,
    ) -> Result<()> {
        let block = header.block_size as usize;
        let chunk_len = ((1usize << 20) / block).max(2) * block;
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        let dest_dir = path.parent().unwrap_or(Path::new("."));
        let target = self
            .storage
            .create_streamed(&temporary)
            .map_err(|error| RedoError::io("create", &temporary, error))?;
        let started = Instant::now();
        let mut scanner = RedoScanner::new(header);
        let mut records = Vec::new();
        // Aligned, so that a direct copy writes it as it is.
        let mut chunk = crate::storage::AlignedBuf::new();
        chunk.resize_zeroed(chunk_len);
        let writeback = crate::storage::Writeback::default();
        let mut offset = 0u64;
        while offset < end.end_offset {
            let len = ((end.end_offset - offset) as usize).min(chunk_len);
            let bytes = &mut chunk[..len];
            let read_started = Instant::now();
            source
                .read_at(bytes, offset)
                .map_err(|error| RedoError::io("read", source_path, error))?;
            self.waits.log_file_sequential_read.record_since(read_started);
            let mut units = &bytes[..];
            if offset == 0 {
                let corrupt = |reason: &str| RedoError::Corrupt {
                    file: source_path.to_path_buf(),
                    offset: 0,
                    reason: reason.to_string(),
                };
                match format::decode_header(&bytes[..block], 0) {
                    Ok(HeaderBlock::Open(found)) if found == *header => {}
                    _ => {
                        return Err(corrupt(
                            "its open header no longer describes the log being archived",
                        ));
                    }
                }
                match format::decode_header(&bytes[block..2 * block], block as u64) {
                    Ok(HeaderBlock::Closed(found, found_end))
                        if found == *header && found_end == *end => {}
                    _ => return Err(corrupt("its closed header is missing or does not match")),
                }
                units = &bytes[2 * block..];
            }
            for unit in units.chunks(block) {
                let unit_offset = scanner.next_offset();
                if let ScanStep::End(defect) = scanner
                    .push_unit(unit, &mut records)
                    .map_err(|error| RedoError::corrupt(source_path, error))?
                {
                    return Err(RedoError::Corrupt {
                        file: source_path.to_path_buf(),
                        offset: unit_offset,
                        reason: format!("{defect}, before the end of redo at {}", end.end_offset),
                    });
                }
                records.clear();
            }
            let write_started = Instant::now();
            target
                .write_at(bytes, offset)
                .map_err(|error| RedoError::io("write", &temporary, error))?;
            writeback.wrote(&*target, offset, len as u64, crate::storage::WRITEBACK_AFTER);
            self.waits.log_archive_io.record_since(write_started);
            offset += len as u64;
            if offset < end.end_offset {
                self.pace_copy(header.seq, started, spread, offset as f64 / end.end_offset as f64);
            }
        }
        if scanner.end_offset() != end.end_offset || scanner.end_scn() != end.next_scn {
            return Err(RedoError::Corrupt {
                file: source_path.to_path_buf(),
                offset: scanner.end_offset(),
                reason: format!(
                    "redo ends at {} (next SCN {}), not at {} (next SCN {}) as the closed header says",
                    scanner.end_offset(),
                    scanner.end_scn(),
                    end.end_offset,
                    end.next_scn
                ),
            });
        }
        let sync_started = Instant::now();
        target.sync_data().map_err(|error| RedoError::io("sync", &temporary, error))?;
        drop(target);
        self.storage
            .rename(&temporary, path)
            .map_err(|error| RedoError::io("rename into place", path, error))?;
        self.storage.sync_dir(dest_dir).map_err(|error| RedoError::io("sync", dest_dir, error))?;
        self.waits.log_archive_io.record_since(sync_started);
        Ok(())
    }

    /// How long the copy of `header`'s log to every destination is spread over
    /// (`copy_spread`).
    fn copy_spread(&self, header: &LogHeader, end: &LogEnd) -> Duration {
        #[cfg(test)]
        if let Some(spread) = *self.archive_spread_for_tests.lock() {
            return spread;
        }
        copy_spread(
            end.next_time_us.saturating_sub(header.first_time_us),
            self.config.archive_spread_max,
        )
    }

    /// Before the copy's next piece: sleeps until `done` (a share) of `spread` has passed since
    /// `started`, looking again at least every 20 ms, unless the copy is needed now: somebody
    /// waits for this log's archiving (a log switch, a standby's receiving), or writes are
    /// refused until archiving succeeds again (`archive_failing`: a retry after a full disk),
    /// or more logs wait for the archivers (a backlog: a standby catching up, logs closed by
    /// recovery), or the shutdown.
    pub(crate) fn pace_copy(&self, seq: LogSeq, started: Instant, spread: Duration, done: f64) {
        let due = started + spread.mul_f64(done);
        loop {
            if self.is_shut_down()
                || self.archive_hurry.load(Ordering::Acquire) >= seq.0
                || self.archive_failing.load(Ordering::Acquire)
                || !self.archive_queue.lock().pending.is_empty()
            {
                return;
            }
            let now = Instant::now();
            if now >= due {
                return;
            }
            std::thread::sleep((due - now).min(Duration::from_millis(20)));
        }
    }
}

/// How long the copy of a log that took `filled_us` to fill is spread over: half that, at most
/// `max` (`archive_spread_max`). Why: copied at once, a log's tens of megabytes reach the disk
/// in a burst, and every commit's sync (a flush of the device's cache) waits for them: under
/// a durable SET at 50 clients with the server on one CPU, the rate of the 300 ms after each
/// log switch was 0.54–0.91 of the median (0.22–0.36 before the copy went direct), and 0.87–
/// 1.06 spread (docs/bench/README.md, "The archiver's copy: direct, and spread"). Half the fill time
/// keeps the copy ahead of the log writer, which reuses the group only after the next log
/// fills; should it come back sooner (the redo rate jumped), the switch that waits for the
/// copy hurries it (`Shared::archive_hurry`).
pub(crate) fn copy_spread(filled_us: u64, max: Duration) -> Duration {
    Duration::from_micros(filled_us / 2).min(max)
}
