//! The README's Rust example, run by tests/examples.rs: enqueue three
//! emails in one transaction of the application's (the outbox), then work
//! them with a typed handler and stop once all three are sent.
//!
//!     AEDB_QUEUE_DSN='host=127.0.0.1 user=app dbname=app' cargo run --example quickstart
//!
//! `AEDB_QUEUE_NAME` names the queue (default `emails`): a tenant's worker
//! uses one of its own queues (docs/deployment.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aedb_queue_client::{
    enqueue, handler, Done, EnqueueOptions, QueueOptions, Settings, Task, TaskError, Worker,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Email {
    to: String,
    subject: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dsn = std::env::var("AEDB_QUEUE_DSN")?;
    let queue = std::env::var("AEDB_QUEUE_NAME").unwrap_or_else(|_| "emails".into());

    // Producer: the tasks commit with the application's own writes, or not at all.
    // Settings: the DSN as libpq reads it, TLS as its sslmode says.
    let (mut client, connection) = Settings::parse(&dsn)?.connect().await?;
    tokio::spawn(connection);
    let tx = client.transaction().await?;
    for to in ["ada@example.com", "alan@example.com", "grace@example.com"] {
        let email = Email {
            to: to.into(),
            subject: "Welcome".into(),
        };
        enqueue(
            &tx,
            &queue,
            &email,
            &EnqueueOptions::new().max_attempts(3),
        )
        .await?;
    }
    tx.commit().await?;

    // Worker: 4 handlers; an error retries with backoff, a panic fails the task.
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let worker = Worker::builder(&dsn)?
        .queue(
            QueueOptions::new(&queue)
                .concurrency(4)
                .lease(Duration::from_secs(30)),
            handler(move |task: Task<Email>| {
                let counter = counter.clone();
                async move {
                    println!("sending {:?} to {}", task.payload.subject, task.payload.to);
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, TaskError>(Done::new())
                }
            }),
        )
        .build()?;
    // In a service: worker.run(aedb_queue_client::shutdown_signal()).await?
    let report = worker
        .run(async {
            while sent.load(Ordering::SeqCst) < 3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await?;
    println!("sent {}", report.completed);
    Ok(())
}
