//! Checkpoints: promoting durable changes out of the pending layer, the wait for memory
//! ("free buffer waits"), writing the data files with their SCN, and the checkpointer thread.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redo::Scn;

use crate::cache::{Cache, Key};
use crate::key_count::RESOLVE_CHUNK;
use crate::priority::Priority;
use crate::{DbError, Inner, Result};

/// Rows a paced checkpoint writes between two looks at the clock.
const PACE_ROWS: usize = 256;

/// The longest a paced checkpoint sleeps before it looks again whether it is needed sooner.
const PACE_NAP: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
pub(crate) struct CheckpointState {
    pub(crate) requested: bool,
    /// Somebody waits for a checkpoint (a log switch for its group, writers for memory, a
    /// caller of `Database::checkpoint`): the running one, if paced, stops pacing.
    pub(crate) urgent: bool,
    /// When the checkpointer's last checkpoint began, and the log the redo log was writing
    /// then (a log switch since starts the next one).
    pub(crate) began: Option<(Instant, u64)>,
    pub(crate) last_error: Option<String>,
    pub(crate) last_scn: Scn,
    pub(crate) last_at_us: Option<u64>,
    pub(crate) count: u64,
    /// The checkpointer's thread runs below the sessions' CPU priority now (`priority`).
    pub(crate) lowered: bool,
}

impl Inner {
    /// Somebody waits for a checkpoint from now on (`state` is `self.checkpoint`'s): the
    /// running one, if paced, stops pacing and writes the rest of its pages at its commit at
    /// once, even in the middle of it; the next one is not paced.
    pub(crate) fn mark_urgent(&self, state: &mut CheckpointState) {
        state.urgent = true;
        self.store.pace_writeback(false);
    }

    /// Moves changes whose redo is now durable out of the pending layer.
    pub(crate) fn promote(&self) {
        // Only what can never be rolled back: durable here (primary), or confirmed durable by
        // the primary (standby).
        let durable = self.redo.confirmed_scn();
        if self.cache.read().oldest_pending().is_none_or(|oldest| oldest > durable) {
            return;
        }
        let unwritten = {
            let mut cache = self.cache.write();
            cache.promote(durable);
            cache.unwritten_bytes() as u64
        };
        if unwritten >= self.config.checkpoint_dirty_bytes {
            self.request_checkpoint();
        }
    }

    /// Waits while too much is changed and not yet checkpointed ("free buffer waits").
    pub(crate) fn wait_for_memory(&self) {
        self.wait_for_checkpoints(Cache::unwritten_bytes, true);
    }

    /// A standby's apply waits here while what it applied and its primary confirmed, not yet
    /// in the data files, is at `dirty_bytes_max`: as a primary's writers do (`free buffer
    /// waits`), so that a standby catching up a long gap (it applies several times faster
    /// than a checkpoint writes) holds a bounded cache instead of its whole backlog. What the
    /// primary has not confirmed (pending) is not counted: no checkpoint can free it, and the
    /// failover that confirms it needs the apply to go on. Checkpoints suspended: it waits
    /// until shutdown (never the case of a member that applies). A failing checkpoint (a full
    /// disk) ends the wait as it does a writer's: the redo stays in the logs either way.
    pub(crate) fn wait_for_apply_memory(&self) {
        self.wait_for_checkpoints(Cache::checkpointable_bytes, false);
    }

    /// Waits while `measure` of the cache is at `dirty_bytes_max`, asking for urgent
    /// checkpoints, until shutdown or a failing checkpoint; with `promote`, promotes first and
    /// after each wait (a primary's durable commits). Counted under `free buffer waits`.
    fn wait_for_checkpoints(&self, measure: fn(&Cache) -> usize, promote: bool) {
        let limit = self.config.dirty_bytes_max as usize;
        if measure(&self.cache.read()) < limit {
            return;
        }
        let started = Instant::now();
        if promote {
            self.promote();
        }
        while measure(&self.cache.read()) >= limit && !self.shut_down.load(Ordering::Acquire) {
            let mut state = self.checkpoint.lock();
            if state.last_error.is_some() {
                break;
            }
            state.requested = true;
            self.mark_urgent(&mut state);
            self.checkpoint_changed.notify_all();
            self.checkpoint_changed.wait_for(&mut state, Duration::from_millis(50));
            drop(state);
            if promote {
                self.promote();
            }
        }
        self.waits.free_buffer.record_since(started);
    }

