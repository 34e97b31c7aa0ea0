//! Real-time apply's read-ahead: a thread of its own (`db-apply-read`) reads the standby's redo
//! in SCN order and decodes each record's change vectors, ahead of the apply thread, which then
//! only turns changes into rows. Data Guard's recovery has the same split (the coordinator reads
//! the redo, the appliers apply it).
//!
//! Why: on the batch workload (records of about 100 KiB, MSETs of 200 keys), reading the redo
//! (`RedoReader`: `pread`, each unit's CRC-32C, the record's buffer) and decoding its changes
//! took about a quarter of the apply thread (`docs/bench/README.md`, "bench apply"); on a
//! standby with a second CPU that quarter now runs beside apply instead of before it.
//!
//! What apply sees does not change: the records, in the same order, from the same reader, with
//! the same "caught up" points (where apply promotes what the primary confirmed). A record
//! read ahead is applied only after the apply thread has looked for a divergence once more, so
//! a record read after the receiver marked one is never applied before the drop (the mark is
//! set before the primary's new redo is written, and the record's message leaves the reader
//! after that redo was read). After a divergence, the apply thread stops this reader, drops
//! what it read ahead and starts a new one where apply goes on.
//!
//! Records go over in batches (as many as were read while apply was busy, up to
//! `BATCH_RECORDS_MAX` records or `BATCH_BYTES_MAX` bytes): handed over one by one, the small
//! records of an OLTP load (about 165 bytes, 100 000 a second) cost apply a wake-up each and
//! halved its rate. A batch is sent as soon as the reader has caught up, so real-time apply
//! never waits for one to fill.
//!
//! Bounded: at most `READ_AHEAD_BATCHES_MAX` batches wait for apply, and one is being filled.
//!
//! Apply hands each batch back once applied (`ReadAhead::spent`), and this thread frees it: the
//! changes were allocated here, and freed by apply they took the allocator's lock of this
//! thread's arena while this thread allocated under it (glibc's `free` of another thread's
//! memory): 135 of the apply thread's 150 sleeps in an OLTP apply (`perf record -e
//! sched:sched_switch`), 5–8 % of its time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, channel, sync_channel,
};
use std::thread::JoinHandle;
use std::time::Duration;

use redo::Scn;

use crate::apply::decode_record;
use crate::change::Change;
use crate::{DbError, Inner};

/// Batches read and decoded ahead of apply, at most: enough that apply never waits for the
/// read of the next record while records are there, few enough that the memory they hold stays
/// small (with `BATCH_BYTES_MAX`: 2 MiB and a record each).
pub(crate) const READ_AHEAD_BATCHES_MAX: usize = 4;

/// Records in one batch, at most.
pub(crate) const BATCH_RECORDS_MAX: usize = 1024;

/// Bytes of redo in one batch: once a batch holds this many, it is sent.
pub(crate) const BATCH_BYTES_MAX: u64 = 512 * 1024;

/// A record read and decoded: its SCN, its size as "redo size" counts it (with its header),
/// its changes.
pub(crate) struct Decoded {
    pub(crate) scn: Scn,
    pub(crate) size: u64,
    pub(crate) changes: Vec<Change>,
}

/// What the read-ahead hands to apply.
pub(crate) enum Ahead {
    /// Records, in SCN order, following the ones handed over before.
    Records(Vec<Decoded>),
    /// The reader has caught up with the redo durable here (apply promotes then).
    CaughtUp,
    /// A record that cannot be decoded: apply stops there.
    Failed { scn: Scn, error: DbError },
}

/// A running read-ahead thread and the records it has read.
pub(crate) struct ReadAhead {
    records: Option<Receiver<Ahead>>,
    /// Batches applied, back to the thread that allocated them, to be freed there.
    spent: Sender<Vec<Decoded>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// What `ReadAhead::next` got.
pub(crate) enum Next {
    Ahead(Ahead),
    /// Nothing within the wait.
    Idle,
    /// The reader thread ended (it panicked, or could not be started).
    Ended,
}

impl ReadAhead {
    /// Starts reading at `from`.
    pub(crate) fn start(inner: &Arc<Inner>, from: Scn) -> ReadAhead {
        let (sender, records) = sync_channel(READ_AHEAD_BATCHES_MAX);
        // Unbounded, but never long: the reader frees what is there before each record it
        // reads, and apply returns only batches the reader sent.
        let (spent, freed) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = Reader { inner: inner.clone(), stop: stop.clone(), sender, freed };
        let thread = std::thread::Builder::new()
            .name("db-apply-read".to_string())
            .spawn(move || reader.run(from))
            .map_err(|error| tracing::error!(%error, "apply: cannot start the redo read-ahead"))
            .ok();
        ReadAhead { records: Some(records), spent, stop, thread }
    }

