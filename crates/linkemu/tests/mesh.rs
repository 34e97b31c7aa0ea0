//! A mesh of three sites: every pair talks through its own link, and cutting one pair leaves
//! the others talking; a one-way cut drops one direction of a pair.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

use linkemu::{LinkConfig, Mesh};

/// An echo of one byte from `from` to a listener in `to`, within a second; false if it times
/// out (the pair is cut).
fn echoes(mesh: &Mesh, listeners: &[TcpListener], from: usize, to: usize) -> bool {
    let address = (mesh.address(to), listeners[to].local_addr().unwrap().port());
    let client = mesh
        .run_in(from, || TcpStream::connect_timeout(&address.into(), Duration::from_secs(1)))
        .expect("enter the site");
    let Ok(mut client) = client else { return false };
    let Ok((mut server, _)) = listeners[to].accept() else { return false };
    client.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    server.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut byte = [0u8; 1];
    client.write_all(b"x").is_ok()
        && server.read_exact(&mut byte).is_ok()
        && server.write_all(&byte).is_ok()
        && client.read_exact(&mut byte).is_ok()
}

#[test]
fn cutting_one_pair_leaves_the_others_talking() {
    if let Some(reason) = linkemu::unavailable_reason() {
        panic!("this test needs linkemu, which cannot run here: {reason}");
    }
    let mesh = Mesh::up(3, LinkConfig { rtt: Duration::from_millis(2), ..LinkConfig::default() })
        .expect("bring the mesh up");
    let listeners: Vec<TcpListener> = (0..3)
        .map(|site| {
            let listener = mesh
                .run_in(site, || TcpListener::bind((mesh.address(site), 0)))
                .expect("enter the site")
                .expect("bind");
            listener.set_nonblocking(false).unwrap();
            listener
        })
        .collect();
    for (from, to) in [(0, 1), (1, 0), (0, 2), (2, 1)] {
        assert!(echoes(&mesh, &listeners, from, to), "{from} -> {to} before any cut");
    }
    mesh.cut(0, 1);
    assert!(mesh.is_cut(1, 0));
    // Connecting across the cut times out (nothing is refused: the cable is pulled).
    assert!(!echoes(&mesh, &listeners, 0, 1), "0 -> 1 through a cut");
    assert!(echoes(&mesh, &listeners, 0, 2), "0 -> 2 beside the cut");
    assert!(echoes(&mesh, &listeners, 2, 1), "2 -> 1 beside the cut");
    mesh.restore(0, 1);
    assert!(echoes(&mesh, &listeners, 1, 0), "1 -> 0 after the cut");
    let namespace = mesh.namespace(0).to_string();
    drop(mesh);
    assert!(
        !std::path::Path::new("/run/netns").join(namespace).exists(),
        "the namespaces are gone"
    );
}

/// Whether a datagram sent from a socket in `from` reaches `to`'s socket within half a second.
fn datagram_arrives(mesh: &Mesh, sockets: &[UdpSocket], from: usize, to: usize) -> bool {
    let address = sockets[to].local_addr().unwrap();
    sockets[from].send_to(&[from as u8], address).unwrap();
    let mut byte = [0u8; 1];
    loop {
        match sockets[to].recv_from(&mut byte) {
            // A datagram from another site is skipped.
            Ok((1, sender)) if byte[0] == from as u8 && sender.ip() == mesh.address(from) => {
                return true;
            }
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_one_way_cut_drops_one_direction_and_restore_ends_it() {
    if let Some(reason) = linkemu::unavailable_reason() {
        panic!("this test needs linkemu, which cannot run here: {reason}");
    }
    let mesh = Mesh::up(3, LinkConfig { rtt: Duration::from_millis(2), ..LinkConfig::default() })
        .expect("bring the mesh up");
    let sockets: Vec<UdpSocket> = (0..3)
        .map(|site| {
            let socket = mesh
                .run_in(site, || UdpSocket::bind((mesh.address(site), 0)))
                .expect("enter the site")
                .expect("bind");
            socket.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
            socket
        })
        .collect();
    assert!(datagram_arrives(&mesh, &sockets, 0, 1) && datagram_arrives(&mesh, &sockets, 1, 0));
    mesh.cut_one_way(1, 0);
    assert!(mesh.is_cut_one_way(1, 0) && !mesh.is_cut_one_way(0, 1) && !mesh.is_cut(0, 1));
    assert!(!datagram_arrives(&mesh, &sockets, 1, 0), "1 -> 0 through a one-way cut");
    assert!(datagram_arrives(&mesh, &sockets, 0, 1), "0 -> 1 beside a one-way cut");
    assert!(datagram_arrives(&mesh, &sockets, 1, 2), "1 -> 2 beside a one-way cut");
    mesh.restore(0, 1);
    assert!(datagram_arrives(&mesh, &sockets, 1, 0), "1 -> 0 after restore");
    mesh.cut_one_way(2, 1);
    mesh.restore_all();
    assert!(datagram_arrives(&mesh, &sockets, 2, 1), "2 -> 1 after restore_all");
}

/// The time of one echo of one byte from `from` to a listener in `to`, on one connection
/// (the median of five, after one to warm up).
fn echo_time(mesh: &Mesh, listeners: &[TcpListener], from: usize, to: usize) -> Duration {
    let address = (mesh.address(to), listeners[to].local_addr().unwrap().port());
    let mut client = mesh
        .run_in(from, || TcpStream::connect_timeout(&address.into(), Duration::from_secs(2)))
        .expect("enter the site")
        .expect("connect");
    let (mut server, _) = listeners[to].accept().expect("accept");
    client.set_nodelay(true).unwrap();
    server.set_nodelay(true).unwrap();
    let mut byte = [0u8; 1];
    let mut times = Vec::new();
    for _ in 0..6 {
        let started = std::time::Instant::now();
        client.write_all(b"x").unwrap();
        server.read_exact(&mut byte).unwrap();
        server.write_all(&byte).unwrap();
        client.read_exact(&mut byte).unwrap();
        times.push(started.elapsed());
    }
    times.remove(0);
    times.sort();
    times[times.len() / 2]
}

#[test]
fn set_rtt_changes_one_pair_and_leaves_the_others() {
    if let Some(reason) = linkemu::unavailable_reason() {
        panic!("this test needs linkemu, which cannot run here: {reason}");
    }
    let mesh = Mesh::up(3, LinkConfig { rtt: Duration::from_millis(40), ..LinkConfig::default() })
        .expect("bring the mesh up");
    let listeners: Vec<TcpListener> = (0..3)
        .map(|site| {
            mesh.run_in(site, || TcpListener::bind((mesh.address(site), 0)))
                .expect("enter the site")
                .expect("bind")
        })
        .collect();
    mesh.set_rtt(1, 0, Duration::from_millis(2)).expect("a valid RTT");
    let near = echo_time(&mesh, &listeners, 0, 1);
    let far = echo_time(&mesh, &listeners, 0, 2);
    assert!(near < Duration::from_millis(20), "0 -> 1 at 2 ms took {near:?}");
    assert!(far >= Duration::from_millis(40), "0 -> 2 kept 40 ms, took {far:?}");
    let error = mesh.set_rtt(0, 2, Duration::from_secs(3600)).expect_err("an RTT too long");
    assert!(error.to_string().contains("rtt"), "{error}");
}
