//! Splitting libpq's TLS keys out of a connection string. tokio-postgres
//! parses the rest, but it knows only `sslmode=disable|prefer|require` and
//! none of `sslrootcert`, `sslcert`, `sslkey`: those four are ours.

use std::collections::HashMap;

use percent_encoding::percent_decode_str;

use crate::error::{Error, Result};

/// The keys read here rather than by tokio-postgres.
pub(crate) const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// A connection string without the TLS keys, and their values.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Split {
    pub rest: String,
    pub tls: HashMap<String, String>,
}

/// Both forms libpq takes: `key=value ...` and `postgres[ql]://...?key=value&...`.
pub(crate) fn split(conninfo: &str) -> Result<Split> {
    let trimmed = conninfo.trim();
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        split_url(trimmed)
    } else {
        split_pairs(trimmed)
    }
}

fn is_tls_key(key: &str) -> bool {
    TLS_KEYS.contains(&key)
}

fn split_url(url: &str) -> Result<Split> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(Split {
            rest: url.to_string(),
            tls: HashMap::new(),
        });
    };
    let mut split = Split::default();
    let mut kept = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let key = decode(key)?;
        if is_tls_key(&key) {
            split.tls.insert(key, decode(value)?);
        } else {
            kept.push(param);
        }
    }
    split.rest = match kept.is_empty() {
        true => base.to_string(),
        false => format!("{base}?{}", kept.join("&")),
    };
    Ok(split)
}

fn decode(s: &str) -> Result<String> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|v| v.into_owned())
        .map_err(|_| Error::invalid("conninfo", "a URL parameter is not UTF-8"))
}

/// `key = value` pairs, values bare or single-quoted with `\` escapes.
fn split_pairs(s: &str) -> Result<Split> {
    let mut split = Split::default();
    let mut kept = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(Error::invalid(
                "conninfo",
                format!("missing \"=\" after {key:?}"),
            ));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let value = read_value(&mut chars)?;
        if is_tls_key(&key) {
            split.tls.insert(key, value);
        } else {
            kept.push(format!(
                "{key}='{}'",
                value.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
    }
    split.rest = kept.join(" ");
    Ok(split)
}

fn read_value(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<String> {
    let mut value = String::new();
    if chars.next_if_eq(&'\'').is_some() {
        loop {
            match chars.next() {
                Some('\'') => return Ok(value),
                Some('\\') => value.extend(chars.next()),
                Some(c) => value.push(c),
                None => return Err(Error::invalid("conninfo", "unterminated quoted value")),
            }
        }
    }
    while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
        match c {
            '\\' => value.extend(chars.next()),
            c => value.push(c),
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pairs_lose_their_tls_keys_and_keep_the_rest_quoted() {
        let s = split(
            "host=db port = 5432 sslmode=verify-full sslrootcert='/etc/my ca.crt' \
             password='it\\'s' sslcert=/c sslkey=/k",
        )
        .unwrap();
        assert_eq!(s.rest, "host='db' port='5432' password='it\\'s'");
        assert_eq!(
            s.tls,
            tls(&[
                ("sslmode", "verify-full"),
                ("sslrootcert", "/etc/my ca.crt"),
                ("sslcert", "/c"),
                ("sslkey", "/k")
            ])
        );
        let cfg: tokio_postgres::Config = s.rest.parse().unwrap();
        assert_eq!(cfg.get_password(), Some(&b"it's"[..]));
    }

    #[test]
    fn urls_lose_their_tls_parameters_percent_decoded() {
        let s = split("postgresql://u@db:5432/app?sslmode=verify-ca&connect_timeout=5&sslrootcert=%2Fetc%2Fca.crt")
            .unwrap();
        assert_eq!(s.rest, "postgresql://u@db:5432/app?connect_timeout=5");
        assert_eq!(
            s.tls,
            tls(&[("sslmode", "verify-ca"), ("sslrootcert", "/etc/ca.crt")])
        );
        let s = split("postgres://db/app?sslmode=require").unwrap();
        assert_eq!(s.rest, "postgres://db/app");
    }

    #[test]
    fn malformed_pairs_are_errors() {
        assert!(split("host").is_err());
        assert!(split("host='db").is_err());
        assert_eq!(split("").unwrap(), Split::default());
    }
}
