//! `[redo] thread_scheduling` reaches the threads a primary's redo log starts. A test binary of
//! its own: it looks at every thread of the process by name, which other tests' logs would
//! share.

#![cfg(target_os = "linux")]

use std::sync::Arc;

use redo::{OsStorage, RedoConfig, RedoLog, Scheduling};
use stats::Metrics;

/// The policies (`SCHED_OTHER` 0, `SCHED_BATCH` 3) of this process's threads named `name`.
fn policies_of(name: &str) -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|entry| {
            let tid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
            // SAFETY: a plain system call on a thread id (-1 if it ended meanwhile).
            let policy = unsafe { libc::sched_getscheduler(tid) };
            (comm.trim_end() == name && policy >= 0).then_some(policy)
        })
        .collect()
}

#[test]
fn a_primary_starts_its_log_writers_and_archivers_with_the_configured_policy() {
    for (scheduling, policy) in
        [(Scheduling::Batch, libc::SCHED_BATCH), (Scheduling::Normal, libc::SCHED_OTHER)]
    {
        let dir = tempfile::tempdir().unwrap();
        let config = RedoConfig {
            log_file_size: 1 << 20,
            thread_scheduling: scheduling,
            ..RedoConfig::default()
        };
        let log = RedoLog::open(
            config.resolve(dir.path()),
            Arc::new(OsStorage::default()),
            Metrics::new(),
        )
        .unwrap();
        // A thread has its name before its policy: looked at until a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        for name in ["redo-lgwr", "redo-lgwr-task", "redo-ackwait", "redo-arc0", "redo-arc1"] {
            loop {
                let policies = policies_of(name);
                if policies == [policy] {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{scheduling:?}: the threads named {name} have policies {policies:?}, not [{policy}]"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        log.shutdown().unwrap();
        drop(log);
    }
}
