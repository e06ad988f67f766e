-- (c) the two state constraints folded into one; max_attempts >= 1 kept
ALTER TABLE aedb_queue.task DROP CONSTRAINT task_check, DROP CONSTRAINT task_check1
ALTER TABLE aedb_queue.task ADD CONSTRAINT task_lease_check CHECK (CASE WHEN state = 'in_flight' THEN owner_id IS NOT NULL AND lease_deadline IS NOT NULL ELSE lease_deadline IS NULL END)
