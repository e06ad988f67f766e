//! `GET /login` (the form), `POST /login` (a password against the users
//! file, then a session) and `POST /logout`.
//!
//! The form carries the server's login token and is checked like every
//! other form (token, then Origin: `actions::check_request`). A wrong name
//! and a wrong password read the same and cost the same (an unknown name
//! is verified against a dummy hash). Failures are counted per client
//! address: past [`MAX_FAILURES`] in [`WINDOW`] that address is refused
//! (429) until the window has passed; at most [`VERIFIERS`] hashes are
//! checked at once, so guessing cannot take every core.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Form;
use maud::html;

use super::sessions::{self, COOKIE};
use super::users::{self, User};
use super::{Identity, Mode, Operator};
use crate::serve::actions::check_request;
use crate::serve::pages::{cookie_value, layout, PageError};
use crate::serve::Shared;

type Fields = HashMap<String, String>;

pub const MAX_FAILURES: u32 = 5;
pub const WINDOW: Duration = Duration::from_secs(60);
const VERIFIERS: usize = 2;
/// Addresses remembered at most (the oldest windows go first).
const MAX_ADDRESSES: usize = 100_000;

pub struct Limiter {
    failures: Mutex<HashMap<IpAddr, (u32, Instant)>>,
    verifying: tokio::sync::Semaphore,
}

impl Default for Limiter {
    fn default() -> Limiter {
        Limiter {
            failures: Mutex::new(HashMap::new()),
            verifying: tokio::sync::Semaphore::new(VERIFIERS),
        }
    }
}

impl Limiter {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, (u32, Instant)>> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `ip` has failed too often in its current window.
    pub fn blocked(&self, ip: IpAddr) -> bool {
        matches!(self.map().get(&ip), Some((n, at)) if *n >= MAX_FAILURES && at.elapsed() < WINDOW)
    }

    pub fn fail(&self, ip: IpAddr) {
        let mut map = self.map();
        if map.len() >= MAX_ADDRESSES {
            map.retain(|_, (_, at)| at.elapsed() < WINDOW);
        }
        let entry = map.entry(ip).or_insert((0, Instant::now()));
        if entry.1.elapsed() >= WINDOW {
            *entry = (0, Instant::now());
        }
        entry.0 += 1;
    }

    pub fn clear(&self, ip: IpAddr) {
        self.map().remove(&ip);
    }
}

/// Why a password check did not let someone in.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Too many failures from this address lately.
    Throttled,
    /// Unknown name, no password login for it, or a wrong password.
    Wrong,
}

/// A hash no password is known for: unknown names are checked against it,
/// so that they take as long as known ones.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let pw = sessions::random_token().unwrap_or_else(|_| "x".repeat(64));
        users::hash_password(&pw).unwrap_or_default()
    })
}

/// The operator `name` if `password` is theirs.
pub async fn check_password(
    identity: &Identity,
    peer: IpAddr,
    name: &str,
    password: &str,
) -> Result<User, Refusal> {
    let Mode::Login { users, .. } = &identity.mode else {
        return Err(Refusal::Wrong);
    };
    if identity.limiter.blocked(peer) {
        return Err(Refusal::Throttled);
    }
    let user = users.get(name).cloned();
    let hash = user
        .as_ref()
        .and_then(|u| u.hash.clone())
        .unwrap_or_else(|| dummy_hash().to_string());
    let password = password.to_string();
    let ok = {
        let _permit = identity
            .limiter
            .verifying
            .acquire()
            .await
            .map_err(|_| Refusal::Wrong)?;
        tokio::task::spawn_blocking(move || users::verify(&hash, &password))
            .await
            .unwrap_or(false)
    };
    match user {
        Some(u) if ok && u.hash.is_some() => {
            identity.limiter.clear(peer);
            Ok(u)
        }
        _ => {
            identity.limiter.fail(peer);
            Err(Refusal::Wrong)
        }
    }
}

/// (name, password) of an `Authorization: Basic ...` value.
pub fn basic_credentials(value: &str) -> Option<(String, String)> {
    use base64ct::Encoding as _;
    let encoded = value.strip_prefix("Basic ")?.trim();
    let decoded = base64ct::Base64::decode_vec(encoded).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (name, password) = text.split_once(':')?;
    Some((name.to_string(), password.to_string()))
}

