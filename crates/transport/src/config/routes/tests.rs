//! The route checks, one test per error, and the trees they leave.

use super::*;

/// Four members on loopback; `extra` is TOML inserted into the `[replication]` table after
/// the members (more keys need their own tables), `routes[i]` the routes of member i.
fn config(routes: [&str; 4], kinds: [&str; 4], extra: &str) -> ReplicationConfig {
    let names = ["a", "b", "c", "d"];
    let mut text = String::from("member = \"a\"\n");
    text.push_str(extra);
    for (index, name) in names.iter().enumerate() {
        text.push_str(&format!(
            "[[members]]\nname = \"{name}\"\nresp = \"127.0.0.1:{}\"\nadmin = \"127.0.0.1:{}\"\nredo = \"127.0.0.1:{}\"\n{}\n{}\n",
            7000 + index * 10,
            7001 + index * 10,
            7002 + index * 10,
            kinds[index],
            routes[index],
        ));
    }
    toml::from_str(&text).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

fn refused(config: &ReplicationConfig) -> (String, String) {
    config.validate().expect_err("the configuration should be refused")
}

const NONE: [&str; 4] = ["", "", "", ""];

#[test]
fn without_routes_the_primary_ships_to_every_other_member() {
    let config = config(NONE, NONE, "");
    config.validate().unwrap();
    let names: Vec<String> = config.destinations().into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["b", "c", "d"]);
    let tree = config.route_tree("c").unwrap();
    assert!(tree.hops.iter().all(|hop| hop.from == "c"));
    assert!(config.forwards("c").is_empty());
}

#[test]
fn a_cascade_makes_a_tree_and_the_primary_ships_only_to_its_first_hops() {
    // When a is the primary: a → b → c, a → d; when b is: b → a, b → c → d.
    let config = config(
        [
            "routes = [{ when = \"a\", to = \"b\", transport = \"sync\" }]",
            "routes = [{ when = \"a\", to = \"c\" }]",
            "routes = [{ when = \"b\", to = \"d\" }]",
            "",
        ],
        ["transport = \"async\"", "", "", ""],
        "",
    );
    config.validate().unwrap();
    let destinations = config.destinations();
    let names: Vec<&str> = destinations.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["b", "d"]);
    assert_eq!(destinations[0].transport, Transport::Sync, "the route's transport");
    let tree = config.route_tree("a").unwrap();
    assert_eq!(tree.source_of("c"), Some("b"));
    assert_eq!(tree.path("c"), ["a", "b", "c"]);
    assert_eq!(
        tree.render(&|hop| transport_name(hop.transport, hop.affirm).to_string()),
        ["a", "├─ b  SYNC AFFIRM", "│  └─ c  ASYNC", "└─ d  ASYNC"]
    );
    let under_b = config.route_tree("b").unwrap();
    assert_eq!(under_b.path("d"), ["b", "c", "d"]);
    // This file runs a: under b it forwards nothing; b's file would forward to c.
    assert!(config.forwards("b").is_empty());
    let mut b = config.clone();
    b.member = Some("b".into());
    let forwards: Vec<String> = b.forwards("a").into_iter().map(|d| d.name).collect();
    assert_eq!(forwards, ["c"]);
    assert_eq!(b.source("a").as_deref(), Some("a"));
    let mut c = config.clone();
    c.member = Some("c".into());
    assert_eq!(c.source("a").as_deref(), Some("b"));
    assert_eq!(c.forwards("b").into_iter().map(|d| d.name).collect::<Vec<_>>(), ["d"]);
}

#[test]
fn a_route_to_itself_is_refused_naming_the_member() {
    let (field, reason) =
        refused(&config(["", "routes = [{ when = \"a\", to = \"b\" }]", "", ""], NONE, ""));
    assert_eq!(field, "replication.members[1].routes[0].to");
    assert!(reason.contains("'b' has a route to itself"), "{reason}");
}

#[test]
fn a_route_to_the_primary_it_applies_under_is_refused() {
    let (field, reason) =
        refused(&config(["", "routes = [{ when = \"a\", to = \"a\" }]", "", ""], NONE, ""));
    assert_eq!(field, "replication.members[1].routes[0].to");
    assert!(reason.contains("'b' routes redo to 'a' while 'a' is the primary"), "{reason}");
}

