-- (b) no CHECK constraints on aedb_queue.task
ALTER TABLE aedb_queue.task DROP CONSTRAINT task_max_attempts_check, DROP CONSTRAINT task_check, DROP CONSTRAINT task_check1
