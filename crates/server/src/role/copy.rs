//! Copies of the data for new standbys: the serving member's side (the primary's or a
//! database standby's: a `DataSnapshot` of the database's data files) and the new standby's (`copy_from_primary`, for `redoguard server --from` and
//! for a reinstate that must rebuild).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, anyhow, bail};
use db::Database;
use db::config::DbConfig;
use db::copy::CopyWriter;
use redo::{
    ControlData, ControlFile, DatabaseId, Incarnation, LogSeq, RedoConfig, RedoThread, Role, Scn,
    Storage,
};
use roles::{Branch, IncarnationHistory};
use transport::{DataSnapshot, Entries, SnapshotSource};

use crate::config::ServerConfig;

struct Snapshot(db::store::StoreSnapshot);

impl DataSnapshot for Snapshot {
    fn checkpoint_scn(&self) -> Scn {
        self.0.checkpoint_scn
    }

    fn keys(&self) -> u64 {
        self.0.keys
    }

    fn bytes(&self) -> u64 {
        self.0.bytes
    }

    fn next_entries(&mut self, max_bytes: usize) -> Result<Entries, String> {
        self.0.next_entries(max_bytes).map_err(|error| error.to_string())
    }
}

/// Snapshots of `db`'s data files, for the redo port of a primary or of a standby.
///
/// A primary writes `followed` before it serves one: the new standby holds its database and
/// may be failed over to from then on, even if this primary crashes before its first hello
/// reaches it, so a restart must hear from every destination (`confirmation`). Found by
/// `roles/tests/model_restart.rs`: without it, a primary that served the copies its standbys
/// were built from and crashed before any welcomed it restarted with its gate open, beside
/// the primary a failover had made of one of them.
pub(super) fn snapshot_source(db: &Arc<Database>) -> SnapshotSource {
    let db = Arc::downgrade(db);
    Arc::new(move || {
        let db = db.upgrade().ok_or("the database is closing")?;
        if db.redo().role() == Role::Primary {
            db.redo().note_followed().map_err(|error| {
                format!("cannot record that a standby is built from this primary: {error}")
            })?;
        }
        db.snapshot()
            .map(|snapshot| Box::new(Snapshot(snapshot)) as Box<dyn DataSnapshot>)
            .map_err(|error| error.to_string())
    })
}

/// Moves a closed database's control file, catalog, incarnation history and data file into
/// `aside` (its logs are set aside by `redo::rewind`), leaving room for a copy.
pub(super) fn set_aside_database(
    storage: &dyn Storage,
    redo: &RedoConfig,
    db: &DbConfig,
    aside: &Path,
) -> anyhow::Result<()> {
    for (path, name) in [
        (redo.dir.join("control"), "control"),
        (redo.dir.join("archive_catalog"), "archive_catalog"),
        (IncarnationHistory::path(&redo.dir), "incarnations"),
        (db.data_file(), "data"),
    ] {
        if storage.exists(&path) {
            storage
                .rename(&path, &aside.join(name))
                .with_context(|| format!("cannot set {} aside", path.display()))?;
        }
    }
    for dir in [redo.dir.as_path(), db.dir.as_path()] {
        storage.sync_dir(dir).with_context(|| format!("cannot sync {}", dir.display()))?;
    }
    Ok(())
}

