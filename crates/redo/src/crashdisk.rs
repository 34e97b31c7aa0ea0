//! A test disk that keeps *written* and *durable* bytes apart, and builds the image a power
//! cut would leave (after redb's crash-consistency disk).
//!
//! Model:
//! - File data: a write reaches the file at once (reads see it) but becomes durable only at
//!   the next `sync_data` of that file. A power cut keeps every durable byte, plus an arbitrary
//!   subset of the 512-byte sectors of the writes after the last sync (or an arbitrary prefix
//!   of them, in order, cut anywhere: half a unit included).
//! - Names: creating, renaming and removing files are journaled in order and become durable
//!   at the next `sync_dir` (of any directory, as one ext4 journal commit would). A power cut
//!   keeps the durable names plus an arbitrary prefix of the later operations.
//! - Faults: a file system capacity (writes beyond it fail with ENOSPC) and injected I/O
//!   errors per path, to test a full disk and a failing log member.
//!
//! Used by this crate's power-cut tests and by the database's checkpoint tests.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::Rng;

use crate::storage::{Storage, StorageFile};

const SECTOR: usize = 512;

type InodeId = usize;

#[derive(Debug, Clone, Default)]
struct Inode {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a power cut for sure.
    durable: Vec<u8>,
    /// Changes since the last sync, in order.
    pending: Vec<Change>,
}

#[derive(Debug, Clone)]
enum Change {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone)]
enum NameOp {
    Link(PathBuf, InodeId),
    Unlink(PathBuf),
    /// Atomic, as rename(2) is: a crash never leaves neither name.
    Rename {
        from: PathBuf,
        to: PathBuf,
        inode: InodeId,
    },
}

/// An injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Every write to the file fails with EIO.
    WriteError,
    /// Every sync of the file fails with EIO (writes succeed).
    SyncError,
}

#[derive(Debug, Clone, Default)]
struct State {
    inodes: Vec<Inode>,
    names: BTreeMap<PathBuf, InodeId>,
    durable_names: BTreeMap<PathBuf, InodeId>,
    pending_names: Vec<NameOp>,
    dirs: BTreeSet<PathBuf>,
    capacity_bytes: Option<u64>,
    faults: BTreeMap<PathBuf, Fault>,
    syncs: u64,
}

impl State {
    fn used_bytes(&self) -> u64 {
        let live: BTreeSet<InodeId> = self.names.values().copied().collect();
        live.iter().map(|&inode| self.inodes[inode].current.len() as u64).sum()
    }

    fn lookup(&self, path: &Path) -> io::Result<InodeId> {
        self.names.get(path).copied().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file", path.display()))
        })
    }

    fn link(&mut self, path: &Path, inode: InodeId) {
        self.names.insert(path.to_path_buf(), inode);
        self.pending_names.push(NameOp::Link(path.to_path_buf(), inode));
    }

    fn unlink(&mut self, path: &Path) -> io::Result<InodeId> {
        let inode = self.names.remove(path).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{}: no such file", path.display()))
        })?;
        self.pending_names.push(NameOp::Unlink(path.to_path_buf()));
        Ok(inode)
    }

    fn fault(&self, inode: InodeId) -> Option<Fault> {
        self.names
            .iter()
            .filter(|(_, id)| **id == inode)
            .find_map(|(path, _)| self.faults.get(path).copied())
    }
}

/// Called after every write and sync (outside the disk's lock), e.g. to take crash images
/// at exactly those moments.
pub type Hook = Arc<dyn Fn() + Send + Sync>;

/// The crash-simulating disk. Cheap to clone: clones share the same disk.
#[derive(Clone, Default)]
pub struct CrashDisk {
    state: Arc<Mutex<State>>,
    hook: Arc<Mutex<Option<Hook>>>,
}

impl std::fmt::Debug for CrashDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashDisk").finish_non_exhaustive()
    }
}

/// How the writes after the last sync survive in a crash image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tear {
    /// None of them: only durable bytes.
    Nothing,
    /// All of them: as if the page cache had been flushed just before the cut.
    Everything,
    /// A random subset of 512-byte sectors, some cut in half.
    Sectors,
    /// The writes in order up to a random byte: a prefix, the last write cut anywhere.
    Prefix,
}

impl CrashDisk {
    pub fn new() -> CrashDisk {
        CrashDisk::default()
    }