fn form(token: &str, message: Option<&str>) -> maud::Markup {
    let body = html! {
        h1 { "Log in" }
        @if let Some(m) = message { p.error role="alert" { (m) } }
        form #login method="post" action="/login" {
            input type="hidden" name="csrf" value=(token);
            p { label { "Name " input name="name" autocomplete="username" required; } }
            p { label { "Password " input name="password" type="password" autocomplete="current-password" required; } }
            button type="submit" { "Log in" }
        }
    };
    layout("log in", None, None, body)
}

/// `GET /login`.
pub async fn page(State(app): State<Shared>) -> Response {
    if let Mode::NoLogin = app.identity.mode {
        return (StatusCode::SEE_OTHER, [(LOCATION, "/")]).into_response();
    }
    form(&app.identity.process_csrf, None).into_response()
}

/// `POST /login`: a session and back to the overview, or the form again.
pub async fn submit(
    State(app): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    let id = &app.identity;
    check_request(&id.process_csrf, &headers, &f)?;
    let field = |k: &str| f.get(k).map(String::as_str).unwrap_or("");
    let again = |status: StatusCode, msg: &str| {
        Ok((status, form(&id.process_csrf, Some(msg))).into_response())
    };
    match check_password(id, peer.ip(), field("name").trim(), field("password")).await {
        Ok(user) => {
            let sid = id
                .sessions
                .create(&user.name, &user.role)
                .map_err(|e| PageError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?;
            let cookie = id.sessions.cookie(&sid, id.secure);
            Ok((
                StatusCode::SEE_OTHER,
                [(LOCATION, "/".to_string()), (SET_COOKIE, cookie)],
            )
                .into_response())
        }
        Err(Refusal::Wrong) => again(StatusCode::UNAUTHORIZED, "Wrong name or password."),
        Err(Refusal::Throttled) => again(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many failed logins from this address: wait a minute and try again.",
        ),
    }
}

/// `POST /logout`: the session ends here and in the browser.
pub async fn logout(
    State(app): State<Shared>,
    op: Operator,
    headers: HeaderMap,
    Form(f): Form<Fields>,
) -> Result<Response, PageError> {
    check_request(&op.csrf, &headers, &f)?;
    if let Some(sid) = cookie_value(&headers, COOKIE) {
        app.identity.sessions.remove(sid);
    }
    Ok((
        StatusCode::SEE_OTHER,
        [
            (LOCATION, "/login".to_string()),
            (SET_COOKIE, sessions::clear_cookie(app.identity.secure)),
        ],
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::identity::users::Users;

    #[test]
    fn basic_credentials_decode() {
        // "alice:pa:ss" (a colon in the password is the password's)
        assert_eq!(
            basic_credentials("Basic YWxpY2U6cGE6c3M="),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(basic_credentials("Bearer YWxpY2U6cGE6c3M="), None);
        assert_eq!(basic_credentials("Basic !!"), None);
    }

    #[tokio::test]
    async fn wrong_names_and_passwords_read_alike_and_repeated_failures_block() {
        let h = users::hash_password("right").unwrap();
        let users = Users::parse(&format!("alice ra {h}\nsso rs -")).unwrap();
        let mode = Mode::Login {
            users,
            header: None,
            proxies: vec![],
        };
        let id = Identity::new(mode, Duration::from_secs(60), false).unwrap();
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(
            check_password(&id, ip, "alice", "right")
                .await
                .unwrap()
                .role,
            "ra"
        );
        assert_eq!(
            check_password(&id, ip, "alice", "wrong").await,
            Err(Refusal::Wrong)
        );
        assert_eq!(
            check_password(&id, ip, "nobody", "right").await,
            Err(Refusal::Wrong)
        );
        assert_eq!(
            check_password(&id, ip, "sso", "").await,
            Err(Refusal::Wrong),
            "no password login"
        );
        for _ in 3..MAX_FAILURES {
            assert_eq!(
                check_password(&id, ip, "alice", "wrong").await,
                Err(Refusal::Wrong)
            );
        }
        assert_eq!(
            check_password(&id, ip, "alice", "right").await,
            Err(Refusal::Throttled),
            "even the right password, until the window passes"
        );
        assert!(
            check_password(&id, other, "alice", "right").await.is_ok(),
            "per address"
        );
    }
}
