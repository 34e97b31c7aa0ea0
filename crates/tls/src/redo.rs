//! Mutual TLS for redo transport, and TLS for the ports clients use.
//!
//! Between members and observers both sides present a certificate and both check the other's
//! against the configuration's CA (TLS 1.3 only: every peer is a redoguard process). The side
//! that connects also checks that the certificate is for the member it meant to reach (the
//! server name it asks for is that member's name, not its host); the side that accepts learns
//! the peer's certificate and checks its name against what the peer then claims to be
//! (`proves`).

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, ServerConfig, ServerConnection};
use rustls_pki_types::{CertificateDer, ServerName};

use crate::material::{Material, TlsError};

/// The rustls configurations of one process's redo transport.
pub struct RedoTls {
    /// The name this process's certificate proves.
    pub name: String,
    /// Why peers will refuse this certificate (expired, not valid yet), if they will.
    pub validity_warning: Option<String>,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for RedoTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedoTls").field("name", &self.name).finish_non_exhaustive()
    }
}

impl RedoTls {
    pub fn new(material: &Material) -> Result<RedoTls, TlsError> {
        let provider = crate::provider();
        let invalid = |error: rustls::Error| TlsError::Invalid(error.to_string());
        let verifier =
            WebPkiClientVerifier::builder_with_provider(material.roots.clone(), provider.clone())
                .build()
                .map_err(|error| TlsError::Invalid(error.to_string()))?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(invalid)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(material.chain.clone(), material.key.clone_key())
            .map_err(invalid)?;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(invalid)?
            .with_root_certificates(material.roots.clone())
            .with_client_auth_cert(material.chain.clone(), material.key.clone_key())
            .map_err(invalid)?;
        Ok(RedoTls {
            name: material.name.clone(),
            validity_warning: material.validity_warning.clone(),
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// A client connection to the member or observer called `peer` (its certificate must be
    /// for that name).
    pub fn client(&self, peer: &str) -> Result<ClientConnection, String> {
        let name = ServerName::try_from(peer.to_string())
            .map_err(|_| format!("'{peer}' cannot be a certificate's name (not a DNS name)"))?;
        ClientConnection::new(self.client.clone(), name).map_err(|error| error.to_string())
    }

    /// A server connection for a peer that connected to this process.
    pub fn server(&self) -> Result<ServerConnection, String> {
        ServerConnection::new(self.server.clone()).map_err(|error| error.to_string())
    }
}

/// Whether `certificate` (a peer's, already verified against the CA in the handshake) is for
/// `name`: one of its DNS subject alternative names is `name`.
pub fn proves(certificate: &CertificateDer<'_>, name: &str) -> bool {
    let Ok(server_name) = ServerName::try_from(name) else {
        return false;
    };
    webpki::EndEntityCert::try_from(certificate)
        .is_ok_and(|end_entity| end_entity.verify_is_valid_for_subject_name(&server_name).is_ok())
}

/// A server configuration for clients without certificates (RESP's TLS port, the admin API),
/// TLS 1.2 and 1.3.
pub fn server_only(material: &Material) -> Result<Arc<ServerConfig>, TlsError> {
    let config = ServerConfig::builder_with_provider(crate::provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| TlsError::Invalid(error.to_string()))?
        .with_no_client_auth()
        .with_single_cert(material.chain.clone(), material.key.clone_key())
        .map_err(|error| TlsError::Invalid(error.to_string()))?;
    Ok(Arc::new(config))
}

/// A client configuration that trusts the CA in `material` and presents no certificate (the
/// admin API's clients).
pub fn client_only(roots: Arc<rustls::RootCertStore>) -> Arc<ClientConfig> {
    Arc::new(
        ClientConfig::builder_with_provider(crate::provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}
