-- 0.6.0 without the index of blocked tasks
DROP INDEX aedb_queue.task_blocked_idx
