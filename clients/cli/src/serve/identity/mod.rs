//! Who is asking: every request but the login page, /healthz and the
//! script is made by an operator, found (in this order) as
//!
//! - `--no-login` (loopback binds only): the connection's own role;
//! - the `--trust-user-header` header, only on a connection from a
//!   `--trusted-proxy` address (elsewhere the header is ignored), naming an
//!   operator of the users file;
//! - the session cookie of a password login (`login.rs`);
//! - on /metrics only, HTTP Basic credentials of the users file (for
//!   Prometheus' `basic_auth`).
//!
//! Nobody: a page redirects to /login, /metrics answers 401, anything
//! else 403. An operator's requests run as their database role
//! (`Operator::role`, see `db.rs`).

pub mod login;
pub mod sessions;
pub mod users;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::header::{AUTHORIZATION, LOCATION, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::pages::{cookie_value, PageError};
use super::Shared;
use sessions::Sessions;
use users::Users;

/// An operator, as the handlers see them.
#[derive(Debug, Clone)]
pub struct Operator {
    pub name: String,
    /// The database role the requests run as; None: the connection's own
    /// (`--no-login`).
    pub role: Option<String>,
    /// The token this operator's forms carry.
    pub csrf: String,
    /// Logged in with a password (so a logout button makes sense).
    pub session: bool,
}

/// How operators are known.
pub enum Mode {
    NoLogin,
    Login {
        users: Users,
        header: Option<HeaderName>,
        proxies: Vec<IpAddr>,
    },
}

pub struct Identity {
    pub mode: Mode,
    pub sessions: Sessions,
    /// Session cookies get `Secure` (served over HTTPS).
    pub secure: bool,
    /// The login form's token (no session yet), and --no-login's.
    pub process_csrf: String,
    /// One token per operator known by the proxy's header.
    header_csrf: Mutex<HashMap<String, String>>,
    pub limiter: login::Limiter,
}

/// Paths anyone may fetch.
fn public(path: &str) -> bool {
    matches!(path, "/login" | "/healthz" | "/assets/app.js")
}

impl Identity {
    pub fn new(mode: Mode, session_ttl: Duration, secure: bool) -> Result<Identity, String> {
        Ok(Identity {
            mode,
            sessions: Sessions::new(session_ttl),
            secure,
            process_csrf: sessions::random_token()?,
            header_csrf: Mutex::new(HashMap::new()),
            limiter: login::Limiter::default(),
        })
    }

    /// Every role an operator may act as (None: the connection's own).
    pub fn roles(&self) -> Vec<Option<String>> {
        match &self.mode {
            Mode::NoLogin => vec![None],
            Mode::Login { users, .. } => users.roles().into_iter().map(Some).collect(),
        }
    }

    fn by_header(&self, headers: &HeaderMap, peer: IpAddr) -> Option<Operator> {
        let Mode::Login {
            users,
            header: Some(header),
            proxies,
        } = &self.mode
        else {
            return None;
        };
        if !proxies.contains(&peer) {
            return None;
        }
        let name = headers.get(header)?.to_str().ok()?.trim();
        let user = users.get(name)?;
        let csrf = {
            let mut tokens = self.header_csrf.lock().unwrap_or_else(|p| p.into_inner());
            match tokens.get(name) {
                Some(t) => t.clone(),
                None => {
                    let t = sessions::random_token().ok()?;
                    tokens.insert(name.to_string(), t.clone());
                    t
                }
            }
        };
        Some(Operator {
            name: user.name.clone(),
            role: Some(user.role.clone()),
            csrf,
            session: false,
        })
    }

    fn by_session(&self, headers: &HeaderMap) -> Option<Operator> {
        let s = self
            .sessions
            .get(cookie_value(headers, sessions::COOKIE)?)?;
        Some(Operator {
            name: s.operator,
            role: Some(s.role),
            csrf: s.csrf,
            session: true,
        })
    }

