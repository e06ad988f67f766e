//! A workflow worker for tests/workflows.rs's crash test, which SIGKILLs
//! itself at the point `AEDB_KILL_AT` names. The workflow of each task of
//! `AEDB_QUEUE_NAME`: the ledger steps `charge`, `invoice` and `ship` (each
//! a row of `wf_ledger` written in the step's own transaction, with its
//! record: strict), a 1 s sleep `cool-off` after `charge`, and a wait for
//! the event `order-<task id>/packed` (step `packed`) before `ship`. Kill
//! points: `before:<step>` and `effect:<step>` (the row written, not yet
//! committed) inside a ledger step, `committed:<step>` after it,
//! `parked:cool-off` and `parked:packed` when the task was handed back,
//! `event:packed` once the event arrived. Prints `killed at <point>` just
//! before; without `AEDB_KILL_AT` it exits once it has completed a task.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use aedb_queue_client::{handler, Done, Event, QueueOptions, Task, TaskError, Worker};
use serde_json::Value;

/// SIGKILLs this process (no unwinding, no shutdown) if `at` is the point.
fn point(at: &str) {
    if std::env::var("AEDB_KILL_AT").as_deref() == Ok(at) {
        println!("killed at {at}");
        std::io::stdout().flush().unwrap();
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status();
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

/// A kill point for a call that parked the task.
fn parked<R>(returned: Result<R, TaskError>, at: &str) -> Result<R, TaskError> {
    if matches!(&returned, Err(e) if e.is_parked()) {
        point(at);
    }
    returned
}

/// A step whose effect is a ledger row, written with its record.
async fn ledger(task: &Task<Value>, step: &'static str) -> Result<(), TaskError> {
    let id = task.id;
    task.step_in(step, |tx| async move {
        point(&format!("before:{step}"));
        tx.execute(
            "INSERT INTO wf_ledger (task_id, step) VALUES ($1, $2)",
            &[&id, &step],
        )
        .await?;
        point(&format!("effect:{step}"));
        Ok(())
    })
    .await?;
    point(&format!("committed:{step}"));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let dsn = std::env::var("AEDB_QUEUE_DSN")?;
    let queue = std::env::var("AEDB_QUEUE_NAME")?;
    let completed = Arc::new(tokio::sync::Notify::new());
    let done = completed.clone();
    Worker::builder(&dsn)?
        .queue(
            QueueOptions::new(queue)
                .concurrency(1)
                .lease(Duration::from_secs(10))
                .poll_interval(Duration::from_millis(100)),
            handler(move |task: Task<Value>| {
                let done = done.clone();
                async move {
                    ledger(&task, "charge").await?;
                    parked(
                        task.sleep("cool-off", Duration::from_secs(1)).await,
                        "parked:cool-off",
                    )?;
                    ledger(&task, "invoice").await?;
                    let key = format!("order-{}/packed", task.id);
                    let packed: Event<Value> = parked(
                        task.wait_for_event("packed", &key, Duration::from_secs(60))
                            .await,
                        "parked:packed",
                    )?;
                    point("event:packed");
                    ledger(&task, "ship").await?;
                    done.notify_one();
                    Ok(Done::new().with_result(packed.payload.unwrap_or_default()))
                }
            }),
        )
        .build()?
        .run(async move { completed.notified().await })
        .await?;
    Ok(())
}
