//! A new standby from a running member (Data Guard's duplicate from active database,
//! PostgreSQL's `pg_basebackup`): the primary, or a database standby (a cascading one, so
//! that a new member behind it is not built across the primary's WAN), sends a consistent
//! image of its data files (one snapshot, at the checkpoint SCN it holds) while it goes on
//! taking writes or applying, and names the first log the standby will need; the standby then
//! receives redo from that log on, as any standby catches up (from its source in the routes,
//! gaps resolved from that source's archives), without needing the logs before it.
//!
//! The data never goes through this crate's owner: the primary reads it from a
//! `DataSnapshot` the server gives (the database's), and the standby hands the chunks to a
//! callback (that writes them into its new data files).

use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::{
    COPY_CHUNK_ENTRIES_MAX, CopyBegin, CopyChunk, CopyEnd, CopyRequest, ErrorCode, ErrorMessage,
    Message,
};
use redo::types::now_unix_us;
use redo::{RedoLog, Scn};

use crate::conn::Conn;
use crate::primary::PAYLOAD_MAX;

/// Bytes of key-value pairs in one `CopyChunk`.
const CHUNK_BYTES: usize = 1 << 20;
/// How long either side waits for the other's next frame.
const COPY_TIMEOUT: Duration = Duration::from_secs(60);

/// Key-value pairs, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// A consistent view of the data files, read in key order.
pub trait DataSnapshot: Send {
    /// Every change at or below this SCN is in the view, none above.
    fn checkpoint_scn(&self) -> Scn;
    /// What the view holds (for progress).
    fn keys(&self) -> u64;
    fn bytes(&self) -> u64;
    /// The next pairs in key order, about `max_bytes` of them; empty once all were read.
    fn next_entries(&mut self, max_bytes: usize) -> Result<Entries, String>;
}

/// Opens a snapshot of the primary's data.
pub type SnapshotSource = Arc<dyn Fn() -> Result<Box<dyn DataSnapshot>, String> + Send + Sync>;

/// The incarnation history now, in its wire form.
pub type HistorySource = Arc<dyn Fn() -> Vec<proto::IncarnationRecord> + Send + Sync>;

/// What a member (the primary, or a database standby) needs to serve a copy.
pub struct CopyServer {
    pub redo: RedoLog,
    pub snapshot: SnapshotSource,
    pub member: String,
    /// The incarnation history as it is when a copy begins (a standby's grows when it follows
    /// its primary into a new incarnation without reopening).
    pub history: HistorySource,
    /// The first log of every copy being served: archive retention keeps them.
    pub holds: Arc<parking_lot::Mutex<Vec<redo::LogSeq>>>,
}

/// Releases a copy's hold on the logs it needs when the copy ends.
struct Hold<'a>(&'a parking_lot::Mutex<Vec<redo::LogSeq>>, redo::LogSeq);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut holds = self.0.lock();
        if let Some(at) = holds.iter().position(|seq| *seq == self.1) {
            holds.remove(at);
        }
    }
}

impl CopyServer {
    /// Serves one copy on `conn`. Logs from the copy's first log on must stay available
    /// until the standby has received them (the caller holds them: archive retention).
    pub fn serve(&self, conn: &mut Conn, request: &CopyRequest) -> Result<CopyEnd, String> {
        let started = Instant::now();
        let mut snapshot = (self.snapshot)()?;
        let checkpoint = snapshot.checkpoint_scn();
        let first_seq = self.redo.seq_holding(checkpoint.next()).map_err(|error| {
            format!("finding the log that holds SCN {}: {error}", checkpoint.next())
        })?;
        self.holds.lock().push(first_seq);
        let _hold = Hold(&self.holds, first_seq);
        let identity = self.redo.identity();
        let config = self.redo.config();
        let begin = CopyBegin {
            database_id: identity.database_id.0,
            incarnation: identity.incarnation.0,
            checkpoint_scn: checkpoint.0,
            first_seq: first_seq.0,
            keys: snapshot.keys(),
            bytes: snapshot.bytes(),
            block_size: config.block_size,
            log_file_size: config.log_file_size,
            member: self.member.clone(),
            history: (self.history)(),
        };
        tracing::info!(standby = %request.member, peer = %conn.peer, checkpoint_scn = %checkpoint, %first_seq, keys = begin.keys, bytes = begin.bytes, "copying the data to a new standby");
        conn.send(&Message::CopyBegin(begin), COPY_TIMEOUT).map_err(|error| error.to_string())?;
        let mut sent = CopyEnd { keys: 0, bytes: 0 };
        loop {
            let mut entries = snapshot.next_entries(CHUNK_BYTES)?;
            if entries.is_empty() {
                break;
            }
            sent.keys += entries.len() as u64;
            sent.bytes +=
                entries.iter().map(|(key, value)| (key.len() + value.len()) as u64).sum::<u64>();
            while let Some(chunk) = next_chunk(&mut entries) {
                conn.send(&Message::CopyChunk(CopyChunk { entries: chunk }), COPY_TIMEOUT)
                    .map_err(|error| format!("sending the copy: {error}"))?;
            }
        }
        conn.send(&Message::CopyEnd(sent), COPY_TIMEOUT).map_err(|error| error.to_string())?;
        // The standby says when it has everything durably, or why not.
        match conn.recv(Some(COPY_TIMEOUT)) {
            Ok(Message::CopyEnd(received)) if received == sent => {
                tracing::info!(standby = %request.member, keys = sent.keys, bytes = sent.bytes, elapsed_ms = started.elapsed().as_millis() as u64, "copy to a new standby complete");
                Ok(sent)
            }
            Ok(Message::Error(error)) => {
                Err(format!("the new standby refused the copy: {}", error.message))
            }
            Ok(other) => Err(format!("the new standby answered the copy with {:?}", other.kind())),
            Err(error) => Err(format!("waiting for the new standby to confirm the copy: {error}")),
        }
    }
}

