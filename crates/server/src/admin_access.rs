//! Who may use the admin API, checked on every request before any handler runs:
//!
//! - **Host**: the request must be addressed to one of the server's own names — `localhost`,
//!   a loopback address, the address the admin API binds (every local interface's when it binds
//!   all of them), the member's `admin` and `resp` hosts in the configuration, the TLS name,
//!   and `server.admin_hosts`. A page on another name that DNS rebinding points here is refused.
//! - **Origin**: a request a browser sends on behalf of a page (`Origin`, `Sec-Fetch-Site`)
//!   must come from the admin API's own page: a page of another site cannot make the browser
//!   drive it (CSRF), GETs included.
//! - **Token**: every `POST` needs `Authorization: Bearer TOKEN`, always: `auth.admin_token`,
//!   or the token the server made at its first start in `DATA_DIR/admin-token` (mode 0600),
//!   which `redoguard` commands on this host read by themselves (`admin::token`).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::ServerConfig;

/// The admin API's checks, made once at start.
#[derive(Debug, Clone)]
pub struct AdminAccess {
    token: String,
    /// Where the token is, when the server made it (none: it is `auth.admin_token`).
    pub token_file: Option<PathBuf>,
    /// The host names and addresses requests may be addressed to, lower case.
    hosts: BTreeSet<String>,
}

impl AdminAccess {
    /// The token (configured, or made in the data directory) and the server's own names.
    pub fn new(config: &ServerConfig) -> anyhow::Result<AdminAccess> {
        let (token, token_file) = match &config.auth.admin_token {
            Some(token) => (token.clone(), None),
            None => {
                let (token, path) = admin::token::load_or_make(&config.server.data_dir)?;
                (token, Some(path))
            }
        };
        let mut hosts: BTreeSet<String> =
            ["localhost", "127.0.0.1", "::1"].into_iter().map(String::from).collect();
        let bind = config.server.admin_bind;
        if bind.is_unspecified() {
            hosts.extend(local_addresses().iter().map(IpAddr::to_string));
        } else {
            hosts.insert(bind.to_string());
        }
        if let Some(member) = config
            .replication
            .member
            .as_deref()
            .and_then(|name| config.replication.member_named(name))
        {
            for address in [&member.admin, &member.resp] {
                hosts.insert(host_of(address));
            }
        }
        hosts.extend(config.tls_name());
        hosts.extend(config.server.admin_hosts.iter().map(|host| normalized(host)));
        Ok(AdminAccess { token, token_file, hosts })
    }

    /// A refusal for a request that may not go on, or none.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Option<Response> {
        let text = |name: header::HeaderName| {
            headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim)
        };
        let Some(host) = text(header::HOST) else {
            return Some(refuse(StatusCode::BAD_REQUEST, "a request needs a Host header\n".into()));
        };
        if !self.hosts.contains(&host_of(host)) {
            tracing::warn!(
                host,
                "admin API: a request addressed to another name was refused (DNS rebinding?)"
            );
            return Some(refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "the admin API answers only requests addressed to one of its own names; Host: {} is not one (if it is, add it to server.admin_hosts)\n",
                    printable(host)
                ),
            ));
        }
        if let Some(origin) = text(header::ORIGIN) {
            let own = origin.split_once("://").is_some_and(|(scheme, authority)| {
                matches!(scheme, "http" | "https") && authority.eq_ignore_ascii_case(host)
            });
            if !own {
                tracing::warn!(origin, "admin API: a request from another site's page was refused");
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    format!(
                        "the admin API refuses requests from another site's page (Origin: {})\n",
                        printable(origin)
                    ),
                ));
            }
        }
        if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))
            && !matches!(site, "same-origin" | "none")
        {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "the admin API refuses requests a browser makes for another site's page (Sec-Fetch-Site: {})\n",
                    printable(site)
                ),
            ));
        }
        if matches!(*method, Method::GET | Method::HEAD) {
            return None;
        }
        match text(header::AUTHORIZATION).and_then(|value| value.strip_prefix("Bearer ")) {
            Some(token) if crate::auth::token_matches(&self.token, token.trim()) => None,
            Some(_) => {
                tracing::warn!("admin API: a request with a wrong token was refused");
                Some(refuse(StatusCode::FORBIDDEN, "the admin token is wrong\n".into()))
            }
            None => Some(
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    format!(
                        "this endpoint needs the admin token: send Authorization: Bearer TOKEN ({}; redoguard commands: --token or REDOGUARD_TOKEN)\n",
                        match &self.token_file {
                            Some(path) => format!(
                                "it is in {}, which redoguard commands of its user on this host read by themselves",
                                path.display()
                            ),
                            None => "auth.admin_token".to_string(),
                        }
                    ),
                )
                    .into_response(),
            ),
        }
    }
}

