//! Run-time settings: what an administrator changed while the configuration ran (Data
//! Guard's `LOG_ARCHIVE_DEST_STATE_n` and the broker's `EDIT … SET PROPERTY`), on top of the
//! configuration file. A member keeps them in its data directory (`settings.json`) and applies
//! them over its file at every start, so that a change survives restarts; docs/destinations.md.
//!
//! Only what can change safely while redo flows is here: a destination's state, transport,
//! affirm, timeouts, compression and connections, and the protection mode. The members, their
//! addresses and the quorum are the file's.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::compression::{Compression, CompressionScope};
use crate::config::{
    DestinationConfig, DestinationState, MemberConfig, ProtectionMode, ReplicationConfig, Transport,
};

/// What is changed of one destination (`None`: as the file says). Durations are written as
/// in the file (`"2s"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DestinationEdit {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<DestinationState>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affirm: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none", with = "optional_duration")]
    pub net_timeout: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none", with = "optional_duration")]
    pub reopen: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_failure: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression_level: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression_for: Option<CompressionScope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
}

/// The attributes `DestinationEdit` changes, as they are named in the file and on the
/// command line.
pub const EDITABLE: &[&str] = &[
    "state",
    "transport",
    "affirm",
    "net_timeout",
    "reopen",
    "max_failure",
    "compression",
    "compression_level",
    "compression_for",
    "max_connections",
];

impl DestinationEdit {
    pub fn is_empty(&self) -> bool {
        *self == DestinationEdit::default()
    }

    /// Parses `key=value` pairs as the command line gives them; the error names the pair.
    pub fn parse_pairs(pairs: &[String]) -> Result<DestinationEdit, String> {
        let mut object = serde_json::Map::new();
        for pair in pairs {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(format!("'{pair}' is not key=value"));
            };
            let key = key.trim();
            if !EDITABLE.contains(&key) {
                return Err(format!(
                    "'{key}' cannot be changed at run time; these can: {}",
                    EDITABLE.join(", ")
                ));
            }
            let value = value.trim();
            let json = if let Ok(number) = value.parse::<i64>() {
                serde_json::Value::from(number)
            } else if let Ok(flag) = value.parse::<bool>() {
                serde_json::Value::from(flag)
            } else {
                serde_json::Value::from(value)
            };
            if object.insert(key.to_string(), json).is_some() {
                return Err(format!("'{key}' is given twice"));
            }
        }
        let edit: DestinationEdit = serde_json::from_value(serde_json::Value::Object(object))
            .map_err(|error| error.to_string())?;
        if edit.is_empty() {
            return Err("nothing to change: give key=value pairs".into());
        }
        Ok(edit)
    }

    /// This edit, then `newer` over it.
    pub fn merged(&self, newer: &DestinationEdit) -> DestinationEdit {
        DestinationEdit {
            state: newer.state.or(self.state),
            transport: newer.transport.or(self.transport),
            affirm: newer.affirm.or(self.affirm),
            net_timeout: newer.net_timeout.or(self.net_timeout),
            reopen: newer.reopen.or(self.reopen),
            max_failure: newer.max_failure.or(self.max_failure),
            compression: newer.compression.or(self.compression),
            compression_level: newer.compression_level.or(self.compression_level),
            compression_for: newer.compression_for.or(self.compression_for),
            max_connections: newer.max_connections.or(self.max_connections),
        }
    }

    /// Applies it to the attributes of a destination (or a member, as a destination).
    fn apply(&self, target: &mut Attributes<'_>) {
        macro_rules! set {
            ($($field:ident),*) => {$(
                if let Some(value) = self.$field {
                    *target.$field = value;
                }
            )*};
        }
        set!(
            state,
            transport,
            affirm,
            net_timeout,
            reopen,
            max_failure,
            compression,
            compression_level,
            compression_for,
            max_connections
        );
    }
}

/// The editable attributes of a `DestinationConfig` or a `MemberConfig`.
struct Attributes<'a> {
    state: &'a mut DestinationState,
    transport: &'a mut Transport,
    affirm: &'a mut bool,
    net_timeout: &'a mut Duration,
    reopen: &'a mut Duration,
    max_failure: &'a mut u32,
    compression: &'a mut Compression,
    compression_level: &'a mut i32,
    compression_for: &'a mut CompressionScope,
    max_connections: &'a mut u32,
}

macro_rules! attributes_of {
    ($config:expr) => {
        Attributes {
            state: &mut $config.state,
            transport: &mut $config.transport,
            affirm: &mut $config.affirm,
            net_timeout: &mut $config.net_timeout,
            reopen: &mut $config.reopen,
            max_failure: &mut $config.max_failure,
            compression: &mut $config.compression,
            compression_level: &mut $config.compression_level,
            compression_for: &mut $config.compression_for,
            max_connections: &mut $config.max_connections,
        }
    };
}

fn attributes_of_destination(config: &mut DestinationConfig) -> Attributes<'_> {
    attributes_of!(config)
}

fn attributes_of_member(config: &mut MemberConfig) -> Attributes<'_> {
    attributes_of!(config)
}

