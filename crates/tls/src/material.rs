//! The files `[tls]` names, read and checked once at start-up: the CA, this process's
//! certificate chain and its key. Every error names the file and what is wrong with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::config::TlsConfig;
use crate::describe::describe_certificate_error;

/// Why TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls.{field} ({path}): {reason}")]
    File { field: &'static str, path: PathBuf, reason: String },
    #[error("tls: {0}")]
    Invalid(String),
}

/// What `[tls]` names, loaded.
#[derive(Debug)]
pub struct Material {
    pub roots: Arc<RootCertStore>,
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The name this process's certificate proves.
    pub name: String,
    /// The certificate is expired or not valid yet: it loads (the process can start and serve
    /// its clients, and a new certificate can be put in place), but peers will refuse it.
    pub validity_warning: Option<String>,
}

fn file_error(field: &'static str, path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::File { field, path: path.to_path_buf(), reason: reason.into() }
}

fn certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    std::fs::metadata(path).map_err(|error| file_error(field, path, error.to_string()))?;
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|error| file_error(field, path, error.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| file_error(field, path, format!("not PEM certificates: {error}")))?;
    if certificates.is_empty() {
        return Err(file_error(field, path, "holds no certificate (-----BEGIN CERTIFICATE-----)"));
    }
    Ok(certificates)
}

impl Material {
    /// Reads the files and checks them: the CA parses, the key is one rustls can sign with and
    /// belongs to the certificate, and the certificate is signed by the CA, valid now, and for
    /// `name`.
    pub fn load(config: &TlsConfig, name: &str) -> Result<Material, TlsError> {
        if ServerName::try_from(name.to_string()).is_err() {
            return Err(TlsError::Invalid(format!(
                "'{name}' cannot be a certificate's name: it is not a DNS name (labels of letters, digits, '-' and '_', separated by '.')"
            )));
        }
        let mut roots = RootCertStore::empty();
        for certificate in certificates("ca_file", &config.ca_file)? {
            roots.add(certificate).map_err(|error| {
                file_error(
                    "ca_file",
                    &config.ca_file,
                    format!("not a usable CA certificate: {error}"),
                )
            })?;
        }
        let chain = certificates("cert_file", &config.cert_file)?;
        std::fs::metadata(&config.key_file)
            .map_err(|error| file_error("key_file", &config.key_file, error.to_string()))?;
        let key = PrivateKeyDer::from_pem_file(&config.key_file).map_err(|error| {
            file_error("key_file", &config.key_file, format!("no private key in it: {error}"))
        })?;
        let provider = crate::provider();
        let signing = provider.key_provider.load_private_key(key.clone_key()).map_err(|error| {
            file_error("key_file", &config.key_file, format!("not a usable key: {error}"))
        })?;
        let certified = rustls::sign::CertifiedKey::new(chain.clone(), signing);
        if let Err(error) = certified.keys_match() {
            return Err(file_error(
                "key_file",
                &config.key_file,
                format!("is not the key of {} ({error})", config.cert_file.display()),
            ));
        }
        let roots = Arc::new(roots);
        // Our own certificate, checked as a peer will check it: a member learns at start-up,
        // not at its first connection, that its certificate expired or is for another name.
        let verifier = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider)
            .build()
            .map_err(|error| TlsError::Invalid(error.to_string()))?;
        let server_name = ServerName::try_from(name.to_string()).expect("checked above");
        let mut validity_warning = None;
        if let Err(error) =
            verifier.verify_server_cert(&chain[0], &chain[1..], &server_name, &[], UnixTime::now())
        {
            let text = format!(
                "tls.cert_file ({}): {}",
                config.cert_file.display(),
                describe_certificate_error(&error, "this certificate", name, "tls.ca_file")
            );
            match error {
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::Expired
                    | rustls::CertificateError::ExpiredContext { .. }
                    | rustls::CertificateError::NotValidYet
                    | rustls::CertificateError::NotValidYetContext { .. },
                ) => validity_warning = Some(text),
                _ => {
                    return Err(file_error(
                        "cert_file",
                        &config.cert_file,
                        describe_certificate_error(&error, "this certificate", name, "tls.ca_file"),
                    ));
                }
            }
        }
        Ok(Material { roots, chain, key, name: name.to_string(), validity_warning })
    }
}
