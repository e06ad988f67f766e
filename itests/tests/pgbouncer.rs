//! The producer and worker paths through PgBouncer 1.18 in transaction mode
//! (`itests/src/pgbouncer.rs`: 2 server connections per login role, handed
//! out round robin), unchanged: the harness helpers send unnamed
//! statements, as any client behind such a pooler must.
//!
//! What a pooler changes is which backend runs a client's transaction: one
//! client's consecutive transactions land on different server connections,
//! and one server connection serves many clients. Every test records the
//! backend (`pg_backend_pid()`) of its transactions to show that happened,
//! since the extension keeps per-backend state (scan hints, copies of queue
//! settings and grants, SPI plans, the index cache, the schema level), each
//! of which must hold whoever's transaction the backend runs next.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use aedb_queue_itests::pgbouncer::{backend_pid, PgBouncer, PoolerConfig};
use aedb_queue_itests::*;
use postgres::types::Type;

/// Server connections per login role: fewer than the clients of every test.
const POOL_SIZE: u32 = 2;

fn pooler(cluster: &Cluster) -> PgBouncer {
    PgBouncer::start(cluster, &PoolerConfig::new(POOL_SIZE))
}

/// A ledger of completions, written in the completing transaction; no
/// unique constraint, so a double completion shows as a second row.
fn create_ledger(su: &mut Client, ledger: &str) {
    su.batch_execute(&format!(
        "CREATE TABLE {ledger} (task_id bigint NOT NULL, fencing_token bigint NOT NULL, backend int NOT NULL)"
    ))
    .unwrap();
}

fn write_ledger(tx: &mut Transaction<'_>, ledger: &str, task: &Claimed) {
    let sql = format!(
        "INSERT INTO {ledger} (task_id, fencing_token, backend) VALUES ($1, $2, pg_backend_pid())"
    );
    tx.execute_typed(
        sql.as_str(),
        &[
            (&task.task_id, Type::INT8),
            (&task.fencing_token, Type::INT8),
        ],
    )
    .expect("ledger insert");
}

