//! Redo routes (Data Guard's `RedoRoutes`): per member, "when X is the primary, I forward to
//! Y with this transport". From them, under each primary, the member every other member
//! receives redo from (`RouteTree`), and the checks that refuse a route by name: a route to
//! itself or to the primary, an unknown member, a member reached twice, a loop, a forwarded
//! SYNC hop, a far sync as a primary or a failover target.
//!
//! A member no route names under a primary receives from that primary directly, as without
//! routes; so a configuration without routes ships from the primary to every other member.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::destination::{DestinationConfig, DestinationState, Transport};
use super::member::MemberConfig;
use super::{ReplicationConfig, RoleConfig};

/// One route of a member (`[[replication.members]] routes = [{ when, to, transport }]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The primary under which the route applies: a member's name. This member's own name is
    /// Data Guard's `LOCAL`: the route applies while it is the primary itself. Required.
    pub when: String,
    /// The member this one ships (as the primary) or forwards (as a standby or far sync) to.
    /// Required; not this member, not `when`.
    pub to: String,
    /// `sync` or `async`. From the primary (`when` is this member): default the `to` member's
    /// `transport`. Forwarded (`when` is another member): `async` only, the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    /// An alternate route (Data Guard's `ALTERNATE`): the primary (`when`, this member) ships
    /// to `to` itself only while this member, its own destination and `to`'s source under it
    /// (a far sync), is lost: not connected for `after`. When it is back, the primary stops
    /// and `to` receives from it again. Default: none (a route of the tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alternate_of: Option<String>,
    /// With `alternate_of`: how long that member is not connected before the alternate takes
    /// over. Default: 5s; 100ms..=1h.
    #[serde(
        default = "default_alternate_after",
        with = "units::serde_human::duration",
        skip_serializing_if = "is_default_alternate_after"
    )]
    pub after: Duration,
}

fn default_alternate_after() -> Duration {
    Duration::from_secs(5)
}

fn is_default_alternate_after(after: &Duration) -> bool {
    *after == default_alternate_after()
}

/// An alternate route of a primary (`RouteConfig::alternate_of`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alternate {
    /// The member the primary ships to while the alternate is in use.
    pub member: String,
    /// The member whose loss puts it in use (`member`'s source in the route tree).
    pub instead_of: String,
    pub transport: Transport,
    pub after: Duration,
}

/// What a member is: a database (primary or standby by its role), or a far sync (standby logs
/// and archive only: it relays redo, is never a primary and never a failover target).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberKind {
    #[default]
    Database,
    FarSync,
}

impl MemberKind {
    pub fn is_default(&self) -> bool {
        *self == MemberKind::Database
    }
}

/// One hop under a primary: `member` receives from `from` with `transport`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    pub member: String,
    pub from: String,
    pub transport: Transport,
    /// With SYNC: AFFIRM (the receiving member's `affirm`).
    pub affirm: bool,
}

/// Under one primary, where every other member receives its redo from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteTree {
    pub primary: String,
    /// Every other member, in the configuration's order.
    pub hops: Vec<Hop>,
}

impl RouteTree {
    /// The member `member` receives from (`None` for the primary and unknown names).
    pub fn source_of(&self, member: &str) -> Option<&str> {
        self.hops.iter().find(|hop| hop.member == member).map(|hop| hop.from.as_str())
    }

    /// The hops `member` sends: as the primary its direct destinations, otherwise what it
    /// forwards.
    pub fn sent_by<'a>(&'a self, member: &'a str) -> impl Iterator<Item = &'a Hop> + 'a {
        self.hops.iter().filter(move |hop| hop.from == member)
    }

    /// The members between the primary and `member`, both included, primary first.
    pub fn path(&self, member: &str) -> Vec<String> {
        let mut path = vec![member.to_string()];
        let mut at = member;
        while let Some(from) = self.source_of(at) {
            path.push(from.to_string());
            at = from;
            if path.len() > self.hops.len() + 1 {
                break;
            }
        }
        path.reverse();
        path
    }

    /// The tree as lines for a person, the primary first, each member under its source;
    /// `label` says what follows a member's name.
    pub fn render(&self, label: &dyn Fn(&Hop) -> String) -> Vec<String> {
        let mut lines = vec![self.primary.clone()];
        self.render_below(&self.primary, "", label, &mut lines);
        lines
    }

    fn render_below(
        &self,
        member: &str,
        indent: &str,
        label: &dyn Fn(&Hop) -> String,
        lines: &mut Vec<String>,
    ) {
        let below: Vec<&Hop> = self.sent_by(member).collect();
        for (index, hop) in below.iter().enumerate() {
            let last = index + 1 == below.len();
            lines.push(format!(
                "{indent}{}{}  {}",
                if last { "└─ " } else { "├─ " },
                hop.member,
                label(hop)
            ));
            let deeper = format!("{indent}{}", if last { "   " } else { "│  " });
            self.render_below(&hop.member, &deeper, label, lines);
        }
    }
}

