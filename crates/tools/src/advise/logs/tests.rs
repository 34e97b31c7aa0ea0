use super::*;

/// Captured from a real primary (4 MiB logs, 3 groups) after redis-benchmark's SET -c 16
/// -d 200 (60 000 requests) and MSET -c 4 -d 512 (3 000), on 2026-11-28.
const STATUS: &str = include_str!("../testdata/status-primary.json");
const HISTORY: &str = include_str!("../testdata/history-primary.json");

fn rate(bytes_per_s: f64) -> SizingRate {
    SizingRate { bytes_per_s, window_s: 900.0, short: false, source: "a test".into() }
}

fn input(peak: f64, interval_s: u64, archive: Option<f64>) -> LogSizingInput {
    LogSizingInput {
        peak_bytes_per_s: peak,
        mean_bytes_per_s: Some(peak / 4.0),
        switch_interval: Duration::from_secs(interval_s),
        archive_bytes_per_s: archive,
        checkpoint_s: None,
        current: Some((16 << 20, 4)),
    }
}

#[test]
fn the_size_is_rate_times_interval_rounded_up() {
    // 2 MB/s for 15 minutes: 1.8 GB → 2 GiB, a switch every 17.9 min.
    let advice = size_logs(&input(2e6, 900, None));
    assert_eq!(advice.exact_bytes, 1.8e9);
    assert_eq!(advice.log_file_size, 2 << 30);
    assert!((advice.switch_at_peak_s - 2147483648.0 / 2e6).abs() < 1e-9);
    assert!((advice.switch_at_mean_s.unwrap() - 4.0 * 2147483648.0 / 2e6).abs() < 1e-6);
    assert_eq!(advice.groups, GROUPS_MIN);
    assert_eq!(advice.standby_groups, GROUPS_MIN + 1);
    // 16 MiB at 2 MB/s: a switch every 8.4 s now.
    assert!((advice.current_switch_at_peak_s.unwrap() - 16777216.0 / 2e6).abs() < 1e-9);
    let text = advice.text(&rate(2e6));
    assert!(text.contains("2.00 MB/s × 900 s = 1800.0 MB → 2.0 GiB"), "{text}");
    assert!(text.contains("log_file_size = \"2GiB\"\ngroups = 3"), "{text}");
}

#[test]
fn sizes_round_to_powers_of_two_below_a_gib_and_whole_gib_above() {
    assert_eq!(round_log_size(0.0), 1 << 20);
    assert_eq!(round_log_size((1 << 20) as f64), 1 << 20);
    assert_eq!(round_log_size((1 << 20) as f64 + 1.0), 2 << 20);
    assert_eq!(round_log_size(300e6), 512 << 20);
    assert_eq!(round_log_size((1u64 << 30) as f64), 1 << 30);
    assert_eq!(round_log_size(1.5 * (1u64 << 30) as f64), 2 << 30);
    assert_eq!(round_log_size(1e15), LOG_FILE_SIZE_MAX);
}

#[test]
fn a_rate_beyond_the_largest_log_is_capped_and_says_so() {
    // 125 MB/s for 15 minutes is 112.5 GB: more than a 64 GiB log holds.
    let advice = size_logs(&input(125e6, 900, None));
    assert!(advice.capped);
    assert_eq!(advice.log_file_size, LOG_FILE_SIZE_MAX);
    assert!(advice.switch_at_peak_s < 900.0);
    assert!(advice.text(&rate(125e6)).contains("the largest log file"));
}

#[test]
fn a_slow_archiver_needs_more_groups() {
    // 10 MB/s, 1-minute switches: 600 MB → 1 GiB logs, a switch every 107 s. An archiver
    // at 2 MB/s takes 537 s a log: 2 + ⌈537 / 107⌉ = 7 groups.
    let advice = size_logs(&input(10e6, 60, Some(2e6)));
    assert_eq!(advice.log_file_size, 1 << 30);
    let archive_s = (1u64 << 30) as f64 / 2e6;
    assert!((advice.archive_s.unwrap() - archive_s).abs() < 1e-9);
    assert_eq!(advice.groups, 2 + (archive_s / advice.switch_at_peak_s).ceil() as u32);
    assert_eq!(advice.groups, 7);
    assert_eq!(advice.standby_groups, 8);
    // A fast one needs only the least.
    assert_eq!(size_logs(&input(10e6, 60, Some(500e6))).groups, GROUPS_MIN);
}

