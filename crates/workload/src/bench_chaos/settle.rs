//! After a round's faults are healed: waiting until the configuration has settled — one open
//! primary that both observers name, every other member its standby (connected, caught up, not
//! fenced), fast-start failover armed again — and helping it as a DBA would: a process that
//! died by itself is started again, a member left fenced is reinstated (`redoguard reinstate`)
//! if the observer has not done it, a switchover left half done is completed, and a failover
//! left half done (the old primary fenced, the target unable to open: a full disk) is run
//! again, as the failover command's error tells the DBA to.
//!
//! With a far sync (`--layout far-sync`), a member behind it is caught up when its relay
//! streams to it and it follows the primary through it; the far sync itself is caught up as a
//! SYNC standby (synchronized on the primary), and is never taken for a failover target.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use admin::GateState;
use transport::Phase;

use super::cluster::{Cluster, OBSERVERS};

/// How long a member may stay fenced, with a primary open, before the campaign reinstates it
/// (the observer's `auto_reinstate` goes first).
const REINSTATE_AFTER: Duration = Duration::from_secs(6);
/// How long without any primary before the campaign completes a half-done switchover or
/// failover.
const NO_PRIMARY_AFTER: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(250);

/// A settled configuration: who holds which role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settled {
    pub(crate) primary: &'static str,
    /// The SYNC standby: the fast-start target.
    pub(crate) sync_standby: &'static str,
    pub(crate) async_standby: &'static str,
    pub(crate) active_observer: &'static str,
    pub(crate) standby_observer: &'static str,
    /// The far sync, in a layout that has one.
    pub(crate) far_sync: Option<&'static str>,
    pub(crate) at: Instant,
}

/// What one look at the members found.
#[derive(Debug, Default)]
struct Look {
    /// Members that are open primaries: role primary, not fenced, gate open.
    open_primaries: Vec<&'static str>,
    fenced: Vec<&'static str>,
    /// A member with a switchover prepared towards another (it is a standby waiting).
    pending_switchover: Option<String>,
    /// Failover targets (SYNC members, no far sync) that are standbys, not fenced: what a
    /// failover would go to.
    sync_standbys: Vec<&'static str>,
    /// Why it has not settled, for the error if it never does.
    waiting_for: Vec<String>,
}

/// Waits (up to `limit`) until the configuration has settled, helping it along; `notes` gets a
/// line for each thing done. Fails naming what it still waited for.
pub(crate) fn settle(
    cluster: &mut Cluster<'_>,
    limit: Duration,
    notes: &mut Vec<String>,
) -> anyhow::Result<Settled> {
    let started = Instant::now();
    let mut fenced_since: BTreeMap<&'static str, Instant> = BTreeMap::new();
    let mut no_primary_since: Option<Instant> = None;
    let mut completed_switchover = false;
    let mut failed_over_again = false;
    loop {
        crate::interrupt::check()?;
        for name in cluster.reap_exited() {
            notes.push(format!("{name} had exited; started again"));
        }
        for name in cluster.process_names() {
            if !cluster.is_running(name)
                && let Err(error) = cluster.start_process(name)
            {
                notes.push(format!("starting {name} failed: {error:#}"));
            }
        }
        let (look, settled) = look(cluster);
        if let Some(settled) = settled {
            return Ok(settled);
        }
        let now = Instant::now();
        fenced_since.retain(|name, _| look.fenced.contains(name));
        for name in &look.fenced {
            fenced_since.entry(name).or_insert(now);
        }
        if let [primary] = look.open_primaries.as_slice() {
            no_primary_since = None;
            let due: Vec<&'static str> = fenced_since
                .iter()
                .filter(|(_, since)| now.duration_since(**since) >= REINSTATE_AFTER)
                .map(|(name, _)| *name)
                .collect();
            for name in due {
                let admin = cluster.admin_addr(primary).to_string();
                match broker::transitions::reinstate(&admin, name) {
                    Ok(reinstated) => notes.push(format!(
                        "reinstated {name} under {primary} ({} divergent records set aside)",
                        reinstated.set_aside.records
                    )),
                    Err(error) => notes.push(format!("reinstating {name} failed: {error:#}")),
                }
                fenced_since.insert(name, Instant::now());
            }
        } else if look.open_primaries.is_empty() {
            let since = *no_primary_since.get_or_insert(now);
            if now.duration_since(since) >= NO_PRIMARY_AFTER
                && !completed_switchover
                && let Some(to) = &look.pending_switchover
            {
                completed_switchover = true;
                let admin = cluster.admin_addr(to).to_string();
                match broker::transitions::switchover(&admin, to) {
                    Ok(_) => notes.push(format!("completed the switchover to {to} left half done")),
                    Err(error) => {
                        notes.push(format!("completing the switchover to {to} failed: {error:#}"))
                    }
                }
            } else if now.duration_since(since) >= NO_PRIMARY_AFTER
                && !failed_over_again
                && look.pending_switchover.is_none()
                && !look.fenced.is_empty()
                && let Some(to) = look.sync_standbys.first()
            {
                failed_over_again = true;
                let admin = cluster.admin_addr(to).to_string();
                match broker::transitions::failover(&admin, to, false, false) {
                    Ok(_) => notes.push(format!("ran the failover to {to} left half done again")),
                    Err(error) => {
                        notes.push(format!("failing over to {to} again failed: {error:#}"))
                    }
                }
            }
        }
        if started.elapsed() > limit {
            anyhow::bail!("not settled within {limit:?}: {}", look.waiting_for.join("; "));
        }
        std::thread::sleep(POLL);
    }
}

