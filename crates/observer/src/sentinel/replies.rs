//! What the Sentinel front says about the configuration: `SENTINEL get-master-addr-by-name |
//! masters | master | replicas | slaves | sentinels | myid`, `INFO` and `ROLE`, from what the
//! observer knows (`decide::Shared`), with the configuration's `name` as the master name. An
//! instance is a map (Redis Sentinel's `addReplySentinelRedisInstance`): a map in RESP3, a flat
//! array of field and value in RESP2.

use bytes::Bytes;
use proto::WireRole;
use resp::Frame;
use roles::fast_start::Time;

use crate::config::ObserverConfig;
use crate::decide::Shared;

/// The observer's knowledge, as the front's sessions ask for it.
pub struct Observed<'a> {
    pub config: &'a ObserverConfig,
    pub shared: &'a Shared,
}

impl super::session::Knowledge for Observed<'_> {
    fn sentinel(&self, args: &[String]) -> Frame {
        sentinel(self.config, self.shared, args)
    }

    fn info(&self) -> String {
        info(self.config, self.shared)
    }

    fn master_names(&self) -> Vec<String> {
        vec![self.config.replication.name.clone()]
    }
}

fn bulk(text: impl Into<String>) -> Frame {
    Frame::Bulk(Bytes::from(text.into()))
}

fn pairs(fields: Vec<(&str, String)>) -> Frame {
    Frame::Map(fields.into_iter().map(|(key, value)| (bulk(key), bulk(value))).collect())
}

fn host_port(address: &str) -> (String, String) {
    match address.rsplit_once(':') {
        Some((host, port)) => (host.to_string(), port.to_string()),
        None => (address.to_string(), String::new()),
    }
}

fn sentinel(config: &ObserverConfig, shared: &Shared, args: &[String]) -> Frame {
    let Some(sub) = args.first().map(|sub| sub.to_ascii_lowercase()) else {
        return Frame::error("ERR wrong number of arguments for 'sentinel' command");
    };
    let name = &config.replication.name;
    let named = |at: usize| args.get(at).is_some_and(|asked| asked == name);
    match sub.as_str() {
        "get-master-addr-by-name" => match (named(1), master_address(config, shared)) {
            (true, Some(address)) => {
                let (host, port) = host_port(&address);
                Frame::Array(vec![bulk(host), bulk(port)])
            }
            _ => Frame::Null,
        },
        "masters" => Frame::Array(master_state(config, shared).into_iter().collect()),
        "master" if named(1) => master_state(config, shared)
            .unwrap_or_else(|| Frame::error("ERR No such master with that name")),
        "replicas" | "slaves" if named(1) => Frame::Array(replicas(config, shared)),
        "sentinels" if named(1) => Frame::Array(
            config
                .replication
                .observers
                .iter()
                .filter(|observer| observer.name != config.observer.name)
                .map(|observer| {
                    let (host, port) = host_port(&observer.sentinel);
                    pairs(vec![
                        ("name", observer.name.clone()),
                        ("ip", host),
                        ("port", port),
                        ("runid", observer.name.clone()),
                        ("flags", "sentinel".into()),
                    ])
                })
                .collect(),
        ),
        "master" | "replicas" | "slaves" | "sentinels" => {
            Frame::error("ERR No such master with that name")
        }
        "myid" => bulk(config.observer.name.clone()),
        other => Frame::error(format!(
            "ERR unknown subcommand '{}'. Try SENTINEL HELP.",
            other.chars().take(64).collect::<String>()
        )),
    }
}

/// The primary's client address, if the observer knows an open primary that answers.
fn master_address(config: &ObserverConfig, shared: &Shared) -> Option<String> {
    let primary = shared.primary()?;
    config.replication.member_named(&primary).map(|member| member.resp.clone())
}

