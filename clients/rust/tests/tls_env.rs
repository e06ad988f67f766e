//! PGSSLMODE and PGSSLROOTCERT honoured by the Rust client, as libpq does
//! (the connection string says nothing of TLS). A test binary of its own
//! with one test: it sets process environment variables, which no other
//! test may see.

use aedb_queue_client::{Client, EnqueueOptions};
use aedb_queue_itests::tls::TlsCluster;
use aedb_queue_itests::{Cluster, PRODUCER};

mod support;
use support::chain;

fn enqueue(dsn: &str) -> Result<i64, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::connect(dsn, 1).map_err(|e| e.to_string())?;
        let opts = EnqueueOptions::default();
        match client
            .enqueue("tls.env", &serde_json::json!({}), &opts)
            .await
        {
            Ok(e) => Ok(e.task_id),
            Err(e) => Err(chain(&e)),
        }
    })
}

#[test]
fn pgsslmode_and_pgsslrootcert_are_honoured() {
    let tls = TlsCluster::start("");
    let plain = Cluster::start();
    // The variables are set while no other thread of this binary runs.
    std::env::set_var("PGSSLMODE", "require");
    let e = enqueue(&plain.dsn(PRODUCER)).unwrap_err();
    assert!(e.contains("server does not support TLS"), "{e}");

    std::env::set_var("PGSSLMODE", "verify-full");
    std::env::set_var("PGSSLROOTCERT", &tls.certs.ca);
    enqueue(&tls.dsn(PRODUCER)).unwrap();
    let wrong_name = tls.dsn_to("host=127.0.0.1", PRODUCER);
    let e = enqueue(&wrong_name).unwrap_err();
    assert!(e.contains("not valid for name"), "{e}");

    std::env::set_var("PGSSLROOTCERT", &tls.certs.other_ca);
    let e = enqueue(&tls.dsn(PRODUCER)).unwrap_err();
    assert!(e.contains("UnknownIssuer"), "{e}");

    // The connection string wins over the variables.
    let dsn = format!(
        "{} sslrootcert={}",
        tls.dsn(PRODUCER),
        tls.certs.ca.display()
    );
    enqueue(&dsn).unwrap();
}
