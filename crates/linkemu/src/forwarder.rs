//! The forwarder: per direction, one thread reads packets from the sending side's TUN device,
//! decides each packet's fate (loss, drop-tail queue, rate cap, delay, jitter), and one
//! thread writes it into the receiving side's TUN device when it is due.
//!
//! The bottleneck is modelled, not simulated with a timer per byte: `line_free_at` is when
//! the line will have finished sending everything accepted so far. A packet arriving at `now`
//! finds `(line_free_at - now) × rate` bytes queued ahead of it; it is dropped if it does not
//! fit in the queue, otherwise it leaves the line at `line_free_at + wire_bytes / rate` and
//! arrives one one-way delay (± jitter) later. Arrival times never decrease: no reordering.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::rng::SplitMix64;
use crate::tun::{self, Tun};

/// Bytes a direction's delay line may hold (packets accepted, not yet delivered); beyond it
/// packets are dropped and counted as `dropped_overflow`. 1 Gbit/s × 10 s RTT / 2 is 625 MB.
const DELAY_LINE_BYTES_MAX: u64 = 768 << 20;
/// Largest packet a TUN device hands over: 64 KiB of IP plus the virtio header.
const PACKET_BYTES_MAX: usize = 65_535 + tun::VNET_HDR_BYTES;
/// Packets a reader handles before it looks at the stop signal again.
const READ_BATCH_MAX: usize = 256;

/// Link parameters the forwarder reads per packet; changed while traffic flows.
#[derive(Debug)]
pub(crate) struct Params {
    pub(crate) one_way_ns: AtomicU64,
    pub(crate) jitter_ns: AtomicU64,
    /// Bits per second; 0 = no cap.
    pub(crate) rate_bits_per_s: AtomicU64,
    /// Loss probability in parts per 2^32.
    pub(crate) loss_per_2_32: AtomicU64,
    pub(crate) queue_bytes: AtomicU64,
    pub(crate) framing_bytes: AtomicU64,
    /// Both directions are cut.
    pub(crate) cut: AtomicBool,
}

/// Counters of one direction. Drops are split by cause.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    packets_in: AtomicU64,
    bytes_in: AtomicU64,
    packets_out: AtomicU64,
    bytes_out: AtomicU64,
    dropped_loss: AtomicU64,
    dropped_queue: AtomicU64,
    dropped_cut: AtomicU64,
    dropped_overflow: AtomicU64,
    write_errors: AtomicU64,
    late_ns_sum: AtomicU64,
    early_ns_sum: AtomicU64,
    reader_cpu_ns: AtomicU64,
    writer_cpu_ns: AtomicU64,
}

/// What one direction of the link has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DirectionStats {
    /// Packets read from the sending side (a TSO super-packet counts once).
    pub packets_in: u64,
    /// IP bytes read from the sending side.
    pub bytes_in: u64,
    /// Packets delivered to the receiving side.
    pub packets_out: u64,
    /// IP bytes delivered to the receiving side.
    pub bytes_out: u64,
    /// Dropped by the configured loss ratio.
    pub dropped_loss: u64,
    /// Dropped because the bottleneck queue was full (drop-tail).
    pub dropped_queue: u64,
    /// Dropped while the link was cut (including those in flight at the cut).
    pub dropped_cut: u64,
    /// Dropped because the delay line held its maximum (the forwarder's own limit).
    pub dropped_overflow: u64,
    /// Packets the receiving TUN device refused.
    pub write_errors: u64,
    /// Sum over delivered packets of how late (after its due time) each was written.
    pub late_ns_sum: u64,
    /// Sum over delivered packets of how early each was written (within the timer's
    /// expected lateness). (late − early) / packets_out is the mean delivery error.
    pub early_ns_sum: u64,
    /// CPU time the reading thread has used, in nanoseconds.
    pub reader_cpu_ns: u64,
    /// CPU time the writing thread has used, in nanoseconds.
    pub writer_cpu_ns: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> DirectionStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        DirectionStats {
            packets_in: get(&self.packets_in),
            bytes_in: get(&self.bytes_in),
            packets_out: get(&self.packets_out),
            bytes_out: get(&self.bytes_out),
            dropped_loss: get(&self.dropped_loss),
            dropped_queue: get(&self.dropped_queue),
            dropped_cut: get(&self.dropped_cut),
            dropped_overflow: get(&self.dropped_overflow),
            write_errors: get(&self.write_errors),
            late_ns_sum: get(&self.late_ns_sum),
            early_ns_sum: get(&self.early_ns_sum),
            reader_cpu_ns: get(&self.reader_cpu_ns),
            writer_cpu_ns: get(&self.writer_cpu_ns),
        }
    }
}

