//! The rows a change changes: one function for a primary's transaction, crash recovery and a
//! standby's apply, so that all three hold the same rows after the same changes. It reads
//! what it needs through the view and never looks at a clock: whatever depended on the time
//! or on chance was decided by the primary and is in the change.
//!
//! A change that does not fit the rows (an element change of a key that is not a collection
//! of its type) means the redo and the data files disagree: it is an error, never ignored.

use std::ops::Bound;

use bytes::Bytes;
use keyspace::{End, KeyType};

use crate::change::Change;
use crate::layout::{self, Collection, KeyRow, Namespace};
use crate::view::View;
use crate::{DbError, Result};

fn mismatch(change: &Change, what: &str) -> DbError {
    DbError::Mismatch(format!(
        "redo change {} of key {:?} does not fit the key space: {what}",
        change.name(),
        change.key().map(|key| String::from_utf8_lossy(key).into_owned()).unwrap_or_default()
    ))
}

/// The collection of type `kind` at `key`, which the change needs.
fn collection(
    view: &View,
    change: &Change,
    key: &Bytes,
    kind: KeyType,
) -> Result<(KeyRow, Collection)> {
    match view.raw_key(key)? {
        Some(row) if row.kind == kind => {
            let collection = row.collection_info().expect("a collection's row");
            Ok((row, collection))
        }
        Some(row) => Err(mismatch(change, &format!("the key holds a {}", row.kind.name()))),
        None => Err(mismatch(change, "the key does not exist")),
    }
}

/// Writes a collection's row after its count changed; an empty collection is deleted.
fn resize(view: &mut View, key: &Bytes, row: &KeyRow, collection: Collection) -> Result<()> {
    if collection.count == 0 {
        view.write_key(key, None, None, Some(Some(row)))
    } else {
        let new = KeyRow::collection(row.kind, collection, row.expires_at);
        view.write_key(key, Some(&new), None, Some(Some(row)))
    }
}

/// A collection's elements become garbage (its key row is going or being replaced).
fn drop_elements(view: &mut View, old: Option<&KeyRow>) {
    if let Some(collection) = old.and_then(KeyRow::collection_info) {
        view.put(Namespace::Garbage, layout::garbage_row(collection.id), Some(Bytes::new()));
    }
}

fn position_row(id: u64, position: i64) -> Bytes {
    layout::element_row(id, &layout::position_sub(position))
}

