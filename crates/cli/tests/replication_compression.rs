//! Redo compression on the real binary. With `compression = "lz4"` for catch-up only
//! (`compression_for = "gap"`): live ASYNC redo goes uncompressed; a standby that was down
//! while the primary filled and archived several logs catches up through compressed frames.
//! With `compression = "zstd"` for everything (`"all"`): the live stream is compressed too.
//! Either way every log the primary archived is on the standby byte for byte, both hold the
//! same data, and both sides' counters (status JSON and /metrics) show the compression. With
//! `compression = "auto"`: nothing is compressed while sends do not block; a standby that
//! stops reading (SIGSTOP) makes the link the bottleneck and compression switches on, and off
//! again once the load is gone, each switch shown in the status with its reason.

mod common;
mod replication_support;

use std::net::SocketAddr;
use std::time::Duration;

use common::Watchdog;
use replication_support::{Pair, PairConfig, block_on, destination};
use transport::{CompressionCounts, Phase};

/// Pipelined SETs of distinct keys (`prefix:client:n`), `clients` × `per_client` of them.
fn load(addr: SocketAddr, prefix: &str, clients: usize, per_client: usize) {
    let threads: Vec<_> = (0..clients)
        .map(|number| {
            let prefix = format!("{prefix}:{number}");
            std::thread::spawn(move || {
                let mut connection = common::redis_connection(addr);
                for batch in 0..per_client / 100 {
                    let mut pipe = redis::pipe();
                    for index in 0..100 {
                        let key = format!("{prefix}:{}", batch * 100 + index);
                        pipe.cmd("SET").arg(&key).arg(replication_support::value_of(&key)).ignore();
                    }
                    pipe.query::<()>(&mut connection).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a client failed");
    }
}

/// The primary's compression counts for the standby (they add up over its connections).
/// Compression is agreed per connection: if the connection was lost and is being made again
/// (ASYNC under Maximum Performance reconnects on its own), this waits for it, and prints the
/// logs that say why it was lost.
fn primary_counts(pair: &Pair) -> CompressionCounts {
    let compression = || {
        let status = pair.primary().status();
        destination(&status).compression.clone().expect("compression in status")
    };
    let mut now = compression();
    if !now.active {
        println!("the connection to the standby was being made again:\n{}", pair.logs());
        common::poll_until(Duration::from_secs(30), || {
            now = compression();
            now.active
        });
    }
    assert!(now.active, "the standby takes compressed frames: {now:?}\n{}", pair.logs());
    now.counts
}

fn standby_counts(pair: &Pair) -> CompressionCounts {
    pair.standby().status().replication.standby.expect("a standby's status").decompression
}

/// Every log the primary archived is on the standby, the same bytes; the data is equal.
fn check_identical(pair: &Pair) -> usize {
    let archived = block_on(workload::demo::switch_and_wait_archived(
        pair.primary().admin_addr(),
        pair.standby().admin_addr(),
        &pair.primary_dir.join("archive"),
        &pair.standby_dir.join("archive"),
        Duration::from_secs(60),
    ))
    .unwrap_or_else(|error| panic!("{error:#}\n{}", pair.logs()));
    let differing =
        workload::demo::differing_archives(&archived, &pair.standby_dir.join("archive")).unwrap();
    assert!(differing.is_empty(), "archived logs differ on the standby: {differing:?}");
    block_on(workload::demo::wait_applied_all_received(
        pair.standby().admin_addr(),
        Duration::from_secs(30),
    ))
    .unwrap();
    let ours = block_on(workload::demo::all_data(pair.primary().resp_addr())).unwrap();
    let theirs = block_on(workload::demo::all_data(pair.standby().resp_addr())).unwrap();
    assert!(ours == theirs, "the standby's data differs from the primary's");
    archived.len()
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|line| line.starts_with(name) && !line.starts_with('#'))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

fn async_pair(destination_extra: &'static str) -> Pair {
    async_pair_with(destination_extra, "")
}

fn async_pair_with(destination_extra: &'static str, standby_extra: &'static str) -> Pair {
    let pair = Pair::start(PairConfig {
        protection_mode: "maximum_performance",
        transport: "async",
        log_file_size: "1MiB",
        groups: 3,
        destination_extra,
        standby_extra,
        ..PairConfig::default()
    });
    pair.wait_for_phase(Phase::Streaming, Duration::from_secs(30));
    pair
}

#[test]
fn lz4_compresses_catch_up_and_the_standby_archives_the_same_bytes() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the lz4 compression test");
    let mut pair = async_pair("compression = \"lz4\"\ncompression_for = \"gap\"\n");
    // Live ASYNC redo is not compressed under "gap".
    let before = primary_counts(&pair);
    load(pair.primary().resp_addr(), "live", 4, 500);
    block_on(workload::demo::wait_applied_all_received(
        pair.standby().admin_addr(),
        Duration::from_secs(30),
    ))
    .unwrap();
    let streamed = primary_counts(&pair);
    assert_eq!(
        streamed.frames, before.frames,
        "live redo went through the codec under compression_for = \"gap\""
    );

    // The standby is down while the primary writes several logs' worth (the online logs are
    // reused, so catch-up reads the archive too).
    pair.kill_standby();
    load(pair.primary().resp_addr(), "behind", 10, 1500);
    let switches = pair.primary().status().metrics.stat("redo log switches");
    assert!(switches >= 4, "only {switches} log switches: catch-up should span archived logs");
    pair.start_standby();
    pair.wait_for_phase(Phase::Streaming, Duration::from_secs(60));

    let archived = check_identical(&pair);
    let sent = primary_counts(&pair);
    let received = standby_counts(&pair);
    let shipped = sent.bytes_uncompressed - streamed.bytes_uncompressed;
    assert!(shipped > 4 << 20, "only {shipped} bytes of catch-up went through the codec");
    assert!(sent.ratio > 1.5, "lz4 on this redo: {sent:?}");
    assert!(sent.cpu_s > 0.0, "{sent:?}");
    assert!(
        received.frames > 0 && received.bytes_uncompressed > received.bytes_wire,
        "{received:?}"
    );
    assert!(received.cpu_s > 0.0, "{received:?}");
    let (code, metrics) = common::http_get(pair.primary().admin_addr(), "/metrics");
    assert_eq!(code, 200);
    let wire = metric(&metrics, "redoguard_destination_compression_wire_bytes_total");
    let raw = metric(&metrics, "redoguard_destination_compression_uncompressed_bytes_total");
    assert!(wire > 0.0 && raw > wire, "/metrics: {wire} on the wire of {raw}");
    let (_, metrics) = common::http_get(pair.standby().admin_addr(), "/metrics");
    assert!(metric(&metrics, "redoguard_standby_decompression_cpu_seconds_total") > 0.0);
    println!(
        "lz4 (gap): {archived} archived logs byte-identical; catch-up {shipped} bytes, ratio {:.2}, \
         {:.3} s CPU compressing, {:.3} s decompressing",
        sent.ratio, sent.cpu_s, received.cpu_s
    );
    pair.stop();
}

#[test]
fn zstd_compresses_the_live_stream_and_the_standby_archives_the_same_bytes() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the zstd compression test");
    let pair =
        async_pair("compression = \"zstd\"\ncompression_level = 3\ncompression_for = \"all\"\n");
    let before = primary_counts(&pair);
    load(pair.primary().resp_addr(), "live", 10, 1500);
    let archived = check_identical(&pair);
    let sent = primary_counts(&pair);
    let received = standby_counts(&pair);
    let streamed = sent.bytes_uncompressed - before.bytes_uncompressed;
    assert!(streamed > 2 << 20, "only {streamed} bytes of live redo went through the codec");
    assert!(sent.ratio > 2.0, "zstd on this redo: {sent:?}");
    assert!(
        received.frames > 0 && received.bytes_uncompressed > received.bytes_wire,
        "{received:?}"
    );
    let status = pair.primary().status();
    let json = serde_json::to_value(destination(&status)).unwrap();
    assert_eq!(json["compression"]["codec"], "zstd", "{json}");
    assert_eq!(json["compression"]["scope"], "all", "{json}");
    // What the link carried for the redo, in status and in /metrics.
    let (wire, redo) = (destination(&status).wire_bytes_sent, destination(&status).bytes_sent);
    assert!(wire > 0 && wire * 2 < redo, "{wire} bytes on the wire for {redo} bytes of redo");
    let (code, metrics) = common::http_get(pair.primary().admin_addr(), "/metrics");
    assert_eq!(code, 200);
    let wire_total = metric(&metrics, "redoguard_destination_wire_bytes_total{");
    let redo_total = metric(&metrics, "redoguard_destination_redo_bytes_total{");
    assert!(wire_total >= wire as f64 && redo_total >= redo as f64, "/metrics:\n{metrics}");
    assert!(wire_total < redo_total, "/metrics: {wire_total} on the wire for {redo_total}");
    println!(
        "zstd 3 (all): {archived} archived logs byte-identical; {streamed} bytes streamed, ratio \
         {:.2}, {:.3} s CPU compressing, {:.3} s decompressing",
        sent.ratio, sent.cpu_s, received.cpu_s
    );
    pair.stop();
}

#[test]
fn auto_compresses_only_while_the_link_is_the_bottleneck() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the auto compression test");
    // Socket buffers of a fixed 256 KiB on both ends: left to the kernel, loopback's grow to
    // tens of MiB (tcp_rmem), and a stopped standby's could take the whole load below
    // without a send ever blocking. Sized, the link is full a few MiB into it.
    let pair = async_pair_with(
        "compression = \"auto\"\ncompression_for = \"all\"\nsend_buffer = \"256KiB\"\n",
        "receive_buffer = \"256KiB\"\n",
    );
    let auto = |pair: &Pair| {
        let status = pair.primary().status();
        destination(&status).compression.clone().and_then(|compression| compression.auto)
    };
    // Loopback keeps up: sends do not block, nothing is compressed.
    load(pair.primary().resp_addr(), "easy", 2, 500);
    assert_eq!(primary_counts(&pair).frames, 0, "compressed on an idle link: {:?}", auto(&pair));
    assert!(auto(&pair).is_some_and(|state| state.starts_with("off")), "{:?}", auto(&pair));
    // The standby stops reading: the primary's sends block on a full socket.
    let standby_pid = pair.standby().pid();
    common::freeze(standby_pid);
    let loader = {
        let addr = pair.primary().resp_addr();
        std::thread::spawn(move || load(addr, "hard", 10, 2000))
    };
    std::thread::sleep(Duration::from_secs(3));
    common::thaw(standby_pid);
    loader.join().unwrap();
    // It switched on (and said so in its log and status): once the standby reads again the
    // link keeps up, so by the time the load has ended it may already have switched off.
    let switched_on = common::poll_until(Duration::from_secs(20), || {
        let logged = replication_support::log_since(&pair.primary_log(), 0);
        primary_counts(&pair).frames > 0
            && logged.contains("auto compression switched")
            && logged.contains("state=\"on: the link is the bottleneck")
    });
    assert!(switched_on, "never switched on: {:?}\n{}", auto(&pair), pair.logs());
    // The load is gone: small writes over a few seconds, each send quick: off again.
    let mut primary = pair.primary().redis();
    let switched_off = common::poll_until(Duration::from_secs(20), || {
        redis::cmd("SET").arg("tick").arg("1").query::<()>(&mut primary).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        auto(&pair)
            .is_some_and(|state| state.starts_with("off") && state.contains("not the bottleneck"))
    });
    assert!(switched_off, "never switched off: {:?}\n{}", auto(&pair), pair.logs());
    let archived = check_identical(&pair);
    let sent = primary_counts(&pair);
    println!(
        "auto: {archived} archived logs byte-identical; {} frames compressed, ratio {:.2}; now {:?}",
        sent.frames,
        sent.ratio,
        auto(&pair)
    );
    pair.stop();
}
