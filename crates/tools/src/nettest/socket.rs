//! Socket options nettest sets and reports: buffer sizes (and whether the kernel capped
//! them), congestion control, and the kernel limits behind both.

use std::io;
use std::os::fd::AsRawFd;

/// Sets `TCP_CONGESTION` (e.g. `cubic`): namespaces inherit the host's default and may not
/// be allowed to change it globally, but a socket may choose.
pub fn set_congestion(socket: &impl AsRawFd, name: &str) -> io::Result<()> {
    // SAFETY: setsockopt reads name.len() bytes from a live buffer.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if result == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The congestion control algorithm a TCP socket uses.
pub fn congestion(socket: &impl AsRawFd) -> io::Result<String> {
    let mut name = [0u8; 16];
    let mut length = name.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `length` bytes into a live buffer.
    let result = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut length,
        )
    };
    if result != 0 {
        return Err(io::Error::last_os_error());
    }
    let used = &name[..length as usize];
    let end = used.iter().position(|&byte| byte == 0).unwrap_or(used.len());
    Ok(String::from_utf8_lossy(&used[..end]).into_owned())
}

/// `(net.core.wmem_max, net.core.rmem_max)`, the caps on `SO_SNDBUF`/`SO_RCVBUF` requests.
pub fn buffer_limits() -> io::Result<(u64, u64)> {
    let read = |path: &str| -> io::Result<u64> {
        std::fs::read_to_string(path)?.trim().parse().map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{path} is not a number"))
        })
    };
    Ok((read("/proc/sys/net/core/wmem_max")?, read("/proc/sys/net/core/rmem_max")?))
}

/// Whether the kernel granted less than asked: Linux doubles a request (room for its own
/// bookkeeping) unless `net.core.{w,r}mem_max` caps it first, so a granted size below twice
/// the request means it was capped.
pub fn was_capped(requested_bytes: u64, granted_bytes: u64) -> bool {
    granted_bytes < requested_bytes.saturating_mul(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capping_is_detected_from_the_doubling() {
        assert!(!was_capped(16384, 32768));
        assert!(was_capped(9_375_000, 8_388_608));
        assert!(!was_capped(0, 0));
    }

    #[test]
    fn congestion_control_can_be_read_and_chosen_per_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let before = congestion(&stream).unwrap();
        assert!(!before.is_empty());
        // reno is always built in.
        set_congestion(&stream, "reno").unwrap();
        assert_eq!(congestion(&stream).unwrap(), "reno");
        assert!(set_congestion(&stream, "no-such-algorithm").is_err());
    }
}