#[test]
fn a_route_naming_an_unknown_member_is_refused() {
    let (field, reason) =
        refused(&config(["", "routes = [{ when = \"a\", to = \"x\" }]", "", ""], NONE, ""));
    assert_eq!(field, "replication.members[1].routes[0].to");
    assert!(reason.contains("'x' (a route of 'b') is not a member"), "{reason}");
    let (field, reason) =
        refused(&config(["", "routes = [{ when = \"y\", to = \"c\" }]", "", ""], NONE, ""));
    assert_eq!(field, "replication.members[1].routes[0].when");
    assert!(reason.contains("'y' is not a member"), "{reason}");
}

#[test]
fn a_loop_is_refused_naming_its_members() {
    let (field, reason) = refused(&config(
        [
            "",
            "routes = [{ when = \"a\", to = \"c\" }]",
            "routes = [{ when = \"a\", to = \"d\" }]",
            "routes = [{ when = \"a\", to = \"b\" }]",
        ],
        NONE,
        "",
    ));
    assert!(field.starts_with("replication.members["), "{field}");
    assert!(reason.contains("when 'a' is the primary, the routes make a loop"), "{reason}");
    for name in ["b", "c", "d"] {
        assert!(reason.contains(&format!("'{name}'")) || reason.contains(name), "{reason}");
    }
    // The same routes under another primary are not a loop if they do not apply there.
    config(
        [
            "",
            "routes = [{ when = \"a\", to = \"c\" }]",
            "routes = [{ when = \"a\", to = \"d\" }]",
            "",
        ],
        NONE,
        "",
    )
    .validate()
    .unwrap();
}

#[test]
fn a_member_reached_twice_is_refused() {
    let (field, reason) = refused(&config(
        [
            "",
            "routes = [{ when = \"a\", to = \"d\" }]",
            "routes = [{ when = \"a\", to = \"d\" }]",
            "",
        ],
        NONE,
        "",
    ));
    assert_eq!(field, "replication.members[2].routes[0].to");
    assert!(reason.contains("'d' would receive redo from both 'b' and 'c'"), "{reason}");
}

#[test]
fn a_forwarded_sync_hop_is_refused() {
    let (field, reason) = refused(&config(
        ["", "routes = [{ when = \"a\", to = \"c\", transport = \"sync\" }]", "", ""],
        NONE,
        "",
    ));
    assert_eq!(field, "replication.members[1].routes[0].transport");
    assert!(
        reason.contains("'b' forwards the redo of 'a' to 'c': a forwarded hop is ASYNC"),
        "{reason}"
    );
}

#[test]
fn sync_beyond_what_the_routes_give_the_primary_is_refused() {
    // b and c are SYNC members, but when a is the primary c is behind b: a has one SYNC
    // destination, and "any 2" needs two.
    let members = ["", "routes = [{ when = \"a\", to = \"c\" }]", "", ""];
    let sync = ["", "transport = \"sync\"", "transport = \"sync\"", "transport = \"sync\""];
    let (field, reason) = refused(&config(members, sync, "sync_quorum = \"any 3\"\n"));
    assert_eq!(field, "replication.sync_quorum");
    assert!(
        reason.contains("\"any 3\" needs 3 SYNC destinations; a primary here would have 2"),
        "{reason}"
    );
    config(members, sync, "sync_quorum = \"any 2\"\n").validate().unwrap();
    // Maximum Availability with the only SYNC member behind a cascade.
    let (field, reason) = refused(&config(
        ["", "routes = [{ when = \"a\", to = \"c\" }]", "", ""],
        ["", "", "transport = \"sync\"", ""],
        "protection_mode = \"maximum_availability\"\n",
    ));
    assert_eq!(field, "replication.protection_mode");
    assert!(reason.contains("maximum_availability needs another member"), "{reason}");
    // The primary's own route may make a hop SYNC.
    config(
        ["routes = [{ when = \"a\", to = \"b\", transport = \"sync\" }]", "", "", ""],
        NONE,
        "protection_mode = \"maximum_availability\"\n",
    )
    .validate()
    .unwrap();
}

