//! The two files a switchover leaves in a data directory:
//!
//! - `switchover.pending`, on the old primary: the target of the switchover it began and the
//!   switchover's id, until it follows the target (or the switchover is aborted). One line
//!   with the target's name, one with the id in decimal; a file written before ids existed
//!   holds the name only, read as id 0 (unknown).
//! - `switchover.refused`, on a target: the ids of the switchovers it refused (the newest
//!   [`REFUSED_KEPT`], one decimal per line). A target never completes a switchover it refused
//!   once: the old primary may have taken its role back since (`docs/roles.md`, "Switchover").
//!   The file has a fixed size (every line 20 digits, 0 for an empty slot), made when the
//!   member opens, and a refusal overwrites it in place: recording one needs no new space, so
//!   a target whose file system is full still records its refusal, and the old primary may
//!   take its role back (one sector: written whole or not at all, as a control file is).
//! - `switchover.completed`, on a target: the ids of the switchovers it completed (the newest
//!   [`REFUSED_KEPT`], as the refused record), written before its control file names it the
//!   primary. A call of one again (a second broker's, late; or an old primary's pending
//!   record that it never saw completed) is a failure, never completed twice nor refused:
//!   once this member has been a standby again since, either would give a role to a second
//!   primary of the same incarnation (found by `roles/tests/model_restart.rs`).

use std::path::PathBuf;

use anyhow::Context as _;

use super::super::super::Roles;

/// In the data directory: the switchover an old primary began, until it follows its target.
const PENDING_SWITCHOVER: &str = "switchover.pending";
/// In the data directory: the switchovers a target refused.
const REFUSED_SWITCHOVERS: &str = "switchover.refused";
/// In the data directory: the switchovers a target completed.
const COMPLETED_SWITCHOVERS: &str = "switchover.completed";
/// How many refused ids a target keeps: a broker retries only the newest switchover of an old
/// primary, and a new prepare draws a new id.
const REFUSED_KEPT: usize = 16;

/// A switchover an old primary began and has not seen completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingSwitchover {
    pub to: String,
    /// Drawn at random by the prepare (never 0); 0 for a file written before ids existed.
    pub id: u64,
    /// The incarnation it was prepared in (0 for a file written before it was kept): what
    /// the broker completes it in, and an abort gives the role back in. A member that follows
    /// a newer one since (a failover came after the switchover) holds a void record.
    pub incarnation: u32,
}

/// A new switchover id: random, never 0 (which means "unknown").
pub(crate) fn new_id() -> u64 {
    rand::random::<u64>().max(1)
}

fn pending_text(pending: &PendingSwitchover) -> String {
    format!("{}\n{}\n{}\n", pending.to, pending.id, pending.incarnation)
}

/// Reads `switchover.pending` (`what` names it in errors): the target's name, then the id
/// (absent in a file written before ids existed: 0), then the incarnation it was prepared in
/// (absent in a file written before it was kept: 0).
fn parse_pending(text: &str, what: &str) -> anyhow::Result<PendingSwitchover> {
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let to = lines.next().with_context(|| format!("{what} is empty"))?.to_string();
    let id = match lines.next() {
        None => 0,
        Some(id) => id
            .parse()
            .with_context(|| format!("{what}: '{id}' is not a switchover id (a decimal number)"))?,
    };
    let incarnation = match lines.next() {
        None => 0,
        Some(incarnation) => incarnation.parse().with_context(|| {
            format!("{what}: '{incarnation}' is not an incarnation (a decimal number)")
        })?,
    };
    if let Some(extra) = lines.next() {
        anyhow::bail!("{what}: unexpected '{extra}' after the target, the id and the incarnation");
    }
    Ok(PendingSwitchover { to, id, incarnation })
}

/// The refused record's size: [`REFUSED_KEPT`] lines of 20 digits.
const REFUSED_BYTES: usize = REFUSED_KEPT * 21;

/// `ids` (the newest last, at most [`REFUSED_KEPT`]) as the fixed-size record: empty slots
/// (0) first.
fn refused_text(ids: &[u64]) -> String {
    let empty = REFUSED_KEPT.saturating_sub(ids.len());
    std::iter::repeat_n(&0, empty).chain(ids).map(|id| format!("{id:020}\n")).collect()
}

