-- the ready index without the expression column: task_id ascending (enqueue only: the claim statements order by -task_id)
DROP INDEX aedb_queue.task_ready_idx
CREATE INDEX task_ready_idx ON aedb_queue.task (queue, priority DESC, task_id) WHERE state = 'ready'
