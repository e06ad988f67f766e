//! A rate limit under real concurrency: 8 workers over TCP claim from a
//! queue limited to 40 starts per second with bursts of 10, for 3 seconds,
//! some with the settle-and-claim loop and some in claims of several. A
//! ledger of claim times on the server's clock shows that no window of any
//! length held more than one burst over the rate, and that the limit was
//! used, not merely kept by slow workers.

use aedb_queue_itests::*;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

const RATE: f64 = 40.0;
const BURST: i64 = 10;
const WORKERS: usize = 8;
const RUN: Duration = Duration::from_secs(3);

#[test]
fn no_window_holds_more_than_one_burst_over_the_rate() {
    let cluster = Cluster::shared();
    let queue = unique_queue("rl");
    let ledger = format!("rl_ledger_{}", queue.replace('.', "_"));
    let mut su = cluster.connect();
    su.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, claimed_at timestamptz NOT NULL);
         GRANT ALL ON {ledger} TO PUBLIC;"
    ))
    .unwrap();
    let mut producer = cluster.connect_as(PRODUCER);
    let payloads: Vec<Value> = (0..1000).map(|i| json!({ "i": i })).collect();
    enqueue_batch(&mut producer, &queue, &payloads);
    let mut admin = cluster.connect_as(ADMIN);
    admin
        .execute(
            "SELECT aedb_queue.queue_configure($1, rate_limit => 40, rate_interval => '1 second',
                                               rate_burst => $2::int4)",
            &[&queue, &(BURST as i32)],
        )
        .unwrap();

    let end = Instant::now() + RUN;
    thread::scope(|s| {
        for w in 0..WORKERS {
            let (queue, ledger) = (&queue, &ledger);
            s.spawn(move || {
                let mut c = cluster.connect_as(WORKER);
                let owner = format!("w{w}");
                let mut held: Option<(i64, i64)> = None;
                while Instant::now() < end {
                    let mut tx = c.transaction().unwrap();
                    // With each task, its lease's deadline: the call's clock plus
                    // the lease, so the ledger holds the time the call took its
                    // tokens (one clock a call), not when the ledger row was
                    // written, which a loaded machine can delay by a token or more.
                    let claimed: Vec<(i64, i64, SystemTime)> = match (w % 2, held.take()) {
                        // The settle-and-claim loop.
                        (0, Some((id, token))) => try_complete_and_claim(
                            &mut tx,
                            queue,
                            &owner,
                            (id, token),
                            "30 seconds",
                            1,
                            false,
                        )
                        .unwrap_or_else(|e| panic!("worker {w}: {}", describe(&e)))
                        .1
                        .into_iter()
                        .map(|t| (t.task_id, t.fencing_token, t.lease_deadline))
                        .collect(),
                        _ => claim(&mut tx, queue, &owner, "30 seconds", 3)
                            .into_iter()
                            .map(|t| (t.task_id, t.fencing_token, t.lease_deadline))
                            .collect(),
                    };
                    for (id, _, deadline) in &claimed {
                        tx.execute(
                            &format!(
                                "INSERT INTO {ledger} VALUES ($1, $2::timestamptz - interval '30 seconds')"
                            ),
                            &[id, deadline],
                        )
                        .unwrap();
                    }
                    if w % 2 == 1 {
                        for (id, token, _) in &claimed {
                            assert_eq!(complete(&mut tx, queue, *id, *token), Outcome::Applied);
                        }
                    } else {
                        held = claimed.first().map(|&(id, token, _)| (id, token));
                    }
                    tx.commit().unwrap();
                    if claimed.is_empty() {
                        thread::sleep(Duration::from_millis(2));
                    }
                }
            });
        }
    });

    let times: Vec<f64> = su
        .query(
            &format!(
                "SELECT extract(epoch FROM claimed_at)::float8 FROM {ledger} ORDER BY claimed_at"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Any window [t_i, t_j] of claims: j - i + 1 starts in (t_j - t_i) s.
    let mut worst = 0.0f64;
    for i in 0..times.len() {
        for j in i..times.len() {
            let allowed = BURST as f64 + RATE * (times[j] - times[i]);
            let excess = (j - i + 1) as f64 - allowed;
            worst = worst.max(excess);
        }
    }
    // One token of slack: calls whose clocks were read in one order may
    // take their tokens in the other.
    assert!(
        worst <= 1.0,
        "{} claims; a window held {worst:.1} more than one burst over the rate",
        times.len()
    );
    let span = times.last().unwrap() - times.first().unwrap();
    let expected = BURST as f64 + RATE * span;
    assert!(
        times.len() as f64 >= 0.8 * expected,
        "{} claims in {span:.2} s, the limit allows {expected:.0}: the limit was not reached",
        times.len()
    );
}