fn add(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

struct Packet {
    due: Instant,
    data: Vec<u8>,
}

#[derive(Default)]
struct DelayQueue {
    packets: VecDeque<Packet>,
    bytes: u64,
    stopped: bool,
}

/// Packets accepted and waiting for their arrival time, in arrival order.
#[derive(Default)]
struct DelayLine {
    queue: Mutex<DelayQueue>,
    changed: Condvar,
}

impl DelayLine {
    fn lock(&self) -> std::sync::MutexGuard<'_, DelayQueue> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One direction: a reader and a writer thread and what they share.
pub(crate) struct Direction {
    pub(crate) counters: Arc<Counters>,
    line: Arc<DelayLine>,
    reader: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
}

/// Wakes the readers when the link goes down.
pub(crate) struct StopSignal {
    fd: OwnedFd,
}

impl StopSignal {
    pub(crate) fn new() -> io::Result<StopSignal> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        Ok(StopSignal { fd: unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) } })
    }

    pub(crate) fn raise(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }
}

impl Direction {
    /// Starts forwarding from `from` to `to`. `seed` makes loss and jitter reproducible;
    /// `one_way_cut` cuts this direction alone (the other goes on).
    pub(crate) fn start(
        label: &'static str,
        from: Arc<Tun>,
        to: Arc<Tun>,
        params: Arc<Params>,
        one_way_cut: Arc<AtomicBool>,
        stop: Arc<StopSignal>,
        seed: u64,
    ) -> io::Result<Direction> {
        let counters = Arc::new(Counters::default());
        let line = Arc::new(DelayLine::default());
        let reader = {
            let (counters, line) = (counters.clone(), line.clone());
            std::thread::Builder::new().name(format!("linkemu-{label}-in")).spawn(move || {
                read_loop(&from, &params, &one_way_cut, &line, &counters, &stop, seed)
            })?
        };
        let writer = {
            let (counters, line) = (counters.clone(), line.clone());
            std::thread::Builder::new()
                .name(format!("linkemu-{label}-out"))
                .spawn(move || write_loop(&to, &line, &counters))?
        };
        Ok(Direction { counters, line, reader: Some(reader), writer: Some(writer) })
    }

    /// Drops every packet still in flight (the link was cut).
    pub(crate) fn drop_in_flight(&self) {
        let mut queue = self.line.lock();
        add(&self.counters.dropped_cut, queue.packets.len() as u64);
        queue.packets.clear();
        queue.bytes = 0;
        self.line.changed.notify_all();
    }

    /// Stops the writer and joins both threads; the caller has raised the stop signal.
    pub(crate) fn join(&mut self) {
        {
            let mut queue = self.line.lock();
            queue.stopped = true;
            self.line.changed.notify_all();
        }
        for handle in [self.reader.take(), self.writer.take()].into_iter().flatten() {
            if handle.join().is_err() {
                tracing::error!("a linkemu forwarder thread panicked");
            }
        }
    }
}

fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The state of the modelled bottleneck of one direction.
struct Bottleneck {
    line_free_at: Instant,
    last_due: Instant,
    rng: SplitMix64,
}

