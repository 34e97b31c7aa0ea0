//! Log lines a stranger can cause at will (a failed TLS handshake, a protocol error) are
//! limited, so that junk connections cannot fill the disk with them: 20 a window of 10 s per
//! kind of line, and the next line logged says how many like it were left out.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines of one kind logged per window.
const PER_WINDOW: u32 = 20;
const WINDOW: Duration = Duration::from_secs(10);

/// One kind of line (a `static` where it is logged).
pub struct LogLimit {
    state: Mutex<State>,
}

struct State {
    window_start: Option<Instant>,
    logged: u32,
    left_out: u64,
}

impl LogLimit {
    pub const fn new() -> LogLimit {
        LogLimit { state: Mutex::new(State { window_start: None, logged: 0, left_out: 0 }) }
    }

    /// Whether to log this line: `Some(n)` with the `n` lines like it left out since the last
    /// one logged, or `None` to leave it out.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.window_start.is_none_or(|start| now.duration_since(start) >= WINDOW) {
            state.window_start = Some(now);
            state.logged = 0;
        }
        if state.logged < PER_WINDOW {
            state.logged += 1;
            Some(std::mem::take(&mut state.left_out))
        } else {
            state.left_out += 1;
            None
        }
    }
}

impl Default for LogLimit {
    fn default() -> LogLimit {
        LogLimit::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_lines_a_window_then_the_next_says_how_many_were_left_out() {
        let limit = LogLimit::new();
        let start = Instant::now();
        let admitted: Vec<Option<u64>> = (0..25).map(|_| limit.admit_at(start)).collect();
        assert!(admitted[..20].iter().all(|admitted| *admitted == Some(0)));
        assert!(admitted[20..].iter().all(Option::is_none));
        assert_eq!(limit.admit_at(start + WINDOW), Some(5));
        assert_eq!(limit.admit_at(start + WINDOW), Some(0));
    }
}
