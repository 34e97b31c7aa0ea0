//! Raising `net.core.wmem_max` / `net.core.rmem_max` for as long as links are up, and
//! putting the old values back afterwards.
//!
//! Both are global (root namespace) and cap every `SO_SNDBUF`/`SO_RCVBUF` request silently,
//! so a 3 × BDP buffer on a long fat link needs them raised. Several processes (parallel
//! test binaries) may run links at once: one process lowering the limits while another is
//! mid-measurement would falsify it. So the holders are recorded in a state file under an
//! `flock`: the first holder records the original values, the last one restores them, and
//! holders that died without releasing (their pid is gone) are pruned by the next one.
//!
//! State file format (text): line 1 `wmem_max rmem_max` originals; then one holder pid per
//! line.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::Error;

const WMEM_MAX: &str = "/proc/sys/net/core/wmem_max";
const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";

/// Where the state and lock live.
pub(crate) fn state_dir() -> PathBuf {
    PathBuf::from("/run/redoguard-linkemu")
}

/// This process's holds: how many links want a raise, and the largest value any wanted.
static HOLDS: Mutex<u32> = Mutex::new(0);

/// A hold on raised socket buffer limits; dropping the last one in the process releases it.
#[derive(Debug)]
pub(crate) struct SocketBufferLimits {
    _private: (),
}

impl SocketBufferLimits {
    /// Raises both limits to at least `bytes` and records this process as a holder.
    pub(crate) fn raise(bytes: u64) -> Result<SocketBufferLimits, Error> {
        let mut holds = HOLDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        with_state(|state| {
            if !state.holders.contains(&std::process::id()) {
                state.holders.push(std::process::id());
            }
            for path in [WMEM_MAX, RMEM_MAX] {
                if read_value(path)? < bytes {
                    write_value(path, bytes)?;
                }
            }
            Ok(())
        })?;
        *holds += 1;
        Ok(SocketBufferLimits { _private: () })
    }
}

impl Drop for SocketBufferLimits {
    fn drop(&mut self) {
        let mut holds = HOLDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *holds -= 1;
        if *holds > 0 {
            return;
        }
        let result = with_state(|state| {
            state.holders.retain(|pid| *pid != std::process::id());
            Ok(())
        });
        if let Err(error) = result {
            tracing::warn!(%error, "could not restore net.core.wmem_max/rmem_max");
        }
    }
}

struct State {
    original_wmem_max: u64,
    original_rmem_max: u64,
    holders: Vec<u32>,
}

/// Runs `change` on the state under the lock; afterwards, if no live holder remains, the
/// original values are restored and the state file removed.
fn with_state(change: impl FnOnce(&mut State) -> Result<(), Error>) -> Result<(), Error> {
    let dir = state_dir();
    fs::create_dir_all(&dir).map_err(|source| io_error(&dir, source))?;
    let lock_path = dir.join("sysctl.lock");
    let lock = File::create(&lock_path).map_err(|source| io_error(&lock_path, source))?;
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io_error(&lock_path, io::Error::last_os_error()));
    }
    let state_path = dir.join("sysctl.state");
    let mut state = match read_state(&state_path)? {
        Some(state) => state,
        None => State {
            original_wmem_max: read_value(WMEM_MAX)?,
            original_rmem_max: read_value(RMEM_MAX)?,
            holders: Vec::new(),
        },
    };
    state.holders.retain(|pid| crate::process_alive(*pid));
    change(&mut state)?;
    if state.holders.is_empty() {
        write_value(WMEM_MAX, state.original_wmem_max)?;
        write_value(RMEM_MAX, state.original_rmem_max)?;
        match fs::remove_file(&state_path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => return Err(io_error(&state_path, source)),
        }
    } else {
        let mut text = format!("{} {}\n", state.original_wmem_max, state.original_rmem_max);
        for pid in &state.holders {
            text.push_str(&format!("{pid}\n"));
        }
        let temporary = dir.join("sysctl.state.tmp");
        let mut file = File::create(&temporary).map_err(|source| io_error(&temporary, source))?;
        file.write_all(text.as_bytes()).map_err(|source| io_error(&temporary, source))?;
        fs::rename(&temporary, &state_path).map_err(|source| io_error(&state_path, source))?;
    }
    Ok(())
}

fn read_state(path: &Path) -> Result<Option<State>, Error> {
    let mut file = match OpenOptions::new().read(true).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error(path, source)),
    };
    let mut text = String::new();
    file.rewind().and_then(|()| file.read_to_string(&mut text)).map_err(|s| io_error(path, s))?;
    let corrupt = || Error::Io {
        what: format!("read {}", path.display()),
        source: io::Error::new(io::ErrorKind::InvalidData, "not a linkemu sysctl state file"),
    };
    let mut lines = text.lines();
    let mut originals = lines.next().ok_or_else(corrupt)?.split_whitespace();
    let mut number = || -> Result<u64, Error> {
        originals.next().and_then(|word| word.parse().ok()).ok_or_else(corrupt)
    };
    let (original_wmem_max, original_rmem_max) = (number()?, number()?);
    let holders =
        lines.map(|line| line.trim().parse().map_err(|_| corrupt())).collect::<Result<_, _>>()?;
    Ok(Some(State { original_wmem_max, original_rmem_max, holders }))
}

fn read_value(path: &str) -> Result<u64, Error> {
    let text = fs::read_to_string(path).map_err(|source| io_error(Path::new(path), source))?;
    text.trim().parse().map_err(|_| Error::Io {
        what: format!("read {path}"),
        source: io::Error::new(io::ErrorKind::InvalidData, format!("'{}'", text.trim())),
    })
}

fn write_value(path: &str, value: u64) -> Result<(), Error> {
    fs::write(path, format!("{value}\n")).map_err(|source| Error::Io {
        what: format!("write {value} to {path} (needs root)"),
        source,
    })
}

fn io_error(path: &Path, source: io::Error) -> Error {
    Error::Io { what: format!("access {}", path.display()), source }
}

/// Prunes holders that died without releasing and, if none is left, restores the
/// original limits (after a link's process was killed).
pub(crate) fn tidy() -> Result<(), Error> {
    let _holds = HOLDS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !state_dir().join("sysctl.state").exists() {
        return Ok(());
    }
    with_state(|_| Ok(()))
}

/// The current `(wmem_max, rmem_max)`.
pub fn socket_buffer_limits() -> Result<(u64, u64), Error> {
    Ok((read_value(WMEM_MAX)?, read_value(RMEM_MAX)?))
}
