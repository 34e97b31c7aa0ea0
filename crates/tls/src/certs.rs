//! Test certificates: a CA for a configuration and a certificate for each of its members and
//! observers (`redoguard certs`), and the wrong ones the tests need (expired, for another name,
//! from another CA). ECDSA P-256 keys, made with rcgen on ring.
//!
//! These are for trying redoguard and for tests: the CA key sits in a file next to the
//! certificates. A real deployment issues its certificates from its own PKI, each with the
//! member's name as a DNS subject alternative name.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// The common name of every CA `certs` makes (a CA read back from its files is rebuilt under
/// it: same name and key, so certificates it issues chain to the CA file already written).
const CA_COMMON_NAME: &str = "redoguard configuration CA";

/// A certificate and its key, as PEM text.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// How long a certificate is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// From 2020 to 2100.
    Long,
    /// From 2000 to 2001: expired.
    Expired,
}

/// A certificate authority that issues certificates.
pub struct TestCa {
    key: KeyPair,
    /// What the CA's certificate was made from: its name and key usages sign what it issues.
    params: CertificateParams,
    certificate: rcgen::Certificate,
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names to check");
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2100, 1, 1);
    params
}

impl TestCa {
    /// A new CA (a new key).
    pub fn new() -> Result<TestCa, String> {
        TestCa::named(CA_COMMON_NAME)
    }

    /// A new CA with another common name (a CA the configuration does not trust, in tests).
    pub fn named(common_name: &str) -> Result<TestCa, String> {
        let key = KeyPair::generate().map_err(|error| error.to_string())?;
        TestCa::with_key(ca_params(common_name), key)
    }

    fn with_key(params: CertificateParams, key: KeyPair) -> Result<TestCa, String> {
        let certificate = params.self_signed(&key).map_err(|error| error.to_string())?;
        Ok(TestCa { key, params, certificate })
    }

    /// The CA whose key is in `key_pem` (written by `write`).
    pub fn from_key_pem(key_pem: &str) -> Result<TestCa, String> {
        let key = KeyPair::from_pem(key_pem).map_err(|error| format!("the CA key: {error}"))?;
        TestCa::with_key(ca_params(CA_COMMON_NAME), key)
    }

    pub fn cert_pem(&self) -> String {
        self.certificate.pem()
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A certificate for `names` (each a DNS name or an IP address), valid as `validity` says,
    /// usable by a server and a client.
    pub fn issue(&self, names: &[String], validity: Validity) -> Result<Issued, String> {
        let mut params = CertificateParams::new(names.to_vec())
            .map_err(|error| format!("names {names:?}: {error}"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().cloned().unwrap_or_default());
        params.is_ca = IsCa::NoCa;
        params.key_usages =
            vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages =
            vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let (not_before, not_after) = match validity {
            Validity::Long => ((2020, 1, 1), (2100, 1, 1)),
            Validity::Expired => ((2000, 1, 1), (2001, 1, 1)),
        };
        params.not_before = rcgen::date_time_ymd(not_before.0, not_before.1, not_before.2);
        params.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
        let key = KeyPair::generate().map_err(|error| error.to_string())?;
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let certificate = params.signed_by(&key, &issuer).map_err(|error| error.to_string())?;
        Ok(Issued { cert_pem: certificate.pem(), key_pem: key.serialize_pem() })
    }
}

/// The files `write_set` makes for one name.
#[derive(Debug, Clone)]
pub struct Written {
    pub name: String,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// Writes `ca.pem` and `ca-key.pem` into `dir` (or reuses them if there), then
/// `NAME.pem` and `NAME-key.pem` for each `(name, extra names)`: the certificate is for the
/// name and the extra names (hosts and addresses clients use). Keys are written mode 0600.
pub fn write_set(dir: &Path, names: &[(String, Vec<String>)]) -> Result<Vec<Written>, String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("creating {}: {error}", dir.display()))?;
    let ca_file = dir.join("ca.pem");
    let ca_key_file = dir.join("ca-key.pem");
    let ca = if ca_key_file.exists() {
        let key = std::fs::read_to_string(&ca_key_file)
            .map_err(|error| format!("reading {}: {error}", ca_key_file.display()))?;
        TestCa::from_key_pem(&key)?
    } else {
        let ca = TestCa::new()?;
        write_private(&ca_key_file, &ca.key_pem())?;
        write(&ca_file, &ca.cert_pem())?;
        ca
    };
    if !ca_file.exists() {
        write(&ca_file, &ca.cert_pem())?;
    }
    let mut written = Vec::new();
    for (name, extra) in names {
        let mut all = vec![name.clone()];
        for other in extra {
            if !all.contains(other) {
                all.push(other.clone());
            }
        }
        let issued = ca.issue(&all, Validity::Long)?;
        let cert_file = dir.join(format!("{name}.pem"));
        let key_file = dir.join(format!("{name}-key.pem"));
        write(&cert_file, &issued.cert_pem)?;
        write_private(&key_file, &issued.key_pem)?;
        written.push(Written { name: name.clone(), cert_file, key_file });
    }
    Ok(written)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|error| format!("writing {}: {error}", path.display()))
}

fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|error| format!("writing {}: {error}", path.display()))?;
    file.write_all(text.as_bytes()).map_err(|error| format!("writing {}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TlsConfig;
    use crate::material::Material;

    fn config(dir: &Path, name: &str) -> TlsConfig {
        TlsConfig {
            ca_file: dir.join("ca.pem"),
            cert_file: dir.join(format!("{name}.pem")),
            key_file: dir.join(format!("{name}-key.pem")),
            name: None,
            redo: true,
            resp_port: None,
            admin: false,
        }
    }

    #[test]
    fn a_written_set_loads_and_a_second_run_reuses_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        write_set(dir.path(), &[("east".into(), vec!["127.0.0.1".into()])]).unwrap();
        let ca = std::fs::read(dir.path().join("ca.pem")).unwrap();
        write_set(dir.path(), &[("west".into(), Vec::new())]).unwrap();
        assert_eq!(std::fs::read(dir.path().join("ca.pem")).unwrap(), ca, "the CA was remade");
        for name in ["east", "west"] {
            let material = Material::load(&config(dir.path(), name), name).unwrap();
            assert!(crate::proves(&material.chain[0], name));
            assert!(!crate::proves(&material.chain[0], "north"));
        }
    }

    #[test]
    fn wrong_certificates_are_refused_at_load_naming_why() {
        let dir = tempfile::tempdir().unwrap();
        write_set(dir.path(), &[("east".into(), Vec::new())]).unwrap();
        let error = Material::load(&config(dir.path(), "east"), "west").unwrap_err().to_string();
        assert!(error.contains("not a certificate for 'west'"), "{error}");

        let ca_key = std::fs::read_to_string(dir.path().join("ca-key.pem")).unwrap();
        let expired = TestCa::from_key_pem(&ca_key)
            .unwrap()
            .issue(&["east".to_string()], Validity::Expired)
            .unwrap();
        std::fs::write(dir.path().join("east.pem"), &expired.cert_pem).unwrap();
        std::fs::write(dir.path().join("east-key.pem"), &expired.key_pem).unwrap();
        // An expired certificate loads (the process can start), with a warning that says so.
        let material = Material::load(&config(dir.path(), "east"), "east").unwrap();
        let warning = material.validity_warning.unwrap();
        assert!(warning.contains("has expired") && warning.contains("cert_file"), "{warning}");

        let other = TestCa::named("another CA").unwrap();
        let stranger = other.issue(&["east".to_string()], Validity::Long).unwrap();
        std::fs::write(dir.path().join("east.pem"), &stranger.cert_pem).unwrap();
        std::fs::write(dir.path().join("east-key.pem"), &stranger.key_pem).unwrap();
        let error = Material::load(&config(dir.path(), "east"), "east").unwrap_err().to_string();
        assert!(error.contains("not signed by the CA"), "{error}");

        std::fs::write(dir.path().join("east-key.pem"), &expired.key_pem).unwrap();
        let error = Material::load(&config(dir.path(), "east"), "east").unwrap_err().to_string();
        assert!(error.contains("is not the key of"), "{error}");
    }
}
