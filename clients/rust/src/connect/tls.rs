//! libpq's `sslmode` over rustls (ring provider): what is checked of the
//! server's certificate, and the connector tokio-postgres is given.
//!
//! | sslmode              | TLS                  | certificate check             |
//! |----------------------|----------------------|-------------------------------|
//! | disable              | never                | -                             |
//! | allow, prefer        | if the server has it | chain, when a root cert is set|
//! | require              | always               | chain, when a root cert is set|
//! | verify-ca            | always               | chain to the root cert        |
//! | verify-full          | always               | chain and host name           |
//!
//! "Always" is tokio-postgres's `SslMode::Require`: a server that answers
//! the TLS request with "no" is an error, never a plain connection.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{self, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Error, Result};

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    /// Taken as `prefer`: TLS when the server offers it (libpq tries plain
    /// text first; trying TLS first is never weaker).
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<SslMode> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(Error::invalid(
                    "sslmode",
                    format!(
                        "unknown value {other:?} (disable, allow, prefer, require, \
                         verify-ca or verify-full)"
                    ),
                ))
            }
        })
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

impl SslMode {
    /// What tokio-postgres does on the wire: whether a "no TLS" answer ends
    /// the attempt (every mode from `require` on) or gives a plain session.
    pub(crate) fn wire(self) -> WireMode {
        match self {
            SslMode::Disable => WireMode::Disable,
            SslMode::Allow | SslMode::Prefer => WireMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
        }
    }

    fn needs_root(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// The TLS settings of a connection, once resolved (connection string,
/// then `PGSSL*`, then libpq's files under `~/.postgresql/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// The CA certificates (PEM) the server's chain must end in.
    pub root_cert: Option<PathBuf>,
    /// A client certificate (PEM, chain) and its private key, for `cert`
    /// authentication.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// What is checked of the server's certificate.
enum Check {
    Nothing,
    Chain(Arc<RootCertStore>),
    ChainAndName(Arc<RootCertStore>),
}

/// The connector for tokio-postgres; reads the certificate files now, so
/// that a missing or unreadable one is an error before any connection.
pub(crate) fn connector(tls: &TlsSettings) -> Result<MakeRustlsConnect> {
    // ring: builds with a C compiler alone. rustls 0.23.48 marks it
    // deprecated for lacking post-quantum key exchange (aws-lc-rs has it,
    // and needs cmake to build); PostgreSQL servers do not offer it yet.
    #[allow(deprecated)]
    let provider = Arc::new(crypto::ring::default_provider());
    let check = match (&tls.root_cert, tls.mode) {
        (None, mode) if mode.needs_root() => {
            return Err(Error::invalid(
                "sslrootcert",
                format!(
                    "sslmode={mode} needs the CA certificate to verify the server with: \
                     set sslrootcert (or PGSSLROOTCERT), or put it in ~/.postgresql/root.crt"
                ),
            ))
        }
        (None, _) | (_, SslMode::Disable) => Check::Nothing,
        (Some(path), SslMode::VerifyFull) => Check::ChainAndName(roots(path)?),
        (Some(path), _) => Check::Chain(roots(path)?),
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid("sslmode", e))?;
    let builder = match check {
        Check::ChainAndName(roots) => builder.with_root_certificates(roots),
        Check::Chain(roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoHostName {
                roots: Some(roots),
                provider,
            })),
        Check::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoHostName {
                roots: None,
                provider,
            })),
    };
    let config = match &tls.client_cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(certificates(cert, "sslcert")?, private_key(key)?)
            .map_err(|e| Error::invalid("sslkey", format!("{}: {e}", key.display())))?,
        None => builder.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

fn certificates(path: &Path, key: &'static str) -> Result<Vec<CertificateDer<'static>>> {
    let unreadable = |e: &dyn fmt::Display| Error::invalid(key, format!("{}: {e}", path.display()));
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| unreadable(&e))?;
    if certs.is_empty() {
        return Err(unreadable(&"no PEM certificate in it"));
    }
    Ok(certs)
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path, "sslrootcert")? {
        store
            .add(cert)
            .map_err(|e| Error::invalid("sslrootcert", format!("{}: {e}", path.display())))?;
    }
    Ok(Arc::new(store))
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| Error::invalid("sslkey", format!("{}: {e}", path.display())))
}

/// Every mode but verify-full checks no host name: with `roots` (verify-ca,
/// and require or prefer given a root certificate) the chain must end in one
/// of them; without (prefer and require, as libpq), any certificate is
/// taken. Either way the handshake's signatures are checked, so the server
/// holds the key of the certificate it shows.
#[derive(Debug)]
struct NoHostName {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NoHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        handshake_signature(&self.provider, message, cert, dss, true)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        handshake_signature(&self.provider, message, cert, dss, false)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn handshake_signature(
    provider: &CryptoProvider,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    tls12: bool,
) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
    let algs = &provider.signature_verification_algorithms;
    match tls12 {
        true => crypto::verify_tls12_signature(message, cert, dss, algs),
        false => crypto::verify_tls13_signature(message, cert, dss, algs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_values_are_libpqs_and_others_are_refused() {
        for s in [
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ] {
            assert_eq!(s.parse::<SslMode>().unwrap().to_string(), s);
        }
        let e = "verify_full".parse::<SslMode>().unwrap_err().to_string();
        assert!(e.contains("unknown value \"verify_full\""), "{e}");
    }

    #[test]
    fn verify_modes_without_a_root_certificate_are_refused() {
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let tls = TlsSettings {
                mode,
                root_cert: None,
                client_cert: None,
            };
            let e = connector(&tls).err().unwrap().to_string();
            assert!(e.contains("needs the CA certificate"), "{e}");
        }
    }

    #[test]
    fn a_missing_root_certificate_is_an_error_in_every_tls_mode() {
        for mode in [
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            let tls = TlsSettings {
                mode,
                root_cert: Some("/nonexistent/root.crt".into()),
                client_cert: None,
            };
            let e = connector(&tls).err().unwrap().to_string();
            assert!(e.contains("/nonexistent/root.crt"), "{mode}: {e}");
        }
    }

    #[test]
    fn only_the_modes_from_require_on_refuse_a_plain_session() {
        use SslMode::*;
        assert_eq!(Disable.wire(), WireMode::Disable);
        for m in [Allow, Prefer] {
            assert_eq!(m.wire(), WireMode::Prefer);
        }
        for m in [Require, VerifyCa, VerifyFull] {
            assert_eq!(m.wire(), WireMode::Require);
        }
    }
}
