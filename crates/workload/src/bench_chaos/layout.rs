//! The layouts `bench chaos` runs (`--layout`): which members a configuration has, how redo
//! is routed between them under each possible primary, and which roles the faults draw from.
//!
//! - `standard`: `east` (the first primary) and `west`, each SYNC AFFIRM when a standby and
//!   each a fast-start target, and `south` ASYNC.
//! - `far-sync`: the same three, and the far sync `fs` (`kind = "far_sync"`, SYNC AFFIRM)
//!   in a site of its own. Under `east`, `east` ships SYNC AFFIRM to `fs` only and `fs`
//!   forwards to `west`, the fast-start target behind the relay
//!   (docs/fast-start-failover.md, "Targets behind a far sync"); `south` gets its redo from the
//!   primary. Under `west` there is no route: `west` ships SYNC AFFIRM to `east` (its target)
//!   and to `fs`, ASYNC to `south`, as `redoguard demo --far-sync` configures it. `fs` is never
//!   a primary nor a failover target; the faults hit it as any other process (its own role,
//!   `far sync`).

use serde::Serialize;

use super::faults::Role;

/// One member of a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemberSpec {
    pub(crate) name: &'static str,
    /// How the primary (or, for a forwarded hop, its relay) ships to it: `sync` or `async`.
    pub(crate) transport: &'static str,
    /// The role a new database starts in.
    pub(crate) role: &'static str,
    /// A far sync: standby logs and archives only, never a primary nor a target.
    pub(crate) far_sync: bool,
    /// Its routes: (while this member is the primary, this member forwards to that one).
    pub(crate) routes: &'static [(&'static str, &'static str)],
}

const fn member(name: &'static str, transport: &'static str, role: &'static str) -> MemberSpec {
    MemberSpec { name, transport, role, far_sync: false, routes: &[] }
}

const STANDARD: [MemberSpec; 3] = [
    member("east", "sync", "primary"),
    member("west", "sync", "standby"),
    member("south", "async", "standby"),
];

/// The far sync of the `far-sync` layout.
pub(crate) const FAR_SYNC: &str = "fs";

const FAR_SYNC_MEMBERS: [MemberSpec; 4] = [
    member("east", "sync", "primary"),
    member("west", "sync", "standby"),
    member("south", "async", "standby"),
    MemberSpec {
        name: FAR_SYNC,
        transport: "sync",
        role: "standby",
        far_sync: true,
        routes: &[("east", "west")],
    },
];

