//! What the transport tests share: a primary and a standby database in one process, their
//! configurations, and waiting for a condition.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use db::{Database, DbConfig, Op, SetCondition};
use redo::{CommitOptions, OsStorage, RedoConfig, Scn};
use stats::Metrics;
use transport::{
    DestinationConfig, Phase, PrimaryTransport, ProtectionMode, StandbyConfig, StandbyService,
    Transport,
};

pub fn redo_config(dir: &Path, groups: u32) -> RedoConfig {
    RedoConfig {
        log_file_size: 1 << 20,
        groups,
        archive_retry_interval: Duration::from_millis(50),
        ..RedoConfig::default()
    }
    .resolve(dir)
}

pub fn db_config(dir: &Path) -> DbConfig {
    DbConfig { checkpoint_interval: Duration::from_millis(500), ..DbConfig::default() }.resolve(dir)
}

pub struct Primary {
    pub db: Arc<Database>,
    pub transport: Option<PrimaryTransport>,
    pub _dir: tempfile::TempDir,
}

impl Primary {
    pub fn open() -> Primary {
        Primary::open_on(Arc::new(OsStorage::default()))
    }

    /// With its redo on `storage` (an in-memory disk: commits that do not wait for a disk).
    pub fn open_on(storage: Arc<dyn redo::Storage>) -> Primary {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(
            db_config(dir.path()),
            redo_config(dir.path(), 3),
            storage,
            Metrics::new(),
        )
        .unwrap();
        Primary { db: Arc::new(db), transport: None, _dir: dir }
    }

    pub fn ship_to(&mut self, mode: ProtectionMode, destination: DestinationConfig) {
        self.ship_to_with(mode, destination, &Metrics::default());
    }

    /// `ship_to`, recording transport's wait events and statistics in `metrics`.
    pub fn ship_to_with(
        &mut self,
        mode: ProtectionMode,
        destination: DestinationConfig,
        metrics: &Metrics,
    ) {
        let transport =
            PrimaryTransport::start(self.db.redo().handle(), mode, vec![destination], metrics)
                .unwrap();
        self.db.redo().set_shipper(Some(transport.shipper()));
        self.transport = Some(transport);
    }

    pub fn phase(&self) -> Phase {
        self.transport.as_ref().unwrap().status()[0].phase
    }

    pub fn set(&self, key: &str, value: &str) {
        self.db
            .transact(
                &[Op::set(
                    Bytes::copy_from_slice(key.as_bytes()),
                    Bytes::copy_from_slice(value.as_bytes()),
                    SetCondition::Always,
                )],
                CommitOptions::default(),
            )
            .unwrap();
    }

    pub fn stop(self) {
        self.db.shutdown().unwrap();
        if let Some(transport) = &self.transport {
            transport.stop();
        }
    }
}

pub struct Standby {
    pub db: Arc<Database>,
    pub service: StandbyService,
    pub dir: tempfile::TempDir,
}

impl Standby {
    pub fn open_in(dir: tempfile::TempDir, listen: &str) -> Standby {
        Standby::open_on(dir, listen, Arc::new(OsStorage::default()))
    }

    pub fn open_on(
        dir: tempfile::TempDir,
        listen: &str,
        storage: Arc<dyn redo::Storage>,
    ) -> Standby {
        let config = StandbyConfig { listen: listen.into(), ..StandbyConfig::default() };
        Standby::open_configured(dir, config, storage)
    }

    /// A standby with `config` (its `listen` included).
    pub fn open_configured(
        dir: tempfile::TempDir,
        config: StandbyConfig,
        storage: Arc<dyn redo::Storage>,
    ) -> Standby {
        let db = Arc::new(
            Database::open_standby(
                db_config(dir.path()),
                redo_config(dir.path(), 4),
                storage,
                Metrics::new(),
            )
            .unwrap(),
        );
        let applied = {
            let db = Arc::downgrade(&db);
            Arc::new(move || db.upgrade().map_or(Scn(0), |db| db.applied_scn()))
                as transport::AppliedScn
        };
        let service = StandbyService::start(db.redo().handle(), config, applied).unwrap();
        Standby { db, service, dir }
    }

    pub fn open() -> Standby {
        Standby::open_in(tempfile::tempdir().unwrap(), "127.0.0.1:0")
    }

    pub fn address(&self) -> String {
        self.service.local_addr().to_string()
    }

    pub fn stop(self) -> tempfile::TempDir {
        self.service.stop();
        self.db.shutdown().unwrap();
        self.dir
    }
}

pub fn destination(address: String, transport: Transport) -> DestinationConfig {
    DestinationConfig {
        name: "standby1".into(),
        address,
        transport,
        affirm: true,
        net_timeout: Duration::from_secs(2),
        reopen: Duration::from_millis(100),
        max_failure: 0,
        send_buffer: transport::BufferSize::Default,
        bandwidth: None,
        tcp_congestion: None,
        max_send: 256 << 10,
        compression: transport::Compression::None,
        compression_level: 1,
        compression_for: transport::CompressionScope::Gap,
        max_connections: 1,
        state: transport::DestinationState::Enable,
    }
}

/// Ships to `destination` (ASYNC) under Maximum Performance, commits once, and waits until the
/// destination streams.
pub fn start_streaming(primary: &mut Primary, destination: DestinationConfig) {
    primary.ship_to(ProtectionMode::MaximumPerformance, destination);
    primary.set("first", "1");
    wait_until("streaming", Duration::from_secs(20), || primary.phase() == Phase::Streaming);
}

pub fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn state(db: &Database) -> Vec<(Bytes, Bytes)> {
    db.keys(&|_| true)
        .unwrap()
        .into_iter()
        .map(|key| {
            let value = db.get(&key).unwrap().unwrap();
            (key, value)
        })
        .collect()
}

pub fn assert_same_archives(primary: &Database, standby: &Database) -> usize {
    let ours = primary.redo().archived_logs();
    wait_until("the standby archives what the primary did", Duration::from_secs(30), || {
        let theirs: Vec<_> = standby.redo().archived_logs().iter().map(|entry| entry.seq).collect();
        ours.iter().all(|entry| theirs.contains(&entry.seq))
    });
    let theirs = standby.redo().archived_logs();
    for entry in &ours {
        let copy = theirs.iter().find(|copy| copy.seq == entry.seq).unwrap();
        let a = std::fs::read(&entry.path).unwrap();
        let b = std::fs::read(&copy.path).unwrap();
        assert!(a == b, "archived log {} differs", entry.seq);
    }
    ours.len()
}
