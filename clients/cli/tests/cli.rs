//! The built `aedb-queue` against a real cluster (the harness's, shared by
//! the tests of this file, each on queues of its own). The CLI connects as
//! app_admin (a member of aedb_queue_admin) through the PG* variables; set-up
//! runs as the application roles, assertions read the database.

mod support;

use std::collections::HashSet;

use aedb_queue_itests::*;
use support::*;

fn configure(admin: &mut Client, sql: &str, queue: &str) {
    admin
        .query(sql, &[&queue])
        .unwrap_or_else(|e| panic!("{sql}: {}", describe(&e)));
}

// ---------------------------------------------------------------------------
// stats
// ---------------------------------------------------------------------------

#[test]
fn stats_shows_the_counts_of_a_queue_as_a_table_and_as_json() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_stats");
    let mut admin = cluster.connect_as(ADMIN);
    configure(
        &mut admin,
        "SELECT keep_completed FROM aedb_queue.queue_configure($1::text, keep_completed => '1 hour')",
        &q,
    );
    let mut producer = cluster.connect_as(PRODUCER);
    for i in 0..4 {
        enqueue(&mut producer, &q, &json!({ "i": i }));
    }
    let mut worker = cluster.connect_as(WORKER);
    claim_one(&mut worker, &q, "w1", "5 minutes").expect("a task to claim");
    let done = claim_one(&mut worker, &q, "w1", "5 minutes").expect("a task to claim");

    let one = cli(cluster, &["stats", &q, "--json"]).ok().json();
    assert_eq!(one["queue"], json!(q));
    assert_eq!(one["ready"], json!(2));
    assert_eq!(one["in_flight"], json!(2));
    assert_eq!(one["dead"], json!(0));
    assert_eq!(one["paused"], json!(false));

    // Every queue: an array that has this one, with the same counts.
    let all = cli(cluster, &["stats", "--json"]).ok().json();
    let row = all
        .as_array()
        .expect("an array of queues")
        .iter()
        .find(|r| r["queue"] == json!(q))
        .expect("the queue in stats of every queue");
    assert_eq!(row["ready"], json!(2));

    // The table: the queue's row, under the view's column names.
    let table = cli(cluster, &["stats", &q]).ok().stdout;
    assert_eq!(table_cell(&table, &q, "ready"), "2", "{table}");
    assert_eq!(table_cell(&table, &q, "in_flight"), "2", "{table}");
    assert_eq!(table_cell(&table, &q, "paused"), "no", "{table}");
    // Columns of features the queue does not use (kept completed tasks,
    // dependencies, flow control) are left out of the table...
    assert!(
        !cells(table.lines().nth(1).unwrap()).contains(&"kept".to_string()),
        "{table}"
    );
    assert!(!table.contains("waiting"), "{table}");
    // ...and shown once it does.
    assert_eq!(
        complete(&mut worker, &q, done.task_id, done.fencing_token),
        Outcome::Applied
    );
    let table = cli(cluster, &["stats", &q]).ok().stdout;
    assert_eq!(table_cell(&table, &q, "kept"), "1", "{table}");
    assert_eq!(
        cli(cluster, &["stats", &q, "--json"]).ok().json()["completed_kept"],
        json!(1)
    );

    // A queue that does not exist: an error, exit 1.
    let missing = cli(cluster, &["stats", &unique_queue("cli_nowhere")]);
    assert_eq!(missing.code, 1, "{missing:#?}");
    assert!(missing.stderr.contains("no queue"), "{missing:#?}");
}

#[test]
fn stats_watch_refreshes_until_it_is_stopped() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_watch");
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!(1));

    let mut watch = spawn(cluster, &["stats", &q, "--watch", "0.2", "--json"]);
    let first = watch.json_line("with the queue's first count", |v| v["queue"] == json!(q));
    assert_eq!(first["ready"], json!(1));
    enqueue(&mut producer, &q, &json!(2));
    // A later refresh sees the second task.
    watch.json_line("with ready 2", |v| v["ready"] == json!(2));
    drop(watch);

    // Without --json, each refresh prints a table with the queue's row.
    let mut watch = spawn(cluster, &["stats", &q, "--watch", "0.2"]);
    watch.stdout_line("with Ctrl-C in the title", |l| l.contains("Ctrl-C to stop"));
    let header = cells(&watch.stdout_line("with the headers", |l| {
        cells(l).iter().any(|c| c == "ready")
    }));
    let row = cells(&watch.stdout_line("with the queue's row", |l| l.contains(&q)));
    let ready = header.iter().position(|h| h == "ready").unwrap();
    assert_eq!(row[ready], "2", "ready column of {row:?} under {header:?}");
}

// ---------------------------------------------------------------------------
// list, show
// ---------------------------------------------------------------------------