#[test]
fn a_far_sync_is_never_a_primary_nor_a_failover_target() {
    let far_sync = ["", "kind = \"far_sync\"", "", ""];
    let (field, reason) =
        refused(&config(["", "", "routes = [{ when = \"b\", to = \"d\" }]", ""], far_sync, ""));
    assert_eq!(field, "replication.members[2].routes[0].when");
    assert!(reason.contains("'b' is a far sync: it is never a primary"), "{reason}");
    let observers = "[[observers]]\nname = \"o\"\nsentinel = \"127.0.0.1:26379\"\n";
    let fast_start = |target: &str| {
        format!("[fast_start_failover]\nenabled = true\ntarget = [{target}]\n{observers}")
    };
    // The tables go after the members: build them by hand.
    let mut with_target = config(NONE, far_sync, "");
    let extra: ReplicationConfig = toml::from_str(&fast_start("\"b\"")).unwrap();
    with_target.fast_start_failover = extra.fast_start_failover.clone();
    with_target.observers = extra.observers.clone();
    let (field, reason) = refused(&with_target);
    assert_eq!(field, "replication.fast_start_failover.target");
    assert!(reason.contains("'b' is a far sync"), "{reason}");
    // Without targets named, fast-start failover's targets leave the far sync out.
    with_target.fast_start_failover.target.clear();
    with_target.validate().unwrap();
    assert_eq!(with_target.failover_targets(), ["a", "c", "d"]);
    // A far sync's own file: the protection mode is checked for the members that may be
    // primary, not for it.
    let mut own = config(
        ["", "routes = [{ when = \"a\", to = \"c\" }]", "", ""],
        ["", "kind = \"far_sync\"\ntransport = \"sync\"", "", ""],
        "protection_mode = \"maximum_availability\"\nrole = \"standby\"\n",
    );
    own.member = Some("b".into());
    own.validate().unwrap();
    // A file that would start a far sync as a primary.
    let mut as_primary = config(NONE, far_sync, "");
    as_primary.member = Some("b".into());
    let (field, reason) = refused(&as_primary);
    assert_eq!(field, "replication.role");
    assert!(reason.contains("'b' is a far sync: it is never a primary"), "{reason}");
}

/// A fast-start target behind one relay the primary ships to itself is taken (the primary's
/// word reaches it through the relay; its failover seals the relay and takes the tail); behind
/// two relays it is refused, naming both; under Maximum Availability the primary's hop to the
/// relay must be SYNC.
#[test]
fn a_fast_start_target_behind_one_relay_is_taken_and_behind_two_refused() {
    let fast_start = |config: &mut ReplicationConfig, targets: &str| {
        let extra: ReplicationConfig = toml::from_str(&format!(
            "[fast_start_failover]\nenabled = true\ntarget = [{targets}]\n[[observers]]\nname = \"o\"\nsentinel = \"127.0.0.1:26379\"\n"
        ))
        .unwrap();
        config.fast_start_failover = extra.fast_start_failover;
        config.observers = extra.observers;
    };
    // a → b → c: c behind one relay.
    let mut one = config(
        ["", "routes = [{ when = \"a\", to = \"c\" }]", "", ""],
        ["transport = \"sync\"", "transport = \"sync\"", "transport = \"sync\"", ""],
        "protection_mode = \"maximum_availability\"\n",
    );
    fast_start(&mut one, "\"b\", \"c\"");
    one.validate().unwrap();
    let settings = one.fast_start_settings();
    assert_eq!(settings.relay_of("a", "c"), Some("b"));
    assert_eq!(settings.relay_of("a", "b"), None);
    assert_eq!(settings.relay_of("b", "c"), None, "under b, a and c are shipped to by b");
    // Maximum Performance: the same.
    one.protection_mode = crate::config::ProtectionMode::MaximumPerformance;
    one.validate().unwrap();
    // Under Maximum Availability the relay must be shipped to SYNC by the primary.
    let mut async_relay = config(
        ["", "routes = [{ when = \"a\", to = \"c\" }]", "", ""],
        ["transport = \"sync\"", "", "transport = \"sync\"", ""],
        "protection_mode = \"maximum_availability\"\n",
    );
    fast_start(&mut async_relay, "\"c\"");
    let (field, reason) = refused(&async_relay);
    assert_eq!(field, "replication.fast_start_failover.target");
    assert!(
        reason.contains("'c' is reached through 'b' (ASYNC) when 'a' is the primary"),
        "{reason}"
    );
    // a → b → c → d: d behind two relays, refused by name, in either mode.
    let mut two = config(
        [
            "",
            "routes = [{ when = \"a\", to = \"c\" }]",
            "routes = [{ when = \"a\", to = \"d\" }]",
            "",
        ],
        [
            "transport = \"sync\"",
            "transport = \"sync\"",
            "transport = \"sync\"",
            "transport = \"sync\"",
        ],
        "protection_mode = \"maximum_availability\"\n",
    );
    fast_start(&mut two, "\"b\", \"d\"");
    for mode in [
        crate::config::ProtectionMode::MaximumAvailability,
        crate::config::ProtectionMode::MaximumPerformance,
    ] {
        two.protection_mode = mode;
        let (field, reason) = refused(&two);
        assert_eq!(field, "replication.fast_start_failover.target");
        assert!(
            reason.contains(
                "'d' receives redo from 'c', which receives it from 'b', when 'a' is the primary"
            ),
            "{reason}"
        );
    }
    fast_start(&mut two, "\"b\", \"c\"");
    two.validate().unwrap();
}

