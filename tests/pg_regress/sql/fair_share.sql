-- Fair share: a queue set to fair_share serves each priority's ready tasks
-- across fairness keys in turn (by weight) instead of first in, first out,
-- so one tenant's backlog does not hold up another's single task.
SET aedb_queue.claim_rescan_interval = 0;
-- What n claims of one task each hand out, in order.
CREATE FUNCTION pg_temp.claims(q text, n int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    got text[] := '{}';
    one text;
BEGIN
    FOR i IN 1..n LOOP
        SELECT payload->>'n' INTO one FROM aedb_queue.queue_claim(q, 'w');
        got := got || coalesce(one, '-');
    END LOOP;
    RETURN array_to_string(got, ' ');
END
$$;
SELECT fair_share FROM aedb_queue.queue_configure('fs', fair_share => true);
-- A big tenant's 6 tasks first, then two small ones.
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fs',
       ARRAY(SELECT jsonb_build_object('n', 'big-' || i) FROM generate_series(1, 6) i), fairness_key => 'big');
SELECT aedb_queue.queue_enqueue('fs', '{"n": "small-a"}', fairness_key => 'a') IS NOT NULL;
SELECT aedb_queue.queue_enqueue('fs', '{"n": "small-b"}', fairness_key => 'b') IS NOT NULL;
-- Claims take turns: the small tenants' tasks come second and third.
SELECT pg_temp.claims('fs', 4);
SELECT fairness_key, weight, ready FROM aedb_queue.fairness_keys WHERE queue = 'fs' ORDER BY 1;

-- Weights: a key of weight 2 gets two claims to the other's one.
SELECT fair_share FROM aedb_queue.queue_configure('fw', fair_share => true);
SELECT aedb_queue.queue_configure_fairness('fw', 'gold', 2);
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fw',
       ARRAY(SELECT jsonb_build_object('n', 'gold') FROM generate_series(1, 6)), fairness_key => 'gold');
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fw',
       ARRAY(SELECT jsonb_build_object('n', 'plain') FROM generate_series(1, 6)), fairness_key => 'plain');
SELECT pg_temp.claims('fw', 9);

-- Priority still comes first; tasks without a key share one turn.
SELECT aedb_queue.queue_enqueue('fs', '{"n": "urgent"}', priority => 5) IS NOT NULL;
SELECT payload->>'n' AS n FROM aedb_queue.queue_claim('fs', 'w');

-- Turning it on gives the queue's waiting tasks their turns, key by key.
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fl', ARRAY['{"n": "x1"}', '{"n": "x2"}', '{"n": "x3"}']::jsonb[], fairness_key => 'x');
SELECT count(*) FROM aedb_queue.queue_enqueue_batch('fl', ARRAY['{"n": "y1"}']::jsonb[], fairness_key => 'y');
SELECT fair_share FROM aedb_queue.queue_configure('fl', fair_share => true);
SELECT string_agg(payload->>'n', ', ' ORDER BY fair_vt, task_id) FROM aedb_queue.task WHERE queue = 'fl';

-- Bad weights and keys are refused, naming the argument.
SELECT aedb_queue.queue_configure_fairness('fw', 'gold', 0);
SELECT aedb_queue.queue_configure_fairness('fw', '', 2);
SELECT aedb_queue.queue_enqueue('fs', '{}', fairness_key => '');