#[test]
fn list_shows_a_queues_tasks_by_state_and_up_to_the_limit() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_list");
    let mut producer = cluster.connect_as(PRODUCER);
    let ids = enqueue_batch(
        &mut producer,
        &q,
        &(0..5).map(|i| json!({ "i": i })).collect::<Vec<_>>(),
    );
    let mut worker = cluster.connect_as(WORKER);
    let claimed: HashSet<i64> = claim(&mut worker, &q, "w1", "5 minutes", 2)
        .iter()
        .map(|c| c.task_id)
        .collect();
    assert_eq!(claimed.len(), 2);

    let ready = cli(cluster, &["list", &q, "--state", "ready", "--json"])
        .ok()
        .json_lines();
    let ready_ids: Vec<i64> = ready
        .iter()
        .map(|t| t["task_id"].as_i64().unwrap())
        .collect();
    let expected: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| !claimed.contains(id))
        .collect();
    assert_eq!(ready_ids, expected, "ready tasks in service order");
    assert!(ready
        .iter()
        .all(|t| t["state"] == json!("ready") && t["queue"] == json!(q)));
    // Full rows: the payload as JSON, not text.
    assert!(
        ready.iter().all(|t| t["payload"]["i"].is_number()),
        "{ready:?}"
    );

    let in_flight = cli(cluster, &["list", &q, "--state", "in_flight", "--json"])
        .ok()
        .json_lines();
    assert_eq!(in_flight.len(), 2);
    assert!(in_flight.iter().all(|t| t["owner_id"] == json!("w1")));

    let every = cli(cluster, &["list", &q, "--json"]).ok().json_lines();
    assert_eq!(every.len(), 5);
    let limited = cli(
        cluster,
        &["list", &q, "--state", "ready", "--limit", "2", "--json"],
    )
    .ok()
    .json_lines();
    assert_eq!(limited.len(), 2);

    let table = cli(cluster, &["list", &q, "--state", "ready"]).ok().stdout;
    let first = expected[0].to_string();
    assert_eq!(table_cell(&table, &first, "state"), "ready", "{table}");
    assert_eq!(table_cell(&table, &first, "attempts"), "0/5", "{table}");

    // The server checks the limit: 22023, exit 1.
    let bad = cli(cluster, &["list", &q, "--limit", "0"]);
    assert_eq!(bad.code, 1, "{bad:#?}");
    assert!(bad.stderr.contains("22023"), "{bad:#?}");
}

