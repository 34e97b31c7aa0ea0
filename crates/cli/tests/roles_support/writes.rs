//! Writes and reads the role tests check members with.

use std::time::{Duration, Instant};

use super::{Cluster, all_data};
use crate::common;

/// A SET on `connection`, its error as text.
pub fn set(connection: &mut redis::Connection, key: &str, value: &str) -> Result<(), String> {
    redis::cmd("SET").arg(key).arg(value).query::<()>(connection).map_err(|error| error.to_string())
}

/// Writes to `name` until one is acknowledged (a new primary may refuse for a moment while
/// it opens), within 20 s: the time it took.
pub fn first_write(cluster: &Cluster, name: &str, key: &str) -> Duration {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < Duration::from_secs(20) {
        let mut connection = common::redis_connection(cluster.resp_addr(name));
        match set(&mut connection, key, "1") {
            Ok(()) => return started.elapsed(),
            Err(error) => last = error,
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{name} took no write within 20 s: {last}\n{}", cluster.logs());
}

/// Both members hold the same keys and values.
pub fn assert_same_data(cluster: &Cluster, a: &str, b: &str) {
    let ours = all_data(&mut common::redis_connection(cluster.resp_addr(a)));
    let theirs = all_data(&mut common::redis_connection(cluster.resp_addr(b)));
    assert_eq!(ours.len(), theirs.len(), "{a} has {} keys, {b} {}", ours.len(), theirs.len());
    assert!(ours == theirs, "{a} and {b} hold different data");
}
