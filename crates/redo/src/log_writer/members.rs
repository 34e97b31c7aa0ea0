//! The log write's I/O: offered to the shipper (redo transport) first, then written and
//! synced on every valid member of the log group, in parallel. A member that fails is taken
//! out; a write fails only if none is left.

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::Shared;
use crate::error::{RedoError, Result};
use crate::format::Gathered;
use crate::online_log::MemberState;
use crate::ship::{LogWrite, ShipWait, WriteKind};
use crate::storage::StorageFile;
use crate::types::{LogSeq, Scn, now_unix_us};

/// A log write's bytes, as `write_log` takes them.
pub(crate) enum LogBytes<'a> {
    /// Contiguous, the caller's (headers; units formatted into the write buffer): copied if
    /// shipped.
    Slice(&'a [u8]),
    /// Contiguous and shared: the shipper gets the very allocation the local write uses.
    Shared(Arc<[u8]>),
}

/// What `offer` makes the shipper's one allocation from.
enum SharedOnce<'a> {
    Copy(&'a [u8]),
    Ready(Arc<[u8]>),
    Gathered(&'a Gathered<'a>),
}

impl Shared {
    /// Makes one log write: offers it to the shipper (redo transport) first, then writes and
    /// syncs it on every valid member of `group`. Returns what must be waited for (SYNC
    /// acknowledgements) before the write may be declared durable: the caller records the
    /// write as made first, so that a failed wait never leaves the writer's state behind
    /// what is on disk.
    pub(crate) fn write_log(
        &self,
        group: usize,
        bytes: LogBytes<'_>,
        offset: u64,
        kind: WriteKind,
        seq: LogSeq,
        last_scn: Scn,
    ) -> Result<Option<Box<dyn ShipWait>>> {
        let shared = match &bytes {
            LogBytes::Slice(bytes) => SharedOnce::Copy(bytes),
            LogBytes::Shared(shared) => SharedOnce::Ready(shared.clone()),
        };
        let wait = self.offer(shared, offset, kind, seq, last_scn);
        let bytes: &[u8] = match &bytes {
            LogBytes::Slice(bytes) => bytes,
            LogBytes::Shared(shared) => shared,
        };
        self.write_members(group, bytes, offset, true)?;
        Ok(wait)
    }

    /// `write_log` for units gathered from the log buffer, in two steps: this one offers them
    /// to the shipper (gathered units are not meant to be shipped: a shipper that appeared
    /// since the caller looked gets a copy) and writes them, one vectored write per member;
    /// `sync_gathered` then syncs them. Between the two the caller releases the log buffer.
    /// Returns the ship wait and when the write began.
    pub(super) fn write_gathered(
        &self,
        group: usize,
        gathered: &Gathered<'_>,
        offset: u64,
        seq: LogSeq,
        last_scn: Scn,
    ) -> Result<(Option<Box<dyn ShipWait>>, Instant)> {
        let wait =
            self.offer(SharedOnce::Gathered(gathered), offset, WriteKind::Units, seq, last_scn);
        let pieces: Vec<&[u8]> = gathered.pieces().collect();
        let started = Instant::now();
        self.on_valid_members(group, offset, |file| file.write_gathered_at(&pieces, offset))?;
        Ok((wait, started))
    }

    /// Syncs what `write_gathered` wrote (begun at `started`).
    pub(super) fn sync_gathered(&self, group: usize, offset: u64, started: Instant) -> Result<()> {
        self.on_valid_members(group, offset, |file| file.sync_data())?;
        self.waits.log_file_parallel_write.record_since(started);
        Ok(())
    }

    /// Offers a write to the shipper, if there is one, with its bytes in one shared
    /// allocation (made only then).
    fn offer(
        &self,
        bytes: SharedOnce<'_>,
        offset: u64,
        kind: WriteKind,
        seq: LogSeq,
        last_scn: Scn,
    ) -> Option<Box<dyn ShipWait>> {
        let shipper = self.shipper.read().clone()?;
        let bytes = match bytes {
            SharedOnce::Ready(shared) => shared,
            SharedOnce::Copy(bytes) => Arc::from(bytes),
            SharedOnce::Gathered(gathered) => Arc::from(gathered.to_vec()),
        };
        let write = Arc::new(LogWrite {
            seq,
            offset,
            kind,
            bytes,
            last_scn,
            time_us: now_unix_us(),
            durable_scn: self.durable_scn(),
        });
        shipper.ship(&write)
    }

