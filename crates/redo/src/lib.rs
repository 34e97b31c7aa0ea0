//! The redo engine: how a change becomes durable redo, and how that redo is read back.
//!
//! A session appends a record (the redo of one transaction) to the `LogBuffer` and gets its
//! SCN; a commit then waits until the log writer has made that SCN durable in the online log
//! (group commit: one write and one sync for every commit waiting). Online logs are N groups
//! of M mirrored, preallocated files, reused round-robin; a filled log is switched away from,
//! archived by the archiver, and reused once it is archived and the database's checkpoint has
//! passed it. Opening the engine finds the true end of redo (the recovery scan); a reader
//! returns the records from any SCN, from archived and online logs alike.
//!
//! `RedoLog` is the whole engine. See `ARCHITECTURE.md` and `docs/redo-format.md`.

pub mod archiver;
pub mod catalog;
mod commit;
pub mod config;
pub mod control;
pub mod crashdisk;
pub mod dir_lock;
pub mod error;
pub mod format;
pub mod log_buffer;
pub mod log_writer;
pub mod online_log;
mod open;
pub mod reader;
pub mod retention;
pub mod rewind;
pub mod scheduling;
pub mod ship;
pub mod standby;
mod status;
pub mod storage;
pub mod types;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use stats::{Metrics, Statistic, WaitEvent};

pub use catalog::ArchivedLog;
pub use commit::{BufferSpaceWait, CommitLogging, CommitOptions, CommitWait};
pub use config::{DeletionPolicy, RedoConfig, WriterMode};
pub use error::{RedoError, Result};
pub use log_writer::Durable;
pub use online_log::{GroupState, GroupStatus, MemberState, MemberStatus};
pub use reader::RedoReader;
pub use scheduling::Scheduling;
pub use status::RedoStatus;
pub use storage::{IoMode, OsStorage, Storage};
pub use types::{DatabaseId, Incarnation, LogSeq, RedoAddr, RedoRecord, RedoThread, Scn};

use catalog::ArchiveCatalog;
pub use control::{ControlData, ControlFile, Fence};
use log_buffer::LogBuffer;
use log_writer::LogWriter;
use online_log::GroupTable;

/// Why a log switch happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwitchReason {
    /// The current log had no room for the next record.
    Full,
    /// The first write after opening (redo is never appended to a log found open).
    FirstWrite,
    /// `switch_logfile` was called.
    Manual,
    /// The current log held redo older than `archive_lag_target`.
    ArchiveLagTarget,
}

/// What this redo log is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// It generates redo: sessions append, the log writer writes online logs.
    Primary,
    /// It receives its primary's redo into standby logs (the same bytes at the same offsets).
    Standby,
}

/// Who this database is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub database_id: DatabaseId,
    pub incarnation: Incarnation,
    pub thread: RedoThread,
}

/// The statistics the engine keeps (names as in the reference).
pub(crate) struct Counters {
    pub redo_size: Arc<Statistic>,
    pub redo_entries: Arc<Statistic>,
    pub redo_writes: Arc<Statistic>,
    pub redo_blocks_written: Arc<Statistic>,
    pub redo_wastage: Arc<Statistic>,
    /// Records written from their committer's memory, never copied into the log buffer
    /// (`log_writer::borrowed`).
    pub redo_borrowed_records: Arc<Statistic>,
    pub redo_writes_handed_over: Arc<Statistic>,
    pub redo_synch_writes: Arc<Statistic>,
    pub user_commits: Arc<Statistic>,
    pub log_switches: Arc<Statistic>,
    pub log_space_requests: Arc<Statistic>,
    pub archived_logs: Arc<Statistic>,
    pub archived_bytes: Arc<Statistic>,
}

/// The wait events the engine records. (A session held up by a log switch is counted under
/// the switch's reason by `log_writer::SwitchClock`.)
pub(crate) struct Waits {
    pub log_file_sync: Arc<WaitEvent>,
    pub log_file_parallel_write: Arc<WaitEvent>,
    /// A session waiting for room in the log buffer (the log buffer's own appends record it
    /// there; a task's wait through `RedoLog::buffer_space_wait`).
    pub log_buffer_space: Arc<WaitEvent>,
    /// The log writer's own switch, whole: one per switch.
    pub log_writer_switch: Arc<WaitEvent>,
    /// A standby's receiver waiting for its archiver to free a standby log group.
    pub log_file_switch_archiving: Arc<WaitEvent>,
    pub log_file_sequential_read: Arc<WaitEvent>,
    pub log_archive_io: Arc<WaitEvent>,
}

