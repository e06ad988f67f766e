\timing on
DO $$ BEGIN FOR i IN 1..2000 LOOP PERFORM aedb_queue.queue_enqueue_batch('bq', array_fill('{"pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}'::jsonb, ARRAY[100])); END LOOP; END $$;
