//! The storage seam: every byte the redo engine reads or writes goes through `Storage`.
//!
//! `OsStorage` is the real file system. `crashdisk::CrashDisk` is the test disk that keeps
//! *written* and *durable* bytes apart and builds the image a power cut would leave.
//!
//! The seam separates `write_at` (reaches the file, not necessarily the disk) from
//! `sync_data` (everything written before is durable), as neon's safekeeper does. Writes to
//! online log members use the configured `IoMode`; every other file (archives, catalog,
//! control file) is written normally and synced explicitly.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod aligned;
use aligned::ALIGNMENT;
pub use aligned::AlignedBuf;

/// How online log members are made durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoMode {
    /// `Direct` where the file system takes O_DIRECT, else `Fdatasync`, decided for each
    /// file as it is opened: the default. A log write is then one system call that returns
    /// once durable, with no copy into the page cache and no writeback of it: on this
    /// project's machines 10 % less time per synced 4 KiB write than `pwrite` and `fdatasync`,
    /// and a SET at one client 8–11 % faster. A write of `BUFFERED_WRITE_MIN` (1 MiB) or more
    /// still goes through the page cache and `fdatasync`, gathered from the log buffer: large
    /// streamed writes were a quarter slower direct (`docs/bench/README.md`, "Log writes
    /// bypass the page cache"). So does a standby's received redo (`write_deferred_at`), whose
    /// acknowledgement on receipt must not wait for the disk.
    #[default]
    Auto,
    /// `pwrite` then `fdatasync`: what the reference calls "log file parallel write".
    Fdatasync,
    /// Files opened with `O_DSYNC`: each `pwrite` returns once durable.
    Dsync,
    /// `O_DIRECT | O_DSYNC`: bypasses the page cache. Needs a file system that supports it
    /// (tmpfs does not) and a block size that is a multiple of the device's logical block.
    Direct,
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoMode::Auto => "auto",
            IoMode::Fdatasync => "fdatasync",
            IoMode::Dsync => "dsync",
            IoMode::Direct => "direct",
        })
    }
}

/// One open file.
#[allow(clippy::len_without_is_empty)] // `len` is a file size that can fail, not a collection's.
pub trait StorageFile: Send + Sync + fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset` (`UnexpectedEof` if the file is shorter).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes the concatenation of `pieces` at `offset`, as `write_at` of the joined bytes
    /// would. The default joins them; a file that `gathers` writes them as they are.
    fn write_gathered_at(&self, pieces: &[&[u8]], offset: u64) -> io::Result<()> {
        self.write_at(&pieces.concat(), offset)
    }
    /// Whether `write_gathered_at` writes the pieces without joining them first (false where
    /// writes must be aligned in memory, as with O_DIRECT, or where nothing would be saved).
    fn gathers(&self) -> bool {
        false
    }
    /// Writes all of `buf` at `offset` for a caller that asks for its durability later, with
    /// `sync_data` (a standby's received redo: acknowledged on receipt, or synced once for
    /// several writes). Where writes are direct only by default (`io_mode = "auto"`) it goes
    /// through the page cache: a direct write would wait for the disk at once. Default:
    /// `write_at`.
    fn write_deferred_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(buf, offset)
    }
    /// Makes every write before it durable (a no-op where writes are synchronous).
    fn sync_data(&self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Starts writing to the disk what was written in `offset..offset + len`, without waiting
    /// for it (Linux's `sync_file_range(SYNC_FILE_RANGE_WRITE)`), so that a large write ended
    /// by one `sync_data` reaches the disk as it is written instead of all at once at that
    /// sync (see [`Writeback`]). Advice only: it makes nothing durable, and an I/O error of
    /// the writes it starts is reported by the next `sync_data` (it does not consume the
    /// file's error state); its own error says only that it could not start them. Default:
    /// nothing.
    fn start_writeback(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Makes durable what a process before this one wrote to the file and left unsynced, then
    /// drops the file's pages from the page cache, so that what is read next is what the disk
    /// holds. Called on a log member before it is read after a restart (recovery's scan, a
    /// rewind). Default: nothing (a file with no page cache of its own).
    fn settle(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Bytes a large write (an archived copy; a checkpoint's pages by default, `[db]
/// checkpoint_flush_after`) leaves in the page cache before their writeback is started:
/// PostgreSQL's `checkpoint_flush_after` (256 kB there), for the same reason. Without it the
/// kernel holds a checkpoint's hundred megabytes until its `fdatasync`, then queues them on
/// the disk at once, and the log writer's next sync (a few kilobytes, that every commit waits
/// for) queues behind them. Measured with the demo's batch
/// phase (docs/bench/README.md, 2026-11-29): the commit max 67–210 ms without, 63–90 ms at
/// 4 MiB over 12 runs; at 1 MiB as good for the commits, but a checkpoint took a third longer
/// than at 4.
pub const WRITEBACK_AFTER: u64 = 4 << 20;