fn refuse(code: StatusCode, text: String) -> Response {
    (code, text).into_response()
}

/// The host of `host:port`, `[v6]:port`, `v6`, or a bare name, normalized.
fn host_of(address: &str) -> String {
    let address = address.trim();
    let host = if let Some(rest) = address.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(host, _)| host)
    } else if address.matches(':').count() == 1 {
        address.split_once(':').map_or(address, |(host, _)| host)
    } else {
        address
    };
    normalized(host)
}

fn normalized(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// At most 100 characters, control characters as `?`.
fn printable(text: &str) -> String {
    text.chars().take(100).map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// The addresses of this host's interfaces (for an admin API bound to all of them).
fn local_addresses() -> Vec<IpAddr> {
    let mut addresses = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we read and then free once.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return addresses;
        }
        let mut entry = list;
        while !entry.is_null() {
            let address = (*entry).ifa_addr;
            if !address.is_null() {
                match i32::from((*address).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(address as *const libc::sockaddr_in);
                        addresses
                            .push(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(address as *const libc::sockaddr_in6);
                        addresses.push(IpAddr::from(v6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            entry = (*entry).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    addresses
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> AdminAccess {
        AdminAccess {
            token: "a token of sixteen or more".into(),
            token_file: None,
            hosts: ["localhost", "127.0.0.1", "::1", "db1.example"]
                .into_iter()
                .map(String::from)
                .collect(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn code(response: Option<Response>) -> Option<u16> {
        response.map(|response| response.status().as_u16())
    }

    #[test]
    fn host_origin_and_token_are_each_checked() {
        let access = access();
        let get =
            |pairs: &[(&'static str, &str)]| code(access.check(&Method::GET, &headers(pairs)));
        let post =
            |pairs: &[(&'static str, &str)]| code(access.check(&Method::POST, &headers(pairs)));
        assert_eq!(get(&[("host", "127.0.0.1:6391")]), None);
        assert_eq!(get(&[("host", "[::1]:6391")]), None);
        assert_eq!(get(&[("host", "DB1.example.:6391")]), None);
        assert_eq!(get(&[("host", "evil.example:6391")]), Some(403), "DNS rebinding");
        assert_eq!(get(&[]), Some(400));
        // The page's own requests pass; another site's do not, nor a browser's cross-site one.
        assert_eq!(get(&[("host", "localhost:6391"), ("origin", "http://localhost:6391")]), None);
        assert_eq!(
            get(&[("host", "localhost:6391"), ("origin", "http://evil.example")]),
            Some(403)
        );
        assert_eq!(get(&[("host", "localhost:6391"), ("origin", "null")]), Some(403));
        assert_eq!(get(&[("host", "localhost:6391"), ("sec-fetch-site", "cross-site")]), Some(403));
        assert_eq!(get(&[("host", "localhost:6391"), ("sec-fetch-site", "same-origin")]), None);
        // POSTs need the token, always.
        assert_eq!(post(&[("host", "localhost:6391")]), Some(401));
        assert_eq!(
            post(&[("host", "localhost:6391"), ("authorization", "Bearer wrong")]),
            Some(403)
        );
        assert_eq!(
            post(&[
                ("host", "localhost:6391"),
                ("authorization", "Bearer a token of sixteen or more")
            ]),
            None
        );
        // The right token from another site's page is refused all the same.
        assert_eq!(
            post(&[
                ("host", "localhost:6391"),
                ("origin", "http://evil.example"),
                ("authorization", "Bearer a token of sixteen or more")
            ]),
            Some(403)
        );
    }

    #[test]
    fn hosts_are_taken_from_addresses() {
        assert_eq!(host_of("127.0.0.1:6391"), "127.0.0.1");
        assert_eq!(host_of("[::1]:6391"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("Example.COM."), "example.com");
        assert!(local_addresses().iter().any(IpAddr::is_loopback));
    }
}
