//! What a new standby asks before it adopts a database identity from a primary's hello when
//! redo transport runs without TLS (with TLS the peer's certificate has proved its name already,
//! `transport::admission`). A standby adopts an identity once, for good, so a stranger that
//! said hello first would keep the real primary out:
//!
//! - in a configuration (`[[replication.members]]`), the hello must come from the address of
//!   the member it claims to be, and that member, reached at its configured redo address (a
//!   connection this standby opens, to where the configuration says the primary is), must
//!   answer that it is a primary of the database the hello gives;
//! - in the single-role form, the hello must come from the host of `replication.standby.primary`
//!   when it is given.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs as _};
use std::sync::Arc;
use std::time::Duration;

use transport::receiver::IdentityVoucher;

use crate::ServerConfig;

/// How long the probe of the claimed primary may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The voucher of a member whose redo runs without TLS; none with TLS.
pub(crate) fn voucher(config: &ServerConfig) -> Option<IdentityVoucher> {
    if config.tls.as_ref().is_some_and(|tls| tls.redo) {
        return None;
    }
    let replication = config.replication.clone();
    if replication.members.is_empty() {
        let primary = replication.standby.primary.clone()?;
        return Some(Arc::new(move |_hello, peer| {
            from_host_of(&primary, peer, "replication.standby.primary")
        }));
    }
    let me = replication.member.clone().unwrap_or_default();
    Some(Arc::new(move |hello, peer| {
        let Some(member) = replication.member_named(&hello.member).filter(|m| m.name != me) else {
            return Err(format!("'{}' is not another member of this configuration", hello.member));
        };
        from_host_of(&member.redo, peer, &format!("member {}'s redo address", member.name))?;
        let info = transport::probe(&member.redo, &member.name, &me, None, PROBE_TIMEOUT).map_err(
            |error| format!("member {} could not be asked who it is: {error}", member.name),
        )?;
        // A member forwarding its primary's redo (cascading; the receiver has checked that the
        // routes name it) is a standby of that database.
        if !hello.relay_of.is_empty() {
            if info.role != proto::WireRole::Standby || info.database_id != hello.database_id {
                return Err(format!(
                    "member {} at its configured address {} says it is a {:?} of database {}, not a standby of database {} forwarding its primary's redo as this hello claims",
                    member.name, member.redo, info.role, info.database_id, hello.database_id
                ));
            }
            return Ok(());
        }
        if info.role != proto::WireRole::Primary || info.database_id != hello.database_id {
            return Err(format!(
                "member {} at its configured address {} says it is a {:?} of database {}, not the primary of database {} this hello claims",
                member.name, member.redo, info.role, info.database_id, hello.database_id
            ));
        }
        Ok(())
    }))
}

/// `Ok` if `peer` connected from one of the addresses `address`'s host resolves to.
fn from_host_of(address: &str, peer: SocketAddr, what: &str) -> Result<(), String> {
    let resolved: Vec<IpAddr> = address
        .to_socket_addrs()
        .map(|addresses| addresses.map(|address| address.ip()).collect())
        .unwrap_or_default();
    let peer_ip = peer.ip().to_canonical();
    if resolved.iter().any(|ip| ip.to_canonical() == peer_ip) {
        return Ok(());
    }
    Err(format!("it connected from {peer_ip}, which is not the host of {what} ({address})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_must_come_from_the_configured_host() {
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert!(from_host_of("127.0.0.1:6392", peer, "x").is_ok());
        let error = from_host_of("10.1.2.3:6392", peer, "member east's redo address").unwrap_err();
        assert!(error.contains("127.0.0.1") && error.contains("10.1.2.3:6392"), "{error}");
    }
}
