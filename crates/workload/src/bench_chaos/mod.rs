//! `redoguard bench chaos`: a nemesis campaign on real processes, judged by a history
//! checker. Three members (`east` primary, `west` SYNC AFFIRM, `south` ASYNC; Maximum
//! Availability with fast-start failover), with `--layout far-sync` a far sync `fs` relaying
//! `east`'s redo to `west` (`layout`), and two observers run each in a site of their own of
//! a linkemu mesh, with clients in one more site (through the observers' Sentinel fronts, and
//! directly to each member). Each round brings one or two seeded faults (`faults`), carried
//! out on the processes and links (`nemesis`); then everything is healed, the configuration
//! settles (`settle`), and the checker (`checker`) judges every operation so far against the
//! primary's data. See `docs/bench/chaos.md`.
//!
//! - `layout`: the members and their redo routes (`standard`, `far-sync`).
//! - `faults`: the fault kinds and the seeded plan (replayable from the seed).
//! - `history`: every client operation: invoke, ok, fail, indeterminate.
//! - `checker`: the rules (no acknowledged write lost, none acknowledged by a deposed primary,
//!   counters never below or behind what was acknowledged), pure and unit-tested.
//! - `clients`: the Sentinel-following and direct clients.
//! - `processes`, `cluster`: the processes and file systems of an epoch.
//! - `nemesis`, `settle`: a round's faults, their heal, and waiting for a settled configuration.
//! - `campaign`: the epochs and rounds; `report`: the table, JSON and figure.
//!
//! Every process is a child of this one, killed by its PID when its guard drops (also on an
//! error or an interrupt); the tmpfs are unmounted, the mesh's namespaces deleted and the work
//! directory removed.

mod campaign;
pub mod checker;
mod clients;
mod cluster;
pub mod faults;
pub mod history;
pub mod layout;
mod nemesis;
mod processes;
pub mod report;
mod settle;

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

pub use faults::FaultKind;
pub use layout::Layout;
pub use report::{ChaosReport, figure, render};

/// The most rounds in one campaign.
pub const ROUNDS_MAX: u32 = 100_000;
/// The most rounds one set of processes and data lives for.
pub const ROUNDS_PER_EPOCH_MAX: u32 = 100;

/// A fault the campaign plants itself, in the harness and never in the product, to show that
/// the checker catches what it is meant to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Plant {
    /// After every round, the newest acknowledged key is deleted on the primary behind the
    /// clients' backs (a `DEL` the history does not know of): a lost write.
    LostWrite,
    /// After every round, a counter is set back to 0 on the primary: below what was
    /// acknowledged, and going back.
    CounterRollback,
}

impl Plant {
    pub fn name(self) -> &'static str {
        match self {
            Plant::LostWrite => "lost-write",
            Plant::CounterRollback => "counter-rollback",
        }
    }
}

impl std::str::FromStr for Plant {
    type Err = String;

    fn from_str(text: &str) -> Result<Plant, String> {
        match text {
            "lost-write" => Ok(Plant::LostWrite),
            "counter-rollback" => Ok(Plant::CounterRollback),
            other => {
                Err(format!("'{other}' is not a planted fault (lost-write, counter-rollback)"))
            }
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The `redoguard` binary the members and observers run from.
    pub binary: PathBuf,
    /// Where the work directory (the epochs' files, their tmpfs mount points) is made.
    pub dir: PathBuf,
    /// Rounds. Bounds: 1..=100000.
    pub rounds: u32,
    pub seed: u64,
    /// Each round's fault phase. Bounds: 2s..=10min.
    pub round: Duration,
    /// The fast-start failover threshold. Bounds: 500ms..=1min.
    pub threshold: Duration,
    /// The round-trip time of every link of the mesh. Bounds: 0..=500ms.
    pub rtt: Duration,
    /// The kinds each round draws from. Bounds: at least one.
    pub faults: Vec<FaultKind>,
    /// The members and their redo routes. Default: `standard`.
    pub layout: Layout,
    /// Rounds per epoch (fresh processes and data). Bounds: 1..=100.
    pub rounds_per_epoch: u32,
    /// How long the configuration may take to settle after a round. Bounds: 10s..=1h.
    pub settle_limit: Duration,
    pub plant: Option<Plant>,
    /// Where to copy the processes' logs of each round that broke a rule or did not settle
    /// (`<dir>/round-<n>/<process>.log`). Default: nowhere.
    pub keep_logs: Option<PathBuf>,
}

impl ChaosConfig {
    /// Refuses values out of bounds, naming the field.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=ROUNDS_MAX).contains(&self.rounds),
            "rounds: {} is outside 1..={ROUNDS_MAX}",
            self.rounds
        );
        anyhow::ensure!(
            (Duration::from_secs(2)..=Duration::from_secs(600)).contains(&self.round),
            "round_seconds: {:?} is outside 2s..=10min",
            self.round
        );
        anyhow::ensure!(
            (Duration::from_millis(500)..=Duration::from_secs(60)).contains(&self.threshold),
            "threshold: {:?} is outside 500ms..=1min",
            self.threshold
        );
        anyhow::ensure!(
            self.rtt <= Duration::from_millis(500),
            "rtt: {:?} is over 500ms",
            self.rtt
        );
        anyhow::ensure!(!self.faults.is_empty(), "faults: give at least one fault kind");
        anyhow::ensure!(
            (1..=ROUNDS_PER_EPOCH_MAX).contains(&self.rounds_per_epoch),
            "rounds_per_epoch: {} is outside 1..={ROUNDS_PER_EPOCH_MAX}",
            self.rounds_per_epoch
        );
        anyhow::ensure!(
            (Duration::from_secs(10)..=Duration::from_secs(3600)).contains(&self.settle_limit),
            "settle_limit: {:?} is outside 10s..=1h",
            self.settle_limit
        );
        Ok(())
    }

