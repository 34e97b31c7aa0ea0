//! The log buffer: bounded in-memory rings ("strands") that sessions copy their redo into,
//! and that the log writer drains in SCN order.
//!
//! Each strand has its own lock, so sessions on different strands never contend for space.
//! An append locks its strand, waits for room ("log buffer space"), takes the next SCN from
//! one global counter, copies the payload in and unlocks: within a strand, SCN order is
//! memory order.
//!
//! The log writer takes a *horizon*: the value of the SCN counter when it starts. Every
//! record below it is complete, because its append held the strand lock from before it took
//! its SCN until after its copy, and the writer locks each strand after reading the horizon.
//! The taken records of all strands are then exactly the SCNs from the last write up to the
//! horizon, with no gap, and the writer lays them out in SCN order.
//!
//! *Architecture Invariant*: the bytes of a taken record are not overwritten until the writer
//! releases them (dropping its `Batch`), and an appender writes only bytes past the strand's
//! tail. That is the whole argument for the `unsafe` reads and writes of ring memory below:
//! at any moment, each byte is either free (only an appender holding the strand lock may
//! write it) or holds a record that nobody writes until it is released.

use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};
use stats::{Metrics, Statistic, WaitEvent};

use crate::error::{RedoError, Result};
use crate::format::RECORD_HEADER_LEN;
use crate::log_writer::SwitchClock;
use crate::types::Scn;

/// Buffer space charged per record beyond its payload (its header in the log).
const RECORD_OVERHEAD: usize = RECORD_HEADER_LEN;

/// A wake-up for the background log writer that coalesces: many notifications before it
/// wakes cost one futex wake.
#[derive(Debug, Default)]
pub struct Signal {
    requested: AtomicBool,
    lock: Mutex<()>,
    condvar: Condvar,
}

impl Signal {
    pub fn notify(&self) {
        if !self.requested.swap(true, Ordering::AcqRel) {
            let _guard = self.lock.lock();
            self.condvar.notify_one();
        }
    }

    /// Waits until notified or `timeout` passes; returns whether it was notified.
    pub fn wait(&self, timeout: std::time::Duration) -> bool {
        let mut guard = self.lock.lock();
        if !self.requested.load(Ordering::Acquire) {
            self.condvar.wait_for(&mut guard, timeout);
        }
        self.requested.swap(false, Ordering::AcqRel)
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    scn: Scn,
    /// Virtual position (ever increasing; the byte is at `start % capacity`).
    start: u64,
    len: u32,
}

#[derive(Debug)]
struct StrandState {
    /// Bytes before `head` are free.
    head: u64,
    /// Where the next record goes (after padding to the next lap if it would wrap).
    tail: u64,
    /// Records not yet taken by the writer, in SCN order.
    entries: VecDeque<Entry>,
    /// End of the last record taken and not yet released.
    taken_end: u64,
}

struct Strand {
    state: Mutex<StrandState>,
    space: Condvar,
    memory: Box<[UnsafeCell<u8>]>,
}

// SAFETY: ring memory is only accessed under the rules of the module's Architecture
// Invariant: disjoint byte ranges per thread, handed over under the strand lock.
unsafe impl Sync for Strand {}

impl Strand {
    fn capacity(&self) -> u64 {
        self.memory.len() as u64
    }

    fn ptr(&self, position: u64) -> *mut u8 {
        UnsafeCell::raw_get(&self.memory[(position % self.capacity()) as usize])
    }
}

thread_local! {
    static PREFERRED_STRAND: Cell<usize> = const { Cell::new(usize::MAX) };
}

static NEXT_STRAND: AtomicUsize = AtomicUsize::new(0);

/// The log buffer.
pub struct LogBuffer {
    strands: Box<[Strand]>,
    next_scn: AtomicU64,
    taking: AtomicBool,
    /// Set once the log writer will release no more space (it failed, or the engine stops):
    /// an append that would wait for space gives up instead of waiting for ever.
    closed: AtomicBool,
    writer: Arc<Signal>,
    space_wait: Arc<WaitEvent>,
    space_retries: Arc<Statistic>,
    /// Charges a wait for space to the log switch it overlapped, if any (`switch_waits`).
    switch_clock: Option<Arc<SwitchClock>>,
}

impl std::fmt::Debug for LogBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBuffer")
            .field("strands", &self.strands.len())
            .field("next_scn", &self.next_scn)
            .finish()
    }
}

