//! Who may use the server: the Redis-protocol users (`requirepass` for Redis's `default`
//! user, and `[[auth.users]]` with argon2id password hashes and a permission each), and the
//! bearer token the admin API's mutating endpoints need (`docs/security.md`).
//!
//! Passwords are kept only as argon2id hashes (`requirepass` is hashed at start-up). A check
//! costs one argon2 verification (tens of milliseconds of one CPU, on purpose): at most two run
//! at once, on blocking threads, and a password already accepted for a user is recognized from
//! its SHA-256 next time (in memory only) so reconnecting clients do not pay it again. An
//! unknown user costs the same as a wrong password, so timing does not tell which names exist.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};
use bytes::Bytes;
use parking_lot::Mutex;
use resp::{Permission, User};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// `[[auth.users]]`: one Redis-protocol user.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// Its name (`AUTH name password`). Required, 1..=64 printable ASCII without spaces.
    pub name: String,
    /// Its password's argon2id hash (PHC string, `$argon2id$v=19$...`), as `redoguard passwd`
    /// prints it. Required.
    pub password_hash: String,
    /// `read`, `write` or `admin`. Default: `write`.
    #[serde(default = "default_permission")]
    pub permission: Permission,
}

fn default_permission() -> Permission {
    Permission::Write
}

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSection {
    /// The password of Redis's `default` user, who may do everything (`AUTH password`), as
    /// Redis's `requirepass`. Hashed at start-up; keep the file readable by the server only.
    /// Default: none.
    pub requirepass: Option<String>,
    /// More users. Default: none. With `requirepass` or any user, every client must
    /// authenticate.
    pub users: Vec<UserEntry>,
    /// The bearer token the admin API's mutating endpoints (`POST`) need
    /// (`Authorization: Bearer TOKEN`); at least 16 characters. Default: none (they are open,
    /// which is safe only while the admin API binds loopback).
    pub admin_token: Option<String>,
    /// The permission of every client when no password is configured (neither `requirepass`
    /// nor any user): `read`, `write` or `admin`. Default: `write` (SHUTDOWN, CONFIG and
    /// FLUSHALL need a password). `admin` is Redis without `requirepass`, for a throw-away
    /// server on loopback such as the one `scripts/redis-suite` runs Redis's test suite against
    /// (whose client cannot authenticate); protected mode still keeps such a server on
    /// loopback unless `--insecure`.
    pub open_permission: Option<Permission>,
}

impl AuthSection {
    /// The permission of a client that has not authenticated, when no password is configured.
    pub fn open_permission(&self) -> Permission {
        self.open_permission.unwrap_or(Permission::Write)
    }

