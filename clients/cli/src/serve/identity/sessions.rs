//! Logged-in operators: a random session id in a cookie, everything else
//! kept here (in memory: a restart logs everyone out). Each session has its
//! own CSRF token and an absolute expiry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The session cookie's name.
pub const COOKIE: &str = "aedb_queue_session";

/// Sessions kept at most; past it the one closest to expiry goes.
const MAX_SESSIONS: usize = 10_000;

#[derive(Debug, Clone)]
pub struct Session {
    pub operator: String,
    pub role: String,
    pub csrf: String,
    expires: Instant,
}

pub struct Sessions {
    ttl: Duration,
    map: Mutex<HashMap<String, Session>>,
}

/// 32 random bytes as 64 hex digits (session ids, CSRF tokens).
pub fn random_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no random bytes: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Sessions {
    pub fn new(ttl: Duration) -> Sessions {
        Sessions {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session (a fresh id at every login: no fixation); its id.
    pub fn create(&self, operator: &str, role: &str) -> Result<String, String> {
        let id = random_token()?;
        let session = Session {
            operator: operator.to_string(),
            role: role.to_string(),
            csrf: random_token()?,
            expires: Instant::now() + self.ttl,
        };
        let mut map = self.map();
        let now = Instant::now();
        map.retain(|_, s| s.expires > now);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(id.clone(), session);
        Ok(id)
    }

    /// The live session of `id`; an expired one is dropped.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.map();
        match map.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                map.remove(id);
                None
            }
            None => None,
        }
    }

    pub fn remove(&self, id: &str) {
        self.map().remove(id);
    }

    /// The Set-Cookie value of a new session: script cannot read it, no
    /// other site's request carries it, and over HTTPS it never travels
    /// in clear.
    pub fn cookie(&self, id: &str, secure: bool) -> String {
        format!(
            "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.ttl.as_secs(),
            if secure { "; Secure" } else { "" }
        )
    }
}

/// The Set-Cookie value that drops the session cookie.
pub fn clear_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_have_random_ids_and_expire() {
        let s = Sessions::new(Duration::from_secs(60));
        let a = s.create("alice", "ra").unwrap();
        let b = s.create("alice", "ra").unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        let got = s.get(&a).unwrap();
        assert_eq!((got.operator.as_str(), got.role.as_str()), ("alice", "ra"));
        assert_ne!(got.csrf, s.get(&b).unwrap().csrf, "a token per session");
        s.remove(&a);
        assert!(s.get(&a).is_none());
        assert!(s.get("nosuch").is_none());

        let gone = Sessions::new(Duration::ZERO);
        let id = gone.create("bob", "rb").unwrap();
        assert!(gone.get(&id).is_none(), "expired at once");
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_over_tls() {
        let s = Sessions::new(Duration::from_secs(3600));
        let plain = s.cookie("abc", false);
        assert_eq!(
            plain,
            "aedb_queue_session=abc; Path=/; HttpOnly; SameSite=Strict; Max-Age=3600"
        );
        assert!(s.cookie("abc", true).ends_with("; Secure"));
        assert!(clear_cookie(true).contains("Max-Age=0"));
    }
}
