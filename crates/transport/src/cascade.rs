//! Cascading: a standby (or far sync) forwards the redo it receives to the members its redo
//! routes name under the current primary (`config::routes`), ASYNC, in real time.
//!
//! The forwarder is a `PrimaryTransport` over the standby's own redo log, with ASYNC
//! destinations only and no protection mode: each write received is offered to it once the
//! standby logs hold it durably (`offer`, from the receiver after its sync), and a destination
//! behind reads the standby logs and the archive (`ShipCursor` reads what is durable on a
//! standby), gaps included, as a primary's sender does. Its hellos name this member as the
//! sender and the primary as `relay_of`; its writes and heartbeats carry what the primary
//! confirmed durable (never more: a standby applies only that), the primary's clock and newest
//! SCN as this member last heard them. They say "synchronized" and name an observer only as
//! the primary's own heartbeat to this member did, for that fast-start target alone, in the
//! primary's current session (docs/fast-start-failover.md, "Targets behind a far sync"): a
//! forwarder never invents that word.
//!
//! Why this keeps fencing whole (docs/roles.md, "Cascading"): the forwarder takes no write,
//! opens no gate and confirms no primary (its `Followed` and `Fenced` events are only logged);
//! it forwards only redo this member accepted, from a primary this member's incarnation check
//! passed; and the member it forwards to applies the same check to the forwarder's
//! incarnation, so redo of a failed-over incarnation is refused at every hop as it is from the
//! primary itself.
//!
//! The forwarder follows the primary: it is started when a primary (directly, or relayed)
//! first says hello, and started again with that primary's routes when another primary, or a
//! newer incarnation, says hello. A member its routes name nothing for forwards nothing.

use std::sync::Arc;

use parking_lot::Mutex;
use redo::ship::LogWrite;
use redo::{Incarnation, RedoLog};
use roles::IncarnationHistory;
use stats::Metrics;

use crate::config::ReplicationConfig;
use crate::primary::{DestinationStatus, PrimaryIdentity, PrimaryTransport, Relay};
use crate::quorum::Protection;

/// What a standby needs to forward, and to accept forwarded redo.
#[derive(Clone)]
pub struct CascadeContext {
    /// The configuration: this member, every member's attributes, the routes.
    pub replication: ReplicationConfig,
    /// Mutual TLS to the members it forwards to.
    pub tls: Option<Arc<tls::RedoTls>>,
    pub metrics: Arc<Metrics>,
}

impl CascadeContext {
    /// Whether this member takes redo of `primary` forwarded by `sender`: only if the routes
    /// under `primary` name `sender` as its source.
    pub fn accepts_relay(&self, primary: &str, sender: &str) -> Result<(), String> {
        let replication = &self.replication;
        let me = replication.member.as_deref().unwrap_or_default();
        if replication.member_named(primary).is_none() {
            return Err(format!("'{primary}' is not a member of this configuration"));
        }
        match replication.route_tree(primary).as_ref().and_then(|tree| tree.source_of(me)) {
            Some(source) if source == sender => Ok(()),
            Some(source) => Err(format!(
                "when '{primary}' is the primary, the redo routes give '{me}' its redo from '{source}', not from '{sender}'"
            )),
            None => Err(format!("the redo routes under '{primary}' do not reach '{me}'")),
        }
    }
}

/// The forwarder of one standby.
pub struct Cascade {
    context: CascadeContext,
    redo: RedoLog,
    history: Arc<Mutex<IncarnationHistory>>,
    running: Mutex<Option<Forwarding>>,
}

struct Forwarding {
    primary: String,
    incarnation: Incarnation,
    transport: Option<PrimaryTransport>,
}

/// What the forwarder's heartbeats pass on: the primary's clock now and its newest SCN, how
/// long since this member heard it, and its word for the fast-start targets behind this member,
/// as this member last heard them. (It must not hold the receiver: the receiver holds it.)
pub type Upstream = Arc<dyn Fn() -> crate::primary::UpstreamWord + Send + Sync>;

impl Cascade {
    pub fn new(
        context: CascadeContext,
        redo: RedoLog,
        history: Arc<Mutex<IncarnationHistory>>,
    ) -> Cascade {
        Cascade { context, redo, history, running: Mutex::new(None) }
    }

    pub fn context(&self) -> &CascadeContext {
        &self.context
    }

