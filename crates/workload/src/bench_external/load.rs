//! The SET load over the Redis protocol, for any server of it (Redis here, redoguard in
//! `bench transport`): connections opened before the clock starts, each committing `SET`s
//! back to back, with `WAIT 1` pipelined behind each when asked.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use linkemu::Side;
use resp::Frame;

use super::{KEYS, LATENCY_US_MAX, Measured, VALUE_BYTES, WAIT_TIMEOUT_MS, latency_histogram};
use crate::client::Client;
use crate::network::Network;

/// The next key of a client's sequence (splitmix64), uniform enough over [`KEYS`].
fn next_key(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % KEYS
}

/// One connection's commits until `deadline`: SET, and with `wait` a pipelined `WAIT 1`.
async fn redis_client(
    mut client: Client,
    seed: u64,
    deadline: Instant,
    wait: bool,
) -> anyhow::Result<(u64, u64, Histogram<u64>)> {
    let value = vec![b'v'; VALUE_BYTES];
    let timeout = WAIT_TIMEOUT_MS.to_string();
    let wait_command: [&[u8]; 3] = [b"WAIT", b"1", timeout.as_bytes()];
    let mut state = seed;
    let mut latency_us = latency_histogram();
    let (mut commits, mut unacknowledged) = (0u64, 0u64);
    while Instant::now() < deadline && !crate::interrupt::requested() {
        let key = format!("key:{:012}", next_key(&mut state));
        let set: [&[u8]; 3] = [b"SET", key.as_bytes(), &value];
        let started = Instant::now();
        let pipeline: &[&[&[u8]]] = if wait { &[&set, &wait_command] } else { &[&set] };
        let replies = tokio::time::timeout(
            Duration::from_millis(WAIT_TIMEOUT_MS) + Duration::from_secs(20),
            client.pipeline(pipeline),
        )
        .await
        .context("no reply within 30 s")??;
        let elapsed_us = started.elapsed().as_micros() as u64;
        anyhow::ensure!(
            matches!(&replies[0], Frame::Simple(ok) if &ok[..] == b"OK"),
            "SET answered {:?}",
            replies[0]
        );
        if wait {
            match &replies[1] {
                Frame::Integer(acknowledged) if *acknowledged >= 1 => {}
                Frame::Integer(_) => {
                    unacknowledged += 1;
                    continue;
                }
                other => anyhow::bail!("WAIT answered {other:?}"),
            }
        }
        latency_us.record(elapsed_us.clamp(1, LATENCY_US_MAX))?;
        commits += 1;
    }
    Ok((commits, unacknowledged, latency_us))
}

/// `clients` connections to the primary on side A's 127.0.0.1:`port`, all connected
/// before the clock starts, each committing `SET`s (with `wait`, each followed by `WAIT 1`)
/// back to back for `duration`. Any server of the Redis protocol: Redis, or redoguard.
pub(crate) fn set_load(
    network: &Network,
    port: u16,
    clients: u32,
    duration: Duration,
    wait: bool,
) -> anyhow::Result<Measured> {
    set_load_with(network, port, clients, duration, wait, &[])
}

/// Like [`set_load`], each connection first sending `prelude` (if not empty; it must not
/// fail) before the clock starts: `COMMITMODE NOWAIT`, say.
pub(crate) fn set_load_with(
    network: &Network,
    port: u16,
    clients: u32,
    duration: Duration,
    wait: bool,
    prelude: &[Vec<u8>],
) -> anyhow::Result<Measured> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    set_load_at(network, address, clients, duration, wait, prelude)
}

/// Like [`set_load_with`], to the server at `address` (reached from side A): a member of a
/// mesh listens on its site's address.
pub(crate) fn set_load_at(
    network: &Network,
    address: SocketAddr,
    clients: u32,
    duration: Duration,
    wait: bool,
    prelude: &[Vec<u8>],
) -> anyhow::Result<Measured> {
    let prelude = prelude.to_vec();
    network.run_in(Side::A, move || -> anyhow::Result<Measured> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async move {
            let mut connections = Vec::with_capacity(clients as usize);
            for _ in 0..clients {
                let connect =
                    tokio::time::timeout(Duration::from_secs(10), Client::connect(address));
                let mut client = connect.await.context("connecting within 10 s")??;
                if !prelude.is_empty() {
                    let args: Vec<&[u8]> = prelude.iter().map(Vec::as_slice).collect();
                    client.ok(&args).await?;
                }
                connections.push(client);
            }
            let started = Instant::now();
            let deadline = started + duration;
            let mut tasks = tokio::task::JoinSet::new();
            for (index, client) in connections.into_iter().enumerate() {
                tasks.spawn(redis_client(client, 0x5eed_0000 + index as u64, deadline, wait));
            }
            let mut latency_us = latency_histogram();
            let (mut commits, mut failures) = (0, 0);
            while let Some(joined) = tasks.join_next().await {
                let (count, unacknowledged, histogram) = joined??;
                commits += count;
                failures += unacknowledged;
                latency_us.add(&histogram)?;
            }
            let seconds = started.elapsed().as_secs_f64();
            Ok(Measured { commits, commits_per_s: commits as f64 / seconds, latency_us, failures })
        })
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_cover_the_key_space() {
        let mut state = 1;
        let keys: Vec<u64> = (0..10_000).map(|_| next_key(&mut state)).collect();
        assert!(keys.iter().all(|&key| key < KEYS));
        assert!(keys.iter().any(|&key| key < KEYS / 10));
        assert!(keys.iter().any(|&key| key > KEYS * 9 / 10));
    }
}
