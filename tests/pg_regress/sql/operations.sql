-- Operating queues from psql: settings, the dashboard views, pause and
-- resume, dead letters, purges, kept completed tasks, per-queue grants.

-- Per-queue defaults; a task's own options still win.
SELECT * FROM aedb_queue.queue_configure('reports', max_attempts => 2,
       backoff_base => '10 seconds', default_lease => '5 minutes', keep_completed => '7 days');
SELECT task_id AS r1 FROM aedb_queue.queue_enqueue('reports', '{"report": 1}') \gset
SELECT task_id AS r2 FROM aedb_queue.queue_enqueue('reports', '{"report": 2}', max_attempts => 1) \gset
SELECT task_id AS r3 FROM aedb_queue.queue_enqueue('reports', '{"report": 3, "note": "a long payload that the tasks view cuts short"}') \gset
SELECT task_id AS r4 FROM aedb_queue.queue_enqueue('reports', '{"report": 4}', delay => '1 hour') \gset
SELECT task_id = :r1 AS first, max_attempts, backoff_base FROM aedb_queue.queue_list('reports', 'ready');

-- A claim without a lease gets the queue's default lease.
SELECT task_id = :r1 AS is_r1, fencing_token AS tok FROM aedb_queue.queue_claim('reports', 'worker-1') \gset
SELECT lease_deadline - updated_at AS lease FROM aedb_queue.queue_get('reports', :r1) \gset
\echo :is_r1 :lease
SELECT aedb_queue.queue_complete('reports', :r1, :tok, result => '{"pages": 12}');
-- The queue keeps completed tasks: queue_get still shows it, with its result.
SELECT state, owner_id, attempts, result FROM aedb_queue.queue_get('reports', :r1);

-- A failure on the last attempt dead-letters the task.
SELECT fencing_token AS tok FROM aedb_queue.queue_claim('reports', 'worker-1') \gset
SELECT aedb_queue.queue_fail('reports', :r2, :tok, 'printer on fire');

-- The dashboard (ages and due times vary, so they are left out here).
SELECT queue, scheduled, ready, in_flight, dead, completed_kept, expired_leases, paused
FROM aedb_queue.queue_stats WHERE queue = 'reports';
SELECT task_id - :r1 AS n, state, priority, attempts, owner, payload, last_error
FROM aedb_queue.tasks WHERE queue = 'reports' ORDER BY task_id;

-- Pause: enqueues still land, claims get nothing; resume hands out again.
SELECT aedb_queue.queue_pause('reports');
SELECT count(*) AS claimed FROM aedb_queue.queue_claim('reports', 'worker-1');
SELECT aedb_queue.queue_resume('reports');
SELECT task_id = :r3 AS claimed_r3 FROM aedb_queue.queue_claim('reports', 'worker-1');

-- Dead letters back to ready with fresh attempts; purges by state.
SELECT aedb_queue.queue_retry_dead('reports');
SELECT state, attempts, last_error FROM aedb_queue.queue_get('reports', :r2);
SELECT aedb_queue.queue_purge('reports', 'in_flight');
SELECT aedb_queue.queue_purge('reports', 'in_flight', force => true);
SELECT aedb_queue.queue_purge('reports', 'completed');

-- Per-queue grants: a worker confined to tenant_a's queues.
CREATE ROLE tenant_a_worker NOLOGIN;
GRANT aedb_queue_worker TO tenant_a_worker;
SELECT aedb_queue.queue_grant('tenant_a.*', 'tenant_a_worker', 'worker');
SELECT task_id AS b1 FROM aedb_queue.queue_enqueue('tenant_b.jobs', '{}') \gset
SELECT task_id AS a1 FROM aedb_queue.queue_enqueue('tenant_a.jobs', '{}') \gset
SET ROLE tenant_a_worker;
SELECT task_id = :a1 AS own_task FROM aedb_queue.queue_claim('tenant_a.jobs', 'w');
SELECT * FROM aedb_queue.queue_claim('tenant_b.jobs', 'w');
SELECT * FROM aedb_queue.queue_enqueue('tenant_a.jobs');
RESET ROLE;
SELECT state FROM aedb_queue.queue_get('tenant_b.jobs', :b1);
SELECT aedb_queue.queue_revoke('tenant_a.*', 'tenant_a_worker', 'worker');
DROP ROLE tenant_a_worker;