#[test]
fn show_prints_every_field_of_a_task_with_the_payload_pretty_printed() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_show");
    let mut producer = cluster.connect_as(PRODUCER);
    let payload = json!({ "to": "ada@example.com", "items": [1, 2] });
    let task = enqueue_with(
        &mut producer,
        &q,
        Some(&payload),
        &EnqueueOpts::default().priority(7).key("show-key"),
    )
    .task_id;
    let id = task.to_string();

    let doc = cli(cluster, &["show", &q, &id, "--json"]).ok().json();
    assert_eq!(doc["task_id"], json!(task));
    assert_eq!(doc["queue"], json!(q));
    assert_eq!(doc["state"], json!("ready"));
    assert_eq!(doc["priority"], json!(7));
    assert_eq!(doc["payload"], payload);
    assert_eq!(doc["idempotency_key"], json!("show-key"));
    let fields: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for f in [
        "task_id",
        "queue",
        "state",
        "not_before",
        "priority",
        "attempts",
        "max_attempts",
        "owner_id",
        "fencing_token",
        "lease_deadline",
        "payload",
        "progress",
        "last_error",
        "idempotency_key",
        "backoff_base",
        "backoff_max",
        "created_at",
        "updated_at",
        "result",
        "completed_at",
    ] {
        assert!(fields.contains(&f), "field {f} missing from {doc}");
    }
    // Timestamps are ISO 8601.
    assert!(doc["created_at"].as_str().unwrap().contains('T'), "{doc}");

    let human = cli(cluster, &["show", &q, &id]).ok().stdout;
    assert!(
        human.contains(r#""to": "ada@example.com""#),
        "payload not pretty-printed:\n{human}"
    );
    assert!(
        human.lines().any(|l| l.contains(r#""items": ["#)),
        "{human}"
    );
    assert!(human.contains("show-key"), "{human}");
    assert_eq!(table_cell(&human, "priority", "value"), "7", "{human}");

    let missing = cli(cluster, &["show", &q, "999999999"]);
    assert_eq!(missing.code, 1, "{missing:#?}");
    assert!(missing.stderr.contains("not found"), "{missing:#?}");
}

// ---------------------------------------------------------------------------
// workflows: show's steps and parked state, retry-from-step
// ---------------------------------------------------------------------------

/// A workflow step as a worker records it (`queue_step_record`).
fn record_step(worker: &mut Client, q: &str, task: i64, token: i64, step: &str, result: &Value) {
    let outcome: String = worker
        .query_one(
            "SELECT aedb_queue.queue_step_record($1::text, $2::int8, $3::int8, $4::text, $5::jsonb)::text",
            &[&q, &task, &token, &step, result],
        )
        .unwrap_or_else(|e| panic!("queue_step_record: {}", describe(&e)))
        .get(0);
    assert_eq!(outcome, "applied");
}

/// `queue_await_event(..., timeout => '1 hour')`: (waiting, payload).
fn await_event(
    worker: &mut Client,
    q: &str,
    task: i64,
    token: i64,
    step: &str,
    key: &str,
) -> (bool, Option<Value>) {
    let row = worker
        .query_one(
            "SELECT waiting, payload FROM aedb_queue.queue_await_event($1::text, $2::int8, $3::int8, \
             $4::text, $5::text, timeout => '1 hour')",
            &[&q, &task, &token, &step, &key],
        )
        .unwrap_or_else(|e| panic!("queue_await_event: {}", describe(&e)));
    (row.get(0), row.get(1))
}

/// The task's steps in the database, by name.
fn step_names(su: &mut Client, q: &str, task: i64) -> Vec<String> {
    su.query(
        "SELECT step FROM aedb_queue.queue_steps($1::text, $2::int8)",
        &[&q, &task],
    )
    .expect("queue_steps")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The part of `show`'s output after its field table: the steps and the
/// parked line.
fn after_fields(out: &str) -> &str {
    out.split_once("\nsteps:\n").map_or("", |(_, rest)| rest)
}

#[test]
fn show_lists_a_workflows_steps_and_what_it_is_parked_on() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_wf_show");
    let mut producer = cluster.connect_as(PRODUCER);
    let task = enqueue(&mut producer, &q, &json!({ "order": 42 })).task_id;
    let id = task.to_string();
    let mut worker = cluster.connect_as(WORKER);
    let first = claim_one(&mut worker, &q, "w1", "5 minutes").unwrap();
    assert_eq!(first.task_id, task);

    // Not a workflow yet: no steps, not parked.
    let doc = cli(cluster, &["show", &q, &id, "--json"]).ok().json();
    assert_eq!(doc["steps"], json!([]), "{doc}");
    assert_eq!(doc["waits"], json!([]), "{doc}");
    assert_eq!(doc["parked"], Value::Null, "{doc}");
    assert!(!cli(cluster, &["show", &q, &id])
        .ok()
        .stdout
        .contains("steps:"));

    // Step 1 recorded, step 2 waits for an event: parked until its deadline.
    let long = "x".repeat(200);
    record_step(
        &mut worker,
        &q,
        task,
        first.fencing_token,
        "charge",
        &json!({ "receipt": "r-1", "zz_padding": long }),
    );
    assert_eq!(
        await_event(
            &mut worker,
            &q,
            task,
            first.fencing_token,
            "packed",
            "order-42/packed"
        ),
        (true, None)
    );
    let doc = cli(cluster, &["show", &q, &id, "--json"]).ok().json();
    assert_eq!(doc["state"], json!("scheduled"));
    let steps = doc["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{doc}");
    assert_eq!(steps[0]["step"], json!("charge"));
    assert_eq!(steps[0]["attempt"], json!(1));
    assert_eq!(steps[0]["fencing_token"], json!(first.fencing_token));
    assert_eq!(
        steps[0]["result"]["receipt"],
        json!("r-1"),
        "results whole in JSON"
    );
    assert_eq!(steps[0]["result"]["zz_padding"], json!(long));
    assert!(
        steps[0]["recorded_at"].as_str().unwrap().contains('T'),
        "{doc}"
    );
    assert!(
        steps[0].get("sleep_until").is_none(),
        "only queue_steps' columns: {doc}"
    );
    assert_eq!(doc["waits"][0]["key"], json!("order-42/packed"), "{doc}");
    assert_eq!(doc["waits"][0]["step"], json!("packed"));
    let parked = &doc["parked"];
    assert_eq!(parked["kind"], json!("event"), "{doc}");
    assert_eq!(parked["key"], json!("order-42/packed"));
    assert_eq!(parked["step"], json!("packed"));
    assert_eq!(parked["until"], doc["waits"][0]["deadline"]);
    assert_eq!(
        parked["until"], doc["not_before"],
        "parked until its deadline"
    );

    let human = cli(cluster, &["show", &q, &id]).ok().stdout;
    let rest = after_fields(&human);
    assert_eq!(table_cell(rest, "charge", "attempt"), "1", "{human}");
    let result = table_cell(rest, "charge", "result");
    assert!(
        result.starts_with(r#"{"#) && result.contains("r-1") && result.ends_with('…'),
        "a short result: {human}"
    );
    assert!(result.chars().count() <= 60, "{result}");
    assert!(
        table_cell(rest, "charge", "recorded_at").starts_with("20"),
        "{human}"
    );
    assert!(
        rest.lines().any(
            |l| l.starts_with("parked: waits for event order-42/packed until 20")
                && l.ends_with("(step packed)")
        ),
        "{human}"
    );

    // The event comes; the handler runs again and sleeps a day: parked on the sleep.
    let emitted: bool = producer
        .query_one(
            "SELECT aedb_queue.queue_emit($1::text, 'order-42/packed', '{\"boxes\": 2}')",
            &[&q],
        )
        .unwrap()
        .get(0);
    assert!(emitted);
    let human = cli(cluster, &["show", &q, &id]).ok().stdout;
    assert!(
        human.contains("waits for event order-42/packed (step packed, deadline"),
        "{human}"
    );
    assert!(human.contains("the task is ready"), "{human}");
    assert!(!human.contains("parked:"), "ready, not parked: {human}");
    let second = claim_one(&mut worker, &q, "w2", "5 minutes").unwrap();
    assert_eq!(
        await_event(
            &mut worker,
            &q,
            task,
            second.fencing_token,
            "packed",
            "order-42/packed"
        ),
        (false, Some(json!({ "boxes": 2 })))
    );
    let waiting: bool = worker
        .query_one(
            "SELECT waiting FROM aedb_queue.queue_sleep($1::text, $2::int8, $3::int8, 'cool-off', duration => '1 day')",
            &[&q, &task, &second.fencing_token],
        )
        .unwrap()
        .get(0);
    assert!(waiting);
    let doc = cli(cluster, &["show", &q, &id, "--json"]).ok().json();
    let names: Vec<&str> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["charge", "packed", "cool-off"], "{doc}");
    assert_eq!(
        doc["steps"][1]["result"],
        json!({ "payload": { "boxes": 2 }, "timed_out": false })
    );
    assert_eq!(
        doc["steps"][1]["attempt"],
        json!(1),
        "the park did not count the attempt"
    );
    assert_eq!(doc["waits"], json!([]), "{doc}");
    assert_eq!(doc["parked"]["kind"], json!("sleep"), "{doc}");
    assert_eq!(doc["parked"]["step"], json!("cool-off"));
    assert_eq!(doc["parked"]["until"], doc["not_before"]);
    assert!(doc["parked"].get("key").is_none(), "{doc}");
    let human = cli(cluster, &["show", &q, &id]).ok().stdout;
    assert!(
        after_fields(&human)
            .lines()
            .any(|l| l.starts_with("parked: sleeps until 20") && l.ends_with("(step cool-off)")),
        "{human}"
    );

    // A task scheduled by its delay is not parked.
    let later = enqueue_with(
        &mut producer,
        &q,
        Some(&json!(1)),
        &EnqueueOpts::default().delay("1 hour"),
    )
    .task_id;
    let doc = cli(cluster, &["show", &q, &later.to_string(), "--json"])
        .ok()
        .json();
    assert_eq!(doc["state"], json!("scheduled"));
    assert_eq!(doc["parked"], Value::Null, "{doc}");
}

#[test]
fn retry_from_step_drops_that_step_and_the_later_ones_and_makes_the_task_due() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_wf_retry");
    let mut producer = cluster.connect_as(PRODUCER);
    let task = enqueue(&mut producer, &q, &json!({ "order": 7 })).task_id;
    let id = task.to_string();
    let mut worker = cluster.connect_as(WORKER);
    let c = claim_one(&mut worker, &q, "w1", "5 minutes").unwrap();
    for step in ["charge", "reserve", "label"] {
        record_step(
            &mut worker,
            &q,
            task,
            c.fencing_token,
            step,
            &json!({ "done": step }),
        );
    }
    let mut su = cluster.connect();

    // In flight: its worker holds it, refused (55000), nothing dropped.
    let refused = cli(cluster, &["retry-from-step", &q, &id, "reserve"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(refused.stderr.contains("error: [55000]"), "{refused:#?}");
    assert_eq!(
        step_names(&mut su, &q, task),
        ["charge", "reserve", "label"]
    );

    // Parked (an event wait), then retried from "reserve".
    assert!(
        await_event(
            &mut worker,
            &q,
            task,
            c.fencing_token,
            "packed",
            "order-7/packed"
        )
        .0
    );
    assert_eq!(get(&mut worker, &q, task).unwrap().state, "scheduled");
    let run = cli(cluster, &["retry-from-step", &q, &id, "reserve"]).ok();
    assert!(
        run.stdout
            .contains(r#"runs again from step "reserve"; dropped 2 step(s): "reserve", "label""#),
        "{run:#?}"
    );
    assert_eq!(step_names(&mut su, &q, task), ["charge"]);
    assert_eq!(get(&mut worker, &q, task).unwrap().state, "ready");
    let doc = cli(cluster, &["show", &q, &id, "--json"]).ok().json();
    assert_eq!(doc["waits"], json!([]), "the waits are dropped too: {doc}");
    assert_eq!(doc["parked"], Value::Null);

    // --json; then a step the task has not recorded (any more) is 22023.
    let doc = cli(cluster, &["retry-from-step", &q, &id, "charge", "--json"])
        .ok()
        .json();
    assert_eq!(
        doc,
        json!({ "queue": q, "task_id": task, "step": "charge", "dropped": ["charge"] })
    );
    assert!(step_names(&mut su, &q, task).is_empty());
    let unknown = cli(cluster, &["retry-from-step", &q, &id, "charge"]);
    assert_eq!(unknown.code, 1, "{unknown:#?}");
    assert!(unknown.stderr.contains("error: [22023]"), "{unknown:#?}");
    assert!(unknown.stderr.contains("step"), "{unknown:#?}");
    let no_task = cli(cluster, &["retry-from-step", &q, "999999999", "charge"]);
    assert_eq!(no_task.code, 1, "{no_task:#?}");
    assert!(no_task.stderr.contains("error: [22023]"), "{no_task:#?}");

    // The arguments are required: a usage error.
    assert_eq!(cli(cluster, &["retry-from-step", &q, &id]).code, 2);
}

// ---------------------------------------------------------------------------
// retry-dead, purge, pause, resume
// ---------------------------------------------------------------------------

#[test]
fn retry_dead_moves_dead_tasks_back_one_by_max_or_all() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_retry");
    let mut admin = cluster.connect_as(ADMIN);
    configure(
        &mut admin,
        "SELECT max_attempts FROM aedb_queue.queue_configure($1::text, max_attempts => 1)",
        &q,
    );
    // 1,200 dead tasks (more than one retry chunk): their only attempt's
    // lease expires and the reaper dead-letters them.
    let mut producer = cluster.connect_as(PRODUCER);
    let ids = enqueue_batch(
        &mut producer,
        &q,
        &(0..1200).map(|i| json!(i)).collect::<Vec<_>>(),
    );
    let mut worker = cluster.connect_as(WORKER);
    assert_eq!(
        claim(&mut worker, &q, "w1", "10 milliseconds", 1200).len(),
        1200
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut su = cluster.connect();
    for _ in 0..20 {
        if task_count(&mut su, &q, Some("dead")) == 1200 {
            break;
        }
        reap(&mut admin, Some(&q));
    }
    assert_eq!(task_count(&mut su, &q, Some("dead")), 1200);

    let one = cli(cluster, &["retry-dead", &q, "--task", &ids[0].to_string()]).ok();
    assert!(one.stdout.contains("retried 1 "), "{one:#?}");
    assert_eq!(get(&mut worker, &q, ids[0]).unwrap().state, "ready");

    let ten = cli(cluster, &["retry-dead", &q, "--max", "10", "--json"])
        .ok()
        .json();
    assert_eq!(ten["retried"], json!(10));
    assert_eq!(task_count(&mut su, &q, Some("dead")), 1189);

    let rest = cli(cluster, &["retry-dead", &q]).ok();
    assert!(rest.stdout.contains("retried 1189 "), "{rest:#?}");
    assert_eq!(task_count(&mut su, &q, Some("dead")), 0);
    assert_eq!(task_count(&mut su, &q, Some("ready")), 1200);

    let none = cli(cluster, &["retry-dead", &q, "--json"]).ok().json();
    assert_eq!(none["retried"], json!(0));

    // --max is checked by clap: a usage error.
    assert_eq!(cli(cluster, &["retry-dead", &q, "--max", "0"]).code, 2);
}

#[test]
fn purge_asks_first_and_deletes_only_when_confirmed() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_purge");
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue_batch(
        &mut producer,
        &q,
        &(0..4).map(|i| json!(i)).collect::<Vec<_>>(),
    );
    let mut su = cluster.connect();

    let declined = cli_with_input(cluster, &["purge", &q, "--state", "ready"], "n\n");
    assert_eq!(declined.code, 1, "{declined:#?}");
    assert!(declined.stderr.contains("Delete 4 ready"), "{declined:#?}");
    assert!(declined.stderr.contains("cancelled"), "{declined:#?}");
    assert_eq!(task_count(&mut su, &q, None), 4);

    // No answer at all (stdin closed) is a no.
    let eof = cli_with_input(cluster, &["purge", &q, "--state", "ready"], "");
    assert_eq!(eof.code, 1, "{eof:#?}");
    assert_eq!(task_count(&mut su, &q, None), 4);

    let confirmed = cli_with_input(cluster, &["purge", &q, "--state", "ready"], "y\n").ok();
    assert!(
        confirmed.stdout.contains("purged 4 ready"),
        "{confirmed:#?}"
    );
    assert_eq!(task_count(&mut su, &q, None), 0);

    // In-flight tasks: the server refuses without --force.
    enqueue(&mut producer, &q, &json!("leased"));
    let mut worker = cluster.connect_as(WORKER);
    claim_one(&mut worker, &q, "w1", "5 minutes").unwrap();
    let refused = cli(cluster, &["purge", &q, "--state", "in_flight", "--yes"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(refused.stderr.contains("[22023]"), "{refused:#?}");
    assert!(refused.stderr.contains("force"), "{refused:#?}");
    assert_eq!(task_count(&mut su, &q, Some("in_flight")), 1);

    let forced = cli(
        cluster,
        &[
            "purge",
            &q,
            "--state",
            "in_flight",
            "--force",
            "--yes",
            "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(forced["purged"], json!(1));
    assert_eq!(forced["state"], json!("in_flight"));
    assert_eq!(task_count(&mut su, &q, None), 0);

    // --state is required: a usage error.
    assert_eq!(cli(cluster, &["purge", &q, "--yes"]).code, 2);
}

#[test]
fn pause_and_resume_stop_and_restart_handing_out_tasks() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_pause");
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!("job"));
    let mut admin = cluster.connect_as(ADMIN);
    let mut worker = cluster.connect_as(WORKER);

    let paused_run = cli(cluster, &["pause", &q]).ok();
    assert!(paused_run.stdout.contains("paused"), "{paused_run:#?}");
    assert!(paused(&mut admin, &q));
    assert!(
        claim_one(&mut worker, &q, "w1", "5 minutes").is_none(),
        "a paused queue handed out a task"
    );
    let stats = cli(cluster, &["stats", &q, "--json"]).ok().json();
    assert_eq!(stats["paused"], json!(true));

    let again = cli(cluster, &["pause", &q, "--json"]).ok().json();
    assert_eq!(
        again,
        json!({ "queue": q, "paused": true, "changed": false })
    );

    let resumed = cli(cluster, &["resume", &q, "--json"]).ok().json();
    assert_eq!(resumed["changed"], json!(true));
    assert!(!paused(&mut admin, &q));
    assert!(claim_one(&mut worker, &q, "w1", "5 minutes").is_some());
    let not_paused = cli(cluster, &["resume", &q]).ok();
    assert!(
        not_paused.stdout.contains("was not paused"),
        "{not_paused:#?}"
    );
}

/// Whether the extension has a row for the queue, read as the superuser.
fn queue_row(su: &mut Client, queue: &str) -> Option<bool> {
    su.query_opt(
        "SELECT paused FROM aedb_queue.queue WHERE name = $1::text",
        &[&queue],
    )
    .expect("read aedb_queue.queue")
    .map(|r| r.get(0))
}

#[test]
fn pause_and_resume_of_an_unknown_queue_fail_and_create_nothing_without_create() {
    let cluster = Cluster::shared();
    let mut su = cluster.connect();
    let typo = unique_queue("cli_typo");
    for verb in ["pause", "resume"] {
        for json in [false, true] {
            let mut args = vec![verb, typo.as_str()];
            if json {
                args.push("--json");
            }
            let run = cli(cluster, &args);
            assert_eq!(run.code, 1, "{args:?}: {run:#?}");
            assert!(run.stdout.is_empty(), "{args:?}: {run:#?}");
            assert!(
                run.stderr.contains(&format!("no queue {typo:?}"))
                    && run.stderr.contains("--create"),
                "{args:?}: {run:#?}"
            );
        }
    }
    assert_eq!(queue_row(&mut su, &typo), None, "a typo created a queue");
    let stats = cli(cluster, &["stats", "--json"]).ok().json();
    assert!(
        !stats
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["queue"] == json!(typo)),
        "the typo shows in stats: {stats}"
    );

    // --create: paused before its first task, which then waits.
    let q = unique_queue("cli_precreate");
    let run = cli(cluster, &["pause", &q, "--create", "--json"])
        .ok()
        .json();
    assert_eq!(run, json!({ "queue": q, "paused": true, "changed": true }));
    assert_eq!(queue_row(&mut su, &q), Some(true));
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!("early"));
    let mut worker = cluster.connect_as(WORKER);
    assert!(claim_one(&mut worker, &q, "w1", "5 minutes").is_none());
    // Known now: resume needs no --create.
    cli(cluster, &["resume", &q]).ok();
    assert_eq!(queue_row(&mut su, &q), Some(false));
    let r = unique_queue("cli_precreate_running");
    cli(cluster, &["resume", &r, "--create"]).ok();
    assert_eq!(queue_row(&mut su, &r), Some(false));
}

// ---------------------------------------------------------------------------
// enqueue
// ---------------------------------------------------------------------------

/// Seconds from now until the task is due, read as the superuser.
fn due_in(su: &mut Client, task_id: i64) -> f64 {
    su.query_one(
        "SELECT extract(epoch FROM not_before - now())::float8 \
         FROM aedb_queue.task WHERE task_id = $1",
        &[&task_id],
    )
    .expect("the task")
    .get(0)
}

#[test]
fn enqueue_delay_takes_durations_as_in_sql_and_refuses_bad_ones_naming_the_flag() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_delay");
    let mut su = cluster.connect();
    // (text, seconds): SQL's interval input, a plain number is seconds.
    let cases = [
        ("1h", 3600.0),
        ("90 seconds", 90.0),
        ("1h30m", 5400.0),
        ("2 days", 172_800.0),
        ("PT1H", 3600.0),
        ("600", 600.0),
        ("1.5", 1.5),
    ];
    for (text, secs) in cases {
        let run = cli(cluster, &["enqueue", &q, "{}", "--delay", text]).ok();
        let id: i64 = run.stdout.trim().parse().unwrap();
        let due = due_in(&mut su, id);
        // Due at enqueue time + the delay; the test may run a while after.
        assert!(due <= secs && due > secs - 60.0, "{text}: due in {due} s");
    }
    // The file form too.
    let path = temp_file(&format!("{q}.jsonl"));
    std::fs::write(&path, "{}\n{}\n").unwrap();
    let ids: Vec<i64> = cli(
        cluster,
        &[
            "enqueue",
            &q,
            "--file",
            path.to_str().unwrap(),
            "--delay",
            "3 hours",
        ],
    )
    .ok()
    .stdout
    .lines()
    .map(|l| l.parse().unwrap())
    .collect();
    assert_eq!(ids.len(), 2);
    for id in ids {
        let due = due_in(&mut su, id);
        assert!(due <= 10_800.0 && due > 10_740.0, "due in {due} s");
    }

    // A bad duration: a usage error naming the flag, nothing enqueued.
    let before = task_count(&mut su, &q, None);
    for bad in ["1x", "an hour", "1 fortnight", ""] {
        for file in [false, true] {
            let mut args = vec!["enqueue", q.as_str()];
            if file {
                args.extend(["--file", path.to_str().unwrap()]);
            }
            args.extend(["--delay", bad]);
            let run = cli(cluster, &args);
            assert_eq!(run.code, 2, "{args:?}: {run:#?}");
            assert!(
                run.stderr
                    .contains(&format!("invalid value '{bad}' for '--delay <DURATION>'")),
                "{args:?}: {run:#?}"
            );
            assert!(!run.stderr.contains("[22007]"), "{run:#?}");
        }
    }
    assert_eq!(task_count(&mut su, &q, None), before);
}

#[test]
fn watch_and_interval_take_durations_as_in_sql() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_refresh");
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!(1));

    let mut watch = spawn(cluster, &["stats", &q, "--watch", "200ms", "--json"]);
    watch.json_line("with ready 1", |v| v["ready"] == json!(1));
    enqueue(&mut producer, &q, &json!(2));
    watch.json_line("with ready 2", |v| v["ready"] == json!(2));
    drop(watch);

    let mut tail = spawn(
        cluster,
        &["tail", &q, "--interval", "0.2 seconds", "--json"],
    );
    tail.json_line("with the first counts", |v| v["queue"] == json!(q));
    drop(tail);

    for (flag, args) in [
        ("--watch", vec!["stats", q.as_str(), "--watch"]),
        ("--interval", vec!["tail", q.as_str(), "--interval"]),
    ] {
        // Bad syntax, and out of 10 ms to 1 day: usage errors naming the flag.
        for bad in ["soon", "0", "2 days", "0.001", ""] {
            let mut args = args.clone();
            args.push(bad);
            let run = cli(cluster, &args);
            assert_eq!(run.code, 2, "{args:?}: {run:#?}");
            assert!(
                run.stderr
                    .contains(&format!("invalid value '{bad}' for '{flag} <DURATION>'")),
                "{args:?}: {run:#?}"
            );
        }
    }
}

