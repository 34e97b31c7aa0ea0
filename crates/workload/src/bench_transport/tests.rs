//! The report's targets and order, the configurations, the bounds.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::report::{assess, sort_cases};
use super::setup::{MODES, Mode, primary_config, standby_config};
use super::*;

fn case(mode: &str, load: &str, clients: u32) -> TransportCase {
    TransportCase {
        system: "redoguard".into(),
        mode: mode.into(),
        load: load.into(),
        rtt_ms: 10.0,
        rtt_set_ms: 10,
        clients,
        commits_per_s: 1000.0,
        p50_us: 12_000.0,
        p99_us: 20_000.0,
        fdatasync_p50_us: 1000.0,
        log_write_avg_us: None,
        redo_mb_per_s: None,
        redo_mb_per_s_target: None,
        transport_lag_p50_ms: None,
        transport_lag_p99_ms: None,
        transport_lag_max_ms: None,
        transport_lag_samples: None,
        target: None,
        notes: String::new(),
    }
}

#[test]
fn targets_follow_the_issue() {
    let mut alone = case("no_standby", "closed_loop", 16);
    alone.commits_per_s = 2000.0;
    let mut asynchronous = case("async", "closed_loop", 16);
    asynchronous.commits_per_s = 1950.0;
    let mut slow = case("async", "closed_loop", 1);
    slow.commits_per_s = 900.0;
    let mut sync = case("sync_affirm", "closed_loop", 1);
    sync.p50_us = 12_600.0;
    let sync_many = case("sync_affirm", "closed_loop", 16);
    let mut lag = case("async", "steady_rate", 8);
    lag.transport_lag_p99_ms = Some(31.0);
    let mut cases = vec![alone, asynchronous, slow, sync, sync_many, lag];
    assess(&mut cases);
    // 1950 / 2000 = 0.975 >= 0.97.
    let target = cases[1].target.as_ref().unwrap();
    assert!(target.met && (target.ratio - 0.975).abs() < 1e-9, "{target:?}");
    // No no_standby case with 1 client: no reference, no target.
    assert_eq!(cases[2].target, None);
    // max(1 ms, 10 ms + 1 ms) = 11 ms; 12.6 / 11 = 1.145 <= 1.15.
    let target = cases[3].target.as_ref().unwrap();
    assert!(target.met && (target.reference - 11_000.0).abs() < 1e-9, "{target:?}");
    assert_eq!(cases[4].target, None);
    // 31 ms against 2 x 10 + 10 = 30 ms: missed.
    let target = cases[5].target.as_ref().unwrap();
    assert!(!target.met && (target.reference - 30.0).abs() < 1e-9, "{target:?}");
    assert!(cases[0].target.is_none());
}

#[test]
fn cases_sort_side_by_side() {
    let mut postgresql = case("sync_commit_on", "closed_loop", 1);
    postgresql.system = "postgresql".into();
    let mut cases = vec![
        case("async", "steady_rate", 8),
        postgresql,
        case("sync_affirm", "closed_loop", 1),
        case("no_standby", "closed_loop", 16),
        case("no_standby", "closed_loop", 1),
    ];
    sort_cases(&mut cases);
    let order: Vec<(&str, u32)> =
        cases.iter().map(|case| (case.mode.as_str(), case.clients)).collect();
    assert_eq!(
        order,
        [
            ("no_standby", 1),
            ("sync_affirm", 1),
            ("sync_commit_on", 1),
            ("no_standby", 16),
            ("async", 8)
        ]
    );
}

#[test]
fn configurations_parse_as_the_server_reads_them() {
    let standby: SocketAddr = "198.18.0.2:7000".parse().unwrap();
    for mode in MODES {
        let text = primary_config(mode, 64 << 20, Some(standby));
        let config = server::ServerConfig::parse(&text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.replication.destinations.len(), usize::from(mode != Mode::NoStandby));
    }
    let text = standby_config(64 << 20, Ipv4Addr::new(198, 18, 0, 2));
    let config = server::ServerConfig::parse(&text).unwrap();
    config.validate().unwrap();
}

#[test]
fn config_bounds_are_named() {
    let good = TransportConfig {
        binary: "redoguard".into(),
        dir: ".".into(),
        duration: Duration::from_secs(5),
        rtts_ms: vec![0, 10, 25],
        clients: vec![1, 16],
        lag_rates_mb_per_s: vec![2.0, 20.0],
        log_file_size: 64 << 20,
        tls: false,
        external: true,
    };
    good.validate().unwrap();
    let message = |config: TransportConfig| config.validate().unwrap_err().to_string();
    assert!(
        message(TransportConfig { lag_rates_mb_per_s: vec![500.0], ..good.clone() })
            .starts_with("lag-rates")
    );
    assert!(
        message(TransportConfig { log_file_size: 1000, ..good.clone() })
            .starts_with("log-file-size")
    );
    assert!(message(TransportConfig { clients: vec![], ..good }).starts_with("clients"));
}
