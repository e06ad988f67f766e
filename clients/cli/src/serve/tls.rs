//! `--tls-cert FILE --tls-key FILE`: the server's certificate chain and
//! key (PEM) for HTTPS, with rustls' safe defaults (TLS 1.2 and 1.3) and
//! ring's cryptography.

use std::path::Path;
use std::sync::Arc;

use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

pub fn config(cert: &Path, key: &Path) -> Result<RustlsConfig> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::msg(format!("--tls-cert {}: {e}", cert.display())))?;
    if certs.is_empty() {
        return Err(Error::msg(format!(
            "--tls-cert {}: no certificate in it",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| Error::msg(format!("--tls-key {}: {e}", key.display())))?;
    // ring: classical key exchange only (rustls deprecates it for lacking
    // post-quantum groups), chosen over aws-lc-rs for its small C build.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::msg(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| Error::msg(format!("--tls-cert/--tls-key: {e}")))?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(RustlsConfig::from_config(Arc::new(server)))
}