/// A record taken by the writer.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    pub scn: Scn,
    strand: u32,
    start: u64,
    len: u32,
}

impl Taken {
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The records below a horizon, in SCN order. Their bytes stay valid (and their space
/// unavailable to appenders) until the batch is dropped.
pub struct Batch<'a> {
    buffer: &'a LogBuffer,
    pub records: Vec<Taken>,
}

impl Batch<'_> {
    /// The payload of a record of this batch.
    pub fn payload(&self, record: &Taken) -> &[u8] {
        let strand = &self.buffer.strands[record.strand as usize];
        // SAFETY: the record was taken into this batch, so its bytes are complete and nobody
        // writes them until the batch is dropped (module invariant); a record never wraps.
        unsafe { std::slice::from_raw_parts(strand.ptr(record.start), record.len as usize) }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for strand in self.buffer.strands.iter() {
            let mut state = strand.state.lock();
            if state.head < state.taken_end {
                state.head = state.taken_end;
                strand.space.notify_all();
            }
        }
        self.buffer.taking.store(false, Ordering::Release);
    }
}

impl LogBuffer {
    /// A buffer of `strands` rings of `strand_size` bytes; the first record appended gets
    /// `next_scn`. `writer` is notified when the buffer needs draining.
    pub fn new(
        strand_size: usize,
        strands: u32,
        next_scn: Scn,
        writer: Arc<Signal>,
        metrics: &Metrics,
    ) -> LogBuffer {
        assert!(strand_size > 0 && strands > 0);
        let strands = (0..strands)
            .map(|_| Strand {
                state: Mutex::new(StrandState {
                    head: 0,
                    tail: 0,
                    entries: VecDeque::new(),
                    taken_end: 0,
                }),
                space: Condvar::new(),
                memory: (0..strand_size).map(|_| UnsafeCell::new(0)).collect(),
            })
            .collect();
        LogBuffer {
            strands,
            next_scn: AtomicU64::new(next_scn.0),
            taking: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            writer,
            space_wait: metrics.wait("log buffer space"),
            space_retries: metrics.stat("redo buffer allocation retries"),
            switch_clock: None,
        }
    }

    /// From now on a wait for space that a log switch held up is also counted under the
    /// switch's reason (`log_writer::switch_waits`).
    pub(crate) fn charge_switches_to(&mut self, clock: Arc<SwitchClock>) {
        self.switch_clock = Some(clock);
    }

    /// The SCN the next append will get: every SCN below it has been handed out.
    pub fn next_scn(&self) -> Scn {
        Scn(self.next_scn.load(Ordering::Acquire))
    }

    /// The largest payload an append accepts.
    pub fn max_record_len(&self) -> usize {
        self.strands[0].memory.len() - RECORD_OVERHEAD
    }

    fn lock_strand(&self) -> (usize, MutexGuard<'_, StrandState>) {
        let count = self.strands.len();
        let preferred = PREFERRED_STRAND.with(|cell| {
            if cell.get() == usize::MAX {
                cell.set(NEXT_STRAND.fetch_add(1, Ordering::Relaxed));
            }
            cell.get()
        }) % count;
        for step in 0..count {
            let index = (preferred + step) % count;
            if let Some(guard) = self.strands[index].state.try_lock() {
                return (index, guard);
            }
        }
        (preferred, self.strands[preferred].state.lock())
    }

