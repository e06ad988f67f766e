//! Which `Host` the server answers for: the defence against DNS rebinding.
//!
//! A page on an attacker's domain whose name later resolves to 127.0.0.1
//! is, to the browser, same-origin with this server: it could read the
//! CSRF token and post actions with a matching Origin. Its requests still
//! carry the attacker's name in `Host`, so every request whose Host is not
//! one of ours is refused before any handler runs.
//!
//! Ours: the bound address with its port; for a loopback bind also
//! `localhost`, `127.0.0.1` and `[::1]` with that port. A wildcard bind
//! (0.0.0.0, ::) has no one address of its own, so it answers only the
//! loopback forms and the names given with `--allowed-host`. Those match
//! by name alone (any port, or none, as behind a reverse proxy) unless
//! they carry a port. Names compare case-insensitively; a Host without a
//! port means port 80, as browsers leave out :80.

use std::net::SocketAddr;
use std::sync::Arc;

/// A host an operator named, or one of our own: `port` None matches any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    pub name: String,
    pub port: Option<u16>,
}

/// `HOST[:PORT]` as in a Host header: a DNS name or IPv4 address, or an
/// IPv6 address in brackets; lowercased. Used for `--allowed-host` and
/// for the header itself.
pub fn parse(s: &str) -> Result<Allowed, String> {
    if s.contains('/') {
        return Err(format!("{s:?}: expected HOST[:PORT], not a URL or a path"));
    }
    let (name, port) = if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{s:?}: an IPv6 address needs its closing ']'"))?;
        if inside.is_empty()
            || !inside
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b":.".contains(&b))
        {
            return Err(format!("{s:?}: not an IPv6 address in brackets"));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("{s:?}: expected :PORT after ']'"))?,
            ),
        };
        (format!("[{inside}]"), port)
    } else {
        let (name, port) = match s.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s, None),
        };
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        };
        if !name_ok(name) {
            return Err(format!(
                "{s:?}: expected HOST[:PORT] (a name, an IPv4 address or [IPv6])"
            ));
        }
        (name.to_string(), port)
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("{s:?}: the port must be a number from 1 to 65535")),
        },
    };
    Ok(Allowed {
        name: name.to_ascii_lowercase(),
        port,
    })
}

/// What a server bound to `addr` answers for, given the named hosts.
pub fn allowed(addr: SocketAddr, named: &[Allowed]) -> Vec<Allowed> {
    let port = Some(addr.port());
    let ip = addr.ip();
    let mut out = Vec::new();
    if !ip.is_unspecified() {
        let name = match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        out.push(Allowed { name, port });
    }
    if ip.is_loopback() || ip.is_unspecified() {
        for name in ["localhost", "127.0.0.1", "[::1]"] {
            out.push(Allowed {
                name: name.into(),
                port,
            });
        }
    }
    out.extend(named.iter().cloned());
    out
}

/// Whether a request with this Host header (None: missing or unreadable)
/// may be answered.
pub fn host_ok(allowed: &[Allowed], host: Option<&str>) -> bool {
    let Some(Ok(h)) = host.map(parse) else {
        return false;
    };
    allowed.iter().any(|a| {
        a.name == h.name
            && match (a.port, h.port) {
                (None, _) => true,
                (Some(p), Some(q)) => p == q,
                (Some(p), None) => p == 80,
            }
    })
}