/// The first `COPY_CHUNK_ENTRIES_MAX` of `entries` (all of them if fewer), in order, taken
/// out; `None` once none are left. The standby refuses a chunk of more entries (decoded, their
/// vectors take 48 bytes each however short the pairs).
fn next_chunk(entries: &mut Entries) -> Option<Entries> {
    if entries.is_empty() {
        return None;
    }
    let rest = entries.split_off(entries.len().min(COPY_CHUNK_ENTRIES_MAX));
    Some(std::mem::replace(entries, rest))
}

/// Progress of a copy being received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyProgress {
    pub keys: u64,
    pub bytes: u64,
    pub keys_total: u64,
    pub bytes_total: u64,
}

/// Asks the primary at `address` (its redo listener; over mutual TLS if `tls` is given, its
/// certificate for `primary`) for a copy of its data, as member `member`. `begin` checks what is coming (and prepares for it); `chunk` stores each piece
/// (and is told the progress); `finish` makes it all durable before the primary is told.
pub fn fetch_copy(
    address: &str,
    primary: &str,
    tls: Option<&tls::RedoTls>,
    member: &str,
    mut begin: impl FnMut(&CopyBegin) -> Result<(), String>,
    mut chunk: impl FnMut(Entries, CopyProgress) -> Result<(), String>,
    finish: impl FnOnce(&CopyBegin, CopyEnd) -> Result<(), String>,
) -> Result<(CopyBegin, CopyEnd), String> {
    let mut conn = Conn::connect(address, Duration::from_secs(10), None, PAYLOAD_MAX)
        .and_then(|conn| conn.secure(tls, primary, Duration::from_secs(10)))
        .map_err(|error| format!("connecting to the primary at {address}: {error}"))?;
    conn.send(
        &Message::CopyRequest(CopyRequest { member: member.to_string(), time_us: now_unix_us() }),
        COPY_TIMEOUT,
    )
    .map_err(|error| format!("asking {address} for a copy: {error}"))?;
    let started = match conn.recv(Some(COPY_TIMEOUT)) {
        Ok(Message::CopyBegin(started)) => started,
        Ok(Message::Error(error)) => {
            return Err(format!("{address} refused to copy its data: {}", error.message));
        }
        Ok(other) => {
            return Err(format!("{address} answered a copy request with {:?}", other.kind()));
        }
        Err(error) => return Err(format!("asking {address} for a copy: {error}")),
    };
    if let Err(reason) = begin(&started) {
        conn.refuse(ErrorMessage::new(ErrorCode::Internal, reason.clone()));
        return Err(reason);
    }
    let mut progress =
        CopyProgress { keys: 0, bytes: 0, keys_total: started.keys, bytes_total: started.bytes };
    loop {
        match conn.recv(Some(COPY_TIMEOUT)) {
            Ok(Message::CopyChunk(CopyChunk { entries })) => {
                progress.keys += entries.len() as u64;
                progress.bytes += entries
                    .iter()
                    .map(|(key, value)| (key.len() + value.len()) as u64)
                    .sum::<u64>();
                if let Err(reason) = chunk(entries, progress) {
                    conn.refuse(ErrorMessage::new(ErrorCode::Internal, reason.clone()));
                    return Err(reason);
                }
            }
            Ok(Message::CopyEnd(end)) => {
                if end.keys != progress.keys || end.bytes != progress.bytes {
                    let reason = format!(
                        "the primary sent {} keys ({} bytes) but {} keys ({} bytes) arrived",
                        end.keys, end.bytes, progress.keys, progress.bytes
                    );
                    conn.refuse(ErrorMessage::new(ErrorCode::Malformed, reason.clone()));
                    return Err(reason);
                }
                if let Err(reason) = finish(&started, end) {
                    conn.refuse(ErrorMessage::new(ErrorCode::Internal, reason.clone()));
                    return Err(reason);
                }
                let _ = conn.send(&Message::CopyEnd(end), COPY_TIMEOUT);
                return Ok((started, end));
            }
            Ok(Message::Error(error)) => {
                return Err(format!("the primary stopped the copy: {}", error.message));
            }
            Ok(other) => return Err(format!("unexpected {:?} during the copy", other.kind())),
            Err(error) => return Err(format!("receiving the copy from {address}: {error}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_of_more_entries_than_a_chunk_takes_goes_in_several_chunks_in_order() {
        let total = 2 * COPY_CHUNK_ENTRIES_MAX + 3;
        let mut entries: Entries =
            (0..total as u32).map(|n| (n.to_be_bytes().to_vec(), Vec::new())).collect();
        let mut sizes = Vec::new();
        let mut next = 0u32;
        while let Some(chunk) = next_chunk(&mut entries) {
            sizes.push(chunk.len());
            for (key, _) in &chunk {
                assert_eq!(key.as_slice(), next.to_be_bytes(), "out of order");
                next += 1;
            }
        }
        assert_eq!(sizes, [COPY_CHUNK_ENTRIES_MAX, COPY_CHUNK_ENTRIES_MAX, 3]);
        assert!(entries.is_empty());
        let mut few: Entries = vec![(b"k".to_vec(), b"v".to_vec())];
        assert_eq!(next_chunk(&mut few).map(|chunk| chunk.len()), Some(1));
        assert_eq!(next_chunk(&mut few), None);
    }
}
