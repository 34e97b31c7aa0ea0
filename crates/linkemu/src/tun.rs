//! TUN devices opened inside a namespace, with the offload ioctls that let the kernel hand
//! us 64 KiB TCP super-packets instead of one MTU at a time.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::Error;
use crate::namespace;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;

/// Bytes of `struct virtio_net_hdr` in front of every packet read from or written to the
/// device (the kernel's default `TUNSETVNETHDRSZ`).
pub(crate) const VNET_HDR_BYTES: usize = 10;

/// `struct ifreq` as far as TUNSETIFF reads it.
#[repr(C)]
struct InterfaceRequest {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TUN device. The device lives as long as the descriptor: dropping it removes the
/// interface from its namespace.
#[derive(Debug)]
pub(crate) struct Tun {
    pub(crate) fd: OwnedFd,
}

impl Tun {
    /// Opens `/dev/net/tun` from inside `namespace` (the device is created in the namespace
    /// of the thread that opens it) as interface `interface`, non-blocking, with a
    /// `virtio_net_hdr` on every packet.
    pub(crate) fn open_in(namespace: &str, interface: &str, offload: bool) -> Result<Tun, Error> {
        assert!(interface.len() < libc::IFNAMSIZ, "interface names are at most 15 bytes");
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let _inside = namespace::enter(namespace)?;
                    let file = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                        .open("/dev/net/tun")
                        .map_err(|source| Error::Io {
                            what: "open /dev/net/tun (is the tun module available?)".into(),
                            source,
                        })?;
                    let fd = OwnedFd::from(file);
                    let mut request = InterfaceRequest {
                        name: [0; libc::IFNAMSIZ],
                        flags: IFF_TUN | IFF_NO_PI | IFF_VNET_HDR,
                        _pad: [0; 22],
                    };
                    request.name[..interface.len()].copy_from_slice(interface.as_bytes());
                    // SAFETY: TUNSETIFF reads a struct ifreq, which InterfaceRequest lays out.
                    let result = unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut request) };
                    if result != 0 {
                        return Err(Error::Io {
                            what: format!("create TUN device {interface} in {namespace}"),
                            source: io::Error::last_os_error(),
                        });
                    }
                    let tun = Tun { fd };
                    tun.set_offload(offload)?;
                    Ok(tun)
                })
                .join()
                .expect("the TUN opening thread does not panic")
        })
    }

    /// Turns TCP segmentation offload on or off while the device runs.
    pub(crate) fn set_offload(&self, on: bool) -> Result<(), Error> {
        let flags: libc::c_uint = if on { TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 } else { 0 };
        // SAFETY: TUNSETOFFLOAD takes its argument by value.
        let result = unsafe { libc::ioctl(self.fd.as_raw_fd(), TUNSETOFFLOAD, flags) };
        if result != 0 {
            return Err(Error::Io {
                what: "set TUN offload".into(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}

/// How many bytes a packet read from the device occupies on the emulated line, framing
/// included: a TSO super-packet counts as the MTU-sized segments it will become, each with
/// its own IP and TCP headers. `packet` starts with the `virtio_net_hdr`.
pub(crate) fn wire_bytes(packet: &[u8], framing_bytes: u64) -> u64 {
    let Some(ip) = packet.get(VNET_HDR_BYTES..) else { return framing_bytes };
    let ip_bytes = ip.len() as u64;
    let gso_type = packet[1] & 0x7f;
    let gso_size = u16::from_le_bytes([packet[4], packet[5]]) as u64;
    if gso_type == 0 || gso_size == 0 {
        return ip_bytes + framing_bytes;
    }
    let header_bytes = transport_header_bytes(ip)
        .unwrap_or_else(|| u16::from_le_bytes([packet[2], packet[3]]) as u64)
        .min(ip_bytes);
    let payload_bytes = ip_bytes - header_bytes;
    let segments = payload_bytes.div_ceil(gso_size).max(1);
    ip_bytes + (segments - 1) * header_bytes + segments * framing_bytes
}

/// IP plus TCP header length of an IPv4 or IPv6 TCP packet, if it is one.
fn transport_header_bytes(ip: &[u8]) -> Option<u64> {
    let version = ip.first()? >> 4;
    let (ip_header, protocol) = match version {
        4 => (((ip[0] & 0x0f) as usize) * 4, *ip.get(9)?),
        6 => (40, *ip.get(6)?),
        _ => return None,
    };
    if protocol != 6 {
        return None;
    }
    let data_offset = (*ip.get(ip_header + 12)? >> 4) as usize * 4;
    Some((ip_header + data_offset) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp(total_bytes: usize) -> Vec<u8> {
        let mut ip = vec![0u8; total_bytes];
        ip[0] = 0x45;
        ip[9] = 6;
        ip[20 + 12] = 8 << 4; // 32-byte TCP header (with timestamps)
        ip
    }

    fn with_vnet(gso_type: u8, gso_size: u16, ip: &[u8]) -> Vec<u8> {
        let mut packet = vec![0u8; VNET_HDR_BYTES];
        packet[1] = gso_type;
        packet[2..4].copy_from_slice(&52u16.to_le_bytes());
        packet[4..6].copy_from_slice(&gso_size.to_le_bytes());
        packet.extend_from_slice(ip);
        packet
    }

    #[test]
    fn a_plain_packet_costs_its_length_plus_framing() {
        assert_eq!(wire_bytes(&with_vnet(0, 0, &ipv4_tcp(1500)), 38), 1538);
    }

    #[test]
    fn a_super_packet_costs_its_segments() {
        // 10 segments of 1448 payload bytes behind 52 bytes of headers.
        let ip = ipv4_tcp(52 + 10 * 1448);
        assert_eq!(wire_bytes(&with_vnet(1, 1448, &ip), 38), 10 * (1500 + 38));
        // A short last segment.
        let ip = ipv4_tcp(52 + 2 * 1448 + 100);
        assert_eq!(wire_bytes(&with_vnet(1, 1448, &ip), 0), 3 * 52 + 2 * 1448 + 100);
    }

    #[test]
    fn truncated_input_does_not_panic() {
        assert_eq!(wire_bytes(&[], 38), 38);
        assert_eq!(wire_bytes(&with_vnet(1, 1448, &[0x45]), 0), 1);
    }
}