#[test]
fn slow_checkpoints_need_more_groups() {
    // A batch like the demo's: 16 MiB logs at 50 MB/s switch every 336 ms; a checkpoint of 1 s
    // may have to wait for the one running: 2 + ⌈2 s / 336 ms⌉ = 8 groups.
    let mut sizing = input(50e6, 0, None);
    sizing.switch_interval = Duration::from_millis(335);
    sizing.checkpoint_s = Some(1.0);
    let advice = size_logs(&sizing);
    assert_eq!(advice.log_file_size, 16 << 20);
    assert_eq!(advice.groups_for_checkpoints, Some(8));
    assert_eq!((advice.groups, advice.standby_groups), (8, 9));
    let text = advice.text(&rate(50e6));
    assert!(text.contains("2 + ⌈2 × 1.0 s / 336 ms⌉ = 8"), "{text}");
    assert!(text.contains("so groups = max(3, 8) = 8"), "{text}");
    // The archiver's rule still counts when it needs more.
    sizing.archive_bytes_per_s = Some(10e6);
    let advice = size_logs(&sizing);
    // 1.7 s to archive a log: 2 + ⌈1.7 s / 336 ms⌉ = 7, fewer than the checkpoints need.
    let archive_s = advice.archive_s.unwrap();
    assert_eq!(
        advice.groups_for_archiving,
        Some(2 + (archive_s / advice.switch_at_peak_s).ceil() as u32)
    );
    assert!(advice.groups_for_archiving.unwrap() <= 8);
    assert_eq!(advice.groups, 8);
    sizing.archive_bytes_per_s = Some(4e6);
    assert_eq!(size_logs(&sizing).groups, 2 + 13);
    // Quick checkpoints need only the least; an absurd one the most the engine takes.
    assert_eq!(groups_for(2.0 * 0.01, 900.0), GROUPS_MIN);
    assert_eq!(groups_for(1e12, 1.0), GROUPS_MAX);
    assert_eq!(groups_for(f64::INFINITY, 1.0), GROUPS_MAX);
}

#[test]
fn a_real_status_gives_its_rates_and_logs() {
    let observed = observed("fixture", STATUS, Some(HISTORY)).unwrap();
    assert_eq!(observed.role, "primary");
    assert_eq!(observed.uptime_s, 15);
    assert_eq!((observed.log_file_size, observed.groups), (4 << 20, 3));
    assert_eq!(observed.redo_size, 31_743_000);
    assert_eq!(observed.log_bytes, 31_743_000 + 19_304_904);
    assert_eq!(observed.archived_logs, 12);
    // The catalog's fastest log is log 9, among the recent ones: its bytes over its time.
    let fastest = observed.fastest_log.clone().unwrap();
    assert_eq!(fastest.seq, 9);
    let status: serde_json::Value = serde_json::from_str(STATUS).unwrap();
    let log_9 = status["archive"]["recent"].as_array().unwrap().iter().find(|log| log["seq"] == 9);
    assert_eq!(fastest.bytes, log_9.unwrap()["size_bytes"].as_u64().unwrap());
    let peak = status["archive"]["peak_bytes_per_s"].as_f64().unwrap();
    assert!((fastest.bytes_per_s() - peak).abs() / peak < 1e-6, "{fastest:?} vs {peak}");
    let recent = status["archive"]["recent"].as_array().unwrap();
    let field = |log: &serde_json::Value, name: &str| log[name].as_u64().unwrap();
    // The slowest copy among the recent logs.
    let slowest = recent
        .iter()
        .map(|log| {
            let seconds = (field(log, "completed_us") - field(log, "next_time_us")) as f64 / 1e6;
            field(log, "size_bytes") as f64 / seconds
        })
        .fold(f64::INFINITY, f64::min);
    assert_eq!(observed.archive_bytes_per_s, Some(slowest));
    assert_eq!(observed.recent_logs.len(), recent.len());
    assert_eq!(observed.history.as_ref().unwrap().len(), 15);
    // Under 15 minutes observed: the recent logs' whole span (the history's 15 s, scaled
    // for padding, is less here), flagged short.
    let sized = observed.sizing_rate(SWITCH_INTERVAL_DEFAULT).unwrap();
    let (first, last) = (&recent[0], &recent[recent.len() - 1]);
    let span = (field(last, "next_time_us") - field(first, "first_time_us")) as f64 / 1e6;
    let bytes: u64 = recent.iter().map(|log| field(log, "size_bytes")).sum();
    assert!(sized.short);
    assert!((sized.window_s - span).abs() < 1e-5, "{sized:?} vs {span}");
    assert!((sized.bytes_per_s / (bytes as f64 / span) - 1.0).abs() < 1e-6, "{sized:?}");
    assert!(sized.source.contains("of the 10 recent archived logs"), "{sized:?}");
    // A one-second interval: the busiest second of logs, faster than the whole span.
    let burst = observed.sizing_rate(Duration::from_secs(1)).unwrap();
    assert!(!burst.short && burst.window_s >= 1.0 && burst.bytes_per_s > sized.bytes_per_s);
    // Its checkpoints, from the "db file parallel write" wait.
    let waits = status["metrics"]["waits"].as_array().unwrap();
    let checkpoint = waits.iter().find(|wait| wait["name"] == CHECKPOINT_WAIT).unwrap();
    let p99_s = checkpoint["p99_us"].as_u64().unwrap() as f64 / 1e6;
    assert_eq!(observed.checkpoint_s, Some(p99_s));
    let text = observed.text();
    assert!(text.contains("fastest log       log 9: 4.0 MiB in"), "{text}");
    assert!(text.contains("checkpoints       p99"), "{text}");
    assert!(text.contains("of 12 archived logs"), "{text}");
    assert!(text.contains("last 15 s of \"redo size\": peak second 11.75 MB/s"), "{text}");
    let advice = size_logs(&LogSizingInput {
        peak_bytes_per_s: sized.bytes_per_s,
        mean_bytes_per_s: Some(observed.mean_log_bytes_per_s()),
        switch_interval: SWITCH_INTERVAL_DEFAULT,
        archive_bytes_per_s: observed.archive_bytes_per_s,
        checkpoint_s: observed.checkpoint_s,
        current: Some((observed.log_file_size, observed.groups)),
    });
    assert!(advice.text(&sized).contains("less than the switch interval"));
}