    /// `primary`'s redo arrives (in this member's current incarnation): forward it along
    /// `primary`'s routes, starting the forwarder again if the primary or the incarnation
    /// changed. `upstream` is what heartbeats pass on.
    pub fn follow(&self, primary: &str, upstream: &Upstream) {
        let incarnation = self.redo.control().incarnation;
        let mut running = self.running.lock();
        if running
            .as_ref()
            .is_some_and(|current| current.primary == primary && current.incarnation == incarnation)
        {
            return;
        }
        if let Some(old) = running.take()
            && let Some(transport) = old.transport
        {
            tracing::info!(primary = %old.primary, "cascade: the primary changed; forwarding stops for its routes");
            transport.stop();
        }
        let destinations = self.context.replication.forwards(primary);
        let transport = if destinations.is_empty() {
            None
        } else {
            let names: Vec<String> =
                destinations.iter().map(|destination| destination.name.clone()).collect();
            let member = self.context.replication.member.clone().unwrap_or_default();
            let identity = PrimaryIdentity {
                member: member.clone(),
                history: self.history.lock().to_wire(),
                tls: self.context.tls.clone(),
                relay: Some(Relay { primary: primary.to_string(), upstream: upstream.clone() }),
            };
            let primary_name = primary.to_string();
            let events: crate::primary::TransportEvents = Arc::new(move |event| {
                // A forwarder is no primary: what its receivers say of it changes no role
                // here (this member learns of a newer incarnation from its own primary).
                tracing::info!(primary = %primary_name, ?event, "cascade: a member this standby forwards to answered");
            });
            match PrimaryTransport::start_as(
                self.redo.handle(),
                identity,
                Protection::from(crate::config::ProtectionMode::MaximumPerformance),
                destinations,
                &self.context.metrics,
                events,
                None,
            ) {
                Ok(transport) => {
                    tracing::info!(%primary, to = ?names, "cascade: forwarding the primary's redo along its routes (ASYNC)");
                    Some(transport)
                }
                Err(error) => {
                    tracing::error!(%primary, %error, "cascade: cannot start forwarding");
                    None
                }
            }
        };
        *running = Some(Forwarding { primary: primary.to_string(), incarnation, transport });
    }

    /// Writes this member holds durably now: queued for the members it forwards to.
    pub fn offer(&self, writes: &mut Vec<Arc<LogWrite>>) {
        if writes.is_empty() {
            return;
        }
        if let Some(Forwarding { transport: Some(transport), .. }) = self.running.lock().as_ref() {
            let shipper = transport.shipper();
            for write in writes.iter() {
                // ASYNC only: nothing to wait for.
                let _ = shipper.ship(write);
            }
        }
        writes.clear();
    }

    /// Connects to `member` now if the forwarder waits to reconnect to it (a failover target
    /// that sealed this member wants its tail at once).
    pub fn connect_now(&self, member: &str) {
        if let Some(Forwarding { transport: Some(transport), .. }) = self.running.lock().as_ref() {
            transport.connect_now(member);
        }
    }

    /// Whether anything is forwarded now (writes are worth holding for `offer`).
    pub fn is_forwarding(&self) -> bool {
        self.running.lock().as_ref().is_some_and(|running| running.transport.is_some())
    }

    /// The members it forwards to, as a primary's destinations show.
    pub fn status(&self) -> Vec<DestinationStatus> {
        self.running
            .lock()
            .as_ref()
            .and_then(|running| running.transport.as_ref())
            .map(PrimaryTransport::status)
            .unwrap_or_default()
    }

    /// Stops forwarding (the standby stops or changes its role).
    pub fn stop(&self) {
        if let Some(Forwarding { transport: Some(transport), .. }) = self.running.lock().take() {
            transport.stop();
        }
    }
}

impl Drop for Cascade {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(member: &str) -> CascadeContext {
        let mut text = format!("member = \"{member}\"\n");
        for (index, (name, routes)) in [
            ("a", ""),
            ("b", "routes = [{ when = \"a\", to = \"c\" }]"),
            ("c", "routes = [{ when = \"b\", to = \"a\" }]"),
        ]
        .into_iter()
        .enumerate()
        {
            text += &format!(
                "[[members]]\nname = \"{name}\"\nresp = \"127.0.0.1:{}\"\nadmin = \"127.0.0.1:{}\"\nredo = \"127.0.0.1:{}\"\n{routes}\n",
                7000 + index * 10,
                7001 + index * 10,
                7002 + index * 10
            );
        }
        let replication: ReplicationConfig = toml::from_str(&text).unwrap();
        replication.validate().unwrap();
        CascadeContext { replication, tls: None, metrics: Arc::new(Metrics::default()) }
    }

    #[test]
    fn forwarded_redo_is_taken_only_from_the_member_the_routes_name() {
        let c = context("c");
        assert_eq!(c.accepts_relay("a", "b"), Ok(()));
        let refused = c.accepts_relay("b", "a").unwrap_err();
        assert!(refused.contains("give 'c' its redo from 'b', not from 'a'"), "{refused}");
        let refused = c.accepts_relay("x", "b").unwrap_err();
        assert!(refused.contains("'x' is not a member"), "{refused}");
        // Under b, a receives from c; b's hello relaying "a" is nothing the routes say.
        let a = context("a");
        assert_eq!(a.accepts_relay("b", "c"), Ok(()));
        assert!(a.accepts_relay("c", "b").is_err());
        // What each forwards, under each primary.
        assert_eq!(
            context("b").replication.forwards("a").into_iter().map(|d| d.name).collect::<Vec<_>>(),
            ["c"]
        );
        assert!(context("b").replication.forwards("c").is_empty());
    }
}