    /// Bytes the disk's content takes now (what `set_capacity` limits).
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().used_bytes()
    }

    /// Writes that would grow the disk's content beyond `bytes` fail with ENOSPC.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity_bytes = bytes;
    }

    /// Injects (or with `None`, clears) a fault on the file at `path`.
    pub fn set_fault(&self, path: &Path, fault: Option<Fault>) {
        let mut state = self.state.lock();
        match fault {
            Some(fault) => state.faults.insert(path.to_path_buf(), fault),
            None => state.faults.remove(path),
        };
    }

    /// Sets (or clears) the function called after every write and sync.
    pub fn set_hook(&self, hook: Option<Hook>) {
        *self.hook.lock() = hook;
    }

    fn run_hook(&self) {
        let hook = self.hook.lock().clone();
        if let Some(hook) = hook {
            hook();
        }
    }

    /// Number of `sync_data` calls so far (a clock for tests that crash "at every sync").
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Number of changes to `path` written since its last sync (what a power cut may tear).
    pub fn unsynced_changes(&self, path: &Path) -> usize {
        let state = self.state.lock();
        state.names.get(path).map_or(0, |&inode| state.inodes[inode].pending.len())
    }

    /// The content of `path` as reads see it now.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.state.lock();
        state.names.get(path).map(|&inode| state.inodes[inode].current.clone())
    }

    /// The disk a power cut at this instant could leave, chosen with `rng`. Everything made
    /// durable is in it; of the rest, what `tear` says.
    pub fn crash_image(&self, rng: &mut impl Rng, tear: Tear) -> CrashDisk {
        let state = self.state.lock();
        let mut image = State {
            dirs: state.dirs.clone(),
            capacity_bytes: state.capacity_bytes,
            ..State::default()
        };
        // Names: the durable ones plus a prefix of the journaled operations after them.
        let mut names = state.durable_names.clone();
        let kept_ops = match tear {
            Tear::Nothing => 0,
            Tear::Everything => state.pending_names.len(),
            Tear::Sectors | Tear::Prefix => rng.random_range(0..=state.pending_names.len()),
        };
        for op in &state.pending_names[..kept_ops] {
            match op {
                NameOp::Link(path, inode) => {
                    names.insert(path.clone(), *inode);
                }
                NameOp::Unlink(path) => {
                    names.remove(path);
                }
                NameOp::Rename { from, to, inode } => {
                    names.remove(from);
                    names.insert(to.clone(), *inode);
                }
            }
        }
        // Data: per inode, the durable bytes plus the torn pending changes.
        let mut renumber = BTreeMap::new();
        for (path, inode) in names {
            let id = *renumber.entry(inode).or_insert_with(|| {
                let source = &state.inodes[inode];
                let mut content = source.durable.clone();
                apply_torn(&mut content, &source.pending, tear, rng);
                image.inodes.push(Inode {
                    current: content.clone(),
                    durable: content,
                    pending: Vec::new(),
                });
                image.inodes.len() - 1
            });
            image.names.insert(path, id);
        }
        image.durable_names = image.names.clone();
        CrashDisk { state: Arc::new(Mutex::new(image)), hook: Arc::default() }
    }
}

fn apply_torn(content: &mut Vec<u8>, pending: &[Change], tear: Tear, rng: &mut impl Rng) {
    match tear {
        Tear::Nothing => {}
        Tear::Everything => {
            for change in pending {
                apply(content, change, None);
            }
        }
        Tear::Sectors => {
            for change in pending {
                match change {
                    Change::SetLen(_) => {
                        if rng.random_bool(0.5) {
                            apply(content, change, None);
                        }
                    }
                    Change::Write { offset, data } => {
                        // Sector by sector (aligned to the file's sectors): each kept or lost,
                        // and a kept one sometimes only in its first half.
                        let mut at = 0usize;
                        while at < data.len() {
                            let absolute = *offset as usize + at;
                            let sector_end = (absolute / SECTOR + 1) * SECTOR;
                            let len = (sector_end - absolute).min(data.len() - at);
                            if rng.random_bool(0.5) {
                                let keep = if rng.random_bool(0.2) { len.div_ceil(2) } else { len };
                                write_into(content, absolute, &data[at..at + keep]);
                            }
                            at += len;
                        }
                    }
                }
            }
        }
        Tear::Prefix => {
            let total: usize = pending
                .iter()
                .map(|change| match change {
                    Change::Write { data, .. } => data.len(),
                    Change::SetLen(_) => 1,
                })
                .sum();
            let mut budget = rng.random_range(0..=total);
            for change in pending {
                if budget == 0 {
                    break;
                }
                match change {
                    Change::Write { data, .. } if data.len() > budget => {
                        apply(content, change, Some(budget));
                        break;
                    }
                    Change::Write { data, .. } => budget -= data.len(),
                    Change::SetLen(_) => budget -= 1,
                }
                apply(content, change, None);
            }
        }
    }
}

fn apply(content: &mut Vec<u8>, change: &Change, prefix: Option<usize>) {
    match change {
        Change::Write { offset, data } => {
            let len = prefix.unwrap_or(data.len()).min(data.len());
            write_into(content, *offset as usize, &data[..len]);
        }
        Change::SetLen(len) => content.resize(*len as usize, 0),
    }
}

