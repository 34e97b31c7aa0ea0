//! Which destinations' acknowledgements count for a primary's fast-start targets: each target
//! its own, or, for a target its routes reach through one relay (a far sync, or a cascading
//! standby), the relay's. Sound because every failover to such a target, the observer's
//! included, first seals the relay and takes its tail, or does not happen
//! (docs/fast-start-failover.md, "Targets behind a far sync"). The one place this is decided:
//! the primary's core (`Primary`) and its transport (the write's wait, the heartbeats) both ask
//! it.

use std::collections::{BTreeMap, BTreeSet};

use super::Settings;

/// A primary's fast-start targets and the relay each is reached through.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Reach {
    /// The fast-start targets other than the primary.
    targets: Vec<String>,
    /// The targets the primary's routes reach through a relay, and that relay.
    relays: BTreeMap<String, String>,
}

impl Reach {
    /// What `settings` say when `me` is the primary.
    pub fn new(settings: &Settings, me: &str) -> Reach {
        let targets: Vec<String> =
            settings.targets.iter().filter(|target| target.as_str() != me).cloned().collect();
        let relays = targets
            .iter()
            .filter_map(|target| {
                settings.relay_of(me, target).map(|relay| (target.clone(), relay.to_string()))
            })
            .collect();
        Reach { targets, relays }
    }

    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    pub fn is_target(&self, name: &str) -> bool {
        self.targets.iter().any(|target| target == name)
    }

    /// The relay `target` receives the primary's redo from (none: shipped to by it).
    pub fn relay_of(&self, target: &str) -> Option<&str> {
        self.relays.get(target).map(String::as_str)
    }

    /// The destination whose acknowledgements count for `target`: its relay, or itself.
    pub fn stands_for<'a>(&'a self, target: &'a str) -> &'a str {
        self.relay_of(target).unwrap_or(target)
    }

    /// The fast-start targets behind `relay`.
    pub fn behind(&self, relay: &str) -> Vec<String> {
        self.relays
            .iter()
            .filter(|(_, through)| through.as_str() == relay)
            .map(|(target, _)| target.clone())
            .collect()
    }

    /// Whether `name` is a destination whose acknowledgements count: a target, or the relay of
    /// one.
    pub fn counts(&self, name: &str) -> bool {
        self.is_target(name) || self.relays.values().any(|relay| relay == name)
    }

    /// Whether `target` holds a write that the destinations in `holding` hold durably: it is
    /// among them, or its relay is.
    pub fn holds(&self, target: &str, holding: &BTreeSet<String>) -> bool {
        holding.contains(target)
            || self.relay_of(target).is_some_and(|relay| holding.contains(relay))
    }

    /// Whether every target holds a write that the destinations in `holding` hold durably.
    pub fn all_hold(&self, holding: &BTreeSet<String>) -> bool {
        self.targets.iter().all(|target| self.holds(target, holding))
    }
}
