//! What a session held up by a log switch waits for: the switch's *phases* (waiting for the
//! next group's checkpoint, for its archiving, for a SYNC standby to acknowledge the switch,
//! or the switch's own work), and each session wait's share of them.
//!
//! The log writer marks the phase it is in (`SwitchClock::enter`); the clock keeps, per
//! phase, the time all switches have spent in it. A waiting session reads the clock when its
//! wait begins (`mark`) and when it ends (`record`): the difference, phase by phase, is how
//! long its wait overlapped each phase, and each phase it overlapped is counted as one wait of
//! that phase's event ("log file switch (checkpoint incomplete)", …) with that time. A wait
//! that overlapped no switch records nothing. The waits stay part of the session's "log file
//! sync" (or "log buffer space"): these events say why a part of it lasted.
//!
//! Reading costs a few atomic loads (a sequence lock: only the leader, which alone switches,
//! writes), so every committer that waits can afford it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::Instant;

use parking_lot::Mutex;
use stats::{Metrics, WaitEvent};

/// A phase of a log switch, each timed under its own wait event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwitchPhase {
    /// The switch's own work: the old log's closed header, the new log's open header.
    Completion = 0,
    /// Waiting for SYNC standbys: the writes in flight before the switch, and their
    /// acknowledgement of its headers (a standby switches its standby logs meanwhile).
    SyncStandby = 1,
    /// Waiting for the next group's log to be archived.
    Archiving = 2,
    /// Waiting for the checkpoint to pass the next group's log.
    Checkpoint = 3,
}

const PHASES: usize = 4;
/// `SwitchClock::phase` when no switch is in progress.
const IDLE: u64 = u64::MAX;

impl SwitchPhase {
    /// The wait event a session held up in this phase is counted under.
    pub(crate) fn event_name(self) -> &'static str {
        match self {
            SwitchPhase::Completion => stats::LOG_FILE_SWITCH_COMPLETION,
            SwitchPhase::SyncStandby => stats::LOG_FILE_SWITCH_SYNC_STANDBY,
            SwitchPhase::Archiving => stats::LOG_FILE_SWITCH_ARCHIVING,
            SwitchPhase::Checkpoint => stats::LOG_FILE_SWITCH_CHECKPOINT,
        }
    }

    const ALL: [SwitchPhase; PHASES] = [
        SwitchPhase::Completion,
        SwitchPhase::SyncStandby,
        SwitchPhase::Archiving,
        SwitchPhase::Checkpoint,
    ];
}

/// The time log switches spent in each phase, and the phase of the switch in progress.
pub(crate) struct SwitchClock {
    epoch: Instant,
    /// Sequence lock: odd while the phase changes.
    version: AtomicU64,
    /// The phase in progress (`SwitchPhase as u64`), or `IDLE`.
    phase: AtomicU64,
    /// When it began, in nanoseconds since `epoch`.
    phase_started_ns: AtomicU64,
    /// Nanoseconds spent in each phase by the phases that ended.
    spent_ns: [AtomicU64; PHASES],
    /// Serialises writers (only the leader switches; this makes it so even if that changed).
    writing: Mutex<()>,
    events: [Arc<WaitEvent>; PHASES],
}

/// Where the clock stood when a session's wait began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SwitchMark {
    spent_ns: [u64; PHASES],
}

impl SwitchClock {
    pub(crate) fn new(metrics: &Metrics) -> SwitchClock {
        SwitchClock {
            epoch: Instant::now(),
            version: AtomicU64::new(0),
            phase: AtomicU64::new(IDLE),
            phase_started_ns: AtomicU64::new(0),
            spent_ns: Default::default(),
            writing: Mutex::new(()),
            events: SwitchPhase::ALL.map(|phase| metrics.wait(phase.event_name())),
        }
    }

    fn since_epoch_ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Moves the switch in progress to `phase` (`None`: the switch ended). Returns the phase
    /// it was in.
    pub(crate) fn enter(&self, phase: Option<SwitchPhase>) -> Option<SwitchPhase> {
        let _writing = self.writing.lock();
        let now = self.since_epoch_ns(Instant::now());
        let previous = self.phase.load(Ordering::Relaxed);
        let target = phase.map_or(IDLE, |phase| phase as u64);
        if previous == target {
            return phase;
        }
        let version = self.version.load(Ordering::Relaxed);
        self.version.store(version + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        if previous != IDLE {
            let started = self.phase_started_ns.load(Ordering::Relaxed);
            self.spent_ns[previous as usize]
                .fetch_add(now.saturating_sub(started), Ordering::Relaxed);
        }
        self.phase.store(target, Ordering::Relaxed);
        self.phase_started_ns.store(now, Ordering::Relaxed);
        self.version.store(version + 2, Ordering::Release);
        SwitchPhase::ALL.get(previous as usize).copied()
    }

    /// The phase of the switch in progress, if one is.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> Option<SwitchPhase> {
        SwitchPhase::ALL.get(self.phase.load(Ordering::Acquire) as usize).copied()
    }

