//! The connections that have not authenticated yet, oldest first, each with the signal that
//! ends it. When all the places are taken, a newcomer ends the oldest rather than being
//! refused, so that idle strangers cannot keep clients out (the server's RESP ports, the
//! observer's Sentinel front).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct Waiting {
    queue: Mutex<VecDeque<(u64, Arc<Notify>)>>,
}

impl Waiting {
    /// Takes a place for connection `id` among at most `max`, ending the oldest waiting one
    /// if all are taken. Returns the signal that ends this one, and whether an older one was
    /// ended to make room.
    pub fn enter(&self, id: u64, max: usize) -> (Arc<Notify>, bool) {
        let evicted = Arc::new(Notify::new());
        let mut queue = self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut ended = false;
        if queue.len() >= max
            && let Some((_, oldest)) = queue.pop_front()
        {
            // (A permit: the oldest ends even if it is not waiting on its signal yet.)
            oldest.notify_one();
            ended = true;
        }
        queue.push_back((id, evicted.clone()));
        (evicted, ended)
    }

    /// Connection `id` authenticated or ended: its place is free.
    pub fn leave(&self, id: u64) {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|(waiting, _)| *waiting != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newcomer_ends_the_oldest_when_the_places_are_taken() {
        let waiting = Waiting::default();
        let (first, ended) = waiting.enter(1, 2);
        assert!(!ended);
        let (_second, ended) = waiting.enter(2, 2);
        assert!(!ended);
        waiting.leave(2);
        let (_third, ended) = waiting.enter(3, 2);
        assert!(!ended, "a place left is free again");
        let (_fourth, ended) = waiting.enter(4, 2);
        assert!(ended);
        // The oldest's signal holds a permit: it ends even if it waits only now.
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(first.notified());
    }
}