/// The writes to one file since its writeback was last started: every `after` bytes
/// ([`WRITEBACK_AFTER`] for an archived copy, `[db] checkpoint_flush_after` for a
/// checkpoint), [`Writeback::wrote`] starts it over the span they cover.
#[derive(Debug, Default)]
pub struct Writeback {
    /// The span written since the last start (from, to) and the bytes in it.
    since: parking_lot::Mutex<Option<(u64, u64, u64)>>,
    /// Said once: a start failed.
    warned: std::sync::atomic::AtomicBool,
}

impl Writeback {
    /// Notes a write of `len` bytes at `offset` to `file`, and starts the writeback of the
    /// span written since the last one once it holds `after` bytes (0: never).
    pub fn wrote(&self, file: &dyn StorageFile, offset: u64, len: u64, after: u64) {
        if after == 0 {
            return;
        }
        let end = offset.saturating_add(len);
        let mut since = self.since.lock();
        let (from, to, bytes) = match *since {
            Some((from, to, bytes)) => (from.min(offset), to.max(end), bytes + len),
            None => (offset, end, len),
        };
        if bytes < after {
            *since = Some((from, to, bytes));
            return;
        }
        *since = None;
        drop(since);
        if let Err(error) = file.start_writeback(from, to - from)
            && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            // Nothing is lost: the writes stay in the page cache until the sync, which says
            // whether they reached the disk.
            tracing::warn!(%error, ?file, "could not start the writeback of a large write; its sync writes it all");
        }
    }
}