impl Bottleneck {
    /// The packet's arrival time at the far end, or why it is dropped (`one_way_cut`: this
    /// direction alone is cut).
    fn admit(
        &mut self,
        now: Instant,
        wire_bytes: u64,
        params: &Params,
        one_way_cut: bool,
    ) -> Result<Instant, Drop> {
        if one_way_cut || params.cut.load(Ordering::Relaxed) {
            return Err(Drop::Cut);
        }
        let loss = params.loss_per_2_32.load(Ordering::Relaxed);
        if loss > 0 && (self.rng.next_u64() >> 32) < loss {
            return Err(Drop::Loss);
        }
        let rate = params.rate_bits_per_s.load(Ordering::Relaxed);
        let departure = if rate == 0 {
            now
        } else {
            let backlog = self.line_free_at.saturating_duration_since(now);
            let queued_bytes = (backlog.as_secs_f64() * rate as f64 / 8.0) as u64;
            if queued_bytes + wire_bytes > params.queue_bytes.load(Ordering::Relaxed) {
                return Err(Drop::Queue);
            }
            let start = self.line_free_at.max(now);
            let transmit_ns = wire_bytes * 8 * 1_000_000_000 / rate;
            self.line_free_at = start + Duration::from_nanos(transmit_ns);
            self.line_free_at
        };
        let mut delay_ns = params.one_way_ns.load(Ordering::Relaxed) as i128;
        let jitter_ns = params.jitter_ns.load(Ordering::Relaxed);
        if jitter_ns > 0 {
            let offset = (self.rng.next_u64() % (2 * jitter_ns + 1)) as i128 - jitter_ns as i128;
            delay_ns = (delay_ns + offset).max(0);
        }
        let due = (departure + Duration::from_nanos(delay_ns as u64)).max(self.last_due);
        self.last_due = due;
        Ok(due)
    }
}

enum Drop {
    Cut,
    Loss,
    Queue,
}

fn read_loop(
    from: &Tun,
    params: &Params,
    one_way_cut: &AtomicBool,
    line: &DelayLine,
    counters: &Counters,
    stop: &StopSignal,
    seed: u64,
) {
    let now = Instant::now();
    let mut bottleneck =
        Bottleneck { line_free_at: now, last_due: now, rng: SplitMix64::new(seed) };
    let mut buffer = vec![0u8; PACKET_BYTES_MAX];
    loop {
        if !wait_readable(from.fd.as_raw_fd(), stop.fd.as_raw_fd()) {
            break;
        }
        for _ in 0..READ_BATCH_MAX {
            let length = match read(from.fd.as_raw_fd(), &mut buffer) {
                Ok(length) => length,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    tracing::error!(%error, "linkemu: reading from the TUN device failed");
                    return;
                }
            };
            let packet = &buffer[..length];
            let ip_bytes = length.saturating_sub(tun::VNET_HDR_BYTES) as u64;
            add(&counters.packets_in, 1);
            add(&counters.bytes_in, ip_bytes);
            let framing = params.framing_bytes.load(Ordering::Relaxed);
            let wire = tun::wire_bytes(packet, framing);
            let cut_here = one_way_cut.load(Ordering::Relaxed);
            match bottleneck.admit(Instant::now(), wire, params, cut_here) {
                Err(Drop::Cut) => add(&counters.dropped_cut, 1),
                Err(Drop::Loss) => add(&counters.dropped_loss, 1),
                Err(Drop::Queue) => add(&counters.dropped_queue, 1),
                Ok(due) => {
                    let mut queue = line.lock();
                    if queue.bytes + length as u64 > DELAY_LINE_BYTES_MAX {
                        add(&counters.dropped_overflow, 1);
                        continue;
                    }
                    let was_empty = queue.packets.is_empty();
                    queue.bytes += length as u64;
                    queue.packets.push_back(Packet { due, data: packet.to_vec() });
                    // The writer sleeps until the head is due; a packet behind the head is
                    // due no earlier, so only an empty line needs a wake-up.
                    if was_empty {
                        line.changed.notify_one();
                    }
                }
            }
        }
        counters.reader_cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
    }
    counters.reader_cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
}

/// Blocks until the device has a packet (true) or the stop signal is raised (false).
fn wait_readable(device: i32, stop: i32) -> bool {
    let mut fds = [
        libc::pollfd { fd: device, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: stop, events: libc::POLLIN, revents: 0 },
    ];
    loop {
        // SAFETY: polls two valid descriptors described by a live array.
        let result = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if result < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        if fds[1].revents != 0 {
            return false;
        }
        if fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            return false;
        }
        return true;
    }
}

fn read(fd: i32, buffer: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads at most buffer.len() bytes into a live buffer.
    let result = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
    if result < 0 { Err(io::Error::last_os_error()) } else { Ok(result as usize) }
}

fn write(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    // SAFETY: writes data.len() bytes from a live buffer.
    let result = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    if result < 0 { Err(io::Error::last_os_error()) } else { Ok(result as usize) }
}