fn write_into(content: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if content.len() < offset + data.len() {
        content.resize(offset + data.len(), 0);
    }
    content[offset..offset + data.len()].copy_from_slice(data);
}

#[derive(Debug)]
struct SimFile {
    disk: CrashDisk,
    inode: InodeId,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("injected I/O error on {what}"))
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let state = self.disk.state.lock();
        let content = &state.inodes[self.inode].current;
        let start = offset as usize;
        if start + buf.len() > content.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            ));
        }
        buf.copy_from_slice(&content[start..start + buf.len()]);
        Ok(())
    }

    /// Joins the pieces (the default `write_gathered_at`), but says it gathers, so that the
    /// log writer's gathered writes (written, then synced after the log buffer is released)
    /// are what the crash tests cut.
    fn gathers(&self) -> bool {
        true
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.disk.state.lock();
        if state.fault(self.inode) == Some(Fault::WriteError) {
            return Err(eio("write"));
        }
        let end = offset + buf.len() as u64;
        let current_len = state.inodes[self.inode].current.len() as u64;
        if let Some(capacity) = state.capacity_bytes
            && end > current_len
            && state.used_bytes() + (end - current_len) > capacity
        {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let inode = &mut state.inodes[self.inode];
        write_into(&mut inode.current, offset as usize, buf);
        inode.pending.push(Change::Write { offset, data: buf.to_vec() });
        drop(state);
        self.disk.run_hook();
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.disk.state.lock();
        if state.fault(self.inode) == Some(Fault::SyncError) {
            return Err(eio("sync"));
        }
        state.syncs += 1;
        let inode = &mut state.inodes[self.inode];
        inode.durable = inode.current.clone();
        inode.pending.clear();
        drop(state);
        self.disk.run_hook();
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.disk.state.lock().inodes[self.inode].current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.disk.state.lock();
        let inode = &mut state.inodes[self.inode];
        inode.current.resize(len as usize, 0);
        inode.pending.push(Change::SetLen(len));
        Ok(())
    }
}

impl CrashDisk {
    fn check_dir(state: &State, path: &Path) -> io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new(""));
        if dir.as_os_str().is_empty() || state.dirs.contains(dir) {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            ))
        }
    }

    fn new_file(
        &self,
        path: &Path,
        content: Vec<u8>,
        durable: bool,
    ) -> io::Result<Box<dyn StorageFile>> {
        let mut state = self.state.lock();
        CrashDisk::check_dir(&state, path)?;
        if let Some(capacity) = state.capacity_bytes
            && state.used_bytes() + content.len() as u64 > capacity
        {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        if state.names.contains_key(path) {
            state.unlink(path)?;
        }
        let inode = state.inodes.len();
        let durable_content = if durable { content.clone() } else { Vec::new() };
        let pending = if durable { Vec::new() } else { vec![Change::SetLen(content.len() as u64)] };
        state.inodes.push(Inode { current: content, durable: durable_content, pending });
        state.link(path, inode);
        Ok(Box::new(SimFile { disk: self.clone(), inode }))
    }
}

impl Storage for CrashDisk {
    fn create_log(&self, path: &Path, len: u64) -> io::Result<Box<dyn StorageFile>> {
        if self.exists(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        let file = self.new_file(path, vec![0u8; len as usize], true)?;
        // The real implementation syncs the file and its directory before returning.
        self.sync_dir(path.parent().unwrap_or(Path::new("")))?;
        Ok(file)
    }

    fn open_log(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.open(path)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let inode = self.state.lock().lookup(path)?;
        Ok(Box::new(SimFile { disk: self.clone(), inode }))
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.new_file(path, Vec::new(), false)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        CrashDisk::check_dir(&state, to)?;
        let inode = state.lookup(from)?;
        state.names.remove(from);
        state.names.insert(to.to_path_buf(), inode);
        state.pending_names.push(NameOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            inode,
        });
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.state.lock().unlink(path).map(|_| ())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        if !dir.as_os_str().is_empty() && !state.dirs.contains(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            ));
        }
        state.durable_names = state.names.clone();
        state.pending_names.clear();
        Ok(())
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        for ancestor in dir.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                state.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let state = self.state.lock();
        state.names.contains_key(path) || state.dirs.contains(path)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let state = self.state.lock();
        if !state.dirs.contains(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such directory", dir.display()),
            ));
        }
        let files = state.names.keys().filter(|path| path.parent() == Some(dir)).cloned();
        let dirs = state.dirs.iter().filter(|path| path.parent() == Some(dir)).cloned();
        Ok(files.chain(dirs).collect())
    }

    fn available_bytes(&self, _path: &Path) -> Option<u64> {
        let state = self.state.lock();
        state.capacity_bytes.map(|capacity| capacity.saturating_sub(state.used_bytes()))
    }
}