/// Every request, before its handler (no page, token, action or query):
/// 421 unless its Host is one this server answers for (`host_ok`). An
/// absolute-form request target's authority is held to the same rule.
pub async fn check(
    axum::extract::State(allowed): axum::extract::State<Arc<Vec<Allowed>>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{header::HOST, StatusCode};
    use axum::response::IntoResponse;
    let mut values = req.headers().get_all(HOST).iter();
    let host = match (values.next(), values.next()) {
        (Some(v), None) => v.to_str().ok(),
        _ => None,
    };
    let target_ok = req
        .uri()
        .authority()
        .is_none_or(|a| host_ok(&allowed, Some(a.as_str())));
    if target_ok && host_ok(&allowed, host) {
        return next.run(req).await;
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        "This server does not answer for that Host; an operator can name it with --allowed-host.\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(list: &[&str]) -> Vec<Allowed> {
        list.iter().map(|s| parse(s).unwrap()).collect()
    }

    fn ok(addr: &str, named_hosts: &[&str], host: &str) -> bool {
        host_ok(
            &allowed(addr.parse().unwrap(), &named(named_hosts)),
            Some(host),
        )
    }

    #[test]
    fn a_loopback_bind_answers_its_loopback_forms_on_its_port_only() {
        for h in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LocalHost:8080",
            "[::1]:8080",
        ] {
            assert!(ok("127.0.0.1:8080", &[], h), "{h}");
            assert!(ok("[::1]:8080", &[], h), "{h}");
        }
        for h in [
            "evil.example:8080",
            "evil.example",
            "localhost:8081",
            "localhost",
            "127.0.0.1",
            "localhost.:8080",
            "127.0.0.1:8080.evil.example",
            "127.0.0.1:08080x",
            "",
            "127.0.0.1:8080 ",
            "user@127.0.0.1:8080",
        ] {
            assert!(!ok("127.0.0.1:8080", &[], h), "{h:?}");
        }
        assert!(!host_ok(
            &allowed("127.0.0.1:8080".parse().unwrap(), &[]),
            None
        ));
    }

    #[test]
    fn port_80_may_be_left_out() {
        assert!(ok("127.0.0.1:80", &[], "localhost"));
        assert!(ok("127.0.0.1:80", &[], "127.0.0.1:80"));
    }

    #[test]
    fn another_bind_answers_its_own_address_alone() {
        assert!(ok("192.0.2.7:8080", &[], "192.0.2.7:8080"));
        assert!(!ok("192.0.2.7:8080", &[], "localhost:8080"));
        assert!(!ok("192.0.2.7:8080", &[], "192.0.2.8:8080"));
        assert!(ok("[2001:db8::7]:8080", &[], "[2001:DB8::7]:8080"));
    }

    #[test]
    fn a_wildcard_bind_answers_loopback_and_named_hosts_only() {
        for addr in ["0.0.0.0:8080", "[::]:8080"] {
            assert!(ok(addr, &[], "localhost:8080"));
            assert!(ok(addr, &[], "[::1]:8080"));
            assert!(
                !ok(addr, &[], "0.0.0.0:8080"),
                "not a name a browser uses for us"
            );
            assert!(!ok(addr, &[], "192.0.2.7:8080"), "not named");
            assert!(ok(addr, &["192.0.2.7:8080"], "192.0.2.7:8080"));
            assert!(!ok(addr, &["192.0.2.7:8080"], "192.0.2.7:9090"));
        }
    }

    #[test]
    fn a_named_host_without_a_port_matches_any_port() {
        let names = ["dash.example", "proxy.example:8443"];
        assert!(ok("127.0.0.1:8080", &names, "Dash.Example"));
        assert!(ok("127.0.0.1:8080", &names, "dash.example:8080"));
        assert!(ok("127.0.0.1:8080", &names, "dash.example:443"));
        assert!(ok("127.0.0.1:8080", &names, "proxy.example:8443"));
        assert!(!ok("127.0.0.1:8080", &names, "proxy.example"));
        assert!(!ok("127.0.0.1:8080", &names, "proxy.example:8080"));
        assert!(!ok("127.0.0.1:8080", &names, "sub.dash.example"));
        assert!(!ok("127.0.0.1:8080", &names, "dash.example.evil"));
    }

    #[test]
    fn bad_allowed_hosts_are_refused_with_a_reason() {
        for bad in [
            "",
            ":80",
            "a b",
            "x/y",
            "*",
            "*.example",
            "::1",
            "[::1",
            "[zz]",
            "[::1]80",
            "h:0",
            "h:65536",
            "h:",
            "h:+1",
            "http://h",
            "h:1:2",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse("[::1]:9").unwrap(),
            Allowed {
                name: "[::1]".into(),
                port: Some(9)
            }
        );
        assert_eq!(parse("Dash.Example").unwrap().name, "dash.example");
        assert!(parse("http://h").unwrap_err().contains("not a URL"));
    }
}
