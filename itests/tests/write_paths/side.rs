//! The sessions of one database in the differential test, and how a call
//! is sent and its reply recorded.

use aedb_queue_itests::{describe, Client, GenericClient, Value};
use postgres::types::ToSql;

use super::masked;

/// A database and the application's sessions in it.
pub struct Side {
    pub db: String,
    pub producer: Client,
    pub worker: Client,
    /// Producer and worker: several calls in one transaction.
    pub service: Client,
    /// Every error a call replied with.
    pub errors: Vec<String>,
}

/// Which session of a side a call runs on.
#[derive(Clone, Copy)]
pub enum Who {
    Producer,
    Worker,
}

pub type Params<'a> = Vec<&'a (dyn ToSql + Sync)>;

/// Runs `call` (a `SELECT * FROM aedb_queue.f(...)`) on `c` and returns
/// its rows as JSON text with the times masked, or the error.
fn call_on(c: &mut impl GenericClient, call: &str, params: &Params) -> Result<Vec<String>, String> {
    let sql = format!("SELECT to_jsonb(r)::text FROM ({call}) r");
    match c.query(sql.as_str(), params) {
        Ok(rows) => Ok(rows.iter().map(|r| masked(r.get(0))).collect()),
        Err(e) => Err(format!("ERROR {}", describe(&e))),
    }
}

impl Side {
    pub fn call(&mut self, who: Who, call: &str, params: &Params) -> Vec<String> {
        let c = match who {
            Who::Producer => &mut self.producer,
            Who::Worker => &mut self.worker,
        };
        call_on(c, call, params).unwrap_or_else(|e| {
            self.errors.push(e.clone());
            vec![e]
        })
    }

    /// In one transaction of the service: a batch enqueued, tasks claimed
    /// (those just enqueued among them), each completed; then commit or
    /// roll back. Every reply, in order.
    pub fn transaction(
        &mut self,
        queue: &str,
        payloads: &[Value],
        max: i32,
        commit: bool,
    ) -> Vec<String> {
        let mut tx = self.service.transaction().unwrap();
        let mut replies = Vec::new();
        let outcome = (|| -> Result<(), String> {
            replies.extend(call_on(
                &mut tx,
                "SELECT * FROM aedb_queue.queue_enqueue_batch($1::text, $2::jsonb[])",
                &vec![&queue, &payloads],
            )?);
            let claimed = call_on(
                &mut tx,
                "SELECT * FROM aedb_queue.queue_claim($1::text, 'tx', '1 hour', $2::int4)",
                &vec![&queue, &max],
            )?;
            for row in &claimed {
                let row: Value = serde_json::from_str(row).unwrap();
                let (id, token) = (row["task_id"].as_i64(), row["fencing_token"].as_i64());
                replies.extend(call_on(
                    &mut tx,
                    "SELECT * FROM aedb_queue.queue_complete($1::text, $2::int8, $3::int8)",
                    &vec![&queue, &id, &token],
                )?);
            }
            replies.extend(claimed);
            Ok(())
        })();
        if let Err(e) = outcome {
            self.errors.push(e.clone());
            replies.push(e);
        }
        let end = if commit { tx.commit() } else { tx.rollback() };
        replies.push(format!("{:?}", end.map_err(|e| describe(&e))));
        replies
    }
}
