//! `#[pg_test]`s of durable workflows: steps recorded under the fence,
//! sleeps and events. The conventions are those of `tests.rs`; a refusal's
//! "changes nothing" is checked from other sessions in the itests.

#[pgrx::pg_schema]
mod tests {
    #[allow(unused_imports)]
    use crate::tests::tests::*;
    #[allow(unused_imports)]
    use pgrx::prelude::*;

    fn record(queue: &str, id: i64, token: i64, step: &str, extra: &str) -> String {
        one(&format!(
            "SELECT aedb_queue.queue_step_record('{queue}', {id}, {token}, '{step}'{extra})::text"
        ))
    }

    fn steps_of(queue: &str, id: i64) -> String {
        one(&format!(
            "SELECT coalesce(string_agg(step || '=' || coalesce(result::text, 'NULL') || '@' || attempt || '/' || fencing_token, ' '), '')
             FROM aedb_queue.queue_steps('{queue}', {id})"
        ))
    }

    /// (waiting, wake_at - now rounded to minutes) of a sleep.
    fn sleep(queue: &str, id: i64, token: i64, step: &str, extra: &str) -> (String, bool) {
        let row: String = one(&format!(
            "SELECT outcome::text || ' ' || waiting FROM aedb_queue.queue_sleep('{queue}', {id}, {token}, '{step}'{extra})"
        ));
        let (outcome, waiting) = row.split_once(' ').unwrap();
        (outcome.to_string(), waiting == "true")
    }

    /// outcome, waiting, payload (text), timed_out of an event wait.
    fn await_event(queue: &str, id: i64, token: i64, step: &str, key: &str) -> String {
        one(&format!(
            "SELECT concat_ws(' ', outcome, waiting::text, coalesce(payload::text, 'NULL'), timed_out::text)
             FROM aedb_queue.queue_await_event('{queue}', {id}, {token}, '{step}', '{key}', '1 hour')"
        ))
    }

    fn emit(queue: &str, key: &str, payload: &str) -> bool {
        one(&format!(
            "SELECT aedb_queue.queue_emit('{queue}', '{key}', '{payload}')"
        ))
    }

    #[pg_test]
    fn a_step_is_recorded_once_under_the_token_and_read_back_in_order() {
        let id = enqueue("wf", "");
        let (_, token) = claim_one("wf");
        assert_eq!(record("wf", id, token, "charge", ", result => '{\"receipt\": 7}'"), "applied");
        assert_eq!(record("wf", id, token, "ship", ""), "applied");
        assert_eq!(
            steps_of("wf", id),
            format!("charge={{\"receipt\": 7}}@1/{token} ship=NULL@1/{token}")
        );
        expect_error(
            &format!("SELECT aedb_queue.queue_step_record('wf', {id}, {token}, 'charge', '{{\"receipt\": 8}}')"),
            "23505",
            &format!("step \"charge\" of task {id} is recorded already: a step runs once, and its first record stands"),
        );
        assert!(steps_of("wf", id).contains("\"receipt\": 7"), "the first record stands");
        assert_eq!(state_of("wf", id).as_deref(), Some("in_flight"), "recording settles nothing");
    }

    #[pg_test]
    fn a_worker_whose_lease_was_lost_records_nothing() {
        let id = enqueue("wf", "");
        let (_, stale) = claim_one("wf");
        expire_lease(id);
        let (again, current) = claim_one("wf");
        assert_eq!(again, id);
        assert_eq!(record("wf", id, stale, "charge", ""), "lease_lost");
        expect_error(
            &format!("SELECT aedb_queue.queue_step_record('wf', {id}, {stale}, 'charge', strict => true)"),
            "40002",
            &format!("lease lost: task {id} is no longer in flight under fencing token {stale}"),
        );
        assert_eq!(steps_of("wf", id), "");
        assert_eq!(record("wf", id, current, "charge", ""), "applied");
        // Nor may another queue's name or a task that is not in flight.
        assert_eq!(record("other", id, current, "x", ""), "lease_lost");
        assert_eq!(complete("wf", id, current, ""), "applied");
        assert_eq!(record("wf", id, current, "late", ""), "lease_lost");
    }