pub(crate) fn apply(view: &mut View, change: &Change) -> Result<()> {
    match change {
        Change::String { key, row } => {
            let new = KeyRow::decode(row).map_err(|error| mismatch(change, &error.to_string()))?;
            let old =
                if view.is_exact() { Some(view.replaced_key(key)?) } else { view.known_key(key)? };
            if let Some(old) = &old {
                drop_elements(view, old.as_ref());
            }
            view.write_key(key, Some(&new), Some(row.clone()), old.as_ref().map(Option::as_ref))
        }
        Change::Delete { key } => {
            let Some(old) = view.raw_key(key)? else { return Ok(()) };
            drop_elements(view, Some(&old));
            view.write_key(key, None, None, Some(Some(&old)))
        }
        Change::Expire { key, at } => {
            let Some(old) = view.raw_key(key)? else {
                return Err(mismatch(change, "the key does not exist"));
            };
            let new = KeyRow { expires_at: *at, ..old.clone() };
            view.write_key(key, Some(&new), None, Some(Some(&old)))
        }
        Change::Create { key, kind, id } => {
            if view.raw_key(key)?.is_some() {
                return Err(mismatch(change, "the key exists"));
            }
            view.raise_ids(*id);
            let row = KeyRow::collection(*kind, Collection { id: *id, count: 0, head: 0 }, 0);
            view.write_key(key, Some(&row), None, Some(None))
        }
        Change::HashSet { key, field, value } => {
            let (row, mut collection) = collection(view, change, key, KeyType::Hash)?;
            let element = layout::element_row(collection.id, field);
            let existed = view.get(Namespace::Elements, &element)?.is_some();
            view.put(Namespace::Elements, element, Some(value.clone()));
            if !existed {
                collection.count += 1;
                resize(view, key, &row, collection)?;
            }
            Ok(())
        }
        Change::HashDelete { key, field: member } | Change::SetRemove { key, member } => {
            let kind = if matches!(change, Change::HashDelete { .. }) {
                KeyType::Hash
            } else {
                KeyType::Set
            };
            let (row, mut collection) = collection(view, change, key, kind)?;
            let element = layout::element_row(collection.id, member);
            if view.get(Namespace::Elements, &element)?.is_none() {
                return Err(mismatch(change, "no such element"));
            }
            view.put(Namespace::Elements, element, None);
            collection.count -= 1;
            resize(view, key, &row, collection)
        }
        Change::SetAdd { key, member } => {
            let (row, mut collection) = collection(view, change, key, KeyType::Set)?;
            let element = layout::element_row(collection.id, member);
            if view.get(Namespace::Elements, &element)?.is_some() {
                return Err(mismatch(change, "the member is already there"));
            }
            view.put(Namespace::Elements, element, Some(Bytes::new()));
            collection.count += 1;
            resize(view, key, &row, collection)
        }
        Change::ListPush { key, end, value } => {
            let (row, mut collection) = collection(view, change, key, KeyType::List)?;
            let position = match end {
                End::Left => {
                    collection.head -= 1;
                    collection.head
                }
                End::Right => collection.head + collection.count as i64,
            };
            view.put(
                Namespace::Elements,
                position_row(collection.id, position),
                Some(value.clone()),
            );
            collection.count += 1;
            resize(view, key, &row, collection)
        }
        Change::ListPop { key, end } => {
            let (row, mut collection) = collection(view, change, key, KeyType::List)?;
            if collection.count == 0 {
                return Err(mismatch(change, "the list is empty"));
            }
            let position = match end {
                End::Left => {
                    collection.head += 1;
                    collection.head - 1
                }
                End::Right => collection.head + collection.count as i64 - 1,
            };
            view.put(Namespace::Elements, position_row(collection.id, position), None);
            collection.count -= 1;
            resize(view, key, &row, collection)
        }
        Change::ListSet { key, index, value } => {
            let (_, collection) = collection(view, change, key, KeyType::List)?;
            if *index >= collection.count {
                return Err(mismatch(change, "the index is past the end"));
            }
            let position = collection.head + *index as i64;
            view.put(
                Namespace::Elements,
                position_row(collection.id, position),
                Some(value.clone()),
            );
            Ok(())
        }
        Change::ListInsert { key, index, value } => {
            let (row, mut collection) = collection(view, change, key, KeyType::List)?;
            if *index > collection.count {
                return Err(mismatch(change, "the index is past the end"));
            }
            let index = *index as i64;
            let count = collection.count as i64;
            // Move the shorter side by one to make room.
            if index < count - index {
                shift(view, collection.id, collection.head, collection.head + index, -1)?;
                collection.head -= 1;
            } else {
                shift(view, collection.id, collection.head + index, collection.head + count, 1)?;
            }
            let position = collection.head + index;
            view.put(
                Namespace::Elements,
                position_row(collection.id, position),
                Some(value.clone()),
            );
            collection.count += 1;
            resize(view, key, &row, collection)
        }
        Change::ListRemove { key, index } => {
            let (row, mut collection) = collection(view, change, key, KeyType::List)?;
            if *index >= collection.count {
                return Err(mismatch(change, "the index is past the end"));
            }
            let index = *index as i64;
            let count = collection.count as i64;
            if index < count - 1 - index {
                // The elements before it move up one; the first position is freed.
                shift(view, collection.id, collection.head, collection.head + index, 1)?;
                view.put(Namespace::Elements, position_row(collection.id, collection.head), None);
                collection.head += 1;
            } else {
                shift(
                    view,
                    collection.id,
                    collection.head + index + 1,
                    collection.head + count,
                    -1,
                )?;
                let last = collection.head + count - 1;
                view.put(Namespace::Elements, position_row(collection.id, last), None);
            }
            collection.count -= 1;
            resize(view, key, &row, collection)
        }
        Change::ZAdd { key, member, score } => {
            let (row, mut collection) = collection(view, change, key, KeyType::ZSet)?;
            let by_member = layout::element_row(collection.id, &layout::zset_member_sub(member));
            let old = view.get(Namespace::Elements, &by_member)?;
            if let Some(old) = &old {
                let old = layout::decode_score(old)
                    .map_err(|error| mismatch(change, &error.to_string()))?;
                let order =
                    layout::element_row(collection.id, &layout::zset_order_sub(old, member));
                view.put(Namespace::Elements, order, None);
            }
            view.put(Namespace::Elements, by_member, Some(layout::encode_score(*score)));
            let order = layout::element_row(collection.id, &layout::zset_order_sub(*score, member));
            view.put(Namespace::Elements, order, Some(Bytes::new()));
            if old.is_none() {
                collection.count += 1;
                resize(view, key, &row, collection)?;
            }
            Ok(())
        }
        Change::ZRemove { key, member } => {
            let (row, mut collection) = collection(view, change, key, KeyType::ZSet)?;
            let by_member = layout::element_row(collection.id, &layout::zset_member_sub(member));
            let Some(old) = view.get(Namespace::Elements, &by_member)? else {
                return Err(mismatch(change, "no such member"));
            };
            let old =
                layout::decode_score(&old).map_err(|error| mismatch(change, &error.to_string()))?;
            view.put(Namespace::Elements, by_member, None);
            let order = layout::element_row(collection.id, &layout::zset_order_sub(old, member));
            view.put(Namespace::Elements, order, None);
            collection.count -= 1;
            resize(view, key, &row, collection)
        }
        Change::Rename { from, to } => {
            let Some(row) = view.raw_key(from)? else {
                return Err(mismatch(change, "the source does not exist"));
            };
            if from == to {
                return Ok(());
            }
            if view.raw_key(to)?.is_some() {
                return Err(mismatch(change, "the destination exists"));
            }
            view.write_key(from, None, None, Some(Some(&row)))?;
            view.write_key(to, Some(&row), None, Some(None))
        }
        Change::Copy { from, to, id } => {
            let Some(row) = view.raw_key(from)? else {
                return Err(mismatch(change, "the source does not exist"));
            };
            if view.raw_key(to)?.is_some() {
                return Err(mismatch(change, "the destination exists"));
            }
            let new = match row.collection_info() {
                None => row.clone(),
                Some(collection) => {
                    view.raise_ids(*id);
                    let (lower, upper) = layout::id_range(collection.id);
                    let rows = view.range(
                        Namespace::Elements,
                        Bound::Included(lower),
                        Bound::Excluded(upper),
                        false,
                        usize::MAX,
                    )?;
                    for (element, value) in rows {
                        let (_, sub) = layout::split_element_row(&element)
                            .map_err(|error| mismatch(change, &error.to_string()))?;
                        view.put(Namespace::Elements, layout::element_row(*id, &sub), Some(value));
                    }
                    KeyRow::collection(
                        row.kind,
                        Collection { id: *id, ..collection },
                        row.expires_at,
                    )
                }
            };
            view.write_key(to, Some(&new), None, Some(None))
        }
        Change::FlushAll => {
            view.note_flush();
            let mut after = Bound::Unbounded;
            loop {
                let keys =
                    view.range(Namespace::Keys, after.clone(), Bound::Unbounded, false, 4096)?;
                let Some((last, _)) = keys.last() else { return Ok(()) };
                after = Bound::Excluded(last.clone());
                for (key, row) in keys {
                    let old = crate::view::decode_key_row(&key, &row)?;
                    drop_elements(view, Some(&old));
                    view.write_key(&key, None, None, Some(Some(&old)))?;
                }
            }
        }
    }
}

/// Moves the elements at positions `from..to` of list `id` by `by` (±1), starting at the end
/// they move towards so none is overwritten.
fn shift(view: &mut View, id: u64, from: i64, to: i64, by: i64) -> Result<()> {
    let positions: Box<dyn Iterator<Item = i64>> =
        if by > 0 { Box::new((from..to).rev()) } else { Box::new(from..to) };
    for position in positions {
        let row = position_row(id, position);
        let value = view.get(Namespace::Elements, &row)?;
        view.put(Namespace::Elements, position_row(id, position + by), value);
    }
    Ok(())
}
