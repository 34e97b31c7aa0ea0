//! `redoguard bench ship`: how long a large archived log takes to reach a standby that lacks
//! it (a gap, as after an outage), over a linkemu link at 1 Gbit/s, for each RTT, connection
//! count (`max_connections`) and compression, against the line-rate time of the same link
//! measured in the same run (the reference: 1 GB in 52 s at 0 ms and 102 s at 100 ms where the
//! line allows 8.6 s; 5 connections cut 80 s to 36.8 s).
//!
//! Method: a primary on side A of the link writes one log of about `log_bytes` (compressible
//! redo: values drawn from a small vocabulary), switches, and is stopped. For each case a new,
//! empty standby starts on side B and the primary is started again with its destination
//! deferred (socket buffers `auto`, 3 × bandwidth × RTT); the time runs from enabling the
//! destination at run time to the standby holding every closed log of the primary (its `complete_through_seq`). With one
//! connection those logs go on the control connection (the catch-up path); with more, in
//! pieces over the archive connections. The line rate is a plain TCP stream of the same bytes
//! across the link at RTT 0 (the link's rate does not depend on its RTT). Beside each case, the
//! same bytes go over as many plain TCP streams at the case's RTT (`tcp_seconds`): TCP's own
//! handshakes and slow start, the part of a long link's cost no protocol above TCP removes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use linkemu::Side;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tools::bench::plot::{BarPanel, Figure, Group, Limit, LimitValue};

use crate::network::{LINK_RATE_BITS_PER_S, Network};
use crate::process::ServerProcess;

/// Longest a case may take before it is reported as failed.
const CASE_TIMEOUT: Duration = Duration::from_secs(600);
/// Value size of the generated redo.
const VALUE_BYTES: usize = 32 << 10;