    /// Whether every valid member of `group` takes vectored writes without joining the pieces
    /// (none is opened with O_DIRECT alone; with `auto`, a large one is written buffered as it
    /// is and a small one joined).
    pub(super) fn members_gather(&self, group: usize) -> bool {
        let table = self.table.lock();
        table.groups[group]
            .members
            .iter()
            .filter(|member| member.state == MemberState::Valid)
            .filter_map(|member| member.file.as_ref())
            .all(|file| file.gathers())
    }

    /// Writes `bytes` at `offset` to every valid member of `group` (and syncs them if `sync`;
    /// if not, as a write whose sync comes later: a standby's received redo), in parallel. A
    /// member that fails is taken out; the write fails only if none is left.
    pub(crate) fn write_members(
        &self,
        group: usize,
        bytes: &[u8],
        offset: u64,
        sync: bool,
    ) -> Result<()> {
        let started = Instant::now();
        self.on_valid_members(group, offset, |file| {
            if sync {
                file.write_at(bytes, offset)?;
                file.sync_data()
            } else {
                file.write_deferred_at(bytes, offset)
            }
        })?;
        if sync {
            self.waits.log_file_parallel_write.record_since(started);
        }
        Ok(())
    }

    /// The members of `group` that are valid and open, with their places in the group.
    fn valid_members(&self, group: usize) -> Vec<(usize, Arc<dyn StorageFile>)> {
        let table = self.table.lock();
        table.groups[group]
            .members
            .iter()
            .enumerate()
            .filter(|(_, member)| member.state == MemberState::Valid)
            .filter_map(|(index, member)| member.file.clone().map(|file| (index, file)))
            .collect()
    }

    /// Runs `io` on every valid member of `group`, in parallel. A member that fails is taken
    /// out (`offset` names the write in the error); fails only if none is left.
    fn on_valid_members(
        &self,
        group: usize,
        offset: u64,
        io: impl Fn(&Arc<dyn StorageFile>) -> std::io::Result<()> + Sync,
    ) -> Result<()> {
        let members = self.valid_members(group);
        if members.is_empty() {
            return Err(RedoError::WriterFailed(format!(
                "no member of log group {} can be written",
                group + 1
            )));
        }
        let results = self.on_members(&members, io);
        self.take_out_failed(group, &members, results, offset)
    }

    /// Syncs every valid member of `group`.
    pub(crate) fn sync_members(&self, group: usize) -> Result<()> {
        let members = self.valid_members(group);
        let started = Instant::now();
        let results = self.on_members(&members, |file| file.sync_data());
        self.waits.log_file_parallel_write.record_since(started);
        self.take_out_failed(group, &members, results, 0)
    }

    /// Runs `io` on every member, the first on this thread and the others in parallel.
    fn on_members(
        &self,
        members: &[(usize, Arc<dyn StorageFile>)],
        io: impl Fn(&Arc<dyn StorageFile>) -> std::io::Result<()> + Sync,
    ) -> Vec<std::io::Result<()>> {
        match members {
            [] => Vec::new(),
            [(_, only)] => vec![io(only)],
            [(_, first), rest @ ..] => thread::scope(|scope| {
                let others: Vec<_> =
                    rest.iter().map(|(_, file)| scope.spawn(|| io(file))).collect();
                let mut results = vec![io(first)];
                results.extend(others.into_iter().map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("member writer panicked")))
                }));
                results
            }),
        }
    }

    /// Marks the members whose I/O failed as FAILED; fails if none succeeded.
    fn take_out_failed(
        &self,
        group: usize,
        members: &[(usize, Arc<dyn StorageFile>)],
        results: Vec<std::io::Result<()>>,
        offset: u64,
    ) -> Result<()> {
        let mut survivors = 0;
        let mut last_error = None;
        for ((member, _), result) in members.iter().zip(results) {
            match result {
                Ok(()) => survivors += 1,
                Err(error) => {
                    let mut table = self.table.lock();
                    let member = &mut table.groups[group].members[*member];
                    tracing::error!(member = %member.path.display(), offset, %error, "log member write failed; taking the member out");
                    member.state =
                        MemberState::Failed(format!("write at offset {offset}: {error}"));
                    last_error = Some(RedoError::io("write", &member.path, error));
                }
            }
        }
        match (survivors, last_error) {
            (0, Some(error)) => Err(error),
            (0, None) => Err(RedoError::WriterFailed(format!(
                "no member of log group {} can be written",
                group + 1
            ))),
            _ => Ok(()),
        }
    }
}