#[test]
fn an_alternate_route_stands_in_for_the_far_sync_and_is_refused_by_name_otherwise() {
    // a → b (far sync) → c; a's alternate to c while b is lost.
    let far_sync = ["", "kind = \"far_sync\"", "", ""];
    let routes = |a: &str| {
        [
            a.to_string(),
            "routes = [{ when = \"a\", to = \"c\" }]".to_string(),
            String::new(),
            String::new(),
        ]
    };
    let build = |a: &str| {
        let routes = routes(a);
        config([&routes[0], &routes[1], &routes[2], &routes[3]], far_sync, "")
    };
    let good = build(
        "routes = [{ when = \"a\", to = \"c\", alternate_of = \"b\", after = \"2s\", transport = \"sync\" }]",
    );
    good.validate().unwrap();
    // The tree is unchanged (c receives from b); the alternate is a deferred destination.
    assert_eq!(good.route_tree("a").unwrap().source_of("c"), Some("b"));
    let destinations = good.destinations();
    let shipped: Vec<(&str, DestinationState, Transport)> =
        destinations.iter().map(|d| (d.name.as_str(), d.state, d.transport)).collect();
    assert_eq!(
        shipped,
        [
            ("b", DestinationState::Enable, Transport::Async),
            ("d", DestinationState::Enable, Transport::Async),
            ("c", DestinationState::Defer, Transport::Sync)
        ]
    );
    assert_eq!(
        good.alternates("a"),
        [Alternate {
            member: "c".into(),
            instead_of: "b".into(),
            transport: Transport::Sync,
            after: Duration::from_secs(2)
        }]
    );
    assert!(good.alternates("c").is_empty());
    // What a switchover compares: every member a may ship to directly, and those it waits
    // for as it opens (its enabled first hops: not the alternate).
    assert_eq!(good.hops_of("a"), ["b", "d", "c"]);
    assert_eq!(good.enabled_hops_of("a"), ["b", "d"]);

    // Standing in for a member that is not the primary's destination.
    let (field, reason) =
        refused(&build("routes = [{ when = \"a\", to = \"d\", alternate_of = \"c\" }]"));
    assert_eq!(field, "replication.members[0].routes[0].alternate_of");
    assert!(reason.contains("'c' is not a destination of 'a'"), "{reason}");
    // To a member that does not receive from the member it stands in for.
    let (field, reason) =
        refused(&build("routes = [{ when = \"a\", to = \"d\", alternate_of = \"b\" }]"));
    assert_eq!(field, "replication.members[0].routes[0].to");
    assert!(reason.contains("'d' does not receive redo from 'b'"), "{reason}");
    // Not a member.
    let (_, reason) =
        refused(&build("routes = [{ when = \"a\", to = \"c\", alternate_of = \"x\" }]"));
    assert!(reason.contains("'x' (an alternate route of 'a') is not a member"), "{reason}");
    // Out of bounds.
    let (field, reason) = refused(&build(
        "routes = [{ when = \"a\", to = \"c\", alternate_of = \"b\", after = \"10ms\" }]",
    ));
    assert_eq!(field, "replication.members[0].routes[0].after");
    assert!(reason.contains("outside 100ms..=1h"), "{reason}");
    // Another member's alternate route.
    let mut others = routes("");
    others[3] = "routes = [{ when = \"a\", to = \"c\", alternate_of = \"b\" }]".into();
    let (field, reason) =
        refused(&config([&others[0], &others[1], &others[2], &others[3]], far_sync, ""));
    assert_eq!(field, "replication.members[3].routes[0].alternate_of");
    assert!(reason.contains("an alternate route is the primary's own"), "{reason}");
}
