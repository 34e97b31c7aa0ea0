//! linkemu end to end: TCP between the two namespaces sees the configured RTT, rate and
//! window limits, and the link can be changed, cut and torn down while traffic flows.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use linkemu::{Link, LinkConfig, Side};

/// One test's link at a time: these tests time round trips and rates through linkemu's own
/// forwarding threads; side by side on a small, busy machine they measured one another too
/// (a 20 ms link timed at 25.7 ms, and a 50 Mbit/s one below its line, with the other tests
/// streaming beside them and two builds running).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A test's link, and its turn: dropped in that order (the link's namespaces go first).
struct TestLink {
    link: Link,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl std::ops::Deref for TestLink {
    type Target = Link;

    fn deref(&self) -> &Link {
        &self.link
    }
}

/// Brings a link up, or says clearly why this machine cannot and returns `None`.
fn link_or_skip(config: LinkConfig) -> Option<TestLink> {
    if let Some(reason) = linkemu::unavailable_reason() {
        eprintln!("skipping linkemu test: {reason}");
        return None;
    }
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Some(TestLink { link: Link::up(config).expect("bring the link up"), _turn: turn })
}

fn set_int_option(stream: &impl AsRawFd, level: i32, name: i32, value: i32) {
    // SAFETY: setsockopt reads one c_int from a live local.
    let result =
        unsafe { libc::setsockopt(stream.as_raw_fd(), level, name, (&raw const value).cast(), 4) };
    assert_eq!(result, 0, "setsockopt {name}: {}", std::io::Error::last_os_error());
}

/// Namespaces inherit bbr; the measurements here assume the classic loss-based cubic.
fn use_cubic(stream: &impl AsRawFd) {
    let name = b"cubic";
    // SAFETY: setsockopt reads name.len() bytes from a live buffer.
    let result = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as u32,
        )
    };
    assert_eq!(result, 0, "TCP_CONGESTION cubic: {}", std::io::Error::last_os_error());
}

/// A TCP connection from A to a listener in B, with `prepare` applied to the listener.
fn connect(link: &Link, prepare: impl Fn(&TcpListener) + Send + Sync) -> (TcpStream, TcpStream) {
    let listener = link
        .run_in(Side::B, || {
            let listener = TcpListener::bind("0.0.0.0:0").unwrap();
            prepare(&listener);
            listener
        })
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let address = (link.address(Side::B), port);
    let client = link.run_in(Side::A, || TcpStream::connect(address)).unwrap().unwrap();
    let (server, _) = listener.accept().unwrap();
    for stream in [&client, &server] {
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    (client, server)
}

/// Median round trip of `rounds` one-byte ping-pongs.
fn ping_pong_median(client: &mut TcpStream, server: &TcpStream, rounds: usize) -> Duration {
    let mut echo = server.try_clone().unwrap();
    let echoer = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        for _ in 0..rounds {
            echo.read_exact(&mut byte).unwrap();
            echo.write_all(&byte).unwrap();
        }
    });
    let mut samples = Vec::with_capacity(rounds);
    let mut byte = [7u8; 1];
    for _ in 0..rounds {
        let start = Instant::now();
        client.write_all(&byte).unwrap();
        client.read_exact(&mut byte).unwrap();
        samples.push(start.elapsed());
    }
    echoer.join().unwrap();
    samples.sort();
    samples[rounds / 2]
}

fn assert_within(measured: Duration, configured: Duration, tolerance: f64) {
    let ratio = measured.as_secs_f64() / configured.as_secs_f64();
    assert!(
        (1.0 - tolerance..=1.0 + tolerance).contains(&ratio),
        "measured {measured:?} vs configured {configured:?} (ratio {ratio:.3})"
    );
}

#[test]
fn tcp_ping_pong_sees_the_configured_rtt_and_its_changes() {
    let rtt = Duration::from_millis(20);
    let Some(link) = link_or_skip(LinkConfig {
        rtt,
        rate_bits_per_s: Some(100_000_000),
        ..LinkConfig::default()
    }) else {
        return;
    };
    let (mut client, server) = connect(&link, |_| {});
    let median = ping_pong_median(&mut client, &server, 15);
    eprintln!("rtt configured {rtt:?}, measured median {median:?}");
    assert_within(median, rtt, 0.10);

    // Changed while the connection is open: the next packets see the new delay.
    let longer = Duration::from_millis(50);
    link.set_rtt(longer).unwrap();
    let median = ping_pong_median(&mut client, &server, 7);
    eprintln!("rtt changed to {longer:?}, measured median {median:?}");
    assert_within(median, longer, 0.10);
}

/// Bytes per second that one connection carries from A to B over `duration`.
fn stream_rate(client: &mut TcpStream, server: &TcpStream, duration: Duration) -> f64 {
    let mut sink = server.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buffer = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        let mut first: Option<Instant> = None;
        loop {
            match sink.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // Count from the first byte: connection set-up is not throughput.
                    first.get_or_insert_with(Instant::now);
                    total += n as u64;
                }
            }
        }
        (total, first.map(|f| f.elapsed()).unwrap_or_default())
    });
    let chunk = vec![0x5au8; 64 * 1024];
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        client.write_all(&chunk).unwrap();
    }
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let (bytes, elapsed) = reader.join().unwrap();
    bytes as f64 / elapsed.as_secs_f64()
}

