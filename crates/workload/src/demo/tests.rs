use super::*;

/// The note speaks of the size the servers are given, and does its arithmetic.
#[test]
fn the_log_size_note_names_the_configured_size_and_its_switch_intervals() {
    assert!(
        DEMO_CONFIG.contains(&format!(
            "log_file_size = {}",
            tools::advise::logs::config_size(DEMO_LOG_FILE_SIZE)
        )),
        "{DEMO_CONFIG}"
    );
    let note = log_size_note();
    // 16 MiB at 1 MB/s: 16.8 s; at 50 MB/s: 336 ms.
    assert!(note.starts_with("online logs of 16.0 MiB: a log switch every 16.8 s in its OLTP phase (about 1 MB/s of redo), every 336 ms in its batch phase (about 50 MB/s"), "{note}");
    assert!(note.contains("advise --from-status"), "{note}");
    // 2 + ⌈2.4 s / 336 ms⌉ = 10.
    assert_eq!(demo_groups(), 10);
    assert!(note.contains("10 groups, so that a switch never waits for a checkpoint: one takes up to 1.2 s here, and the one that frees a group may first wait for the one running, so 2 + ⌈2 × 1.2 s / 336 ms⌉"), "{note}");
}
