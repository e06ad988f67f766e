-- scheduled and dead tasks in one partial index (4 indexes + pkey -> 3 + pkey)
DROP INDEX aedb_queue.task_scheduled_idx
DROP INDEX aedb_queue.task_dead_idx
CREATE INDEX task_scheduled_dead_idx ON aedb_queue.task (queue, state, not_before) WHERE state IN ('scheduled', 'dead')
