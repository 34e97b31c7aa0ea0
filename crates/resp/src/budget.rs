//! The bytes of incomplete requests that all connections of a server may buffer together: a
//! budget each connection takes from as its read buffer grows past a small free allowance,
//! and gives back as requests complete (or when it closes). A connection that would go past
//! the budget is refused with an error that says so, instead of the server running out of
//! memory because many clients each sent most of a large request and stopped.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes a connection may buffer without taking from the budget: one read's worth.
pub const FREE_BYTES: usize = 16 * 1024;

/// A server's shared budget of buffered request bytes.
#[derive(Debug)]
pub struct Budget {
    used: AtomicUsize,
    limit: usize,
}

impl Budget {
    pub fn new(limit: usize) -> Budget {
        Budget { used: AtomicUsize::new(0), limit }
    }

    /// Bytes taken now, by all connections.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes `bytes` more, unless that would pass the limit.
    pub(crate) fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    pub(crate) fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_up_to_the_limit_and_gives_back() {
        let budget = Budget::new(100);
        assert!(budget.take(60));
        assert!(!budget.take(41));
        assert!(budget.take(40));
        budget.give(100);
        assert_eq!(budget.used(), 0);
    }
}
