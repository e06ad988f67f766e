//! Children in a durable workflow, run by tests/examples.rs: a report fans
//! out to one child task per page (one step, so they are enqueued exactly
//! once however often the handler runs), is parked until every page is
//! counted, then sums the counts.
//!
//!     AEDB_QUEUE_DSN='host=127.0.0.1 user=app dbname=app' cargo run --example fan_out

use std::{sync::Arc, time::Duration};

use aedb_queue_client::{
    enqueue, handler, Child, ChildOutcome, Done, QueueOptions, Settings, Task, Worker,
};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Report {
    pages: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dsn = std::env::var("AEDB_QUEUE_DSN")?;
    let (client, connection) = Settings::parse(&dsn)?.connect().await?;
    tokio::spawn(connection);
    let report = json!({"pages": ["a b c", "d e", "f"]});
    enqueue(&client, "reports", &report, &Default::default()).await?;

    let summed = Arc::new(tokio::sync::Notify::new());
    let done = summed.clone();
    let report = handler(move |task: Task<Report>| {
        let done = done.clone();
        async move {
            let pages = task.payload.pages.iter().map(|p| Child::new("pages", p));
            let ids = task.spawn_children("count", pages).await?;
            // Parked (no worker held) until the last page is counted.
            let counted: Vec<ChildOutcome<usize>> = task.wait_for_tasks("counted", &ids).await?;
            let words: usize = counted.iter().filter_map(ChildOutcome::result).sum();
            println!("{} pages, {words} words", counted.len());
            done.notify_one();
            Ok(Done::new())
        }
    });
    let page = handler(|task: Task<String>| async move {
        Ok(Done::new().with_result(json!(task.payload.split_whitespace().count())))
    });
    let poll = Duration::from_millis(200);
    let worker = Worker::builder(&dsn)?
        .queue(QueueOptions::new("reports").poll_interval(poll), report)
        .queue(QueueOptions::new("pages").poll_interval(poll), page)
        .build()?;
    let ran = worker.run(async move { summed.notified().await }).await?;
    println!("completed {}", ran.completed);
    Ok(())
}