#[test]
fn a_16_kib_window_is_throttled_to_window_over_rtt() {
    let rtt = Duration::from_millis(50);
    let Some(link) = link_or_skip(LinkConfig {
        rtt,
        rate_bits_per_s: Some(1_000_000_000),
        ..LinkConfig::default()
    }) else {
        return;
    };
    // The receive buffer is set on the listener so that the accepted socket has it from
    // the SYN on (the window scale is chosen then).
    let (mut client, server) = connect(&link, |listener| {
        set_int_option(listener, libc::SOL_SOCKET, libc::SO_RCVBUF, 16 * 1024)
    });
    use_cubic(&client);
    set_int_option(&client, libc::SOL_SOCKET, libc::SO_SNDBUF, 16 * 1024);
    let bits_per_s = stream_rate(&mut client, &server, Duration::from_secs(3)) * 8.0;
    let predicted = 16.0 * 1024.0 * 8.0 / rtt.as_secs_f64();
    eprintln!("16 KiB window at {rtt:?}: {bits_per_s:.0} bit/s, predicted {predicted:.0} bit/s");
    let ratio = bits_per_s / predicted;
    assert!((0.8..=1.5).contains(&ratio), "ratio to prediction {ratio:.2}");
}

#[test]
fn the_rate_cap_holds_with_ethernet_framing() {
    let Some(link) = link_or_skip(LinkConfig {
        rtt: Duration::from_millis(2),
        rate_bits_per_s: Some(50_000_000),
        ..LinkConfig::default()
    }) else {
        return;
    };
    let (mut client, server) = connect(&link, |_| {});
    use_cubic(&client);
    let bits_per_s = stream_rate(&mut client, &server, Duration::from_secs(2)) * 8.0;
    // Payload share of a 1500-byte packet with 52 bytes of TCP/IP headers and 38 of framing.
    let ceiling = 50e6 * 1448.0 / 1538.0;
    eprintln!("50 Mbit/s link: {bits_per_s:.0} bit/s of payload, ceiling {ceiling:.0}");
    assert!(bits_per_s <= ceiling * 1.03, "faster than the line: {bits_per_s:.0}");
    assert!(bits_per_s >= ceiling * 0.85, "far below the line: {bits_per_s:.0}");
}

#[test]
fn a_cut_link_carries_nothing_until_restored() {
    let Some(link) =
        link_or_skip(LinkConfig { rtt: Duration::from_millis(2), ..LinkConfig::default() })
    else {
        return;
    };
    let (mut client, mut server) = connect(&link, |_| {});
    link.cut();
    assert!(link.is_cut());
    client.write_all(b"during the cut").unwrap();
    server.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut buffer = [0u8; 14];
    let error = server.read_exact(&mut buffer).unwrap_err();
    assert!(matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
    assert!(link.stats().a_to_b.dropped_cut > 0);
    link.restore();
    // TCP retransmits after its timeout (at least 200 ms, doubled per try).
    server.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    server.read_exact(&mut buffer).unwrap();
    assert_eq!(&buffer, b"during the cut");
}

#[test]
fn loss_drops_about_the_configured_share_of_packets() {
    let Some(link) = link_or_skip(LinkConfig { loss_ratio: 0.2, ..LinkConfig::default() }) else {
        return;
    };
    let receiver =
        link.run_in(Side::B, || std::net::UdpSocket::bind("0.0.0.0:0")).unwrap().unwrap();
    receiver.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    set_int_option(&receiver, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20);
    let port = receiver.local_addr().unwrap().port();
    let sender = link.run_in(Side::A, || std::net::UdpSocket::bind("0.0.0.0:0")).unwrap().unwrap();
    // Count on another thread while sending, so that the receiver's socket buffer never
    // overflows: that would be our loss, not the link's.
    let counter = std::thread::spawn(move || {
        let mut received = 0usize;
        let mut buffer = [0u8; 16];
        while receiver.recv(&mut buffer).is_ok() {
            received += 1;
        }
        received
    });
    let sent = 2000;
    for index in 0..sent {
        sender.send_to(&(index as u32).to_le_bytes(), (link.address(Side::B), port)).unwrap();
    }
    let received = counter.join().unwrap();
    let lost = sent - received;
    eprintln!("20 % loss: {lost} of {sent} datagrams lost, stats {:?}", link.stats().a_to_b);
    // Binomial(2000, 0.2): mean 400, standard deviation ~18; the seed is fixed anyway.
    assert!((330..=470).contains(&lost), "lost {lost} of {sent}");
    // The link may also carry a stray packet of its own (IPv6 neighbour discovery).
    let dropped = link.stats().a_to_b.dropped_loss as usize;
    assert!(dropped.abs_diff(lost) <= 2, "link dropped {dropped}, receiver missed {lost}");
}

#[test]
fn dropping_the_link_removes_its_namespaces() {
    let Some(link) = link_or_skip(LinkConfig::default()) else {
        return;
    };
    let names = [link.namespace(Side::A).to_string(), link.namespace(Side::B).to_string()];
    for name in &names {
        assert!(std::path::Path::new("/run/netns").join(name).exists());
    }
    let status =
        link.command(Side::A, "ip").args(["-brief", "addr", "show", "wan0"]).output().unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("198.18.0.1"), "side A's address: {text}");
    drop(link);
    for name in &names {
        assert!(!std::path::Path::new("/run/netns").join(name).exists(), "{name} is left");
    }
}

#[test]
fn bad_settings_are_refused_by_name_while_running() {
    let Some(link) = link_or_skip(LinkConfig::default()) else {
        return;
    };
    let error = link.set_loss(2.0).unwrap_err().to_string();
    assert!(error.contains("'loss'"), "{error}");
    assert_eq!(link.config().loss_ratio, 0.0, "a refused change leaves the link as it was");
}