    /// Says that no more space will be released (the log writer failed, or the engine stops):
    /// every append waiting for space, and every later one that would wait, returns
    /// `RedoError::Shutdown` (the engine reports its failure instead).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        for strand in self.strands.iter() {
            // Under the lock: an appender that saw `closed` false is waiting by now.
            let _state = strand.state.lock();
            strand.space.notify_all();
        }
    }

    /// Whether `close` was called: no space will be released any more.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Copies `payload` into the buffer as the next record and returns its SCN. Waits while
    /// the strand is full (unless the buffer is closed: then `RedoError::Shutdown`).
    pub fn append(&self, payload: &[u8]) -> Result<Scn> {
        let len = payload.len();
        if len > self.max_record_len() {
            return Err(RedoError::RecordTooLarge { len, max: self.max_record_len() });
        }
        let (index, mut state) = self.lock_strand();
        let strand = &self.strands[index];
        let capacity = strand.capacity();
        // Each record is charged its header too, so that a full buffer bounds the size of a
        // log write (even of empty records).
        let len_u64 = (len + RECORD_OVERHEAD) as u64;
        let start = loop {
            if state.head == state.tail && !state.tail.is_multiple_of(capacity) {
                // Empty: start again at the ring's beginning, where any record up to the
                // capacity fits. Done whenever the strand is empty, not only when the record
                // would not fit: a lone committer (or one that follows each write) then copies
                // into memory still in the CPU's cache from its last record, rather than
                // walking the whole ring (cold memory for the copy here, the CRC and the
                // kernel's copy: most of the CPU time of 1 MiB records). Nothing is in use, so
                // any position is free.
                let lap_start = state.tail.next_multiple_of(capacity);
                state.head = lap_start;
                state.tail = lap_start;
            }
            let offset = state.tail % capacity;
            let start = if offset + len_u64 > capacity {
                state.tail + (capacity - offset)
            } else {
                state.tail
            };
            if start + len_u64 - state.head <= capacity {
                break start;
            }
            if self.closed.load(Ordering::Acquire) {
                // Nobody will release space (see `close`).
                return Err(RedoError::Shutdown);
            }
            self.space_retries.incr();
            self.writer.notify();
            let waited = Instant::now();
            let mark = self.switch_clock.as_ref().map(|clock| clock.mark(waited));
            strand.space.wait(&mut state);
            let ended = Instant::now();
            self.space_wait.record(ended - waited);
            if let (Some(clock), Some(mark)) = (&self.switch_clock, mark) {
                clock.record(&mark, ended);
            }
        };
        let scn = Scn(self.next_scn.fetch_add(1, Ordering::AcqRel));
        // SAFETY: [start, start + len) lies past the tail and within one lap of the head, so it
        // is free and no record, taken or not, uses it; we hold the strand lock, so no other
        // appender writes it. A record never wraps (start was moved to the next lap if needed).
        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), strand.ptr(start), len) };
        state.entries.push_back(Entry { scn, start, len: len as u32 });
        state.tail = start + len_u64;
        let used = state.tail - state.head;
        drop(state);
        // Like LGWR's "one third full" rule: keep the background writer draining so that
        // appenders rarely meet a full buffer.
        if used * 3 > capacity {
            self.writer.notify();
        }
        Ok(scn)
    }

    /// Takes every record with an SCN below `horizon` (which must not exceed `next_scn()`),
    /// in SCN order. Only one batch exists at a time (the log writer's).
    pub fn take(&self, horizon: Scn) -> Batch<'_> {
        self.begin_taking();
        assert!(horizon <= self.next_scn());
        let mut records = Vec::new();
        for (index, strand) in self.strands.iter().enumerate() {
            take_below(&mut strand.state.lock(), index, horizon, &mut records);
        }
        self.batch(records)
    }

    /// Numbers a record that is *not* copied into the buffer (a borrowed record: its bytes
    /// stay with its committer, who writes them itself) and takes every record before it, as
    /// one step: its SCN is the next one, and the batch holds exactly the SCNs below it.
    /// Does so only if `fits(pending)` accepts the bytes the buffer holds (each record charged
    /// its header, as in `append`); else changes nothing and returns `None`.
    ///
    /// Every strand is locked meanwhile, so no append takes an SCN between the count of the
    /// pending bytes and the numbering. The caller must be the log writer's leader and write
    /// the borrowed record with the batch (or fail the writer): no later batch has its SCN.
    pub fn take_numbering_borrowed(
        &self,
        fits: impl FnOnce(u64) -> bool,
    ) -> Option<(Scn, Batch<'_>)> {
        self.begin_taking();
        // In index order, as nobody else holds more than one strand lock at a time.
        let mut states: Vec<MutexGuard<'_, StrandState>> =
            self.strands.iter().map(|strand| strand.state.lock()).collect();
        // No batch is out (`taking`), so every used byte is a pending record's.
        let pending: u64 = states.iter().map(|state| state.tail - state.head).sum();
        if !fits(pending) {
            drop(states);
            self.taking.store(false, Ordering::Release);
            return None;
        }
        // Appends number their records under their strand lock: with all of them held, every
        // SCN below this one belongs to a complete record in some strand.
        let scn = Scn(self.next_scn.fetch_add(1, Ordering::AcqRel));
        let mut records = Vec::new();
        for (index, state) in states.iter_mut().enumerate() {
            take_below(state, index, scn, &mut records);
        }
        drop(states);
        Some((scn, self.batch(records)))
    }

    fn begin_taking(&self) {
        assert!(
            !self.taking.swap(true, Ordering::AcqRel),
            "only the log writer takes from the log buffer, one batch at a time"
        );
    }

    fn batch(&self, mut records: Vec<Taken>) -> Batch<'_> {
        if self.strands.len() > 1 {
            records.sort_unstable_by_key(|record| record.scn);
        }
        Batch { buffer: self, records }
    }

    /// Bytes of redo in the buffer not yet released.
    pub fn used_bytes(&self) -> u64 {
        self.strands
            .iter()
            .map(|strand| {
                let state = strand.state.lock();
                state.tail - state.head
            })
            .sum()
    }
}

