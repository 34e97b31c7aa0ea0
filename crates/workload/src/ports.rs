//! Ports for the fixed addresses a configuration names before its servers start (the demo's
//! members, the benchmarks' servers and peers, the integration tests' clusters).
//!
//! A port found free by binding port 0 comes from the kernel's ephemeral range, the range that
//! every outgoing connection on the host takes its local port from. Between that check and the
//! server's own bind, any connection may take it, and the server then fails with "Address
//! already in use". [`free_port`] picks below the ephemeral range instead, where the kernel
//! hands out no port by itself, and never gives one port twice in a process (a server stopped
//! and started again keeps its port, and one configuration must not name one address twice).
//!
//! Nor twice on the host while the process that took it lives: tests run in two processes at
//! once, and a port one of them had picked but not bound yet, or whose server it had stopped
//! to start again, looked free to the other, which took it (CI, 2026-11-30: a cluster's primary
//! failed to start with "Address already in use"). Each port handed out is held by an
//! abstract Unix socket named for it (`redoguard-port-N`), kept open for the life of the
//! process: the kernel lets it go when the process ends, however it ends, and leaves no file.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::sync::Mutex;

use rand::Rng;

/// Ports below the ephemeral range that [`free_port`] picks from (at most).
const SPAN: u16 = 16_384;
/// The lowest port it picks (above the well-known and most registered service ports).
const LOWEST: u16 = 10_000;
/// Where the kernel's ephemeral range starts, if it cannot be read (Linux's default).
const DEFAULT_EPHEMERAL_START: u16 = 32_768;

/// Ports this process has handed out.
static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A TCP port free on loopback now, outside the kernel's ephemeral range when the range leaves
/// room below it, and not handed out before by this process.
pub fn free_port() -> std::io::Result<u16> {
    let start = ephemeral_start().unwrap_or(DEFAULT_EPHEMERAL_START);
    let mut given = GIVEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((low, high)) = below(start) {
        let mut rng = rand::rng();
        for _ in 0..1000 {
            let port = rng.random_range(low..high);
            if !given.contains(&port)
                && TcpListener::bind(("127.0.0.1", port)).is_ok()
                && reserve(port)
            {
                given.insert(port);
                return Ok(port);
            }
        }
    }
    // No room below the range (or nothing free there): the kernel's choice.
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if !given.contains(&port) && reserve(port) {
            given.insert(port);
            return Ok(port);
        }
    }
}

/// The abstract sockets that hold this process's ports against the others (never closed).
static HELD: Mutex<Vec<UnixListener>> = Mutex::new(Vec::new());

/// Holds `port` for this process: false if another living process (or this one) holds it.
/// Where abstract sockets cannot be made, every port is taken as free (the check by binding
/// it stands alone, as before).
fn reserve(port: u16) -> bool {
    let Ok(name) = SocketAddr::from_abstract_name(format!("redoguard-port-{port}")) else {
        return true;
    };
    match UnixListener::bind_addr(&name) {
        Ok(listener) => {
            HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(listener);
            true
        }
        Err(error) => error.kind() != std::io::ErrorKind::AddrInUse,
    }
}

/// The ports `[low, high)` to pick from below an ephemeral range starting at `start`, if there
/// are at least 1024 of them.
fn below(start: u16) -> Option<(u16, u16)> {
    let low = start.saturating_sub(SPAN).max(LOWEST);
    (start >= low.saturating_add(1024)).then_some((low, start))
}

/// The first port of the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`).
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_never_twice() {
        let start = ephemeral_start().unwrap_or(DEFAULT_EPHEMERAL_START);
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let port = free_port().unwrap();
            assert!(seen.insert(port), "port {port} handed out twice");
            if below(start).is_some() {
                assert!((LOWEST..start).contains(&port), "{port} is not below {start}");
            }
            // Free when handed out.
            TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }

    #[test]
    fn a_port_handed_out_is_held_against_other_processes() {
        let port = free_port().unwrap();
        // What another process would try: the port's abstract name is taken while this lives.
        assert!(!reserve(port), "port {port} is not held");
        // A child process: it finds the name taken too, and leaves no hold when it ends.
        let name = format!("@redoguard-port-{port}");
        let probe = std::process::Command::new("python3")
            .args(["-c", &format!(
                "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.bind('\\0'+'{}')\nexcept OSError:\n sys.exit(3)",
                &name[1..]
            )])
            .status();
        if let Ok(status) = probe {
            assert_eq!(status.code(), Some(3), "another process could take port {port}");
        }
    }

    #[test]
    fn the_span_below_the_range_is_bounded() {
        assert_eq!(below(32_768), Some((16_384, 32_768)));
        assert_eq!(below(20_000), Some((10_000, 20_000)));
        // Too little room: the kernel's choice instead.
        assert_eq!(below(10_500), None);
        assert_eq!(below(1024), None);
    }
}