#[test]
fn without_archived_logs_the_history_then_the_mean_is_sized_for() {
    let mut observed = observed("fixture", STATUS, Some(HISTORY)).unwrap();
    observed.recent_logs.clear();
    let sized = observed.sizing_rate(SWITCH_INTERVAL_DEFAULT).unwrap();
    let history = observed.history.clone().unwrap();
    // Fewer seconds than the window: their mean, scaled for padding.
    let mean = history.iter().sum::<f64>() / history.len() as f64;
    let padding = observed.log_bytes_per_redo_byte();
    assert!((sized.bytes_per_s - mean * padding).abs() < 1e-6, "{sized:?}");
    assert!(sized.short && sized.window_s == 15.0);
    assert!(sized.source.contains("× 1.61 for padding"), "{sized:?}");
    observed.history = None;
    let sized = observed.sizing_rate(SWITCH_INTERVAL_DEFAULT).unwrap();
    assert_eq!(sized.bytes_per_s, observed.log_bytes as f64 / 15.0);
    assert!(sized.source.contains("mean since the member started"));
}

#[test]
fn the_busiest_stretch_is_the_fastest_at_least_as_long_as_the_window() {
    // Seconds at 1 byte/s, with 61 bytes in second 50.
    let mut spans: Vec<(f64, f64, f64)> =
        (0..100).map(|second| (second as f64, second as f64 + 1.0, 1.0)).collect();
    spans[50].2 = 61.0;
    assert_eq!(busiest(&spans, 60.0), Some((2.0, 60.0, false)));
    assert_eq!(busiest(&spans, 1.0), Some((61.0, 1.0, false)));
    // Longer than all observed: the whole, flagged.
    assert_eq!(busiest(&spans, 1000.0), Some((160.0 / 100.0, 100.0, true)));
    // Logs are whole: a stretch ends at the first log that makes it long enough, so the
    // 1-second log is only ever seen with the 19 seconds after it (119 / 20), or as the end
    // of the 10-second log before it (200 / 11).
    let logs = [(0.0, 10.0, 100.0), (10.0, 11.0, 100.0), (11.0, 30.0, 19.0)];
    assert_eq!(busiest(&logs, 5.0), Some((10.0, 10.0, false)));
    assert_eq!(busiest(&logs, 11.0), Some((200.0 / 11.0, 11.0, false)));
    assert_eq!(busiest(&[], 5.0), None);
}

#[test]
fn what_is_not_a_status_is_refused_by_name() {
    let error = observed("x.json", "{\"server\": {}}", None).unwrap_err();
    assert!(format!("{error:#}").contains("x.json is not a redoguard /status"), "{error:#}");
    assert!(format!("{error:#}").contains("missing field"), "{error:#}");
    let error = observed("x.json", "not json", None).unwrap_err();
    assert!(format!("{error:#}").contains("x.json is not a redoguard /status"));
    let bad_history = observed("u", STATUS, Some("[]")).unwrap_err();
    assert!(format!("{bad_history:#}").contains("the /history answer is not its JSON"));
}