fn master_state(config: &ObserverConfig, shared: &Shared) -> Option<Frame> {
    let state = shared.state.lock();
    let now = Time::now();
    let primary = state.primary()?.to_string();
    let member = config.replication.member_named(&primary)?;
    let view = state.views().get(&primary);
    let down = view
        .and_then(|view| view.answered_at)
        .is_none_or(|at| now.since(at) > config.replication.fast_start_failover.threshold);
    let last_ok = view
        .and_then(|view| view.answered_at)
        .map_or(u64::MAX / 2, |at| now.since(at).as_millis() as u64);
    let standbys = state
        .views()
        .values()
        .filter(|view| view.pong.as_ref().is_some_and(|pong| pong.info.role == WireRole::Standby))
        .count();
    let (host, port) = host_port(&member.resp);
    let threshold = config.replication.fast_start_failover.threshold.as_millis() as u64;
    Some(pairs(vec![
        ("name", config.replication.name.clone()),
        ("ip", host),
        ("port", port),
        ("runid", primary.clone()),
        ("flags", if down { "master,s_down".into() } else { "master".into() }),
        ("link-pending-commands", "0".into()),
        ("link-refcount", "1".into()),
        ("last-ping-sent", "0".into()),
        ("last-ok-ping-reply", last_ok.to_string()),
        ("last-ping-reply", last_ok.to_string()),
        ("down-after-milliseconds", threshold.to_string()),
        ("info-refresh", last_ok.to_string()),
        ("role-reported", "master".into()),
        ("role-reported-time", "0".into()),
        ("config-epoch", state.incarnation().to_string()),
        ("num-slaves", standbys.to_string()),
        ("num-other-sentinels", config.replication.observers.len().saturating_sub(1).to_string()),
        ("quorum", "1".into()),
        ("failover-timeout", "60000".into()),
        ("parallel-syncs", "1".into()),
    ]))
}

fn replicas(config: &ObserverConfig, shared: &Shared) -> Vec<Frame> {
    let state = shared.state.lock();
    let now = Time::now();
    let threshold = config.replication.fast_start_failover.threshold;
    let primary = state.primary().and_then(|name| {
        config.replication.member_named(name).map(|member| host_port(&member.resp))
    });
    state
        .views()
        .iter()
        .filter_map(|(name, view)| {
            let pong = view.pong.as_ref()?;
            if pong.info.role != WireRole::Standby {
                return None;
            }
            let member = config.replication.member_named(name)?;
            let (host, port) = host_port(&member.resp);
            let down = view.answered_at.is_none_or(|at| now.since(at) > threshold);
            let (master_host, master_port) = primary.clone().unwrap_or_default();
            Some(pairs(vec![
                ("name", format!("{host}:{port}")),
                ("ip", host),
                ("port", port),
                ("runid", name.clone()),
                ("flags", if down { "slave,s_down".into() } else { "slave".into() }),
                ("master-link-status", if pong.synchronized { "ok".into() } else { "err".into() }),
                ("master-host", master_host),
                ("master-port", master_port),
                ("slave-priority", "100".into()),
                ("slave-repl-offset", pong.info.position.applied_scn.to_string()),
            ]))
        })
        .collect()
}

fn info(config: &ObserverConfig, shared: &Shared) -> String {
    let address = master_address(config, shared).unwrap_or_default();
    let state = shared.state.lock();
    let ready = state.ready(Time::now());
    let standbys = state
        .views()
        .values()
        .filter(|view| view.pong.as_ref().is_some_and(|pong| pong.info.role == WireRole::Standby))
        .count();
    format!(
        "# Sentinel\r\nsentinel_masters:1\r\nsentinel_tilt:0\r\nsentinel_running_scripts:0\r\nsentinel_scripts_queue_length:0\r\nmaster0:name={},status={},address={},slaves={},sentinels={}\r\nredoguard_observer:{}\r\nredoguard_active_observer:{}\r\nredoguard_failovers:{}\r\nredoguard_failover_ready:{}\r\n",
        config.replication.name,
        if address.is_empty() { "sdown" } else { "ok" },
        address,
        standbys,
        config.replication.observers.len(),
        config.observer.name,
        state.active().unwrap_or_default(),
        state.failovers().len(),
        ready.join(",")
    )
}
