//! The admin token a server makes for itself when its configuration gives none: 32 random
//! bytes, hex, in `DATA_DIR/admin-token` (mode 0600), made at the first start and kept. Every
//! `POST` of the admin API needs it; a `redoguard` command on the same host, as the same user,
//! reads it from there (as a local socket or a cookie file would let it), so nobody types it
//! and no web page can know it.
//!
//! Format: the token and a line break, nothing else, so that `$(cat DATA_DIR/admin-token)` is
//! the token (files made by versions before 2026-12-01 have a comment line after it; only the
//! first line is read).

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
pub const FILE_NAME: &str = "admin-token";

/// The shortest token a configuration may give (`auth.admin_token`).
pub const TOKEN_CHARS_MIN: usize = 16;

/// The longest token file read (a token and its comment line).
const FILE_BYTES_MAX: u64 = 4096;

/// The token in `data_dir`'s file, made now if there is none. Refuses a file that others may
/// read or write (a token anyone can read protects nothing), one that is not a regular file,
/// and one whose token is too short, naming the file and what to do.
pub fn load_or_make(data_dir: &Path) -> anyhow::Result<(String, PathBuf)> {
    let path = absolute(&data_dir.join(FILE_NAME));
    match std::fs::symlink_metadata(&path) {
        Ok(_) => Ok((read_checked(&path)?, path)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let token: String = rand_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|error| {
                    anyhow::anyhow!("cannot make the admin token {}: {error}", path.display())
                })?;
            file.write_all(format!("{token}\n").as_bytes())?;
            file.sync_all()?;
            Ok((token, path))
        }
        Err(error) => anyhow::bail!("cannot read the admin token {}: {error}", path.display()),
    }
}

/// The token in `path`, if the file is safe to trust: a regular file (not a link), owned by
/// this process's user, readable by nobody else.
pub fn read_checked(path: &Path) -> anyhow::Result<String> {
    let metadata = std::fs::symlink_metadata(path).map_err(|error| {
        anyhow::anyhow!("cannot read the admin token {}: {error}", path.display())
    })?;
    if !metadata.file_type().is_file() {
        anyhow::bail!("the admin token {} is not a regular file", path.display());
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "the admin token {} may be read or written by others (mode {mode:o}): `chmod 600` it, or delete it to have the server make a new one",
            path.display()
        );
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if metadata.uid() != me {
        anyhow::bail!(
            "the admin token {} belongs to user {}, not to this process's ({me})",
            path.display(),
            metadata.uid()
        );
    }
    if metadata.len() > FILE_BYTES_MAX {
        anyhow::bail!("the admin token {} is larger than {FILE_BYTES_MAX} bytes", path.display());
    }
    let text = std::fs::read_to_string(path).map_err(|error| {
        anyhow::anyhow!("cannot read the admin token {}: {error}", path.display())
    })?;
    let token = text.lines().next().unwrap_or_default().trim().to_string();
    if token.len() < TOKEN_CHARS_MIN || !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        anyhow::bail!(
            "the admin token {} does not start with a line of at least {TOKEN_CHARS_MIN} printable characters",
            path.display()
        );
    }
    Ok(token)
}

/// What is wrong with a token given to a `redoguard` command (`--token`, `REDOGUARD_TOKEN`), if
/// anything: it goes into an HTTP header, which takes one line of visible characters.
pub fn given_token_problem(token: &str) -> Option<String> {
    if token.is_empty() {
        return Some("is empty".into());
    }
    if token.contains(['\n', '\r']) {
        return Some(format!(
            "holds {} lines: give the token alone (the first line of a server's DATA_DIR/{FILE_NAME})",
            token.lines().count()
        ));
    }
    token.chars().position(|char| !char.is_ascii_graphic()).map(|at| {
        format!(
            "holds a character an HTTP header cannot carry at position {} (a space, a control character or a non-ASCII one)",
            at + 1
        )
    })
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// 32 bytes from the kernel's random source.
fn rand_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: getrandom writes at most the given length into the buffer it is given.
        let got = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if got > 0 {
            filled += got as usize;
        } else {
            assert!(
                std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted,
                "getrandom failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (token, path) = load_or_make(dir.path()).unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_or_make(dir.path()).unwrap().0, token, "kept across starts");
        assert_eq!(read_checked(&path).unwrap(), token);
        // The file is the token alone, as `$(cat admin-token)` gives it to a header.
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{token}\n"));
        // An older file's comment line after it is not read.
        std::fs::write(&path, format!("{token}\n# the admin API token of ...\n")).unwrap();
        assert_eq!(read_checked(&path).unwrap(), token);
        // Readable by others: refused, naming the file and the fix.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = load_or_make(dir.path()).unwrap_err().to_string();
        assert!(error.contains("chmod 600") && error.contains(FILE_NAME), "{error}");
        // A link is not followed.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(read_checked(&link).unwrap_err().to_string().contains("not a regular file"));
        // Too short.
        std::fs::write(&path, "short\n").unwrap();
        assert!(read_checked(&path).is_err());
    }

    #[test]
    fn a_token_given_to_a_command_is_one_line_of_visible_characters() {
        assert_eq!(given_token_problem("0123456789abcdef0123"), None);
        assert!(given_token_problem("").unwrap().contains("empty"));
        let two = given_token_problem("0123456789abcdef\n# the admin API token of ...").unwrap();
        assert!(two.contains("2 lines") && two.contains(FILE_NAME), "{two}");
        let space = given_token_problem("0123 456789abcdef").unwrap();
        assert!(space.contains("position 5"), "{space}");
    }
}