/// Makes this (empty) data directory a standby of the primary `primary` whose redo listener
/// is at `address` (over mutual TLS if the configuration says so: its certificate must be for
/// `primary`): a consistent copy of its data files, its identity and incarnation history, and
/// the first log to receive. The server then opens it as a standby, and the primary ships
/// redo from that log on. Progress is logged every second.
pub fn copy_from_primary(
    config: &ServerConfig,
    storage: &Arc<dyn Storage>,
    address: &str,
    primary: &str,
    member: &str,
) -> anyhow::Result<()> {
    let tls = config.redo_tls()?;
    let (redo_config, db_config) = config.resolved();
    let marker = db::copy::copy_marker(&db_config);
    if storage.exists(&marker) {
        // An earlier copy was interrupted: what it left is no database; start again.
        tracing::warn!(dir = %config.server.data_dir.display(), "an interrupted copy is discarded and made again");
        for path in [
            redo_config.dir.join("control"),
            IncarnationHistory::path(&redo_config.dir),
            redo_config.dir.join("archive_catalog"),
            db_config.data_file(),
            marker.clone(),
        ] {
            if storage.exists(&path) {
                storage
                    .remove(&path)
                    .with_context(|| format!("cannot remove {}", path.display()))?;
            }
        }
    }
    if ControlFile::new(&redo_config.dir).exists(storage.as_ref()) {
        bail!(
            "{} holds a database already: --from needs an empty data directory",
            config.server.data_dir.display()
        );
    }
    let started = Instant::now();
    let writer: std::cell::RefCell<Option<CopyWriter>> = std::cell::RefCell::new(None);
    let database_id = std::cell::Cell::new(DatabaseId(0));
    let mut last_report = Instant::now();
    let (begin, end) = transport::fetch_copy(
        address,
        primary,
        tls.as_deref(),
        member,
        |begin| {
            if begin.block_size != redo_config.block_size || begin.log_file_size != redo_config.log_file_size {
                return Err(format!(
                    "the logs of '{}' have block size {} and size {}; this standby's configuration has {} and {}: configure the same redo.block_size and redo.log_file_size",
                    begin.member, begin.block_size, begin.log_file_size, redo_config.block_size, redo_config.log_file_size
                ));
            }
            database_id.set(DatabaseId(begin.database_id));
            tracing::info!(primary = %begin.member, checkpoint_scn = begin.checkpoint_scn, first_seq = begin.first_seq, keys = begin.keys, bytes = begin.bytes, "copying the data");
            *writer.borrow_mut() = Some(CopyWriter::create(&db_config, storage).map_err(|error| error.to_string())?);
            Ok(())
        },
        |entries, progress| {
            writer.borrow().as_ref().expect("begun").write(entries, database_id.get()).map_err(|error| error.to_string())?;
            if last_report.elapsed().as_secs() >= 1 {
                last_report = Instant::now();
                let percent = if progress.bytes_total > 0 { 100.0 * progress.bytes as f64 / progress.bytes_total as f64 } else { 0.0 };
                tracing::info!(
                    keys = progress.keys,
                    keys_total = progress.keys_total,
                    bytes = progress.bytes,
                    "copying the data: {percent:.0} %"
                );
            }
            Ok(())
        },
        |begin, _end| {
            // The redo side first (control file, history), then the data files' checkpoint,
            // which removes the copy's marker: until then the directory is no database.
            write_standby_identity(storage.as_ref(), &redo_config, begin, member).map_err(|error| format!("{error:#}"))?;
            writer.borrow_mut().take().expect("begun").finish(Scn(begin.checkpoint_scn), database_id.get()).map_err(|error| error.to_string())?;
            Ok(())
        },
    )
    .map_err(|reason| anyhow!(reason))?;
    tracing::info!(
        from = %begin.member,
        keys = end.keys,
        bytes = end.bytes,
        checkpoint_scn = begin.checkpoint_scn,
        first_seq = begin.first_seq,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "copy of the data complete; receiving redo from log {}",
        begin.first_seq
    );
    Ok(())
}

/// The control file and incarnation history of a standby made from `begin`'s copy.
fn write_standby_identity(
    storage: &dyn Storage,
    config: &RedoConfig,
    begin: &proto::CopyBegin,
    member: &str,
) -> anyhow::Result<()> {
    for dir in std::iter::once(&config.dir).chain(&config.member_dirs).chain(&config.archive_dests)
    {
        storage.create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut history = IncarnationHistory::default();
    for record in &begin.history {
        history.push(Branch::from_wire(record)).map_err(|reason| anyhow!(reason))?;
    }
    history.save(storage, &config.dir)?;
    let control = ControlData {
        database_id: DatabaseId(begin.database_id),
        incarnation: Incarnation(begin.incarnation),
        thread: RedoThread(1),
        checkpoint_scn: Scn(begin.checkpoint_scn),
        created_us: redo::types::now_unix_us(),
        block_size: config.block_size,
        groups: config.groups,
        members: config.members,
        log_file_size: config.log_file_size,
        write_bytes_max: 0,
        role: Role::Standby,
        followed: false,
        base_seq: LogSeq(begin.first_seq),
        fenced: None,
        sealed_below: Incarnation(0),
        member: member.to_string(),
    };
    ControlFile::new(&config.dir).write(storage, &control)?;
    Ok(())
}
