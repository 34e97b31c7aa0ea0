//! The `[tls]` section of a server's or an observer's file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

fn yes() -> bool {
    true
}

/// `[tls]`: where this process's certificate, its key and the configuration's CA are, and
/// which ports speak TLS. Without the section nothing does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the certificate authority that signs every member's and observer's
    /// certificate: on redo transport a peer is trusted only if its certificate chains to it.
    /// Required. Relative paths are taken from the configuration file's directory.
    pub ca_file: PathBuf,
    /// PEM file of this process's certificate (then any intermediates). Required.
    pub cert_file: PathBuf,
    /// PEM file of its private key (PKCS#8, SEC1 or PKCS#1). Required.
    pub key_file: PathBuf,
    /// The name this process's certificate proves (one of its DNS subject alternative names):
    /// how peers know it. Default: `replication.member` (a member of the configuration form),
    /// `observer.name` (an observer); required in the single-role form, where a primary's
    /// destination `name` must be its standby's.
    #[serde(default)]
    pub name: Option<String>,
    /// Mutual TLS on redo transport: the redo listener, and every connection this process
    /// opens to another member's (redo, probes, copies, observer pings). Default: `true`.
    #[serde(default = "yes")]
    pub redo: bool,
    /// A second Redis-protocol port that speaks TLS (Redis's `tls-port`), on `server.bind`;
    /// 0 picks a free one. Clients need no certificate of their own (they authenticate with
    /// AUTH). Default: none.
    #[serde(default)]
    pub resp_port: Option<u16>,
    /// The admin API speaks HTTPS instead of HTTP (the `redoguard` commands then need
    /// `--ca`). Default: `false`.
    #[serde(default)]
    pub admin: bool,
}

impl TlsConfig {
    /// The paths, taken from `base` (the configuration file's directory) when relative.
    pub fn resolve(mut self, base: &Path) -> TlsConfig {
        for path in [&mut self.ca_file, &mut self.cert_file, &mut self.key_file] {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
        self
    }
}
