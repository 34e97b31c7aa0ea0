//! What the standby sends on the control connection, read on a thread of its own: its status
//! (how far its logs are durable and applied), acknowledgements of whole logs, gap requests.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use proto::Message;
use redo::{LogSeq, RedoAddr, Scn};

use crate::conn::{Conn, ConnError};
use crate::primary::{Destination, Inner};

impl Inner {
    /// What a standby said about itself: how far its logs are durable and applied.
    pub(super) fn note_standby_status(
        &self,
        destination: &Destination,
        status: &proto::StandbyStatus,
    ) {
        let mut state = destination.state.lock();
        let durable = RedoAddr {
            seq: LogSeq(status.position.current_seq),
            offset: status.position.current_offset,
        };
        destination.acknowledge(&mut state, durable);
        state.applied_scn = Scn(status.position.applied_scn);
        state.apply_lag_us = status.apply_lag_us;
        state.last_heard = Some(Instant::now());
        drop(state);
        let _progress = self.progress.lock();
        self.progressed.notify_all();
    }

    /// Reads what the standby sends on the control connection.
    pub(super) fn incoming(
        &self,
        destination: &Destination,
        conn: &mut Conn,
        broken: &Mutex<Option<String>>,
    ) {
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            match conn.recv(Some(Duration::from_millis(500))) {
                Ok(Message::StandbyStatus(status)) => {
                    self.note_standby_status(destination, &status)
                }
                Ok(Message::ArchiveAck(ack)) => {
                    let mut state = destination.state.lock();
                    state.last_heard = Some(Instant::now());
                    if ack.complete {
                        state.gaps.retain(|seq| seq.0 != ack.seq);
                    }
                }
                Ok(Message::GapRequest(gap)) => {
                    let mut state = destination.state.lock();
                    for seq in gap.from_seq..=gap.to_seq.min(gap.from_seq.saturating_add(1000)) {
                        if !state.gaps.contains(&LogSeq(seq)) {
                            state.gaps.push(LogSeq(seq));
                        }
                    }
                    drop(state);
                    destination.notify();
                }
                Ok(Message::Error(error)) => {
                    let reason = format!("the standby reported: {}", error.message);
                    self.note_refusal(&error, &reason);
                    *broken.lock() = Some(reason);
                    destination.notify();
                    return;
                }
                Ok(other) => {
                    *broken.lock() =
                        Some(format!("unexpected {:?} from the standby", other.kind()));
                    destination.notify();
                    return;
                }
                Err(ConnError::TimedOut(_)) => {}
                Err(error) => {
                    *broken.lock() = Some(format!("control connection: {error}"));
                    destination.notify();
                    return;
                }
            }
        }
    }
}
