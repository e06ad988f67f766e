-- A durable workflow: a task whose handler runs named steps. Each step's
-- result is recorded under the claim's fencing token, so when the handler
-- runs again (a crash, a lost lease, a retry) a recorded step returns its
-- result instead of running. A sleep or an event wait hands the task back
-- until a time on the database's clock, without counting the attempt.
-- (Ids from 4201 here, so that the messages below show the same id in every run.)
SELECT setval('aedb_queue.task_id_seq', 4200) \gset
SELECT task_id AS t FROM aedb_queue.queue_enqueue('orders', '{"order": 42}', max_attempts => 1) \gset
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('orders', 'w1') \gset

-- Step 1 ran (say it charged a card): its result is recorded.
SELECT aedb_queue.queue_step_record('orders', :t, :tok, 'charge', '{"receipt": "r-1"}');
-- A step runs once: recording it again is refused, and the first record stands.
SELECT aedb_queue.queue_step_record('orders', :t, :tok, 'charge', '{"receipt": "r-2"}');
SELECT step, result, attempt FROM aedb_queue.queue_steps('orders', :t);

-- Step 2 waits for the warehouse: no event yet, so the task parks until
-- the deadline (or the emit) and the worker is free.
SELECT outcome, waiting, wake_at > now() + interval '59 minutes' AS parked_an_hour, payload, timed_out
FROM aedb_queue.queue_await_event('orders', :t, :tok, 'packed', 'order-42/packed', timeout => '1 hour');
SELECT state, attempts FROM aedb_queue.queue_get('orders', :t);
SELECT step, key, deadline > now() AS ahead FROM aedb_queue.queue_waits('orders', :t);

-- The old token is fenced out now: a stale worker records nothing.
SELECT aedb_queue.queue_step_record('orders', :t, :tok, 'ship', '{}');

-- The warehouse emits the event in its own transaction: the task is due
-- at once. The first emit of a key stands; a second is reported.
SELECT aedb_queue.queue_emit('orders', 'order-42/packed', '{"boxes": 2}');
SELECT aedb_queue.queue_emit('orders', 'order-42/packed', '{"boxes": 3}');
SELECT state FROM aedb_queue.queue_get('orders', :t);

-- The handler runs again under a new token: 'charge' is recorded (it does
-- not charge again), the wait returns the event's payload.
SELECT fencing_token AS tok2 FROM aedb_queue.queue_claim('orders', 'w2') \gset
SELECT result FROM aedb_queue.queue_steps('orders', :t) WHERE step = 'charge';
SELECT outcome, waiting, payload, timed_out
FROM aedb_queue.queue_await_event('orders', :t, :tok2, 'packed', 'order-42/packed', timeout => '1 hour');

-- Children: a workflow starts tasks and waits for their results. The step
-- that enqueues them links them at once (park => false), so a child that
-- completes before the wait is kept with its result; the wait then parks
-- the workflow until the last child completes or fails.
SELECT task_id AS bill FROM aedb_queue.queue_enqueue('billing', '{"order": 42}') \gset
SELECT outcome, waiting, results
FROM aedb_queue.queue_await_tasks('orders', :t, :tok2, 'billing', ARRAY[:bill]::bigint[], park => false);
SELECT fencing_token AS itok FROM aedb_queue.queue_claim('billing', 'biller') \gset
SELECT aedb_queue.queue_complete('billing', :bill, :itok, result => '{"number": "INV-7"}');
-- The wait: every child has ended, so the step is recorded with their
-- outcomes and the handler goes on (a live child would park it, waiting).
SELECT outcome, waiting, results
FROM aedb_queue.queue_await_tasks('orders', :t, :tok2, 'billing', ARRAY[:bill]::bigint[]);

-- Step 3 sleeps a day before asking for a review: parked again, and the
-- attempt is still not counted (max_attempts is 1).
SELECT outcome, waiting FROM aedb_queue.queue_sleep('orders', :t, :tok2, 'cool-off', duration => '1 day');
SELECT state, attempts, not_before - now() > interval '23 hours' AS sleeps_a_day
FROM aedb_queue.queue_get('orders', :t);

-- An operator makes the workflow run again from a step: that step and the
-- later ones are dropped (they run again) and the parked task is due now.
SELECT aedb_queue.queue_retry_from_step('orders', :t, 'packed');
SELECT state FROM aedb_queue.queue_get('orders', :t);
SELECT step FROM aedb_queue.queue_steps('orders', :t);

-- Arguments are checked, each error naming its argument.
SELECT * FROM aedb_queue.queue_sleep('orders', :t, :tok2, 'nap');
SELECT * FROM aedb_queue.queue_await_event('orders', :t, :tok2, 'x', 'k', timeout => NULL);
SELECT aedb_queue.queue_emit('orders', '');