/// `SYNC AFFIRM`, `SYNC NOAFFIRM` or `ASYNC`.
pub fn transport_name(transport: Transport, affirm: bool) -> &'static str {
    match (transport, affirm) {
        (Transport::Sync, true) => "SYNC AFFIRM",
        (Transport::Sync, false) => "SYNC NOAFFIRM",
        (Transport::Async, _) => "ASYNC",
    }
}

/// The tree under `primary` of `members`; an error names the route (field) and the members.
/// Assumes each route's names were checked (`check_route`).
pub fn route_tree(members: &[MemberConfig], primary: &str) -> Result<RouteTree, (String, String)> {
    let mut hops: Vec<Hop> = Vec::new();
    // Routes first, then every member no route reaches receives from the primary.
    let mut routed: Vec<(usize, usize, Hop)> = Vec::new();
    for (index, member) in members.iter().enumerate() {
        for (route_index, route) in member.routes.iter().enumerate() {
            if route.when != primary || route.alternate_of.is_some() {
                continue;
            }
            let Some(to) = members.iter().find(|other| other.name == route.to) else { continue };
            let transport = route.transport.unwrap_or(if member.name == primary {
                to.transport
            } else {
                Transport::Async
            });
            let hop = Hop {
                member: to.name.clone(),
                from: member.name.clone(),
                transport,
                affirm: to.affirm,
            };
            if let Some((_, _, earlier)) = routed.iter().find(|(_, _, hop)| hop.member == route.to)
            {
                return Err((
                    format!("replication.members[{index}].routes[{route_index}].to"),
                    format!(
                        "when '{primary}' is the primary, '{}' would receive redo from both '{}' and '{}': name one route to it",
                        route.to, earlier.from, member.name
                    ),
                ));
            }
            routed.push((index, route_index, hop));
        }
    }
    for member in members {
        if member.name == primary {
            continue;
        }
        match routed.iter().find(|(_, _, hop)| hop.member == member.name) {
            Some((_, _, hop)) => hops.push(hop.clone()),
            None => hops.push(Hop {
                member: member.name.clone(),
                from: primary.to_string(),
                transport: member.transport,
                affirm: member.affirm,
            }),
        }
    }
    let tree = RouteTree { primary: primary.to_string(), hops };
    // Every member's chain of sources must reach the primary: otherwise it loops.
    for (index, _, hop) in &routed {
        let mut chain: Vec<&str> = vec![hop.member.as_str()];
        let mut at = hop.member.as_str();
        while let Some(from) = tree.source_of(at) {
            if let Some(first) = chain.iter().position(|&name| name == from) {
                let mut cycle: Vec<&str> = chain[first..].to_vec();
                cycle.reverse();
                cycle.push(cycle[0]);
                return Err((
                    format!("replication.members[{index}].routes"),
                    format!(
                        "when '{primary}' is the primary, the routes make a loop: {} (redo from '{primary}' never reaches them)",
                        cycle.join(" → ")
                    ),
                ));
            }
            chain.push(from);
            at = from;
        }
    }
    Ok(tree)
}

impl ReplicationConfig {
    /// The route tree under `primary`, in the configuration form.
    pub fn route_tree(&self, primary: &str) -> Option<RouteTree> {
        if !self.has_members() {
            return None;
        }
        route_tree(&self.members, primary).ok()
    }

    /// Whether any member names a route.
    pub fn has_routes(&self) -> bool {
        self.members.iter().any(|member| !member.routes.is_empty())
    }

