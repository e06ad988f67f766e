-- Finding tasks in a queue of any size (queue_tasks): every task, live or
-- kept after completion, in task id order, filtered by state, by when it
-- was created or last changed and by its payload, a page at a time in
-- either direction. (Ids are shown from the queue's first task: n = 0.)
SELECT queue, keep_completed FROM aedb_queue.queue_configure('pages', keep_completed => '1 day');
SELECT min(t) AS first FROM aedb_queue.queue_enqueue_batch('pages',
    ARRAY(SELECT jsonb_build_object('customer', CASE WHEN g % 3 = 0 THEN 'globex' ELSE 'acme' END,
                                    'order', g)
          FROM generate_series(0, 11) g)) t \gset
-- Orders 0 and 1 completed (kept), 2 dead, 3 in flight, 12 due in an hour.
SELECT aedb_queue.queue_complete('pages', task_id, fencing_token, result => '{"shipped": true}')
FROM aedb_queue.queue_claim('pages', 'w1', max => 2);
SELECT aedb_queue.queue_fail('pages', task_id, fencing_token, 'out of stock', dead_letter => true)
FROM aedb_queue.queue_claim('pages', 'w1');
SELECT count(*) AS claimed FROM aedb_queue.queue_claim('pages', 'w1', lease => '1 hour');
SELECT task_id - :first AS n
FROM aedb_queue.queue_enqueue('pages', '{"customer": "initech", "order": 12, "rush": true}', delay => '1 hour');

-- The first page: every state, in task id order.
SELECT task_id - :first AS n, state, payload ->> 'customer' AS customer, result
FROM aedb_queue.queue_tasks('pages', "limit" => 5);
-- The next page starts after the last id shown; a short page is the last.
SELECT task_id - :first AS n, state FROM aedb_queue.queue_tasks('pages', after_task_id => :first + 4, "limit" => 5);
SELECT task_id - :first AS n, state FROM aedb_queue.queue_tasks('pages', after_task_id => :first + 9, "limit" => 5);
-- Back: the page before a task is the tasks just before it, still in task
-- id order; the page before the first page is empty.
SELECT task_id - :first AS n, state FROM aedb_queue.queue_tasks('pages', before_task_id => :first + 10, "limit" => 5);
SELECT count(*) AS before_first FROM aedb_queue.queue_tasks('pages', before_task_id => :first);

-- Filters, each paged the same way: acme's ready orders (jsonb @>), those
-- with a "rush" key, kept completed tasks, dead ones.
SELECT task_id - :first AS n, payload ->> 'order' AS "order"
FROM aedb_queue.queue_tasks('pages', state => 'ready', payload_contains => '{"customer": "acme"}', "limit" => 3);
SELECT task_id - :first AS n, payload ->> 'order' AS "order"
FROM aedb_queue.queue_tasks('pages', state => 'ready', payload_contains => '{"customer": "acme"}',
                            after_task_id => :first + 7, "limit" => 3);
SELECT task_id - :first AS n, state FROM aedb_queue.queue_tasks('pages', payload_has_key => 'rush');
SELECT task_id - :first AS n, state, result, updated_at = completed_at AS done_is_last_change
FROM aedb_queue.queue_tasks('pages', state => 'completed');
SELECT task_id - :first AS n, last_error FROM aedb_queue.queue_tasks('pages', state => 'dead');
-- Times: created and last changed in [after, before).
SELECT count(*) AS created_within_the_hour
FROM aedb_queue.queue_tasks('pages', created_after => now() - interval '1 hour', created_before => now() + interval '1 hour');
SELECT count(*) AS created_later FROM aedb_queue.queue_tasks('pages', created_after => now() + interval '1 hour');
SELECT count(*) AS changed_earlier FROM aedb_queue.queue_tasks('pages', updated_before => now() - interval '1 hour');

-- Arguments it refuses, each named.
SELECT * FROM aedb_queue.queue_tasks('pages', after_task_id => :first, before_task_id => :first + 5);
SELECT * FROM aedb_queue.queue_tasks('pages', state => 'finished');
SELECT * FROM aedb_queue.queue_tasks('pages', "limit" => 0);
SELECT * FROM aedb_queue.queue_tasks(NULL);