    /// The command line that replays this campaign's faults.
    pub fn replay(&self) -> String {
        let faults: Vec<&str> = self.faults.iter().map(|kind| kind.name()).collect();
        format!(
            "redoguard bench chaos --seed {} --rounds {} --round-seconds {} --threshold {}ms --rtt {}ms --faults {} --rounds-per-epoch {}{}{} --dir DIR --json FILE",
            self.seed,
            self.rounds,
            self.round.as_secs_f64(),
            self.threshold.as_millis(),
            self.rtt.as_millis(),
            faults.join(","),
            self.rounds_per_epoch,
            match self.layout {
                Layout::Standard => String::new(),
                layout => format!(" --layout {}", layout.name()),
            },
            self.plant.map_or(String::new(), |plant| format!(" --plant {}", plant.name()))
        )
    }
}

/// Runs a campaign; see the module documentation. `progress` gets the seed, each round's
/// faults before it runs and its outcome after.
pub fn run(config: &ChaosConfig, progress: impl FnMut(&str)) -> anyhow::Result<ChaosReport> {
    config.validate()?;
    campaign::run(config, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ChaosConfig {
        ChaosConfig {
            binary: "redoguard".into(),
            dir: ".".into(),
            rounds: 10,
            seed: 1,
            round: Duration::from_secs(8),
            threshold: Duration::from_secs(2),
            rtt: Duration::from_millis(1),
            faults: FaultKind::ALL.to_vec(),
            layout: Layout::Standard,
            rounds_per_epoch: 10,
            settle_limit: Duration::from_secs(90),
            plant: None,
            keep_logs: None,
        }
    }

    #[test]
    fn config_bounds_are_named() {
        good().validate().unwrap();
        let message = |config: ChaosConfig| config.validate().unwrap_err().to_string();
        assert!(message(ChaosConfig { rounds: 0, ..good() }).starts_with("rounds"));
        assert!(
            message(ChaosConfig { round: Duration::from_secs(1), ..good() })
                .starts_with("round_seconds")
        );
        assert!(
            message(ChaosConfig { threshold: Duration::from_millis(100), ..good() })
                .starts_with("threshold")
        );
        assert!(message(ChaosConfig { faults: vec![], ..good() }).starts_with("faults"));
        assert!(
            message(ChaosConfig { rounds_per_epoch: 0, ..good() }).starts_with("rounds_per_epoch")
        );
        assert_eq!("lost-write".parse::<Plant>(), Ok(Plant::LostWrite));
        assert!("nope".parse::<Plant>().is_err());
    }

    #[test]
    fn the_replay_command_carries_what_decides_the_faults() {
        let replay =
            ChaosConfig { seed: 77, faults: vec![FaultKind::Kill, FaultKind::OneWay], ..good() }
                .replay();
        assert!(
            replay.contains(
                "--seed 77 --rounds 10 --round-seconds 8 --threshold 2000ms --rtt 1ms --faults kill,one_way"
            ),
            "{replay}"
        );
        assert!(!replay.contains("--layout"), "the standard layout's replay is as before");
        let replay = ChaosConfig { layout: Layout::FarSync, ..good() }.replay();
        assert!(replay.contains(" --rounds-per-epoch 10 --layout far-sync --dir"), "{replay}");
    }
}