    /// The members `primary` may ship to directly (its hops in the route tree, and its
    /// alternates), by name, whatever their state: the first hops a switchover's old primary
    /// had (`roles::switchover::unseen_hops`).
    pub fn hops_of(&self, primary: &str) -> Vec<String> {
        self.routed_destinations(primary).into_iter().map(|destination| destination.name).collect()
    }

    /// The members `primary` ships to directly and would wait for as it opens unconfirmed:
    /// its enabled hops (not a deferred destination, nor an alternate while its far sync is
    /// there), as `destinations` gives them to the confirmation.
    pub fn enabled_hops_of(&self, primary: &str) -> Vec<String> {
        self.routed_destinations(primary)
            .into_iter()
            .filter(|destination| destination.state == DestinationState::Enable)
            .map(|destination| destination.name)
            .collect()
    }

    /// Where this member ships when it is the primary: its hops in the route tree (every other
    /// member, without routes), with the route's transport.
    pub(super) fn routed_destinations(&self, primary: &str) -> Vec<DestinationConfig> {
        let Ok(tree) = route_tree(&self.members, primary) else {
            // (Refused by `validate`; never used to ship.)
            return Vec::new();
        };
        let mut destinations: Vec<DestinationConfig> = tree
            .sent_by(primary)
            .filter_map(|hop| {
                let mut destination = self.member_named(&hop.member)?.destination();
                destination.transport = hop.transport;
                Some(destination)
            })
            .collect();
        // Each alternate is a destination deferred until its far sync is lost.
        for alternate in self.alternates(primary) {
            let Some(member) = self.member_named(&alternate.member) else { continue };
            let mut destination = member.destination();
            destination.transport = alternate.transport;
            destination.state = DestinationState::Defer;
            destinations.push(destination);
        }
        destinations
    }

    /// The alternate routes of `primary` (its own routes with `alternate_of`).
    pub fn alternates(&self, primary: &str) -> Vec<Alternate> {
        let Some(member) = self.member_named(primary) else { return Vec::new() };
        member
            .routes
            .iter()
            .filter(|route| route.when == primary)
            .filter_map(|route| {
                let instead_of = route.alternate_of.clone()?;
                let to = self.member_named(&route.to)?;
                Some(Alternate {
                    member: to.name.clone(),
                    instead_of,
                    transport: route.transport.unwrap_or(to.transport),
                    after: route.after,
                })
            })
            .collect()
    }

    /// Whether `sender` is `primary` shipping to this member over an alternate route.
    pub fn is_alternate_of(&self, primary: &str, member: &str) -> bool {
        self.alternates(primary).iter().any(|alternate| alternate.member == member)
    }

    /// What this member forwards to, ASYNC, while `primary` is the primary and this member a
    /// standby or far sync: its hops in `primary`'s route tree.
    pub fn forwards(&self, primary: &str) -> Vec<DestinationConfig> {
        let Some(this) = self.member.as_deref() else { return Vec::new() };
        if this == primary {
            return Vec::new();
        }
        let Some(tree) = self.route_tree(primary) else { return Vec::new() };
        tree.sent_by(this)
            .filter_map(|hop| {
                let mut destination = self.member_named(&hop.member)?.destination();
                destination.transport = Transport::Async;
                Some(destination)
            })
            .collect()
    }

    /// The member this one receives redo from while `primary` is the primary.
    pub fn source(&self, primary: &str) -> Option<String> {
        let this = self.member.as_deref()?;
        self.route_tree(primary)?.source_of(this).map(str::to_string)
    }

    /// Whether `member` is a far sync.
    pub fn is_far_sync(&self, member: &str) -> bool {
        self.member_named(member).is_some_and(|member| member.kind == MemberKind::FarSync)
    }

    /// The members that may be the primary (every database, no far sync).
    pub fn primary_candidates(&self) -> impl Iterator<Item = &MemberConfig> {
        self.members.iter().filter(|member| member.kind == MemberKind::Database)
    }