/// Bounds a test that could hang on a bug (a lost wake-up, a deadlock): if it is still alive
/// after `limit`, the process prints what was running and aborts, so a test run fails in
/// bounded time with a message instead of hanging CI.
#[derive(Debug)]
pub struct Watchdog {
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl Watchdog {
    pub fn new(limit: std::time::Duration, what: &'static str) -> Watchdog {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watching = done.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + limit;
            while std::time::Instant::now() < deadline {
                if watching.load(std::sync::atomic::Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            eprintln!(
                "watchdog: {what} still running after {limit:?}; aborting (a hang is a failure)"
            );
            std::process::abort();
        });
        Watchdog { done }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::storage::replace_durably;

    #[test]
    fn unsynced_writes_may_be_lost_synced_ones_never() {
        let disk = CrashDisk::new();
        disk.create_dir_all(Path::new("/d")).unwrap();
        let file = disk.create_log(Path::new("/d/log"), 4096).unwrap();
        file.write_at(&[1; 1024], 0).unwrap();
        file.sync_data().unwrap();
        file.write_at(&[2; 1024], 1024).unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        let mut saw_lost = false;
        let mut saw_half = false;
        for _ in 0..200 {
            let tear = [Tear::Sectors, Tear::Prefix][rng.random_range(0..2)];
            let image = disk.crash_image(&mut rng, tear);
            let content = image.contents(Path::new("/d/log")).unwrap();
            assert_eq!(content.len(), 4096);
            assert_eq!(&content[..1024], &[1; 1024]);
            let twos = content[1024..2048].iter().filter(|&&byte| byte == 2).count();
            saw_lost |= twos < 1024;
            saw_half |= twos % 512 != 0;
        }
        assert!(saw_lost && saw_half, "tears must lose whole and half sectors");
        let nothing = disk.crash_image(&mut rng, Tear::Nothing);
        assert_eq!(nothing.contents(Path::new("/d/log")).unwrap()[1024], 0);
        let everything = disk.crash_image(&mut rng, Tear::Everything);
        assert_eq!(everything.contents(Path::new("/d/log")).unwrap()[1024], 2);
    }

    #[test]
    fn names_need_a_directory_sync() {
        let disk = CrashDisk::new();
        disk.create_dir_all(Path::new("/d")).unwrap();
        let file = disk.create(Path::new("/d/new")).unwrap();
        file.write_at(b"data", 0).unwrap();
        file.sync_data().unwrap();
        let mut rng = StdRng::seed_from_u64(1);
        assert!(!disk.crash_image(&mut rng, Tear::Nothing).exists(Path::new("/d/new")));
        disk.sync_dir(Path::new("/d")).unwrap();
        let image = disk.crash_image(&mut rng, Tear::Nothing);
        assert_eq!(image.contents(Path::new("/d/new")).unwrap(), b"data");
    }

    #[test]
    fn durable_replacement_leaves_old_or_new() {
        let disk = CrashDisk::new();
        disk.create_dir_all(Path::new("/d")).unwrap();
        let path = Path::new("/d/control");
        replace_durably(&disk, path, b"old").unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let before = disk.clone();
        // Crash images taken at every step of a second replacement.
        let temporary = Path::new("/d/control.tmp");
        let file = before.create(temporary).unwrap();
        file.write_at(b"new", 0).unwrap();
        for _ in 0..50 {
            let image = disk.crash_image(&mut rng, Tear::Sectors);
            assert_eq!(image.contents(path).unwrap(), b"old");
        }
        file.sync_data().unwrap();
        disk.rename(temporary, path).unwrap();
        for _ in 0..50 {
            let image = disk.crash_image(&mut rng, Tear::Prefix);
            let content = image.contents(path).unwrap();
            assert!(content == b"old" || content == b"new", "{content:?}");
        }
        disk.sync_dir(Path::new("/d")).unwrap();
        assert_eq!(disk.crash_image(&mut rng, Tear::Nothing).contents(path).unwrap(), b"new");
    }

    #[test]
    fn capacity_and_faults() {
        let disk = CrashDisk::new();
        disk.create_dir_all(Path::new("/d")).unwrap();
        disk.set_capacity(Some(10_000));
        let file = disk.create(Path::new("/d/a")).unwrap();
        file.write_at(&[0; 8_000], 0).unwrap();
        let error = file.write_at(&[0; 4_000], 8_000).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
        // Overwriting in place needs no space.
        file.write_at(&[1; 4_000], 0).unwrap();
        disk.set_fault(Path::new("/d/a"), Some(Fault::SyncError));
        assert!(file.sync_data().is_err());
        disk.set_fault(Path::new("/d/a"), None);
        file.sync_data().unwrap();
    }
}
