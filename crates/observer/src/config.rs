//! The observer's file: the same `[replication]` section as the members' (the members, the
//! fast-start failover settings, the observers) and `[observer] name`, which of the observers
//! this process is.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use transport::ReplicationConfig;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserverSection {
    /// Which of `[[replication.observers]]` this process is. Required.
    pub name: String,
    /// How often each member is pinged; 0: a twentieth of the fast-start threshold. Bounds: 0
    /// or 10ms..=1s. Default: 0.
    #[serde(default, with = "units::serde_human::duration")]
    pub interval: Duration,
    /// The admin API token, if the members require one for role changes (reinstate).
    #[serde(default)]
    pub token: Option<String>,
    /// The password Sentinel clients give (`AUTH password`, or `HELLO 3 AUTH default
    /// password`), as a Redis Sentinel's `requirepass`; the client libraries' `sentinel_kwargs`
    /// / `sentinelPassword`. Default: none (required when the Sentinel address is not loopback,
    /// unless `insecure`).
    #[serde(default)]
    pub requirepass: Option<String>,
    /// Start even though a port is exposed beyond loopback without TLS or a password
    /// (protected mode off; `redoguard observer --insecure`). Said at start and on the page.
    /// Default: false.
    #[serde(default)]
    pub insecure: bool,
    /// Where to serve the observer's web page (`host:port`; port 0 picks one): the
    /// configuration as its members report it, and as this observer sees it. Default: none.
    #[serde(default)]
    pub http: Option<String>,
    /// Where the observer keeps its record (`observer.record`: the primary it knows, a
    /// failover it decided, the grants it gave), written durably before each act it allows,
    /// and read back at start. Relative to where it starts. Default: `redoguard-observer`.
    #[serde(default = "default_data_dir")]
    pub data_dir: std::path::PathBuf,
}