/// Called by the log writer when a log switch needs the checkpoint to reach an SCN.
pub type CheckpointHandler = Arc<dyn Fn(Scn) + Send + Sync>;

/// Everything the engine's threads share.
pub(crate) struct Shared {
    pub config: RedoConfig,
    pub storage: Arc<dyn Storage>,
    pub metrics: Arc<Metrics>,
    pub role: Role,
    /// A standby's identity is adopted from its primary at the first contact.
    pub identity: parking_lot::RwLock<Identity>,
    pub buffer: LogBuffer,
    pub table: Mutex<GroupTable>,
    /// Signalled when archiving or a checkpoint may have made a group reusable.
    pub table_changed: Condvar,
    pub control_file: ControlFile,
    pub control: Mutex<ControlData>,
    pub catalog: ArchiveCatalog,
    /// The log writer: who leads and who waits, the writer's position, the durable and
    /// written ends, the writes in flight, the hand-over, the stall, its failure (its lock
    /// order and invariants are in `log_writer::LogWriter`).
    pub log_writer: LogWriter,
    /// Test-only points where a test may stop a thread to force an interleaving.
    #[cfg(test)]
    pub(crate) failpoint: Mutex<Option<Failpoint>>,
    pub archive_queue: Mutex<archiver::ArchiveQueue>,
    pub archive_ready: Condvar,
    shutdown: AtomicBool,
    /// Set while archiving of some log fails: new redo is refused then (see `append`).
    pub archive_failing: AtomicBool,
    /// The highest log sequence a log switch (or a standby's receiving, for a free standby
    /// log group) has waited to see archived: the archivers copy it and every earlier log at
    /// once, without spreading the copy (`archive_spread_max`).
    pub archive_hurry: std::sync::atomic::AtomicU64,
    /// A test's spread for every copy, in place of `archive_spread_max`'s rule.
    #[cfg(test)]
    pub(crate) archive_spread_for_tests: Mutex<Option<std::time::Duration>>,
    pub checkpoint_handler: Mutex<Option<CheckpointHandler>>,
    /// Why checkpoints fail, while they do (told by the database): a log switch waiting for
    /// one then stalls commits instead of hanging them.
    pub checkpoint_failure: Mutex<Option<String>>,
    /// Redo transport, if any destination is configured.
    pub shipper: parking_lot::RwLock<Option<Arc<dyn ship::Shipper>>>,
    /// A standby's receiving state (partial archived logs of gap resolution).
    pub standby: Mutex<standby::Receiving>,
    /// A standby's knowledge of its primary: every SCN at or below this is durable there.
    pub primary_confirmed: AtomicU64,
    /// A standby's delayed apply: readers hand out no record above this SCN (u64::MAX: none
    /// held back). See `RedoLog::set_apply_horizon`.
    pub apply_horizon: AtomicU64,
    pub stats: Counters,
    pub waits: Waits,
}

impl Shared {
    /// Changes the control file durably: `change` edits a copy, which is written (replacing
    /// the file) and then becomes the engine's. Nothing changes if `change` or the write fails.
    ///
    /// Refused once the engine is shut down (`shutdown` sets its flag, then takes this lock):
    /// a role change rewrites the file while the database is closed (`rewrite_control`), and
    /// a late writer of this engine (a hello or a relay seal its receiver was still serving)
    /// would put its cached copy, the role and incarnation before the change, back over it.
    pub(crate) fn update_control(
        &self,
        change: impl FnOnce(&mut ControlData) -> Result<()>,
    ) -> Result<ControlData> {
        let mut control = self.control.lock();
        if self.is_shut_down() {
            return Err(RedoError::Shutdown);
        }
        let mut updated = control.clone();
        change(&mut updated)?;
        if updated != *control {
            self.control_file.write(self.storage.as_ref(), &updated)?;
            *control = updated.clone();
        }
        Ok(updated)
    }

    pub(crate) fn durable_scn(&self) -> Scn {
        self.log_writer.durable_scn()
    }