/// What processes a campaign runs, and how redo flows between them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// `east`, `west` (SYNC AFFIRM, fast-start targets), `south` (ASYNC).
    #[default]
    Standard,
    /// The same, with `east` shipping SYNC AFFIRM to the far sync `fs`, which forwards to
    /// `west`; `south` ASYNC from the primary.
    FarSync,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Standard => "standard",
            Layout::FarSync => "far-sync",
        }
    }

    /// The members, in the order of the configuration and of their sites.
    pub(crate) fn members(self) -> &'static [MemberSpec] {
        match self {
            Layout::Standard => &STANDARD,
            Layout::FarSync => &FAR_SYNC_MEMBERS,
        }
    }

    pub(crate) fn member(self, name: &str) -> Option<&'static MemberSpec> {
        self.members().iter().find(|member| member.name == name)
    }

    pub(crate) fn member_names(self) -> impl Iterator<Item = &'static str> {
        self.members().iter().map(|member| member.name)
    }

    /// The order the members start in: the standbys (the far sync before the standby it
    /// forwards to is no matter: each waits for its source), then the primary.
    pub(crate) fn start_order(self) -> Vec<&'static str> {
        let standbys = self.members().iter().filter(|member| member.role != "primary");
        let primaries = self.members().iter().filter(|member| member.role == "primary");
        standbys.chain(primaries).map(|member| member.name).collect()
    }

    /// The roles the faults draw their targets from: every process, each in a site of its own.
    pub fn roles(self) -> &'static [Role] {
        match self {
            Layout::Standard => &Role::ALL,
            Layout::FarSync => &Role::WITH_FAR_SYNC,
        }
    }

    /// The far sync, if the layout has one.
    pub(crate) fn far_sync(self) -> Option<&'static str> {
        self.members().iter().find(|member| member.far_sync).map(|member| member.name)
    }

    /// Members that can be failed over to (and switched over to): SYNC, not a far sync. The
    /// configuration's fast-start targets, in order.
    pub(crate) fn targets(self) -> Vec<&'static str> {
        self.members()
            .iter()
            .filter(|member| member.transport == "sync" && !member.far_sync)
            .map(|member| member.name)
            .collect()
    }

    pub(crate) fn is_target(self, name: &str) -> bool {
        self.targets().contains(&name)
    }

    /// Who sends `name` its redo while `primary` is the primary: the member whose route names
    /// it under `primary` (a relay), or `None` when the primary ships to it itself.
    pub(crate) fn source(self, name: &str, primary: &str) -> Option<&'static str> {
        self.members()
            .iter()
            .find(|member| member.routes.iter().any(|(when, to)| *when == primary && *to == name))
            .map(|member| member.name)
    }

    /// The names of the sites, in order: the members, the observers, the clients'.
    pub(crate) fn site_names(self, observers: &[&str]) -> Vec<String> {
        let members = self.member_names().map(str::to_string);
        members
            .chain(observers.iter().map(|name| name.to_string()))
            .chain(["clients".to_string()])
            .collect()
    }
}

impl std::str::FromStr for Layout {
    type Err = String;

    fn from_str(text: &str) -> Result<Layout, String> {
        match text {
            "standard" => Ok(Layout::Standard),
            "far-sync" => Ok(Layout::FarSync),
            other => Err(format!("'{other}' is not a layout (standard, far-sync)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_layout_is_the_campaigns_first_one() {
        let layout = Layout::default();
        assert_eq!(layout, Layout::Standard);
        assert_eq!(layout.member_names().collect::<Vec<_>>(), ["east", "west", "south"]);
        assert_eq!(layout.start_order(), ["west", "south", "east"]);
        assert_eq!(layout.targets(), ["east", "west"]);
        assert_eq!(layout.far_sync(), None);
        assert_eq!(layout.roles(), Role::ALL);
        for primary in ["east", "west"] {
            assert!(layout.member_names().all(|name| layout.source(name, primary).is_none()));
        }
    }

    #[test]
    fn the_far_sync_layout_relays_to_west_under_east_and_is_never_a_target() {
        let layout: Layout = "far-sync".parse().unwrap();
        assert_eq!(layout.member_names().collect::<Vec<_>>(), ["east", "west", "south", "fs"]);
        assert_eq!(layout.start_order(), ["west", "south", "fs", "east"]);
        assert_eq!(layout.far_sync(), Some("fs"));
        assert_eq!(layout.targets(), ["east", "west"], "the far sync is no target");
        assert!(!layout.is_target("fs") && !layout.is_target("south"));
        // Under east: west behind fs, the others from east.
        assert_eq!(layout.source("west", "east"), Some("fs"));
        assert_eq!(layout.source("south", "east"), None);
        assert_eq!(layout.source("fs", "east"), None);
        // Under west: no relay.
        assert!(layout.member_names().all(|name| layout.source(name, "west").is_none()));
        // The faults hit the far sync too.
        assert!(layout.roles().contains(&Role::FarSync));
        assert_eq!(layout.roles().len(), Role::ALL.len() + 1);
        assert_eq!(
            layout.site_names(&["obs1", "obs2"]),
            ["east", "west", "south", "fs", "obs1", "obs2", "clients"]
        );
        assert!("far".parse::<Layout>().unwrap_err().contains("'far' is not a layout"));
    }
}