    /// Time spent in each phase up to `at`, the phase in progress included.
    fn reading(&self, at: Instant) -> [u64; PHASES] {
        let now = self.since_epoch_ns(at);
        loop {
            let version = self.version.load(Ordering::Acquire);
            if version % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let phase = self.phase.load(Ordering::Relaxed);
            let started = self.phase_started_ns.load(Ordering::Relaxed);
            let mut spent = [0; PHASES];
            for (into, from) in spent.iter_mut().zip(&self.spent_ns) {
                *into = from.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) != version {
                continue;
            }
            if let Some(current) = spent.get_mut(phase as usize) {
                *current += now.saturating_sub(started);
            }
            return spent;
        }
    }

    /// Where the clock stands as a session's wait begins at `at`.
    pub(crate) fn mark(&self, at: Instant) -> SwitchMark {
        SwitchMark { spent_ns: self.reading(at) }
    }

    /// Counts a session's wait from `mark` to `ended` under every phase of a switch it
    /// overlapped, with the time it overlapped it.
    pub(crate) fn record(&self, mark: &SwitchMark, ended: Instant) {
        let now = self.reading(ended);
        for ((event, before), after) in self.events.iter().zip(mark.spent_ns).zip(now) {
            let overlapped = after.saturating_sub(before);
            if overlapped > 0 {
                event.record(std::time::Duration::from_nanos(overlapped));
            }
        }
    }
}

/// Holds the switch in `phase` while it lives; then back to the phase it was in.
pub(crate) struct PhaseGuard<'a> {
    clock: &'a SwitchClock,
    previous: Option<SwitchPhase>,
}

impl<'a> PhaseGuard<'a> {
    pub(crate) fn enter(clock: &'a SwitchClock, phase: Option<SwitchPhase>) -> PhaseGuard<'a> {
        let previous = clock.enter(phase);
        PhaseGuard { clock, previous }
    }
}

impl Drop for PhaseGuard<'_> {
    fn drop(&mut self) {
        self.clock.enter(self.previous);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_wait_is_split_across_the_phases_it_overlapped() {
        let metrics = Metrics::new();
        let clock = SwitchClock::new(&metrics);
        let before = clock.mark(Instant::now());
        // A wait entirely outside any switch records nothing.
        clock.record(&before, Instant::now());
        assert!(metrics.snapshot().waits.is_empty());

        let mark = clock.mark(Instant::now());
        {
            let _switch = PhaseGuard::enter(&clock, Some(SwitchPhase::Completion));
            {
                let _archiving = PhaseGuard::enter(&clock, Some(SwitchPhase::Archiving));
                std::thread::sleep(Duration::from_millis(20));
                assert_eq!(clock.phase(), Some(SwitchPhase::Archiving));
            }
            assert_eq!(clock.phase(), Some(SwitchPhase::Completion));
        }
        assert_eq!(clock.phase(), None);
        // A wait across the whole switch is charged for each phase, with the time it took.
        clock.record(&mark, Instant::now());
        let snapshot = metrics.snapshot();
        let archiving = snapshot.wait(stats::LOG_FILE_SWITCH_ARCHIVING).expect("counted");
        assert_eq!(archiving.count, 1);
        assert!(archiving.total_us >= 20_000, "{archiving:?}");
        assert_eq!(snapshot.wait(stats::LOG_FILE_SWITCH_COMPLETION).map(|e| e.count), Some(1));
        assert!(snapshot.wait(stats::LOG_FILE_SWITCH_CHECKPOINT).is_none());
        assert!(snapshot.wait(stats::LOG_FILE_SWITCH_SYNC_STANDBY).is_none());
        // A wait that begins after the switch ended is not charged for it.
        let after = clock.mark(Instant::now());
        clock.record(&after, Instant::now());
        assert_eq!(metrics.snapshot().wait(stats::LOG_FILE_SWITCH_ARCHIVING).unwrap().count, 1);
    }
}
