//! Limits on what one client can make the server buffer or parse, each with a default and bounds.

use serde::Deserialize;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const GIB: usize = 1024 * MIB;

/// Per-connection protocol limits. Every field is checked by the decoders *before* they wait for
/// or allocate the bytes a client announced, so a `$4294967296` length field is refused at once.
///
/// Deserialises from TOML/JSON with defaults for missing fields and refuses unknown ones; call
/// [`Limits::validate`] once at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest bulk string (one argument of a request, or one bulk in a reply we decode), in
    /// bytes. Redis calls it `proto-max-bulk-len`.
    /// Default: 512 MiB. Bounds: at least 1 KiB, less than `request_bytes_max`.
    #[serde(with = "units::serde_human::size_usize")]
    pub bulk_bytes_max: usize,
    /// Most arguments in one request (the multibulk length, command name included), and most
    /// elements in one aggregate frame (array, set, push; a map counts its pairs).
    /// Default: 1 048 576. Bounds: 3 ..= 2 147 483 647 (Redis's own ceiling).
    pub arguments_max: usize,
    /// Longest inline command (a line like `PING` typed into telnet), in bytes, line end excluded.
    /// Default: 64 KiB (Redis's `PROTO_INLINE_MAX_SIZE`). Bounds: 16 ..= 16 MiB.
    #[serde(with = "units::serde_human::size_usize")]
    pub inline_bytes_max: usize,
    /// Largest single request on the wire, in bytes, framing included. The read buffer of a
    /// connection never holds more than one incomplete request of this size plus one read.
    /// Default: 1 GiB (Redis's `client-query-buffer-limit`). Bounds: greater than
    /// `bulk_bytes_max`.
    #[serde(with = "units::serde_human::size_usize")]
    pub request_bytes_max: usize,
    /// Deepest nesting of aggregate frames the generic frame decoder accepts (requests are
    /// always one level deep).
    /// Default: 32. Bounds: 1 ..= 128 (the decoder recurses once per level).
    pub depth_max: usize,
    /// Most commands one connection may queue between MULTI and EXEC; one more is refused and
    /// makes EXEC fail, as any error while queueing does.
    /// Default: 1 048 576. Bounds: 1 ..= 16 777 216.
    pub transaction_commands_max: usize,
    /// Most elements one hash, list, set or sorted set may hold; a command that would pass it
    /// gets an error and changes nothing.
    /// Default: 4 294 967 295 (Redis's own ceiling). Bounds: 1 ..= 4 294 967 295.
    pub collection_elements_max: u64,
    /// Most elements one command may read, return or change (an LRANGE's reply, a SUNION's
    /// inputs, the walk of a ZRANK); one that would pass it gets an error naming this limit.
    /// Default: 16 777 216. Bounds: 1 ..= 4 294 967 295.
    pub command_elements_max: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            bulk_bytes_max: 512 * MIB,
            arguments_max: 1_048_576,
            inline_bytes_max: 64 * KIB,
            request_bytes_max: GIB,
            depth_max: 32,
            transaction_commands_max: 1_048_576,
            collection_elements_max: u32::MAX as u64,
            command_elements_max: 1 << 24,
        }
    }
}

/// A limit outside its bounds, named as in the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid limit {field} = {value}: {reason}")]
pub struct LimitsError {
    pub field: &'static str,
    pub value: usize,
    pub reason: &'static str,
}

impl Limits {
    /// Refuses values outside the documented bounds, naming the field and the reason.
    pub fn validate(&self) -> Result<(), LimitsError> {
        let refuse = |field, value, reason| Err(LimitsError { field, value, reason });
        if self.bulk_bytes_max < KIB {
            return refuse("bulk_bytes_max", self.bulk_bytes_max, "must be at least 1024 bytes");
        }
        if self.request_bytes_max <= self.bulk_bytes_max {
            return refuse(
                "request_bytes_max",
                self.request_bytes_max,
                "must be greater than bulk_bytes_max, or a request could not carry one bulk",
            );
        }
        if !(3..=i32::MAX as usize).contains(&self.arguments_max) {
            return refuse(
                "arguments_max",
                self.arguments_max,
                "must be between 3 (SET key value) and 2147483647",
            );
        }
        if !(16..=16 * MIB).contains(&self.inline_bytes_max) {
            return refuse(
                "inline_bytes_max",
                self.inline_bytes_max,
                "must be between 16 bytes and 16 MiB",
            );
        }
        if !(1..=128).contains(&self.depth_max) {
            return refuse("depth_max", self.depth_max, "must be between 1 and 128");
        }
        if !(1..=16 * MIB).contains(&self.transaction_commands_max) {
            return refuse(
                "transaction_commands_max",
                self.transaction_commands_max,
                "must be between 1 and 16777216",
            );
        }
        for (field, value) in [
            ("collection_elements_max", self.collection_elements_max),
            ("command_elements_max", self.command_elements_max),
        ] {
            if !(1..=u32::MAX as u64).contains(&value) {
                return refuse(field, value as usize, "must be between 1 and 4294967295");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_redis() {
        let limits = Limits::default();
        limits.validate().unwrap();
        assert_eq!(limits.bulk_bytes_max, 536_870_912);
        assert_eq!(limits.inline_bytes_max, 65_536);
    }

    #[test]
    fn each_bound_is_refused_by_name() {
        type Change = fn(&mut Limits);
        let cases: [(Change, &str); 6] = [
            (|l| l.bulk_bytes_max = 10, "bulk_bytes_max"),
            (|l| l.request_bytes_max = l.bulk_bytes_max, "request_bytes_max"),
            (|l| l.arguments_max = 2, "arguments_max"),
            (|l| l.inline_bytes_max = 17 * MIB, "inline_bytes_max"),
            (|l| l.depth_max = 0, "depth_max"),
            (|l| l.transaction_commands_max = 0, "transaction_commands_max"),
        ];
        for (change, field) in cases {
            let mut limits = Limits::default();
            change(&mut limits);
            let error = limits.validate().unwrap_err();
            assert_eq!(error.field, field);
            assert!(error.to_string().starts_with(&format!("invalid limit {field} = ")));
        }
    }

    #[test]
    fn deserialises_with_defaults_and_refuses_unknown_fields() {
        let limits: Limits = toml::from_str("bulk_bytes_max = 4096").unwrap();
        assert_eq!(limits, Limits { bulk_bytes_max: 4096, ..Limits::default() });
        // Sizes take a unit, as every size in the configuration does (docs/config.md).
        let limits: Limits = toml::from_str(
            "bulk_bytes_max = \"64MiB\"\ninline_bytes_max = \"16KiB\"\nrequest_bytes_max = \"1GiB\"",
        )
        .unwrap();
        assert_eq!(
            (limits.bulk_bytes_max, limits.inline_bytes_max, limits.request_bytes_max),
            (64 * MIB, 16 * KIB, GIB)
        );
        let error = toml::from_str::<Limits>("bulk_bytes_max = \"lots\"").unwrap_err();
        assert!(error.to_string().contains("lots"), "{error}");
        let error = toml::from_str::<Limits>("bulk_max = 1").unwrap_err();
        assert!(error.to_string().contains("unknown field `bulk_max`"), "{error}");
    }
}
