use super::*;

#[test]
fn alternated_runs_combine_as_all_requests_over_all_their_time() {
    let run = |ops_per_s, p50_us, cpu_seconds| Run {
        ops_per_s,
        p50_us,
        p99_us: 2.0 * p50_us,
        cpu_seconds,
        checkpoints: Some(if p50_us > 250.0 { 2 } else { 0 }),
        // The worker's share of the run's CPU, and the checkpointer's in the slow one.
        threads: [
            ("redoguard-worke".to_string(), cpu_seconds * 0.8),
            ("db-ckpt".to_string(), if p50_us > 250.0 { cpu_seconds * 0.2 } else { 0.0 }),
        ]
        .into(),
        seconds: Vec::new(),
    };
    // 1000 requests each at 1000/s (1 s), 250/s (4 s) and 500/s (2 s): 3000 requests in
    // 7 s, not the mean of the rates (583/s).
    let runs = [run(1000.0, 100.0, 0.5), run(250.0, 300.0, 0.5), run(500.0, 200.0, 1.0)];
    let result = combine("redoguard", ("set", 50, ClientCpu::Own), 1000, &runs, 150.0);
    assert_eq!(result.requests, 3000);
    assert!((result.ops_per_s - 3000.0 / 7.0).abs() < 1e-9, "{}", result.ops_per_s);
    assert_eq!(result.p50_us, 200.0);
    assert_eq!(result.runs_ops_per_s, vec![1000.0, 250.0, 500.0]);
    assert_eq!(result.runs_checkpoints, vec![0, 2, 0]);
    assert_eq!(super::render::runs(&result), "1000, 250 +2 ckpt, 500");
    assert!((result.cpu_us_per_op.unwrap() - 2.0 / 3000.0 * 1e6).abs() < 1e-6);
    assert_eq!(result.test, "SET");
    assert_eq!(result.client_cpu, "own");
    // By thread, over all the runs' requests: 0.8 × 2 s and 0.2 × 0.5 s of 3000.
    let threads = result.cpu_us_per_op_by_thread.as_ref().unwrap();
    assert!((threads["redoguard-worke"] - 1.6 / 3000.0 * 1e6).abs() < 1e-6, "{threads:?}");
    assert!((threads["db-ckpt"] - 0.1 / 3000.0 * 1e6).abs() < 1e-6, "{threads:?}");
    let mut report: BenchRespReport = serde_json::from_str(
        r#"{"dir": "/x", "fdatasync_p50_us": 100.0, "redis_skipped": null, "targets": [],
        "results": []}"#,
    )
    .unwrap();
    report.results.push(result);
    let text = render(&report);
    assert!(
        text.contains("    redoguard SET -c 50 (own): db-ckpt 33.3, redoguard-worke 533.3\n"),
        "{text}"
    );
}

/// A report from before the client had a CPU of its own reads as all shared, and is
/// shown without the placement.
#[test]
fn an_older_report_reads_as_shared() {
    let old = r#"{"dir": "/x", "fdatasync_p50_us": 100.0, "redis_skipped": null,
        "targets": [], "results": [{"server": "redoguard", "test": "SET", "clients": 50,
        "requests": 10, "ops_per_s": 5.0, "p50_us": 1.0, "p99_us": 2.0,
        "fdatasync_p50_us": 100.0}]}"#;
    let report: BenchRespReport = serde_json::from_str(old).unwrap();
    assert_eq!(report.results[0].client_cpu, "shared");
    assert_eq!(report.client_cpus, None);
    assert!(!render(&report).contains("client CPU \"own\""));
    assert!(!render(&report).contains("by thread"));
}