fn default_data_dir() -> std::path::PathBuf {
    std::path::PathBuf::from("redoguard-observer")
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserverConfig {
    pub observer: ObserverSection,
    pub replication: ReplicationConfig,
    /// The observer's certificate, for the members' redo listeners when they run mutual TLS
    /// (`[tls] redo = true`): its name is the observer's name. Default: none (plain TCP).
    #[serde(default)]
    pub tls: Option<tls::TlsConfig>,
}

impl ObserverConfig {
    pub fn load(path: &Path) -> anyhow::Result<ObserverConfig> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            anyhow::anyhow!("cannot read the configuration file {}: {error}", path.display())
        })?;
        let mut config: ObserverConfig = toml::from_str(&text).map_err(|error| {
            anyhow::anyhow!(
                "configuration file {}: {}",
                path.display(),
                error.to_string().trim_end()
            )
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.tls = config.tls.map(|tls| tls.resolve(base));
        config.validate()?;
        Ok(config)
    }

    /// Checks what the observer needs; the error names the field.
    pub fn validate(&self) -> anyhow::Result<()> {
        let replication = &self.replication;
        replication
            .validate_fast_start()
            .map_err(|(field, reason)| anyhow::anyhow!("{field}: {reason}"))?;
        if replication.members.len() < 2 {
            anyhow::bail!(
                "replication.members: an observer watches a configuration of at least two members"
            );
        }
        if !replication.observers.iter().any(|observer| observer.name == self.observer.name) {
            anyhow::bail!(
                "observer.name: '{}' is not one of [[replication.observers]] ({})",
                self.observer.name,
                replication
                    .observers
                    .iter()
                    .map(|observer| observer.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if self.observer.data_dir.as_os_str().is_empty() {
            anyhow::bail!("observer.data_dir: is empty");
        }
        // An empty password is one anybody gives (`AUTH ""`), and it would let protected mode
        // pass a front beyond loopback: refused, as the server's `auth.requirepass` is.
        if self.observer.requirepass.as_deref().is_some_and(str::is_empty) {
            anyhow::bail!(
                "observer.requirepass: is empty (anybody could give it; leave the field out for no password)"
            );
        }
        if self.observer.token.as_deref().is_some_and(|token| token.trim().is_empty()) {
            anyhow::bail!(
                "observer.token: is empty (leave the field out when the members require none)"
            );
        }
        let interval = self.observer.interval;
        if !interval.is_zero()
            && !(Duration::from_millis(10)..=Duration::from_secs(1)).contains(&interval)
        {
            anyhow::bail!("observer.interval: {interval:?} is neither 0 nor within 10ms..=1s");
        }
        Ok(())
    }

    /// Mutual TLS to the members' redo listeners, if `[tls]` asks for it: the certificate is
    /// loaded and checked (for the observer's name) now.
    pub fn redo_tls(&self) -> anyhow::Result<Option<std::sync::Arc<tls::RedoTls>>> {
        let Some(config) = self.tls.as_ref().filter(|config| config.redo) else {
            return Ok(None);
        };
        let name = config.name.clone().unwrap_or_else(|| self.observer.name.clone());
        let material = tls::Material::load(config, &name)?;
        Ok(Some(std::sync::Arc::new(tls::RedoTls::new(&material)?)))
    }

    /// What this observer would expose beyond loopback without protection, one line each: a
    /// Sentinel front without a password, members reached without TLS (their answers decide
    /// failovers: without TLS anyone on the path could answer for them).
    pub fn exposure(&self) -> Vec<String> {
        let mut missing = Vec::new();
        let beyond_loopback = |address: &str| {
            let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
            let host = host.trim_matches(['[', ']']);
            host != "localhost"
                && !host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
        };
        if let Some(sentinel) = self.sentinel_address()
            && beyond_loopback(&sentinel)
            && self.observer.requirepass.is_none()
        {
            missing.push(format!(
                "the Sentinel front listens on {sentinel} (not loopback) without a password: set [observer] requirepass"
            ));
        }
        let remote: Vec<&str> = self
            .replication
            .members
            .iter()
            .filter(|member| beyond_loopback(&member.redo))
            .map(|member| member.name.as_str())
            .collect();
        if !remote.is_empty() && self.tls.as_ref().is_none_or(|tls| !tls.redo) {
            missing.push(format!(
                "the members {} are reached beyond loopback without TLS: anyone on the path could answer for them and steer failovers (add a [tls] section for this observer)",
                remote.join(", ")
            ));
        }
        missing
    }

    /// How often members are pinged.
    pub fn interval(&self) -> Duration {
        if self.observer.interval.is_zero() {
            (self.replication.fast_start_failover.threshold / 20).max(Duration::from_millis(10))
        } else {
            self.observer.interval
        }
    }

    /// Where this observer answers Sentinel clients.
    pub fn sentinel_address(&self) -> Option<String> {
        self.replication
            .observers
            .iter()
            .find(|observer| observer.name == self.observer.name)
            .map(|observer| observer.sentinel.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_password_or_token_is_refused_naming_its_field() {
        let text = include_str!("../../../examples/fast-start/observer.toml");
        let mut config: ObserverConfig = toml::from_str(text).unwrap();
        config.validate().expect("the example is valid");
        config.observer.requirepass = Some(String::new());
        let error = config.validate().unwrap_err().to_string();
        assert!(error.starts_with("observer.requirepass: is empty"), "{error}");
        config.observer.requirepass = None;
        config.validate().expect("no password is valid (protected mode judges it)");
        config.observer.token = Some(" ".into());
        let error = config.validate().unwrap_err().to_string();
        assert!(error.starts_with("observer.token: is empty"), "{error}");
    }

    #[test]
    fn protected_mode_names_what_an_exposed_observer_lacks() {
        let text = include_str!("../../../examples/fast-start/observer.toml");
        let mut config: ObserverConfig = toml::from_str(text).unwrap();
        assert!(config.exposure().is_empty(), "the example is secure: {:?}", config.exposure());
        // Its Sentinel front on every address, without a password; the members elsewhere,
        // without TLS: one line each.
        config.observer.requirepass = None;
        config.tls = None;
        config.replication.observers[0].sentinel = "0.0.0.0:26490".into();
        config.replication.members[1].redo = "10.1.2.3:6495".into();
        let missing = config.exposure();
        assert_eq!(missing.len(), 2, "{missing:?}");
        assert!(missing[0].contains("0.0.0.0:26490") && missing[0].contains("requirepass"));
        assert!(missing[1].contains("west") && !missing[1].contains("east"), "{missing:?}");
        // Loopback needs neither.
        config.replication.observers[0].sentinel = "localhost:26490".into();
        config.replication.members[1].redo = "127.0.0.1:6495".into();
        assert!(config.exposure().is_empty());
    }
}
