-- Task dependencies: a task enqueued with wait_for waits until every one
-- of those tasks has completed, and becomes ready in the transaction that
-- completes the last of them. Parents in other queues are allowed.
SET aedb_queue.claim_rescan_interval = 0;
CREATE FUNCTION pg_temp.step(id bigint) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce((SELECT payload->>'step' FROM aedb_queue.task WHERE task_id = id),
                    (SELECT payload->>'step' FROM aedb_queue.completed_task WHERE task_id = id))
$$;
-- Each task of the DAG by its step, with its state and what it waits for.
CREATE FUNCTION pg_temp.dag() RETURNS TABLE (step text, state aedb_queue.task_state, waits_for text[])
LANGUAGE sql AS $$
    SELECT t.payload->>'step', t.state,
           (SELECT array_agg(pg_temp.step(p) ORDER BY p) FROM unnest(v.waits_for) p)
    FROM aedb_queue.task t JOIN aedb_queue.tasks v USING (task_id)
    WHERE t.queue LIKE 'dag.%' ORDER BY t.task_id
$$;

-- A three-step DAG, enqueued in one transaction: extract; two transforms
-- that wait for it (fan-out); a load that waits for both (fan-in).
BEGIN;
SELECT task_id AS extract FROM aedb_queue.queue_enqueue('dag.extract', '{"step": "extract"}') \gset
SELECT task_id AS left_t FROM aedb_queue.queue_enqueue('dag.transform', '{"step": "left"}',
       wait_for => ARRAY[:extract]) \gset
SELECT task_id AS right_t FROM aedb_queue.queue_enqueue('dag.transform', '{"step": "right"}',
       wait_for => ARRAY[:extract]) \gset
SELECT task_id AS load FROM aedb_queue.queue_enqueue('dag.load', '{"step": "load"}',
       wait_for => ARRAY[:left_t, :right_t]) \gset
COMMIT;
SELECT * FROM pg_temp.dag();
SELECT queue, waiting, ready FROM aedb_queue.queue_stats WHERE queue LIKE 'dag.%' ORDER BY queue;
-- Waiting tasks are not claimable.
SELECT count(*) FROM aedb_queue.queue_claim('dag.transform', 'w');

-- Completing extract (with a result) releases both transforms in the same
-- transaction: they are ready before it commits.
BEGIN;
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag.extract', 'w') \gset
SELECT aedb_queue.queue_complete('dag.extract', :extract, :tok, result => '{"rows": 42}');
SELECT * FROM pg_temp.dag();
COMMIT;

-- A child reads its parent's result; the parent is kept for it although
-- its queue keeps no completed tasks.
SELECT pg_temp.step(task_id), state, result FROM aedb_queue.queue_parents('dag.transform', :left_t);

-- One transform completes: load still waits for the other.
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag.transform', 'w') \gset
SELECT aedb_queue.queue_complete('dag.transform', :left_t, :tok, result => '{"left": 1}');
SELECT * FROM pg_temp.dag();

-- A completion that rolls back releases nothing.
BEGIN;
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag.transform', 'w') \gset
SELECT aedb_queue.queue_complete('dag.transform', :right_t, :tok, result => '{"right": 2}');
SELECT * FROM pg_temp.dag();
ROLLBACK;
SELECT * FROM pg_temp.dag();

-- The second completes: load is ready and reads both results.
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag.transform', 'w') \gset
SELECT aedb_queue.queue_complete('dag.transform', :right_t, :tok, result => '{"right": 2}');
SELECT * FROM pg_temp.dag();
SELECT pg_temp.step(task_id), state, result FROM aedb_queue.queue_parents('dag.load', :load);

-- Once load has run, the whole finished DAG (load too) stays readable
-- for aedb_queue.keep_workflows (7 days by default), although its queues
-- keep no completed tasks; with 0 the reaper lets it go at once.
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('dag.load', 'w') \gset
SELECT aedb_queue.queue_complete('dag.load', :load, :tok);
SELECT count(*) AS kept_before FROM aedb_queue.completed_task WHERE queue LIKE 'dag.%';
SELECT count(*) FROM aedb_queue.queue_reap();
SELECT pg_temp.step(task_id), state, result FROM aedb_queue.queue_parents('dag.load', :load);
SET aedb_queue.keep_workflows = 0;
SELECT count(*) FROM aedb_queue.queue_reap();
RESET aedb_queue.keep_workflows;
SELECT count(*) AS kept_after FROM aedb_queue.completed_task WHERE queue LIKE 'dag.%';
SELECT count(*) AS links_after FROM aedb_queue.task_dependency;

