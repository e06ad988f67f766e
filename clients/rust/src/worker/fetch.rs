//! A queue's fetcher: claims up to as many tasks as there are free slots
//! (at most the batch size) and starts a slot for each; when the queue is
//! empty, waits for a wake-up or the poll interval.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::backoff::Backoff;
use super::slot;
use super::{Phase, QueueRuntime};
use crate::duration::micros;
use crate::error::Result;
use crate::sql;
use crate::statement;
use crate::task::Claimed;

pub(crate) async fn run(q: Arc<QueueRuntime>) {
    let mut phase = q.shared.phase.clone();
    let mut backoff = Backoff::default();
    loop {
        if !q.shared.running() {
            return;
        }
        let first = tokio::select! {
            permit = q.slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = phase.wait_for(|p| *p != Phase::Running) => return,
        };
        let mut permits: Vec<OwnedSemaphorePermit> = vec![first];
        while permits.len() < q.options.batch {
            match q.slots.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        let wait = match claim(&q, permits.len()).await {
            Ok(tasks) => {
                backoff.reset();
                let empty = tasks.is_empty();
                for task in tasks {
                    let permit = permits.pop().expect("no more tasks than permits");
                    tokio::spawn(slot::run(q.clone(), task, permit));
                }
                empty.then_some(q.options.poll_interval)
            }
            Err(e) => {
                tracing::warn!(queue = %q.options.name, error = %e, "claim failed; retrying");
                Some(backoff.next())
            }
        };
        drop(permits);
        if let Some(wait) = wait {
            tokio::select! {
                _ = q.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = phase.wait_for(|p| *p != Phase::Running) => return,
            }
        }
    }
}

async fn claim(q: &QueueRuntime, max: usize) -> Result<Vec<Claimed>> {
    let conn = q.shared.pool.get().await?;
    let lease = micros("lease", q.options.lease)?;
    let rows = statement::query(
        q.shared.statements,
        &conn,
        &sql::CLAIM,
        &[&q.options.name, &q.shared.owner, &lease, &(max as i32)],
    )
    .await?;
    Ok(rows
        .iter()
        .filter_map(|r| Claimed::from_row(r, 0))
        .collect())
}