    pub(crate) fn durable_addr(&self) -> RedoAddr {
        self.log_writer.durable_addr()
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    pub(crate) fn identity(&self) -> Identity {
        *self.identity.read()
    }

    pub(crate) fn failure(&self) -> Option<RedoError> {
        self.log_writer.failure()
    }
}

/// The redo engine of one database. `handle` gives other components (redo transport) a
/// second handle on the same engine; only the handle `open` returned stops the engine when
/// it is dropped.
pub struct RedoLog {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    owner: bool,
}

impl std::fmt::Debug for RedoLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedoLog").field("dir", &self.shared.config.dir).finish()
    }
}

impl RedoLog {
    /// Switches logs now (writing what is buffered first): the current log is closed and
    /// queued for archiving. Returns the sequence of the new current log.
    /// A standby refuses: its logs switch when its primary's do, and a log of its own would
    /// take a sequence the primary is about to send.
    pub fn switch_logfile(&self) -> Result<LogSeq> {
        if self.shared.is_standby() {
            return Err(RedoError::Refused(
                "this is a standby: its logs switch when its primary's do; switch logs on the primary".into(),
            ));
        }
        self.shared.with_leadership(|writer| {
            self.shared.write_pending(writer)?;
            self.shared.switch(writer, SwitchReason::Manual)
        })
    }

    /// Records that the data files hold every record up to `scn` durably, so that logs
    /// before it may be reused. Persisted before it returns.
    pub fn advance_checkpoint(&self, scn: Scn) -> Result<()> {
        let durable = self.confirmed_scn();
        if scn > durable {
            return Err(RedoError::Config {
                field: "checkpoint",
                reason: format!("checkpoint SCN {scn} is beyond the durable redo ({durable})"),
            });
        }
        if scn <= self.shared.control.lock().checkpoint_scn {
            return Ok(());
        }
        self.shared.update_control(|control| {
            control.checkpoint_scn = control.checkpoint_scn.max(scn);
            Ok(())
        })?;
        self.shared.table_changed.notify_all();
        Ok(())
    }

    /// The control file's content: identity, role, incarnation, fencing, layout.
    pub fn control(&self) -> ControlData {
        self.shared.control.lock().clone()
    }

    /// Names the configuration member this database is, the first time; refuses another
    /// name later (a data directory started under another member's configuration).
    pub fn claim_member(&self, member: &str) -> Result<()> {
        self.shared.update_control(|control| {
            if control.member.is_empty() {
                control.member = member.to_string();
                Ok(())
            } else if control.member == member {
                Ok(())
            } else {
                Err(RedoError::Refused(format!(
                    "this database is member '{}' of its configuration, not '{member}': the data directory belongs to another member",
                    control.member
                )))
            }
        })?;
        Ok(())
    }

    /// Records that a standby follows this primary (see `ControlData::followed`).
    pub fn note_followed(&self) -> Result<()> {
        if self.shared.control.lock().followed {
            return Ok(());
        }
        self.shared.update_control(|control| {
            control.followed = true;
            Ok(())
        })?;
        Ok(())
    }