-- A parent dead-lettered: its child (policy dead_letter, the default) is
-- dead-lettered naming it, and so is the child's own child; a child with
-- on_parent_failure => 'run' runs anyway.
SELECT task_id AS p FROM aedb_queue.queue_enqueue('fail.parent', '{"step": "parent"}') \gset
SELECT task_id AS c FROM aedb_queue.queue_enqueue('fail.child', '{"step": "child"}', wait_for => ARRAY[:p]) \gset
SELECT task_id AS g FROM aedb_queue.queue_enqueue('fail.child', '{"step": "grandchild"}', wait_for => ARRAY[:c]) \gset
SELECT task_id AS r FROM aedb_queue.queue_enqueue('fail.child', '{"step": "runs anyway"}',
       wait_for => ARRAY[:p], on_parent_failure => 'run') \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('fail.parent', 'w') \gset
SELECT aedb_queue.queue_fail('fail.parent', :p, :tok, 'bad input', dead_letter => true);
SELECT payload->>'step' AS step, state,
       replace(replace(last_error, :'p', 'P'), :'c', 'C') AS last_error
FROM aedb_queue.task WHERE queue LIKE 'fail.%' ORDER BY task_id;

-- A cancelled parent, likewise.
SELECT task_id AS p FROM aedb_queue.queue_enqueue('cancel.parent', '{}') \gset
SELECT task_id AS c FROM aedb_queue.queue_enqueue('cancel.child', '{}', wait_for => ARRAY[:p]) \gset
SELECT aedb_queue.queue_cancel('cancel.parent', :p);
SELECT state, replace(last_error, :'p', 'P') AS last_error FROM aedb_queue.queue_get('cancel.child', :c);

-- At enqueue: a dead parent applies the policy at once; a completed parent
-- that is kept counts as done; one that is gone (or was never made, or is
-- another tenant's) is refused.
SELECT task_id AS dead_p FROM aedb_queue.queue_list('fail.parent', 'dead') \gset
SELECT e.task_id AS c FROM aedb_queue.queue_enqueue('late.child', '{}', wait_for => ARRAY[:dead_p]) e \gset
SELECT state, replace(last_error, :'dead_p', 'P') AS last_error FROM aedb_queue.queue_get('late.child', :c);
SELECT e.task_id AS c FROM aedb_queue.queue_enqueue('late.child', '{}', wait_for => ARRAY[:dead_p],
       on_parent_failure => 'run') e \gset
SELECT state FROM aedb_queue.queue_get('late.child', :c);
\set VERBOSITY sqlstate
SELECT aedb_queue.queue_enqueue('late.child', '{}', wait_for => ARRAY[9999999999]);
\set VERBOSITY default
SELECT aedb_queue.queue_enqueue('late.child', '{}', wait_for => ARRAY[9999999999]);
SELECT aedb_queue.queue_enqueue('late.child', '{}', wait_for => ARRAY[1, NULL]);
SELECT aedb_queue.queue_enqueue('late.child', '{}', wait_for => ARRAY[1], on_parent_failure => 'retry');

-- Follow-ups and batches wait too: a completion's follow-up that waits for
-- another task, and a batch whose every task waits for one parent.
SELECT task_id AS gate FROM aedb_queue.queue_enqueue('fu.gate', '{}') \gset
SELECT task_id AS first FROM aedb_queue.queue_enqueue('fu.first', '{}') \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('fu.first', 'w') \gset
SELECT aedb_queue.queue_complete('fu.first', :first, :tok,
       follow_ups => format('[{"queue": "fu.next", "wait_for": [%s]}]', :gate)::jsonb);
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fu.next', ARRAY['{}'::jsonb, '{}'], wait_for => ARRAY[:gate]);
SELECT state, count(*) FROM aedb_queue.task WHERE queue = 'fu.next' GROUP BY state;
SELECT count(*) AS listed_waiting FROM aedb_queue.queue_list('fu.next', 'waiting');
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('fu.gate', 'w') \gset
SELECT aedb_queue.queue_complete('fu.gate', :gate, :tok);
SELECT state, count(*) FROM aedb_queue.task WHERE queue = 'fu.next' GROUP BY state;

-- Clean up for the files after this one.
SELECT count(*) FROM (SELECT aedb_queue.queue_purge(q, s)
    FROM unnest(ARRAY['fail.parent', 'fail.child', 'cancel.child', 'late.child', 'fu.next']) q,
         unnest(ARRAY['ready', 'dead', 'waiting']) s) x;
