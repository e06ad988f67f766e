//! LISTEN wake-ups on a connection of their own. NOTIFY aedb_queue carries
//! the queue's name; a wake-up makes that queue's fetcher claim now. The
//! connection is made again after a failure, and every fetcher is woken
//! then, since notifications sent meanwhile are lost.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::{stream, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio_postgres::AsyncMessage;

use super::backoff::Backoff;
use super::{Phase, QueueRuntime};
use crate::connect::Settings;
use crate::sql;

pub(crate) async fn run(
    settings: Settings,
    queues: HashMap<String, Arc<QueueRuntime>>,
    mut phase: watch::Receiver<Phase>,
) {
    let mut backoff = Backoff::default();
    loop {
        match settings.connect().await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = mpsc::unbounded_channel::<String>();
                // The connection's messages arrive only while it is polled.
                let driver = tokio::spawn(async move {
                    let mut messages = stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(message) = messages.next().await {
                        match message {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_string()).is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "the LISTEN connection failed");
                                return;
                            }
                        }
                    }
                });
                match client.batch_execute(sql::LISTEN).await {
                    Ok(()) => {
                        backoff.reset();
                        queues.values().for_each(|q| q.wake.notify_one());
                        loop {
                            tokio::select! {
                                woken = rx.recv() => match woken {
                                    Some(queue) => {
                                        if let Some(q) = queues.get(&queue) {
                                            q.wake.notify_one();
                                        }
                                    }
                                    None => break,
                                },
                                _ = phase.wait_for(|p| *p != Phase::Running) => {
                                    driver.abort();
                                    return;
                                }
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "LISTEN failed"),
                }
                driver.abort();
                drop(client);
            }
            Err(e) => tracing::warn!(error = %e, "cannot connect for LISTEN; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next()) => {}
            _ = phase.wait_for(|p| *p != Phase::Running) => return,
        }
    }
}
