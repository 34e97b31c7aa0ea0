//! `redoguard passwd`: a password's argon2id hash for `[[auth.users]]`; and how every command
//! reaches admin APIs (`--token`, `--ca`).

use std::io::Read as _;
use std::path::PathBuf;

use anyhow::Context as _;

pub fn run() -> anyhow::Result<()> {
    let mut password = String::new();
    std::io::stdin().read_to_string(&mut password).context("reading the password")?;
    let password = password.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        anyhow::bail!("no password on standard input (echo -n 'secret' | redoguard passwd)");
    }
    println!("{}", server::auth::hash_password(password.as_bytes()).map_err(anyhow::Error::msg)?);
    Ok(())
}

/// The admin API token and CA this process's calls use.
pub fn set_admin_client(token: Option<String>, ca: Option<PathBuf>) -> anyhow::Result<()> {
    if let Some(problem) = token.as_deref().and_then(admin::token::given_token_problem) {
        anyhow::bail!("the admin token given (--token or REDOGUARD_TOKEN) {problem}");
    }
    let tls = match ca {
        Some(path) => Some(tls::redo::client_only(std::sync::Arc::new(roots(&path)?))),
        None => None,
    };
    admin::set_admin_client(admin::AdminClient { token, tls });
    Ok(())
}

fn roots(path: &std::path::Path) -> anyhow::Result<rustls::RootCertStore> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls::pki_types::CertificateDer::pem_file_iter(path)
        .with_context(|| format!("--ca {}", path.display()))?
    {
        roots
            .add(certificate.with_context(|| format!("--ca {}", path.display()))?)
            .with_context(|| format!("--ca {}", path.display()))?;
    }
    Ok(roots)
}