/// What to run.
#[derive(Debug, Clone)]
pub struct ShipConfig {
    pub binary: PathBuf,
    pub dir: PathBuf,
    pub rtts_ms: Vec<u32>,
    pub connections: Vec<u32>,
    /// `none`, `lz4`, `zstd`.
    pub compressions: Vec<String>,
    /// Size of the log shipped.
    pub log_bytes: u64,
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShipCase {
    pub rtt_ms: u32,
    /// RTT as TCP saw it across the link for this case.
    pub measured_rtt_ms: f64,
    pub connections: u32,
    pub compression: String,
    /// From the primary being ready to the standby holding every log.
    pub seconds: f64,
    /// The same bytes at the link's measured line rate.
    pub line_rate_seconds: f64,
    /// The same (uncompressed) bytes over as many plain TCP streams at this RTT, with the same
    /// send buffers, measured in the same run: what TCP alone needs on this link (its
    /// handshakes and slow start included).
    #[serde(default)]
    pub tcp_seconds: Option<f64>,
    /// Redo shipped (every closed log of the primary).
    pub mb_shipped: f64,
    /// What the primary counted as sent (after compression).
    pub mb_on_wire: f64,
    /// Archive connections the primary opened.
    pub archive_connections: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShipReport {
    pub log_bytes: u64,
    pub link_rate_bits_per_s: u64,
    /// Payload throughput of one TCP stream across the link at RTT 0, this run.
    pub line_rate_mbit_s: f64,
    pub cases: Vec<ShipCase>,
    pub failures: Vec<String>,
    pub method: String,
    pub reference: String,
}

/// Runs every case.
pub fn run(config: &ShipConfig, mut progress: impl FnMut(&str)) -> anyhow::Result<ShipReport> {
    if let Some(reason) = linkemu::unavailable_reason() {
        anyhow::bail!("bench ship needs linkemu: {reason}");
    }
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-ship-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("creating a directory in {}", config.dir.display()))?;
    progress("linkemu: link up, 1 Gbit/s");
    let link = linkemu::Link::up(linkemu::LinkConfig {
        rtt: Duration::ZERO,
        rate_bits_per_s: Some(LINK_RATE_BITS_PER_S),
        ..linkemu::LinkConfig::default()
    })
    .context("bringing the link up")?;
    let network = Network::Link(Box::new(link));
    progress("measuring the line rate");
    let line_bytes_per_s = line_rate(&network, config.log_bytes.min(256 << 20))?;
    progress(&format!("line rate {:.0} Mbit/s", line_bytes_per_s * 8.0 / 1e6));
    let bench = Bench { config, network: &network, work: work.path() };
    progress(&format!("writing a log of {} MiB on the primary", config.log_bytes >> 20));
    bench.generate()?;
    let mut cases = Vec::new();
    let mut failures = Vec::new();
    for &rtt_ms in &config.rtts_ms {
        network.set_rtt(rtt_ms)?;
        let measured_rtt_ms = network.measure_rtt_ms()?;
        for &connections in &config.connections {
            let first = cases.len();
            for compression in &config.compressions {
                crate::interrupt::check()?;
                let name = format!("rtt {rtt_ms} ms, {connections} connection(s), {compression}");
                progress(&format!("{name}: shipping"));
                match bench.case(rtt_ms, connections, compression) {
                    Ok((seconds, shipped, wire, archive_connections)) => {
                        let case = ShipCase {
                            rtt_ms,
                            measured_rtt_ms,
                            connections,
                            compression: compression.clone(),
                            seconds,
                            line_rate_seconds: shipped as f64 / line_bytes_per_s,
                            tcp_seconds: None,
                            mb_shipped: shipped as f64 / 1e6,
                            mb_on_wire: wire as f64 / 1e6,
                            archive_connections,
                        };
                        progress(&format!("{name}: {seconds:.2} s"));
                        cases.push(case);
                    }
                    Err(error) => {
                        progress(&format!("{name}: FAILED: {error:#}"));
                        failures.push(format!("{name}: {error:#}"));
                    }
                }
            }
            // TCP alone, with the same bytes, streams and send buffers (`auto`: 3 × BDP).
            if let Some(shipped) = cases.get(first).map(|case| (case.mb_shipped * 1e6) as u64) {
                let name = format!("rtt {rtt_ms} ms, {connections} plain TCP stream(s)");
                progress(&format!("{name}: sending the same bytes"));
                let send_buffer =
                    ((3.0 * LINK_RATE_BITS_PER_S as f64 / 8.0 * measured_rtt_ms / 1e3) as u64)
                        .max(64 << 10);
                match tcp_transfer(&network, shipped, connections, Some(send_buffer)) {
                    Ok(seconds) => {
                        progress(&format!("{name}: {seconds:.2} s"));
                        for case in &mut cases[first..] {
                            case.tcp_seconds = Some(seconds);
                        }
                    }
                    Err(error) => failures.push(format!("{name}: {error:#}")),
                }
            }
        }
    }
    Ok(ShipReport {
        log_bytes: config.log_bytes,
        link_rate_bits_per_s: LINK_RATE_BITS_PER_S,
        line_rate_mbit_s: line_bytes_per_s * 8.0 / 1e6,
        cases,
        failures,
        method: "one log of log_bytes written on a primary (side A of a linkemu link at 1 Gbit/s); per case a new empty standby on side B and the primary restarted with the destination deferred (send_buffer = auto); seconds from enabling it at run time (POST /settings/destinations/standby, state = enable) to the standby holding every closed log; 1 connection: the control connection's catch-up, more: archive connections (max_connections); tcp_seconds: the same bytes over as many plain TCP streams at that RTT with the same send buffers (3 x BDP) and 4 MiB pieces taken as each socket drains, from the first connect to the last byte read".into(),
        reference: "1 GB on a gigabit link: 52 s at 0 ms RTT, 102 s at 100 ms (10 MB sends); line rate 8.6 s; 5 connections cut 80 s to 36.8 s".into(),
    })
}

struct Bench<'a> {
    config: &'a ShipConfig,
    network: &'a Network,
    work: &'a Path,
}