    #[pg_test]
    fn a_sleep_parks_the_task_without_counting_the_attempt_then_lets_it_go_on() {
        let id = enqueue("wf", ", max_attempts => 1");
        let (_, t1) = claim_one("wf");
        assert_eq!(sleep("wf", id, t1, "nap", ", duration => '1 hour'"), ("applied".into(), true));
        assert_eq!(state_of("wf", id).as_deref(), Some("scheduled"));
        assert_eq!(field::<i32>(id, "attempts"), Some(0), "the attempt is not counted");
        assert_eq!(
            field::<bool>(id, "not_before - now() BETWEEN '59 minutes' AND '61 minutes'"),
            Some(true)
        );
        let until: String = one(&format!(
            "SELECT result->>'until' FROM aedb_queue.queue_steps('wf', {id}) WHERE step = 'nap'"
        ));
        // Woken early (an operator made it due): it sleeps on to the same time.
        make_due(id);
        let (_, t2) = claim_one("wf");
        assert_eq!(sleep("wf", id, t2, "nap", ", duration => '5 minutes'"), ("applied".into(), true));
        assert_eq!(
            field::<bool>(id, &format!("not_before = '{until}'::timestamptz")),
            Some(true),
            "the first call's wake time stands"
        );
        // Once the wake time has passed, the handler goes on in flight.
        exec(&format!(
            "UPDATE aedb_queue.task_step SET result = jsonb_build_object('until', now() - interval '1 second') WHERE task_id = {id}"
        ));
        make_due(id);
        let (_, t3) = claim_one("wf");
        assert_eq!(sleep("wf", id, t3, "nap", ", duration => '1 hour'"), ("applied".into(), false));
        assert_eq!(state_of("wf", id).as_deref(), Some("in_flight"));
        assert_eq!(field::<i32>(id, "attempts"), Some(1));
        assert_eq!(complete("wf", id, t3, ""), "applied");
        assert_task_invariants("sleeps");
    }

