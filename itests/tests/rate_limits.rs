//! A rate limit under real concurrency: 8 workers over TCP claim from a
//! queue limited to 40 starts per second with bursts of 10, for 3 seconds,
//! some with the settle-and-claim loop and some in claims of several. A
//! ledger of the times the bucket was taken, as the server's bucket holds
//! them, shows that no window of any length held more than one burst over
//! the rate, and that the limit lets more than a burst through. How much of
//! the limit the workers used is reported (bench/timing.sh), not asserted.

use aedb_queue_itests::chaos::recovery::report;
use aedb_queue_itests::*;
use std::thread;
use std::time::{Duration, Instant};

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
    // The ledger reads the bucket's time inside each claiming transaction.
    su.batch_execute(&format!(
        "GRANT SELECT ON aedb_queue.rate_bucket TO {WORKER}"
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
                    let claimed: Vec<(i64, i64)> = match (w % 2, held.take()) {
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
                        .map(|t| (t.task_id, t.fencing_token))
                        .collect(),
                        _ => claim(&mut tx, queue, &owner, "30 seconds", 3)
                            .into_iter()
                            .map(|t| (t.task_id, t.fencing_token))
                            .collect(),
                    };
                    // The time the bucket was taken at, as the server saw
                    // it: the bucket's own `at` after this take (the later
                    // of its last take and this call's clock), read while
                    // this transaction still holds the bucket's row, so the
                    // ledger's times follow the order the takes happened in
                    // however late a loaded machine runs the calls.
                    let ids: Vec<i64> = claimed.iter().map(|&(id, _)| id).collect();
                    if !ids.is_empty() {
                        tx.execute(
                            &format!(
                                "INSERT INTO {ledger}
                                 SELECT id, b.at FROM aedb_queue.rate_bucket b, unnest($1::int8[]) id
                                 WHERE b.queue = $2"
                            ),
                            &[&ids, queue],
                        )
                        .unwrap();
                    }
                    if w % 2 == 1 {
                        for (id, token) in &claimed {
                            assert_eq!(complete(&mut tx, queue, *id, *token), Outcome::Applied);
                        }
                    } else {
                        held = claimed.first().copied();
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
    // One token of slack for rounding (micro-tokens, epoch as float8).
    assert!(
        worst <= 1.0,
        "{} claims; a window held {worst:.1} more than one burst over the rate",
        times.len()
    );
    let span = times.last().unwrap() - times.first().unwrap();
    let expected = BURST as f64 + RATE * span;
    // The limit refills: more than the first burst went through.
    assert!(
        times.len() as i64 > BURST,
        "{} claims in {span:.2} s: the bucket never refilled",
        times.len()
    );
    report(
        "timing",
        "rate limit 40/s, burst 10, 8 workers, 3 s: share of the limit used (target >= 80 %)",
        "the bucket's times",
        &format!(
            "{:.0} % ({} claims in {span:.2} s, the limit allows {expected:.0}); worst window {worst:.2} over",
            100.0 * times.len() as f64 / expected,
            times.len()
        ),
    );
}