impl Bench<'_> {
    fn log_file_size(&self) -> u64 {
        // Room for the log and its headers, in whole MiB.
        (self.config.log_bytes + (4 << 20)).div_ceil(1 << 20) << 20
    }

    fn primary_text(&self, standby: &str, connections: u32, compression: &str) -> String {
        format!(
            "# Written by `redoguard bench ship`.\n[redo]\nlog_file_size = {}\ngroups = 2\n\
             [replication]\nrole = \"primary\"\nprotection_mode = \"maximum_performance\"\n\
             [[replication.destinations]]\nname = \"standby\"\naddress = \"{standby}\"\n\
             transport = \"async\"\nnet_timeout = \"30s\"\nreopen = \"200ms\"\n\
             send_buffer = \"auto\"\nbandwidth = \"1gbit\"\nmax_send = \"4MiB\"\n\
             max_connections = {connections}\ncompression = \"{compression}\"\n\
             state = \"defer\"\n",
            self.log_file_size()
        )
    }

    fn server(
        &self,
        side: Side,
        name: &str,
        text: &str,
        data: &Path,
    ) -> anyhow::Result<ServerProcess> {
        let config = self.work.join(format!("{name}.toml"));
        std::fs::write(&config, text)?;
        std::fs::create_dir_all(data)?;
        let (config, data) = (config.display().to_string(), data.display().to_string());
        ServerProcess::start_command(
            self.network.command(side, &self.config.binary),
            &["--config", &config, "--data-dir", &data],
            &self.work.join(format!("{name}.log")),
        )
        .with_context(|| format!("starting the {name}"))
    }

    fn primary_data(&self) -> PathBuf {
        self.work.join("primary")
    }

    /// Writes about `log_bytes` of redo into log 1 and switches. The destination points at a
    /// port nobody listens on, so that retention keeps every archived log for the standbys.
    fn generate(&self) -> anyhow::Result<()> {
        let nobody = format!("{}:9", self.network.address(Side::B));
        let text = self.primary_text(&nobody, 1, "none");
        let mut primary = self.server(Side::A, "primary", &text, &self.primary_data())?;
        let resp = primary.resp_addr;
        let admin = primary.admin_addr;
        let values = self.config.log_bytes as usize / VALUE_BYTES;
        self.network.run_in(Side::A, move || -> anyhow::Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async move {
                let mut client = crate::client::Client::connect(resp).await?;
                let mut rng = StdRng::seed_from_u64(12);
                let words: Vec<String> = (0..512)
                    .map(|_| {
                        (0..rng.random_range(3..9))
                            .map(|_| rng.random_range(b'a'..=b'z') as char)
                            .collect()
                    })
                    .collect();
                for batch in 0..values.div_ceil(16) {
                    let mut commands: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                    for index in 0..16 {
                        let mut value = Vec::with_capacity(VALUE_BYTES);
                        while value.len() < VALUE_BYTES {
                            value.extend_from_slice(
                                words[rng.random_range(0..words.len())].as_bytes(),
                            );
                            value.push(b' ');
                            if rng.random_bool(0.2) {
                                value.extend_from_slice(&rng.random::<u64>().to_le_bytes());
                            }
                        }
                        value.truncate(VALUE_BYTES);
                        commands.push((format!("k:{batch}:{index}").into_bytes(), value));
                    }
                    let args: Vec<[&[u8]; 3]> = commands
                        .iter()
                        .map(|(key, value)| [b"SET".as_slice(), key.as_slice(), value.as_slice()])
                        .collect();
                    let refs: Vec<&[&[u8]]> =
                        args.iter().map(|command| command.as_slice()).collect();
                    client.pipeline(&refs).await?;
                }
                anyhow::Ok(())
            })?;
            admin::http_post(&admin.to_string(), "/logswitch", Duration::from_secs(60))?;
            Ok(())
        })??;
        primary.stop().context("stopping the primary after writing the log")
    }

    /// One case: seconds, bytes shipped, bytes on the wire, archive connections.
    fn case(
        &self,
        rtt_ms: u32,
        connections: u32,
        compression: &str,
    ) -> anyhow::Result<(f64, u64, u64, u32)> {
        let dir = self.work.join(format!("standby-{rtt_ms}-{connections}-{compression}"));
        let listen = self.network.address(Side::B);
        let standby_text = format!(
            "# Written by `redoguard bench ship`.\n[redo]\nlog_file_size = {}\ngroups = 3\n\
             [replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"{listen}:0\"\n{}",
            self.log_file_size(),
            crate::bench_batch::INSECURE
        );
        let mut standby = self.server(Side::B, "standby", &standby_text, &dir)?;
        let redo = standby.redo_addr.context("the standby names no redo port")?;
        let text = self.primary_text(&redo.to_string(), connections, compression);
        // The destination starts deferred (`state = "defer"`): the clock starts when it is
        // enabled at run time, as the reference's gap is shipped once transport is enabled.
        // The enable is kept in the primary's settings.json: removed before and after.
        let settings = self.primary_data().join("settings.json");
        let _ = std::fs::remove_file(&settings);
        let mut primary = match self.server(Side::A, "primary", &text, &self.primary_data()) {
            Ok(primary) => primary,
            Err(error) => {
                let _ = standby.stop();
                return Err(error);
            }
        };
        let started = Instant::now();
        let result = (|| -> anyhow::Result<(f64, u64, u64, u32)> {
            self.network.set_destination_state(primary.admin_addr, "standby", "enable")?;
            let primary_status = self.status(Side::A, primary.admin_addr)?;
            let newest_closed = primary_status
                .archive
                .recent
                .last()
                .map(|log| log.seq)
                .context("the primary has no archived log")?;
            let shipped = primary_status.archive.archived_bytes;
            let mut archive_connections = 0;
            loop {
                crate::interrupt::check()?;
                let standby_status = self.status(Side::B, standby.admin_addr)?;
                let receiver = standby_status.replication.standby.context("a standby's status")?;
                if receiver.complete_through_seq >= newest_closed {
                    break;
                }
                anyhow::ensure!(
                    started.elapsed() < CASE_TIMEOUT,
                    "not shipped within {CASE_TIMEOUT:?}"
                );
                if let Some(destination) =
                    self.status(Side::A, primary.admin_addr)?.replication.destinations.first()
                {
                    archive_connections = archive_connections.max(destination.archive_connections);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let seconds = started.elapsed().as_secs_f64();
            let status = self.status(Side::A, primary.admin_addr)?;
            let destination = status.replication.destinations.first().context("a destination")?;
            // Measured by the primary: the frames handed to the destination's connections.
            let wire = destination.wire_bytes_sent;
            Ok((seconds, shipped, wire, archive_connections))
        })();
        let stopped = primary.stop().context("stopping the primary");
        let _ = std::fs::remove_file(&settings);
        let standby_stopped = standby.stop().context("stopping the standby");
        let _ = std::fs::remove_dir_all(&dir);
        let result = result?;
        stopped?;
        standby_stopped?;
        Ok(result)
    }

    fn status(&self, side: Side, admin: SocketAddr) -> anyhow::Result<admin::ServerStatus> {
        let body = self.network.run_in(side, move || {
            admin::http_get(&admin.to_string(), "/status", Duration::from_secs(10))
        })??;
        serde_json::from_str(&body).context("parsing a server's status")
    }
}

/// Payload bytes per second of one TCP stream from side A to side B, sending `bytes`.
fn line_rate(network: &Network, bytes: u64) -> anyhow::Result<f64> {
    Ok(bytes as f64 / tcp_transfer(network, bytes, 1, None)?)
}

/// How many bytes of a plain TCP transfer a stream takes at a time (`max_send` of the cases).
const TCP_PIECE: usize = 4 << 20;

/// Seconds to move `bytes` from side A to side B over `streams` plain TCP connections made for
/// it (their handshakes counted) until B has read the last byte. Each stream gets
/// `send_buffer` (none: the kernel's) and takes the next 4 MiB from a shared count as its
/// socket drains (`TCP_NOTSENT_LOWAT` of 4 MiB, as archive connections do): what TCP itself
/// needs to move the same bytes over this link at its current RTT, with no protocol above it.
fn tcp_transfer(
    network: &Network,
    bytes: u64,
    streams: u32,
    send_buffer: Option<u64>,
) -> anyhow::Result<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let address_b = network.address(Side::B);
    let listener = network.run_in(Side::B, move || TcpListener::bind((address_b, 0)))??;
    let target = listener.local_addr()?;
    let received = std::sync::Arc::new(AtomicU64::new(0));
    let sink = {
        let received = received.clone();
        std::thread::spawn(move || -> std::io::Result<Instant> {
            let mut readers = Vec::new();
            for _ in 0..streams {
                let (mut stream, _) = listener.accept()?;
                stream.set_read_timeout(Some(Duration::from_secs(60)))?;
                let received = received.clone();
                readers.push(std::thread::spawn(move || -> std::io::Result<Option<Instant>> {
                    let mut buffer = vec![0u8; 1 << 20];
                    let mut last = None;
                    loop {
                        let read = stream.read(&mut buffer)?;
                        if read == 0 {
                            return Ok(last);
                        }
                        received.fetch_add(read as u64, Ordering::Relaxed);
                        last = Some(Instant::now());
                    }
                }));
            }
            let mut ended = None;
            for reader in readers {
                let last =
                    reader.join().map_err(|_| std::io::Error::other("a reader panicked"))??;
                ended = ended.max(last);
            }
            ended.ok_or_else(|| std::io::Error::other("nothing was received"))
        })
    };
    let started = Instant::now();
    network.run_in(Side::A, move || -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let left = AtomicU64::new(bytes);
        let mut connections = Vec::new();
        for _ in 0..streams {
            connections.push(TcpStream::connect_timeout(&target, Duration::from_secs(10))?);
        }
        std::thread::scope(|scope| {
            let senders: Vec<_> = connections
                .into_iter()
                .map(|mut stream| {
                    let left = &left;
                    scope.spawn(move || -> std::io::Result<()> {
                        let fd = stream.as_raw_fd();
                        if let Some(size) = send_buffer {
                            set_int_option(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, size)?;
                        }
                        if streams > 1 {
                            set_int_option(
                                fd,
                                libc::IPPROTO_TCP,
                                libc::TCP_NOTSENT_LOWAT,
                                TCP_PIECE as u64,
                            )?;
                        }
                        let chunk = vec![0x5au8; TCP_PIECE];
                        loop {
                            let claimed = left
                                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                                    (left > 0).then(|| left - left.min(TCP_PIECE as u64))
                                })
                                .map(|was| was.min(TCP_PIECE as u64) as usize)
                                .unwrap_or(0);
                            if claimed == 0 {
                                return stream.shutdown(std::net::Shutdown::Write);
                            }
                            stream.write_all(&chunk[..claimed])?;
                        }
                    })
                })
                .collect();
            senders.into_iter().try_for_each(|sender| {
                sender.join().map_err(|_| std::io::Error::other("a sender panicked"))?
            })
        })
    })??;
    let ended = sink.join().map_err(|_| anyhow::anyhow!("the TCP sink panicked"))??;
    let got = received.load(Ordering::Relaxed);
    anyhow::ensure!(got == bytes, "the TCP streams delivered {got} of {bytes} bytes");
    Ok(ended.duration_since(started).as_secs_f64())
}

