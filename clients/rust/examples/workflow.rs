//! The README's durable workflow, run by tests/examples.rs: an order is
//! charged, cools off for a second, waits for the warehouse's `packed`
//! event and ships. Each step runs once however often the handler runs; the
//! sleep and the wait park the task without holding a worker.
//!
//!     AEDB_QUEUE_DSN='host=127.0.0.1 user=app dbname=app' cargo run --example workflow

use std::{sync::Arc, time::Duration};

use aedb_queue_client::{
    emit, enqueue, handler, Done, Event, QueueOptions, Settings, Task, Worker,
};
use serde_json::{json, Value};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dsn = std::env::var("AEDB_QUEUE_DSN")?;
    let (client, connection) = Settings::parse(&dsn)?.connect().await?;
    tokio::spawn(connection);
    let order = enqueue(&client, "orders", &json!({}), &Default::default()).await?;

    let shipped = Arc::new(tokio::sync::Notify::new());
    let done = shipped.clone();
    let worker = Worker::builder(&dsn)?.queue(
        QueueOptions::new("orders").poll_interval(Duration::from_millis(200)),
        handler(move |task: Task<Value>| {
            let done = done.clone();
            async move {
                let receipt: String = task
                    .step("charge", || async { Ok(format!("r-{}", task.id)) })
                    .await?;
                task.sleep("cool-off", Duration::from_secs(1)).await?; // parked: runs again in 1 s
                let key = format!("order-{}/packed", task.id);
                let packed: Event<Value> = task
                    .wait_for_event("packed", &key, Duration::from_secs(3600))
                    .await?;
                let boxes = packed.payload.unwrap_or_default()["boxes"].clone();
                task.step("ship", || async {
                    println!("shipping {boxes} boxes, receipt {receipt}");
                    Ok(())
                })
                .await?;
                done.notify_one();
                Ok(Done::new())
            }
        }),
    );
    let running = tokio::spawn(worker.build()?.run(async move { shipped.notified().await }));

    // The warehouse, in a transaction of its own: the waiting order wakes at once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let key = format!("order-{}/packed", order.task_id);
    emit(&client, "orders", &key, &json!({"boxes": 2})).await?;
    println!("completed {}", running.await??.completed);
    Ok(())
}