/// One look at every member and observer: what it found, and the settled configuration if it
/// has settled.
fn look(cluster: &Cluster<'_>) -> (Look, Option<Settled>) {
    let layout = cluster.layout();
    let mut look = Look::default();
    let mut statuses = BTreeMap::new();
    for name in layout.member_names() {
        match cluster.status(name) {
            Ok(status) => {
                statuses.insert(name, status);
            }
            Err(error) => look.waiting_for.push(format!("{name} does not answer ({error:#})")),
        }
    }
    for (name, status) in &statuses {
        let Some(roles) = &status.roles else { continue };
        if roles.fenced.is_some() {
            look.fenced.push(name);
            look.waiting_for.push(format!("{name} is fenced"));
        } else if roles.role == "standby" && layout.is_target(name) {
            look.sync_standbys.push(name);
        } else if roles.role == "primary" && roles.gate == GateState::Open {
            look.open_primaries.push(name);
        } else if roles.role == "primary" {
            look.waiting_for.push(format!("{name} is a primary with its gate {:?}", roles.gate));
        }
        if let Some(to) = &roles.switchover_to {
            look.pending_switchover = Some(to.clone());
        }
    }
    let primary = match look.open_primaries.as_slice() {
        [primary] => *primary,
        [] => {
            look.waiting_for.push("no open primary".into());
            return (look, None);
        }
        several => {
            look.waiting_for.push(format!("several open primaries: {several:?}"));
            return (look, None);
        }
    };
    let status = &statuses[primary];
    let mut ready = true;
    if status.database.redo.durable_scn.0 + 1 < status.database.redo.next_scn.0 {
        look.waiting_for.push(format!("{primary} has commits waiting"));
        ready = false;
    }
    let fast_start = status.roles.as_ref().and_then(|roles| roles.fast_start.clone());
    let active = fast_start.as_ref().and_then(|fast_start| fast_start.observer.clone());
    if fast_start.as_ref().is_some_and(|fast_start| fast_start.isolated == Some(true)) {
        look.waiting_for.push(format!("{primary} is isolated"));
        ready = false;
    }
    for member in layout.members().iter().filter(|member| member.name != primary) {
        let (name, transport) = (&member.name, &member.transport);
        // Caught up as the primary sees it: a SYNC standby synchronized, an ASYNC one
        // streaming. (An ASYNC standby's own `caught_up` comes with heartbeats, which a
        // primary under a steady load does not send it: it may stay false.) Behind a relay,
        // as the relay sees it: streaming (a forwarded hop is ASYNC).
        let source = layout.source(name, primary);
        let (sender, wanted) = match source {
            None if *transport == "sync" => (primary, Phase::Synchronized),
            None => (primary, Phase::Streaming),
            Some(relay) => (relay, Phase::Streaming),
        };
        let shipped = statuses.get(sender).is_some_and(|status| {
            status
                .replication
                .destinations
                .iter()
                .any(|destination| destination.name == *name && destination.phase == wanted)
        });
        let follows = statuses.get(name).is_some_and(|status| {
            status
                .roles
                .as_ref()
                .is_some_and(|roles| roles.role == "standby" && roles.fenced.is_none())
                && status.replication.standby.as_ref().is_some_and(|standby| {
                    standby.primary_member.as_deref() == Some(primary)
                        && standby.source_member.as_deref() == source
                        && standby.connected
                        && (standby.caught_up || *transport == "async")
                })
        });
        if !(follows && shipped) {
            // Behind a relay, what the member says of its session: the primary's word reaches
            // it only in the relay's heartbeats.
            let heard = match (
                source,
                statuses.get(name).and_then(|s| s.replication.standby.as_ref()),
            ) {
                (Some(_), Some(standby)) => format!(
                    "; it says: primary {:?} through {:?}, connected {}, caught up {}, observer {:?}",
                    standby.primary_member,
                    standby.source_member,
                    standby.connected,
                    standby.caught_up,
                    standby.active_observer
                ),
                _ => String::new(),
            };
            look.waiting_for.push(format!(
                "{name} is not a caught-up standby of {primary} (following: {follows}, {wanted:?} on {sender}: {shipped}{heard})"
            ));
            ready = false;
        }
    }
    for observer in OBSERVERS {
        let named = cluster.sentinel_primary(observer);
        if named != Some(primary) {
            look.waiting_for.push(format!("{observer} names {named:?}, not {primary}"));
            ready = false;
        }
    }
    let sync_standby = layout
        .targets()
        .into_iter()
        .find(|name| *name != primary)
        .expect("two SYNC members that may be primary");
    let async_standby = layout
        .members()
        .iter()
        .find(|member| member.name != primary && member.transport == "async")
        .map(|member| member.name)
        .expect("an ASYNC member");
    let Some(active_observer) = OBSERVERS.into_iter().find(|name| active.as_deref() == Some(*name))
    else {
        look.waiting_for.push(format!("{primary} names no active observer ({active:?})"));
        return (look, None);
    };
    let standby_observer =
        OBSERVERS.into_iter().find(|name| *name != active_observer).expect("two observers");
    if !cluster.failover_ready(active_observer).iter().any(|name| name == sync_standby) {
        look.waiting_for.push(format!("{active_observer} would not fail over to {sync_standby}"));
        ready = false;
    }
    if !ready {
        return (look, None);
    }
    let settled = Settled {
        primary,
        sync_standby,
        async_standby,
        active_observer,
        standby_observer,
        far_sync: layout.far_sync(),
        at: Instant::now(),
    };
    (look, Some(settled))
}