    pub(crate) fn request_checkpoint(&self) {
        let mut state = self.checkpoint.lock();
        if !state.requested {
            state.requested = true;
            self.checkpoint_changed.notify_all();
        }
    }

    /// Asks for a checkpoint that somebody waits for (the log writer at a log switch): the
    /// running one hurries, and the next one is not paced.
    pub(crate) fn request_urgent_checkpoint(&self) {
        let mut state = self.checkpoint.lock();
        self.mark_urgent(&mut state);
        if !state.requested {
            state.requested = true;
            self.checkpoint_changed.notify_all();
        }
    }

    /// A checkpoint its caller waits for: not paced, and a paced one running hurries.
    pub(crate) fn run_checkpoint(&self) -> Result<Scn> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(DbError::Shutdown);
        }
        self.mark_urgent(&mut self.checkpoint.lock());
        self.run_checkpoint_locked()
    }

    /// Writes every durable change to the data files, with its SCN, in one durable
    /// transaction, then lets the redo log reuse what that covers.
    pub(crate) fn run_checkpoint_locked(&self) -> Result<Scn> {
        self.run_checkpoint_with(None)
    }

    /// How long the checkpointer may spread the checkpoint it begins now over: the
    /// completion target's share of the time between its checkpoints (the last one's begin
    /// until now), at most `checkpoint_interval`'s. Zero (at once) for the first one, when
    /// the target is 0, or when somebody already waits for it.
    fn spread(&self, state: &CheckpointState, now: Instant) -> Duration {
        let target = self.config.checkpoint_completion_target;
        match state.began {
            Some((began, _)) if target > 0.0 && !state.urgent => now
                .saturating_duration_since(began)
                .min(self.config.checkpoint_interval)
                .mul_f64(target),
            _ => Duration::ZERO,
        }
    }

    /// Writes every durable change to the data files; with `priority`, the checkpointer's own:
    /// spread over time (see `spread`) and at the checkpointer's lower CPU priority unless
    /// somebody needs it sooner.
    fn run_checkpoint_with(&self, mut priority: Option<&mut Priority>) -> Result<Scn> {
        let paced = priority.is_some();
        let _running = self.checkpoint_running.lock();
        if self.checkpoints_suspended.load(Ordering::Acquire) {
            return Ok(self.checkpoint.lock().last_scn);
        }
        // Read before `checkpoint` is taken: nothing of the redo log is asked under it.
        let writing = self.redo.written_addr().seq.0;
        let spread = {
            let mut state = self.checkpoint.lock();
            let now = Instant::now();
            let spread = if paced { self.spread(&state, now) } else { Duration::ZERO };
            if let Some(priority) = priority.as_deref_mut() {
                if state.urgent {
                    priority.foreground()
                } else {
                    priority.background()
                }
                state.lowered = priority.lowered();
            }
            // Its pages reach the disk as they are written unless somebody waits for it (then
            // all at the end is sooner), and only the checkpointer's own: a checkpoint for a
            // shutdown or a role change is waited for, and so is the retry of a failed one
            // (writes are refused until it succeeds). Whoever starts to wait later turns it
            // off (`mark_urgent`).
            self.store.pace_writeback(paced && !state.urgent && state.last_error.is_none());
            // What asked for this one is answered by it; a later ask hurries it.
            state.urgent = false;
            if paced {
                state.began = Some((now, writing));
            }
            spread
        };
        self.promote();
        let last_scn = self.checkpoint.lock().last_scn;
        let (changed, scn) = {
            let mut cache = self.cache.write();
            if !cache.has_dirty() {
                let scn = last_scn;
                drop(cache);
                // Nothing new for the data files, but the redo log may not know yet (telling
                // it may be what failed last time).
                if scn > self.redo.checkpoint_scn() {
                    self.redo.advance_checkpoint(scn)?;
                }
                let mut state = self.checkpoint.lock();
                if state.last_error.take().is_some() {
                    tracing::info!(%scn, "checkpoint succeeded again; writes are accepted");
                    self.checkpoint_changed.notify_all();
                }
                drop(state);
                self.redo.note_checkpoint_failure(None);
                return Ok(scn);
            }
            cache.begin_checkpoint()
        };
        // The keys it writes that their writes left unresolved (`key_count`): taken after the
        // cache handed over its changes, so every entry at or below `scn` is here by now.
        // Copied and resolved a chunk at a time: writers take the same lock.
        let (start, end) = self.key_count.lock().batch(scn);
        let mut batch: Vec<(Key, u64)> = Vec::with_capacity((end - start) as usize);
        let mut from = start;
        loop {
            let chunk = self.key_count.lock().keys(from, end, RESOLVE_CHUNK);
            let Some((_, last)) = chunk.last() else { break };
            from = last + 1;
            batch.extend(chunk.into_iter().map(|(key, index)| (Key::new(key), index)));
        }
        // By `Key`, which orders as the bytes do but compares an inline prefix first.
        batch.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // Unique (`key_count`): the merge with the changes in `Store::checkpoint` relies on it.
        assert!(
            batch.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "an unresolved key twice in one checkpoint"
        );
        let lookups: Vec<Key> = batch.iter().map(|(key, _)| key.clone()).collect();
        let mut before_commit = |existed: &[bool]| {
            let mut by_index = vec![false; (end - start) as usize];
            for ((_, index), existed) in batch.iter().zip(existed) {
                by_index[(index - start) as usize] = *existed;
            }
            let mut from = start;
            while from < end {
                let to = (from + RESOLVE_CHUNK as u64).min(end);
                let answers = &by_index[(from - start) as usize..(to - start) as usize];
                self.key_count.lock().resolve(from, to, answers);
                from = to;
            }
        };
        let started = Instant::now();
        let total = changed.len().max(1);
        let mut done = 0usize;
        let mut hurried = false;
        let mut pace = || {
            done += 1;
            if !done.is_multiple_of(PACE_ROWS) {
                return;
            }
            // Somebody waits for it now, or soon will: at the checkpointer's own priority from
            // here on. Soon: the redo log switched again since it began (the next checkpoint is
            // due, and at a high redo rate the switch that needs this one's group is near), or
            // the changes since are already enough for the next one.
            // (Each lock in a statement of its own: a guard taken in the first operand of `||`
            // lives to the end of the condition, and `cache` comes before `checkpoint`.)
            if let Some(priority) = priority.as_deref_mut()
                && priority.lowered()
            {
                let urgent = self.checkpoint.lock().urgent;
                let due = self.redo.written_addr().seq.0 > writing
                    || self.cache.read().dirty_bytes() as u64 >= self.config.checkpoint_dirty_bytes;
                if urgent || due {
                    priority.foreground();
                    self.checkpoint.lock().lowered = priority.lowered();
                }
            }
            if spread.is_zero() || hurried {
                return;
            }
            // Where the rows written should be by now, were they written evenly over `spread`.
            let due = spread.mul_f64(done as f64 / total as f64);
            loop {
                let elapsed = started.elapsed();
                if elapsed >= due {
                    return;
                }
                // Needed sooner: somebody waits, or the next one is due already.
                let urgent = self.checkpoint.lock().urgent;
                if urgent
                    || self.shut_down.load(Ordering::Acquire)
                    || self.checkpoints_suspended.load(Ordering::Acquire)
                    || self.cache.read().dirty_bytes() as u64 >= self.config.checkpoint_dirty_bytes
                {
                    hurried = true;
                    self.stats.checkpoints_hurried.incr();
                    return;
                }
                std::thread::sleep((due - elapsed).min(PACE_NAP));
            }
        };
        let written = self.store.checkpoint_paced(
            &changed,
            scn,
            self.redo.identity().database_id,
            &lookups,
            &mut before_commit,
            &mut pace,
        );
        self.waits.checkpoint_write.record_since(started);
        // Nothing else that writes the data files (a reopen, the close) paces its writes.
        self.store.pace_writeback(false);
        let result = written.and_then(|()| {
            self.cache.write().end_checkpoint(&changed);
            // The data files hold everything up to `scn` durably, even if telling the redo
            // log fails below: a retry, with nothing left to write, tells it again.
            self.checkpoint.lock().last_scn = scn;
            // Older logs may be reused.
            self.redo.advance_checkpoint(scn).map_err(DbError::from)
        });
        let mut state = self.checkpoint.lock();
        match &result {
            Ok(()) => {
                if state.last_error.take().is_some() {
                    tracing::info!(%scn, "checkpoint succeeded again; writes are accepted");
                }
                state.last_scn = scn;
                state.last_at_us = Some(redo::types::now_unix_us());
                state.count += 1;
                self.stats.checkpoints.incr();
                self.stats.checkpoint_keys.add(changed.len() as u64);
            }
            Err(error) => {
                if state.last_error.is_none() {
                    tracing::error!(%error, "checkpoint failed; writes are refused until one succeeds");
                }
                state.last_error = Some(error.to_string());
            }
        }
        let failure = state.last_error.clone();
        self.checkpoint_changed.notify_all();
        drop(state);
        self.redo.note_checkpoint_failure(failure);
        result.map(|()| scn)
    }

    /// The checkpointer thread: every `checkpoint_interval`, when asked (by the log writer or
    /// the dirty-data threshold), and every `checkpoint_retry_interval` after a failure.
    pub(crate) fn checkpointer(self: Arc<Inner>) {
        let mut priority = Priority::of_this_thread(self.config.checkpoint_nice);
        let mut last = Instant::now();
        // The log the redo log wrote when the database opened: the first switch from it starts
        // a checkpoint too, as every later one does. Before, the first checkpoint after an open
        // waited for `checkpoint_interval` or the dirty threshold, and under a steady load the
        // log writer came back to the first group before either (the third switch with three
        // groups): every commit then waited while that checkpoint wrote everything since the
        // open at once ("log file switch (checkpoint incomplete)").
        // (A fresh database has none yet: its first write opens log 1, which is no switch.)
        let opened = self.redo.written_addr().seq.0.max(1);
        loop {
            {
                let writing = self.redo.written_addr().seq.0;
                let mut state = self.checkpoint.lock();
                let wait = if state.last_error.is_some() {
                    self.config.checkpoint_retry_interval
                } else {
                    self.config
                        .checkpoint_interval
                        .saturating_sub(last.elapsed())
                        .max(Duration::from_millis(10))
                };
                if !state.requested && !self.shut_down.load(Ordering::Acquire) {
                    self.checkpoint_changed
                        .wait_for(&mut state, wait.min(Duration::from_millis(200)));
                }
                if self.shut_down.load(Ordering::Acquire) {
                    return;
                }
                // A log switch since the last one began: checkpointing now, the group just
                // filled is covered long before the log writer comes back to it (incremental
                // checkpointing: small checkpoints, each spread over the time to the next).
                let switched = writing > state.began.map_or(opened, |(_, seq)| seq);
                let due = state.requested
                    || switched
                    || state.last_error.is_some()
                        && last.elapsed() >= self.config.checkpoint_retry_interval
                    || last.elapsed() >= self.config.checkpoint_interval;
                if !due {
                    drop(state);
                    // Commits made with NOWAIT never promote themselves.
                    self.promote();
                    continue;
                }
                state.requested = false;
            }
            last = Instant::now();
            if !self.shut_down.load(Ordering::Acquire) {
                let _ = self.run_checkpoint_with(Some(&mut priority));
            }
        }
    }
}