    /// The operator of a request without a session, if any.
    async fn operator(&self, parts: &Parts, peer: IpAddr) -> Option<Operator> {
        if let Mode::NoLogin = self.mode {
            return Some(Operator {
                name: String::new(),
                role: None,
                csrf: self.process_csrf.clone(),
                session: false,
            });
        }
        if let Some(op) = self.by_header(&parts.headers, peer) {
            return Some(op);
        }
        if let Some(op) = self.by_session(&parts.headers) {
            return Some(op);
        }
        if parts.uri.path() == "/metrics" {
            return self.by_basic(&parts.headers, peer).await;
        }
        None
    }

    /// HTTP Basic credentials checked against the users file (throttled
    /// like the login form).
    async fn by_basic(&self, headers: &HeaderMap, peer: IpAddr) -> Option<Operator> {
        let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
        let (name, password) = login::basic_credentials(value)?;
        let user = login::check_password(self, peer, &name, &password)
            .await
            .ok()?;
        Some(Operator {
            name: user.name,
            role: Some(user.role),
            csrf: String::new(),
            session: false,
        })
    }
}

/// The middleware: puts the request's [`Operator`] in its extensions, or
/// refuses it.
pub async fn require(State(app): State<Shared>, req: Request, next: Next) -> Response {
    if public(req.uri().path()) {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let (mut parts, body) = req.into_parts();
    let found = match peer {
        Some(ip) => app.identity.operator(&parts, ip).await,
        None => None,
    };
    match found {
        Some(op) => {
            parts.extensions.insert(op);
            next.run(Request::from_parts(parts, body)).await
        }
        None => refuse(&parts),
    }
}

fn refuse(parts: &Parts) -> Response {
    if parts.uri.path() == "/metrics" {
        return (
            StatusCode::UNAUTHORIZED,
            [(WWW_AUTHENTICATE, "Basic realm=\"aedb_queue\"")],
            "log in: a session cookie, or Basic credentials of the users file\n",
        )
            .into_response();
    }
    if parts.method == Method::GET || parts.method == Method::HEAD {
        return (StatusCode::SEE_OTHER, [(LOCATION, "/login")]).into_response();
    }
    PageError::new(StatusCode::FORBIDDEN, "Log in first.").into_response()
}

/// Handlers take the operator the middleware found.
impl<S: Send + Sync> FromRequestParts<S> for Operator {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Operator>()
            .cloned()
            .ok_or_else(|| PageError::new(StatusCode::FORBIDDEN, "Log in first."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(header: bool) -> Identity {
        let users = Users::parse("alice ra -\nbob rb -").unwrap();
        let mode = Mode::Login {
            users,
            header: header.then(|| HeaderName::from_static("x-forwarded-user")),
            proxies: vec!["10.0.0.1".parse().unwrap()],
        };
        Identity::new(mode, Duration::from_secs(60), false).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_user_header_counts_only_from_a_trusted_proxy() {
        let id = identity(true);
        let h = headers(&[("x-forwarded-user", "alice")]);
        let op = id.by_header(&h, "10.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(op.role.as_deref(), Some("ra"));
        assert!(id.by_header(&h, "10.0.0.2".parse().unwrap()).is_none());
        let carol = headers(&[("x-forwarded-user", "carol")]);
        assert!(
            id.by_header(&carol, "10.0.0.1".parse().unwrap()).is_none(),
            "not in the file"
        );
        assert!(
            identity(false)
                .by_header(&h, "10.0.0.1".parse().unwrap())
                .is_none(),
            "no header configured"
        );
    }

    #[test]
    fn only_the_login_page_health_and_script_are_public() {
        for p in ["/login", "/healthz", "/assets/app.js"] {
            assert!(public(p), "{p}");
        }
        for p in [
            "/",
            "/metrics",
            "/logout",
            "/queues/q",
            "/tasks/1",
            "/search",
            "/login/x",
        ] {
            assert!(!public(p), "{p}");
        }
    }
}
