//! A cluster that speaks TLS only, for the clients' TLS tests: `ssl = on`
//! with a server certificate for the name "localhost" from a CA made here,
//! and a pg_hba.conf whose TCP lines are all `hostssl` (trust, and `cert`
//! for [`CERT_USER`]). Beside it: a second CA the server's certificate does
//! not chain to, and a client certificate for [`CERT_USER`].
//!
//! The set-up runs before the server turns TLS-only (the harness itself
//! connects without TLS); afterwards [`TlsCluster::connect`] reaches it as
//! the superuser over its Unix socket (a `local` line), for set-up and
//! assertions only.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use postgres::{Client, NoTls};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::{describe, Cluster, DB_NAME};

/// Login role that authenticates with its client certificate (`cert` in
/// pg_hba.conf; the certificate's CN is the role name). Member of the
/// producer and worker roles.
pub const CERT_USER: &str = "app_cert";

/// The files a client is given.
pub struct Certs {
    /// The CA that signed the server's certificate (and the client's).
    pub ca: PathBuf,
    /// A CA that signed nothing the server has: verify-* must refuse it.
    pub other_ca: PathBuf,
    /// [`CERT_USER`]'s certificate and key.
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A certificate for [`CERT_USER`] signed by the untrusted CA.
    pub forged_cert: PathBuf,
    pub forged_key: PathBuf,
}

pub struct TlsCluster {
    pub cluster: Cluster,
    pub certs: Certs,
}

impl TlsCluster {
    /// A cluster as [`Cluster::start`] makes it, then certificates, `ssl =
    /// on`, the hostssl-only pg_hba.conf and a restart. `setup_sql` runs as
    /// the superuser before that.
    pub fn start(setup_sql: &str) -> TlsCluster {
        let cluster = Cluster::start();
        let mut su = cluster.connect();
        su.batch_execute(&format!(
            "CREATE ROLE {CERT_USER} LOGIN IN ROLE aedb_queue_producer, aedb_queue_worker;\n{setup_sql}"
        ))
        .unwrap_or_else(|e| panic!("TLS cluster set-up: {}", describe(&e)));
        drop(su);
        let certs = write_certs(&cluster.root.join("tls"));
        let dir = cluster.root.join("tls");
        append(
            &cluster.data.join("postgresql.conf"),
            &format!(
                "\n# TLS only\nssl = on\nssl_cert_file = '{0}/server.crt'\n\
                 ssl_key_file = '{0}/server.key'\nssl_ca_file = '{0}/ca.crt'\n",
                dir.display()
            ),
        );
        fs::write(cluster.data.join("pg_hba.conf"), HBA).expect("write pg_hba.conf");
        cluster
            .pg_ctl_stop("fast")
            .unwrap_or_else(|e| panic!("{e}"));
        cluster.start_again();
        TlsCluster { cluster, certs }
    }

    pub fn port(&self) -> u16 {
        self.cluster.port()
    }

    /// Connection settings without any TLS key: to the name the server's
    /// certificate holds ("localhost") at 127.0.0.1, as `user`.
    pub fn dsn(&self, user: &str) -> String {
        self.dsn_to("host=localhost hostaddr=127.0.0.1", user)
    }

    /// As [`dsn`](Self::dsn) with other host settings, e.g. `host=127.0.0.1`
    /// (a name the certificate does not hold).
    pub fn dsn_to(&self, host: &str, user: &str) -> String {
        format!(
            "{host} port={} user={user} dbname={DB_NAME} connect_timeout=20 \
             application_name=aedb_itests",
            self.port()
        )
    }

    /// The superuser over the Unix socket, for set-up and assertions.
    pub fn connect(&self) -> Client {
        let conn = format!(
            "host={} port={} user=postgres dbname={DB_NAME}",
            self.cluster.data.display(),
            self.port()
        );
        Client::connect(&conn, NoTls).unwrap_or_else(|e| panic!("superuser over the socket: {e}"))
    }

    pub fn server_log(&self) -> String {
        self.cluster.server_log()
    }
}

/// TCP only with TLS; the client certificate is what lets CERT_USER in.
const HBA: &str = "\
local all postgres trust
hostssl all app_cert 127.0.0.1/32 cert
hostssl all all 127.0.0.1/32 trust
";

fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open for append");
    f.write_all(text.as_bytes()).expect("append");
}

/// A CA: its certificate (PEM) and what signs with it.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).expect("self-sign the CA");
    (cert.pem(), Issuer::new(params, key))
}

/// A certificate signed by `issuer`: its PEM and its key's PEM.
fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    cn: &str,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(names).expect("params");
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

fn write_certs(dir: &Path) -> Certs {
    fs::create_dir_all(dir).expect("create the TLS dir");
    let (ca_pem, issuer) = ca("aedb_queue test CA");
    let (other_pem, other) = ca("aedb_queue untrusted CA");
    // "localhost" only: host=127.0.0.1 is a name it does not hold.
    let (server_pem, server_key) = leaf(
        &issuer,
        "localhost",
        vec!["localhost".to_string()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_pem, client_key) = leaf(
        &issuer,
        CERT_USER,
        Vec::new(),
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let (forged_pem, forged_key) = leaf(
        &other,
        CERT_USER,
        Vec::new(),
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        fs::write(&path, text).expect("write a TLS file");
        path
    };
    file("server.crt", &server_pem);
    let server_key = file("server.key", &server_key);
    // The server refuses a key others may read; it runs as postgres.
    private_to_postgres(&server_key);
    Certs {
        ca: file("ca.crt", &ca_pem),
        other_ca: file("other_ca.crt", &other_pem),
        client_cert: file("client.crt", &client_pem),
        client_key: file("client.key", &client_key),
        forged_cert: file("forged.crt", &forged_pem),
        forged_key: file("forged.key", &forged_key),
    }
}

fn private_to_postgres(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).expect("chmod 600");
    if crate::is_root() {
        let ok = Command::new("chown")
            .arg("postgres:postgres")
            .arg(path)
            .status()
            .expect("chown")
            .success();
        assert!(ok, "chown postgres {path:?}");
    }
}
