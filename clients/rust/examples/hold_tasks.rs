//! A worker whose handlers never finish, for tests/runtime.rs's kill test:
//! it claims up to AEDB_QUEUE_HOLD tasks of AEDB_QUEUE_NAME with a 2 s lease
//! (heartbeats keep them), prints `started <task id>` for each, and runs
//! until it is killed.

use std::time::Duration;

use aedb_queue_client::{handler, Done, QueueOptions, Task, TaskError, Worker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dsn = std::env::var("AEDB_QUEUE_DSN")?;
    let queue = std::env::var("AEDB_QUEUE_NAME")?;
    let hold: usize = std::env::var("AEDB_QUEUE_HOLD")?.parse()?;
    Worker::builder(&dsn)?
        .queue(
            QueueOptions::new(queue)
                .concurrency(hold)
                .lease(Duration::from_secs(2))
                .heartbeat(Duration::from_millis(500)),
            handler(|task: Task<serde_json::Value>| async move {
                println!("started {}", task.id);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, TaskError>(Done::new())
            }),
        )
        .build()?
        .run(std::future::pending())
        .await?;
    Ok(())
}