/// Sleeps that end on time. In this VM a sleep overshoots by ~60 µs plus ~1 % of its
/// length, even with a timer slack of 1 ns: so long waits are cut short of the deadline and
/// finished with a short one, and the last, short wait aims early by the lateness measured
/// so far (a moving average), so that arrival times are unbiased.
#[derive(Debug)]
struct WakeTimer {
    lateness: Duration,
}

impl Default for WakeTimer {
    fn default() -> WakeTimer {
        WakeTimer { lateness: Duration::from_micros(50) }
    }
}

impl WakeTimer {
    /// Longest wait aimed at a deadline; longer ones stop this much short and re-aim.
    const FINAL_WAIT_MAX: Duration = Duration::from_millis(1);
    /// Bounds of the lateness estimate.
    const LATENESS_MAX: Duration = Duration::from_micros(500);

    /// How long to wait before `due`, or `None` if it is time (within the lateness).
    fn wait_for(&self, due: Instant, now: Instant) -> Option<Duration> {
        let remaining = due.saturating_duration_since(now);
        if remaining <= self.lateness {
            return None;
        }
        if remaining > 2 * Self::FINAL_WAIT_MAX {
            return Some(remaining - Self::FINAL_WAIT_MAX);
        }
        Some(remaining - self.lateness)
    }

    /// Learns from a timed-out wait that was meant to end at `target` and ended at `woke`.
    fn woke(&mut self, target: Instant, woke: Instant) {
        let late = woke.saturating_duration_since(target).min(Self::LATENESS_MAX);
        self.lateness = (self.lateness * 7 + late) / 8;
    }
}

fn write_loop(to: &Tun, line: &DelayLine, counters: &Counters) {
    // The default timer slack (50 µs) would make every sleep that much late; a delay of
    // 1 ms must not be 5 % off.
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    let mut due_now: Vec<Packet> = Vec::with_capacity(READ_BATCH_MAX);
    let mut timer = WakeTimer::default();
    let mut queue = line.lock();
    loop {
        if queue.stopped {
            break;
        }
        let Some(head) = queue.packets.front() else {
            queue = line.changed.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
            continue;
        };
        let now = Instant::now();
        if let Some(wait) = timer.wait_for(head.due, now) {
            let (guard, result) = line
                .changed
                .wait_timeout(queue, wait)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            queue = guard;
            // Only final, short waits teach: long ones carry their own proportional
            // overshoot, which the final wait absorbs.
            if result.timed_out() && wait <= 2 * WakeTimer::FINAL_WAIT_MAX {
                timer.woke(now + wait, Instant::now());
            }
            continue;
        }
        // Packets due within the timer's expected lateness go now: waiting would make them
        // later than that.
        let now = now + timer.lateness;
        while due_now.len() < READ_BATCH_MAX
            && queue.packets.front().is_some_and(|packet| packet.due <= now)
        {
            let packet = queue.packets.pop_front().expect("front exists");
            queue.bytes -= packet.data.len() as u64;
            due_now.push(packet);
        }
        drop(queue);
        for packet in due_now.drain(..) {
            let sent_at = Instant::now();
            if sent_at >= packet.due {
                add(&counters.late_ns_sum, (sent_at - packet.due).as_nanos() as u64);
            } else {
                add(&counters.early_ns_sum, (packet.due - sent_at).as_nanos() as u64);
            }
            match write(to.fd_borrowed(), &packet.data) {
                Ok(_) => {
                    add(&counters.packets_out, 1);
                    add(
                        &counters.bytes_out,
                        packet.data.len().saturating_sub(tun::VNET_HDR_BYTES) as u64,
                    );
                }
                Err(error) => {
                    // A full or vanished receiver behaves like a lost packet; the count tells.
                    add(&counters.write_errors, 1);
                    tracing::debug!(%error, "linkemu: TUN write refused");
                }
            }
        }
        counters.writer_cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
        queue = line.lock();
    }
    counters.writer_cpu_ns.store(thread_cpu_ns(), Ordering::Relaxed);
}

