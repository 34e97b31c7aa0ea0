//! Ctrl-C (SIGINT), SIGTERM and SIGHUP during a benchmark: the first asks it to stop, so
//! that it stops its servers, takes its links down and removes its files on the way out; a
//! second one ends the process at once.
//!
//! A handler catches the signals (rather than blocking them for `sigwait`): a blocked mask is
//! inherited by every child process, and servers started with SIGTERM blocked would never stop
//! on it, while caught signals go back to their default action in a child at `exec`.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether a stop was asked for.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// Fails once a stop was asked for: call it between the steps of a long run.
pub fn check() -> anyhow::Result<()> {
    anyhow::ensure!(!requested(), "interrupted: stopped before the run was complete");
    Ok(())
}

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only async-signal-safe calls here: an atomic, write(2) and _exit(2).
    let (message, again): (&[u8], bool) = if REQUESTED.swap(true, Ordering::Relaxed) {
        (b"\ninterrupted again: quitting at once (servers, namespaces or files may be left behind)\n", true)
    } else {
        (
            b"\ninterrupted: stopping the servers, taking the links down and removing the files (again to quit at once)\n",
            false,
        )
    };
    // SAFETY: write(2) of a static buffer to stderr, and _exit(2), are async-signal-safe.
    unsafe {
        libc::write(libc::STDERR_FILENO, message.as_ptr().cast(), message.len());
        if again {
            libc::_exit(130);
        }
    }
}

/// Catches the stop signals for this process.
pub fn install() -> anyhow::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with an empty mask and a handler that only does
        // async-signal-safe work; SA_RESTART keeps interrupted system calls going.
        let result = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        anyhow::ensure!(
            result == 0,
            "cannot catch signal {signal}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