#[test]
fn enqueue_prints_the_task_id_and_applies_the_options() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_enqueue");
    let mut su = cluster.connect();

    let run = cli(
        cluster,
        &[
            "enqueue",
            &q,
            r#"{"a": 1}"#,
            "--priority",
            "5",
            "--delay",
            "3600",
            "--idempotency-key",
            "k1",
        ],
    )
    .ok();
    let id: i64 = run
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not an id: {run:#?}"));
    let row = su
        .query_one(
            "SELECT state::text, priority, payload, idempotency_key, \
                    extract(epoch FROM not_before - now())::float8 \
             FROM aedb_queue.task WHERE task_id = $1",
            &[&id],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "scheduled");
    assert_eq!(row.get::<_, i64>(1), 5);
    assert_eq!(row.get::<_, Value>(2), json!({ "a": 1 }));
    assert_eq!(row.get::<_, Option<String>>(3).as_deref(), Some("k1"));
    let due_in: f64 = row.get(4);
    assert!((3500.0..=3600.5).contains(&due_in), "due in {due_in} s");

    // The same key again: the first task, deduplicated.
    let dup = cli(
        cluster,
        &[
            "enqueue",
            &q,
            r#"{"a": 2}"#,
            "--idempotency-key",
            "k1",
            "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(dup, json!({ "task_id": id, "deduplicated": true }));
    assert_eq!(task_count(&mut su, &q, None), 1);

    // No payload: NULL; a negative priority.
    let bare = cli(cluster, &["enqueue", &q, "--priority", "-3"]).ok();
    let bare_id: i64 = bare.stdout.trim().parse().unwrap();
    let mut worker = cluster.connect_as(WORKER);
    let task = get(&mut worker, &q, bare_id).unwrap();
    assert_eq!(task.payload, None);
    assert_eq!(task.priority, -3);
    assert_eq!(task.state, "ready");

    // A payload that is not JSON is a usage error.
    let bad = cli(cluster, &["enqueue", &q, "{not json"]);
    assert_eq!(bad.code, 2, "{bad:#?}");
    assert!(bad.stderr.contains("JSON"), "{bad:#?}");
    // A negative delay is the server's to refuse.
    let negative = cli(cluster, &["enqueue", &q, "--delay", "-1"]);
    assert_eq!(negative.code, 1, "{negative:#?}");
    assert!(negative.stderr.contains("22023"), "{negative:#?}");
    assert_eq!(task_count(&mut su, &q, None), 2);
}

#[test]
fn enqueue_file_of_2500_lines_makes_2500_tasks_in_line_order() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_file");
    let path = temp_file(&format!("{q}.jsonl"));
    let mut text = String::new();
    for i in 0..2500 {
        text.push_str(&format!("{{\"n\": {i}}}\n"));
        if i == 1234 {
            text.push('\n'); // blank lines are skipped
        }
    }
    std::fs::write(&path, text).unwrap();

    let run = cli(cluster, &["enqueue", &q, "--file", path.to_str().unwrap()]).ok();
    let printed: Vec<i64> = run
        .stdout
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not an id: {l:?}"))
        })
        .collect();
    assert_eq!(printed.len(), 2500);
    assert!(run.stderr.contains("enqueued 2500"), "{}", run.stderr);

    let mut su = cluster.connect();
    assert_eq!(task_count(&mut su, &q, None), 2500);
    // The ids printed are the tasks made, each line's payload in line order.
    let rows = su
        .query(
            "SELECT task_id, (payload->>'n')::int4 FROM aedb_queue.task WHERE queue = $1 ORDER BY task_id",
            &[&q],
        )
        .unwrap();
    let in_db: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(printed, in_db);
    let ns: Vec<i32> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(ns, (0..2500).collect::<Vec<i32>>());
    let _ = std::fs::remove_file(&path);

    // A bad line: named with its number, and nothing is enqueued.
    let q2 = unique_queue("cli_file_bad");
    let bad_path = temp_file(&format!("{q2}.jsonl"));
    std::fs::write(&bad_path, "{\"n\": 1}\nnot json\n{\"n\": 3}\n").unwrap();
    let bad = cli(
        cluster,
        &[
            "enqueue",
            &q2,
            "--file",
            bad_path.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(bad.code, 1, "{bad:#?}");
    assert!(bad.stderr.contains(":2: not a JSON document"), "{bad:#?}");
    assert_eq!(task_count(&mut su, &q2, None), 0);

    // --json: one {"task_id", "line"} per line.
    std::fs::write(&bad_path, "{\"n\": 1}\n\n{\"n\": 3}\n").unwrap();
    let ok = cli(
        cluster,
        &[
            "enqueue",
            &q2,
            "--file",
            bad_path.to_str().unwrap(),
            "--json",
        ],
    )
    .ok()
    .json_lines();
    assert_eq!(ok.len(), 2);
    assert_eq!(ok[0]["line"], json!(1));
    assert_eq!(ok[1]["line"], json!(3));
    assert_eq!(task_count(&mut su, &q2, None), 2);
    let _ = std::fs::remove_file(&bad_path);
    if let Some(dir) = bad_path.parent() {
        let _ = std::fs::remove_dir(dir);
    }
}

// ---------------------------------------------------------------------------
// tail
// ---------------------------------------------------------------------------

#[test]
fn tail_prints_a_wake_up_per_notify_and_the_count_changes() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_tail");
    let mut admin = cluster.connect_as(ADMIN);
    configure(
        &mut admin,
        "SELECT notify FROM aedb_queue.queue_configure($1::text, notify => true)",
        &q,
    );

    let mut tail = spawn(cluster, &["tail", &q, "--interval", "0.2"]);
    tail.stderr_line("saying it listens", |l| {
        l.contains("listening on channel aedb_queue")
    });
    // The first read of queue_stats shows the queue as it is.
    let first = tail.stdout_line("with the first counts", |l| {
        l.contains(" counts ") && l.contains(&q)
    });
    assert!(first.contains("ready 0"), "{first}");

    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!("wake up"));
    let wake = tail.stdout_line("with the wake-up", |l| {
        l.contains(" wake ") && l.ends_with(&q)
    });
    // Timestamped: 2026-12-02T16:40:01.123Z
    assert!(
        wake.len() > 24 && wake.as_bytes()[10] == b'T' && wake[..24].ends_with('Z'),
        "{wake}"
    );
    tail.stdout_line("with ready 1 (+1)", |l| {
        l.contains(&q) && l.contains("ready 1 (+1)")
    });

    // A worker completes it: the counts fall, read as a completion.
    let mut worker = cluster.connect_as(WORKER);
    let task = claim_one(&mut worker, &q, "w1", "5 minutes").unwrap();
    assert_eq!(
        complete(&mut worker, &q, task.task_id, task.fencing_token),
        Outcome::Applied
    );
    tail.stdout_line("with ~completed 1", |l| {
        l.contains(&q) && l.contains("~completed 1")
    });
}