impl Tun {
    fn fd_borrowed(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(rate_bits_per_s: u64, one_way_ms: u64, jitter_ms: u64, queue_bytes: u64) -> Params {
        Params {
            one_way_ns: AtomicU64::new(one_way_ms * 1_000_000),
            jitter_ns: AtomicU64::new(jitter_ms * 1_000_000),
            rate_bits_per_s: AtomicU64::new(rate_bits_per_s),
            loss_per_2_32: AtomicU64::new(0),
            queue_bytes: AtomicU64::new(queue_bytes),
            framing_bytes: AtomicU64::new(0),
            cut: AtomicBool::new(false),
        }
    }

    fn bottleneck(now: Instant) -> Bottleneck {
        Bottleneck { line_free_at: now, last_due: now, rng: SplitMix64::new(1) }
    }

    #[test]
    fn packets_leave_at_line_rate_and_arrive_one_delay_later() {
        let start = Instant::now();
        let mut model = bottleneck(start);
        // 8 Mbit/s: 1000 bytes take 1 ms on the line.
        let params = params(8_000_000, 10, 0, 1 << 20);
        let first = model.admit(start, 1000, &params, false).ok().unwrap();
        let second = model.admit(start, 1000, &params, false).ok().unwrap();
        assert_eq!(first - start, Duration::from_millis(11));
        assert_eq!(second - start, Duration::from_millis(12));
    }

    #[test]
    fn a_full_queue_drops_the_newcomer() {
        let start = Instant::now();
        let mut model = bottleneck(start);
        let params = params(8_000_000, 0, 0, 3000);
        for _ in 0..3 {
            assert!(model.admit(start, 1000, &params, false).is_ok());
        }
        assert!(matches!(model.admit(start, 1000, &params, false), Err(Drop::Queue)));
        // Once the line has sent one packet, there is room again.
        assert!(model.admit(start + Duration::from_millis(1), 1000, &params, false).is_ok());
    }

    #[test]
    fn jitter_varies_the_delay_but_never_reorders() {
        let start = Instant::now();
        let mut model = bottleneck(start);
        let params = params(0, 10, 5, 1 << 20);
        let mut previous = start;
        let mut earliest = Duration::MAX;
        let mut latest = Duration::ZERO;
        for step in 0..1000u64 {
            // Packets 20 ms apart: farther than the jitter range, so each delay is free;
            // closer packets are held back by their predecessors (no overtaking).
            let now = start + Duration::from_millis(step * 20);
            let due = model.admit(now, 100, &params, false).ok().unwrap();
            assert!(due >= previous, "packet {step} overtakes its predecessor");
            previous = due;
            earliest = earliest.min(due - now);
            latest = latest.max(due - now);
        }
        assert!(earliest < Duration::from_millis(7), "shortest delay {earliest:?}");
        assert!(latest > Duration::from_millis(14), "longest delay {latest:?}");
        assert!(latest <= Duration::from_millis(15));
    }

    #[test]
    fn the_wake_timer_splits_long_waits_and_aims_early_by_its_lateness() {
        let now = Instant::now();
        let mut timer = WakeTimer::default();
        let lateness = timer.lateness;
        assert_eq!(
            timer.wait_for(now + Duration::from_millis(30), now),
            Some(Duration::from_millis(29))
        );
        assert_eq!(
            timer.wait_for(now + Duration::from_millis(2), now),
            Some(Duration::from_millis(2) - lateness)
        );
        assert_eq!(timer.wait_for(now + lateness, now), None);
        assert_eq!(timer.wait_for(now, now + Duration::from_secs(1)), None, "overdue");
        // Waking 130 µs late, again and again, teaches it to aim 130 µs early.
        for _ in 0..100 {
            timer.woke(now, now + Duration::from_micros(130));
        }
        assert!(timer.lateness.abs_diff(Duration::from_micros(130)) < Duration::from_micros(2));
        timer.woke(now, now + Duration::from_secs(5));
        assert!(timer.lateness <= WakeTimer::LATENESS_MAX);
    }

    #[test]
    fn a_cut_drops_everything() {
        let start = Instant::now();
        let mut model = bottleneck(start);
        let params = params(0, 0, 0, 1 << 20);
        params.cut.store(true, Ordering::Relaxed);
        assert!(matches!(model.admit(start, 100, &params, false), Err(Drop::Cut)));
    }

    #[test]
    fn a_one_way_cut_drops_this_direction_only() {
        let start = Instant::now();
        let mut model = bottleneck(start);
        let params = params(0, 0, 0, 1 << 20);
        assert!(matches!(model.admit(start, 100, &params, true), Err(Drop::Cut)));
        assert!(model.admit(start, 100, &params, false).is_ok());
    }
}
