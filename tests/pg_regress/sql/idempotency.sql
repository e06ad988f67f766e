-- Idempotency keys: one task per key and queue, even after the task finished.
SELECT task_id AS first, deduplicated FROM aedb_queue.queue_enqueue('orders', '{"order": 7}', idempotency_key => 'order-7') \gset
SELECT :'deduplicated' AS deduplicated;
-- The same key again: the first task's id, deduplicated.
SELECT task_id = :first AS same_task, deduplicated FROM aedb_queue.queue_enqueue('orders', '{"order": 7, "again": true}', idempotency_key => 'order-7');
-- The same key in another queue is a different task.
SELECT deduplicated FROM aedb_queue.queue_enqueue('invoices', '{"order": 7}', idempotency_key => 'order-7');

SELECT task_id AS t, fencing_token AS tok FROM aedb_queue.queue_claim('orders', 'w') \gset
SELECT aedb_queue.queue_complete('orders', :t, :tok);
SELECT task_id = :t AS same_task, deduplicated FROM aedb_queue.queue_enqueue('orders', '{"order": 7}', idempotency_key => 'order-7');
SELECT count(*) AS tasks_left FROM aedb_queue.queue_list('orders');