/// Completions are live where the workers' sessions have
/// `aedb_queue.notify_completions` on: a single completion and a batch each
/// print a `completed` event; a worker without the setting sends none.
#[test]
fn tail_shows_completions_of_workers_that_notify_them() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_tail_done");
    let mut producer = cluster.connect_as(PRODUCER);
    for n in 0..4 {
        enqueue(&mut producer, &q, &json!(n));
    }
    let mut tail = spawn(cluster, &["tail", &q, "--interval", "60", "--json"]);
    tail.stderr_line("saying it listens", |l| l.contains("listening"));

    // Without the setting: no event (checked below, after the later ones).
    let mut quiet = cluster.connect_as(WORKER);
    let silent = claim_one(&mut quiet, &q, "w0", "5 minutes").unwrap();
    assert_eq!(
        complete(&mut quiet, &q, silent.task_id, silent.fencing_token),
        Outcome::Applied
    );

    let mut worker = cluster.connect_as(WORKER);
    worker
        .batch_execute("SET aedb_queue.notify_completions = on")
        .unwrap();
    let one = claim_one(&mut worker, &q, "w1", "5 minutes").unwrap();
    assert_eq!(
        complete(&mut worker, &q, one.task_id, one.fencing_token),
        Outcome::Applied
    );
    let event = tail.json_line("with the completion", |v| v["event"] == json!("completed"));
    assert_eq!(
        (
            event["queue"].clone(),
            event["tasks"].clone(),
            event["first_task_id"].clone()
        ),
        (json!(q), json!(1), json!(one.task_id))
    );
    let rest = claim(&mut worker, &q, "w1", "5 minutes", 10);
    assert_eq!(rest.len(), 2);
    let ids: Vec<i64> = rest.iter().map(|t| t.task_id).collect();
    let tokens: Vec<i64> = rest.iter().map(|t| t.fencing_token).collect();
    worker
        .execute(
            "SELECT count(*) FROM aedb_queue.queue_complete_batch($1, $2, $3)",
            &[&q, &ids, &tokens],
        )
        .unwrap();
    let batch = tail.json_line("with the batch", |v| {
        v["event"] == json!("completed") && v["tasks"] == json!(2)
    });
    assert_eq!(batch["first_task_id"], json!(ids[0]));
    assert!(
        !tail
            .seen
            .iter()
            .any(|l| l.contains(&format!("\"first_task_id\":{}", silent.task_id))),
        "the quiet worker's completion was announced: {:#?}",
        tail.seen
    );
}

