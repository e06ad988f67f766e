//! The drain the flow-control itests share: workers over TCP that fail
//! tasks and abandon leases while a ledger, written in the claiming and the
//! settling transactions on the server's clock, records who held what when.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use crate::{
    claim_one, complete, fail_with, Client, Cluster, FailOpts, Outcome, Transaction, WORKER,
};

/// Creates `ledger` (one row per claim: task, key, when claimed, when its
/// settling committed and how) readable and writable by the test roles.
pub fn create_fault_ledger(su: &mut Client, ledger: &str) {
    su.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, key text NOT NULL, claimed_at timestamptz NOT NULL,
                               ended_at timestamptz, how text);
         GRANT ALL ON {ledger} TO PUBLIC;"
    ))
    .unwrap();
}

/// Attempts enough for any drain: every claim that a worker abandons, fails,
/// or settles too late (its 300 ms lease expired first, which a loaded
/// machine makes common) spends one. With the default 5, a task could run
/// out and go dead, and the drain, which must complete every task, would
/// wait for it forever: each worker's empty claim dead-letters it inline and
/// then rolls back. Call before enqueuing (a task keeps the queue's
/// max_attempts of its enqueue).
pub fn allow_attempts_for_faults(cluster: &Cluster, queue: &str) {
    cluster
        .connect_as(crate::ADMIN)
        .execute(
            "SELECT aedb_queue.queue_configure($1, max_attempts => 10000)",
            &[&queue],
        )
        .unwrap_or_else(|e| panic!("queue_configure {queue}: {}", crate::describe(&e)));
}