    /// The next thing read, waiting at most `wait`.
    pub(crate) fn next(&self, wait: Duration) -> Next {
        let Some(records) = &self.records else { return Next::Ended };
        match records.recv_timeout(wait) {
            Ok(ahead) => Next::Ahead(ahead),
            Err(RecvTimeoutError::Timeout) => Next::Idle,
            Err(RecvTimeoutError::Disconnected) => Next::Ended,
        }
    }

    /// The next thing read if it is there already, without waiting.
    pub(crate) fn try_next(&self) -> Option<Next> {
        let Some(records) = &self.records else { return Some(Next::Ended) };
        match records.try_recv() {
            Ok(ahead) => Some(Next::Ahead(ahead)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Next::Ended),
        }
    }

    /// Hands a batch apply has applied back to the reader, which frees it.
    pub(crate) fn spent(&self, batch: Vec<Decoded>) {
        // Once the reader has ended, the batch is freed here (the error holds it).
        let _ = self.spent.send(batch);
    }

    /// Stops the thread and drops what it read ahead; returns once it has ended (within one of
    /// its waits for redo, 200 ms at most).
    pub(crate) fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Release);
        // A send blocked on a full queue fails once the receiving end is gone.
        drop(self.records.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("apply: the redo read-ahead panicked");
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.stop_now();
    }
}

struct Reader {
    inner: Arc<Inner>,
    stop: Arc<AtomicBool>,
    sender: SyncSender<Ahead>,
    freed: Receiver<Vec<Decoded>>,
}

impl Reader {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.inner.shut_down.load(Ordering::Acquire)
    }

    /// Sends to apply, waiting while the queue is full (apply is the bottleneck then); false
    /// once apply stopped listening (its end of the queue dropped, which also ends the wait).
    fn send(&self, ahead: Ahead) -> bool {
        self.sender.send(ahead).is_ok()
    }

    /// Sends what `batch` holds, if anything; false once apply stopped listening.
    fn flush(&self, batch: &mut Vec<Decoded>, bytes: &mut u64) -> bool {
        *bytes = 0;
        batch.is_empty() || self.send(Ahead::Records(std::mem::take(batch)))
    }

    fn run(self, from: Scn) {
        let redo = &self.inner.redo;
        let mut next = from;
        let mut reader = None;
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        while !self.stopped() {
            while let Ok(spent) = self.freed.try_recv() {
                drop(spent);
            }
            if reader.is_none() {
                match redo.read_from_scn(next) {
                    Ok(opened) => reader = Some(opened),
                    Err(error) => {
                        tracing::warn!(%error, %next, "apply: cannot read redo yet");
                        redo.wait_for_redo(redo.durable_addr(), Duration::from_millis(200));
                        continue;
                    }
                }
            }
            let seen = redo.durable_addr();
            match reader.as_mut().expect("opened").next_record() {
                Ok(Some(record)) => {
                    let scn = record.scn;
                    let size = (record.payload.len() + redo::format::RECORD_HEADER_LEN) as u64;
                    match decode_record(scn, record.payload) {
                        Ok(changes) => {
                            batch.push(Decoded { scn, size, changes });
                            batch_bytes += size;
                            if (batch.len() >= BATCH_RECORDS_MAX || batch_bytes >= BATCH_BYTES_MAX)
                                && !self.flush(&mut batch, &mut batch_bytes)
                            {
                                return;
                            }
                        }
                        Err(error) => {
                            // What came before it is applied; apply stops at this one.
                            if self.flush(&mut batch, &mut batch_bytes) {
                                self.send(Ahead::Failed { scn, error });
                            }
                            return;
                        }
                    }
                    next = scn.next();
                }
                Ok(None) => {
                    if !self.flush(&mut batch, &mut batch_bytes) || !self.send(Ahead::CaughtUp) {
                        return;
                    }
                    redo.wait_for_redo(seen, Duration::from_millis(100));
                }
                Err(error) => {
                    tracing::warn!(%error, %next, "apply: reading redo failed; retrying");
                    if !self.flush(&mut batch, &mut batch_bytes) {
                        return;
                    }
                    reader = None;
                    redo.wait_for_redo(seen, Duration::from_millis(200));
                }
            }
        }
    }
}