/// Moves the records of one strand with an SCN below `horizon` from its pending entries into
/// `records` (the writer's batch).
fn take_below(state: &mut StrandState, strand: usize, horizon: Scn, records: &mut Vec<Taken>) {
    while let Some(entry) = state.entries.front().copied() {
        if entry.scn >= horizon {
            break;
        }
        state.entries.pop_front();
        state.taken_end = entry.start + u64::from(entry.len) + RECORD_OVERHEAD as u64;
        records.push(Taken {
            scn: entry.scn,
            strand: strand as u32,
            start: entry.start,
            len: entry.len,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::thread;

    use super::*;

    fn buffer(strand_size: usize, strands: u32) -> LogBuffer {
        LogBuffer::new(
            strand_size,
            strands,
            Scn(1),
            Arc::new(Signal::default()),
            &Metrics::default(),
        )
    }

    #[test]
    fn records_come_out_in_scn_order_with_their_bytes() {
        let buffer = buffer(1024, 3);
        let mut expected = BTreeMap::new();
        for index in 0..20u8 {
            let payload = vec![index; index as usize * 3];
            let scn = buffer.append(&payload).unwrap();
            expected.insert(scn, payload);
        }
        let batch = buffer.take(buffer.next_scn());
        let got: Vec<(Scn, Vec<u8>)> = batch
            .records
            .iter()
            .map(|record| (record.scn, batch.payload(record).to_vec()))
            .collect();
        assert_eq!(got, expected.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_horizon_takes_only_what_is_below_it() {
        let buffer = buffer(1024, 1);
        for _ in 0..5 {
            buffer.append(b"x").unwrap();
        }
        let batch = buffer.take(Scn(3));
        assert_eq!(batch.records.iter().map(|record| record.scn.0).collect::<Vec<_>>(), vec![1, 2]);
        drop(batch);
        let rest = buffer.take(buffer.next_scn());
        assert_eq!(
            rest.records.iter().map(|record| record.scn.0).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
    }

    #[test]
    fn too_large_is_refused_and_the_largest_fits_after_wrapping() {
        let buffer = buffer(1000, 1);
        assert!(matches!(
            buffer.append(&[0; 985]),
            Err(RedoError::RecordTooLarge { len: 985, max: 984 })
        ));
        buffer.append(&[1; 300]).unwrap();
        drop(buffer.take(buffer.next_scn()));
        // Empty again but mid-lap: the full-size record moves to the next lap.
        buffer.append(&[2; 984]).unwrap();
        let batch = buffer.take(buffer.next_scn());
        assert_eq!(batch.payload(&batch.records[0]), &[2; 984][..]);
    }

    #[test]
    fn a_borrowed_record_is_numbered_after_everything_taken_or_not_at_all() {
        let buffer = buffer(4096, 2);
        for _ in 0..3 {
            buffer.append(&[7; 100]).unwrap();
        }
        // Refused: nothing numbered, nothing taken.
        let mut offered = None;
        assert!(
            buffer
                .take_numbering_borrowed(|pending| {
                    offered = Some(pending);
                    false
                })
                .is_none()
        );
        assert_eq!(offered, Some(3 * (100 + RECORD_OVERHEAD as u64)));
        assert_eq!(buffer.next_scn(), Scn(4));
        let (scn, batch) = buffer.take_numbering_borrowed(|_| true).unwrap();
        assert_eq!(scn, Scn(4));
        assert_eq!(batch.records.iter().map(|record| record.scn.0).collect::<Vec<_>>(), [1, 2, 3]);
        drop(batch);
        // The next record follows it; the borrowed one is in no later batch.
        assert_eq!(buffer.append(b"after").unwrap(), Scn(5));
        let batch = buffer.take(buffer.next_scn());
        assert_eq!(batch.records.iter().map(|record| record.scn.0).collect::<Vec<_>>(), [5]);
        drop(batch);
        assert_eq!(buffer.used_bytes(), 0, "a borrowed record takes no space");
    }

    #[test]
    fn appenders_wait_for_space_until_the_writer_releases() {
        let buffer = Arc::new(buffer(4096, 1));
        let signal = buffer.writer.clone();
        for _ in 0..4 {
            buffer.append(&[0; 1000]).unwrap();
        }
        let appender = {
            let buffer = buffer.clone();
            thread::spawn(move || buffer.append(&[9; 1000]).unwrap())
        };
        // The appender cannot proceed until space is released; it wakes the writer.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while buffer.space_retries.get() == 0 {
            assert!(Instant::now() < deadline, "the appender never found the buffer full");
            thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            signal.wait(std::time::Duration::from_secs(10)),
            "a full buffer notifies the writer"
        );
        assert!(!appender.is_finished());
        drop(buffer.take(buffer.next_scn()));
        assert_eq!(appender.join().unwrap(), Scn(5));
        assert_eq!(buffer.space_wait.count(), 1);
    }

    #[test]
    fn closing_ends_the_wait_for_space() {
        let buffer = Arc::new(buffer(4096, 1));
        for _ in 0..4 {
            buffer.append(&[0; 1000]).unwrap();
        }
        let appender = {
            let buffer = buffer.clone();
            thread::spawn(move || buffer.append(&[9; 1000]))
        };
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while buffer.space_retries.get() == 0 {
            assert!(Instant::now() < deadline, "the appender never found the buffer full");
            thread::sleep(std::time::Duration::from_millis(1));
        }
        buffer.close();
        assert!(matches!(appender.join().unwrap(), Err(RedoError::Shutdown)));
        assert!(matches!(buffer.append(&[9; 1000]), Err(RedoError::Shutdown)));
        // What fits still fits: closing refuses only waiting.
        assert!(buffer.append(&[1; 10]).is_ok());
    }

    #[test]
    fn concurrent_appends_lose_and_reorder_nothing() {
        let buffer = Arc::new(buffer(64 << 10, 4));
        let writer_done = Arc::new(AtomicBool::new(false));
        let appenders: Vec<_> = (0..4u8)
            .map(|thread_index| {
                let buffer = buffer.clone();
                thread::spawn(move || {
                    (0..2000u32)
                        .map(|n| {
                            let mut payload = vec![thread_index; (n % 200) as usize];
                            payload.extend_from_slice(&n.to_le_bytes());
                            (buffer.append(&payload).unwrap(), payload)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        // A writer draining concurrently, as the log writer does.
        let drained = {
            let buffer = buffer.clone();
            let writer_done = writer_done.clone();
            thread::spawn(move || {
                let mut seen = Vec::new();
                loop {
                    let finished = writer_done.load(Ordering::Acquire);
                    let batch = buffer.take(buffer.next_scn());
                    for record in &batch.records {
                        seen.push((record.scn, batch.payload(record).to_vec()));
                    }
                    drop(batch);
                    if finished {
                        return seen;
                    }
                    thread::yield_now();
                }
            })
        };
        let mut appended: Vec<(Scn, Vec<u8>)> =
            appenders.into_iter().flat_map(|handle| handle.join().unwrap()).collect();
        writer_done.store(true, Ordering::Release);
        let seen = drained.join().unwrap();
        appended.sort();
        assert_eq!(seen.len(), 8000);
        assert_eq!(seen, appended, "the writer sees every record once, in SCN order, intact");
        assert!(seen.windows(2).all(|pair| pair[1].0 == pair[0].0.next()), "no SCN gap");
    }
}
