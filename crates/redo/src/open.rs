//! Opening the engine: the directories and the control file (created, or checked against
//! the configured layout), the recovery scan of the online logs, the shared state, and the
//! background writer and archiver threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use stats::Metrics;

use crate::catalog::ArchiveCatalog;
use crate::log_buffer::{LogBuffer, Signal};
use crate::log_writer::{self, LogWriter};
use crate::{
    ControlData, ControlFile, Counters, DatabaseId, Identity, Incarnation, LogSeq, RedoAddr,
    RedoConfig, RedoError, RedoLog, RedoThread, Result, Role, Scheduling, Scn, Shared, Storage,
    Waits, archiver, format, online_log, standby, types,
};

impl RedoLog {
    /// Opens the redo log of the database whose paths `config` names (resolved, see
    /// `RedoConfig::resolve`), creating it as a primary if the directory holds none. The role
    /// is the database's own (its control file's): a database that has become a standby
    /// opens as one. Finds the true end of redo, closes the log that was being written, and
    /// starts the background writer and the archivers.
    pub fn open(
        config: RedoConfig,
        storage: Arc<dyn Storage>,
        metrics: Arc<Metrics>,
    ) -> Result<RedoLog> {
        RedoLog::open_as(Role::Primary, config, storage, metrics)
    }

    /// Opens the standby logs of a database, creating them as a standby if the directory
    /// holds none (a new standby has no identity until its primary first connects). As
    /// `open`, the role is the database's own. Logs found open are scanned to their durable
    /// end and left open: the primary resumes them.
    pub fn open_standby(
        config: RedoConfig,
        storage: Arc<dyn Storage>,
        metrics: Arc<Metrics>,
    ) -> Result<RedoLog> {
        RedoLog::open_as(Role::Standby, config, storage, metrics)
    }