#[test]
fn tail_json_follows_only_the_queues_named() {
    let cluster = Cluster::shared();
    let followed = unique_queue("cli_tail_yes");
    let other = unique_queue("cli_tail_no");
    let mut admin = cluster.connect_as(ADMIN);
    for q in [&followed, &other] {
        configure(
            &mut admin,
            "SELECT notify FROM aedb_queue.queue_configure($1::text, notify => true)",
            q,
        );
    }
    let mut tail = spawn(cluster, &["tail", &followed, "--interval", "0.2", "--json"]);
    tail.stderr_line("saying it listens", |l| l.contains("listening"));

    // Notifications arrive in commit order: the other queue's would come first.
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &other, &json!(1));
    enqueue(&mut producer, &followed, &json!(2));
    let wake = tail.json_line("waking the followed queue", |v| v["event"] == json!("wake"));
    assert_eq!(wake["queue"], json!(followed));
    assert!(wake["ts"].as_str().unwrap().ends_with('Z'));
    let counts = tail.json_line("with the followed queue's ready +1", |v| {
        v["event"] == json!("counts") && v["ready_delta"] == json!(1)
    });
    assert_eq!(counts["queue"], json!(followed));
    assert_eq!(counts["ready"], json!(1));
    assert!(
        !tail.seen.iter().any(|l| l.contains(&other)),
        "a queue not named was followed: {:#?}",
        tail.seen
    );
}