/// `setsockopt` of one int.
fn set_int_option(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: u64,
) -> std::io::Result<()> {
    let value = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
    // SAFETY: the option is one int, read from a pointer that outlives the call.
    let result = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// The table a person reads.
pub fn render(report: &ShipReport) -> String {
    let mut text = format!(
        "bench ship: a log of {} MiB shipped as a gap over linkemu at 1 Gbit/s (line rate measured: {:.0} Mbit/s)\n\
         {:>6} {:>8} {:>5} {:>11} {:>9} {:>10} {:>8} {:>7} {:>6} {:>9} {:>9}\n",
        report.log_bytes >> 20,
        report.line_rate_mbit_s,
        "rtt_ms",
        "rtt_seen",
        "conns",
        "compression",
        "seconds",
        "line_rate",
        "x_line",
        "tcp_s",
        "x_tcp",
        "MB",
        "MB_wire"
    );
    for case in &report.cases {
        text.push_str(&format!(
            "{:>6} {:>8.1} {:>5} {:>11} {:>9.2} {:>10.2} {:>8.2} {:>7} {:>6} {:>9.1} {:>9.1}\n",
            case.rtt_ms,
            case.measured_rtt_ms,
            case.connections,
            case.compression,
            case.seconds,
            case.line_rate_seconds,
            case.seconds / case.line_rate_seconds,
            case.tcp_seconds.map_or("-".into(), |tcp| format!("{tcp:.2}")),
            case.tcp_seconds.map_or("-".into(), |tcp| format!("{:.2}", case.seconds / tcp)),
            case.mb_shipped,
            case.mb_on_wire
        ));
    }
    for failure in &report.failures {
        text.push_str(&format!("FAILED {failure}\n"));
    }
    text.push_str(&format!("reference: {}\n", report.reference));
    text.push_str(
        "tcp_s: the same bytes over as many plain TCP streams at that RTT (same send buffers), \
         this run: TCP's own handshakes and slow start, with no protocol above it\n",
    );
    for (label, compressed) in [("uncompressed", false), ("compressed", true)] {
        if let Some(best) = report
            .cases
            .iter()
            .filter(|case| case.rtt_ms == 100 && (case.compression != "none") == compressed)
            .map(|case| case.seconds / case.line_rate_seconds)
            .reduce(f64::min)
        {
            text.push_str(&format!(
                "target: <= 1.1 x line rate at 100 ms, {label}: best {best:.2} x ({})\n",
                if best <= 1.1 { "met" } else { "missed" }
            ));
        }
    }
    text
}

/// Seconds per case, grouped by RTT, one bar per (connections, compression); the line rate
/// dashed.
pub fn figure(report: &ShipReport) -> Figure {
    let mut series: Vec<(u32, String)> = Vec::new();
    for case in &report.cases {
        let key = (case.connections, case.compression.clone());
        if !series.contains(&key) {
            series.push(key);
        }
    }
    let mut rtts: Vec<u32> = report.cases.iter().map(|case| case.rtt_ms).collect();
    rtts.dedup();
    let groups = rtts
        .iter()
        .map(|&rtt| Group {
            label: format!("{rtt} ms"),
            values: series
                .iter()
                .map(|(connections, compression)| {
                    report
                        .cases
                        .iter()
                        .find(|case| {
                            case.rtt_ms == rtt
                                && case.connections == *connections
                                && &case.compression == compression
                        })
                        .map(|case| case.seconds)
                })
                .collect(),
        })
        .collect();
    let line = report.cases.iter().map(|case| case.line_rate_seconds).reduce(f64::max);
    Figure {
        title: format!("Shipping a {} MiB log as a gap at 1 Gbit/s", report.log_bytes >> 20),
        panels: vec![BarPanel {
            title: "seconds to ship, by RTT".into(),
            y_label: "seconds".into(),
            log_y: false,
            series: series
                .iter()
                .map(|(connections, compression)| format!("{connections} conn, {compression}"))
                .collect(),
            groups,
            limits: line
                .map(|line| Limit { label: "line rate".into(), value: LimitValue::All(line) })
                .into_iter()
                .collect(),
        }],
        lines: Vec::new(),
    }
}