/// Runs `step` in one transaction of `c` after another until they have run
/// on `servers` different server connections; the backend of each, in order.
fn on_every_server(
    c: &mut Client,
    servers: usize,
    mut step: impl FnMut(&mut Transaction<'_>),
) -> Vec<i32> {
    let mut pids = Vec::new();
    while pids.iter().collect::<HashSet<_>>().len() < servers {
        assert!(
            pids.len() < 40,
            "{servers} server connections never served this client: {pids:?}"
        );
        let mut tx = c.transaction().unwrap();
        pids.push(backend_pid(&mut tx));
        step(&mut tx);
        tx.commit().unwrap();
    }
    pids
}

fn claim_error(c: &mut impl GenericClient, queue: &str, owner: &str) -> Option<String> {
    c.query_typed(
        "SELECT task_id FROM aedb_queue.queue_claim($1::text, $2::text)",
        &[(&queue, Type::TEXT), (&owner, Type::TEXT)],
    )
    .err()
    .map(|e| sqlstate(&e).unwrap_or_else(|| describe(&e)))
}

/// Enqueue (one, keyed, batch), claim, heartbeat, fail and retry, complete
/// with follow-ups, batch completion and settle-and-claim, each call its own
/// autocommit transaction through the pooler.
#[test]
fn producer_and_worker_calls_work_through_the_pooler() {
    let cluster = Cluster::shared();
    let pooler = pooler(cluster);
    let queue = unique_queue("pooled");
    let next = unique_queue("pooled_next");
    let mut producer = pooler.connect_as(PRODUCER);
    let mut worker = pooler.connect_as(WORKER);
    let mut service = pooler.connect_as(SERVICE);

    // Each in a transaction that also says which backend ran it; the calls
    // after these run in autocommit.
    let mut producer_pids = BTreeSet::new();
    let mut ids = Vec::new();
    for n in 0..4 {
        let mut tx = producer.transaction().unwrap();
        producer_pids.insert(backend_pid(&mut tx));
        ids.push(enqueue(&mut tx, &queue, &json!({ "n": n })).task_id);
        tx.commit().unwrap();
    }
    let keyed = enqueue_with(
        &mut producer,
        &queue,
        Some(&json!("k")),
        &EnqueueOpts::default().key("k1"),
    );
    let again = enqueue_with(
        &mut producer,
        &queue,
        Some(&json!("k")),
        &EnqueueOpts::default().key("k1"),
    );
    assert!(
        !keyed.deduplicated && again.deduplicated,
        "{keyed:?} {again:?}"
    );
    assert_eq!(
        again.task_id, keyed.task_id,
        "the key's task, from another backend"
    );
    ids.push(keyed.task_id);
    ids.extend(enqueue_batch(
        &mut producer,
        &queue,
        &[json!(5), json!(6), json!(7)],
    ));
    assert_eq!(ids.len(), 8);
    assert!(
        producer_pids.len() >= 2,
        "the producer's transactions stayed on one server connection: {producer_pids:?}"
    );

    // Claims resume where this backend's last claim stopped (scan hints):
    // across backends every task is handed out once, in service order.
    let mut claimed = Vec::new();
    let mut worker_pids = BTreeSet::new();
    for _ in 0..3 {
        let mut tx = worker.transaction().unwrap();
        worker_pids.insert(backend_pid(&mut tx));
        claimed.extend(claim(&mut tx, &queue, "w1", "1 minute", 3));
        tx.commit().unwrap();
    }
    assert!(
        worker_pids.len() >= 2,
        "worker on one server connection: {worker_pids:?}"
    );
    assert_eq!(claimed.iter().map(|t| t.task_id).collect::<Vec<_>>(), ids);

    let (first, second, third) = (&claimed[0], &claimed[1], &claimed[2]);
    let progress = json!({"step": 2});
    assert_eq!(
        heartbeat(
            &mut worker,
            &queue,
            first.task_id,
            first.fencing_token,
            "1 minute",
            Some(&progress)
        ),
        Outcome::Applied
    );
    assert_eq!(
        get(&mut worker, &queue, first.task_id).unwrap().progress,
        Some(progress)
    );
    let retry = FailOpts {
        retry_in: Some("0 seconds".into()),
        dead_letter: None,
    };
    assert_eq!(
        fail_with(
            &mut worker,
            &queue,
            second.task_id,
            second.fencing_token,
            "boom",
            &retry
        ),
        Outcome::Applied
    );
    let retried = claim_one(&mut worker, &queue, "w1", "1 minute").expect("the retry");
    assert_eq!((retried.task_id, retried.attempts), (second.task_id, 2));

    // Follow-ups: the completion enqueues into another queue (SERVICE may do both).
    let follow_ups = json!([{ "queue": next, "payload": {"after": first.task_id} }]);
    let opts = CompleteOpts {
        follow_ups: Some(follow_ups),
        ..Default::default()
    };
    assert_eq!(
        try_complete_with(
            &mut service,
            &queue,
            first.task_id,
            first.fencing_token,
            &opts
        )
        .unwrap(),
        Outcome::Applied
    );
    let follow = claim_one(&mut worker, &next, "w1", "1 minute").expect("the follow-up");
    assert_eq!(follow.payload, Some(json!({"after": first.task_id})));
    assert_eq!(
        complete(&mut worker, &next, follow.task_id, follow.fencing_token),
        Outcome::Applied
    );

    // A batch completion, then settle-and-claim through the rest.
    let batch = [&retried, third];
    let outcomes: Vec<String> = worker
        .query_typed(
            "SELECT outcome::text FROM aedb_queue.queue_complete_batch($1::text, $2::int8[], $3::int8[])",
            &[
                (&queue, Type::TEXT),
                (&batch.map(|t| t.task_id).to_vec(), Type::INT8_ARRAY),
                (&batch.map(|t| t.fencing_token).to_vec(), Type::INT8_ARRAY),
            ],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(outcomes, ["applied", "applied"]);
    let mut held: Vec<&Claimed> = claimed[3..].iter().collect();
    while let Some(task) = held.pop() {
        let (settled, more) = try_complete_and_claim(
            &mut worker,
            &queue,
            "w1",
            (task.task_id, task.fencing_token),
            "1 minute",
            1,
            false,
        )
        .unwrap();
        assert_eq!(settled, Outcome::Applied, "task {}", task.task_id);
        assert!(more.is_empty(), "nothing left to claim: {more:?}");
    }
    assert!(
        all_tasks(&mut worker, &queue).is_empty(),
        "every task completed"
    );
    assert!(all_tasks(&mut worker, &next).is_empty());
}

/// A stale token changes nothing, and strict completion aborts the stale
/// worker's transaction with its own write, when the reclaim ran on another
/// server connection than the stale worker's claim.
#[test]
fn fencing_and_strict_completion_hold_through_the_pooler() {
    let cluster = Cluster::shared();
    let pooler = pooler(cluster);
    let queue = unique_queue("pooled_fence");
    let ledger = format!("ledger_{queue}");
    create_ledger(&mut cluster.connect(), &ledger);
    let mut producer = pooler.connect_as(PRODUCER);
    let mut stale = pooler.connect_as(WORKER);
    let mut fresh = pooler.connect_as(WORKER);
    let id = enqueue(&mut producer, &queue, &json!("fenced")).task_id;

    let first = claim_one(&mut stale, &queue, "stale", "200 milliseconds").unwrap();
    let first_pid = backend_pid(&mut stale);
    thread::sleep(Duration::from_millis(400));
    // A claim that comes up short reclaims the expired lease itself.
    let mut tx = fresh.transaction().unwrap();
    let second = claim_one(&mut tx, &queue, "fresh", "1 minute").expect("the reclaim");
    let reclaim_pid = backend_pid(&mut tx);
    tx.commit().unwrap();
    assert_eq!(second.task_id, id);
    assert!(second.fencing_token > first.fencing_token);

    assert_eq!(
        complete(&mut stale, &queue, id, first.fencing_token),
        Outcome::LeaseLost
    );
    let strict = CompleteOpts {
        strict: true,
        ..Default::default()
    };
    let mut strict_pids = BTreeSet::new();
    for _ in 0..10 {
        if strict_pids.len() == 2 {
            break;
        }
        let mut tx = stale.transaction().unwrap();
        strict_pids.insert(backend_pid(&mut tx));
        write_ledger(&mut tx, &ledger, &first);
        let err = try_complete_with(&mut tx, &queue, id, first.fencing_token, &strict)
            .expect_err("strict completion with a stale token");
        assert_eq!(
            sqlstate(&err).as_deref(),
            Some("40002"),
            "{}",
            describe(&err)
        );
        tx.rollback().unwrap();
    }
    assert_eq!(
        strict_pids.len(),
        2,
        "both server connections: {strict_pids:?}"
    );
    eprintln!("claim on {first_pid}, reclaim on {reclaim_pid}, strict on {strict_pids:?}");

    let mut tx = fresh.transaction().unwrap();
    write_ledger(&mut tx, &ledger, &second);
    let done = try_complete_with(&mut tx, &queue, id, second.fencing_token, &strict).unwrap();
    tx.commit().unwrap();
    assert_eq!(done, Outcome::Applied);
    let mut su = cluster.connect();
    assert_eq!(ledger_counts(&mut su, &ledger), HashMap::from([(id, 1)]));
    let token: i64 = su
        .query_one(&format!("SELECT fencing_token FROM {ledger}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(
        token, second.fencing_token,
        "only the holder's write committed"
    );
}

/// Eight producers over two server connections enqueue under one key at
/// once, round after round: one task per key, every caller gets its id.
#[test]
fn idempotency_keys_hold_under_a_race_through_the_pooler() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 15;
    let cluster = Cluster::shared();
    let pooler = pooler(cluster);
    let queue = unique_queue("pooled_keys");
    let barrier = Barrier::new(CLIENTS);
    let results: Vec<Vec<(Enqueued, i32)>> = thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let (pooler, queue, barrier) = (&pooler, &queue, &barrier);
                s.spawn(move || {
                    let mut c = pooler.connect_as(PRODUCER);
                    (0..ROUNDS)
                        .map(|round| {
                            barrier.wait();
                            let mut tx = c.transaction().unwrap();
                            let pid = backend_pid(&mut tx);
                            let opts = EnqueueOpts::default().key(&format!("key-{round}"));
                            let e = enqueue_with(&mut tx, queue, Some(&json!(round)), &opts);
                            tx.commit().unwrap();
                            (e, pid)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut pids_per_round = Vec::new();
    for round in 0..ROUNDS {
        let calls: Vec<&(Enqueued, i32)> = results.iter().map(|r| &r[round]).collect();
        let ids: HashSet<i64> = calls.iter().map(|(e, _)| e.task_id).collect();
        assert_eq!(ids.len(), 1, "round {round}: one task per key, got {ids:?}");
        let created = calls.iter().filter(|(e, _)| !e.deduplicated).count();
        assert_eq!(created, 1, "round {round}: exactly one caller created it");
        pids_per_round.push(calls.iter().map(|(_, p)| *p).collect::<HashSet<_>>().len());
    }
    let mut worker = cluster.connect_as(WORKER);
    assert_eq!(all_tasks(&mut worker, &queue).len(), ROUNDS);
    assert!(
        pids_per_round.iter().all(|&n| n <= POOL_SIZE as usize) && pids_per_round.contains(&2),
        "the racers shared the pool's two server connections: {pids_per_round:?}"
    );
}

/// Two producers and six workers, one login role, over its two server
/// connections: batches and single enqueues, claims of 1 to 3, retries,
/// completions committed with a ledger row. Every task is completed once.
#[test]
fn a_concurrent_drain_through_the_pooler_completes_each_task_once() {
    const PRODUCERS: usize = 2;
    const WORKERS: usize = 6;
    const PER_PRODUCER: usize = 400;
    let cluster = Cluster::shared();
    let pooler = pooler(cluster);
    let queue = unique_queue("pooled_drain");
    let ledger = format!("ledger_{queue}");
    create_ledger(&mut cluster.connect(), &ledger);
    let producers_done = AtomicBool::new(false);
    // (client, backend) of every transaction.
    let served: Mutex<HashSet<(usize, i32)>> = Mutex::new(HashSet::new());
    let bound = Instant::now() + Duration::from_secs(90);
    let started = Instant::now();

    let produced: Vec<i64> = thread::scope(|s| {
        for w in 0..WORKERS {
            let (pooler, queue, ledger, done, served) =
                (&pooler, &queue, &ledger, &producers_done, &served);
            s.spawn(move || drain(pooler, queue, ledger, PRODUCERS + w, done, served, bound));
        }
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (pooler, queue, served) = (&pooler, &queue, &served);
                s.spawn(move || produce(pooler, queue, p, PER_PRODUCER, served))
            })
            .collect();
        let ids = producers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        producers_done.store(true, Ordering::SeqCst);
        ids
    });
    eprintln!(
        "pooled drain of {} tasks took {:?}",
        produced.len(),
        started.elapsed()
    );

    let counts = ledger_counts(&mut cluster.connect(), &ledger);
    assert_eq!(produced.len(), PRODUCERS * PER_PRODUCER);
    for id in &produced {
        assert_eq!(
            counts.get(id),
            Some(&1),
            "task {id}: completions in the ledger"
        );
    }
    assert_eq!(
        counts.len(),
        produced.len(),
        "the ledger holds only enqueued tasks"
    );
    let mut worker = cluster.connect_as(WORKER);
    assert!(all_tasks(&mut worker, &queue).is_empty(), "nothing left");

    let served = served.into_inner().unwrap();
    let backends: HashSet<i32> = served.iter().map(|(_, pid)| *pid).collect();
    assert!(
        backends.len() <= POOL_SIZE as usize,
        "more backends than the pool: {backends:?}"
    );
    assert_eq!(backends.len(), 2, "both server connections served");
    let clients_of = |pid: i32| served.iter().filter(|(_, p)| *p == pid).count();
    let backends_of = |client: usize| served.iter().filter(|(c, _)| *c == client).count();
    assert!(
        backends.iter().all(|&pid| clients_of(pid) > 1),
        "a server connection served one client only: {served:?}"
    );
    assert!(
        (0..PRODUCERS + WORKERS).all(|client| backends_of(client) == 2),
        "a client's transactions stayed on one server connection: {served:?}"
    );
}

fn produce(
    pooler: &PgBouncer,
    queue: &str,
    producer: usize,
    count: usize,
    served: &Mutex<HashSet<(usize, i32)>>,
) -> Vec<i64> {
    let mut c = pooler.connect_as(SERVICE);
    let mut ids = Vec::with_capacity(count);
    for call in 0.. {
        if ids.len() >= count {
            break;
        }
        let mut tx = c.transaction().unwrap();
        served
            .lock()
            .unwrap()
            .insert((producer, backend_pid(&mut tx)));
        let n = ids.len();
        if call % 2 == 0 {
            let payloads: Vec<Value> = (n..(n + 20).min(count)).map(|i| json!(i)).collect();
            ids.extend(enqueue_batch(&mut tx, queue, &payloads));
        } else {
            ids.push(enqueue(&mut tx, queue, &json!(n)).task_id);
        }
        tx.commit().unwrap();
    }
    ids
}

/// Claims and completes until the producers are done and the queue stays
/// empty; fails every 10th task's first attempt (retried at once).
fn drain(
    pooler: &PgBouncer,
    queue: &str,
    ledger: &str,
    client: usize,
    producers_done: &AtomicBool,
    served: &Mutex<HashSet<(usize, i32)>>,
    bound: Instant,
) {
    let mut c = pooler.connect_as(SERVICE);
    let owner = format!("w{client}");
    let retry = FailOpts {
        retry_in: Some("0 seconds".into()),
        dead_letter: None,
    };
    let mut idle_since: Option<Instant> = None;
    loop {
        assert!(Instant::now() < bound, "{owner}: the drain did not finish");
        let mut tx = c.transaction().unwrap();
        served
            .lock()
            .unwrap()
            .insert((client, backend_pid(&mut tx)));
        let tasks = claim(
            &mut tx,
            queue,
            &owner,
            "10 minutes",
            1 + (client % 3) as i32,
        );
        tx.commit().unwrap();
        if tasks.is_empty() {
            if producers_done.load(Ordering::SeqCst)
                && idle_since.get_or_insert_with(Instant::now).elapsed()
                    > Duration::from_millis(800)
            {
                return;
            }
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        idle_since = None;
        for task in tasks {
            let mut tx = c.transaction().unwrap();
            served
                .lock()
                .unwrap()
                .insert((client, backend_pid(&mut tx)));
            let outcome = if task.task_id % 10 == 0 && task.attempts == 1 {
                fail_with(
                    &mut tx,
                    queue,
                    task.task_id,
                    task.fencing_token,
                    "first try",
                    &retry,
                )
            } else {
                write_ledger(&mut tx, ledger, &task);
                complete(&mut tx, queue, task.task_id, task.fencing_token)
            };
            tx.commit().unwrap();
            assert_eq!(outcome, Outcome::Applied, "{owner}: task {}", task.task_id);
        }
    }
}

/// Server connections whose copies of a queue's settings and of a role's
/// grants are warm see what another connection commits: a pause, a new
/// payload limit, a revoked grant, a grant given back.
#[test]
fn warm_server_connections_see_changes_committed_elsewhere() {
    let cluster = Cluster::shared();
    let tenant = unique_queue("pooled_tenant");
    let queue = format!("{tenant}.jobs");
    cluster
        .connect()
        .batch_execute(&format!(
            "CREATE ROLE {tenant} LOGIN IN ROLE aedb_queue_producer, aedb_queue_worker"
        ))
        .unwrap();
    let pooler = PgBouncer::start(cluster, &PoolerConfig::new(POOL_SIZE).user(&tenant));
    let mut admin = cluster.connect_as(ADMIN); // direct: another connection
    let admin_sql = |admin: &mut Client, sql: &str| {
        admin
            .query_typed(sql, &[(&queue, Type::TEXT), (&tenant, Type::TEXT)])
            .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
    };
    for privilege in ["producer", "worker"] {
        admin_sql(
            &mut admin,
            &format!("SELECT aedb_queue.queue_grant($1, $2, '{privilege}')"),
        );
    }
    let mut c = pooler.connect_as(&tenant);
    let enqueue_and_claim = |tx: &mut Transaction<'_>| {
        enqueue(tx, &queue, &json!("x"));
        let task = claim_one(tx, &queue, "w", "1 minute").expect("a task");
        assert_eq!(
            complete(tx, &queue, task.task_id, task.fencing_token),
            Outcome::Applied
        );
    };
    // Warm: settings and rights cached on both server connections.
    let warm = on_every_server(&mut c, 2, enqueue_and_claim);

    admin_sql(&mut admin, "SELECT aedb_queue.queue_pause($1)");
    on_every_server(&mut c, 2, |tx| {
        enqueue(tx, &queue, &json!("while paused"));
        assert!(
            claim_one(tx, &queue, "w", "1 minute").is_none(),
            "paused queue handed out a task"
        );
    });
    admin_sql(&mut admin, "SELECT aedb_queue.queue_resume($1)");
    on_every_server(&mut c, 2, |tx| {
        enqueue(tx, &queue, &json!("resumed"));
        let task = claim_one(tx, &queue, "w", "1 minute").expect("resumed");
        complete(tx, &queue, task.task_id, task.fencing_token);
    });

    admin_sql(
        &mut admin,
        "SELECT max_payload_bytes FROM aedb_queue.queue_configure($1, max_payload_bytes => 64)",
    );
    let big = json!("x".repeat(200));
    on_every_server(&mut c, 2, |tx| {
        let mut sp = tx.transaction().unwrap();
        let err = try_enqueue_with(&mut sp, &queue, Some(&big), &EnqueueOpts::default())
            .expect_err("a payload over the limit configured elsewhere");
        assert_eq!(
            sqlstate(&err).as_deref(),
            Some("54000"),
            "{}",
            describe(&err)
        );
    });

    admin_sql(
        &mut admin,
        "SELECT aedb_queue.queue_revoke($1, $2, 'worker')",
    );
    on_every_server(&mut c, 2, |tx| {
        assert_eq!(
            claim_error(&mut tx.transaction().unwrap(), &queue, "w").as_deref(),
            Some("42501")
        );
    });
    admin_sql(
        &mut admin,
        "SELECT aedb_queue.queue_grant($1, $2, 'worker')",
    );
    let after = on_every_server(&mut c, 2, |tx| {
        assert_eq!(claim_error(tx, &queue, "w"), None, "the grant given back");
    });
    let warm: HashSet<i32> = warm.into_iter().collect();
    assert_eq!(
        warm,
        after.into_iter().collect(),
        "the same two server connections throughout"
    );
}

/// One pooler login that serves several tenants picks the tenant per
/// transaction (`SET LOCAL ROLE`); on the one server connection they share,
/// each transaction gets its own tenant's confinement, whichever tenant the
/// backend served before.
#[test]
fn tenants_chosen_per_transaction_share_a_server_connection() {
    let cluster = Cluster::shared();
    let login = unique_queue("pool_login");
    let (a, b) = (format!("{login}_a"), format!("{login}_b"));
    let (qa, qb) = (format!("{a}.q"), format!("{b}.q"));
    cluster
        .connect()
        .batch_execute(&format!(
            "CREATE ROLE {a} IN ROLE aedb_queue_producer, aedb_queue_worker;
             CREATE ROLE {b} IN ROLE aedb_queue_producer, aedb_queue_worker;
             CREATE ROLE {login} LOGIN IN ROLE {a}, {b};"
        ))
        .unwrap();
    let mut admin = cluster.connect_as(ADMIN);
    for (role, queue) in [(&a, &qa), (&b, &qb)] {
        for privilege in ["producer", "worker"] {
            admin
                .query_typed(
                    "SELECT aedb_queue.queue_grant($1, $2, $3)",
                    &[
                        (queue, Type::TEXT),
                        (role, Type::TEXT),
                        (&privilege, Type::TEXT),
                    ],
                )
                .unwrap();
        }
    }
    let config = PoolerConfig {
        pool_size: 1,
        users: vec![login.clone()],
    };
    let pooler = PgBouncer::start(cluster, &config);
    let mut clients = [pooler.connect_as(&login), pooler.connect_as(&login)];
    let mut pids = BTreeSet::new();
    for round in 0..6 {
        let client = &mut clients[round % 2];
        let (role, own, other) = if round % 3 == 0 {
            (&a, &qa, &qb)
        } else {
            (&b, &qb, &qa)
        };
        let mut tx = client.transaction().unwrap();
        tx.batch_execute(&format!("SET LOCAL ROLE {role}")).unwrap();
        pids.insert(backend_pid(&mut tx));
        enqueue(&mut tx, own, &json!(round));
        let task = claim_one(&mut tx, own, "w", "1 minute").expect("own queue");
        assert_eq!(
            complete(&mut tx, own, task.task_id, task.fencing_token),
            Outcome::Applied
        );
        let err = claim_error(&mut tx.transaction().unwrap(), other, "w");
        assert_eq!(
            err.as_deref(),
            Some("42501"),
            "round {round}: {role} claimed from {other}"
        );
        tx.commit().unwrap();
    }
    assert_eq!(
        pids.len(),
        1,
        "one server connection served both clients: {pids:?}"
    );
    // SET LOCAL ended with each transaction: the backend is the login again.
    let user: String = clients[0]
        .query_typed_one("SELECT current_user::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(user, login);
}

/// LISTEN needs a session: the worker listens on a direct connection and
/// works through the pooler; an enqueue committed through the pooler wakes
/// it (a notification naming the queue), so it need not wait for its poll.
/// How soon is not asserted: NOTIFY is sent at commit or never.
#[test]
fn listen_on_a_direct_session_wakes_a_worker_that_works_through_the_pooler() {
    use postgres::fallible_iterator::FallibleIterator;
    /// Generous: only a missing notification misses it.
    const WAKE_BOUND: Duration = Duration::from_secs(60);
    let cluster = Cluster::shared();
    let pooler = pooler(cluster);
    let queue = unique_queue("pooled_wake");
    cluster
        .connect_as(ADMIN)
        .query_typed(
            "SELECT aedb_queue.queue_configure($1::text, notify => true)",
            &[(&queue, Type::TEXT)],
        )
        .unwrap();
    let mut listener = cluster.connect_as(WORKER);
    listener.batch_execute("LISTEN aedb_queue").unwrap();
    let mut work = pooler.connect_as(WORKER);
    assert!(claim_one(&mut work, &queue, "w", "1 minute").is_none());

    let producer = thread::spawn({
        let dsn = pooler.dsn(PRODUCER);
        let queue = queue.clone();
        move || {
            thread::sleep(Duration::from_millis(300));
            let mut c = Client::connect(&dsn, postgres::NoTls).unwrap();
            enqueue(&mut c, &queue, &json!("wake up")).task_id
        }
    });
    let waiting = Instant::now();
    let mut notifications = listener.notifications();
    let mut incoming = notifications.timeout_iter(WAKE_BOUND);
    let woken = loop {
        match incoming.next().expect("notifications") {
            Some(n) if n.payload() == queue => break Some(waiting.elapsed()),
            Some(_) => continue, // other tests' queues
            None => break None,
        }
    };
    let id = producer.join().unwrap();
    let woken = woken.expect("no wake-up");
    eprintln!("woken {woken:?} after starting to wait (the enqueue came after 300 ms)");
    let task = claim_one(&mut work, &queue, "w", "1 minute").expect("the task that woke it");
    assert_eq!(task.task_id, id);
    assert_eq!(
        complete(&mut work, &queue, id, task.fencing_token),
        Outcome::Applied
    );
}
