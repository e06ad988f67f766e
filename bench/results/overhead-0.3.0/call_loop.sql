\timing on
DO $$ BEGIN FOR i IN 1..20000 LOOP PERFORM aedb_queue.queue_enqueue('loopq'); END LOOP; END $$;
DO $$ DECLARE t record; BEGIN FOR i IN 1..20000 LOOP SELECT task_id, fencing_token INTO t FROM aedb_queue.queue_claim('loopq', 'w'); PERFORM aedb_queue.queue_complete('loopq', t.task_id, t.fencing_token); END LOOP; END $$;
