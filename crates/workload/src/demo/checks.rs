//! What the demo (and the integration tests) check between two databases: that a standby has
//! applied all it received, that it holds every archived log byte for byte, and every key and
//! value.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use resp::Frame;

use crate::client::Client;
use crate::process::status_at;

pub async fn wait_applied_all_received(
    standby_admin: SocketAddr,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let status = status_at(standby_admin)?;
        let standby_status =
            status.replication.standby.as_ref().context("the standby reports no standby status")?;
        if status.database.applied_scn >= standby_status.received_scn {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the standby did not apply the redo it received within {limit:?} (applied {}, received {})",
            status.database.applied_scn,
            standby_status.received_scn
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Closes the primary's current log (POST /logswitch) so that its last redo is archived too,
/// then waits until the standby has applied everything durable on the primary and holds every
/// log the primary archived in `primary_archive` in `standby_archive`. Returns the primary's
/// archived logs, oldest first.
pub async fn switch_and_wait_archived(
    primary_admin: SocketAddr,
    standby_admin: SocketAddr,
    primary_archive: &Path,
    standby_archive: &Path,
    limit: Duration,
) -> anyhow::Result<Vec<PathBuf>> {
    admin::http_post(&primary_admin.to_string(), "/logswitch", Duration::from_secs(60))?;
    let deadline = Instant::now() + limit;
    loop {
        let status = status_at(primary_admin)?;
        let durable = status.database.redo.durable_scn;
        let applied = status_at(standby_admin)?.database.applied_scn;
        let primary_archives = archive_files(primary_archive)?;
        let missing: Vec<&PathBuf> = primary_archives
            .iter()
            .filter(|path| !standby_archive.join(path.file_name().expect("file")).exists())
            .collect();
        let unarchived = status
            .database
            .redo
            .groups
            .iter()
            .filter(|group| !group.archived && group.seq.is_some())
            .count();
        if applied >= durable
            && missing.is_empty()
            && status.database.redo.archive_errors.is_empty()
            && unarchived <= 1
        {
            return Ok(primary_archives);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the standby did not catch up within {limit:?}: applied SCN {applied} of {durable}, \
             archived logs missing on the standby {missing:?}, {unarchived} logs not archived on \
             the primary, archive errors {:?}",
            status.database.redo.archive_errors
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The archived logs among `archived` whose copy of the same name in `standby_archive` is
/// missing or differs in any byte.
pub fn differing_archives(
    archived: &[PathBuf],
    standby_archive: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut differing = Vec::new();
    for path in archived {
        let theirs = standby_archive.join(path.file_name().context("an archived log's name")?);
        let ours = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if std::fs::read(&theirs).ok().is_none_or(|bytes| bytes != ours) {
            differing.push(path.clone());
        }
    }
    Ok(differing)
}

/// The archived logs (`*.arc`) in `dir`, oldest first.
pub fn archive_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|extension| extension == "arc"))
        .collect();
    files.sort();
    Ok(files)
}

/// Every key and value, via SCAN and MGET (and a collection whole, by its type: `collection`).
pub async fn all_data(addr: SocketAddr) -> anyhow::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut client = Client::connect(addr).await?;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut cursor = b"0".to_vec();
    loop {
        let reply = client.ok(&[b"SCAN", &cursor, b"COUNT", b"1000"]).await?;
        let Frame::Array(parts) = reply else { anyhow::bail!("SCAN answered {reply:?}") };
        let (Some(Frame::Bulk(next)), Some(Frame::Array(batch))) = (parts.first(), parts.get(1))
        else {
            anyhow::bail!("SCAN answered {parts:?}")
        };
        keys.extend(
            batch.iter().filter_map(|key| {
                if let Frame::Bulk(key) = key { Some(key.to_vec()) } else { None }
            }),
        );
        if next.as_ref() == b"0" {
            break;
        }
        cursor = next.to_vec();
    }
    let mut data = BTreeMap::new();
    for chunk in keys.chunks(500) {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(chunk.iter().map(Vec::as_slice));
        let Frame::Array(values) = client.ok(&args).await? else { anyhow::bail!("MGET failed") };
        for (key, value) in chunk.iter().zip(values) {
            match value {
                Frame::Bulk(value) => {
                    data.insert(key.clone(), value.to_vec());
                }
                // Not a string (or gone meanwhile): a collection, compared whole.
                _ => {
                    if let Some(value) = collection(&mut client, key).await? {
                        data.insert(key.clone(), value);
                    }
                }
            }
        }
    }
    Ok(data)
}

/// A hash, list, set or sorted set as bytes to compare: its type, then every element (and
/// value or score) length-prefixed, in a canonical order; `None` if the key is gone.
async fn collection(client: &mut Client, key: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
    let kind = client.ok(&[b"TYPE", key]).await?;
    let Frame::Simple(kind) = kind else { anyhow::bail!("TYPE answered {kind:?}") };
    let read: Vec<&[u8]> = match kind.as_ref() {
        b"hash" => vec![b"HGETALL", key],
        b"list" => vec![b"LRANGE", key, b"0", b"-1"],
        b"set" => vec![b"SMEMBERS", key],
        b"zset" => vec![b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"],
        _ => return Ok(None),
    };
    let Frame::Array(items) = client.ok(&read).await? else { anyhow::bail!("{read:?} failed") };
    let mut items: Vec<Vec<u8>> = items
        .into_iter()
        .filter_map(|item| if let Frame::Bulk(item) = item { Some(item.to_vec()) } else { None })
        .collect();
    if kind.as_ref() == b"set" {
        items.sort();
    }
    let mut bytes = kind.to_vec();
    for item in items {
        bytes.extend_from_slice(&(item.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&item);
    }
    Ok(Some(bytes))
}
