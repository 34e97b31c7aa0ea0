//! Transactions: reads through the cache layers to the data files, and a write
//! transaction's ops run under the write lock against its own overlay, appended to the redo
//! log as one record.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use redo::{RedoError, Role};

use crate::cache::Lookup;
use crate::change::{self, Change};
use crate::{DbError, Executed, Inner, Op, OpResult, Result, SetCondition, ops};

impl Inner {
    pub(crate) fn read(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.cache.read().lookup(key) {
            Lookup::Known(value) => Ok(value),
            Lookup::Store => self.store.get(key),
        }
    }

    /// `read` of a key held as `Bytes` (a transaction's).
    fn read_bytes(&self, key: &Bytes) -> Result<Option<Bytes>> {
        match self.cache.read().lookup_bytes(key) {
            Lookup::Known(value) => Ok(value),
            Lookup::Store => self.store.get(key),
        }
    }

    pub(crate) fn writes_refused(&self) -> Option<String> {
        if let Some(error) = &self.checkpoint.lock().last_error {
            return Some(format!(
                "checkpoint failed ({error}); writes resume once a checkpoint succeeds"
            ));
        }
        self.redo
            .archiver_stuck()
            .map(|(seq, reason)| format!("archiving of log sequence {seq} is failing ({reason})"))
    }

    pub(crate) fn execute(&self, ops: &[Op]) -> Result<Executed> {
        let writes = ops.iter().any(Op::is_write);
        if writes {
            if self.role == Role::Standby {
                return Err(DbError::ReadOnly);
            }
            if self.shut_down.load(Ordering::Acquire) {
                return Err(DbError::Shutdown);
            }
            if let Some(reason) = self.writes_refused() {
                return Err(DbError::WritesRefused { reason });
            }
            self.wait_for_memory();
        }
        let write = self.write.lock();
        // The transaction's own changes, over everything committed before it.
        let mut overlay: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
        let mut changes = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        let mut key_delta = 0i64;
        // Changes (by index) that set a key without knowing whether the data files held it
        // (`key_count`).
        let mut unresolved: Vec<usize> = Vec::new();
        let view =
            |overlay: &BTreeMap<Bytes, Option<Bytes>>, key: &Bytes| -> Result<Option<Bytes>> {
                match overlay.get(key) {
                    Some(value) => Ok(value.clone()),
                    None => self.read_bytes(key),
                }
            };
        // Whether the key exists, if the overlay or a cache layer knows; `None` if only the
        // data files do (not read: a plain SET does not need to know).
        let known = |overlay: &BTreeMap<Bytes, Option<Bytes>>, key: &Bytes| -> Option<bool> {
            match overlay.get(key) {
                Some(value) => Some(value.is_some()),
                None => match self.cache.read().lookup_bytes(key) {
                    Lookup::Known(value) => Some(value.is_some()),
                    Lookup::Store => None,
                },
            }
        };
        let mut change = |overlay: &mut BTreeMap<Bytes, Option<Bytes>>,
                          key: &Bytes,
                          value: Option<Bytes>,
                          existed: Option<bool>| {
            // Unresolved: counted as new until resolved.
            key_delta += i64::from(value.is_some()) - i64::from(existed == Some(true));
            // The request's own bytes for now (they may share a buffer with the whole
            // request: `keep` below gives the cache its own).
            let key = key.clone();
            if existed.is_none() {
                unresolved.push(changes.len());
            }
            overlay.insert(key.clone(), value.clone());
            changes.push(match value {
                Some(value) => Change::Put { key, value },
                None => Change::Delete { key },
            });
        };
        for op in ops {
            results.push(match op {
                Op::Get { key } => view(&overlay, key)?.map_or(OpResult::Nil, OpResult::Value),
                Op::MGet { keys } => OpResult::Values(
                    keys.iter().map(|key| view(&overlay, key)).collect::<Result<_>>()?,
                ),
                Op::Exists { keys } => {
                    let mut count = 0;
                    for key in keys {
                        count += i64::from(view(&overlay, key)?.is_some());
                    }
                    OpResult::Integer(count)
                }
                Op::Set { key, value, condition } => {
                    let existed = match condition {
                        SetCondition::Always => known(&overlay, key),
                        _ => Some(view(&overlay, key)?.is_some()),
                    };
                    let applies = match condition {
                        SetCondition::Always => true,
                        SetCondition::IfAbsent => existed == Some(false),
                        SetCondition::IfPresent => existed == Some(true),
                    };
                    if applies {
                        change(&mut overlay, key, Some(value.clone()), existed);
                        OpResult::Ok
                    } else {
                        OpResult::Nil
                    }
                }
                Op::MSet { pairs } => {
                    for (key, value) in pairs {
                        let existed = known(&overlay, key);
                        change(&mut overlay, key, Some(value.clone()), existed);
                    }
                    OpResult::Ok
                }
                Op::Del { keys } => {
                    let mut deleted = 0;
                    for key in keys {
                        if view(&overlay, key)?.is_some() {
                            change(&mut overlay, key, None, Some(true));
                            deleted += 1;
                        }
                    }
                    OpResult::Integer(deleted)
                }
                Op::IncrBy { key, increment } => {
                    let current = view(&overlay, key)?;
                    let existed = current.is_some();
                    match current.as_deref().map_or(Some(0), ops::parse_integer) {
                        None => OpResult::Error(ops::NOT_AN_INTEGER.to_string()),
                        Some(value) => match value.checked_add(*increment) {
                            None => OpResult::Error(ops::OVERFLOW.to_string()),
                            Some(new) => {
                                change(
                                    &mut overlay,
                                    key,
                                    Some(Bytes::from(new.to_string())),
                                    Some(existed),
                                );
                                OpResult::Integer(new)
                            }
                        },
                    }
                }
            });
        }
        if changes.is_empty() {
            return Ok(Executed { results, scn: None });
        }
        let len = change::encoded_len(&changes);
        let max = self.redo.max_record_len();
        if len > max {
            return Err(DbError::TooLarge { len, max });
        }
        let mut payload = Vec::with_capacity(len);
        change::encode(&changes, &mut payload);
        drop(overlay);
        let payload = Bytes::from(payload);
        let changes = change::keep(changes, &payload);
        let scn = self.redo.append(&payload).map_err(|error| match error {
            RedoError::ArchiverStuck { .. } => DbError::WritesRefused { reason: error.to_string() },
            RedoError::RecordTooLarge { len, max } => DbError::TooLarge { len, max },
            error => DbError::Redo(error),
        })?;
        {
            // Before the changes reach the cache: a checkpoint that writes them (it can only
            // once they are there) then finds their unresolved keys here (`key_count`).
            let mut count = self.key_count.lock();
            count.add(key_delta - unresolved.len() as i64);
            for index in unresolved {
                count.add_unresolved(scn, changes[index].key().clone());
            }
        }
        self.cache.write().add_pending(scn, changes, key_delta);
        self.applied_scn.store(scn.0, Ordering::Release);
        drop(write);
        self.redo.count_commit();
        Ok(Executed { results, scn: Some(scn) })
    }
}