/// A file system.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates a new log file of exactly `len` bytes, every byte written (zeros) and durable,
    /// its directory entry durable too, and opens it as `open_log` does. Fails if it exists.
    fn create_log(&self, path: &Path, len: u64) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing online log member, writes using the I/O mode.
    fn open_log(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file for plain reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Creates a file, truncating one that exists.
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Creates a file, truncating one that exists, for a large copy written once in order and
    /// synced once at its end (an archived log): where the file system takes O_DIRECT and the
    /// I/O mode allows it (`auto`, `direct`), its writes bypass the page cache. Why: copied
    /// into the page cache, a 64 MiB log took about 150 ms of CPU (filling new pages) at every
    /// log switch, which the sessions lose where they share the CPU; direct, half as much
    /// (what is left is reading and checking the log). Writes are not synchronous:
    /// `sync_data` makes them (and the file's size) durable. Default: `create`.
    fn create_streamed(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.create(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    fn exists(&self, path: &Path) -> bool;
    /// The entries of `dir` (full paths), in no particular order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// Free bytes where `path` lives, if the storage knows.
    fn available_bytes(&self, _path: &Path) -> Option<u64> {
        None
    }
}

/// Reads a whole file.
pub fn read_all(storage: &dyn Storage, path: &Path) -> io::Result<Vec<u8>> {
    let file = storage.open(path)?;
    let len = usize::try_from(file.len()?).map_err(|_| io::Error::other("file too large"))?;
    let mut bytes = vec![0u8; len];
    file.read_at(&mut bytes, 0)?;
    Ok(bytes)
}

/// Replaces `path` with `bytes` durably: write a temporary file, sync it, rename it over
/// `path`, sync the directory. A crash at any point leaves either the old or the new file.
///
/// The syncs, and why: the temporary file's data is synced before the rename so that the
/// rename can never expose an empty or partial file; the directory is synced after it so that
/// the replacement survives a power cut once this returns.
pub fn replace_durably(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let file = storage.create(&temporary)?;
    file.write_at(bytes, 0)?;
    file.sync_data()?;
    drop(file);
    storage.rename(&temporary, path)?;
    storage.sync_dir(dir)
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsStorage {
    pub io_mode: IoMode,
}

impl OsStorage {
    pub fn new(io_mode: IoMode) -> OsStorage {
        OsStorage { io_mode }
    }
}

#[derive(Debug)]
struct OsFile {
    /// Used for writes (with O_DSYNC / O_DIRECT where configured).
    write: File,
    /// Used for reads: a plain descriptor, so that reads need no alignment. With `auto` on a
    /// file that took O_DIRECT, also for writes of `BUFFERED_WRITE_MIN` bytes or more.
    read: Option<File>,
    synchronous: bool,
    /// Opened with O_DIRECT: every write's memory must be aligned.
    direct: bool,
    /// `auto`: large writes go through `read` (buffered) and are synced by `sync_data`.
    large_buffered: bool,
    /// Made by `create_streamed`: a direct write the kernel refuses as misaligned (a length
    /// no device block divides) goes through `read` instead, and `sync_data` makes it
    /// durable with the rest (`fdatasync` syncs the file, whichever descriptor wrote it).
    streamed: bool,
    /// What was written through `read` and is not yet synced; held across that sync.
    buffered: parking_lot::Mutex<Buffered>,
    /// Aligned memory for a direct write whose bytes are not aligned.
    scratch: parking_lot::Mutex<AlignedBuf>,
}

/// The most pieces one `pwritev` takes (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// The state of an `auto` file's buffered writes.
#[derive(Debug, Default)]
struct Buffered {
    /// Something written through the plain descriptor may not be durable yet. True when a
    /// file with an O_DSYNC descriptor is opened (until `settle`): a process that died may
    /// have left its writes in the page cache, and that descriptor's own syncs would never
    /// write them.
    unsynced: bool,
    /// Their fdatasync failed once: they may be lost, whatever a later one says (Linux marks
    /// the failed pages clean), so every later sync fails too.
    failed: bool,
}

/// With `io_mode = "auto"`, a log write of this many bytes or more goes through the page cache
/// and `fdatasync` even where O_DIRECT is taken. Measured with `bench commit` (2026-11-30):
/// direct writes made commits of 1 KiB and 9 KiB 9–35 % faster and left 1 MiB ones as they
/// were, but streamed 1 MiB records (COMMIT NOWAIT, written some 27 MiB at a time, gathered
/// straight from the log buffer where buffered) fell from 1.4–1.7 to 1.1 GB/s.
const BUFFERED_WRITE_MIN: usize = 1 << 20;

impl OsFile {
    /// A file written and read normally, and synced by `sync_data`.
    fn plain(write: File) -> OsFile {
        OsFile {
            write,
            read: None,
            synchronous: false,
            direct: false,
            large_buffered: false,
            streamed: false,
            buffered: parking_lot::Mutex::new(Buffered::default()),
            scratch: parking_lot::Mutex::new(AlignedBuf::new()),
        }
    }

    /// Writes `pieces` at `offset` with one `pwritev` per `IOV_MAX` of them, on `file`.
    fn pwritev(file: &File, pieces: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut slices: Vec<io::IoSlice<'_>> = pieces
            .iter()
            .filter(|piece| !piece.is_empty())
            .map(|piece| io::IoSlice::new(piece))
            .collect();
        let mut remaining: &mut [io::IoSlice<'_>] = &mut slices;
        let mut offset = offset;
        while !remaining.is_empty() {
            let count = remaining.len().min(IOV_MAX);
            // SAFETY: IoSlice is ABI-compatible with iovec, and `count` of them are valid
            // for reads; the descriptor is open for writing.
            let written = unsafe {
                libc::pwritev(
                    std::os::fd::AsRawFd::as_raw_fd(file),
                    remaining.as_ptr().cast::<libc::iovec>(),
                    count as libc::c_int,
                    offset as libc::off_t,
                )
            };
            if written < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if written == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
            }
            offset += written as u64;
            io::IoSlice::advance_slices(&mut remaining, written as usize);
        }
        Ok(())
    }

    /// The descriptor a buffered write of `len` bytes goes through, if it is to be buffered
    /// on a file that otherwise writes direct (`auto`).
    fn buffered_for(&self, len: usize) -> Option<&File> {
        if self.large_buffered && len >= BUFFERED_WRITE_MIN { self.read.as_ref() } else { None }
    }

    /// Makes the buffered writes not yet synced durable. Whoever comes second waits for a
    /// sync in progress, so nobody is told they are durable before they are.
    fn sync_buffered(&self) -> io::Result<()> {
        if !self.synchronous {
            return Ok(()); // `sync_data` syncs the one descriptor.
        }
        let mut state = self.buffered.lock();
        if state.failed {
            return Err(io::Error::other(
                "an earlier fdatasync of this log member's buffered writes failed: they may be lost",
            ));
        }
        if state.unsynced {
            // (Any descriptor of the file syncs its pages; an O_DSYNC file always has `read`.)
            let plain = self.read.as_ref().expect("an O_DSYNC file has a plain descriptor");
            if let Err(error) = plain.sync_data() {
                state.failed = true;
                return Err(error);
            }
            state.unsynced = false;
        }
        Ok(())
    }

    /// A write through the plain descriptor, synced by the next `sync_data`.
    fn write_buffered(&self, plain: &File, pieces: &[&[u8]], offset: u64) -> io::Result<()> {
        let written = match pieces {
            [one] => plain.write_all_at(one, offset),
            _ => OsFile::pwritev(plain, pieces, offset),
        };
        // Even a write that failed half-way may have left bytes to sync.
        self.buffered.lock().unsynced = true;
        written
    }

    /// A direct write of `buf` (aligned). Buffered writes before it are made durable first,
    /// so that it never becomes durable ahead of them: a closed header after the bytes it
    /// closes, as with O_DIRECT alone.
    fn write_direct(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.sync_buffered()?;
        self.write.write_all_at(buf, offset)
    }

    /// A direct write of `pieces` joined, through aligned memory.
    fn write_direct_joined(&self, pieces: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut scratch = self.scratch.lock();
        scratch.resize_for_overwrite(pieces.iter().map(|piece| piece.len()).sum());
        let mut at = 0;
        for piece in pieces {
            scratch[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        self.write_direct(&scratch, offset)
    }
}

impl StorageFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read.as_ref().unwrap_or(&self.write).read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(plain) = self.buffered_for(buf.len()) {
            return self.write_buffered(plain, &[buf], offset);
        }
        if self.direct {
            let written = if (buf.as_ptr() as usize).is_multiple_of(ALIGNMENT) {
                self.write_direct(buf, offset)
            } else {
                // O_DIRECT takes aligned memory only. The log writer's units come from its
                // aligned buffer; a header, a mirror's resynchronisation, a shipped write's
                // shared copy or a standby's received bytes are copied into one here.
                self.write_direct_joined(&[buf], offset)
            };
            return match (written, &self.read) {
                (Err(error), Some(plain))
                    if self.streamed && error.raw_os_error() == Some(libc::EINVAL) =>
                {
                    plain.write_all_at(buf, offset)
                }
                (written, _) => written,
            };
        }
        self.write.write_all_at(buf, offset)
    }

    fn write_deferred_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match self.read.as_ref().filter(|_| self.large_buffered) {
            Some(plain) => self.write_buffered(plain, &[buf], offset),
            None => self.write_at(buf, offset),
        }
    }

    fn write_gathered_at(&self, pieces: &[&[u8]], offset: u64) -> io::Result<()> {
        let len = pieces.iter().map(|piece| piece.len()).sum();
        if let Some(plain) = self.buffered_for(len) {
            return self.write_buffered(plain, pieces, offset);
        }
        if self.direct {
            return self.write_direct_joined(pieces, offset);
        }
        OsFile::pwritev(&self.write, pieces, offset)
    }

    fn gathers(&self) -> bool {
        // `auto`: its large writes are gathered; a small one is joined, as a direct one must be.
        !self.direct || self.large_buffered
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync_buffered()?;
        if self.synchronous { Ok(()) } else { self.write.sync_data() }
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.write.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.write.set_len(len)
    }

    /// A log member opened after a restart: see the trait. Why both steps: a process that
    /// died may have left writes in the page cache only (through a plain descriptor, with
    /// `auto` or another `io_mode`), where the syncs of an O_DSYNC descriptor would never reach
    /// them. And if their writeback failed, Linux tells each descriptor open at the time once,
    /// and a descriptor opened later only if nobody has been told, and keeps the pages it
    /// could not write, clean: had the process that was told died, the next one would read
    /// those bytes back as if they were on the disk, close the log over them and write after
    /// them, and a power cut would then leave a hole in the middle of the redo. Dropped, they
    /// are read from the disk, where recovery finds the end of the redo that was made durable.
    /// The pages are dropped even when the sync fails, so that the next attempt reads the disk.
    fn settle(&self) -> io::Result<()> {
        let plain = self.read.as_ref().unwrap_or(&self.write);
        let synced = plain.sync_data();
        // Dirty pages would be kept; after a sync that succeeded there are none.
        // SAFETY: a plain call on an open descriptor.
        let advised = unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(plain),
                0,
                0,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        // The kernel's own error as it is (a full disk stays one: `RedoError` reads its errno);
        // the caller says what failed, and on which file.
        synced?;
        if advised != 0 {
            return Err(io::Error::from_raw_os_error(advised));
        }
        self.buffered.lock().unsynced = false;
        Ok(())
    }

    fn start_writeback(&self, offset: u64, len: u64) -> io::Result<()> {
        if self.synchronous || len == 0 {
            return Ok(());
        }
        // SAFETY: a plain system call on a descriptor this file owns; it reads no memory of
        // ours.
        let started = unsafe {
            libc::sync_file_range(
                std::os::fd::AsRawFd::as_raw_fd(&self.write),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if started != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }
}

impl OsStorage {
    /// `Storage::create_streamed`: direct writes where the I/O mode and the file system allow.
    fn create_streamed_file(&self, path: &Path) -> io::Result<OsFile> {
        let create =
            || OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path);
        if !matches!(self.io_mode, IoMode::Auto | IoMode::Direct) {
            return Ok(OsFile::plain(create()?));
        }
        // Reads, and direct writes the kernel refuses, go through a plain descriptor.
        let plain = create()?;
        match OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(write) => Ok(OsFile {
                read: Some(plain),
                direct: true,
                streamed: true,
                ..OsFile::plain(write)
            }),
            // tmpfs and the like: through the page cache.
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => Ok(OsFile::plain(plain)),
            Err(error) => Err(error),
        }
    }

    fn open_with_mode(&self, path: &Path) -> io::Result<OsFile> {
        let open = |flags: libc::c_int| {
            OpenOptions::new().read(true).write(true).custom_flags(flags).open(path)
        };
        const DIRECT: libc::c_int = libc::O_DSYNC | libc::O_DIRECT;
        let refuses_direct = |error: &io::Error| error.raw_os_error() == Some(libc::EINVAL);
        let (write, flags) = match self.io_mode {
            IoMode::Fdatasync => (open(0)?, 0),
            IoMode::Dsync => (open(libc::O_DSYNC)?, libc::O_DSYNC),
            IoMode::Direct => match open(DIRECT) {
                Ok(file) => (file, DIRECT),
                Err(error) if refuses_direct(&error) => {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!(
                            "the file system holding {} does not support O_DIRECT; use io_mode = \"auto\", \"fdatasync\" or \"dsync\"",
                            path.display()
                        ),
                    ));
                }
                Err(error) => return Err(error),
            },
            IoMode::Auto => match open(DIRECT) {
                Ok(file) => (file, DIRECT),
                Err(error) if refuses_direct(&error) => {
                    tracing::info!(
                        path = %path.display(),
                        "the file system refuses O_DIRECT: this log member is written with pwrite and fdatasync"
                    );
                    (open(0)?, 0)
                }
                Err(error) => return Err(error),
            },
        };
        let direct = flags == DIRECT;
        // With `auto`, the plain descriptor also takes the large writes.
        let large_buffered = direct && self.io_mode == IoMode::Auto;
        let read = match flags {
            0 => None,
            _ if large_buffered => Some(open(0)?),
            _ => Some(File::open(path)?),
        };
        // Whatever a process before this one wrote through a plain descriptor (with `auto`, or
        // another `io_mode`) may still be in the page cache only, where the syncs of an O_DSYNC
        // descriptor would never reach it: its first sync (or direct write) makes it durable,
        // unless `settle` did first.
        let buffered = parking_lot::Mutex::new(Buffered { unsynced: flags != 0, failed: false });
        Ok(OsFile {
            read,
            synchronous: flags != 0,
            direct,
            large_buffered,
            buffered,
            ..OsFile::plain(write)
        })
    }
}