    /// Opens the redo log in the role its control file records, or `initial` for a database
    /// that has none yet.
    pub fn open_as(
        initial: Role,
        config: RedoConfig,
        storage: Arc<dyn Storage>,
        metrics: Arc<Metrics>,
    ) -> Result<RedoLog> {
        config.validate()?;
        for dir in
            std::iter::once(&config.dir).chain(&config.member_dirs).chain(&config.archive_dests)
        {
            storage
                .create_dir_all(dir)
                .map_err(|error| RedoError::io("create directory", dir, error))?;
        }
        let control_file = ControlFile::new(&config.dir);
        let write_bytes_max = write_bytes_max(&config);
        let control = if control_file.exists(storage.as_ref()) {
            let mut control = control_file.read(storage.as_ref(), initial)?;
            check_layout(&config, &control)?;
            if control.write_bytes_max < write_bytes_max {
                control.write_bytes_max = write_bytes_max;
            }
            // (Also upgrades a version 1 file.)
            control_file.write(storage.as_ref(), &control)?;
            control
        } else {
            let existing = config.member_path(0, 0);
            if storage.exists(&existing) {
                return Err(RedoError::Layout(format!(
                    "{} exists but the control file {} does not; refusing to guess which database the logs belong to",
                    existing.display(),
                    control_file.path().display()
                )));
            }
            let control = ControlData {
                // A standby takes its primary's identity at the first contact (0: none yet).
                database_id: DatabaseId(if initial == Role::Primary {
                    rand::random::<u64>() | 1
                } else {
                    0
                }),
                incarnation: Incarnation(1),
                thread: RedoThread(1),
                checkpoint_scn: Scn::ZERO,
                created_us: types::now_unix_us(),
                block_size: config.block_size,
                groups: config.groups,
                members: config.members,
                log_file_size: config.log_file_size,
                write_bytes_max,
                role: initial,
                followed: false,
                base_seq: LogSeq(0),
                fenced: None,
                sealed_below: Incarnation(0),
                member: String::new(),
            };
            control_file.write(storage.as_ref(), &control)?;
            control
        };
        let role = control.role;
        let catalog = ArchiveCatalog::open(storage.as_ref(), &config.dir.join("archive_catalog"))?;
        let opened = online_log::open_groups(&config, storage.as_ref(), &control, &catalog, role)?;
        let identity = Identity {
            database_id: control.database_id,
            incarnation: control.incarnation,
            thread: control.thread,
        };
        let background = Arc::new(Signal::default());
        let switch_clock = Arc::new(log_writer::SwitchClock::new(&metrics));
        let mut buffer = LogBuffer::new(
            config.strand_size(),
            config.log_buffer_strands,
            opened.next_scn,
            background.clone(),
            &metrics,
        );
        buffer.charge_switches_to(switch_clock.clone());
        let durable_addr = match opened
            .table
            .current
            .and_then(|current| opened.table.groups[current].log.as_ref())
        {
            Some(log) => RedoAddr {
                seq: log.header.seq,
                offset: log.end.map_or(opened.open_end, |end| end.end_offset),
            },
            None => RedoAddr::default(),
        };
        let stats = Counters {
            redo_size: metrics.stat("redo size"),
            redo_entries: metrics.stat("redo entries"),
            redo_writes: metrics.stat("redo writes"),
            redo_blocks_written: metrics.stat("redo blocks written"),
            redo_wastage: metrics.stat("redo wastage"),
            redo_borrowed_records: metrics.stat("redo borrowed records"),
            redo_writes_handed_over: metrics.stat("redo writes handed over"),
            redo_synch_writes: metrics.stat("redo synch writes"),
            user_commits: metrics.stat("user commits"),
            log_switches: metrics.stat("redo log switches"),
            log_space_requests: metrics.stat("redo log space requests"),
            archived_logs: metrics.stat("archived logs"),
            archived_bytes: metrics.stat("archived log bytes"),
        };
        let waits = Waits {
            log_file_sync: metrics.wait("log file sync"),
            log_file_parallel_write: metrics.wait("log file parallel write"),
            log_buffer_space: metrics.wait("log buffer space"),
            log_writer_switch: metrics.wait("log writer switch"),
            log_file_switch_archiving: metrics.wait(stats::LOG_FILE_SWITCH_ARCHIVING),
            log_file_sequential_read: metrics.wait("log file sequential read"),
            log_archive_io: metrics.wait("Log archive I/O"),
        };
        let shared = Arc::new(Shared {
            log_writer: LogWriter::new(
                opened.next_scn,
                opened.last_seq,
                durable_addr,
                background,
                switch_clock,
            ),
            #[cfg(test)]
            failpoint: Mutex::new(None),
            table: Mutex::new(opened.table),
            table_changed: Condvar::new(),
            control: Mutex::new(control),
            control_file,
            catalog,
            buffer,
            archive_queue: Mutex::new(archiver::ArchiveQueue::default()),
            archive_ready: Condvar::new(),
            shutdown: AtomicBool::new(false),
            archive_failing: AtomicBool::new(false),
            archive_hurry: std::sync::atomic::AtomicU64::new(0),
            #[cfg(test)]
            archive_spread_for_tests: Mutex::new(None),
            checkpoint_handler: Mutex::new(None),
            checkpoint_failure: Mutex::new(None),
            shipper: parking_lot::RwLock::new(None),
            standby: Mutex::new(standby::Receiving::new(opened.open_end)),
            primary_confirmed: AtomicU64::new(0),
            apply_horizon: AtomicU64::new(u64::MAX),
            role,
            identity: parking_lot::RwLock::new(identity),
            stats,
            waits,
            metrics,
            storage,
            config,
        });
        for seq in opened.to_archive {
            shared.queue_archive(seq);
        }
        let mut threads = Vec::new();
        let scheduling = shared.config.thread_scheduling;
        for worker in 0..shared.config.archiver_workers {
            let shared = shared.clone();
            threads
                .push(spawn(format!("redo-arc{worker}"), scheduling, move || shared.archiver())?);
        }
        if role == Role::Primary {
            let writer = shared.clone();
            threads.push(spawn("redo-lgwr".to_string(), scheduling, move || {
                writer.background_writer()
            })?);
            let waiter = shared.clone();
            threads
                .push(spawn("redo-ackwait".to_string(), scheduling, move || waiter.ack_waiter())?);
            let handover = shared.clone();
            threads.push(spawn("redo-lgwr-task".to_string(), scheduling, move || {
                handover.handover_writer()
            })?);
        }
        tracing::info!(
            dir = %shared.config.dir.display(),
            database_id = %identity.database_id,
            next_scn = %opened.next_scn,
            "redo log open"
        );
        Ok(RedoLog { shared, threads: Mutex::new(threads), owner: true })
    }
}

fn spawn(
    name: String,
    scheduling: Scheduling,
    work: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            scheduling.apply_to_this_thread();
            work()
        })
        .map_err(|error| RedoError::io("start thread", name, error))
}

/// The largest single log write a configuration can issue: a full log buffer laid out in
/// units, plus the unit that padding can add.
fn write_bytes_max(config: &RedoConfig) -> u64 {
    // The buffer charges every record its header, so a write's record stream is at most the
    // buffer's size.
    let units = (config.log_buffer_size as usize).div_ceil(format::unit_capacity(config.block_size))
        as u64
        + 1;
    units * u64::from(config.block_size)
}

fn check_layout(config: &RedoConfig, control: &ControlData) -> Result<()> {
    let mismatch = |field: &str, created: String, configured: String| {
        Err(RedoError::Layout(format!(
            "{field}: the redo log was created with {created}, the configuration says {configured}; changing the layout of existing logs is not supported"
        )))
    };
    if control.block_size != config.block_size {
        return mismatch(
            "block_size",
            control.block_size.to_string(),
            config.block_size.to_string(),
        );
    }
    if control.groups != config.groups {
        return mismatch("groups", control.groups.to_string(), config.groups.to_string());
    }
    if control.members != config.members {
        return mismatch("members", control.members.to_string(), config.members.to_string());
    }
    if control.log_file_size != config.log_file_size {
        return mismatch(
            "log_file_size",
            control.log_file_size.to_string(),
            config.log_file_size.to_string(),
        );
    }
    Ok(())
}
