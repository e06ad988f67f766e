//! The users file (`--users FILE`): one operator a line,
//!
//! ```text
//! # name   database role   argon2id hash (or "-": no password, single sign-on only)
//! alice    tenant_a_ops    $argon2id$v=19$m=19456,t=2,p=1$...
//! ```
//!
//! and the password hashes: argon2id with RustCrypto's defaults (19 MiB,
//! 2 passes), each with a random salt. `aedb-queue hash-password NAME ROLE`
//! prints such a line.

use std::collections::BTreeMap;
use std::path::Path;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// One operator: who logs in, and the database role their requests run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub role: String,
    /// None: no password login (single sign-on through the trusted header).
    pub hash: Option<String>,
}

/// The operators, by name.
#[derive(Debug, Default)]
pub struct Users(BTreeMap<String, User>);

/// The longest name PostgreSQL keeps for a role (NAMEDATALEN - 1).
const MAX_NAME: usize = 63;

/// A name or role as the file holds it: printable, no spaces, not too long.
pub fn check_name(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_NAME {
        return Err(format!("{what} must be 1 to {MAX_NAME} bytes, got {s:?}"));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) || s.starts_with('#') {
        return Err(format!(
            "{what} {s:?} must not hold spaces or control characters nor start with '#'"
        ));
    }
    Ok(())
}

fn parse_line(line: &str) -> Result<User, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [name, role, hash] = fields[..] else {
        return Err(format!(
            "expected NAME ROLE HASH (3 fields), got {}",
            fields.len()
        ));
    };
    check_name("the name", name)?;
    check_name("the role", role)?;
    let hash = match hash {
        "-" => None,
        h => {
            let parsed = PasswordHash::new(h).map_err(|e| format!("not a password hash: {e}"))?;
            if parsed.algorithm.as_str() != "argon2id" {
                return Err(format!(
                    "the hash is {}; only argon2id is accepted (aedb-queue hash-password)",
                    parsed.algorithm
                ));
            }
            Some(h.to_string())
        }
    };
    Ok(User {
        name: name.to_string(),
        role: role.to_string(),
        hash,
    })
}

impl Users {
    /// The file's operators; an error names the line that is wrong.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut users = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let user = parse_line(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            if users.contains_key(&user.name) {
                return Err(format!("line {}: {:?} is named twice", i + 1, user.name));
            }
            users.insert(user.name.clone(), user);
        }
        if users.is_empty() {
            return Err("no operator in it".into());
        }
        Ok(Users(users))
    }

    pub fn load(path: &Path) -> Result<Users, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the users file {}: {e}", path.display()))?;
        Users::parse(&text).map_err(|e| format!("users file {}: {e}", path.display()))
    }

    pub fn get(&self, name: &str) -> Option<&User> {
        self.0.get(name)
    }

    /// Every role an operator may act as, once each.
    pub fn roles(&self) -> Vec<String> {
        let mut roles: Vec<String> = self.0.values().map(|u| u.role.clone()).collect();
        roles.sort();
        roles.dedup();
        roles
    }
}

/// An argon2id hash of `password` with a fresh random salt (PHC string).
pub fn hash_password(password: &str) -> Result<String, String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| format!("no random bytes for the salt: {e}"))?;
    let salt = SaltString::encode_b64(&salt).map_err(|e| format!("salt: {e}"))?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("cannot hash the password: {e}"))
}

/// Whether `password` matches `hash` (with the hash's own parameters).
pub fn verify(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| {
        Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// `aedb-queue hash-password NAME ROLE`: the users-file line for the
/// password on stdin's first line.
pub fn hash_line(name: &str, role: &str, stdin: &str) -> Result<String, String> {
    check_name("the name", name)?;
    check_name("the role", role)?;
    let password = stdin.lines().next().unwrap_or("");
    if password.is_empty() {
        return Err("no password on stdin (one line expected)".into());
    }
    Ok(format!("{name} {role} {}", hash_password(password)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let h = hash_password("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{h}");
        assert!(verify(&h, "correct horse"));
        assert!(!verify(&h, "correct horsE"));
        assert!(!verify(&h, ""));
        assert!(!verify("not a hash", "correct horse"));
        assert_ne!(h, hash_password("correct horse").unwrap(), "salted");
    }

    #[test]
    fn the_file_maps_names_to_roles() {
        let h = hash_password("pw").unwrap();
        let text = format!("# operators\n\nalice tenant_a_ops {h}\n  bob\ttenant_b_ops   -  \n");
        let users = Users::parse(&text).unwrap();
        assert_eq!(users.get("alice").unwrap().role, "tenant_a_ops");
        assert_eq!(
            users.get("alice").unwrap().hash.as_deref(),
            Some(h.as_str())
        );
        assert_eq!(users.get("bob").unwrap().hash, None);
        assert!(users.get("carol").is_none());
        assert_eq!(users.roles(), ["tenant_a_ops", "tenant_b_ops"]);
    }

    #[test]
    fn a_bad_file_says_which_line() {
        let e = |t: &str| Users::parse(t).unwrap_err();
        assert_eq!(
            e("alice tenant_a_ops"),
            "line 1: expected NAME ROLE HASH (3 fields), got 2"
        );
        assert!(e("# c\nalice r $2b$12$abcdefghijklmnopqrstuv")
            .starts_with("line 2: not a password hash"));
        let argon2i = "$argon2i$v=19$m=16,t=2,p=1$c2FsdHNhbHQ$yHyzgwcXqr0ThhdVRuHV5A";
        assert!(
            e(&format!("a r {argon2i}")).contains("only argon2id"),
            "{}",
            e(&format!("a r {argon2i}"))
        );
        assert_eq!(e("a r -\na s -"), "line 2: \"a\" is named twice");
        assert_eq!(e("# nobody\n"), "no operator in it");
    }

    #[test]
    fn hash_password_prints_a_line_the_file_reads() {
        let line = hash_line("alice", "tenant_a_ops", "s3cret pass\n").unwrap();
        let users = Users::parse(&line).unwrap();
        assert!(verify(
            users.get("alice").unwrap().hash.as_deref().unwrap(),
            "s3cret pass"
        ));
        assert!(hash_line("alice", "r", "\n").is_err());
        assert!(hash_line("al ice", "r", "pw").is_err());
        assert!(hash_line("alice", "", "pw").is_err());
    }
}
