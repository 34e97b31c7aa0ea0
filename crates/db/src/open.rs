//! Opening a database: the interrupted-copy marker, the data files' identity against the
//! redo log's, crash recovery on a primary, and the checkpointer and apply threads. A far
//! sync opens none of it: no data files, no recovery, no thread (`Opening::FarSync`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};
use redo::storage::Storage;
use redo::{RedoError, RedoLog, Role};
use stats::Metrics;

use crate::apply::{decode_record, replay};
use crate::cache::Cache;
use crate::checkpoint::CheckpointState;
use crate::clock::Clock;
use crate::key_count::KeyCount;
use crate::scan::Cursors;
use crate::store::Store;
use crate::view::Fixed;
use crate::{Database, DbConfig, DbError, Inner, Result, Stats, Waits, copy};

/// How a database opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opening {
    /// Its data files, recovered or applied to in its role; with `suspend_checkpoints`, they
    /// stay at their checkpoint.
    Database { suspend_checkpoints: bool },
    /// A far sync: a standby's redo log (standby logs, archive) and nothing else. No data
    /// file is opened or created, no redo is replayed or applied, no checkpoint is taken: the
    /// key space is an empty one in memory that nothing reads or writes.
    FarSync,
}

impl Database {
    pub(crate) fn open_with(
        config: DbConfig,
        redo: RedoLog,
        storage: &Arc<dyn Storage>,
        metrics: &Arc<Metrics>,
        opening: Opening,
    ) -> Result<Database> {
        let role = redo.role();
        let far_sync = opening == Opening::FarSync;
        if far_sync && role != Role::Standby {
            return Err(DbError::Mismatch(format!(
                "a far sync receives redo and is never a primary, but its control file says {role:?}"
            )));
        }
        let suspend_checkpoints = match opening {
            Opening::Database { suspend_checkpoints } => suspend_checkpoints,
            Opening::FarSync => true,
        };
        let marker = copy::copy_marker(&config);
        if !far_sync && storage.exists(&marker) {
            return Err(DbError::Mismatch(format!(
                "{} says a copy from the primary was interrupted: these data files are not a database; start the standby again with --from PRIMARY to make the copy again",
                marker.display()
            )));
        }
        let store = if far_sync {
            Store::without_data_files(storage)?
        } else {
            let sizes = crate::store::Sizes {
                cache_bytes: config.cache_size,
                row_filter_max: config.row_filter_max,
                row_cache_bytes: config.row_cache_size,
            };
            let store = Store::open(storage, &config.data_file(), sizes)?;
            store.set_flush_after(config.checkpoint_flush_after);
            store
        };
        let identity = redo.identity();
        let meta = store.meta()?;
        match meta.database_id {
            // (A new standby has no identity yet: its first checkpoint stamps the data files.)
            Some(id) if identity.database_id.0 != 0 && id != identity.database_id => {
                return Err(DbError::Mismatch(format!(
                    "the data files {} belong to database {id}, the redo log to database {}",
                    store.path().display(),
                    identity.database_id
                )));
            }
            Some(_) => {}
            None if identity.database_id.0 != 0 && !far_sync => store.checkpoint(
                &crate::cache::Layer::default(),
                meta.checkpoint_scn,
                identity.database_id,
                &[],
                &mut |_| {},
            )?,
            None => {}
        }
        let next_scn = redo.next_scn();
        if role == Role::Primary && meta.checkpoint_scn >= next_scn {
            return Err(DbError::Mismatch(format!(
                "the data files are checkpointed at SCN {} but the redo log ends before SCN {next_scn}: the redo log was lost or belongs to another copy",
                meta.checkpoint_scn
            )));
        }
        let mut cache = Cache::new(meta.checkpoint_scn);
        let mut keys = store.key_count()? as i64;
        let mut records = 0u64;
        let next_collection_id = AtomicU64::new(store.max_collection_id()? + 1);
        if role == Role::Primary {
            // Crash recovery: the data files at their checkpoint, plus every record after it.
            let started = Instant::now();
            let mut redo_bytes = 0u64;
            let mut reader = redo.read_from_scn(meta.checkpoint_scn.next())?;
            while let Some(record) = reader.next_record()? {
                redo_bytes += record.payload.len() as u64;
                let changes = decode_record(record.scn, record.payload)?;
                let outcome = {
                    let base = Fixed { cache: &cache, store: &store };
                    replay(&base, &next_collection_id, record.scn, &changes)?
                };
                keys += outcome.key_delta;
                cache.apply_durable(record.scn, outcome.rows);
                records += 1;
            }
            if records > 0 {
                tracing::info!(
                    records,
                    redo_bytes,
                    from_scn = %meta.checkpoint_scn.next(),
                    to_scn = %cache.promoted_scn(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "crash recovery: replayed redo after the last checkpoint"
                );
            }
        }
        let inner = Arc::new(Inner {
            role,
            applied_scn: AtomicU64::new(cache.promoted_scn().0),
            cache: RwLock::new(cache),
            write: Mutex::new(()),
            key_count: Mutex::new(KeyCount::new(keys)),
            checkpoint: Mutex::new(CheckpointState {
                last_scn: meta.checkpoint_scn,
                ..CheckpointState::default()
            }),
            checkpoint_changed: Condvar::new(),
            checkpoint_running: Mutex::new(()),
            cursors: Mutex::new(Cursors { next: 1, ..Cursors::default() }),
            next_collection_id,
            clock: RwLock::new(Arc::new(crate::clock::SystemClock)),
            watches: Mutex::new(crate::watch::Watches::default()),
            random: Mutex::new(crate::ops::Random::new(
                crate::clock::SystemClock.now_ms() ^ std::process::id() as u64,
            )),
            expired_keys: AtomicU64::new(0),
            keys_changed: tokio::sync::watch::Sender::new(0),
            shut_down: AtomicBool::new(false),
            checkpoints_suspended: AtomicBool::new(suspend_checkpoints),
            recovered_records: AtomicU64::new(records),
            far_sync,
            waits: Waits {
                free_buffer: metrics.wait("free buffer waits"),
                checkpoint_write: metrics.wait("db file parallel write"),
                apply_read: metrics.wait("apply redo read"),
                apply_cache: metrics.wait("apply cache lock"),
            },
            stats: Stats {
                checkpoints: metrics.stat("checkpoints completed"),
                checkpoints_hurried: metrics.stat("checkpoints hurried"),
                checkpoint_keys: metrics.stat("checkpoint keys written"),
                recovery_records: metrics.stat("recovery redo records applied"),
                applied_records: metrics.stat("apply redo records applied"),
                applied_size: metrics.stat("apply redo size"),
            },
            config,
            redo,
            store,
        });
        inner.stats.recovery_records.add(records);
        if far_sync {
            tracing::info!(
                "far sync: standby logs and archive only; no data files, no apply, never opened"
            );
            return Ok(Database { inner, threads: Mutex::new(Vec::new()) });
        }
        // When a log switch needs a group back, the log writer asks for a checkpoint.
        let weak = Arc::downgrade(&inner);
        inner.redo.set_checkpoint_handler(Arc::new(move |_needed| {
            if let Some(inner) = weak.upgrade() {
                inner.request_urgent_checkpoint();
            }
        }));
        let spawn = |name: &str, work: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.to_string()).spawn(work).map_err(|error| {
                DbError::Redo(RedoError::Io {
                    op: "start thread",
                    path: name.into(),
                    source: error,
                })
            })
        };
        let mut threads = Vec::new();
        let checkpointer = inner.clone();
        threads.push(spawn("db-ckpt", Box::new(move || checkpointer.checkpointer()))?);
        let filter = inner.clone();
        threads.push(spawn(
            "db-filter",
            Box::new(move || {
                // Building a filter is never urgent: the sessions come first.
                crate::priority::Priority::of_this_thread(10).background();
                filter.store.run_row_filter_builder()
            }),
        )?);
        if role == Role::Standby {
            let applier = inner.clone();
            threads.push(spawn("db-apply", Box::new(move || applier.apply_loop()))?);
        }
        Ok(Database { inner, threads: Mutex::new(threads) })
    }
}