impl Storage for OsStorage {
    fn create_log(&self, path: &Path, len: u64) -> io::Result<Box<dyn StorageFile>> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        let result = (|| {
            // Write every byte: overwriting allocated, initialised blocks later needs no
            // metadata update, so fdatasync stays one device flush (fallocate'd "unwritten"
            // extents would need a journal commit on first write).
            let zeros = vec![0u8; 1 << 20];
            let mut offset = 0u64;
            while offset < len {
                let chunk = (len - offset).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..chunk], offset)?;
                offset += chunk as u64;
            }
            file.sync_all()?;
            self.sync_dir(path.parent().unwrap_or(Path::new(".")))
        })();
        if let Err(error) = result {
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(error);
        }
        drop(file);
        self.open_log(path)
    }

    fn open_log(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(self.open_with_mode(path)?))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let write = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(OsFile::plain(write)))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let write =
            OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(OsFile::plain(write)))
    }

    fn create_streamed(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(self.create_streamed_file(path)?))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::read_dir(dir)?.map(|entry| entry.map(|entry| entry.path())).collect()
    }

    fn available_bytes(&self, path: &Path) -> Option<u64> {
        use std::os::unix::ffi::OsStrExt;
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: c_path is a valid NUL-terminated string and stat a valid out-pointer.
        let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) };
        (rc == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
    }
}

#[cfg(test)]
mod tests;