    #[pg_test]
    fn a_sleep_until_a_past_time_goes_on_at_once_and_its_arguments_are_checked() {
        let id = enqueue("wf", "");
        let (_, token) = claim_one("wf");
        assert_eq!(
            sleep("wf", id, token, "past", ", until => now() - interval '1 day'"),
            ("applied".into(), false)
        );
        assert_eq!(state_of("wf", id).as_deref(), Some("in_flight"));
        let call = |extra: &str| {
            format!("SELECT * FROM aedb_queue.queue_sleep('wf', {id}, {token}, 'n'{extra})")
        };
        expect_error(
            &call(", duration => '1 hour', until => now()"),
            "22023",
            "invalid argument \"until\": give a duration or a time to sleep until, not both",
        );
        expect_error(
            &call(""),
            "22023",
            "invalid argument \"duration\": give a duration or a time to sleep until (until)",
        );
        expect_error(
            &call(", duration => '-1 hour'"),
            "22023",
            "invalid argument \"duration\": must not be a negative interval",
        );
        assert_eq!(record("wf", id, token, "plain", ""), "applied");
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_sleep('wf', {id}, {token}, 'plain', duration => '1 hour')"),
            "22023",
            "invalid argument \"step\": is recorded, and is not a sleep",
        );
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_sleep('wf', {id}, {token}, NULL, duration => '1 hour')"),
            "22004",
            "argument \"step\" must not be NULL",
        );
    }

    #[pg_test]
    fn an_event_emitted_before_the_wait_is_not_lost_and_the_first_emit_stands() {
        assert!(emit("wf", "order-1", "{\"paid\": true}"));
        assert!(!emit("wf", "order-1", "{\"paid\": false}"), "a second emit is reported");
        let id = enqueue("wf", "");
        let (_, token) = claim_one("wf");
        assert_eq!(
            await_event("wf", id, token, "paid", "order-1"),
            "applied false {\"paid\": true} false"
        );
        assert_eq!(state_of("wf", id).as_deref(), Some("in_flight"));
        // Recorded: a later call returns the same, whatever happens to the event.
        exec("DELETE FROM aedb_queue.event");
        assert_eq!(
            await_event("wf", id, token, "paid", "order-1"),
            "applied false {\"paid\": true} false"
        );
        // Events are per queue: the same key elsewhere is another event.
        assert!(emit("other", "order-1", "{}"));
    }

    #[pg_test]
    fn a_wait_parks_the_task_and_the_emit_makes_it_ready() {
        let id = enqueue("wf", ", max_attempts => 1");
        let (_, t1) = claim_one("wf");
        assert_eq!(await_event("wf", id, t1, "paid", "order-2"), "applied true NULL false");
        assert_eq!(state_of("wf", id).as_deref(), Some("scheduled"));
        assert_eq!(field::<i32>(id, "attempts"), Some(0));
        assert_eq!(count("aedb_queue.event_wait WHERE key = 'order-2'"), 1);
        without_scan_hints();
        assert!(emit("wf", "order-2", "{\"amount\": 5}"));
        assert_eq!(state_of("wf", id).as_deref(), Some("ready"), "the emit promoted it");
        let (again, t2) = claim_one("wf");
        assert_eq!(again, id);
        assert_eq!(
            await_event("wf", id, t2, "paid", "order-2"),
            "applied false {\"amount\": 5} false"
        );
        assert_eq!(count("aedb_queue.event_wait"), 0, "the wait ended");
        assert_eq!(complete("wf", id, t2, ""), "applied");
    }

    #[pg_test]
    fn a_wait_past_its_deadline_times_out_and_a_late_emit_does_not_change_it() {
        let id = enqueue("wf", "");
        let (_, t1) = claim_one("wf");
        assert_eq!(await_event("wf", id, t1, "approval", "req-9"), "applied true NULL false");
        exec("UPDATE aedb_queue.event_wait SET deadline = now() - interval '1 second'");
        make_due(id);
        let (_, t2) = claim_one("wf");
        assert_eq!(await_event("wf", id, t2, "approval", "req-9"), "applied false NULL true");
        assert!(emit("wf", "req-9", "{\"ok\": true}"), "the emit itself applies");
        assert_eq!(await_event("wf", id, t2, "approval", "req-9"), "applied false NULL true");
        assert_eq!(state_of("wf", id).as_deref(), Some("in_flight"), "the late emit woke nothing");
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_await_event('wf', {id}, {t2}, 'x', 'k', NULL)"),
            "22004",
            "argument \"timeout\" must not be NULL",
        );
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_await_event('wf', {id}, {t2}, 'x', '', '1 hour')"),
            "22023",
            "invalid argument \"key\": must not be empty",
        );
    }

    #[pg_test]
    fn results_and_payloads_obey_the_payload_limit() {
        set_payload_limit(64);
        let id = enqueue("wf", "");
        let (_, token) = claim_one("wf");
        let big = big_json(200);
        assert_eq!(
            error_of(&format!(
                "SELECT aedb_queue.queue_step_record('wf', {id}, {token}, 's', {big})"
            ))
            .map(|(state, _)| state),
            Some("54000".into())
        );
        assert_eq!(
            error_of(&format!("SELECT aedb_queue.queue_emit('wf', 'k', {big})"))
                .map(|(state, _)| state),
            Some("54000".into())
        );
    }

    #[pg_test]
    fn the_reaper_removes_the_steps_and_waits_of_tasks_that_are_gone() {
        // A finished workflow's steps stay as long as its archived row
        // (aedb_queue.keep_workflows): gone at once here.
        exec("SET aedb_queue.keep_workflows = 0");
        let gone = enqueue("wf", "");
        let kept = enqueue("wf_kept", "");
        let live = enqueue("wf", "");
        exec("SELECT aedb_queue.queue_configure('wf_kept', keep_completed => '1 day')");
        for (queue, id) in [("wf", gone), ("wf_kept", kept)] {
            let (claimed, token) = claim_one(queue);
            assert_eq!(claimed, id);
            assert_eq!(record(queue, id, token, "s", ""), "applied");
            assert_eq!(complete(queue, id, token, ""), "applied");
        }
        let (_, token) = claim_one("wf");
        assert_eq!(await_event("wf", live, token, "e", "k"), "applied true NULL false");
        exec(&format!(
            "INSERT INTO aedb_queue.event_wait VALUES ({gone}, 'old', 'wf', 'k', now() + interval '1 hour')"
        ));
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(count(&format!("aedb_queue.task_step WHERE task_id = {gone}")), 0);
        assert_eq!(count(&format!("aedb_queue.event_wait WHERE task_id = {gone}")), 0);
        assert_eq!(count(&format!("aedb_queue.task_step WHERE task_id = {kept}")), 1, "kept completed");
        assert_eq!(count(&format!("aedb_queue.event_wait WHERE task_id = {live}")), 1, "live");
    }

    #[pg_test]
    fn an_operator_retries_a_workflow_from_a_chosen_step() {
        let id = enqueue("wf", ", max_attempts => 1");
        let (_, t1) = claim_one("wf");
        for step in ["a", "b", "c"] {
            assert_eq!(record("wf", id, t1, step, ""), "applied");
        }
        let retry = |step: &str| format!("SELECT aedb_queue.queue_retry_from_step('wf', {id}, '{step}')");
        expect_error(&retry("b"), "55000", &format!("task {id} is in flight: a worker holds it"));
        assert_eq!(fail("wf", id, t1, ""), "applied");
        assert_eq!(state_of("wf", id).as_deref(), Some("dead"));
        expect_error(
            &retry("nope"),
            "22023",
            &format!("invalid argument \"step\": is not a recorded step of task {id}"),
        );
        let dropped: Vec<Option<String>> = one(&retry("b"));
        assert_eq!(dropped, vec![Some("b".to_string()), Some("c".to_string())]);
        assert_eq!(state_of("wf", id).as_deref(), Some("ready"), "the dead task runs again");
        assert_eq!(steps_of("wf", id), format!("a=NULL@1/{t1}"));
        // A parked workflow becomes due at once, its wait dropped.
        let (_, t2) = claim_one("wf");
        assert_eq!(record("wf", id, t2, "b", ""), "applied");
        assert_eq!(await_event("wf", id, t2, "w", "never"), "applied true NULL false");
        without_scan_hints();
        let dropped: Vec<Option<String>> = one(&retry("b"));
        assert_eq!(dropped, vec![Some("b".to_string())]);
        assert_eq!(state_of("wf", id).as_deref(), Some("ready"));
        assert_eq!(count("aedb_queue.event_wait"), 0);
        expect_error(
            &format!("SELECT aedb_queue.queue_retry_from_step('wf', 999999, 'a')"),
            "22023",
            "invalid argument \"task_id\": is not a live task of queue \"wf\"",
        );
    }

    /// outcome, waiting, results (text) of an await_tasks.
    fn await_tasks(queue: &str, id: i64, token: i64, step: &str, ids: &[i64], extra: &str) -> String {
        let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
        one(&format!(
            "SELECT concat_ws(' ', outcome, waiting::text, coalesce(results::text, 'NULL'))
             FROM aedb_queue.queue_await_tasks('{queue}', {id}, {token}, '{step}', ARRAY[{}]::bigint[]{extra})",
            ids.join(", ")
        ))
    }

    #[pg_test]
    fn a_workflow_waits_for_its_children_and_reads_their_results() {
        let wf = enqueue("wf", ", max_attempts => 1");
        let (_, t1) = claim_one("wf");
        // The step that starts the children links them at once (park => false).
        let a = enqueue("kids", "");
        let b = enqueue("kids", "");
        assert_eq!(
            await_tasks("wf", wf, t1, "kids", &[a, b], ", park => false"),
            format!("applied false [{{\"state\": \"live\", \"task_id\": {a}}}, {{\"state\": \"live\", \"task_id\": {b}}}]")
        );
        // A child completes before the wait: kept with its result, though
        // its queue keeps no completed tasks.
        let (ca, ta) = claim_one("kids");
        assert_eq!(ca, a);
        assert_eq!(complete("kids", a, ta, ", result => '{\"sum\": 3}'"), "applied");
        assert_eq!(await_tasks("wf", wf, t1, "kids", &[a, b], ""), "applied true NULL");
        assert_eq!(state_of("wf", wf).as_deref(), Some("waiting"));
        assert_eq!(field::<i32>(wf, "waiting_on"), Some(1));
        assert_eq!(field::<i32>(wf, "attempts"), Some(0), "the attempt is not counted");
        // The other child is dead-lettered: the workflow runs and sees it.
        let (cb, tb) = claim_one("kids");
        assert_eq!(cb, b);
        assert_eq!(fail("kids", b, tb, ", dead_letter => true"), "applied");
        assert_eq!(state_of("wf", wf).as_deref(), Some("ready"));
        let (_, t2) = claim_one("wf");
        let expected = format!(
            "applied false [{{\"state\": \"completed\", \"result\": {{\"sum\": 3}}, \"task_id\": {a}}}, {{\"error\": \"boom\", \"state\": \"dead\", \"task_id\": {b}}}]"
        );
        assert_eq!(await_tasks("wf", wf, t2, "kids", &[a, b], ""), expected);
        // Recorded: the same later, whatever happens to the children.
        exec(&format!("SELECT aedb_queue.queue_cancel('kids', {b})"));
        assert_eq!(await_tasks("wf", wf, t2, "kids", &[a, b], ""), expected);
        assert_eq!(complete("wf", wf, t2, ""), "applied");
        assert_task_invariants("children");
        // The finished workflow and the child it read stay readable.
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(state_of("wf", wf).as_deref(), Some("completed"));
        assert_eq!(state_of("kids", a).as_deref(), Some("completed"));
        assert_eq!(steps_of("wf", wf).matches("kids=").count(), 1);
    }

    /// The task's archived row: (state, result as text, in_workflow).
    fn archived(queue: &str, id: i64) -> Option<String> {
        opt::<String>(&format!(
            "SELECT g.state || ' ' || coalesce(g.result::text, 'NULL') || ' ' || c.in_workflow
             FROM aedb_queue.queue_get('{queue}', {id}) g
             JOIN aedb_queue.completed_task c ON c.task_id = g.task_id"
        ))
    }

    fn completed_ago(id: i64, ago: &str) {
        exec(&format!(
            "UPDATE aedb_queue.completed_task SET completed_at = now() - interval '{ago}' WHERE task_id = {id}"
        ));
    }

    #[pg_test]
    fn a_finished_workflow_stays_readable_with_its_steps_for_keep_workflows() {
        let wf = enqueue("wf", "");
        let plain = enqueue("wf", "");
        let (_, token) = claim_one("wf");
        assert_eq!(record("wf", wf, token, "charge", ", result => '{\"receipt\": 7}'"), "applied");
        assert_eq!(record("wf", wf, token, "ship", ""), "applied");
        assert_eq!(complete("wf", wf, token, ", result => '{\"done\": true}'"), "applied");
        let (_, other) = claim_one("wf");
        assert_eq!(complete("wf", plain, other, ""), "applied");
        exec("SELECT * FROM aedb_queue.queue_reap()");
        let steps = format!("charge={{\"receipt\": 7}}@1/{token} ship=NULL@1/{token}");
        assert_eq!(archived("wf", wf).as_deref(), Some("completed {\"done\": true} true"));
        assert_eq!(steps_of("wf", wf), steps, "its steps stay with it");
        assert_eq!(state_of("wf", plain), None, "a plain task is not kept");
        assert_eq!(count("aedb_queue.completed_task"), 1);
        // The default retention is 7 days.
        completed_ago(wf, "6 days");
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(steps_of("wf", wf), steps);
        completed_ago(wf, "8 days");
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(state_of("wf", wf), None, "expired");
        assert_eq!(count(&format!("aedb_queue.task_step WHERE task_id = {wf}")), 0, "and its steps");
    }

    #[pg_test]
    fn a_finished_dag_stays_readable_and_the_longer_retention_wins() {
        let parent = enqueue("dag", "");
        let child: i64 = one(&format!(
            "SELECT task_id FROM aedb_queue.queue_enqueue('dag', wait_for => ARRAY[{parent}])"
        ));
        for id in [parent, child] {
            let (claimed, token) = claim_one("dag");
            assert_eq!(claimed, id);
            assert_eq!(complete("dag", id, token, ", result => '1'"), "applied");
        }
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(archived("dag", parent).as_deref(), Some("completed 1 true"));
        assert_eq!(archived("dag", child).as_deref(), Some("completed 1 true"), "the leaf too");
        let children = ints(&format!("SELECT task_id FROM aedb_queue.queue_children('dag', {parent})"));
        assert_eq!(children, vec![child], "the graph is still there");
        // A queue that keeps completed tasks longer keeps them longer.
        exec("SELECT aedb_queue.queue_configure('dag', keep_completed => '30 days')");
        completed_ago(parent, "8 days");
        completed_ago(child, "8 days");
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(count("aedb_queue.completed_task WHERE queue = 'dag'"), 2);
        // 0: as before, gone once nothing waits for them.
        exec("SELECT aedb_queue.queue_configure('dag', keep_completed => NULL, reset => true)");
        exec("SET aedb_queue.keep_workflows = 0");
        exec("SELECT * FROM aedb_queue.queue_reap()");
        assert_eq!(count("aedb_queue.completed_task WHERE queue = 'dag'"), 0);
        assert_eq!(count("aedb_queue.task_dependency"), 0, "their links go with them");
    }

    #[pg_test]
    fn unknown_children_are_missing_and_a_cancelled_child_releases_the_workflow() {
        let wf = enqueue("wf", "");
        let (_, t1) = claim_one("wf");
        let kid = enqueue("kids", "");
        assert_eq!(await_tasks("wf", wf, t1, "k", &[kid, 999_999], ""), "applied true NULL");
        assert_eq!(field::<i32>(wf, "waiting_on"), Some(1), "only the live child counts");
        exec(&format!("SELECT aedb_queue.queue_cancel('kids', {kid})"));
        assert_eq!(state_of("wf", wf).as_deref(), Some("ready"));
        let (_, t2) = claim_one("wf");
        assert_eq!(
            await_tasks("wf", wf, t2, "k", &[kid, 999_999], ""),
            format!("applied false [{{\"state\": \"missing\", \"task_id\": {kid}}}, {{\"state\": \"missing\", \"task_id\": 999999}}]")
        );
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_await_tasks('wf', {wf}, {t2}, 'x', ARRAY[NULL]::bigint[])"),
            "22023",
            "invalid argument \"task_ids\": must not contain NULL (element 1 is NULL)",
        );
        let keyed = enqueue("wf_line", ", ordering_key => 'o'");
        let (_, tk) = claim_one("wf_line");
        let other = enqueue("kids", "");
        expect_error(
            &format!("SELECT * FROM aedb_queue.queue_await_tasks('wf_line', {keyed}, {tk}, 'x', ARRAY[{other}]::bigint[])"),
            "55000",
            &format!("task {keyed} has an ordering key: it cannot wait for other tasks"),
        );
    }

    #[pg_test]
    fn an_operator_purges_old_events() {
        assert!(emit("wf", "old", "{}"));
        exec("UPDATE aedb_queue.event SET emitted_at = now() - interval '40 days' WHERE key = 'old'");
        assert!(emit("wf", "new", "{}"));
        assert!(emit("other", "old", "{}"));
        assert_eq!(
            one::<i64>("SELECT aedb_queue.queue_events_purge('wf', now() - interval '30 days')"),
            1
        );
        assert_eq!(count("aedb_queue.event WHERE queue = 'wf'"), 1);
        assert!(emit("wf", "old", "{}"), "a purged key can be emitted again");
        assert_eq!(one::<i64>("SELECT aedb_queue.queue_events_purge('wf')"), 2);
        assert_eq!(count("aedb_queue.event"), 1, "other queues' events stay");
    }
}