/// Drains `queue` until `total` tasks completed (its tasks enqueued after
/// [`allow_attempts_for_faults`]): `workers` workers claim
/// one task at a time (lease 300 ms), work up to 2 ms, then abandon 3 %
/// (the lease expires and a claim reclaims it), fail 5 % (retried at once,
/// or after 20 ms) and complete the rest. `key_of` names a task's key in
/// the ledger; `on_complete` adds to the completing transaction.
pub fn drain_with_faults(
    cluster: &Cluster,
    queue: &str,
    ledger: &str,
    workers: usize,
    total: usize,
    key_of: &(dyn Fn(i64) -> String + Sync),
    on_complete: &(dyn Fn(&mut Transaction<'_>, i64) + Sync),
) {
    let done = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs(120);
    thread::scope(|s| {
        for w in 0..workers {
            let done = &done;
            s.spawn(move || {
                let mut c = cluster.connect_as(WORKER);
                let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64 + 100);
                while done.load(Ordering::SeqCst) < total {
                    if Instant::now() >= deadline {
                        panic!(
                            "worker {w}: the drain did not finish ({} of {total} completed); \
                             left in the queue: {}",
                            done.load(Ordering::SeqCst),
                            what_is_left(cluster, queue)
                        );
                    }
                    let mut tx = c.transaction().unwrap();
                    let Some(task) =
                        claim_one(&mut tx, queue, &format!("w{w}"), "300 milliseconds")
                    else {
                        // A claim that comes up short reclaims expired leases itself.
                        tx.rollback().unwrap();
                        thread::sleep(Duration::from_millis(rng.gen_range(1..4)));
                        continue;
                    };
                    tx.execute(
                        &format!(
                            "INSERT INTO {ledger} VALUES ($1, $2, clock_timestamp(), NULL, NULL)"
                        ),
                        &[&task.task_id, &key_of(task.task_id)],
                    )
                    .unwrap();
                    tx.commit().unwrap();
                    thread::sleep(Duration::from_micros(rng.gen_range(0..2000)));
                    let roll = rng.gen_range(0..100);
                    if roll < 3 {
                        continue; // abandoned: the lease expires, a claim reclaims it
                    }
                    let mut tx = c.transaction().unwrap();
                    let failed = roll < 8;
                    let how = if failed {
                        let opts = FailOpts {
                            retry_in: Some(if roll < 5 { "0" } else { "20 milliseconds" }.into()),
                            ..FailOpts::default()
                        };
                        fail_with(
                            &mut tx,
                            queue,
                            task.task_id,
                            task.fencing_token,
                            "flaky",
                            &opts,
                        )
                    } else {
                        complete(&mut tx, queue, task.task_id, task.fencing_token)
                    };
                    if how != Outcome::Applied {
                        tx.rollback().unwrap(); // its lease expired first: reclaimed
                        continue;
                    }
                    let label = if failed { "failed" } else { "completed" };
                    tx.execute(
                        &format!(
                            "UPDATE {ledger} SET ended_at = clock_timestamp(), how = $2
                             WHERE ctid = (SELECT ctid FROM {ledger} WHERE task_id = $1
                                           ORDER BY claimed_at DESC LIMIT 1)"
                        ),
                        &[&task.task_id, &label],
                    )
                    .unwrap();
                    if !failed {
                        on_complete(&mut tx, task.task_id);
                    }
                    tx.commit().unwrap();
                    if !failed {
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
}

/// The queue's remaining tasks by state, with their keys, attempts and
/// lease or due times against the server's clock, for a drain that stalls.
fn what_is_left(cluster: &Cluster, queue: &str) -> String {
    let mut su = cluster.connect();
    let _ = su.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck; SET enable_seqscan = off");
    let rows = joined(
        &mut su,
        "SELECT format('%s %s ck=%s ok=%s attempts=%s lease_in=%s due_in=%s',
                       task_id, state, concurrency_key, ordering_key, attempts,
                       lease_deadline - clock_timestamp(), not_before - clock_timestamp())
           FROM aedb_queue.task WHERE queue = $1 ORDER BY task_id LIMIT 20",
        queue,
    );
    let slots = joined(
        &mut su,
        "SELECT format('%s', o) FROM aedb_queue.ordering_slot o WHERE queue = $1 LIMIT 20",
        queue,
    );
    // Whether the in-flight index finds what the table holds (a reap reads
    // that index), whether amcheck finds every row in every index, and what
    // a reap of the queue does now.
    let by_index = joined(
        &mut su,
        "SELECT string_agg(task_id::text, ',') FROM aedb_queue.task
          WHERE queue = $1 AND state = 'in_flight' AND lease_deadline IS NOT NULL
            AND lease_deadline < clock_timestamp()",
        queue,
    );
    let amcheck = joined(
        &mut su,
        "SELECT format('%s indexes of the task table consistent with it', count(*)) FROM (
             SELECT bt_index_check(i.indexrelid, true)
               FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
              WHERE t.relname = 'task' AND t.relnamespace = 'aedb_queue'::regnamespace
                AND $1::text IS NOT NULL) c",
        queue,
    );
    let reaped = joined(
        &mut su,
        "SELECT format('%s', r) FROM aedb_queue.queue_reap($1) r",
        queue,
    );
    let after = joined(
        &mut su,
        "SELECT format('%s %s attempts=%s/%s', task_id, state, attempts, max_attempts)
           FROM aedb_queue.task WHERE queue = $1 ORDER BY task_id LIMIT 20",
        queue,
    );
    format!(
        "{rows}; ordering slots: {slots}; expired leases found through the in-flight index: \
         [{by_index}]; amcheck: {amcheck}; queue_reap now: {reaped}; then: {after}"
    )
}

/// The one text column `sql` returns for `queue`, its rows joined by "; ".
fn joined(su: &mut Client, sql: &str, queue: &str) -> String {
    su.query(sql, &[&queue])
        .map(|rows| {
            rows.iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|e| format!("(could not read: {})", crate::describe(&e)))
}

/// The most tasks of each key in flight at any instant, from the ledger: an
/// abandoned claim counts until the task's next claim (it held its key
/// until then: in flight, then reclaimed to ready), so a count can only be
/// too high, never too low.
pub fn most_in_flight_per_key(su: &mut Client, ledger: &str) -> Vec<(String, i64)> {
    su.query(
        &format!(
            "WITH spans AS (
                 SELECT key, claimed_at AS from_t,
                        coalesce(ended_at, lead(claimed_at) OVER (PARTITION BY task_id ORDER BY claimed_at)) AS to_t
                 FROM {ledger}),
             events AS (
                 SELECT key, from_t AS t, 1 AS d FROM spans
                 UNION ALL SELECT key, to_t, -1 FROM spans WHERE to_t IS NOT NULL),
             running AS (
                 SELECT key, sum(d) OVER (PARTITION BY key ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS n
                 FROM events)
             SELECT key, max(n)::int8 FROM running GROUP BY key ORDER BY key"
        ),
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// How many of the ledger's claims failed, and how many were abandoned.
pub fn faults_in(su: &mut Client, ledger: &str) -> (i64, i64) {
    let r = su
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE how = 'failed'), count(*) FILTER (WHERE ended_at IS NULL)
                 FROM {ledger}"
            ),
            &[],
        )
        .unwrap();
    (r.get(0), r.get(1))
}
