//! `redoguard certs`: a test CA and a certificate for every member and observer of a
//! configuration, so that the examples and the demo run with TLS on (docs/security.md).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write `ca.pem`, `ca-key.pem`, and `NAME.pem` and `NAME-key.pem` for each name.
    /// A CA already there is reused, so members can be added later.
    #[arg(long)]
    pub out: PathBuf,
    /// Configuration files (a member's or an observer's): a certificate for every member and
    /// observer they list, also valid for the hosts of its client and admin addresses.
    #[arg(long)]
    pub config: Vec<PathBuf>,
    /// More names to issue a certificate for (a single-role primary or standby, say).
    pub names: Vec<String>,
}

/// The host part of `host:port`.
fn host(address: &str) -> Option<String> {
    let (host, _) = address.rsplit_once(':')?;
    Some(host.trim_start_matches('[').trim_end_matches(']').to_string())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut names: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |name: String, hosts: Vec<String>| {
        if let Some(entry) = names.iter_mut().find(|(known, _)| *known == name) {
            entry.1.extend(hosts);
        } else {
            names.push((name, hosts));
        }
    };
    for path in &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let table: toml::Table =
            toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
        let Some(replication) = table.get("replication").cloned() else {
            anyhow::bail!("{} has no [replication] section to take names from", path.display());
        };
        let replication: server::config::ReplicationSection =
            replication.try_into().with_context(|| format!("{}: [replication]", path.display()))?;
        for member in &replication.members {
            let hosts = [&member.resp, &member.admin].into_iter().filter_map(|a| host(a)).collect();
            add(member.name.clone(), hosts);
        }
        for observer in &replication.observers {
            add(observer.name.clone(), host(&observer.sentinel).into_iter().collect());
        }
    }
    for name in args.names {
        add(name, Vec::new());
    }
    if names.is_empty() {
        anyhow::bail!("no names: give --config FILE (its members and observers) or NAME...");
    }
    let written = tls::certs::write_set(&args.out, &names).map_err(anyhow::Error::msg)?;
    println!("CA: {}", args.out.join("ca.pem").display());
    for file in &written {
        println!("{}: {} (key {})", file.name, file.cert_file.display(), file.key_file.display());
    }
    let dir = files_dir(&args.out, &args.config);
    let at = |file: &str| dir.join(file).display().to_string();
    println!(
        "\nIn each member's file (paths are relative to that file's directory):\n[tls]\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}",
        at("ca.pem"),
        at("NAME.pem"),
        at("NAME-key.pem")
    );
    Ok(())
}

/// The directory of the files as a member's configuration names it: relative to the
/// configuration files' directory when they share one and it holds them, else absolute
/// (without `--config`, as given).
fn files_dir(out: &Path, configs: &[PathBuf]) -> PathBuf {
    let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parent = |config: &PathBuf| absolute(config).parent().map(Path::to_path_buf);
    let Some(base) = configs.first().map(parent) else { return out.to_path_buf() };
    if configs.iter().any(|config| parent(config) != base) {
        return absolute(out);
    }
    let base = base.unwrap_or_default();
    let out = absolute(out);
    match out.strip_prefix(&base) {
        Ok(relative) if relative.as_os_str().is_empty() => PathBuf::from("."),
        Ok(relative) => relative.to_path_buf(),
        Err(_) => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_names_the_files_as_the_configuration_finds_them() {
        let cwd = std::env::current_dir().unwrap();
        let paths = |paths: &[&str]| paths.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(files_dir(Path::new("certs"), &[]), PathBuf::from("certs"));
        assert_eq!(
            files_dir(Path::new("certs"), &paths(&["primary.toml"])),
            PathBuf::from("certs")
        );
        assert_eq!(
            files_dir(Path::new("certs"), &paths(&["conf/primary.toml"])),
            cwd.join("certs")
        );
        assert_eq!(
            files_dir(Path::new("conf/certs"), &paths(&["conf/a.toml"])),
            PathBuf::from("certs")
        );
        assert_eq!(files_dir(Path::new("conf"), &paths(&["conf/a.toml"])), PathBuf::from("."));
        // Files in two directories: one path serves both only if absolute.
        assert_eq!(
            files_dir(Path::new("certs"), &paths(&["a.toml", "other/b.toml"])),
            cwd.join("certs")
        );
    }
}