/// Everything changed at run time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protection_mode: Option<ProtectionMode>,
    /// By destination (member) name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub destinations: BTreeMap<String, DestinationEdit>,
    /// Fast-start failover observe-only, for planned maintenance: the observers watch and
    /// report, but no failover happens (a target refuses one; a primary goes on without its
    /// targets as plain Maximum Availability would). `redoguard edit fast-start` sets it on the
    /// targets before the primary, and clears it on the primary first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast_start_observe_only: bool,
}

impl RuntimeSettings {
    pub fn is_empty(&self) -> bool {
        self.protection_mode.is_none()
            && self.destinations.is_empty()
            && !self.fast_start_observe_only
    }

    /// Reads the JSON a member keeps; the error says what is wrong with it.
    pub fn from_json(bytes: &[u8]) -> Result<RuntimeSettings, String> {
        serde_json::from_slice(bytes).map_err(|error| error.to_string())
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("settings serialize");
        bytes.push(b'\n');
        bytes
    }

    /// The destinations of `config` these settings name that it does not have (a member
    /// removed from the file since): they are left out when applied.
    pub fn unknown_destinations(&self, config: &ReplicationConfig) -> Vec<String> {
        self.destinations.keys().filter(|name| !has_destination(config, name)).cloned().collect()
    }

    /// `config` with these settings applied (destinations it does not have are skipped).
    pub fn apply(&self, config: &ReplicationConfig) -> ReplicationConfig {
        let mut config = config.clone();
        if let Some(mode) = self.protection_mode {
            config.protection_mode = mode;
        }
        for (name, edit) in &self.destinations {
            if let Some(member) = config.members.iter_mut().find(|member| member.name == *name) {
                edit.apply(&mut attributes_of_member(member));
            }
            if let Some(destination) =
                config.destinations.iter_mut().find(|destination| destination.name == *name)
            {
                edit.apply(&mut attributes_of_destination(destination));
            }
        }
        config
    }

    /// These settings with `edit` made to destination `name` of `config` (an error if it has
    /// none of that name, or if it names this member itself).
    pub fn with_edit(
        &self,
        config: &ReplicationConfig,
        name: &str,
        edit: &DestinationEdit,
    ) -> Result<RuntimeSettings, String> {
        if !has_destination(config, name) {
            let names: Vec<String> =
                config.destinations().into_iter().map(|destination| destination.name).collect();
            let names = if config.has_members() {
                config.members.iter().map(|member| member.name.clone()).collect()
            } else {
                names
            };
            return Err(format!(
                "no destination is named '{name}' (there are: {})",
                names.join(", ")
            ));
        }
        let mut settings = self.clone();
        let merged = settings.destinations.get(name).cloned().unwrap_or_default().merged(edit);
        settings.destinations.insert(name.to_string(), merged);
        Ok(settings)
    }

    /// These settings without any change to destination `name`: it is as the file says again.
    pub fn without(&self, name: &str) -> RuntimeSettings {
        let mut settings = self.clone();
        settings.destinations.remove(name);
        settings
    }
}

/// Whether `config` has a destination `name`: a member (every member is a destination of the
/// others) or a single-role destination.
fn has_destination(config: &ReplicationConfig, name: &str) -> bool {
    if config.has_members() {
        config.member_named(name).is_some()
    } else {
        config.destinations.iter().any(|destination| destination.name == name)
    }
}

/// What about a running destination must change when its configuration goes from `old` to
/// `new`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    /// Read where it is used (timeouts, `max_failure`): no reconnection.
    InPlace,
    /// Its connections are made again with the new settings (transport, affirm, compression,
    /// connections, state): acknowledgements of the old kind never count for the new.
    Reconnect,
}

impl Change {
    pub fn between(old: &DestinationConfig, new: &DestinationConfig) -> Change {
        if old == new {
            return Change::None;
        }
        let in_place = DestinationConfig {
            net_timeout: new.net_timeout,
            reopen: new.reopen,
            max_failure: new.max_failure,
            ..old.clone()
        };
        if in_place == *new { Change::InPlace } else { Change::Reconnect }
    }
}

mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => units::serde_human::duration::serialize(duration, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "units::serde_human::duration")] Duration);
        Option::<Wrapped>::deserialize(deserializer).map(|wrapped| wrapped.map(|Wrapped(d)| d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> ReplicationConfig {
        let text = r#"
            member = "east"
            protection_mode = "maximum_availability"
            [[members]]
            name = "east"
            resp = "127.0.0.1:7001"
            admin = "127.0.0.1:7002"
            redo = "127.0.0.1:7003"
            transport = "sync"
            [[members]]
            name = "west"
            resp = "127.0.0.1:7011"
            admin = "127.0.0.1:7012"
            redo = "127.0.0.1:7013"
            transport = "sync"
            [[members]]
            name = "north"
            resp = "127.0.0.1:7021"
            admin = "127.0.0.1:7022"
            redo = "127.0.0.1:7023"
        "#;
        let config: ReplicationConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        config
    }

    #[test]
    fn pairs_parse_as_the_file_spells_them_and_unknown_keys_are_named() {
        let edit = DestinationEdit::parse_pairs(&[
            "state=defer".into(),
            "transport=sync".into(),
            "affirm=false".into(),
            "net_timeout=2s".into(),
            "compression=zstd".into(),
            "compression_level=3".into(),
            "compression_for=all".into(),
            "max_connections=5".into(),
        ])
        .unwrap();
        assert_eq!(edit.state, Some(DestinationState::Defer));
        assert_eq!(edit.transport, Some(Transport::Sync));
        assert_eq!(edit.affirm, Some(false));
        assert_eq!(edit.net_timeout, Some(Duration::from_secs(2)));
        assert_eq!(edit.compression_level, Some(3));
        assert_eq!(edit.max_connections, Some(5));
        let error = DestinationEdit::parse_pairs(&["address=1.2.3.4:5".into()]).unwrap_err();
        assert!(error.contains("'address' cannot be changed at run time"), "{error}");
        let error = DestinationEdit::parse_pairs(&["transport=carrier-pigeon".into()]).unwrap_err();
        assert!(error.contains("carrier-pigeon"), "{error}");
        let error = DestinationEdit::parse_pairs(&["net_timeout=soon".into()]).unwrap_err();
        assert!(error.contains("soon"), "{error}");
        assert!(DestinationEdit::parse_pairs(&["state".into()]).is_err());
        assert!(
            DestinationEdit::parse_pairs(&["state=defer".into(), "state=enable".into()]).is_err()
        );
        assert!(DestinationEdit::parse_pairs(&[]).is_err());
    }

    #[test]
    fn settings_apply_over_the_file_and_round_trip_through_json() {
        let file = pair();
        let settings = RuntimeSettings::default()
            .with_edit(
                &file,
                "west",
                &DestinationEdit::parse_pairs(&["state=defer".into()]).unwrap(),
            )
            .unwrap()
            .with_edit(
                &file,
                "west",
                &DestinationEdit::parse_pairs(&["compression=lz4".into()]).unwrap(),
            )
            .unwrap();
        let settings = RuntimeSettings {
            protection_mode: Some(ProtectionMode::MaximumPerformance),
            ..settings
        };
        let again = RuntimeSettings::from_json(&settings.to_json()).unwrap();
        assert_eq!(again, settings);
        let effective = settings.apply(&file);
        let west = effective.member_named("west").unwrap();
        assert_eq!(west.state, DestinationState::Defer);
        assert_eq!(west.compression, Compression::Lz4);
        assert_eq!(west.transport, Transport::Sync, "untouched attributes stay the file's");
        assert_eq!(effective.protection_mode, ProtectionMode::MaximumPerformance);
        assert!(settings.with_edit(&file, "south", &DestinationEdit::default()).is_err());
        assert_eq!(
            settings.without("west").apply(&file).member_named("west"),
            file.member_named("west")
        );
        assert!(
            RuntimeSettings::from_json(b"{\"destinations\": {\"west\": {\"address\": \"x\"}}}")
                .is_err()
        );
    }

    #[test]
    fn deferring_the_last_sync_destination_is_refused_where_the_mode_needs_it() {
        let file = pair();
        // East's SYNC partner is west; deferring it leaves east's side of the configuration
        // without a SYNC destination, which maximum_availability forbids.
        let defer = DestinationEdit::parse_pairs(&["state=defer".into()]).unwrap();
        let settings = RuntimeSettings::default().with_edit(&file, "west", &defer).unwrap();
        let error = settings.apply(&file).validate().unwrap_err();
        assert_eq!(error.0, "replication.protection_mode", "{error:?}");
        assert!(error.1.contains("state = \"enable\""), "{error:?}");
        // Under maximum_performance it is allowed.
        let settings = RuntimeSettings {
            protection_mode: Some(ProtectionMode::MaximumPerformance),
            ..settings
        };
        settings.apply(&file).validate().unwrap();
    }

    #[test]
    fn only_reconnecting_attributes_reconnect() {
        let file = pair();
        let old = file.member_named("west").unwrap().destination();
        let change = |pairs: &[&str]| {
            let edit = DestinationEdit::parse_pairs(
                &pairs.iter().map(|pair| pair.to_string()).collect::<Vec<_>>(),
            )
            .unwrap();
            let settings = RuntimeSettings::default().with_edit(&file, "west", &edit).unwrap();
            Change::between(
                &old,
                &settings.apply(&file).member_named("west").unwrap().destination(),
            )
        };
        assert_eq!(change(&["transport=sync"]), Change::None);
        assert_eq!(change(&["net_timeout=3s", "max_failure=3"]), Change::InPlace);
        assert_eq!(change(&["affirm=false"]), Change::Reconnect);
        assert_eq!(change(&["compression=zstd"]), Change::Reconnect);
        assert_eq!(change(&["state=defer"]), Change::Reconnect);
        assert_eq!(change(&["transport=async"]), Change::Reconnect);
    }
}