fn parse_refused(text: &str, what: &str) -> anyhow::Result<Vec<u64>> {
    let ids: Vec<u64> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| {
            line.parse().with_context(|| {
                format!("{what}: '{line}' is not a switchover id (a decimal number)")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    // (0: an empty slot of the fixed-size record.)
    Ok(ids.into_iter().filter(|id| *id != 0).collect())
}

/// `ids` with `id` added as the newest, the oldest dropped past [`REFUSED_KEPT`].
fn with_refused(mut ids: Vec<u64>, id: u64) -> Vec<u64> {
    ids.retain(|kept| *kept != id);
    ids.push(id);
    let excess = ids.len().saturating_sub(REFUSED_KEPT);
    ids.drain(..excess);
    ids
}

impl Roles {
    fn data_file(&self, name: &str) -> PathBuf {
        self.config.server.data_dir.join(name)
    }

    fn read_data_file(&self, name: &str) -> anyhow::Result<Option<(PathBuf, String)>> {
        let path = self.data_file(name);
        if !self.storage.exists(&path) {
            return Ok(None);
        }
        let bytes = redo::storage::read_all(self.storage.as_ref(), &path)
            .with_context(|| format!("reading {}", path.display()))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?;
        Ok(Some((path, text)))
    }

    /// Records (durably) the switchover this old primary began, or that there is none.
    pub(crate) fn write_pending_switchover(
        &self,
        pending: Option<&PendingSwitchover>,
    ) -> anyhow::Result<()> {
        let path = self.data_file(PENDING_SWITCHOVER);
        match pending {
            Some(pending) => redo::storage::replace_durably(
                self.storage.as_ref(),
                &path,
                pending_text(pending).as_bytes(),
            )
            .with_context(|| format!("writing {}", path.display())),
            None if self.storage.exists(&path) => {
                self.storage
                    .remove(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
                let dir = path.parent().unwrap_or(std::path::Path::new("."));
                self.storage.sync_dir(dir).with_context(|| format!("syncing {}", dir.display()))
            }
            None => Ok(()),
        }
    }

    /// The switchover this member began as the old primary and has not seen completed, if any.
    pub(crate) fn load_pending_switchover(&self) -> anyhow::Result<Option<PendingSwitchover>> {
        let Some((path, text)) = self.read_data_file(PENDING_SWITCHOVER)? else {
            return Ok(None);
        };
        let pending = parse_pending(&text, &path.display().to_string())?;
        if self.config.replication.member_named(&pending.to).is_none() {
            anyhow::bail!(
                "{}: '{}' is not a member of this configuration (it records the target of a switchover this member began; remove it if none is under way)",
                path.display(),
                pending.to
            );
        }
        Ok(Some(pending))
    }

    /// The switchovers this member refused as their target (the newest last).
    pub(crate) fn refused_switchovers(&self) -> anyhow::Result<Vec<u64>> {
        match self.read_data_file(REFUSED_SWITCHOVERS)? {
            Some((path, text)) => parse_refused(&text, &path.display().to_string()),
            None => Ok(Vec::new()),
        }
    }

    /// The switchovers this member completed as their target (the newest last).
    pub(crate) fn completed_switchovers(&self) -> anyhow::Result<Vec<u64>> {
        match self.read_data_file(COMPLETED_SWITCHOVERS)? {
            Some((path, text)) => parse_refused(&text, &path.display().to_string()),
            None => Ok(Vec::new()),
        }
    }

    /// Records (durably) that this member completes switchover `id`, before its control file
    /// says primary: a crash in between leaves a standby that fails the switchover's complete
    /// from then on (the old primary stays a standby: the safe side).
    pub(crate) fn record_completed_switchover(&self, id: u64) -> anyhow::Result<()> {
        let path = self.data_file(COMPLETED_SWITCHOVERS);
        let text = refused_text(&with_refused(self.completed_switchovers()?, id));
        redo::storage::replace_durably(self.storage.as_ref(), &path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Records (durably) that this member refused switchover `id`: it never completes it. In
    /// place when the fixed-size record exists (no new space needed), else as a new file.
    pub(crate) fn record_refused_switchover(&self, id: u64) -> anyhow::Result<()> {
        let ids = with_refused(self.refused_switchovers()?, id);
        self.write_refused(&ids)
    }

    /// Makes the fixed-size refused record if it is missing (or of another size), when the
    /// member opens: a refusal later overwrites it in place. Logged, not fatal: without it a
    /// refusal on a full file system is answered as a failure (the old primary stays a
    /// standby), which is safe.
    pub(crate) fn prepare_refused_record(&self) {
        if self.refused_record_in_place().is_some() {
            return;
        }
        if let Err(error) = self.refused_switchovers().and_then(|ids| self.write_refused(&ids)) {
            tracing::warn!(
                error = format!("{error:#}"),
                "cannot make the record of refused switchovers; a refusal on a full file system will leave the old primary a standby"
            );
        }
    }

    /// The refused record, open, if it has its fixed size (so it can be overwritten in place).
    fn refused_record_in_place(&self) -> Option<Box<dyn redo::storage::StorageFile>> {
        let path = self.data_file(REFUSED_SWITCHOVERS);
        self.storage.open(&path).ok().filter(|file| file.len().ok() == Some(REFUSED_BYTES as u64))
    }

    /// Writes `ids` as the refused record: in place if it has its fixed size, else as a new
    /// file (which needs space).
    fn write_refused(&self, ids: &[u64]) -> anyhow::Result<()> {
        let path = self.data_file(REFUSED_SWITCHOVERS);
        let text = refused_text(ids);
        match self.refused_record_in_place() {
            Some(file) => file
                .write_at(text.as_bytes(), 0)
                .and_then(|()| file.sync_data())
                .with_context(|| format!("writing {} in place", path.display())),
            None => redo::storage::replace_durably(self.storage.as_ref(), &path, text.as_bytes())
                .with_context(|| format!("writing {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_switchover_reads_back_as_written() {
        let pending = PendingSwitchover {
            to: "west".into(),
            id: 18_446_744_073_709_551_615,
            incarnation: 4_294_967_295,
        };
        assert_eq!(pending_text(&pending), "west\n18446744073709551615\n4294967295\n");
        assert_eq!(parse_pending(&pending_text(&pending), "f").unwrap(), pending);
    }

    #[test]
    fn a_pending_file_from_before_ids_reads_as_id_0() {
        let pending = parse_pending("west\n", "f").unwrap();
        assert_eq!(pending, PendingSwitchover { to: "west".into(), id: 0, incarnation: 0 });
        let pending = parse_pending("west\n7\n", "f").unwrap();
        assert_eq!(pending, PendingSwitchover { to: "west".into(), id: 7, incarnation: 0 });
        let error = parse_pending("west\n7\n2\nmore\n", "f").unwrap_err().to_string();
        assert!(error.contains("unexpected 'more'"), "{error}");
        let error = format!("{:#}", parse_pending("west\n7\nx\n", "f").unwrap_err());
        assert!(error.contains("'x' is not an incarnation"), "{error}");
    }

    #[test]
    fn a_bad_pending_file_is_refused_naming_what_is_wrong() {
        let error = parse_pending("", "switchover.pending").unwrap_err().to_string();
        assert!(error.contains("switchover.pending is empty"), "{error}");
        let error = format!("{:#}", parse_pending("west\nx12\n", "f").unwrap_err());
        assert!(error.contains("'x12' is not a switchover id"), "{error}");
        let error = format!("{:#}", parse_pending("west\n12\nmore\n", "f").unwrap_err());
        assert!(error.contains("'more' is not an incarnation"), "{error}");
    }

    #[test]
    fn the_refused_record_keeps_the_newest_ids() {
        assert_eq!(parse_refused("", "f").unwrap(), Vec::<u64>::new());
        let mut ids = Vec::new();
        for id in 1..=20 {
            ids = with_refused(ids, id);
        }
        assert_eq!(ids, (5..=20).collect::<Vec<u64>>());
        // Refused again: it moves to the newest, not twice.
        ids = with_refused(ids, 7);
        assert_eq!(ids.len(), REFUSED_KEPT);
        assert_eq!(ids.last(), Some(&7));
        assert_eq!(ids.iter().filter(|id| **id == 7).count(), 1);
        assert_eq!(parse_refused(&refused_text(&ids), "f").unwrap(), ids);
        // Fixed size whatever it holds, empty slots first.
        assert_eq!(refused_text(&ids).len(), REFUSED_BYTES);
        assert_eq!(refused_text(&[]).len(), REFUSED_BYTES);
        assert_eq!(refused_text(&[42]).len(), REFUSED_BYTES);
        assert_eq!(parse_refused(&refused_text(&[42]), "f").unwrap(), [42]);
        assert_eq!(parse_refused(&refused_text(&[]), "f").unwrap(), Vec::<u64>::new());
        assert_eq!(parse_refused(&refused_text(&[u64::MAX]), "f").unwrap(), [u64::MAX]);
        let error = format!("{:#}", parse_refused("5\nfive\n", "refused").unwrap_err());
        assert!(error.contains("refused: 'five' is not a switchover id"), "{error}");
    }
}