// ---------------------------------------------------------------------------
// connections and errors
// ---------------------------------------------------------------------------

#[test]
fn server_errors_exit_1_with_their_sqlstate_and_usage_errors_exit_2() {
    let cluster = Cluster::shared();
    for args in [
        &["list", ""][..],
        &["pause", "", "--create"],
        &["show", "", "1"],
        &["enqueue", "", "{}"],
    ] {
        let run = cli(cluster, args);
        assert_eq!(run.code, 1, "{args:?}: {run:#?}");
        assert!(run.stderr.contains("error: [22023]"), "{args:?}: {run:#?}");
        assert!(run.stderr.contains("queue"), "{args:?}: {run:#?}");
    }
    for args in [
        &["list"][..],
        &["no-such-command"],
        &["show", "q", "not-a-number"],
        &["stats", "--watch", "0"],
    ] {
        let run = cli(cluster, args);
        assert_eq!(run.code, 2, "{args:?}: {run:#?}");
    }
    let help = cli(cluster, &["--help"]).ok().stdout;
    assert!(help.contains("retry-dead"), "{help}");
    assert!(help.contains("retry-from-step"), "{help}");
}

#[test]
fn the_connection_comes_from_the_dsn_first_then_the_pg_variables() {
    let cluster = Cluster::shared();
    let q = unique_queue("cli_dsn");
    let mut producer = cluster.connect_as(PRODUCER);
    enqueue(&mut producer, &q, &json!(1));

    // PGPORT points nowhere: the connection fails, exit 1.
    let mut cmd = command(cluster);
    cmd.env("PGPORT", "1").args(["stats", &q]);
    let refused = run_command(cmd, "");
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(
        refused
            .stderr
            .contains("cannot connect to 127.0.0.1:1 as app_admin"),
        "{refused:#?}"
    );

    // --dsn wins over PGPORT.
    let dsn = format!(
        "host=127.0.0.1 port={} user={ADMIN} dbname={DB}",
        cluster.port()
    );
    let mut cmd = command(cluster);
    cmd.env("PGPORT", "1")
        .args(["--dsn", &dsn, "stats", &q, "--json"]);
    assert_eq!(run_command(cmd, "").ok().json()["ready"], json!(1));

    // So does AEDB_QUEUE_DSN, here as a URL.
    let url = format!("postgresql://{ADMIN}@127.0.0.1:{}/{DB}", cluster.port());
    let mut cmd = command(cluster);
    cmd.env("PGPORT", "1")
        .env("AEDB_QUEUE_DSN", &url)
        .args(["stats", &q, "--json"]);
    assert_eq!(run_command(cmd, "").ok().json()["ready"], json!(1));

    // A role outside aedb_queue_admin cannot purge: 42501.
    let mut cmd = command(cluster);
    cmd.env("PGUSER", PRODUCER)
        .args(["purge", &q, "--state", "ready", "--yes"]);
    let denied = run_command(cmd, "");
    assert_eq!(denied.code, 1, "{denied:#?}");
    assert!(denied.stderr.contains("[42501]"), "{denied:#?}");
}
