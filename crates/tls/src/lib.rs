//! TLS for every port a redoguard process opens: the `[tls]` section (`config`), the
//! certificates and keys it names, loaded and checked once at start-up (`material`), the
//! rustls configurations built from them with the `ring` provider (`redo` for mutual TLS
//! between members and observers, `server_only` for RESP and the admin API), what a failed
//! handshake means in words (`describe`), and test certificates (`certs`, for
//! `redoguard certs` and the tests).
//!
//! *Architecture Invariant*: a peer's identity on redo transport is the name its certificate
//! proves (a DNS subject alternative name, checked by webpki against the configuration's CA),
//! never a name it merely sends; `proves` is the only test of it.

pub mod certs;
pub mod config;
pub mod describe;
pub mod material;
pub mod redo;

pub use config::TlsConfig;
pub use describe::describe;
pub use material::{Material, TlsError};
pub use redo::{RedoTls, proves};

/// The crypto provider every configuration here uses: ring (pure Rust and assembly, no C
/// toolchain beyond what ring itself builds, no aws-lc).
pub fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}