    /// Checks the section; the error is (field, reason).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.requirepass.as_deref().is_some_and(str::is_empty) {
            return Err(("auth.requirepass".into(), "is empty".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for (index, user) in self.users.iter().enumerate() {
            let field = |name: &str| format!("auth.users[{index}].{name}");
            let valid = (1..=64).contains(&user.name.len())
                && user.name.bytes().all(|byte| byte.is_ascii_graphic());
            if !valid || !names.insert(user.name.as_str()) {
                return Err((
                    field("name"),
                    format!("'{}' is not 1..=64 printable characters, or is used twice", user.name),
                ));
            }
            if user.name == "default" && self.requirepass.is_some() {
                return Err((
                    field("name"),
                    "'default' is the user requirepass sets; give one or the other".into(),
                ));
            }
            if let Err(error) = PasswordHash::new(&user.password_hash) {
                return Err((
                    field("password_hash"),
                    format!("not a password hash ({error}); make one with `redoguard passwd`"),
                ));
            }
        }
        if self.open_permission.is_some() && (self.requirepass.is_some() || !self.users.is_empty())
        {
            return Err((
                "auth.open_permission".into(),
                "applies only without a password (requirepass or users), where every client has it; remove it, or the passwords".into(),
            ));
        }
        if let Some(token) = &self.admin_token
            && token.len() < 16
        {
            return Err((
                "auth.admin_token".into(),
                format!("{} characters; at least 16", token.len()),
            ));
        }
        Ok(())
    }
}

/// The argon2id hash of `password`, as a PHC string for `password_hash`.
pub fn hash_password(password: &[u8]) -> Result<String, String> {
    let salt = rand::random::<[u8; 16]>();
    Argon2::default()
        .hash_password_with_salt(password, &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| error.to_string())
}

/// Whether `given` is the admin token `expected`, compared in constant time.
pub fn token_matches(expected: &str, given: &str) -> bool {
    let (a, b) = (Sha256::digest(expected.as_bytes()), Sha256::digest(given.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Accepted passwords remembered, at most.
const ACCEPTED_MAX: usize = 4096;

/// The users, as the server checks them.
pub struct Users {
    entries: BTreeMap<Bytes, (PasswordHash, Permission)>,
    /// SHA-256 of (user, password) of passwords accepted before.
    accepted: Mutex<HashMap<[u8; 32], Permission>>,
    /// At most this many argon2 checks at once.
    checking: tokio::sync::Semaphore,
    /// Checked against for an unknown user (so that it costs what a known one does).
    decoy: PasswordHash,
}

impl Users {
    pub fn new(section: &AuthSection) -> Result<Users, String> {
        let mut entries = BTreeMap::new();
        let parse = |hash: &str| PasswordHash::new(hash).map_err(|error| error.to_string());
        if let Some(password) = &section.requirepass {
            let hash = hash_password(password.as_bytes())?;
            entries.insert(Bytes::from_static(b"default"), (parse(&hash)?, Permission::Admin));
        }
        for user in &section.users {
            entries.insert(
                Bytes::from(user.name.clone().into_bytes()),
                (parse(&user.password_hash)?, user.permission),
            );
        }
        let decoy = parse(&hash_password(b"no such user")?)?;
        Ok(Users {
            entries,
            accepted: Mutex::default(),
            checking: tokio::sync::Semaphore::new(2),
            decoy,
        })
    }

    /// Whether clients must authenticate.
    pub fn required(&self) -> bool {
        !self.entries.is_empty()
    }

    /// The user `name` if `password` is theirs.
    pub async fn check(self: &Arc<Users>, name: &[u8], password: &[u8]) -> Option<User> {
        let key: [u8; 32] = {
            let mut hasher = Sha256::new();
            hasher.update((name.len() as u64).to_le_bytes());
            hasher.update(name);
            hasher.update(password);
            hasher.finalize().into()
        };
        let user = |permission| User { name: Bytes::copy_from_slice(name), permission };
        if let Some(&permission) = self.accepted.lock().get(&key) {
            return Some(user(permission));
        }
        let _permit = self.checking.acquire().await.ok()?;
        let users = self.clone();
        let (name_owned, password) = (Bytes::copy_from_slice(name), password.to_vec());
        let permission = tokio::task::spawn_blocking(move || {
            let (hash, permission) = match users.entries.get(&name_owned) {
                Some((hash, permission)) => (hash, Some(*permission)),
                None => (&users.decoy, None),
            };
            let matches = Argon2::default().verify_password(&password, hash).is_ok();
            permission.filter(|_| matches)
        })
        .await
        .ok()??;
        let mut accepted = self.accepted.lock();
        if accepted.len() >= ACCEPTED_MAX {
            accepted.clear();
        }
        accepted.insert(key, permission);
        Some(user(permission))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn passwords_are_checked_against_their_hashes() {
        let section = AuthSection {
            requirepass: Some("root secret".into()),
            users: vec![UserEntry {
                name: "reader".into(),
                password_hash: hash_password(b"read only").unwrap(),
                permission: Permission::Read,
            }],
            admin_token: None,
            open_permission: None,
        };
        section.validate().unwrap();
        let users = Arc::new(Users::new(&section).unwrap());
        assert!(users.required());
        let default = users.check(b"default", b"root secret").await.unwrap();
        assert_eq!(default.permission, Permission::Admin);
        assert_eq!(
            users.check(b"reader", b"read only").await.unwrap().permission,
            Permission::Read
        );
        // Again, from what was accepted.
        assert!(users.check(b"reader", b"read only").await.is_some());
        assert!(users.check(b"reader", b"root secret").await.is_none());
        assert!(users.check(b"nobody", b"read only").await.is_none());
        assert!(users.check(b"default", b"").await.is_none());
    }

    /// A users file written before argon2 0.6 keeps working: this hash of "correct horse" was
    /// made by `redoguard passwd` built with argon2 0.5.
    #[tokio::test(flavor = "current_thread")]
    async fn hashes_made_by_the_previous_argon2_release_still_verify() {
        let old = "$argon2id$v=19$m=19456,t=2,p=1$FLGjUDnHxEAUsMOXjJrDiw$1vGDMmOK7I8s3zm0das6hgp30ldGBCo3FkCTnEMu21I";
        let section = AuthSection {
            users: vec![UserEntry {
                name: "app".into(),
                password_hash: old.into(),
                permission: Permission::Write,
            }],
            ..AuthSection::default()
        };
        section.validate().unwrap();
        let users = Arc::new(Users::new(&section).unwrap());
        assert_eq!(
            users.check(b"app", b"correct horse").await.unwrap().permission,
            Permission::Write
        );
        assert!(users.check(b"app", b"correct horsE").await.is_none());
        // And a new hash has the same form and costs.
        let new = hash_password(b"correct horse").unwrap();
        assert!(new.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{new}");
    }

    #[test]
    fn bad_sections_name_the_field() {
        let bad_hash = AuthSection {
            users: vec![UserEntry {
                name: "app".into(),
                password_hash: "plaintext".into(),
                permission: Permission::Write,
            }],
            ..AuthSection::default()
        };
        assert_eq!(bad_hash.validate().unwrap_err().0, "auth.users[0].password_hash");
        let short = AuthSection { admin_token: Some("short".into()), ..AuthSection::default() };
        assert_eq!(short.validate().unwrap_err().0, "auth.admin_token");
        let open_with_password = AuthSection {
            requirepass: Some("a password".into()),
            open_permission: Some(Permission::Admin),
            ..AuthSection::default()
        };
        assert_eq!(open_with_password.validate().unwrap_err().0, "auth.open_permission");
        let open =
            AuthSection { open_permission: Some(Permission::Admin), ..AuthSection::default() };
        assert_eq!(open.validate(), Ok(()));
        assert_eq!(open.open_permission(), Permission::Admin);
        assert_eq!(AuthSection::default().open_permission(), Permission::Write);
        assert!(token_matches("a long enough token", "a long enough token"));
        assert!(!token_matches("a long enough token", "a long enough tokem"));
    }
}