    /// Every route's names, then the tree under every member that may be primary. Called from
    /// `validate_members`, after the members' names are checked.
    pub(super) fn validate_routes(&self) -> Result<(), (String, String)> {
        let invalid = |field: String, reason: String| Err((field, reason));
        for (index, member) in self.members.iter().enumerate() {
            if member.kind == MemberKind::FarSync
                && self.member.as_deref() == Some(member.name.as_str())
                && self.role == RoleConfig::Primary
            {
                return invalid(
                    "replication.role".into(),
                    format!(
                        "'{}' is a far sync: it is never a primary (role = \"standby\")",
                        member.name
                    ),
                );
            }
            for (route_index, route) in member.routes.iter().enumerate() {
                let field =
                    |key: &str| format!("replication.members[{index}].routes[{route_index}].{key}");
                let Some(when) = self.member_named(&route.when) else {
                    return invalid(
                        field("when"),
                        format!(
                            "'{}' is not a member (a route of '{}' names the primary it applies under)",
                            route.when, member.name
                        ),
                    );
                };
                if when.kind == MemberKind::FarSync {
                    return invalid(
                        field("when"),
                        format!(
                            "'{}' is a far sync: it is never a primary, so no route of '{}' applies under it",
                            route.when, member.name
                        ),
                    );
                }
                let Some(to) = self.member_named(&route.to) else {
                    return invalid(
                        field("to"),
                        format!("'{}' (a route of '{}') is not a member", route.to, member.name),
                    );
                };
                if to.name == member.name {
                    return invalid(
                        field("to"),
                        format!("'{}' has a route to itself", member.name),
                    );
                }
                if to.name == when.name {
                    return invalid(
                        field("to"),
                        format!(
                            "'{}' routes redo to '{}' while '{}' is the primary itself",
                            member.name, to.name, when.name
                        ),
                    );
                }
                if when.name != member.name && route.transport == Some(Transport::Sync) {
                    return invalid(
                        field("transport"),
                        format!(
                            "'{}' forwards the redo of '{}' to '{}': a forwarded hop is ASYNC (only the primary's own routes may be SYNC, where its protection mode counts them)",
                            member.name, when.name, to.name
                        ),
                    );
                }
            }
        }
        for primary in self.primary_candidates() {
            route_tree(&self.members, &primary.name)?;
        }
        self.validate_alternates()
    }

    /// An alternate route is the primary's own, to a member that receives from one of the
    /// primary's destinations, instead of that destination.
    fn validate_alternates(&self) -> Result<(), (String, String)> {
        for (index, member) in self.members.iter().enumerate() {
            for (route_index, route) in member.routes.iter().enumerate() {
                let Some(instead_of) = &route.alternate_of else { continue };
                let field =
                    |key: &str| format!("replication.members[{index}].routes[{route_index}].{key}");
                let invalid = |key: &str, reason: String| Err((field(key), reason));
                if route.when != member.name {
                    return invalid(
                        "alternate_of",
                        format!(
                            "'{}' names an alternate route under '{}': an alternate route is the primary's own (when = \"{}\")",
                            member.name, route.when, member.name
                        ),
                    );
                }
                if self.member_named(instead_of).is_none() {
                    return invalid(
                        "alternate_of",
                        format!(
                            "'{instead_of}' (an alternate route of '{}') is not a member",
                            member.name
                        ),
                    );
                }
                if !(Duration::from_millis(100)..=Duration::from_secs(3600)).contains(&route.after)
                {
                    return invalid(
                        "after",
                        format!(
                            "{:?} (an alternate route of '{}') is outside 100ms..=1h",
                            route.after, member.name
                        ),
                    );
                }
                let Ok(tree) = route_tree(&self.members, &member.name) else { continue };
                if tree.source_of(instead_of) != Some(member.name.as_str()) {
                    return invalid(
                        "alternate_of",
                        format!(
                            "'{instead_of}' is not a destination of '{}' when '{}' is the primary: an alternate route stands in for one of the primary's own destinations",
                            member.name, member.name
                        ),
                    );
                }
                if tree.source_of(&route.to) != Some(instead_of.as_str()) {
                    return invalid(
                        "to",
                        format!(
                            "'{}' does not receive redo from '{instead_of}' when '{}' is the primary: the alternate route of '{}' to it would stand in for nothing",
                            route.to, member.name, member.name
                        ),
                    );
                }
                if member
                    .routes
                    .iter()
                    .filter(|other| {
                        other.when == member.name
                            && other.to == route.to
                            && other.alternate_of.is_some()
                    })
                    .count()
                    > 1
                {
                    return invalid(
                        "to",
                        format!("'{}' names two alternate routes to '{}'", member.name, route.to),
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
