//! What a checkpoint learns from the key rows its writes replace (stale expires rows, the
//! collections dropped), and the removal of garbage elements, a bounded number at a time.

use bytes::Bytes;
use redb::ReadableTable;

use super::{ELEMENTS, GARBAGE};
use crate::layout::{self, KeyRow};

/// What a checkpoint learns from the key rows its writes replace.
#[derive(Default)]
pub(super) struct Learnt {
    /// Expires rows of replaced rows whose deadline the new row does not have.
    pub(super) stale_expires: Vec<Bytes>,
    /// Collections of replaced rows …
    pub(super) dropped_ids: std::collections::BTreeSet<u64>,
    /// … and of the rows written (a RENAME moves an id: it is not dropped).
    pub(super) written_ids: std::collections::BTreeSet<u64>,
}

impl Learnt {
    /// A string's row is read by its header alone (its type and deadline), without a copy of
    /// its value: most rows a checkpoint replaces are strings.
    pub(super) fn replaced(&mut self, key: &[u8], old: &[u8], new: Option<&[u8]>) {
        let malformed = || {
            tracing::warn!(key = %String::from_utf8_lossy(key), "a malformed key row in the data files was replaced");
        };
        let Ok((old_kind, old_deadline)) = layout::decode_header(old) else {
            return malformed();
        };
        let dropped = if old_kind == layout::KeyType::String {
            None
        } else {
            match KeyRow::decode(&Bytes::copy_from_slice(old)) {
                Ok(row) => row.collection_info().map(|collection| collection.id),
                Err(_) => return malformed(),
            }
        };
        let new_deadline =
            new.and_then(|new| layout::decode_header(new).ok()).map_or(0, |(_, deadline)| deadline);
        if old_deadline != 0 && old_deadline != new_deadline {
            self.stale_expires.push(layout::expires_row(old_deadline, key));
        }
        if let Some(id) = dropped {
            self.dropped_ids.insert(id);
        }
    }

    pub(super) fn written(&mut self, new: &[u8]) {
        if let Some(collection) = layout::decode_header(new)
            .ok()
            .filter(|(kind, _)| *kind != layout::KeyType::String)
            .and_then(|_| KeyRow::decode(&Bytes::copy_from_slice(new)).ok())
            .and_then(|row| row.collection_info())
        {
            self.written_ids.insert(collection.id);
        }
    }
}

/// Removes up to `budget` element rows of garbage ids, and the ids left with none. Returns
/// whether garbage is left.
pub(super) fn collect_garbage(
    transaction: &redb::WriteTransaction,
    budget: usize,
) -> Result<bool, redb::Error> {
    let mut garbage = transaction.open_table(GARBAGE)?;
    let mut elements = transaction.open_table(ELEMENTS)?;
    let mut budget = budget;
    let mut emptied = Vec::new();
    let mut left = false;
    let ids: Vec<Vec<u8>> = garbage
        .range::<&[u8]>(..)?
        .map(|entry| entry.map(|(key, _)| key.value().to_vec()))
        .collect::<Result<_, _>>()?;
    for id_row in ids {
        let Ok(id) = layout::garbage_id(&id_row) else {
            emptied.push(id_row);
            continue;
        };
        if budget == 0 {
            left = true;
            break;
        }
        let (lower, upper) = layout::id_range(id);
        let rows: Vec<Vec<u8>> = elements
            .range::<&[u8]>(lower.as_ref()..upper.as_ref())?
            .take(budget)
            .map(|entry| entry.map(|(key, _)| key.value().to_vec()))
            .collect::<Result<_, _>>()?;
        budget -= rows.len();
        for row in &rows {
            elements.remove(row.as_slice())?;
        }
        if budget > 0 {
            emptied.push(id_row);
        } else {
            left = true;
        }
    }
    for id_row in emptied {
        garbage.remove(id_row.as_slice())?;
    }
    Ok(left)
}
