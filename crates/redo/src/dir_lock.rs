//! The data directory lock: one process per data directory (a server's, an observer's).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Held for as long as the process runs; the lock is released when it is dropped (or when the
/// process dies, however it dies: it is an flock).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Locks `data_dir` (creating it if needed), or says who holds it.
    pub fn acquire(data_dir: &Path) -> std::io::Result<DataDirLock> {
        let context = |what: String| {
            move |error: std::io::Error| {
                std::io::Error::new(error.kind(), format!("{what}: {error}"))
            }
        };
        std::fs::create_dir_all(data_dir)
            .map_err(context(format!("cannot create the data directory {}", data_dir.display())))?;
        let path = data_dir.join("LOCK");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(context(format!("cannot open {}", path.display())))?;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!(
                    "the data directory {} is in use by another redoguard process{}; stop it or choose another --data-dir",
                    data_dir.display(),
                    if holder.is_empty() { String::new() } else { format!(" (pid {holder})") }
                ),
            ));
        }
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())?;
        file.sync_all()?;
        Ok(DataDirLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let error = DataDirLock::acquire(dir.path()).unwrap_err().to_string();
        assert!(error.contains("in use by another redoguard process"), "{error}");
        assert!(error.contains(&format!("pid {}", std::process::id())), "{error}");
        drop(first);
        DataDirLock::acquire(dir.path()).unwrap();
    }
}