    /// Records durably that a newer incarnation exists that this database is not part of.
    /// From then on this redo log writes nothing and makes nothing durable: a commit still
    /// waiting gets an error (its redo is part of the divergent tail a reinstate sets aside),
    /// never a late acknowledgement from a write that no standby protects.
    pub fn fence(&self, fence: Fence) -> Result<()> {
        let reason = format!(
            "this database was fenced: '{}' is the primary of incarnation {}; commits not yet acknowledged never will be",
            fence.by, fence.incarnation
        );
        if !self.shared.is_standby() {
            self.shared.refuse_further_redo(&reason);
        }
        self.shared.update_control(|control| {
            if control.fenced.as_ref().is_none_or(|known| known.incarnation <= fence.incarnation) {
                control.fenced = Some(fence);
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Records durably that this member (a relay) takes no redo of an incarnation below
    /// `below` any more (`ControlData::sealed_below`): before the seal is answered.
    pub fn seal_below(&self, below: Incarnation) -> Result<()> {
        self.shared.update_control(|control| {
            control.sealed_below = control.sealed_below.max(below);
            Ok(())
        })?;
        Ok(())
    }

    /// Changes the control file of a database that is not open (a role change happens while
    /// the database is closed: the control file is its commit point). `change` edits a copy,
    /// which replaces the file durably.
    pub fn rewrite_control(
        config: &RedoConfig,
        storage: &dyn Storage,
        change: impl FnOnce(&mut ControlData) -> Result<()>,
    ) -> Result<ControlData> {
        let file = ControlFile::new(&config.dir);
        let mut control = file.read(storage, Role::Primary)?;
        change(&mut control)?;
        file.write(storage, &control)?;
        Ok(control)
    }

    /// The control file of a database that is not open, if it has one.
    pub fn read_control(config: &RedoConfig, storage: &dyn Storage) -> Result<Option<ControlData>> {
        let file = ControlFile::new(&config.dir);
        if !file.exists(storage) {
            return Ok(None);
        }
        file.read(storage, Role::Primary).map(Some)
    }

    /// Sets the function the log writer calls when a log switch waits for a checkpoint (with
    /// the SCN the checkpoint must reach). It runs on the log writer's thread: it should
    /// start a checkpoint and return; it may call `advance_checkpoint`.
    pub fn set_checkpoint_handler(&self, handler: CheckpointHandler) {
        *self.shared.checkpoint_handler.lock() = Some(handler);
    }

    /// Tells the log writer that checkpoints fail (`Some`, with why) or succeed again
    /// (`None`). While they fail, a log switch that needs a checkpoint does not hang the
    /// commits waiting for it: they get `CommitStalled` at once.
    pub fn note_checkpoint_failure(&self, reason: Option<String>) {
        {
            let mut failure = self.shared.checkpoint_failure.lock();
            if *failure == reason {
                return;
            }
            *failure = reason;
        }
        let _table = self.shared.table.lock();
        self.shared.table_changed.notify_all();
    }

    /// Another handle on this engine (it does not stop the engine when dropped).
    pub fn handle(&self) -> RedoLog {
        RedoLog { shared: self.shared.clone(), threads: Mutex::new(Vec::new()), owner: false }
    }

    /// Whether the engine has been shut down.
    pub fn is_shut_down(&self) -> bool {
        self.shared.is_shut_down()
    }

    /// Plugs redo transport in: every log write from now on is offered to `shipper`.
    pub fn set_shipper(&self, shipper: Option<Arc<dyn ship::Shipper>>) {
        *self.shared.shipper.write() = shipper;
    }

    pub fn checkpoint_scn(&self) -> Scn {
        self.shared.control.lock().checkpoint_scn
    }

    /// Every record at or below this SCN is durable.
    pub fn durable_scn(&self) -> Scn {
        self.shared.durable_scn()
    }

    /// The SCN the next record will get.
    pub fn next_scn(&self) -> Scn {
        self.shared.buffer.next_scn()
    }

    /// The end of durable redo.
    pub fn durable_addr(&self) -> RedoAddr {
        self.shared.durable_addr()
    }

    /// The end of what the log writer has written and synced locally (what may be shipped).
    pub fn written_addr(&self) -> RedoAddr {
        self.shared.log_writer.written_addr()
    }

    pub fn identity(&self) -> Identity {
        self.shared.identity()
    }

    pub fn role(&self) -> Role {
        self.shared.role
    }

    /// Every SCN at or below this is durable and will never be rolled back: on a primary its
    /// durable SCN; on a standby, what its primary has confirmed durable there.
    pub fn confirmed_scn(&self) -> Scn {
        match self.shared.role {
            Role::Primary => self.shared.durable_scn(),
            Role::Standby => Scn(self.shared.primary_confirmed.load(Ordering::Acquire)),
        }
    }

    /// Delayed apply on a standby: from now on its readers (apply) hand out no record above
    /// `scn`; `Scn(u64::MAX)` lifts the limit. Raising it wakes readers that tail.
    pub fn set_apply_horizon(&self, scn: Scn) {
        self.shared.apply_horizon.store(scn.0, Ordering::Release);
        self.wake_readers();
    }

    /// Raises the apply horizon to `scn` if it is below (never lowers it).
    pub fn raise_apply_horizon(&self, scn: Scn) {
        if self.shared.apply_horizon.fetch_max(scn.0, Ordering::AcqRel) < scn.0 {
            self.wake_readers();
        }
    }

    /// The highest SCN a standby's readers may hand out (`u64::MAX`: no limit).
    pub fn apply_horizon(&self) -> Scn {
        Scn(self.shared.apply_horizon.load(Ordering::Acquire))
    }

    fn wake_readers(&self) {
        self.shared.log_writer.wake_readers();
    }

    /// Waits up to `timeout` for durable redo beyond `seen` (readers that tail).
    pub fn wait_for_redo(&self, seen: RedoAddr, timeout: std::time::Duration) {
        self.shared.log_writer.wait_for_redo(seen, timeout, || self.shared.is_shut_down());
    }

    pub fn config(&self) -> &RedoConfig {
        &self.shared.config
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The largest record `append` accepts.
    pub fn max_record_len(&self) -> usize {
        self.shared.config.max_record_len()
    }

    /// The log that holds `scn` (or will: the next log, when `scn` is beyond all redo).
    pub fn seq_holding(&self, scn: Scn) -> Result<LogSeq> {
        self.shared.seq_holding(scn)
    }

    /// A reader from the log holding `scn`: it returns records with SCN `scn` and above.
    pub fn read_from_scn(&self, scn: Scn) -> Result<RedoReader> {
        RedoReader::from_scn(self.shared.clone(), scn)
    }

    /// A reader from the first record of log `seq`.
    pub fn read_from_seq(&self, seq: LogSeq) -> RedoReader {
        RedoReader::from_seq(self.shared.clone(), seq)
    }

    /// The archive catalog, in log sequence order.
    pub fn archived_logs(&self) -> Vec<ArchivedLog> {
        let mut entries = self.shared.catalog.entries();
        entries.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.path.cmp(&b.path)));
        entries
    }

    /// Writes what is buffered, stops the background threads and waits for them. Logs not
    /// yet archived are archived at the next open.
    pub fn shutdown(&self) -> Result<()> {
        if !self.owner {
            // Only the handle `open` returned stops the engine.
            return Ok(());
        }
        let flushed = if self.shared.failure().is_none() && !self.shared.is_shut_down() {
            self.flush().map(|_| ())
        } else {
            Ok(())
        };
        #[cfg(test)]
        self.shared.failpoint("shutdown: flushed");
        self.shared.shutdown.store(true, Ordering::Release);
        // A control-file write in progress ends before this returns; none starts after
        // (`update_control`).
        drop(self.shared.control.lock());
        self.shared.buffer.close();
        self.shared.log_writer.background.notify();
        self.shared.log_writer.pipeline.wake_all();
        self.shared.wake_handover_writer();
        {
            let _queue = self.shared.archive_queue.lock();
            self.shared.archive_ready.notify_all();
        }
        {
            let _table = self.shared.table.lock();
            self.shared.table_changed.notify_all();
        }
        for handle in self.threads.lock().drain(..) {
            let _ = handle.join();
        }
        flushed
    }

    /// Whether `path` is inside the redo directory (used to refuse data files there).
    pub fn owns_path(&self, path: &Path) -> bool {
        path.starts_with(&self.shared.config.dir)
    }
}

impl Drop for RedoLog {
    fn drop(&mut self) {
        if self.owner && !self.threads.lock().is_empty() {
            let _ = self.shutdown();
        }
    }
}

/// A test's hook at a named point (`Shared::failpoint`).
#[cfg(test)]
pub(crate) type Failpoint = Arc<dyn Fn(&'static str) + Send + Sync>;

#[cfg(test)]
impl Shared {
    /// Runs this engine's test hook, if one is set, at `point`.
    pub(crate) fn failpoint(&self, point: &'static str) {
        let hook = self.failpoint.lock().clone();
        if let Some(hook) = hook {
            hook(point);
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_archive_pieces;
#[cfg(test)]
mod tests_archive_spread;
#[cfg(test)]
mod tests_borrowed;
#[cfg(test)]
mod tests_handover;
#[cfg(test)]
mod tests_pipeline;
#[cfg(test)]
mod tests_recovery;
#[cfg(test)]
mod tests_stall;
#[cfg(test)]
mod tests_standby;
#[cfg(test)]
mod tests_switch;
#[cfg(test)]
mod tests_switch_waits;
